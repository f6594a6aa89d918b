"""``offsets``: committed consumer (and delay) offsets against the queues.

Each row pairs the offset the broker would load (``consumerOffset.json``, else its ``.bak``)
with the queue's min/max offsets twice: as the broker computes them from the queues on disk,
and as its restart rebuilds the queues (the recovery emulation without its loss search). After a
crash the queues on disk lag the commitlog, so only the second says what a consumer will see.
Lag and offsets outside ``[min, max]`` show at once; a different ``.bak`` value is shown beside.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from rmqinspect.analysis import Progress
from rmqinspect.analysis.queues import QueueBounds, queue_bounds
from rmqinspect.analysis.recovery import RecoverOptions, RecoveryReport, run_recovery
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.format.config import (
    ConsumerOffsetTable,
    DelayOffsetTable,
    delay_level_to_queue_id,
    split_topic_group,
)
from rmqinspect.store.configfiles import ConfigFileResult, load_config_file
from rmqinspect.store.layout import QueueId, StorePart
from rmqinspect.store.model import Store


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
    min_offset: int | None  # the queue on disk
    max_offset: int | None
    lag: int | None  # max - offset (negative when ahead)
    status: OffsetStatus
    delay_level: int | None = None
    # The same against the queue as the restart rebuilds it (None: the broker would not start).
    min_offset_after_start: int | None = None
    max_offset_after_dispatch: int | None = None
    lag_after_restart: int | None = None
    status_after_restart: OffsetStatus | None = None

    def after_restart(
        self, lo: int | None, hi: int | None, lag: int | None, status: OffsetStatus
    ) -> OffsetRow:
        """This row judged against the restart's queue: built directly, at a seventh of
        ``dataclasses.replace``'s cost (800,000 rows)."""
        return OffsetRow(
            self.table,
            self.group,
            self.topic,
            self.queue_id,
            self.offset,
            self.bak_offset,
            self.bak_note,
            self.min_offset,
            self.max_offset,
            self.lag,
            self.status,
            self.delay_level,
            lo,
            hi,
            lag,
            status,
        )


BrokerVersion = tuple[int, int, int]

_VERSION = re.compile(
    r"(?:rocketmq-all-)?([0-9]{1,3})\.([0-9]{1,3})(?:\.([0-9]{1,3}))?(?:-SNAPSHOT)?"
)
RESET_TO_MAX_SINCE: BrokerVersion = (4, 9, 4)
"""apache/rocketmq#4215 (PR #4219, merged 2022-04-30, after 4.9.3): before it an offset past a
queue whose min is 0 was reset to 0, a full replay; from 4.9.4 (and in every 5.x) to the max."""
MOVED_EVENT_BEFORE: BrokerVersion = (5, 0, 0)
"""4.x ``PullMessageProcessor`` stores each reset as an ``OFFSET_MOVED_EVENT`` record; 5.x only
logs it."""


def parse_broker_version(text: str) -> BrokerVersion:
    """``4.9.3``, ``5.3`` (patch 0), ``rocketmq-all-4.9.8``; ValueError for anything else."""
    m = _VERSION.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a RocketMQ version: {text!r} (expected e.g. 4.9.3 or 5.3.3)")
    return int(m[1]), int(m[2]), int(m[3] or 0)


class PullStatus(StrEnum):
    """``GetMessageStatus`` of the first pull at a committed offset (the cases that decide it)."""

    FOUND = "FOUND"  # min <= offset < max: consumption goes on from the offset
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # offset == max: caught up, nothing new
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # below min: the messages were deleted
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # past max
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # max == 0: an empty (or missing) queue


@dataclass(frozen=True, slots=True)
class NextPull:
    """What the broker answers the first pull at a committed offset, and what it costs."""

    status: PullStatus
    next_offset: int  # nextBeginOffset: where the consumer goes on
    moved: bool  # PULL_OFFSET_MOVED: the client adopts next_offset and commits it
    replayed: int  # messages below the committed offset delivered again
    skipped: int  # messages from the committed offset on that are never delivered (deleted)


def next_pull(offset: int, min_offset: int, max_offset: int, version: BrokerVersion) -> NextPull:
    """The rule of ``DefaultMessageStore.getMessage`` (4.9.8 and 5.3.3 alike but for the
    overflow reset; ``nextOffsetCorrection`` on a master, or a slave with offsetCheckInSlave)
    and ``PullMessageProcessor.processRequest`` (which statuses answer PULL_OFFSET_MOVED):

    - max == 0: NO_MESSAGE_IN_QUEUE, next 0; moved when the offset is not 0 (a missing queue
      is created empty by ``findConsumeQueue``, so it answers the same);
    - offset < min: OFFSET_TOO_SMALL, next min: the ``min - offset`` messages between were
      deleted before the group read them;
    - offset == max: OFFSET_OVERFLOW_ONE, PULL_NOT_FOUND: nothing new, the offset stays;
    - offset > max: OFFSET_OVERFLOW_BADLY, next max; before 4.9.4 next 0 when min is 0, which
      delivers the whole queue again (#4215).
    """
    if max_offset == 0:
        return NextPull(PullStatus.NO_MESSAGE_IN_QUEUE, 0, offset != 0, 0, 0)
    if offset < min_offset:
        return NextPull(PullStatus.OFFSET_TOO_SMALL, min_offset, True, 0, min_offset - offset)
    if offset == max_offset:
        return NextPull(PullStatus.OFFSET_OVERFLOW_ONE, offset, False, 0, 0)
    if offset > max_offset:
        if version < RESET_TO_MAX_SINCE and min_offset == 0:
            return NextPull(PullStatus.OFFSET_OVERFLOW_BADLY, 0, True, max_offset, 0)
        return NextPull(PullStatus.OFFSET_OVERFLOW_BADLY, max_offset, True, 0, 0)
    return NextPull(PullStatus.FOUND, offset, False, 0, 0)


