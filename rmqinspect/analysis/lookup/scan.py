"""Commitlog walks for lookups: a whole-log scan, and the tail the queues do not hold yet."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis import Progress
from rmqinspect.analysis.inventory import commitlog_summary
from rmqinspect.analysis.lookup.result import Hit, LookupResult, Via
from rmqinspect.analysis.queues import (
    all_queue_bounds,
)
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.scan import Skipped
from rmqinspect.store.model import Store

# --- scanning -------------------------------------------------------------------------------------


def scan_records(
    store: Store,
    start: int | None,
    end: int | None,
    progress: Progress | None,
    topics: Sequence[str],
    select: Callable[[RecordColumns], npt.NDArray[np.bool_]] | None = None,
) -> Iterator[cl.MessageRecord]:
    """Every decodable record of ``topics`` in ``[start, end)`` (and ``select``, a mask over the
    scanner's columns, when given), CRC unchecked (forensics wants all), without its body:
    matching needs only the header and properties (see :func:`with_body`). Records are built
    only for what the columns already match."""
    opts = store.check_options(check_crc=False, read_body=False)
    last_pos = start if start is not None else max(store.commitlog.min_offset, 0)
    for f, event in store.scan(start, opts):
        if isinstance(event, Skipped):
            continue
        cols = event.columns
        keep = cols.topic_mask(topics)
        if end is not None:
            keep &= cols.positions + f.start < end
        if select is not None:
            keep &= select(cols)
        yield from cols.records(np.flatnonzero(keep), with_body=False)
        run_end = f.start + event.end
        if end is not None and run_end >= end:
            break
        if progress is not None and run_end > last_pos:
            progress(run_end - last_pos)
            last_pos = run_end


def with_body(store: Store, rec: cl.MessageRecord) -> cl.MessageRecord:
    return store.read_message(rec.position)


def readable_end_offset(store: Store) -> int:
    """Where valid records end (walking forward from the consume queues' end, CRC unchecked)."""
    return commitlog_summary(store, all_queue_bounds(store)).max_offset


def find_undispatched(
    store: Store,
    result: LookupResult,
    topic: str,
    queue_id: int,
    offset: int,
    progress: Progress | None,
) -> None:
    """Look for the record in the commitlog after the consume queues' end."""
    tail = undispatched_range(store)
    if tail is None:
        return
    result.tail_scanned = tail

    def select(cols: RecordColumns) -> npt.NDArray[np.bool_]:
        keep: npt.NDArray[np.bool_] = cols.queue_id == queue_id
        keep &= cols.queue_offset == offset
        return keep

    for rec in scan_records(store, *tail, progress, [topic], select):
        if (rec.topic, rec.queue_id, rec.queue_offset) == (topic, queue_id, offset) and (
            rec.enters_consume_queue
        ):
            result.hits.append(Hit(with_body(store, rec), Via.TAIL_SCAN, (UNDISPATCHED,)))
            return


UNDISPATCHED = "not in the consume queue on disk: stored after the last dispatched record"


def undispatched_range(store: Store) -> tuple[int, int] | None:
    """``[start, end)`` of the commitlog after the consume queues' last record: what the broker
    stored but had not dispatched (it dispatches it when it restarts); None when empty."""
    bounds = all_queue_bounds(store)
    start = max((b.last_phy_offset for b in bounds), default=-1)
    if start < 0 or store.commitlog.find(start) is None:
        start = max(store.commitlog.min_offset, 0)
    end = commitlog_summary(store, bounds).max_offset
    return (start, end) if start < end else None


def in_time(begin: int, end: int) -> Callable[[RecordColumns], npt.NDArray[np.bool_]]:
    def select(cols: RecordColumns) -> npt.NDArray[np.bool_]:
        keep: npt.NDArray[np.bool_] = cols.store_timestamp >= begin
        keep &= cols.store_timestamp <= end
        return keep

    return select


def time_tail(
    store: Store,
    topic: str,
    begin: int,
    end: int,
    result: LookupResult,
    progress: Progress | None,
) -> None:
    """The messages of ``topic`` in ``[begin, end]`` the consume queues do not hold yet."""
    tail = undispatched_range(store)
    if tail is None:
        return
    result.tail_scanned = tail
    seen = {h.record.position for h in result.hits}
    for rec in scan_records(store, *tail, progress, [topic], in_time(begin, end)):
        if rec.topic != topic or not rec.enters_consume_queue or rec.position in seen:
            continue
        if begin <= rec.store_timestamp <= end:
            result.hits.append(Hit(with_body(store, rec), Via.TAIL_SCAN, (UNDISPATCHED,)))
