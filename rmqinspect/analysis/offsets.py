"""``offsets``: committed consumer (and delay) offsets against the queues on disk.

Each row pairs the offset the broker would load (``consumerOffset.json``, else its ``.bak``)
with the queue's min/max offsets as the broker computes them, so lag and offsets outside
``[min, max]`` show at once. Where the ``.bak`` holds a different value it is shown beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rmqinspect.analysis.queues import QueueBounds, queue_bounds
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.format.config import (
    ConsumerOffsetTable,
    DelayOffsetTable,
    delay_level_to_queue_id,
    split_topic_group,
)
from rmqinspect.store.configfiles import ConfigFileResult, load_config_file
from rmqinspect.store.model import QueueId, Store


class OffsetStatus(StrEnum):
    OK = "ok"
    BELOW_MIN = "below_min"  # the messages it points to were deleted; the broker corrects it
    ABOVE_MAX = "above_max"  # ahead of the queue: messages were lost or the offset is bogus
    NO_QUEUE = "no_queue"  # no consume queue on disk for this topic/queue


@dataclass(frozen=True, slots=True)
class OffsetRow:
    table: str  # "consumer", "lmq" or "delay"
    group: str | None  # None for delay offsets
    topic: str
    queue_id: int
    offset: int
    bak_offset: int | None  # the .bak value when it differs (None: same or no .bak)
    bak_note: str | None  # "absent from .bak", "only in .bak" ...
    min_offset: int | None
    max_offset: int | None
    lag: int | None  # max - offset (negative when ahead)
    status: OffsetStatus
    delay_level: int | None = None


@dataclass(frozen=True, slots=True)
class FileUse:
    """Which copy of a config file the rows come from, as ``ConfigManager.load`` decides."""

    name: str
    source: str  # main, bak, none
    main_state: str
    bak_state: str
    bak_differs: bool
    broker_starts: bool
    errors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OffsetsReport:
    files: tuple[FileUse, ...]
    rows: tuple[OffsetRow, ...]


def offsets_report(
    store: Store, group: str | None = None, topic: str | None = None
) -> OffsetsReport:
    cache: dict[QueueId, QueueBounds] = {}
    rows: list[OffsetRow] = []
    files = []
    for name in ("consumerOffset.json", "lmqConsumerOffset.json"):
        r = load_config_file(store.config_dir, name)
        if r.main_state == "missing" and r.bak_state == "missing":
            continue
        files.append(_file_use(r))
        rows.extend(_consumer_rows(store, r, group, topic, cache))
    delay = load_config_file(store.config_dir, "delayOffset.json")
    if not (delay.main_state == "missing" and delay.bak_state == "missing"):
        files.append(_file_use(delay))
        if group is None and topic in (None, SCHEDULE_TOPIC):
            rows.extend(_delay_rows(store, delay, cache))
    return OffsetsReport(tuple(files), tuple(rows))


def _file_use(r: ConfigFileResult) -> FileUse:
    errors = tuple(e for e in (r.main_error, r.bak_error) if e)
    return FileUse(
        r.name, r.source, r.main_state, r.bak_state, r.bak_differs, r.broker_starts, errors
    )


def _bounds(store: Store, qid: QueueId, cache: dict[QueueId, QueueBounds]) -> QueueBounds | None:
    if qid not in store.queue_dirs:
        return None
    if qid not in cache:
        cache[qid] = queue_bounds(store, qid)
    return cache[qid]


def _row(
    store: Store,
    cache: dict[QueueId, QueueBounds],
    table: str,
    group: str | None,
    topic: str,
    queue_id: int,
    offset: int,
    bak: int | None,
    bak_note: str | None,
    delay_level: int | None = None,
) -> OffsetRow:
    b = _bounds(store, QueueId(topic, queue_id), cache)
    lo: int | None
    hi: int | None
    lag: int | None
    if b is None and offset == 0:
        # A queue without files is empty to the broker (min = max = 0): nothing is owed.
        status, lo, hi, lag = OffsetStatus.OK, 0, 0, 0
    elif b is None:
        status, lo, hi, lag = OffsetStatus.NO_QUEUE, None, None, None
    else:
        lo, hi, lag = b.min_offset, b.max_offset, b.max_offset - offset
        if offset < b.min_offset:
            status = OffsetStatus.BELOW_MIN
        elif offset > b.max_offset:
            status = OffsetStatus.ABOVE_MAX
        else:
            status = OffsetStatus.OK
    return OffsetRow(
        table, group, topic, queue_id, offset, bak, bak_note, lo, hi, lag, status, delay_level
    )


def _consumer_rows(
    store: Store,
    r: ConfigFileResult,
    group: str | None,
    topic: str | None,
    cache: dict[QueueId, QueueBounds],
) -> list[OffsetRow]:
    value = r.value if isinstance(r.value, ConsumerOffsetTable) else None
    other_value = r.bak_value if r.source == "main" else None
    other = other_value if isinstance(other_value, ConsumerOffsetTable) else None
    if value is None:
        return []
    rows = []
    for key, queues in value.offset_table.items():
        pair = split_topic_group(key)
        if pair is None:
            continue
        t, g = pair
        if (group is not None and g != group) or (topic is not None and t != topic):
            continue
        bak_queues = None if other is None else other.offset_table.get(key)
        for qid, offset in sorted(queues.items()):
            bak, note = _compare(offset, None if bak_queues is None else bak_queues.get(qid), other)
            rows.append(_row(store, cache, "consumer", g, t, qid, offset, bak, note))
        if bak_queues is not None:
            for qid in sorted(set(bak_queues) - set(queues)):
                note = f"only in .bak (offset {bak_queues[qid]})"
                rows.append(_row(store, cache, "consumer", g, t, qid, bak_queues[qid], None, note))
    for key, offset in (value.lmq_offset_table or {}).items():
        pair = split_topic_group(key)
        if pair is None:
            continue
        t, g = pair
        if (group is not None and g != group) or (topic is not None and t != topic):
            continue
        rows.append(_row(store, cache, "lmq", g, t, 0, offset, None, None))
    return rows


def _compare(
    offset: int, bak: int | None, other: ConsumerOffsetTable | DelayOffsetTable | None
) -> tuple[int | None, str | None]:
    if other is None:
        return None, None
    if bak is None:
        return None, "absent from .bak"
    if bak != offset:
        return bak, f".bak says {bak}"
    return None, None


def _delay_rows(
    store: Store, r: ConfigFileResult, cache: dict[QueueId, QueueBounds]
) -> list[OffsetRow]:
    value = r.value if isinstance(r.value, DelayOffsetTable) else None
    other_value = r.bak_value if r.source == "main" else None
    other = other_value if isinstance(other_value, DelayOffsetTable) else None
    if value is None:
        return []
    rows = []
    for level, offset in sorted(value.offset_table.items()):
        if level < 1:
            continue  # no schedule queue; the parser lists it among the file's problems
        bak, note = _compare(
            offset, None if other is None else other.offset_table.get(level), other
        )
        qid = delay_level_to_queue_id(level)
        rows.append(
            _row(store, cache, "delay", None, SCHEDULE_TOPIC, qid, offset, bak, note, level)
        )
    return rows
