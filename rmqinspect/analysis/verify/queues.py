"""Consume-queue checks, both directions (like pg_amcheck's heapallindexed).

* Units to records (:func:`check_queue_file`): every unit of a queue's range ``[minOffset,
  maxOffset)`` (as :func:`~rmqinspect.analysis.queues.loaded_queue` loads it) leads to a record
  with the unit's size, the queue's topic and queue id and the unit's queue offset. Records are
  judged by :func:`~rmqinspect.analysis.units.resolve_units` (the rule ``consumequeue``,
  ``lookup`` and the export use), whose statuses map to check ids. Pre-blank placeholders are
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
import numpy.typing as npt

from rmqinspect.analysis.recovery import RecoveryReport
from rmqinspect.analysis.units import (
    STATUSES,
    UnitResolution,
    UnitStatus,
    placement,
    resolve_units,
)
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.finding import Findings, layout_check
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.consumequeue import (
    CQ_STORE_UNIT_SIZE,
    CQ_UNIT_DTYPE,
    EXT_MAX_ADDR,
    units_array,
)
from rmqinspect.format.javamath import wrap32
from rmqinspect.format.npbytes import I64, Mask, members
from rmqinspect.format.profile import Profile
from rmqinspect.store.consume_queue import ConsumeQueue
from rmqinspect.store.files import StoreFile
from rmqinspect.store.layout import QueueId

_CHUNK = 1 << 16  # units checked per gather
_RAW_UNIT = np.dtype((np.void, CQ_STORE_UNIT_SIZE))
Report = Callable[[str, int, str], None]  # (check, unit index in the chunk, detail)


def queue_dir(qid: QueueId, *, batch: bool = False) -> str:
    """The queue's directory as findings name it (``batch``: a BatchConsumeQueue's)."""
    return f"{'batchconsumequeue' if batch else 'consumequeue'}/{qid.topic}/{qid.queue_id}"


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
    findings at once; those past its end (or without a queue) wait for :func:`classify_lagging`.

    ``proven``: per queue, runs ``[start, end)`` of queue offsets whose unit this walk found
    leading to its record (the record's position and TOTALSIZE, in the queue's topic, queue id
    and offset): what the units-to-records check would find reading those records again, so
    it need not (:func:`check_queue_file`)."""

    lagging: dict[QueueId, Lagging] = field(default_factory=dict)
    proven: dict[QueueId, list[tuple[I64, I64]]] = field(default_factory=dict)
    # Offsets proven, not yet runs: per part, each offset's queue (its number in _qids).
    _pending: list[tuple[I64, I64]] = field(default_factory=list)
    _qids: list[QueueId] = field(default_factory=list)
    _numbers: dict[QueueId, int] = field(default_factory=dict)

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
        dispatch computes for it. The usual case, every record of a queue inside its range
        and served by the unit at its own offset with the right tagsCode, is judged for all
        the run's queues at once; a queue where it is not is checked apart (:meth:`_queue`)."""
        if not len(rows):
            return
        # Found for the whole run at once: one search over the run, not one per queue.
        codes, _ = cols.tags_codes(rows, ctx.delay_table, (topic_ids, topics))
        keys = (topic_ids[rows] << 32) | (cols.queue_id[rows] & 0xFFFFFFFF)
        uniq, inverse = np.unique(keys, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        counts = np.bincount(inverse, minlength=len(uniq))
        starts = np.cumsum(counts) - counts
        grouped = rows[order]  # the run's records queue by queue, each queue's in log order
        qoffs = cols.queue_offset[grouped]
        low, high = np.minimum.reduceat(qoffs, starts), np.maximum.reduceat(qoffs, starts)
        qids = [QueueId(topics[key >> 32], wrap32(key & 0xFFFFFFFF)) for key in uniq.tolist()]
        fast = np.zeros(len(uniq), bool)
        units: list[np.ndarray] = []
        for g, (qid, lo, hi, at, n) in enumerate(
            zip(qids, low.tolist(), high.tolist(), starts.tolist(), counts.tolist(), strict=True)
        ):
            q = None if qid.topic in ctx.batch_topics else ctx.queue(qid)
            if q is None or lo < q.min_offset_in_queue or hi >= q.max_offset_in_queue:
                continue
            base, window = ctx.units_window(qid, q, lo, hi + 1)
            # As raw 20-byte units: joining structured arrays compares their fields each time.
            units.append(window[qoffs[at : at + n] - base].view(_RAW_UNIT))
            fast[g] = True
        slow = ~fast
        if units:
            took = fast[inverse[order]]
            got = np.concatenate(units).view(CQ_UNIT_DTYPE)
            taken = grouped[took]
            hit = got["phy_offset"] == cols.positions[taken] + cols.file_start
            tags = got["tags_code"].astype(np.int64)
            wrong = (tags > EXT_MAX_ADDR) & (tags != codes[order][took])
            group = inverse[order][took]
            slow |= _any_by_group(~hit | wrong, group, len(uniq))
            sized = got["size"].astype(np.int64) == cols.store_size[taken]
            proven = sized & ~slow[group]
            numbers = np.array([self._number(q) for q in qids], np.int64)
            readable = np.array(["\ufffd" not in q.topic for q in qids], bool)
            proven &= readable[group]
            self._pending.append((numbers[group[proven]], qoffs[took][proven]))
        for g in np.flatnonzero(slow).tolist():
            group_rows = order[starts[g] : starts[g] + counts[g]]
            self._queue(ctx, qids[g], cols, rows[group_rows], codes[group_rows], findings, file)

    def _number(self, qid: QueueId) -> int:
        n = self._numbers.get(qid)
        if n is None:
            n = self._numbers[qid] = len(self._qids)
            self._qids.append(qid)
        return n

    def _queue(
        self,
        ctx: Context,
        qid: QueueId,
        cols: RecordColumns,
        members: I64,
        codes: I64,
        findings: Findings,
        file: str,
    ) -> None:
        """:meth:`add_run`'s check of one queue's records ``members`` (their tagsCodes
        ``codes``), record by record where needed."""
        positions = cols.positions[members] + cols.file_start
        qoffs = cols.queue_offset[members]
        if qid.topic in ctx.batch_topics:
            from rmqinspect.analysis.verify.batch_queues import batch_coverage

            late = batch_coverage(ctx, qid, positions, qoffs, file, findings)
            if late is not None and late.any():
                self.lagging.setdefault(qid, Lagging()).add(positions[late], qoffs[late])
            return
        q = ctx.queue(qid)
        if q is None:
            self.lagging.setdefault(qid, Lagging()).add(positions, qoffs)
            return
        missing = ~self._exact(ctx, q, qid, cols, members, codes, findings)
        if not missing.any():  # every record's own unit serves it
            return
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

    def _exact(
        self,
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
        low, high = q.min_offset_in_queue, q.max_offset_in_queue
        if int(qoffs.min()) >= low and int(qoffs.max()) < high:
            inside = np.arange(len(qoffs))
        else:
            inside = np.flatnonzero((qoffs >= low) & (qoffs < high))
            if not len(inside):
                return exact
        if not bool((qoffs[inside][1:] >= qoffs[inside][:-1]).all()):
            inside = inside[np.argsort(qoffs[inside], kind="stable")]
        units = ctx.units_at(qid, q, qoffs[inside])
        hit = units["phy_offset"] == positions[inside]
        exact[inside[hit]] = True
        at, units = inside[hit], units[hit]
        # A topic name that is not its record's bytes (replacement characters) is left to the
        # units' own check, which compares bytes.
        if "\ufffd" not in qid.topic:
            sized = units["size"].astype(np.int64) == cols.store_size[members[at]]
            found = qoffs[at[sized]]
            self._pending.append((np.full(len(found), self._number(qid), np.int64), found))
        tags = units["tags_code"].astype(np.int64)
        wrong = (tags > EXT_MAX_ADDR) & (tags != codes[at])
        if not wrong.any():
            return exact
        if ctx.profile is Profile.V4_9 and qid.topic == cl.SCHEDULE_TOPIC:
            # 4.9.8 dispatches during load() before it parses the delay levels: tag hashes then.
            hashes, _ = cols.tags_codes(members[at], {})
            wrong &= tags != hashes
        # A delay message's tagsCode is its store time plus its level's delay: the broker's
        # messageDelayLevel, which no store file holds.
        hint = (
            "; is the broker's messageDelayLevel --delay-levels?"
            if qid.topic == cl.SCHEDULE_TOPIC
            else ""
        )
        for k in np.flatnonzero(wrong).tolist():
            qoff = int(qoffs[at[k]])
            unit_at = qoff * CQ_STORE_UNIT_SIZE
            f = next(f for f in reversed(q.files) if f.start <= unit_at)
            findings.add(
                "consumequeue.tags_code",
                ctx.rel(f.disk.path) if f.disk is not None else queue_dir(qid),
                f"unit ({int(units['phy_offset'][k])}, {int(units['size'][k])}, {int(tags[k])}): "
                f"dispatch computes {int(codes[at[k]])}{hint}",
                file_position=unit_at - f.start,
                physical_offset=int(positions[at[k]]),
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=qoff,
            )
        return exact

    def compact(self) -> None:
        """Turn the offsets proven since the last call into runs of consecutive ones, queue
        by queue (a range's walk ends with this: runs are what travels)."""
        if not self._pending:
            return
        numbers = np.concatenate([n for n, _ in self._pending])
        offsets = np.concatenate([o for _, o in self._pending])
        self._pending.clear()
        if not len(offsets):
            return
        order = np.lexsort((offsets, numbers))
        numbers, offsets = numbers[order], offsets[order]
        again = (numbers[1:] == numbers[:-1]) & (offsets[1:] == offsets[:-1])
        keep = np.concatenate(([True], ~again))
        numbers, offsets = numbers[keep], offsets[keep]
        new_queue = np.concatenate(([True], numbers[1:] != numbers[:-1]))
        begins = np.flatnonzero(new_queue | np.concatenate(([True], np.diff(offsets) != 1)))
        ends = np.concatenate((begins[1:], [len(offsets)])) - 1
        queue_of = numbers[begins]
        firsts = np.flatnonzero(np.concatenate(([True], queue_of[1:] != queue_of[:-1])))
        lasts = np.concatenate((firsts[1:], [len(begins)]))
        for a, b in zip(firsts.tolist(), lasts.tolist(), strict=True):
            qid = self._qids[int(queue_of[a])]
            runs = (offsets[begins[a:b]], offsets[ends[a:b]] + 1)
            self.proven.setdefault(qid, []).append(runs)

    def proven_runs(self, qid: QueueId) -> tuple[I64, I64]:
        """The queue's proven runs, sorted by start."""
        self.compact()
        runs = self.proven.get(qid, [])
        starts = np.concatenate([a for a, _ in runs]) if runs else np.zeros(0, np.int64)
        ends = np.concatenate([b for _, b in runs]) if runs else np.zeros(0, np.int64)
        order = np.argsort(starts, kind="stable")
        return starts[order], ends[order]

    def extend(self, other: QueueCoverage) -> None:
        for qid, lag in other.lagging.items():
            self.lagging.setdefault(qid, Lagging()).extend(lag)
        other.compact()
        for qid, runs in other.proven.items():
            self.proven.setdefault(qid, []).extend(runs)


def _any_by_group(flags: Mask, group: I64, groups: int) -> Mask:
    """Per group, whether any of its ``flags`` is set (``group``: each flag's group)."""
    return np.bincount(group[flags], minlength=groups) > 0


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
        where = queue_dir(qid, batch=qid in ctx.store.batch_dirs)
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
        for p in ctx.store.consume_queue_files(qid.topic, qid.queue_id).problems:
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
    ctx: Context,
    qid: QueueId,
    f: StoreFile,
    data_end: int,
    findings: Findings,
    proven: tuple[I64, I64] | None = None,
) -> int:
    """Check the units of one consume-queue file (see the module docstring); returns how many
    units of the queue's range it held. ``data_end`` is where the commitlog's data ends;
    ``proven``: :meth:`QueueCoverage.proven_runs` of the queue, units whose records need not
    be read again."""
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
        invalid: _InvalidRun | None = None
        for a in range(first, last, _CHUNK):
            b = min(a + _CHUNK, last)
            invalid = _check_units(
                ctx, qid, file, f.start, units[a:b], a, data_end, findings, invalid, proven
            )
        if invalid is not None:
            invalid.report(qid, file, f.start, findings)
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
        ctx.store.maps.release(f, 0, f.length)  # every queue file read stayed resident
    return last - first


def check_rocksdb_queue(ctx: Context, qid: QueueId, data_end: int, findings: Findings) -> int:
    """:func:`check_queue_file` for a queue the RocksDB consume queue holds: its rows over
    ``[minOffset, maxOffset)`` as file units (a missing key is an invalid unit: the broker's
    ``rangeQuery`` stops there), and the rows past the ``max`` entry. Positions are the
    unit's queue offset times 20, as in a file queue from offset 0."""
    from rmqinspect.analysis.queues import UNIT_CHUNK, iter_unit_chunks

    q = ctx.queue(qid)
    db = ctx.store.rocksdb
    if q is None or db is None:
        return 0
    file = ctx.rel(db.directory)
    low, high = q.min_offset_in_queue, q.max_offset_in_queue
    expect = low
    invalid: _InvalidRun | None = None
    for c in iter_unit_chunks(ctx.store, qid.topic, qid.queue_id, low, high - low, UNIT_CHUNK):
        if c.first_queue_offset > expect:
            invalid = _missing_keys(qid, file, expect, c.first_queue_offset, findings, invalid)
        invalid = _check_units(
            ctx, qid, file, 0, c.units, c.first_queue_offset, data_end, findings, invalid
        )
        expect = c.first_queue_offset + len(c)
    if expect < high:
        invalid = _missing_keys(qid, file, expect, high, findings, invalid)
    if invalid is not None:
        invalid.report(qid, file, 0, findings)
    stale = [(first, len(rows)) for first, rows in db.runs(qid, high, 2**63, UNIT_CHUNK)]
    if stale:
        findings.add(
            "consumequeue.units_after_end",
            file,
            f"{sum(n for _, n in stale)} rows after the queue's max entry (offset {high - 1}): "
            "rows truncation left, which the next dispatch overwrites",
            file_position=stale[0][0] * CQ_STORE_UNIT_SIZE,
            topic=qid.topic,
            queue_id=qid.queue_id,
            queue_offset=stale[0][0],
        )
    return high - low


def _missing_keys(
    qid: QueueId, file: str, a: int, b: int, findings: Findings, invalid: _InvalidRun | None
) -> _InvalidRun:
    """Queue offsets ``[a, b)`` without a row: one invalid run of zero units."""
    zeros = np.zeros(b - a, CQ_UNIT_DTYPE) if b - a <= _CHUNK else np.zeros(1, CQ_UNIT_DTYPE)
    at = np.arange(a, a + len(zeros), dtype=np.int64)
    done, run = _invalid_runs(zeros, at, invalid)
    for r in done:
        r.report(qid, file, 0, findings)
    assert run is not None
    run.count += (b - a) - len(zeros)  # a long gap is counted, not allocated
    return run


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


@dataclass
class _InvalidRun:
    """Consecutive invalid units of one file, reported as one finding: a queue whose range
    covers a file of zeros (all-zero files under a broker's max offset) would otherwise give
    one finding per unit, millions of them."""

    first: int  # the first unit's position in units from the file start
    count: int
    unit: tuple[int, int, int]  # the first unit's fields

    def report(self, qid: QueueId, file: str, file_start: int, findings: Findings) -> None:
        phy, size, tags = self.unit
        offset = file_start // CQ_STORE_UNIT_SIZE + self.first
        if self.count == 1:
            detail = f"unit ({phy}, {size}, {tags}): not a valid unit inside the queue's range"
        else:
            detail = (
                f"{self.count} consecutive units, queue offsets {offset} to "
                f"{offset + self.count - 1}, the first ({phy}, {size}, {tags}): not valid "
                "units inside the queue's range"
            )
        findings.add(
            "consumequeue.invalid_unit",
            file,
            detail,
            file_position=self.first * CQ_STORE_UNIT_SIZE,
            physical_offset=phy,
            topic=qid.topic,
            queue_id=qid.queue_id,
            queue_offset=offset,
        )


def _invalid_runs(
    units: np.ndarray, at: npt.NDArray[np.int64], run: _InvalidRun | None
) -> tuple[list[_InvalidRun], _InvalidRun | None]:
    """The runs of consecutive positions in ``at`` (invalid units at those positions, in
    order), the first joined to ``run`` where it goes on from it: (the finished runs, the
    last one, which the next chunk may go on)."""
    done: list[_InvalidRun] = []
    if not len(at):
        return done, run
    breaks = np.flatnonzero(np.diff(at) != 1) + 1
    starts = np.concatenate(([0], breaks)).tolist()
    ends = [*breaks.tolist(), len(at)]
    for a, b in zip(starts, ends, strict=True):
        first = int(at[a])
        if run is not None and run.first + run.count == first:
            run.count += b - a
            continue
        if run is not None:
            done.append(run)
        u = units[a]
        run = _InvalidRun(first, b - a, (int(u["phy_offset"]), int(u["size"]), int(u["tags_code"])))
    return done, run


def _check_units(
    ctx: Context,
    qid: QueueId,
    file: str,
    file_start: int,
    units: np.ndarray,
    first: int,
    data_end: int,
    findings: Findings,
    invalid: _InvalidRun | None,
    proven: tuple[I64, I64] | None = None,
) -> _InvalidRun | None:
    """Units ``first..`` of one file (positions in units from the file start): what
    :func:`~rmqinspect.analysis.units.resolve_units` says each leads to, as findings.
    Consecutive invalid units make one finding: ``invalid`` is the run the chunk before
    ended with, and the run this one ends with is returned, not yet reported."""
    index = np.arange(first, first + len(units), dtype=np.int64)
    queue_offsets = file_start // CQ_STORE_UNIT_SIZE + index
    known = None
    if proven is not None and len(proven[0]):
        starts, ends = proven
        within = np.searchsorted(starts, queue_offsets, side="right") - 1
        known = (within >= 0) & (queue_offsets < ends[np.maximum(within, 0)])
    res = resolve_units(
        ctx.store, qid.topic, qid.queue_id, queue_offsets, units, data_end=data_end, proven=known
    )
    bad = res.codes == _CODE_INVALID
    done, invalid = _invalid_runs(units[bad], index[bad], invalid)
    for run in done:
        run.report(qid, file, file_start, findings)
    quiet = (res.codes == _CODE_FOUND) | (res.codes == _CODE_PRE_BLANK) | bad
    heard = np.flatnonzero(~quiet)
    fields = (units[name][heard].tolist() for name in ("phy_offset", "size", "tags_code"))
    for i, phy, size, tags in zip(heard.tolist(), *fields, strict=True):
        found = unit_finding(res, i, size, qid, data_end)
        if found is None:
            continue
        check, detail = found
        if not findings.room(check, file):  # a queue into copies of one record: every unit
            findings.count_more(check, file, 1)
            continue
        findings.add(
            check,
            file,
            f"unit ({phy}, {size}, {tags}): {detail}",
            file_position=int(index[i]) * CQ_STORE_UNIT_SIZE,
            physical_offset=phy,
            topic=qid.topic,
            queue_id=qid.queue_id,
            queue_offset=int(queue_offsets[i]),
        )
    return invalid


_CODE_FOUND = STATUSES.index(UnitStatus.FOUND)
_CODE_PRE_BLANK = STATUSES.index(UnitStatus.PRE_BLANK)
_CODE_INVALID = STATUSES.index(UnitStatus.INVALID)


def unit_finding(
    res: UnitResolution, i: int, size: int, qid: QueueId, data_end: int
) -> tuple[str, str] | None:
    """The check id and detail of unit ``i`` (of ``size``), which is neither found, invalid nor a
    placeholder; None when the unit itself is not at fault."""
    status = res.status(i)
    if status is UnitStatus.BEYOND_COMMITLOG:
        return "consumequeue.points_past_end", f"the commitlog's data ends at {data_end}"
    if status is UnitStatus.BELOW_COMMITLOG:
        return "consumequeue.no_record", "below the commitlog's first file"
    record = res.records.get(i)
    if status in (UnitStatus.NO_RECORD, UnitStatus.SIZE_MISMATCH) and res.record_sizes[i] != size:
        if res.record_sizes[i] < 0:
            return "consumequeue.no_record", res.details.get(i, "no message record starts there")
        return "consumequeue.size_mismatch", f"the record's TOTALSIZE is {res.record_sizes[i]}"
    if status is UnitStatus.NO_RECORD or record is None:
        # A message header of the unit's size whose fields do not add up: the record's own
        # damage, which the commitlog checks report at the record.
        return None
    place = placement(record, qid.topic, qid.queue_id)
    if not place.topic_ok:
        return "consumequeue.wrong_queue", f"the record is in {record.topic!r}"
    if not place.queue_id_ok:
        return "consumequeue.wrong_queue", f"the record is in queue {record.queue_id}"
    return (
        "consumequeue.queue_offset_mismatch",
        f"the record's queue offset is {place.queue_offset}",
    )
