"""``delays``: each delay level's progress through ``SCHEDULE_TOPIC_XXXX`` as the broker resumes it.

The rules, from ``ScheduleMessageService`` (store/.../schedule/ in 4.9.8, broker/.../schedule/ in
5.3.3; the same in both):

- level L lives in schedule queue L - 1 (``delayLevel2QueueId``); a unit's tagsCode is its
  deliver time, the store time plus the level's delay (``computeDeliverTimestamp``), the delays
  coming from ``messageDelayLevel`` (``parseDelayLevel``: :attr:`Store.delay_table`);
- ``delayOffset.json`` holds per level the next queue offset to deliver: the units from it to the
  queue's max are pending (``DeliverDelayedMessageTimerTask.executeOnTimeup`` walks them in order
  and stops at the first one not yet due, so the unit at the offset is the next due);
- ``load`` -> ``correctDelayOffset`` (from 4.9.2) clamps an offset below the queue's min up to
  it and one above its max down to it; a level without an entry starts at 0 (``start``), which
  ``executeOnTimeup`` moves up to the min when no unit is there. Before 4.9.2 an offset past the
  max stays put: the level delivers nothing until the queue grows past it (#1472, #4226);
- levels past the last of ``messageDelayLevel`` get no timer (``start`` schedules one per
  ``delayLevelTable`` entry): their messages are never delivered;
- the table is persisted every ``flushDelayOffsetInterval`` (10 s, ``start``'s fixed-rate task)
  and on a clean ``shutdown``: after a crash up to 10 s of deliveries are made again (all of
  them when the file was never persisted: every level starts at 0). Which pending units were
  delivered already is on disk: ``messageTimeup`` stores the delivery as a new record in the
  unit's ``REAL_TOPIC`` with its UNIQ_KEY and reconsume times; a pending unit with such a
  record after it (and kept by the restart) is delivered a second time.

"Overdue" needs a clock: by default the store's newest store time (the broker's clock when it
stopped writing), else the caller's. A unit due more than one flush interval before it and not
delivered is overdue; one due within that interval may have been delivered without the offset
being persisted yet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis import Progress
from rmqinspect.analysis.delivered import BY_SCHEDULE, Proven, delivered_units
from rmqinspect.analysis.inventory import commitlog_summary
from rmqinspect.analysis.offsets import FileUse, file_use
from rmqinspect.analysis.queues import all_queue_bounds, iter_unit_chunks, queue_bounds
from rmqinspect.analysis.recovery import RecoverOptions, run_recovery
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.format.config import (
    DelayOffsetTable,
    delay_level_to_queue_id,
    queue_id_to_delay_level,
)
from rmqinspect.store.configfiles import load_config_file
from rmqinspect.store.layout import QueueId, StorePart
from rmqinspect.store.model import Store

FLUSH_DELAY_OFFSET_INTERVAL_MS = 10_000
"""``MessageStoreConfig.flushDelayOffsetInterval``'s default: how stale ``delayOffset.json`` is."""


@dataclass(frozen=True, slots=True)
class DelayLevel:
    level: int
    queue_id: int  # in SCHEDULE_TOPIC_XXXX
    delay_ms: int | None  # None: past the last level of messageDelayLevel (never delivered)
    offset: int | None  # delayOffset.json as the broker loads it; None: no entry
    min_offset: int  # the queue on disk (0, 0 without one: the broker creates it empty)
    max_offset: int
    # The queue when correctDelayOffset runs: after the restart's recovery, before the reput
    # dispatches the rest (None: the broker does not start; the bounds on disk are used).
    min_offset_at_load: int | None
    max_offset_at_load: int | None
    max_offset_after_dispatch: int | None
    offset_at_load: int  # where delivery resumes: the offset clamped into [min, max] at load
    out_of_range: str | None  # "below_min", "above_max" (against the queue at load) or None
    pending: int  # from offset_at_load to the queue's end after dispatch: not delivered
    next_due_timestamp: int | None  # deliver time (tagsCode) of the unit at offset_at_load
    last_due_timestamp: int | None  # deliver time of the newest pending unit on disk
    oldest_store_timestamp: int | None  # store time of the unit at offset_at_load (due - delay)
    overdue: int  # pending units due more than one flush interval before the reference time
    recently_due: int  # pending units due within the flush interval before the reference time
    notes: tuple[str, ...] = ()
    # Pending units whose delivery copy is already stored (and kept by the restart): the
    # schedule service delivers them again.
    redelivered: int = 0

    @property
    def flagged(self) -> bool:
        """What ``delays`` exits 1 for: the #1472/#4226 signatures and undeliverable levels.
        Deliveries the restart repeats are reported, not gated on: like ``recently_due``, they
        are what any crash of a broker with delayed messages in flight does."""
        return (
            self.overdue > 0
            or self.out_of_range is not None
            or (self.delay_ms is None and self.pending > 0)
        )


@dataclass(frozen=True, slots=True)
class LoadView:
    """The restart the ``*_at_load`` bounds come from."""

    broker_starts: bool
    recovery_path: str | None
    refusal: str | None  # why the broker refuses to start, when it does


