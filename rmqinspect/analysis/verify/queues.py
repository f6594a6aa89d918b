"""Consume-queue checks, both directions (like pg_amcheck's heapallindexed).

* Units to records (:func:`check_queue_file`): every unit of a queue's range ``[minOffset,
  maxOffset)`` (as :func:`~rmqinspect.analysis.queues.loaded_queue` loads it) leads to a record
  with the unit's size, the queue's topic and queue id and the unit's queue offset. Records are
  read many at a time with :func:`~rmqinspect.format.columns.gather`. Pre-blank placeholders are
  the spec's exception; an LMQ unit leads to a record that names the queue in
  ``INNER_MULTI_DISPATCH`` with that offset.
* Records to units (:class:`QueueCoverage`, fed by the commitlog walk): every NOT/COMMIT record
  is served by a unit of its queue (:meth:`~rmqinspect.store.consume_queue.ConsumeQueue.serves`),
  and the unit at its queue offset holds the tagsCode dispatch computes (the tag hash, or in
  ``SCHEDULE_TOPIC_XXXX`` the delivery time; ext addresses are the exception). The tags are
  checked here, where the records come in dense runs, because finding TAGS is one search per
  run. Records after their queue's last unit, or of a queue without a directory, are what a
  killed broker's dispatch had not reached: :func:`classify_lagging` asks the restart
  prediction whether the restart rebuilds their units (a warning) or not (an error).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rmqinspect.analysis.recovery import RecoveryReport
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.finding import Findings, layout_check
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.columns import RecordColumns, gather
from rmqinspect.format.consumequeue import (
    CQ_STORE_UNIT_SIZE,
    EXT_MAX_ADDR,
    pre_blank_mask,
    units_array,
)
from rmqinspect.format.javamath import wrap32
from rmqinspect.format.npbytes import I64, Mask, distinct, members, windows
from rmqinspect.format.profile import Profile
from rmqinspect.store.consume_queue import ConsumeQueue
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import QueueId

_CHUNK = 1 << 16  # units checked per gather
Report = Callable[[str, int, str], None]  # (check, unit index in the chunk, detail)


def queue_dir(qid: QueueId) -> str:
    return f"consumequeue/{qid.topic}/{qid.queue_id}"


# --- records to units ---------------------------------------------------------------------------


@dataclass
class Lagging:
    """Records of one queue that no unit serves yet, in log order."""

    positions: list[I64] = field(default_factory=list)
    queue_offsets: list[I64] = field(default_factory=list)

    def add(self, positions: I64, queue_offsets: I64) -> None:
        self.positions.append(positions)
        self.queue_offsets.append(queue_offsets)

    def extend(self, other: Lagging) -> None:
        self.positions.extend(other.positions)
        self.queue_offsets.extend(other.queue_offsets)

    def arrays(self) -> tuple[I64, I64]:
        empty = np.zeros(0, np.int64)
        return (
            np.concatenate(self.positions) if self.positions else empty,
            np.concatenate(self.queue_offsets) if self.queue_offsets else empty,
        )


@dataclass
class QueueCoverage:
    """Records to units, run by run: records inside their queue's range that no unit serves are
    findings at once; those past its end (or without a queue) wait for :func:`classify_lagging`."""

    lagging: dict[QueueId, Lagging] = field(default_factory=dict)

    def add_run(
        self,
        ctx: Context,
        cols: RecordColumns,
        rows: I64,
        topic_ids: I64,
        topics: list[str],
        findings: Findings,
        file: str,
    ) -> None:
        """Check the records ``rows`` of a run (those that enter a consume queue): each is
        served by a unit of its queue, and a unit at its own queue offset holds the tagsCode
        dispatch computes for it."""
        if not len(rows):
            return
        # Found for the whole run at once: one search over the run, not one per queue.
        codes, _ = cols.tags_codes(rows, ctx.delay_table, (topic_ids, topics))
        keys = (topic_ids[rows] << 32) | (cols.queue_id[rows] & 0xFFFFFFFF)
        uniq, inverse = np.unique(keys, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.cumsum(np.bincount(inverse, minlength=len(uniq)))[:-1]
        for key, group in zip(uniq.tolist(), np.split(order, bounds), strict=True):
            qid = QueueId(topics[key >> 32], wrap32(key & 0xFFFFFFFF))
            if qid.topic in ctx.batch_topics:
                continue  # a BatchConsumeQueue topic: not checked yet (store.unsupported)
            members = rows[group]
            positions = cols.positions[members] + cols.file_start
            qoffs = cols.queue_offset[members]
            q = ctx.queue(qid)
            if q is None:
                self.lagging.setdefault(qid, Lagging()).add(positions, qoffs)
                continue
            missing = ~self._exact(ctx, q, qid, cols, members, codes[group], findings)
            missing[missing] = ~q.serves(qoffs[missing], positions[missing])
            late = missing & (qoffs >= q.max_offset_in_queue)
            if late.any():
                self.lagging.setdefault(qid, Lagging()).add(positions[late], qoffs[late])
            for i in np.flatnonzero(missing & ~late).tolist():
                findings.add(
                    "consumequeue.missing_unit",
                    file,
                    f"no unit of {qid} near queue offset {int(qoffs[i])} leads to this record "
                    f"(the queue holds offsets {q.min_offset_in_queue}..."
                    f"{q.max_offset_in_queue - 1})",
                    file_position=int(cols.positions[members[i]]),
                    physical_offset=int(positions[i]),
                    topic=qid.topic,
                    queue_id=qid.queue_id,
                    queue_offset=int(qoffs[i]),
                )

    @staticmethod
    def _exact(
        ctx: Context,
        q: ConsumeQueue,
        qid: QueueId,
        cols: RecordColumns,
        members: I64,
        codes: I64,
        findings: Findings,
    ) -> Mask:
        """Which records the unit at their own queue offset serves; those units' tagsCodes are
        checked against ``codes`` (dispatch's, per record; ext addresses are not checked)."""
        qoffs = cols.queue_offset[members]
        positions = cols.positions[members] + cols.file_start
        exact = np.zeros(len(members), bool)
        inside = np.flatnonzero((qoffs >= q.min_offset_in_queue) & (qoffs < q.max_offset_in_queue))
        if not len(inside):
            return exact
        inside = inside[np.argsort(qoffs[inside], kind="stable")]
        units = q.units_at(qoffs[inside])
        hit = units["phy_offset"] == positions[inside]
        exact[inside[hit]] = True
        at, units = inside[hit], units[hit]
        tags = units["tags_code"].astype(np.int64)
        wrong = (tags > EXT_MAX_ADDR) & (tags != codes[at])
        if wrong.any() and ctx.profile is Profile.V4_9 and qid.topic == cl.SCHEDULE_TOPIC:
            # 4.9.8 dispatches during load() before it parses the delay levels: tag hashes then.
            hashes, _ = cols.tags_codes(members[at], {})
            wrong &= tags != hashes
        for k in np.flatnonzero(wrong).tolist():
            qoff = int(qoffs[at[k]])
            unit_at = qoff * CQ_STORE_UNIT_SIZE
            f = next(f for f in reversed(q.files) if f.start <= unit_at)
            findings.add(
                "consumequeue.tags_code",
                ctx.rel(f.disk.path) if f.disk is not None else queue_dir(qid),
                f"unit ({int(units['phy_offset'][k])}, {int(units['size'][k])}, {int(tags[k])}): "
                f"dispatch computes {int(codes[at[k]])}",
                file_position=unit_at - f.start,
                physical_offset=int(positions[at[k]]),
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=qoff,
            )
        return exact

    def extend(self, other: QueueCoverage) -> None:
        for qid, lag in other.lagging.items():
            self.lagging.setdefault(qid, Lagging()).extend(lag)


def classify_lagging(
    ctx: Context,
    coverage: QueueCoverage,
    restart: RecoveryReport | None,
    findings: Findings,
) -> None:
    """One finding per queue for the records no unit serves yet: those the restart
    (``restart``, :func:`~rmqinspect.analysis.recovery.run_recovery` with every lost message
    listed) dispatches are a warning; those it keeps but leaves without a unit an error
    (``missing_queue`` when the directory is missing); those it cuts are said in passing (the
    damage that cuts them has its own finding)."""
    unserved: set[int] = set()
    end = -1
    kept_files: list[tuple[int, int]] = []
    size = ctx.store.commitlog.file_size
    if restart is not None and restart.commitlog is not None:
        cl_report = restart.commitlog
        end = cl_report.max_offset if cl_report.max_offset is not None else -1
        kept_files = [(int(f.name), int(f.name) + size) for f in cl_report.files_after or []]
        lost = restart.lost_messages.messages if restart.lost_messages is not None else []
        unserved = {m.physical_offset for m in lost if m.where == "no_queue_unit"}
    for qid, lag in sorted(coverage.lagging.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id)):
        positions, qoffs = lag.arrays()
        kept = positions < end
        if kept_files:
            inside = np.zeros(len(positions), bool)
            for a, b in kept_files:
                inside |= (positions >= a) & (positions < b)
            kept &= inside
        else:
            kept[:] = False
        left = kept & members(positions, np.fromiter(unserved, np.int64, len(unserved)))
        rebuilt = kept & ~left
        cut = int(np.count_nonzero(~kept))
        has_dir = qid in ctx.store.queue_dirs
        where = queue_dir(qid)
        if rebuilt.any():
            i = int(np.argmax(rebuilt))
            note = f"; {cut} more lie past the restart's end and are cut with it" if cut else ""
            findings.add(
                "consumequeue.lagging",
                where,
                f"no unit yet for {_records(int(np.count_nonzero(rebuilt)))} from queue offset "
                f"{int(qoffs[i])}{'' if has_dir else ' (the directory does not exist yet)'}; "
                f"the restart dispatches them{note}",
                physical_offset=int(positions[i]),
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=int(qoffs[i]),
            )
        if left.any():
            i = int(np.argmax(left))
            why = (
                "the restart does not rebuild it"
                if restart is not None and restart.broker_starts
                else "the broker refuses to start"
            )
            findings.add(
                "consumequeue.missing_unit" if has_dir else "consumequeue.missing_queue",
                where,
                f"no unit for {_records(int(np.count_nonzero(left)))} of {qid} from queue "
                f"offset {int(qoffs[i])}{'' if has_dir else ' (no directory for the queue)'}, "
                f"and {why}",
                physical_offset=int(positions[i]),
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=int(qoffs[i]),
            )


