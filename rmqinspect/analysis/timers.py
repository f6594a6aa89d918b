"""``timers``: the 5.x timer store (timerlog, timerwheel, timercheck) against the commitlog.

The rules, from RocketMQ 5.3.3's ``store/.../timer/TimerMessageStore``:

- a timer message is stored in ``rmq_sys_wheel_timer`` queue 0 with ``REAL_TOPIC``,
  ``REAL_QID`` and ``TIMER_OUT_MS`` (its fire time); ``enqueue`` reads that queue from
  ``currQueueOffset`` and ``doEnqueue`` appends one timerlog unit per message into the slot of
  its fire time, or, when that is a roll window or more ahead, into a slot a window (or half a
  window) ahead with ``MAGIC_ROLL``: when that slot fires the message is stored in the timer
  topic again with ``TIMER_ROLL_TIMES`` + 1 (``convert``), and enqueued anew;
- a recall stores a marker with ``TIMER_DEL_UNIQKEY`` = ``<topic>+<uniqKey>``; its unit carries
  ``MAGIC_DELETE`` and, when its slot fires, the normal units of the same slot with that key are
  dropped (``dequeue``, ``TimerDequeueGetMessageService``);
- a fired message is stored in its real topic with ``TIMER_ENQUEUE_MS`` and ``TIMER_DEQUEUE_MS``
  (``convert``): its delivered copy;
- ``config/timercheck`` holds ``lastReadTimeMs``, the slot the wheel reads next: every slot
  before it was read. ``recover`` (from ``load``) pulls the read time forward to at least
  ``now - slotsTotal * precision + TIMER_BLANK_SLOTS * precision`` (7 days less 60 slots): a
  broker down longer than that skips the slots between.

An entry is a normal unit (not a recall marker). Its state: ``delivered`` (a copy with
``TIMER_DEQUEUE_MS`` of its UNIQ_KEY is in its real topic), ``recalled`` (a recall marker names
it), ``rolled`` (a later roll copy of it is in the timerlog), else ``pending``. A pending entry
is ``overdue`` when its slot is before ``lastReadTimeMs`` (the wheel passed it without
delivering it), ``skipped_by_restart`` when its slot lies between ``lastReadTimeMs`` and where
the restart resumes reading, ``due`` when its slot is at or before the reference time (a restart
delivers it at once, late).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis import Progress
from rmqinspect.analysis.queues import queue_bounds
from rmqinspect.analysis.timers_model import (
    Recall,
    TimerCheckView,
    TimerEntry,
    TimerFinding,
    TimersReport,
    TopicTimers,
    WheelBucket,
)
from rmqinspect.errors import StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format import timer
from rmqinspect.format.config import TimerMetricsTable
from rmqinspect.format.fate import int_property, long_property
from rmqinspect.format.scan import Skipped, WalkPolicy
from rmqinspect.store.configfiles import load_config_file
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store
from rmqinspect.store.timer import (
    TimerLog,
    Wheel,
    has_timer_store,
    read_timercheck,
    read_timerlog,
    read_wheel,
)

# The report's types are timers_model's; callers import them from here.
__all__ = [
    "HISTOGRAM",
    "PRECISION_MS",
    "Recall",
    "TimerCheckView",
    "TimerEntry",
    "TimerFinding",
    "TimersReport",
    "TopicTimers",
    "WheelBucket",
    "timers_report",
]

PRECISION_MS = timer.DEFAULT_PRECISION_MS
HISTOGRAM = (
    ("< 1 min", 60_000),
    ("< 1 h", 3_600_000),
    ("< 1 day", 86_400_000),
    ("< 2 days", 2 * 86_400_000),
    ("later", None),
)
"""The wheel's occupancy buckets: slot time minus the read time (the roll window is 2 days)."""


@dataclass
class _Commitlog:
    """What one walk of the commitlog tells the timer: its timer-topic records by position,
    the delivered copies' (topic, UNIQ_KEY), where the records end and the newest store time."""

    timer_records: dict[int, cl.MessageRecord] = field(default_factory=dict)
    delivered: set[tuple[str, str]] = field(default_factory=set)
    end: int = 0
    newest: int | None = None