class ConsumeFromWhere(StrEnum):
    """The push consumer's setting that decides where a queue without a committed offset is
    read from (``ConsumeFromWhere``); ``unknown``: not known offline (the client holds it)."""

    FIRST = "first"  # CONSUME_FROM_FIRST_OFFSET
    LAST = "last"  # CONSUME_FROM_LAST_OFFSET, the client's default
    TIMESTAMP = "timestamp"  # CONSUME_FROM_TIMESTAMP
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Start:
    """Where a group's first pull on a queue without a committed offset asks from."""

    offset: int | None  # None: not known offline
    basis: str  # why, in words


def start_without_offset(
    retry: bool, where: ConsumeFromWhere, min_offset: int, max_offset: int
) -> Start:
    """The offset a push consumer starts a queue at when the broker has none for it.

    The broker first (``ConsumerManageProcessor.queryConsumerOffset``, 4.9.8; 5.3.3 the same
    unless the client asks not to be given 0): no offset, the queue's min is 0 and its first
    message is not "in disk" (``checkInDiskByConsumeOffset``: an empty queue, or the message is
    within ``accessMessageInMemoryMaxRatio``, 40% of the broker's RAM, of the commitlog's end)
    -> it answers 0. Otherwise QUERY_NOT_FOUND and ``RebalancePushImpl.computePullFromWhere``
    decides: FIRST -> 0; LAST -> 0 on a ``%RETRY%`` topic, else the queue's max; TIMESTAMP ->
    the max on a ``%RETRY%`` topic, else ``searchOffset`` of the consumer's timestamp. The
    host's RAM is not in the store: a min of 0 is taken as answered 0 (any queue whose first
    message lies within 40% of the RAM behind the end). ``getMessage`` then moves a start
    below the min up to it (:func:`next_pull`).
    """
    if where is ConsumeFromWhere.UNKNOWN:
        if retry:
            return Start(0, "no committed offset: a %RETRY% queue starts at 0 (LAST and FIRST)")
        return Start(
            None,
            "no committed offset: the broker answers 0 while the queue's min is 0 and its "
            "first message is in memory (queryConsumerOffset), else the client's "
            f"ConsumeFromWhere decides (FIRST: from {min_offset}, {max_offset - min_offset} "
            f"message(s); LAST: from {max_offset}); pass --consume-from-where",
        )
    if min_offset == 0:
        return Start(
            0,
            "no committed offset: the queue's min is 0, so the broker answers 0 "
            "(queryConsumerOffset, while its first message is within 40% of the broker's RAM "
            "of the commitlog's end)",
        )
    cfw = f"ConsumeFromWhere {where.value}"
    if where is ConsumeFromWhere.FIRST or (where is ConsumeFromWhere.LAST and retry):
        what = "a %RETRY% queue starts at 0" if where is ConsumeFromWhere.LAST else "from 0"
        return Start(0, f"no committed offset, min {min_offset} > 0: {cfw}: {what}")
    if where is ConsumeFromWhere.LAST or retry:
        return Start(max_offset, f"no committed offset, min {min_offset} > 0: {cfw}: the max")
    return Start(
        None,
        f"no committed offset, min {min_offset} > 0: {cfw}: the offset of the consumer's "
        "consumeTimestamp (searchOffset), not known offline",
    )


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
class RestartView:
    """The restart the ``*_after_*`` columns come from."""

    broker_starts: bool
    recovery_path: str | None
    refusal: str | None  # why the broker refuses to start, when it does


@dataclass(frozen=True, slots=True)
class OffsetsReport:
    files: tuple[FileUse, ...]
    rows: tuple[OffsetRow, ...]
    restart: RestartView | None = None  # None: no row to judge, no restart emulated
    groups: tuple[str, ...] = ()  # every group the loaded offset tables name, unfiltered
    # (min, max) of every queue as the restart rebuilds it; empty unless the broker starts.
    queues_after_restart: dict[QueueId, tuple[int, int]] = field(default_factory=dict)


