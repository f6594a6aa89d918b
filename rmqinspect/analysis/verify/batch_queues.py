"""BatchConsumeQueue checks (docs/batch-consume-queue.md), both directions, as
analysis/verify/queues.py checks file units.

* Units to records (:func:`check_batch_queue`): every unit of the queue as the broker loads it
  (``BatchConsumeQueue.recover``) leads to a record of its size in its queue at its
  msgBaseOffset (the unit rule, :func:`~rmqinspect.analysis.units.resolve_units`); the record's
  ``INNER_NUM``/``INNER_BASE`` are the unit's batchSize and msgBaseOffset
  (:func:`~rmqinspect.analysis.batch_units.batch_mismatch`), and its tagsCode is the one
  dispatch computes for the record; each unit's msgBaseOffset is
  the one before's plus its batchSize (``assignBatchQueueOffset`` hands out offsets in a row:
  one going backwards or skipping is damage); units after the recovered end are stale.
* Records to units (:func:`batch_coverage`): a record of a BatchCQ topic is served by the unit
  at its queue offset; one past the queue's max offset is one the reput had not reached.
"""

from __future__ import annotations

import numpy as np

from rmqinspect.analysis.batch_units import batch_mismatch
from rmqinspect.analysis.units import STATUSES, UnitStatus, resolve_units
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.finding import Findings
from rmqinspect.analysis.verify.queues import unit_finding
from rmqinspect.errors import StoreError
from rmqinspect.format.batchcq import BCQ_STORE_UNIT_SIZE, bcq_as_file_units
from rmqinspect.format.consumequeue import EXT_MAX_ADDR
from rmqinspect.format.npbytes import I64, Mask
from rmqinspect.store.batch_queue import BatchQueue
from rmqinspect.store.layout import QueueId

_CHUNK = 1 << 14
_NO_END = 2**63
_FOUND = STATUSES.index(UnitStatus.FOUND)


def check_batch_queue(ctx: Context, qid: QueueId, data_end: int, findings: Findings) -> int:
    """Check one BatchConsumeQueue's units; returns how many it holds in its range."""
    bq = ctx.store.batch_queue(qid)
    if bq is None:
        return 0
    for f in bq.files.files:
        if f.length % BCQ_STORE_UNIT_SIZE:
            findings.add(
                "batchcq.torn_unit",
                ctx.rel(f.path),
                f"{f.length} bytes: the last {f.length % BCQ_STORE_UNIT_SIZE} are a unit cut "
                f"short of {BCQ_STORE_UNIT_SIZE} bytes, which the broker's load never reads",
                file_position=f.length - f.length % BCQ_STORE_UNIT_SIZE,
                topic=qid.topic,
                queue_id=qid.queue_id,
            )
    checked = 0
    expect: int | None = None  # the next unit's msgBaseOffset
    for c in bq.chunks(ctx.store.maps, 0, _NO_END, _CHUNK):
        file = ctx.rel(c.file.path)
        bases, sizes = c.bases, c.batch_sizes
        follows = np.empty(len(c), bool)
        follows[1:] = bases[1:] == bases[:-1] + sizes[:-1]
        follows[0] = expect is None or int(bases[0]) == expect
        for i in np.flatnonzero(~follows).tolist():
            before = expect if i == 0 else int(bases[i - 1] + sizes[i - 1])
            findings.add(
                "batchcq.base_offset",
                file,
                f"msgBaseOffset {int(bases[i])} where the unit before ends its batch at "
                f"{before}: queue offsets {'go backwards' if bases[i] < before else 'skip'}",
                file_position=int(c.positions[i]),
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=int(bases[i]),
            )
        expect = int(bases[-1] + sizes[-1])
        units = bcq_as_file_units(c.units)
        res = resolve_units(ctx.store, qid.topic, qid.queue_id, bases, units, data_end=data_end)
        for i in range(len(c)):
            phy, size = int(units["phy_offset"][i]), int(units["size"][i])
            check, detail = "", ""
            if res.codes[i] != _FOUND:
                found = unit_finding(res, i, size, qid, data_end)
                if found is not None:
                    check, detail = found[0], f"unit ({phy}, {size}): {found[1]}"
            else:
                check, detail = _record_checks(ctx, units[i], int(bases[i]), int(sizes[i]))
            if check:
                findings.add(
                    check,
                    file,
                    detail,
                    file_position=int(c.positions[i]),
                    physical_offset=phy,
                    topic=qid.topic,
                    queue_id=qid.queue_id,
                    queue_offset=int(bases[i]),
                )
        checked += len(c)
    _stale(ctx, bq, qid, findings)
    return checked