def timers_report(
    store: Store, now: int | None = None, progress: Progress | None = None
) -> TimersReport:
    if not has_timer_store(store.root):
        return _absent(now)
    findings: list[TimerFinding] = []
    notes: list[str] = []
    check = _timercheck(store, findings)
    log = read_timerlog(store)
    _log_findings(log, check, findings)
    try:
        wheel = read_wheel(store)
    except StoreError as err:  # not a regular file, unreadable: no slot is read
        wheel = None
        findings.append(TimerFinding("wheel.unreadable", str(err.path), None, err.message))
    walk = _walk(store, progress)
    if now is not None:
        reference, basis = now, "--now"
    elif walk.newest is not None:
        reference, basis = walk.newest, "the store's newest store time"
    else:
        reference, basis = None, "no record in the commitlog: pass --now to judge the restart"
    last_read = check.last_read_timestamp if check is not None else None
    restart_read: int | None = None
    if reference is not None:
        restart_read = timer.restart_read_ms(last_read, reference, PRECISION_MS)
    entries, recalls = _entries(log, walk, last_read, restart_read, reference, findings)
    valid = _wheel(wheel, log, findings)
    qmin, qmax, not_enqueued = _timer_queue(store, check, findings, notes)
    metrics = _metrics(store, notes)
    counts = Counter(e.state for e in entries)
    counts.update(e.late for e in entries if e.late is not None)
    counts["recall_markers"] = len(recalls)
    return TimersReport(
        present=True,
        timercheck=check,
        reference_timestamp=reference,
        reference_basis=basis,
        restart_read_timestamp=restart_read,
        timerlog_units=len(log.units),
        timerlog_end=log.end,
        timerlog_end_kind=log.end_kind,
        wheel_slots_used=0 if wheel is None else len(wheel.indices),
        wheel_slots_valid=int(np.count_nonzero(valid)),
        timer_queue_min_offset=qmin,
        timer_queue_max_offset=qmax,
        not_enqueued=not_enqueued,
        commitlog_end=walk.end,
        counts=dict(sorted(counts.items())),
        topics=_topics(entries, metrics),
        histogram=_histogram(wheel, valid, last_read if last_read is not None else reference),
        entries=tuple(entries),
        recalls=tuple(recalls),
        findings=tuple(findings),
        notes=tuple(notes),
    )


def _absent(now: int | None) -> TimersReport:
    basis = "--now" if now is not None else "not needed"
    return TimersReport(
        False, None, now, basis, None, 0, 0, "no_files", 0, 0, None, None, 0, 0, {}, (), (),
        (), (), (),
    )  # fmt: skip


def _timercheck(store: Store, findings: list[TimerFinding]) -> TimerCheckView | None:
    try:
        read = read_timercheck(store)
    except StoreError as err:
        findings.append(TimerFinding("timercheck.unreadable", str(err.path), None, err.message))
        return None
    if read.size is None:
        findings.append(
            TimerFinding(
                "timercheck.missing",
                str(read.path),
                None,
                "no timercheck: the broker starts reading the wheel 7 days back from now and "
                "enqueues the timer topic from its queue's min offset (recover, "
                "masterTimerQueueOffset 0)",
            )
        )
        return None
    if read.checkpoint is None:
        findings.append(TimerFinding("timercheck.unreadable", str(read.path), 0, str(read.error)))
        return None
    cp = read.checkpoint
    return TimerCheckView(
        cp.last_read_time_ms,
        cp.last_timer_log_flush_pos,
        cp.last_timer_queue_offset,
        cp.master_timer_queue_offset,
        cp.counter,
        cp.timestamp,
    )


def _log_findings(
    log: TimerLog, check: TimerCheckView | None, findings: list[TimerFinding]
) -> None:
    for p in log.problems:
        if p.kind == "wrong_size" or p.kind == "zero_length":
            # MappedFileQueue.load refuses a file of another length: TimerLog.load fails.
            findings.append(
                TimerFinding(
                    "timerlog.truncated", p.path, None, f"{p.message}: the broker does not load it"
                )
            )
        else:
            findings.append(TimerFinding(f"timerlog.{p.kind}", p.path, None, p.message))
    if log.end_kind == "file_end":
        findings.append(
            TimerFinding(
                "timerlog.truncated",
                *_log_place(log, log.end),
                "the timerlog's last file ends inside its units (no blank record, no zeros)",
            )
        )
    if log.bad_unit is not None:
        size, magic, following = log.bad_unit
        findings.append(
            TimerFinding(
                "timerlog.bad_unit",
                *_log_place(log, log.end),
                f"unit with size {size} and magic {magic} (a unit is 52 bytes, magic bits 0-3): "
                f"the broker's recovery ends the timerlog here and drops the {following} "
                f"non-zero unit(s) after it in the file"
                + (f" and {log.files_after_end} later file(s)" if log.files_after_end else ""),
            )
        )
    if check is not None and check.last_timer_log_flush_pos > log.end:
        findings.append(
            TimerFinding(
                "timerlog.truncated",
                *_log_place(log, log.end),
                f"timercheck says the timerlog was flushed to {check.last_timer_log_flush_pos}, "
                f"but its units end at {log.end}: units in between are lost",
            )
        )