def offsets_report(
    store: Store,
    group: str | None = None,
    topic: str | None = None,
    progress: Progress | None = None,
    *,
    restart: bool | None = None,
    recovery: RecoveryReport | None = None,
    bounds: Callable[[QueueId], QueueBounds] | None = None,
) -> OffsetsReport:
    """``restart``: emulate the restart always (True), never (False), or when there is a row
    to judge (None). ``recovery``: a finished emulation of this store's restart to judge
    against instead of running one (``report`` runs it once for ``recover`` and ``groups``).
    ``bounds``: a queue's :func:`queue_bounds`, from a caller that holds its queues loaded
    (``verify``), so that none is loaded twice."""
    cache = _DiskBounds(store, bounds or functools.partial(queue_bounds, store))
    rows: list[OffsetRow] = []
    files = []
    groups: set[str] = set()
    for name in ("consumerOffset.json", "lmqConsumerOffset.json"):
        r = load_config_file(store.config_dir, name)
        if r.main_state == "missing" and r.bak_state == "missing":
            continue
        files.append(file_use(r))
        rows.extend(_consumer_rows(store, r, group, topic, cache, groups))
    delay = load_config_file(store.config_dir, "delayOffset.json")
    if not (delay.main_state == "missing" and delay.bak_state == "missing"):
        files.append(file_use(delay))
        if group is None and topic in (None, SCHEDULE_TOPIC):
            rows.extend(_delay_rows(store, delay, cache))
    view = None
    after: dict[QueueId, tuple[int, int]] = {}
    # The emulation costs a recovery scan: not for nothing to judge; nor run where a layout
    # takes over the restart (RocksDB consume queues: store/layout.py).
    emulated = store.refusal("offsets", StorePart.RESTART) is None
    if emulated and (restart or (restart is None and rows)):
        view, after, rows = _after_restart(store, rows, progress, recovery)
    return OffsetsReport(tuple(files), tuple(rows), view, tuple(sorted(groups)), after)


def _after_restart(
    store: Store,
    rows: list[OffsetRow],
    progress: Progress | None,
    recovery: RecoveryReport | None,
) -> tuple[RestartView, dict[QueueId, tuple[int, int]], list[OffsetRow]]:
    """Each row judged again against the queues the restart rebuilds. Only the queue bounds are
    wanted, so an emulation run here runs without its loss search."""
    report = recovery
    if report is None:
        options = RecoverOptions(lost_limit=0, find_lost=False)
        report = run_recovery(store, options, progress).report
    if not report.broker_starts:
        return RestartView(False, report.recovery_path, report.verdict_reason), {}, rows
    view = RestartView(True, report.recovery_path, None)
    after = {
        QueueId(q.topic, q.queue_id): (q.min_offset_after_start, q.max_offset_after_dispatch)
        for q in report.consume_queues
    }
    out = []
    for row in rows:
        status, lo, hi, lag = judge(after.get(QueueId(row.topic, row.queue_id)), row.offset)
        out.append(row.after_restart(lo, hi, lag, status))
    return view, after, out


def file_use(r: ConfigFileResult) -> FileUse:
    errors = tuple(e for e in (r.main_error, r.bak_error) if e)
    return FileUse(
        r.name, r.source, r.main_state, r.bak_state, r.bak_differs, r.broker_starts, errors
    )


class _DiskBounds:
    """Each queue's bounds on disk (None: no queue directory), computed once."""

    def __init__(self, store: Store, bounds: Callable[[QueueId], QueueBounds]) -> None:
        self._store, self._bounds = store, bounds
        self._found: dict[QueueId, QueueBounds] = {}

    def __call__(self, qid: QueueId) -> QueueBounds | None:
        if qid not in self._store.queue_dirs:
            return None
        found = self._found.get(qid)
        if found is None:
            found = self._found[qid] = self._bounds(qid)
        return found


def _row(
    store: Store,
    cache: _DiskBounds,
    table: str,
    group: str | None,
    topic: str,
    queue_id: int,
    offset: int,
    bak: int | None,
    bak_note: str | None,
    delay_level: int | None = None,
) -> OffsetRow:
    b = cache(QueueId(topic, queue_id))
    status, lo, hi, lag = judge(None if b is None else (b.min_offset, b.max_offset), offset)
    return OffsetRow(
        table, group, topic, queue_id, offset, bak, bak_note, lo, hi, lag, status, delay_level
    )


def judge(
    bounds: tuple[int, int] | None, offset: int
) -> tuple[OffsetStatus, int | None, int | None, int | None]:
    """(status, min, max, lag) of a committed offset against a queue's ``(min, max)``."""
    if bounds is None and offset == 0:
        # A queue without files is empty to the broker (min = max = 0): nothing is owed.
        return OffsetStatus.OK, 0, 0, 0
    if bounds is None:
        return OffsetStatus.NO_QUEUE, None, None, None
    lo, hi = bounds
    if offset < lo:
        status = OffsetStatus.BELOW_MIN
    elif offset > hi:
        status = OffsetStatus.ABOVE_MAX
    else:
        status = OffsetStatus.OK
    return status, lo, hi, hi - offset


def _consumer_rows(
    store: Store,
    r: ConfigFileResult,
    group: str | None,
    topic: str | None,
    cache: _DiskBounds,
    groups: set[str],
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
        groups.add(g)
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
        groups.add(g)
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


def _delay_rows(store: Store, r: ConfigFileResult, cache: _DiskBounds) -> list[OffsetRow]:
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
