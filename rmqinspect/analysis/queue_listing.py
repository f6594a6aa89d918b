"""What ``consumequeue`` lists of one queue: from where to where (the broker's bounds, or every
non-zero unit on disk), how many stale units lie past the broker's end, and the units themselves
with what each leads to."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rmqinspect.analysis.batch_units import batch_extent, batch_unit_views
from rmqinspect.analysis.queues import (
    NO_END,
    UNIT_CHUNK,
    QueueBounds,
    data_units,
    iter_unit_runs,
    queue_bounds,
)
from rmqinspect.analysis.units import UnitView, resolve_unit
from rmqinspect.errors import StoreError
from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE, units_array
from rmqinspect.store.files import FileQueue
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store


@dataclass(frozen=True, slots=True)
class QueueListing:
    bounds: QueueBounds
    start: int
    stop: int  # exclusive queue offset where the listing ends (before --limit)
    stale_after_end: int  # non-zero units on disk after maxOffset (left by truncation)


def queue_listing(
    store: Store, topic: str, queue_id: int, start: int | None, show_all: bool
) -> QueueListing:
    """Which units to list: from ``start`` (default: the first unit on disk) to the broker's
    max offset, or with ``show_all`` to the last non-zero unit in the files (the zeros after it
    hold nothing, and a sparse file may hold billions of them)."""
    qid = QueueId(topic, queue_id)
    if qid not in store.queue_dirs:
        raise StoreError(f"no consume queue {qid}", str(qid.shown_under(store.root)))
    bounds = queue_bounds(store, qid)
    if store.rocksdb_queue(qid):
        return _rocksdb_listing(store, qid, bounds, start, show_all)
    bq = store.batch_queue(qid)
    if bq is not None:
        stale, end_on_disk = batch_extent(store, bq, bounds.max_offset)
        first = bounds.first_unit if start is None else start
        return QueueListing(bounds, first, end_on_disk if show_all else bounds.max_offset, stale)
    queue = store.consume_queue_files(topic, queue_id)
    extents = {f.path: data_units(store, f) for f in queue.files}
    end_on_disk = max(
        (f.start // CQ_STORE_UNIT_SIZE + extents[f.path] for f in queue.files if extents[f.path]),
        default=0,
    )
    stale = _nonzero_units_after(store, queue, bounds.max_offset, extents)
    first = bounds.first_unit if start is None else start
    stop = end_on_disk if show_all else bounds.max_offset
    return QueueListing(bounds, first, stop, stale)


def _rocksdb_listing(
    store: Store, qid: QueueId, bounds: QueueBounds, start: int | None, show_all: bool
) -> QueueListing:
    """:func:`queue_listing` of a RocksDB-held queue: the units after maxOffset are the keys
    past the ``max`` entry (the restart does not delete them: the next dispatch overwrites)."""
    db = store.rocksdb
    assert db is not None
    q = db.queues[qid]
    end_on_disk = q.last_key + 1 if q.last_key is not None else 0
    stale = sum(len(rows) for _, rows in db.runs(qid, bounds.max_offset, NO_END, UNIT_CHUNK))
    first = bounds.first_unit if start is None else start
    return QueueListing(bounds, first, end_on_disk if show_all else bounds.max_offset, stale)


_COUNT_CHUNK_UNITS = 1 << 16


def _nonzero_units_after(
    store: Store, queue: FileQueue, max_offset: int, extents: dict[Path, int]
) -> int:
    """Non-zero units at or after ``max_offset``, counted a chunk at a time up to each file's
    last non-zero unit."""
    total = 0
    for f in queue.files:
        first = f.start // CQ_STORE_UNIT_SIZE
        end = extents[f.path]
        skip = max(max_offset - first, 0)
        if skip >= end:
            continue
        buf = store.view(f)
        try:
            units = units_array(buf)
            for lo in range(skip, end, _COUNT_CHUNK_UNITS):
                part = units[lo : min(end, lo + _COUNT_CHUNK_UNITS)]
                nonzero = (part["phy_offset"] != 0) | (part["size"] != 0) | (part["tags_code"] != 0)
                total += int(np.count_nonzero(nonzero))
            del units, part, nonzero
        finally:
            buf.release()
    return total


def list_units(
    store: Store, listing: QueueListing, topic: str, queue_id: int, limit: int | None
) -> Iterator[UnitView]:
    count = listing.stop - listing.start
    if count <= 0:
        return
    bq = store.batch_queue(QueueId(topic, queue_id))
    if bq is not None:
        everything = listing.stop > listing.bounds.max_offset
        yield from batch_unit_views(store, bq, listing.start, listing.stop, everything, limit)
        return
    n = count if limit is None else min(count, limit)
    for qoff, unit, repeat in iter_unit_runs(store, topic, queue_id, listing.start, n):
        view = resolve_unit(store, topic, queue_id, qoff, unit, check_tags=True)
        yield view if repeat == 1 else replace(view, repeat=repeat)
