"""The 5.x timer store's own recovery on a restart (``TimerMessageStore.load`` then
``recover``, RocketMQ 5.3.3 ``store/.../timer/TimerMessageStore.java``), after the commitlog's
(docs/timer-store.md, "Recovery"):

1. ``TimerLog.load`` (a ``MappedFileQueue``) refuses a file of another length, as
   ``TimerWheel``'s constructor refuses a ``timerwheel`` of another length: the broker stops.
2. ``recoverAndRevise(lastTimerLogFlushPos - fileSize, checkTimerLog=true)`` reads units from
   the file holding that offset until a blank (next file) or a unit whose size is not 52 or
   whose magic fails ``isMagicOK``: that is processOffset, the timerlog's end; files past it
   are deleted (``truncateDirtyFiles``). Each unit read moves its slot's lastPos to it
   (``TimerWheel.reviseSlot`` with force).
3. ``reviseQueueOffset(processOffset)``: the last unit's record (offsetPy, sizePy) read from
   the commitlog; its queue offset + 1 is where enqueueing resumes; no record there (the
   commitlog's recovery cut it, or the log is empty): timercheck's lastTimerQueueOffset. Then
   at most masterTimerQueueOffset, and clamped into the timer queue's [min, max].
4. The read time: lastReadTimeMs, pulled forward to at least now - 7 days + 60 slots
   (:func:`rmqinspect.format.timer.restart_read_ms`); ``checkPhyPos`` re-reads from the
   first position of any slot (from the read time on) whose lastPos is still past the end.
   The wheel is read again from there: a slot already delivered from but not yet behind the
   checkpointed read time (a crash before the checkpoint caught up) fires again, so its
   messages get a second copy in their real topic (timer duplicates).

Units whose record the commitlog's recovery cut stay in the timerlog: their slot's dequeue
reads nothing there (apache/rocketmq#10668).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis.recovery.report import LoadFailure, QueueReport
from rmqinspect.analysis.timers import TimerEntry, TimersReport, timers_report
from rmqinspect.format import timer
from rmqinspect.store.model import Store
from rmqinspect.store.timer import has_timer_store, read_timerlog, read_wheel

UNITS_LISTED = 100  # units cut under the timer listed in the report (the count is whole)


@dataclass
class TimerUnitCut:
    """A timerlog unit whose commitlog record lies past the recovered end."""

    timerlog_offset: int
    physical_offset: int
    store_size: int
    state: str  # the entry's state before the restart (pending, delivered, ...) or recall
    uniq_key: str | None
    real_topic: str | None
    slot_timestamp: int


@dataclass
class TimerRecoveryReport:
    """What timerlog, wheel and timercheck say after the restart."""

    last_read_timestamp: int | None  # timercheck; None: no checkpoint (read as zeros)
    last_timer_log_flush_pos: int | None
    last_timer_queue_offset: int | None
    master_timer_queue_offset: int | None
    timerlog_files_before: list[str]
    recovery_begin_offset: int  # the file recoverAndRevise starts reading
    timerlog_end: int  # processOffset
    timerlog_end_reason: str  # zeros, bad_unit, file_end, no_files
    timerlog_units: int
    units_dropped: int  # non-zero units past the end that the truncation discards
    timerlog_files_deleted: list[str]
    flushed_units_lost: int  # units timercheck says were flushed, past the recovered end
    slots_revised: int  # valid slots whose lastPos the recovery moves to their newest unit
    slots_past_end: int  # valid slots from the read time on whose lastPos stays past the end
    queue_offset_from_log: int | None  # reviseQueueOffset; None: -1 (no record)
    queue_offset_rule: str
    timer_queue_offset: int  # currQueueOffset: where enqueueing resumes
    timer_queue_min_offset: int | None  # the timer queue after the commitlog's recovery
    timer_queue_max_offset: int | None
    enqueued_again: int  # timer-topic messages from currQueueOffset on already in the log
    to_enqueue: int  # timer-queue messages from currQueueOffset to the queue's max
    now_timestamp: int | None
    now_basis: str
    read_timestamp: int | None  # currReadTimeMs
    read_rule: str  # timercheck or seven_days_back
    skipped_pending: int  # pending entries between lastReadTimeMs and currReadTimeMs
    due_pending: int  # pending entries from currReadTimeMs to now: fired at once, late
    fired_again: int  # delivered or rolled entries in slots from currReadTimeMs on
    units_cut: int  # units whose record lies past the recovered commitlog end
    units_cut_listed: list[TimerUnitCut] = field(default_factory=list)
    load_failures: list[LoadFailure] = field(default_factory=list)


def recover_timer_store(
    store: Store, end: int | None, queues: list[QueueReport], now: int | None
) -> TimerRecoveryReport | None:
    """The timer store's recovery after a commitlog recovery that ended at ``end`` (None: the
    broker does not start) and left the timer queue as ``queues`` says. None: no timer store."""
    if not has_timer_store(store.root):
        return None
    t = timers_report(store, now)
    log = read_timerlog(store)
    cp = t.timercheck
    flush = cp.last_timer_log_flush_pos if cp is not None else 0
    files = log.files.files
    size = log.files.file_size
    # recover: lastFlushPos - the last file's size, at least 0; recoverAndRevise then starts
    # at the last file whose start is at or before it.
    begin_at = max(flush - size, 0) if files else 0
    begin = max((f.start for f in files if f.start <= begin_at), default=0)
    # TimerLog.load (MappedFileQueue.load) and TimerWheel's constructor refuse the files.
    failures = [
        LoadFailure(f"timerlog_{p.kind}", p.path, p.message)
        for p in log.problems
        if p.broker_fails_to_load
    ]
    failures += [
        LoadFailure("timerwheel_wrong_size", f.path, f.message)
        for f in t.findings
        if f.kind == "wheel.wrong_size"
    ]
    positions = log.positions.tolist()
    queue_from_log, rule = _revise_queue_offset(t, positions, log.end, end)
    last_queue = cp.last_timer_queue_offset if cp is not None else 0
    master = cp.master_timer_queue_offset if cp is not None else 0
    current = min(last_queue if queue_from_log is None else queue_from_log + 1, master)
    qmin, qmax = _timer_queue(queues)
    if qmin is not None and current < qmin:
        current, rule = qmin, rule + "; raised to the queue's min offset"
    elif qmax is not None and current > qmax:
        current, rule = qmax, rule + "; lowered to the queue's max offset"
    last_read = cp.last_read_timestamp if cp is not None else None
    read = None if t.reference_timestamp is None else t.restart_read_timestamp
    read_rule = "timercheck" if read is not None and read == last_read else "seven_days_back"
    cut = _cut_units(t, end)
    slots_revised, past_end = _wheel_after(store, log.units, positions, log.end, read)
    return TimerRecoveryReport(
        last_read_timestamp=last_read,
        last_timer_log_flush_pos=cp.last_timer_log_flush_pos if cp is not None else None,
        last_timer_queue_offset=cp.last_timer_queue_offset if cp is not None else None,
        master_timer_queue_offset=cp.master_timer_queue_offset if cp is not None else None,
        timerlog_files_before=[f.path.name for f in files],
        recovery_begin_offset=begin,
        timerlog_end=log.end,
        timerlog_end_reason=log.end_kind,
        timerlog_units=len(positions),
        units_dropped=log.bad_unit[2] + 1 if log.bad_unit is not None else 0,
        timerlog_files_deleted=[f.path.name for f in files if f.start > log.end],
        flushed_units_lost=max(flush - log.end, 0) // timer.UNIT_SIZE,
        slots_revised=slots_revised,
        slots_past_end=past_end,
        queue_offset_from_log=queue_from_log,
        queue_offset_rule=rule,
        timer_queue_offset=current,
        timer_queue_min_offset=qmin,
        timer_queue_max_offset=qmax,
        enqueued_again=sum(
            1 for e in t.entries if e.queue_offset is not None and current <= e.queue_offset
        )
        + sum(1 for r in t.recalls if r.queue_offset is not None and current <= r.queue_offset),
        to_enqueue=max((qmax if qmax is not None else current) - current, 0),
        now_timestamp=t.reference_timestamp,
        now_basis=t.reference_basis,
        read_timestamp=read,
        read_rule=read_rule,
        skipped_pending=t.counts.get("skipped_by_restart", 0),
        due_pending=_due(t.entries, read, t.reference_timestamp),
        fired_again=sum(
            1
            for e in t.entries
            if read is not None and e.state in ("delivered", "rolled") and e.slot_timestamp >= read
        ),
        units_cut=len(cut),
        units_cut_listed=cut[:UNITS_LISTED],
        load_failures=failures,
    )


def _revise_queue_offset(
    t: TimersReport, positions: list[int], log_end: int, end: int | None
) -> tuple[int | None, str]:
    """``reviseQueueOffset``: the queue offset of the last unit's record, when the restarted
    commitlog still holds it (getMessageByCommitOffset reads below the recovered end)."""
    if not positions or positions[-1] + timer.UNIT_SIZE != log_end:
        return None, "no unit before the timerlog's end: timercheck's lastTimerQueueOffset"
    last = positions[-1]
    entry = next((e for e in t.entries if e.timerlog_offset == last), None)
    recall = next((r for r in t.recalls if r.timerlog_offset == last), None)
    offset = entry.queue_offset if entry is not None else None
    physical = entry.physical_offset if entry is not None else None
    size = entry.store_size if entry is not None else 0
    if recall is not None:
        offset, physical = recall.queue_offset, recall.physical_offset
    if offset is None or physical is None:
        return None, (
            "the last unit's record is no timer-topic record: timercheck's lastTimerQueueOffset"
        )
    if end is not None and physical + max(size, 0) > end:
        return None, (
            "the last unit's record is past the recovered commitlog end: timercheck's "
            "lastTimerQueueOffset"
        )
    return offset, "the last unit's record's queue offset + 1"


def _timer_queue(queues: list[QueueReport]) -> tuple[int | None, int | None]:
    for q in queues:
        if q.topic == timer.TIMER_TOPIC and q.queue_id == 0:
            return q.min_offset_after_start, q.max_offset_after_dispatch
    return None, None


def _cut_units(t: TimersReport, end: int | None) -> list[TimerUnitCut]:
    """Units (entries and recall markers) whose record the commitlog's recovery cut, or which
    already pointed past the commitlog's records."""
    if end is None:
        return []
    cut = [
        TimerUnitCut(
            e.timerlog_offset, e.physical_offset, e.store_size, e.state, e.uniq_key,
            e.real_topic, e.slot_timestamp,
        )
        for e in t.entries
        if e.physical_offset + max(e.store_size, 0) > end
    ]  # fmt: skip
    cut += [
        TimerUnitCut(r.timerlog_offset, r.physical_offset, 0, "recall", None, None,
                     r.slot_timestamp)
        for r in t.recalls
        if r.physical_offset >= end
    ]  # fmt: skip
    return sorted(cut, key=lambda u: u.timerlog_offset)