def _log_place(log: TimerLog, offset: int) -> tuple[str, int | None]:
    """The timerlog file holding stream ``offset`` and the position in it (the directory when
    no file holds it)."""
    f = log.files.find(offset)
    if f is None:
        return str(log.files.directory), None
    return str(f.path), offset - f.start


def _walk(store: Store, progress: Progress | None) -> _Commitlog:
    """One forensic walk: timer-topic records (without bodies) and delivered copies."""
    out = _Commitlog()
    opts = store.check_options(check_crc=False, read_body=False)
    last = max(store.commitlog.min_offset, 0)
    for f, event in store.scan(None, opts, policy=WalkPolicy.FORENSIC):
        end = f.start + event.end
        if not isinstance(event, Skipped) and len(event.columns):
            cols = event.columns
            out.end = max(out.end, end)
            newest = int(cols.store_timestamp.max())
            out.newest = newest if out.newest is None else max(out.newest, newest)
            in_timer = cols.topic_mask([timer.TIMER_TOPIC])
            for r in cols.records(np.flatnonzero(in_timer), with_body=False):
                out.timer_records[r.position] = r
            others = np.flatnonzero(~in_timer)
            starts, _ = cols.property_spans(timer.TIMER_DEQUEUE_MS, others)
            for r in cols.records(others[starts >= 0], with_body=False):
                uniq = r.properties.get(props.UNIQ_KEY)
                if uniq is not None:
                    out.delivered.add((r.topic, uniq))
        if progress is not None and end > last:
            progress(end - last)
            last = end
    return out


