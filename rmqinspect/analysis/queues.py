"""Consume queues as the broker sees them: offset bounds per queue, units and what they point to.

Bounds follow the broker's load path rather than file names: ``maxOffsetInQueue`` is where
``ConsumeQueue.recover`` stops (first invalid unit, scanning from the third-last file) and
``minOffsetInQueue`` is what ``correctMinOffset`` derives from the commitlog's first file.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import StoreError
from rmqinspect.format.batchcq import bcq_as_file_units
from rmqinspect.format.consumequeue import (
    CQ_STORE_UNIT_SIZE,
    PRE_BLANK_SIZE,
    pre_blank_mask,
    units_array,
)
from rmqinspect.format.npbytes import I64
from rmqinspect.format.rocksdb_cq import as_file_units
from rmqinspect.format.scan import data_extent
from rmqinspect.store.batch_queue import BatchChunk, BatchQueue
from rmqinspect.store.consume_queue import ConsumeQueue, CorrectMinOffsetError
from rmqinspect.store.files import StoreFile
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store
from rmqinspect.store.rocksdb_queue import max_offset_in_queue, min_offset_in_queue
from rmqinspect.store.rocksdb_restart import RocksRestartQueue


@dataclass(frozen=True, slots=True)
class QueueBounds:
    """One consume queue's offsets as the broker would report them after loading it."""

    topic: str
    queue_id: int
    file_count: int
    bytes: int
    min_offset: int  # minOffsetInQueue
    max_offset: int  # maxOffsetInQueue: the next queue offset to be written
    first_unit: int  # unit index of the first file's first unit (file name / 20)
    pre_blank_units: int  # fillPreBlank placeholders in the first file
    max_physic_offset: int  # end (offset + size) of the last valid unit; -1 for an empty queue
    last_phy_offset: int  # start of the last valid non-placeholder unit's record; -1 when none
    gaps: tuple[tuple[int, int], ...] = ()  # missing unit ranges [start, end) between files
    min_note: str = ""  # why min_offset is not simply the first unit

    @property
    def message_count(self) -> int:
        return max(self.max_offset - self.min_offset, 0)


