"""What the synthetic workload (:mod:`rmqinspect.synth.workload`) generates: its size, mix,
seed, crash and the run's optional parts, checked before anything is written."""

from __future__ import annotations

from dataclasses import dataclass

from rmqinspect.format.compression import COMPRESS_OVER, Codec
from rmqinspect.synth.writer import DEFAULT_CLOCK_START_MS

DEFAULT_CRASH_FLUSH_LAG_MS = 4500


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """What to generate. ``special=False`` writes only plain messages to ``TopicA``...;
    ``crash`` stops dispatch before the last burst and leaves the store as a killed broker
    does (``abort``, a lagging checkpoint, the pre-allocated next commitlog file). ``fate``
    runs consumer groups, the schedule service and the transaction check over the messages
    (:mod:`rmqinspect.synth.fate`); a crash then comes while their copies are in flight."""

    messages: int = 2000
    body_size: int = 512
    topics: int = 3
    queues: int = 4
    seed: int = 42
    crash: bool = False
    special: bool = True
    start_ms: int = DEFAULT_CLOCK_START_MS
    burst: int = 200
    burst_pause_ms: int = 1500
    flush_lag_ms: int | None = None  # None: 4.5 s when crashed, 0 after a clean shutdown
    # The producer's body compression: bodies of at least ``compress_over`` bytes
    # (compressMsgBodyOverHowmuch) are stored compressed with ``compress_type`` (zlib only on
    # 4.x, whose producers know no other codec).
    compress_type: Codec = Codec.ZLIB
    compress_over: int = COMPRESS_OVER
    fate: bool = False
    pop: bool = False  # with fate on 5.x: groupPop's checkpoints and acks (synth.pop)
    timers: int = 0  # timer messages (5.x timer store, rmqinspect.synth.timer)
    # BatchConsumeQueue (5.x): inner-batch records of a queue.type=BatchCQ topic written first
    # (synth/batchcq.py)
    batch_records: int = 0

    def __post_init__(self) -> None:
        if self.messages < 0 or self.body_size < 0 or self.compress_over < 0:
            raise ValueError("messages, body size and compress-over must not be negative")
        if not 1 <= self.topics <= 702 or not 1 <= self.queues <= 1024:
            raise ValueError("topics must be 1..702 and queues 1..1024")
        if self.burst < 1:
            raise ValueError("burst must be at least 1")
        if self.pop and not self.fate:
            raise ValueError("pop needs fate: the checkpoints are groupPop's")
        if self.batch_records < 0:
            raise ValueError("batch records must not be negative")
        if self.crash and self.fate and self.timers:
            # fate's crash leaves its copies in flight undispatched at the end of the log, and
            # the timer messages come after them: a reput that stopped dispatches none of them.
            raise ValueError(
                "--crash with --fate cannot add --timers: pick fate's or the timer's crash"
            )

    @property
    def checkpoint_lag_ms(self) -> int:
        if self.flush_lag_ms is not None:
            return self.flush_lag_ms
        return DEFAULT_CRASH_FLUSH_LAG_MS if self.crash else 0


def topic_name(index: int) -> str:
    """TopicA .. TopicZ, TopicAA .. TopicZZ (spreadsheet column letters)."""
    letters = ""
    n = index + 1
    while n:
        n, rem = divmod(n - 1, 26)
        letters = chr(ord("A") + rem) + letters
    return f"Topic{letters}"
