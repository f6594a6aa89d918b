"""Consume-queue checks, both directions (like pg_amcheck's heapallindexed).

* Units to records (:func:`check_queue_file`): every unit of a queue's range ``[minOffset,
  maxOffset)`` (as :func:`~rmqinspect.analysis.queues.loaded_queue` loads it) leads to a record
  with the unit's size, the queue's topic and queue id and the unit's queue offset. Records are
  judged by :func:`~rmqinspect.analysis.units.resolve_units` (the rule ``consumequeue``,
  ``lookup`` and the export use), whose statuses map to check ids. Pre-blank placeholders are
  the spec's exception; an LMQ unit leads to a record that names the queue in
  ``INNER_MULTI_DISPATCH`` with that offset.
* Records to units: :mod:`.coverage` (:class:`QueueCoverage`, :func:`classify_lagging`,
  re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis.units import (
    STATUSES,
    UnitResolution,
    UnitStatus,
    placement,
    resolve_units,
)
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.coverage import Lagging, QueueCoverage, classify_lagging, queue_dir
from rmqinspect.analysis.verify.finding import Findings, layout_check
from rmqinspect.format.consumequeue import (
    CQ_STORE_UNIT_SIZE,
    CQ_UNIT_DTYPE,
    units_array,
)
from rmqinspect.format.npbytes import I64
from rmqinspect.store.files import StoreFile
from rmqinspect.store.layout import QueueId

__all__ = [
    "Lagging",
    "QueueCoverage",
    "check_queue_file",
    "check_queue_layout",
    "check_rocksdb_queue",
    "classify_lagging",
    "queue_dir",
    "unit_finding",
]

_CHUNK = 1 << 16  # units checked per gather
Report = Callable[[str, int, str], None]  # (check, unit index in the chunk, detail)


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
        if known.all():
            # The walk read each of these records through this very unit: a valid unit inside
            # the data of a commitlog file, so no earlier rule of resolve_units can overrule
            # it and every one is found. The chunk reports nothing and ends no invalid run.
            return invalid
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