def check_queue_layout(ctx: Context, findings: Findings) -> None:
    """Each queue's file list: names, sizes and gaps (``MappedFileQueue.load``'s rules)."""
    for qid in ctx.store.queue_dirs:
        for p in ctx.store.consume_queue(qid.topic, qid.queue_id).problems:
            findings.add(
                layout_check("consumequeue", p.kind),
                ctx.rel(p.path),
                p.message,
                topic=qid.topic,
                queue_id=qid.queue_id,
            )


def _records(n: int) -> str:
    return f"{n} record{'' if n == 1 else 's'}"


# --- units to records ---------------------------------------------------------------------------


def check_queue_file(
    ctx: Context, qid: QueueId, f: StoreFile, data_end: int, findings: Findings
) -> int:
    """Check the units of one consume-queue file (see the module docstring); returns how many
    units of the queue's range it held. ``data_end`` is where the commitlog's data ends."""
    q = ctx.queue(qid)
    if q is None or not f.length:
        return 0
    file = ctx.rel(f.path)
    lo = max(q.min_offset_in_queue * CQ_STORE_UNIT_SIZE, f.start) - f.start
    hi = min(q.max_offset, f.start + f.length) - f.start
    buf = ctx.store.view(f)
    try:
        units = units_array(buf)
        first = lo // CQ_STORE_UNIT_SIZE
        last = max(first, hi // CQ_STORE_UNIT_SIZE)
        for a in range(first, last, _CHUNK):
            b = min(a + _CHUNK, last)
            _check_units(ctx, qid, file, f.start, units[a:b], a, data_end, findings)
        # Past the end of the file's data only holes remain: a sparse-extended file costs
        # nothing, and the units are looked at a chunk at a time.
        stop = min(len(units), -(-ctx.store.maps.data_end(f) // CQ_STORE_UNIT_SIZE))
        begin = max(last, (q.max_offset - f.start) // CQ_STORE_UNIT_SIZE, 0)
        stale, first_stale = _non_zero_units(units, begin, stop)
        if stale:
            at = first_stale * CQ_STORE_UNIT_SIZE
            findings.add(
                "consumequeue.units_after_end",
                file,
                f"{stale} non-zero units after the queue's last valid unit (offset "
                f"{q.max_offset_in_queue - 1}): units truncation left, or units the broker's "
                "load drops",
                file_position=at,
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=(f.start + at) // CQ_STORE_UNIT_SIZE,
            )
        del units
    finally:
        buf.release()
    return last - first


def _non_zero_units(units: np.ndarray, begin: int, stop: int) -> tuple[int, int]:
    """How many of ``units[begin:stop]`` are not all zeros, and the first one (-1: none)."""
    count, first = 0, -1
    for a in range(begin, stop, _CHUNK):
        part = units[a : min(a + _CHUNK, stop)]
        nonzero = np.flatnonzero(
            (part["phy_offset"] != 0) | (part["size"] != 0) | (part["tags_code"] != 0)
        )
        if len(nonzero) and first < 0:
            first = a + int(nonzero[0])
        count += len(nonzero)
    return count, first


def _check_units(
    ctx: Context,
    qid: QueueId,
    file: str,
    file_start: int,
    units: np.ndarray,
    first: int,
    data_end: int,
    findings: Findings,
) -> None:
    """Units ``first..`` of one file (positions in units from the file start)."""
    phy = units["phy_offset"].astype(np.int64)
    size = units["size"].astype(np.int64)
    tags = units["tags_code"].astype(np.int64)
    index = np.arange(first, first + len(units), dtype=np.int64)
    queue_offsets = file_start // CQ_STORE_UNIT_SIZE + index

    def report(check: str, i: int, detail: str) -> None:
        findings.add(
            check,
            file,
            f"unit ({int(phy[i])}, {int(size[i])}, {int(tags[i])}): {detail}",
            file_position=int(index[i]) * CQ_STORE_UNIT_SIZE,
            physical_offset=int(phy[i]),
            topic=qid.topic,
            queue_id=qid.queue_id,
            queue_offset=int(queue_offsets[i]),
        )

    pre = pre_blank_mask(units)
    invalid = ~pre & ((phy < 0) | (size <= 0))
    for i in np.flatnonzero(invalid).tolist():
        report("consumequeue.invalid_unit", i, "not a valid unit inside the queue's range")
    valid = ~pre & ~invalid
    past = valid & (phy >= data_end)
    for i in np.flatnonzero(past).tolist():
        report("consumequeue.points_past_end", i, f"the commitlog's data ends at {data_end}")
    clq = ctx.store.commitlog
    rest = np.flatnonzero(valid & ~past)
    starts = np.array([f.start for f in clq.files], np.int64)
    which = np.searchsorted(starts, phy[rest], side="right") - 1
    for k in distinct(which).tolist():
        sel = rest[which == k]
        if k < 0:
            for i in sel.tolist():
                report("consumequeue.no_record", i, "below the commitlog's first file")
            continue
        _check_records(ctx, qid, clq.files[k], sel, phy, size, queue_offsets, report)


def _check_records(
    ctx: Context,
    qid: QueueId,
    f: StoreFile,
    sel: I64,
    phy: I64,
    size: I64,
    queue_offsets: I64,
    report: Report,
) -> None:
    """The units ``sel`` that point into commitlog file ``f``, against the records there."""
    rel = phy[sel] - f.start
    outside = rel > f.length - cl.MIN_RECORD_SIZE
    for i in sel[outside].tolist():
        report("consumequeue.no_record", i, f"no record fits at {int(phy[i])} in {f.name}")
    sel, rel = sel[~outside], rel[~outside]
    if not len(sel):
        return
    buf = ctx.store.view(f)
    try:
        uniq, inverse = np.unique(rel, return_inverse=True)
        cols = gather(buf, uniq, f.start)
        accept_v2 = ctx.profile.accepts_v2_magic
        magic = cols.magic[inverse]
        header = (magic == cl.MESSAGE_MAGIC_CODE) | (
            (magic == cl.MESSAGE_MAGIC_CODE_V2) & accept_v2
        )
        for i in sel[~header].tolist():
            report("consumequeue.no_record", i, "no message record starts there")
        rec_size = cols.sizes[inverse]
        bad = header & (rec_size != size[sel])
        for n in np.flatnonzero(bad).tolist():
            report(
                "consumequeue.size_mismatch",
                int(sel[n]),
                f"the record's TOTALSIZE is {rec_size[n]}",
            )
        ok = header & ~bad
        _check_fields(qid, cols, inverse, sel, ok, queue_offsets, report)
        del cols
    finally:
        buf.release()


def _check_fields(
    qid: QueueId,
    cols: RecordColumns,
    inverse: I64,
    sel: I64,
    ok: Mask,
    queue_offsets: I64,
    report: Report,
) -> None:
    """Topic, queue id and queue offset of the records the units ``sel[ok]`` lead to
    (``cols`` holds each distinct record once; ``inverse`` maps units to it)."""
    topic = qid.topic.encode()
    data = np.frombuffer(cols.buf, np.uint8)
    formed = cols.well_formed
    same_topic = formed & (cols.topic_length == len(topic))
    if same_topic.any() and topic:
        found = windows(data, cols.topic_at, len(topic))
        same_topic &= (found == np.frombuffer(topic, np.uint8)).all(axis=1)
    lmq = _lmq_offsets(cols, formed & ~same_topic, qid)
    queue_id_ok = cols.queue_id == qid.queue_id
    if qid.topic.startswith(props.LMQ_PREFIX):
        # An LMQ queue is queue 0 whatever the record's own queue id.
        queue_id_ok |= (lmq >= 0) & (qid.queue_id == 0)
    expected_offset = np.where(lmq >= 0, lmq, cols.queue_offset)
    r = inverse
    unit_offsets = queue_offsets[sel]
    wrong_topic = ok & formed[r] & ~same_topic[r] & (lmq[r] < 0)
    wrong_id = ok & ~wrong_topic & ~queue_id_ok[r]
    wrong_offset = ok & ~wrong_topic & ~wrong_id & (expected_offset[r] != unit_offsets)
    for n in np.flatnonzero(wrong_topic).tolist():
        report("consumequeue.wrong_queue", int(sel[n]), f"the record is in {cols.topic(r[n])!r}")
    for n in np.flatnonzero(wrong_id).tolist():
        report(
            "consumequeue.wrong_queue", int(sel[n]), f"the record is in queue {cols.queue_id[r[n]]}"
        )
    for n in np.flatnonzero(wrong_offset).tolist():
        report(
            "consumequeue.queue_offset_mismatch",
            int(sel[n]),
            f"the record's queue offset is {int(expected_offset[r[n]])}",
        )


def _lmq_offsets(cols: RecordColumns, rows_mask: np.ndarray, qid: QueueId) -> I64:
    """For each record, the offset it holds in ``qid``'s queue by multi-dispatch (LMQ), -1
    where none (only the records of ``rows_mask`` are looked at)."""
    out = np.full(len(cols), -1, np.int64)
    rows = np.flatnonzero(rows_mask)
    if not len(rows):
        return out
    dispatch = cols.property_values(props.INNER_MULTI_DISPATCH, rows)
    offsets = cols.property_values(props.INNER_MULTI_QUEUE_OFFSET, rows)
    for r, d, o in zip(rows.tolist(), dispatch, offsets, strict=True):
        value = props.multi_dispatch_offset(d, o, qid.topic)
        if value is not None:
            out[r] = value
    return out