@dataclass(frozen=True, slots=True)
class DelaysReport:
    file: FileUse | None  # None: neither delayOffset.json nor its .bak exists
    reference_timestamp: int | None  # None: no record to take the broker's clock from
    reference_basis: str  # "--now", "the store's newest store time" or why there is none
    restart: LoadView | None  # None: no level, no restart emulated
    levels: tuple[DelayLevel, ...]
    problems: tuple[str, ...]  # the file's oddities the broker accepts (a level below 1 ...)
    redelivered: int = 0  # over all levels

    @property
    def flagged(self) -> bool:
        return any(level.flagged for level in self.levels) or (
            self.file is not None and bool(self.file.errors)
        )


_Bounds = tuple[int, int, int]  # min at load, max at load, max after dispatch


def delays_report(
    store: Store, now: int | None = None, progress: Progress | None = None
) -> DelaysReport:
    r = load_config_file(store.config_dir, "delayOffset.json")
    absent = r.main_state == "missing" and r.bak_state == "missing"
    table = r.value if isinstance(r.value, DelayOffsetTable) else None
    offsets = dict(table.offset_table) if table is not None else {}
    problems = list(table.problems) if table is not None else []
    delays = dict(store.delay_table)
    on_disk = {
        queue_id_to_delay_level(q.queue_id) for q in store.queue_dirs if q.topic == SCHEDULE_TOPIC
    }
    # A level is in use when its queue exists or the file moved it off 0; the broker writes
    # every level of messageDelayLevel, used or not, once it persists.
    levels = sorted(on_disk | {lv for lv, off in offsets.items() if lv >= 1 and off != 0})
    reference: int | None
    if now is not None:
        reference, basis = now, "--now"
    elif levels:
        reference, basis = newest_store_time(store)
    else:
        reference, basis = None, "not needed"
    restart: LoadView | None = None
    at_load: dict[int, _Bounds] = {}
    delivered: Proven | None = None
    if levels:  # the emulation costs a recovery scan: not for nothing to judge
        end: int | None = None  # without the emulation: the commitlog on disk
        # Not emulated where a layout takes the restart over (RocksDB consume queues).
        if store.refusal("delays", StorePart.RESTART) is None:
            restart, at_load, end = _at_load(store, progress)
        delivered = delivered_units(store, end)
    rows = tuple(
        _level(
            store,
            lv,
            delays.get(lv),
            offsets.get(lv),
            reference,
            None if not restart or not restart.broker_starts else at_load.get(lv, (0, 0, 0)),
            delivered,
        )
        for lv in levels
    )
    file = None if absent else file_use(r)
    redelivered = sum(row.redelivered for row in rows)
    return DelaysReport(file, reference, basis, restart, rows, tuple(problems), redelivered)


def _at_load(
    store: Store, progress: Progress | None
) -> tuple[LoadView, dict[int, _Bounds], int | None]:
    """The schedule queues when ``correctDelayOffset`` compares with them: it runs from
    ``ScheduleMessageService.load``, which 4.9.2+'s ``DefaultMessageStore.load`` calls after
    ``recover`` (5.x's ``BrokerController.recoverAndInitService`` after the store's ``load``),
    so after the recovery and its load-time dispatch, before the reput dispatches the rest.
    The third value is where the restarted commitlog ends (None: the broker does not start)."""
    report = run_recovery(store, RecoverOptions(lost_limit=0, find_lost=False), progress).report
    if not report.broker_starts:
        return LoadView(False, report.recovery_path, report.verdict_reason), {}, None
    bounds = {
        queue_id_to_delay_level(q.queue_id): (
            q.min_offset_after_load,
            q.max_offset_after_load,
            q.max_offset_after_dispatch,
        )
        for q in report.consume_queues
        if q.topic == SCHEDULE_TOPIC
    }
    return LoadView(True, report.recovery_path, None), bounds, report.end_after_start


def newest_store_time(store: Store) -> tuple[int | None, str]:
    summary = commitlog_summary(store, all_queue_bounds(store))
    if summary.last_store_timestamp is None:
        return None, "no record in the commitlog: pass --now to judge overdue messages"
    return summary.last_store_timestamp, "the store's newest store time"