def queue_bounds(
    store: Store,
    qid: QueueId,
    load: Callable[[Store, QueueId], tuple[ConsumeQueue, str]] | None = None,
    proven: Callable[[int, int], bool] | None = None,
    held: Callable[[int], tuple[int, int] | None] | None = None,
) -> QueueBounds:
    """The queue's bounds as the broker computes them when it loads the store unchanged:
    ``ConsumeQueue.recover``, then ``correctMinOffset`` against the commitlog's first file
    (both from :class:`ConsumeQueue`, the model the recovery emulation uses too). A queue the
    RocksDB consume queue holds: its offset family's entries as the broker reads them. A
    BatchConsumeQueue: ``BatchConsumeQueue.recover`` and ``correctMinOffset`` (its offsets are
    message offsets, ``first_unit`` the first unit's msgBaseOffset). ``load``: the caller's
    :func:`loaded_queue`, where it holds the queue loaded already; ``proven(lo, hi)``: whether
    the caller saw every unit of queue offsets ``[lo, hi)`` lead to its record (none of them is
    a placeholder, so the first file's need not be counted); ``held(queue_offset)``: the
    (phyOffset, size) of that unit where the caller holds it read already, else None."""
    if store.rocksdb_queue(qid):
        return _rocksdb_bounds(store, qid)
    bq = store.batch_queue(qid)
    if bq is not None:
        return _batch_bounds(qid, bq)
    queue = store.consume_queue_files(qid.topic, qid.queue_id)
    files = queue.files
    total_bytes = sum(f.length for f in files)
    gaps = tuple((a // CQ_STORE_UNIT_SIZE, b // CQ_STORE_UNIT_SIZE) for a, b in queue.gaps())
    if not files:
        return QueueBounds(qid.topic, qid.queue_id, 0, 0, 0, 0, 0, 0, -1, -1, gaps)
    model, note = (load or loaded_queue)(store, qid)
    max_offset = model.max_offset_in_queue
    min_offset = model.min_offset_in_queue
    first = files[0]
    first_unit = first.start // CQ_STORE_UNIT_SIZE
    readable = model.files[0].wrote // CQ_STORE_UNIT_SIZE if model.files else 0
    if proven is not None and proven(first_unit, first_unit + readable):
        pre_blank, blanks_before_min = 0, 0
    else:
        pre_blank, blanks_before_min = _pre_blanks(store, first, model, min_offset - first_unit)
    if not note and min_offset < first_unit:
        note = "no unit of the first file points into the commitlog; 4.9 keeps minOffset 0"
    elif not note and min_offset > first_unit:
        if min_offset >= max_offset:
            note = "no unit points into the commitlog: minOffset = maxOffset"
        elif blanks_before_min == min_offset - first_unit:
            note = f"units {first_unit}..{min_offset - 1} are fillPreBlank placeholders"
        else:
            note = f"units before {min_offset} point below the commitlog's first file"
    last = _last_valid_unit(model, held)
    last_phy = -1
    if last is not None and last != (0, PRE_BLANK_SIZE):
        last_phy = last[0]
    return QueueBounds(
        qid.topic,
        qid.queue_id,
        len(files),
        total_bytes,
        min_offset,
        max_offset,
        first_unit,
        pre_blank,
        model.max_physic,
        last_phy,
        gaps,
        note,
    )


def _rocksdb_bounds(store: Store, qid: QueueId) -> QueueBounds:
    """``getMinOffsetInQueue``/``getMaxOffsetInQueue`` of a RocksDB-held queue
    (docs/rocksdb-consume-queue.md §4); it has no files."""
    db = store.rocksdb
    assert db is not None
    q = db.queues[qid]
    min_offset, note = min_offset_in_queue(db, q, store.commitlog.min_offset)
    max_physic = last_phy = -1
    if q.max_entry is not None:
        last_phy = q.max_entry[0]
        unit = db.unit(qid, q.max_entry[1])
        if unit is not None:
            max_physic = int(unit["phy_offset"][0]) + int(unit["size"][0])
    first = q.first_key if q.first_key is not None else min_offset
    return QueueBounds(
        qid.topic,
        qid.queue_id,
        0,
        0,
        min_offset,
        max_offset_in_queue(q),
        first,
        0,
        max_physic,
        last_phy,
        (),
        note,
    )


def _batch_bounds(qid: QueueId, bq: BatchQueue) -> QueueBounds:
    files = bq.files.files
    # minOffsetInQueue is -1 for a queue whose first file holds no unit: nothing to consume
    min_offset = bq.min_offset if bq.min_offset >= 0 else bq.max_offset
    return QueueBounds(
        qid.topic,
        qid.queue_id,
        len(files),
        sum(f.length for f in files),
        min_offset,
        bq.max_offset,
        bq.first_base if bq.first_base >= 0 else min_offset,
        0,
        bq.max_physic,
        bq.last_phy_offset,
        (),
        bq.min_note,
    )


def loaded_queue(store: Store, qid: QueueId) -> tuple[ConsumeQueue, str]:
    """The queue as the broker holds it after loading the store unchanged
    (``ConsumeQueue.recover``, then ``correctMinOffset`` against the commitlog's first file),
    and why the broker fails to load it ("" when it loads). A RocksDB-held queue: its rows up
    to the ``max`` entry, its min offset ``getMinCqOffset``'s (store/rocksdb_restart.py)."""
    if store.rocksdb is not None and store.rocksdb_queue(qid):
        rq = RocksRestartQueue(
            store.maps, store.rocksdb, store.rocksdb.queues[qid], store.cq_file_size
        )
        rq.recover()
        rq.correct_min_offset(store.commitlog.min_offset, True)
        return rq, ""
    queue = store.consume_queue_files(qid.topic, qid.queue_id)
    model = ConsumeQueue(store.maps, qid.topic, qid.queue_id, queue.files, queue.file_size)
    model.recover()
    try:
        model.correct_min_offset(
            store.commitlog.min_offset, store.profile.profile.correct_min_offset_binary_search
        )
    except CorrectMinOffsetError as err:
        return model, f"the broker fails to load: {err}"
    return model, ""


def _pre_blanks(
    store: Store, first: StoreFile, model: ConsumeQueue, before: int
) -> tuple[int, int]:
    """fillPreBlank placeholders among the first file's readable units: in all, and among the
    first ``before`` of them."""
    readable = model.files[0].wrote if model.files else 0
    buf = store.view(first)
    try:
        units = units_array(buf)[: readable // CQ_STORE_UNIT_SIZE]
        blank = pre_blank_mask(units)
        total = int(np.count_nonzero(blank))
        head = int(np.count_nonzero(blank[: max(before, 0)]))
        del units, blank
    finally:
        buf.release()
        # Every unit was read: drop them, or each queue asked stays resident to the end.
        store.maps.release(first, 0, first.length)
    return total, head


def _last_valid_unit(
    model: ConsumeQueue, held: Callable[[int], tuple[int, int] | None] | None = None
) -> tuple[int, int] | None:
    """(offset, size) of the unit before the queue's read position, if any; ``held``: see
    :func:`queue_bounds`."""
    if not model.files:
        return None
    last = model.files[-1]
    if last.wrote < CQ_STORE_UNIT_SIZE:
        if len(model.files) < 2:
            return None
        last = model.files[-2]
        if last.wrote < CQ_STORE_UNIT_SIZE:
            return None
    found = held((last.start + last.wrote) // CQ_STORE_UNIT_SIZE - 1) if held else None
    if found is not None:
        return found
    phy, size, _ = model.unit(last, last.wrote - CQ_STORE_UNIT_SIZE)
    return phy, size


def all_queue_bounds(store: Store) -> list[QueueBounds]:
    return [queue_bounds(store, qid) for qid in store.queue_dirs]


# --- units -------------------------------------------------------------------------------------


def unit_at(store: Store, topic: str, queue_id: int, queue_offset: int) -> tuple[int, int, int]:
    """The raw (phyOffset, size, tagsCode) of one unit; StoreError when no file holds it."""
    return unit_holding(store, topic, queue_id, queue_offset)[1]


def unit_holding(
    store: Store, topic: str, queue_id: int, queue_offset: int
) -> tuple[int, tuple[int, int, int]]:
    """The unit serving ``queue_offset`` and the queue offset it is written for: the offset
    itself, except in a BatchConsumeQueue, where a unit serves ``[msgBaseOffset,
    msgBaseOffset + batchSize)`` and its record is written at msgBaseOffset. StoreError when
    none does."""
    qid = QueueId(topic, queue_id)
    bq = store.batch_queue(qid)
    if bq is not None:
        c = bq.unit_holding(store.maps, queue_offset)
        if c is None:
            raise StoreError(
                f"no batch consume queue unit of {qid} serves queue offset {queue_offset} "
                f"(it serves [{max(bq.min_offset, 0)}, {bq.max_offset}))",
                str(bq.files.directory),
            )
        u = c.units[0]
        return int(u["msg_base_offset"]), (
            int(u["phy_offset"]),
            int(u["size"]),
            int(u["tags_code"]),
        )
    return queue_offset, _unit_at(store, qid, queue_offset)


def _unit_at(store: Store, qid: QueueId, queue_offset: int) -> tuple[int, int, int]:
    topic, queue_id = qid.topic, qid.queue_id
    if store.rocksdb_queue(qid):
        assert store.rocksdb is not None
        unit = store.rocksdb.unit(qid, queue_offset)
        if unit is None:
            raise StoreError(
                f"the RocksDB consume queue holds no unit at queue offset {queue_offset} of {qid}",
                str(store.rocksdb.directory),
            )
        return int(unit["phy_offset"][0]), int(unit["size"][0]), int(unit["tags_code"][0])
    queue = store.consume_queue_files(topic, queue_id)
    byte_offset = queue_offset * CQ_STORE_UNIT_SIZE
    f = queue.find(byte_offset) if queue_offset >= 0 else None
    if f is None or byte_offset - f.start + CQ_STORE_UNIT_SIZE > f.length:
        raise StoreError(
            f"no consume queue file holds queue offset {queue_offset} of {topic}/{queue_id}",
            str(queue.directory),
        )
    units = _file_units(store, f, byte_offset - f.start, 1)
    return units[0]


@dataclass(frozen=True, slots=True, eq=False)
class UnitChunk:
    """Consecutive units of one queue file, copied out of its map."""

    file: StoreFile  # the file read, which is not always where the configured size puts them
    first_queue_offset: int
    position: int  # byte position of the first unit in ``file``
    units: npt.NDArray[np.void]  # CQ_UNIT_DTYPE rows
    # A BatchConsumeQueue's units: each one's msgBaseOffset and batchSize (a unit serves
    # batchSize offsets from its base, so offsets are not first + index).
    batch: BatchChunk | None = None

    def __len__(self) -> int:
        return len(self.units)

    @property
    def queue_offsets(self) -> I64:
        if self.batch is not None:
            return self.batch.bases
        return self.first_queue_offset + np.arange(len(self), dtype=np.int64)

    @property
    def positions(self) -> I64:
        if self.batch is not None:
            return self.batch.positions
        return self.position + np.arange(len(self), dtype=np.int64) * CQ_STORE_UNIT_SIZE


UNIT_CHUNK = 8192  # units per chunk: bounds the memory a chunk and what is built from it take


def iter_unit_chunks(
    store: Store, topic: str, queue_id: int, start: int, limit: int | None, chunk: int = UNIT_CHUNK
) -> Iterator[UnitChunk]:
    """The queue's units from queue offset ``start`` over its files, at most ``limit``, in
    chunks of at most ``chunk`` units that never span two files (RocksDB: nor a missing key).
    A BatchConsumeQueue: the units serving the queue offsets ``[start, start + limit)``."""
    if store.rocksdb_queue(QueueId(topic, queue_id)):
        yield from _rocksdb_chunks(store, QueueId(topic, queue_id), start, limit, chunk)
        return
    bq = store.batch_queue(QueueId(topic, queue_id))
    if bq is not None:
        yield from _batch_chunks(store, bq, start, limit, chunk)
        return
    queue = store.consume_queue_files(topic, queue_id)
    left = limit
    for f in queue.files:
        first_unit = f.start // CQ_STORE_UNIT_SIZE
        count = f.length // CQ_STORE_UNIT_SIZE
        if first_unit + count <= start:
            continue
        skip = max(start - first_unit, 0)
        n = count - skip if left is None else min(count - skip, left)
        yield from _file_chunks(store, f, skip, n, chunk)
        if left is not None:
            left -= n
            if left <= 0:
                return


NO_END = 2**63  # past every queue offset


def _rocksdb_chunks(
    store: Store, qid: QueueId, start: int, limit: int | None, chunk: int
) -> Iterator[UnitChunk]:
    """Runs of consecutive units of a RocksDB-held queue, as file units; ``file`` names the
    database's directory."""
    db = store.rocksdb
    assert db is not None
    stop = NO_END if limit is None else start + limit
    where = StoreFile(db.directory, 0, 0)
    for first, rows in db.runs(qid, start, stop, chunk):
        yield UnitChunk(where, first, 0, as_file_units(rows))


def _batch_chunks(
    store: Store,
    bq: BatchQueue,
    start: int,
    limit: int | None,
    chunk: int,
    *,
    all_units: bool = False,
) -> Iterator[UnitChunk]:
    """The BatchConsumeQueue's units serving ``[start, start + limit)``, as file units with
    their bases and batch sizes."""
    stop = NO_END if limit is None else start + limit
    for c in bq.chunks(store.maps, start, stop, chunk, everything=all_units):
        yield UnitChunk(c.file, int(c.bases[0]), c.position, bcq_as_file_units(c.units), c)


def _file_chunks(
    store: Store, f: StoreFile, skip: int, n: int, chunk: int = UNIT_CHUNK
) -> Iterator[UnitChunk]:
    """Units ``skip .. skip + n`` of ``f`` in chunks of at most ``chunk``."""
    first_unit = f.start // CQ_STORE_UNIT_SIZE
    for done in range(0, n, chunk):
        at = (skip + done) * CQ_STORE_UNIT_SIZE
        take = min(chunk, n - done)
        buf = store.view(f)
        try:
            units = units_array(buf[at : at + take * CQ_STORE_UNIT_SIZE]).copy()
        finally:
            buf.release()
            # Copied: the pages are dropped, or every queue file read stayed resident (the
            # export's consume_queue table: 144 MB of an 8 GiB store's in a worker).
            # From the page the chunk starts in: the chunk before it ended there.
            store.maps.release(f, at - at % mmap.PAGESIZE, at + take * CQ_STORE_UNIT_SIZE)
        yield UnitChunk(f, first_unit + skip + done, at, units)


UnitRun = tuple[int, tuple[int, int, int], int]  # (queue offset, unit, how many in a row)


def iter_unit_runs(
    store: Store, topic: str, queue_id: int, start: int, limit: int | None
) -> Iterator[UnitRun]:
    """The queue's units from queue offset ``start``, at most ``limit``, one at a time, except
    that consecutive all-zero units, across files too, come as one run: (queue offset of the
    first, ``(0, 0, 0)``, how many). Units past a file's last non-zero one are zeros without
    being read, so a range over sparse 6 MB files of zeros costs a few system calls a file,
    not 300,000 units each."""
    pending: UnitRun | None = None
    for qoff, unit, n in _file_runs(store, topic, queue_id, start, limit):
        if (
            pending is not None
            and unit == pending[1] == _ZERO_UNIT
            and pending[0] + pending[2] == qoff
        ):
            pending = (pending[0], unit, pending[2] + n)
            continue
        if pending is not None:
            yield pending
        pending = (qoff, unit, n)
    if pending is not None:
        yield pending


_ZERO_UNIT = (0, 0, 0)


def _file_runs(
    store: Store, topic: str, queue_id: int, start: int, limit: int | None
) -> Iterator[UnitRun]:
    """:func:`iter_unit_runs` before runs that meet at a chunk's or a file's edge are joined.
    A BatchConsumeQueue's unit comes as (msgBaseOffset, unit, batchSize): it serves that many
    offsets."""
    # The same precedence as iter_unit_chunks: RocksDB rows, then a BatchConsumeQueue.
    if store.rocksdb_queue(QueueId(topic, queue_id)):
        for c in iter_unit_chunks(store, topic, queue_id, start, limit):
            yield from _chunk_runs(c)
        return
    if store.batch_queue(QueueId(topic, queue_id)) is not None:
        for c in iter_unit_chunks(store, topic, queue_id, start, limit):
            assert c.batch is not None
            for base, n, u in zip(
                c.batch.bases.tolist(), c.batch.batch_sizes.tolist(), c.units, strict=True
            ):
                yield base, (int(u["phy_offset"]), int(u["size"]), int(u["tags_code"])), n
        return
    queue = store.consume_queue_files(topic, queue_id)
    left = limit
    for f in queue.files:
        first_unit = f.start // CQ_STORE_UNIT_SIZE
        count = f.length // CQ_STORE_UNIT_SIZE
        if first_unit + count <= start:
            continue
        skip = max(start - first_unit, 0)
        n = count - skip if left is None else min(count - skip, left)
        read_to = min(max(data_units(store, f), skip), skip + n)  # zeros past it
        for c in _file_chunks(store, f, skip, read_to - skip):
            yield from _chunk_runs(c)
        if read_to < skip + n:
            yield first_unit + read_to, _ZERO_UNIT, skip + n - read_to
        if left is not None:
            left -= n
            if left <= 0:
                return


def _chunk_runs(c: UnitChunk) -> Iterator[UnitRun]:
    """Each non-zero unit of the chunk, and each run of zero units as one."""
    zero = (c.units["phy_offset"] == 0) & (c.units["size"] == 0) & (c.units["tags_code"] == 0)
    # where a run of zeros or a non-zero unit starts
    edges = np.flatnonzero(~zero | np.concatenate(([True], ~zero[:-1]))).tolist()
    ends = [*edges[1:], len(c)]
    for a, b in zip(edges, ends, strict=True):
        u = c.units[a]
        unit = (int(u["phy_offset"]), int(u["size"]), int(u["tags_code"]))
        yield c.first_queue_offset + a, unit, b - a


def _file_units(
    store: Store, f: StoreFile, byte_start: int, count: int
) -> list[tuple[int, int, int]]:
    buf = store.view(f)
    try:
        part = units_array(buf[byte_start : byte_start + count * CQ_STORE_UNIT_SIZE])
        rows = [
            (int(p), int(s), int(t))
            for p, s, t in zip(part["phy_offset"], part["size"], part["tags_code"], strict=True)
        ]
        del part
        return rows
    finally:
        buf.release()


def data_units(store: Store, f: StoreFile) -> int:
    """Units of ``f`` up to its last non-zero one (holes never read)."""
    buf = store.view(f)
    try:
        extent = data_extent(buf, 0, store.maps.data_end(f))
        whole = len(buf) // CQ_STORE_UNIT_SIZE
    finally:
        buf.release()
    return min(-(-extent // CQ_STORE_UNIT_SIZE), whole)