def _due(entries: tuple[TimerEntry, ...], read: int | None, now: int | None) -> int:
    if read is None or now is None:
        return 0
    return sum(1 for e in entries if e.state == "pending" and read <= e.slot_timestamp <= now)


def _wheel_after(
    store: Store,
    units: npt.NDArray[np.void],
    positions: list[int],
    log_end: int,
    read: int | None,
) -> tuple[int, int]:
    """How many valid slots ``reviseSlot`` moves (their lastPos is not their newest unit),
    and how many valid slots from the read time on still point past the end afterwards."""
    wheel = read_wheel(store)
    if wheel is None:
        return 0, 0
    newest: dict[int, int] = {}
    times = (timer.slot_times(units) // timer.DEFAULT_PRECISION_MS).tolist()
    for time, pos in zip(times, positions, strict=True):
        newest[time] = pos
    stored = wheel.slots["time"].astype(np.int64)
    valid = timer.slots_match(wheel.indices, stored)
    revised = past = 0
    lasts = wheel.slots["last_pos"].tolist()
    for time, last, ok in zip(stored.tolist(), lasts, valid.tolist(), strict=True):
        if not ok:
            continue
        if time in newest:
            revised += newest[time] != last
        elif last >= log_end and (read is None or time * timer.DEFAULT_PRECISION_MS >= read):
            past += 1
    return revised, past