def _level(
    store: Store,
    level: int,
    delay_ms: int | None,
    offset: int | None,
    reference: int | None,
    at_load: _Bounds | None,
    delivered: Proven | None,
) -> DelayLevel:
    qid = QueueId(SCHEDULE_TOPIC, delay_level_to_queue_id(level))
    notes: list[str] = []
    if delay_ms is None:
        notes.append(
            f"level {level} is past the last of messageDelayLevel: the broker never delivers it"
        )
    if qid in store.queue_dirs:
        b = queue_bounds(store, qid)
        lo, hi = b.min_offset, b.max_offset
    else:
        # findConsumeQueue creates a missing queue empty: min = max = 0 to correctDelayOffset.
        lo = hi = 0
        notes.append("no schedule queue on disk: the broker creates it empty")
    load_lo, load_hi, end = (lo, hi, hi) if at_load is None else at_load
    start = 0 if offset is None else offset  # ScheduleMessageService.start: no entry -> 0
    out_of_range = None
    if offset is not None and offset < load_lo:
        out_of_range = "below_min"
        notes.append(
            f"offset {offset} is below the queue's min {load_lo}: load moves it to {load_lo} "
            f"(correctDelayOffset); the {load_lo - max(offset, 0)} unit(s) between were deleted"
        )
    elif offset is not None and offset > load_hi:
        out_of_range = "above_max"
        notes.append(
            f"offset {offset} is past the queue's max {load_hi} at load: from 4.9.2 load moves "
            f"it to {load_hi} (correctDelayOffset); an older broker delivers nothing on this "
            f"level until {offset - load_hi} more message(s) arrive, and never delivers those"
        )
    # The timer task resumes at the clamped offset; one with no entry starts at 0, which
    # executeOnTimeup moves up to the min when no unit is there.
    resume = min(max(start, load_lo), load_hi)
    pending = max(end - resume, 0)
    limits = (
        # due < cutoff: overdue; < reference + 1: due by then; < reference + delay + 1: not
        # skewed (DeliverDelayedMessageTimerTask.correctDeliverTimestamp takes a deliver time
        # past now + the level's delay as now, so such a unit goes out at once).
        (
            reference - FLUSH_DELAY_OFFSET_INTERVAL_MS,
            reference + 1,
            reference + delay_ms + 1,
        )
        if reference is not None and delay_ms is not None
        else ()
    )
    due = _due_times(store, qid, resume, min(hi, end) - resume, limits, delivered)
    again = 0 if delivered is None else delivered.count(BY_SCHEDULE, qid, resume, end)
    if again:
        notes.append(
            f"{again} pending unit(s) were delivered already (their copy in the real topic is "
            "stored after them): delayOffset.json was not persisted past them before the broker "
            "stopped, so the restart delivers them again"
        )
    if pending > due.count:
        notes.append(
            f"{pending - due.count} pending unit(s) are not in the queue files on disk: the "
            "restart dispatches them; their due times are not read"
        )
    overdue = recently = 0
    if limits and due.count:
        overdue, by_reference, in_delay = due.below
        recently = by_reference - overdue
        skewed = due.undelivered - in_delay
        if skewed:
            notes.append(
                f"{skewed} unit(s) are due more than the level's delay after the reference "
                "time (a clock that went back, or a tagsCode that is not a time): the broker "
                "delivers them at once"
            )
    if overdue:
        notes.append(
            f"{overdue} message(s) were due more than {FLUSH_DELAY_OFFSET_INTERVAL_MS // 1000} s "
            "before the reference time and not delivered: the level is stuck"
        )
    if recently:
        notes.append(
            f"{recently} message(s) fell due within the last "
            f"{FLUSH_DELAY_OFFSET_INTERVAL_MS // 1000} s: after a crash they may be delivered "
            "twice (delayOffset.json is persisted every 10 s)"
        )
    oldest = None if delay_ms is None or due.first is None else due.first - delay_ms
    return DelayLevel(
        level,
        qid.queue_id,
        delay_ms,
        offset,
        lo,
        hi,
        None if at_load is None else load_lo,
        None if at_load is None else load_hi,
        None if at_load is None else end,
        resume,
        out_of_range,
        pending,
        due.first,
        due.last,
        oldest,
        overdue,
        recently,
        tuple(notes),
        again,
    )


class _DueTimes:
    """The deliver times (tagsCodes) of a run of units: the first, the last, how many, and how
    many of those not delivered yet fall below each of ``limits``, counted one chunk at a time
    (a level may hold millions)."""

    def __init__(self, limits: tuple[int, ...]) -> None:
        self.limits = limits
        self.below = [0] * len(limits)
        self.count = 0
        self.undelivered = 0
        self.first: int | None = None
        self.last: int | None = None

    def add(self, tags: npt.NDArray[np.int64], waiting: npt.NDArray[np.bool_]) -> None:
        if not len(tags):
            return
        if self.first is None:
            self.first = int(tags[0])
        self.last = int(tags[-1])
        self.count += len(tags)
        self.undelivered += int(np.count_nonzero(waiting))
        for i, limit in enumerate(self.limits):
            self.below[i] += int(np.count_nonzero(waiting & (tags < limit)))


def _due_times(
    store: Store,
    qid: QueueId,
    start: int,
    count: int,
    limits: tuple[int, ...],
    delivered: Proven | None,
) -> _DueTimes:
    """``delivered``: the units whose delivery is stored, neither overdue nor due."""
    due = _DueTimes(limits)
    if count > 0:
        for c in iter_unit_chunks(store, qid.topic, qid.queue_id, start, count):
            waiting = np.ones(len(c.queue_offsets), bool)
            if delivered is not None and len(c.queue_offsets):
                lo, hi = int(c.queue_offsets.min()), int(c.queue_offsets.max()) + 1
                waiting = ~np.isin(c.queue_offsets, delivered.offsets(BY_SCHEDULE, qid, lo, hi))
            due.add(c.units["tags_code"].astype(np.int64), waiting)
    return due