def _entries(
    log: TimerLog,
    walk: _Commitlog,
    last_read: int | None,
    restart_read: int | None,
    reference: int | None,
    findings: list[TimerFinding],
) -> tuple[list[TimerEntry], list[Recall]]:
    units = log.units
    slots = timer.slot_times(units).tolist()
    writes = units["curr_write_time_ms"].tolist()
    offsets = units["physical_offset"].tolist()
    sizes = units["store_size"].tolist()
    magics = units["magic"].tolist()
    raw: list[tuple[int, cl.MessageRecord | None]] = []
    for i, pos in enumerate(log.positions.tolist()):
        record = walk.timer_records.get(offsets[i])
        if record is None or record.store_size != sizes[i]:
            where = _log_place(log, pos)
            if offsets[i] + max(sizes[i], 0) > walk.end or offsets[i] < 0:
                findings.append(
                    TimerFinding(
                        "timerlog.past_commitlog_end",
                        *where,
                        f"unit points at commitlog offset {offsets[i]} (size {sizes[i]}), past "
                        f"where the commitlog's records end ({walk.end}): a truncated commitlog "
                        "under a timerlog that kept its units (apache/rocketmq#10668)",
                    )
                )
            else:
                findings.append(
                    TimerFinding(
                        "timerlog.not_timer_record",
                        *where,
                        f"unit points at commitlog offset {offsets[i]} (size {sizes[i]}), where "
                        f"no {timer.TIMER_TOPIC} record of that size starts (apache/rocketmq"
                        "#10668: the commitlog was truncated and written again)",
                    )
                )
            record = None
        raw.append((pos, record))
    # A recall marker's key, and each message's newest roll copy (rolls carry it on).
    recall_keys: set[str] = set()
    newest_roll: dict[tuple[str, str], int] = {}
    for i, (_pos, record) in enumerate(raw):
        if record is None:
            continue
        p = record.properties
        if magics[i] & timer.MAGIC_DELETE:
            target = p.get(timer.TIMER_DEL_UNIQKEY)
            if target is not None:
                recall_keys.add(target)
            continue
        key = (p.get(props.REAL_TOPIC) or "", p.get(props.UNIQ_KEY) or "")
        rolls = int_property(p, timer.TIMER_ROLL_TIMES) or 0
        newest_roll[key] = max(newest_roll.get(key, 0), rolls)
    entries: list[TimerEntry] = []
    recalls: list[Recall] = []
    seen_keys: set[str] = set()
    for i, (pos, record) in enumerate(raw):
        common = (pos, offsets[i], sizes[i], magics[i], slots[i], writes[i])
        if record is None:
            entries.append(TimerEntry(*common, state="unreadable", late=None))
            continue
        p = record.properties
        if magics[i] & timer.MAGIC_DELETE:
            target = p.get(timer.TIMER_DEL_UNIQKEY) or ""
            recalls.append(
                Recall(pos, offsets[i], slots[i], target, False, record.queue_offset, magics[i])
            )
            continue
        topic = p.get(props.REAL_TOPIC) or ""
        uniq = p.get(props.UNIQ_KEY) or ""
        rolls = int_property(p, timer.TIMER_ROLL_TIMES) or 0
        seen_keys.add(f"{topic}+{uniq}")
        if uniq and (topic, uniq) in walk.delivered:
            state = "delivered"
        elif f"{topic}+{uniq}" in recall_keys:
            state = "recalled"
        elif rolls < newest_roll.get((topic, uniq), 0):
            state = "rolled"
        else:
            state = "pending"
        late = None
        if state == "pending":
            if last_read is not None and slots[i] < last_read:
                late = "overdue"
            elif restart_read is not None and slots[i] < restart_read:
                late = "skipped_by_restart"
            elif reference is not None and slots[i] <= reference:
                late = "due"
        entries.append(
            TimerEntry(
                *common,
                state=state,
                late=late,
                real_topic=p.get(props.REAL_TOPIC),
                real_queue_id=int_property(p, props.REAL_QID),
                uniq_key=p.get(props.UNIQ_KEY),
                fire_timestamp=long_property(p, timer.TIMER_OUT_MS),
                queue_offset=record.queue_offset,
                roll_times=rolls,
            )
        )
    matched = [dataclasses.replace(r, matched=r.target in seen_keys) for r in recalls]
    return entries, matched