def _record_checks(ctx: Context, unit: np.void, base: int, batch_size: int) -> tuple[str, str]:
    """What the found unit's record says of it: its INNER_NUM/INNER_BASE against the unit's
    batch (``batchcq.batch_size``), else the tagsCode dispatch computes for it against the
    unit's (``consumequeue.tags_code``; ext addresses are not checked); ("", "") when both
    agree."""
    phy, tags = int(unit["phy_offset"]), int(unit["tags_code"])
    try:
        checked = ctx.store.check_at(phy, ctx.store.check_options(check_crc=False, read_body=False))
    except StoreError:
        return "", ""  # found a moment ago: the commitlog checks say what is wrong there
    if checked.record is None:
        return "", ""
    why = batch_mismatch(checked.record, base, batch_size)
    if why is not None:
        return "batchcq.batch_size", why
    if tags > EXT_MAX_ADDR and tags != checked.tags_code:
        return (
            "consumequeue.tags_code",
            f"unit tagsCode {tags}: dispatch computes {checked.tags_code}",
        )
    return "", ""


def _stale(ctx: Context, bq: BatchQueue, qid: QueueId, findings: Findings) -> None:
    """Non-zero units after the recovered end of each file."""
    for f, wrote in zip(bq.files.files, bq.wrote, strict=True):
        whole = f.length - f.length % BCQ_STORE_UNIT_SIZE
        if whole <= wrote:
            continue
        buf = ctx.store.view(f)
        try:
            raw = np.frombuffer(buf[wrote:whole], np.uint8).reshape(-1, BCQ_STORE_UNIT_SIZE)
            nonzero = np.flatnonzero(raw.any(axis=1))
            del raw
        finally:
            buf.release()
        if len(nonzero):
            at = wrote + int(nonzero[0]) * BCQ_STORE_UNIT_SIZE
            findings.add(
                "consumequeue.units_after_end",
                ctx.rel(f.path),
                f"{len(nonzero)} non-zero units after the queue's last valid unit (its max "
                f"offset is {bq.max_offset}): units truncation left, or units the broker's "
                "load drops (an invalid unit ends the queue)",
                file_position=at,
                topic=qid.topic,
                queue_id=qid.queue_id,
            )


def batch_coverage(
    ctx: Context, qid: QueueId, positions: I64, queue_offsets: I64, file: str, findings: Findings
) -> Mask | None:
    """Records of a BatchCQ queue (``positions``, their ``queue_offsets``) against its units:
    each is served by the unit at its offset, or lies past the queue's max offset: those are
    returned, for :func:`~rmqinspect.analysis.verify.queues.classify_lagging` to judge against
    the restart (None: no such queue, said here)."""
    bq = ctx.store.batch_queue(qid)
    if bq is None:
        findings.add(
            "consumequeue.missing_queue",
            f"batchconsumequeue/{qid.topic}/{qid.queue_id}",
            f"no batch consume queue for {len(positions)} record(s) of the BatchCQ topic "
            f"{qid.topic!r} from queue offset {int(queue_offsets[0])}",
            physical_offset=int(positions[0]),
            topic=qid.topic,
            queue_id=qid.queue_id,
            queue_offset=int(queue_offsets[0]),
        )
        return None
    served = ctx.batch_units(qid)
    late = queue_offsets >= bq.max_offset
    inside = np.flatnonzero(~late & (queue_offsets >= bq.min_offset))
    for i in inside.tolist():
        if served.get(int(queue_offsets[i])) != int(positions[i]):
            findings.add(
                "consumequeue.missing_unit",
                file,
                f"no unit of {qid} at queue offset {int(queue_offsets[i])} leads to this record "
                f"(the queue holds offsets {max(bq.min_offset, 0)}...{bq.max_offset - 1})",
                physical_offset=int(positions[i]),
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=int(queue_offsets[i]),
            )
    return late