def _wheel(
    wheel: Wheel | None, log: TimerLog, findings: list[TimerFinding]
) -> npt.NDArray[np.bool_]:
    """Checks every used slot and walks the chain of each valid one; returns which are valid."""
    if wheel is None:
        return np.zeros(0, bool)
    if wheel.size != timer.WHEEL_FILE_SIZE:
        findings.append(
            TimerFinding(
                "wheel.wrong_size",
                str(wheel.path),
                None,
                f"timerwheel is {wheel.size} bytes, not {timer.WHEEL_FILE_SIZE} "
                "(TimerWheel refuses another length: the broker does not start)",
            )
        )
    stored = wheel.slots["time"].astype(np.int64)
    valid = timer.slots_match(wheel.indices, stored)
    for i in np.flatnonzero(~valid).tolist():
        index = int(wheel.indices[i])
        findings.append(
            TimerFinding(
                "wheel.slot_time_mismatch",
                str(wheel.path),
                index * timer.SLOT_SIZE,
                f"slot {index} stores time {int(stored[i]) * PRECISION_MS}, whose slot is "
                f"{timer.slot_index(int(stored[i]) * PRECISION_MS) if stored[i] >= 0 else 'none'}"
                ": the broker never reads it",
            )
        )
    at = {pos: k for k, pos in enumerate(log.positions.tolist())}
    prev = log.units["prev_pos"].tolist()
    unit_slots = (timer.slot_times(log.units) // PRECISION_MS).tolist()
    for i in np.flatnonzero(valid).tolist():
        index = int(wheel.indices[i])
        where = (str(wheel.path), index * timer.SLOT_SIZE)
        time = int(stored[i])
        pos = int(wheel.slots["last_pos"][i])
        seen: set[int] = set()
        while pos != -1:
            k = at.get(pos)
            if k is None:
                findings.append(
                    TimerFinding(
                        "timerlog.chain_outside_log",
                        *where,
                        f"the chain of slot {index} ({time * PRECISION_MS}) reaches timerlog "
                        f"offset {pos}, which is no unit of the log (it ends at {log.end})",
                    )
                )
                break
            if k in seen:
                findings.append(
                    TimerFinding(
                        "timerlog.cycle",
                        *where,
                        f"the chain of slot {index} ({time * PRECISION_MS}) comes back to "
                        f"timerlog offset {pos}: the broker's dequeue never ends",
                    )
                )
                break
            seen.add(k)
            if unit_slots[k] != time:
                findings.append(
                    TimerFinding(
                        "timerlog.chain_into_other_slot",
                        *where,
                        f"the chain of slot {index} ({time * PRECISION_MS}) runs into the unit at "
                        f"timerlog offset {pos}, whose slot is {unit_slots[k] * PRECISION_MS}: "
                        "the broker delivers it with this slot",
                    )
                )
                break
            pos = prev[k]
    return valid


def _timer_queue(
    store: Store, check: TimerCheckView | None, findings: list[TimerFinding], notes: list[str]
) -> tuple[int | None, int | None, int]:
    qid = QueueId(timer.TIMER_TOPIC, 0)
    if qid not in store.queue_dirs:
        return None, None, 0
    b = queue_bounds(store, qid)
    if check is None:
        return b.min_offset, b.max_offset, 0
    behind = b.max_offset - check.last_timer_queue_offset
    if behind < 0:
        findings.append(
            TimerFinding(
                "timercheck.ahead_of_queue",
                str(store.config_dir / "timercheck"),
                16,
                f"timercheck's lastTimerQueueOffset {check.last_timer_queue_offset} is past the "
                f"timer queue's max {b.max_offset}: the restart moves it back to the max "
                "(recover); the queue lost messages the timer had enqueued",
            )
        )
    elif behind:
        notes.append(
            f"{behind} message(s) of {timer.TIMER_TOPIC} are past timercheck's "
            f"lastTimerQueueOffset {check.last_timer_queue_offset}: not in the timerlog at the "
            "checkpoint; the restart enqueues them"
        )
    return b.min_offset, b.max_offset, max(behind, 0)


def _metrics(store: Store, notes: list[str]) -> TimerMetricsTable | None:
    r = load_config_file(store.config_dir, "timermetrics")
    for error in (r.main_error, r.bak_error):
        if error is not None:
            notes.append(f"timermetrics: {error}")
    return r.value if isinstance(r.value, TimerMetricsTable) else None


def _topics(
    entries: list[TimerEntry], metrics: TimerMetricsTable | None
) -> tuple[TopicTimers, ...]:
    by_topic: dict[str, list[TimerEntry]] = {}
    for e in entries:
        if e.real_topic is not None:
            by_topic.setdefault(e.real_topic, []).append(e)
    out = []
    for topic in sorted(by_topic):
        group = by_topic[topic]
        pending = [e for e in group if e.state == "pending"]
        fires = [e.fire_timestamp or e.slot_timestamp for e in pending]
        late = Counter(e.late for e in pending)
        metric = metrics.timing_count.get(topic) if metrics is not None else None
        out.append(
            TopicTimers(
                topic,
                len(pending),
                late["overdue"],
                late["skipped_by_restart"],
                late["due"],
                sum(e.rolls for e in pending),
                min(fires, default=None),
                max(fires, default=None),
                sum(e.state == "delivered" for e in group),
                sum(e.state == "recalled" for e in group),
                None if metric is None else metric.count,
            )
        )
    return tuple(out)


def _histogram(
    wheel: Wheel | None, valid: npt.NDArray[np.bool_], read_time: int | None
) -> tuple[WheelBucket, ...]:
    """Valid slots by how far ahead of the read time they lie; slots before it were read
    already (slots are never cleared)."""
    if wheel is None or read_time is None:
        return ()
    times = wheel.slots["time"].astype(np.int64)[valid] * PRECISION_MS
    nums = wheel.slots["num"].astype(np.int64)[valid]
    ahead = times - read_time
    out = [
        WheelBucket("read already", int(np.count_nonzero(ahead < 0)), int(nums[ahead < 0].sum()))
    ]
    low = 0
    for label, high in HISTOGRAM:
        inside = (ahead >= low) & (ahead < high if high is not None else True)
        out.append(WheelBucket(label, int(np.count_nonzero(inside)), int(nums[inside].sum())))
        low = high if high is not None else low
    return tuple(out)
