"""BatchConsumeQueue (``batchconsumequeue/<topic>/<queueId>/``, 5.x topics whose
``queue.type`` attribute is ``BatchCQ``; docs/batch-consume-queue.md) as the broker holds one
after loading it, read-only.

Its queue offsets are message offsets: one 46-byte unit serves ``[msgBaseOffset,
msgBaseOffset + batchSize)``, so a queue offset is found by the unit whose range holds it,
never by ``offset * unit size``. The load follows ``BatchConsumeQueue.recover`` (valid units
from the third-last file on; the first invalid one ends the queue), then
``reviseMinOffsetInQueue``/``reviseMaxOffsetInQueue`` and ``correctMinOffset`` against the
commitlog's first file. Units are read a file at a time and a chunk at a time: no base offset
or batch size read from a file decides an allocation or a loop's length.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.format.batchcq import BCQ_STORE_UNIT_SIZE, bcq_units_array, bcq_valid_prefix
from rmqinspect.format.npbytes import I64
from rmqinspect.store.files import FileQueue, MappedFiles, StoreFile
from rmqinspect.store.layout import QueueId


@dataclass(frozen=True, slots=True, eq=False)
class BatchChunk:
    """Consecutive units of one BCQ file, copied out of its map."""

    file: StoreFile
    position: int  # byte position of the first unit in ``file``
    units: npt.NDArray[np.void]  # BCQ_UNIT_DTYPE rows

    def __len__(self) -> int:
        return len(self.units)

    @property
    def positions(self) -> I64:
        return self.position + np.arange(len(self), dtype=np.int64) * BCQ_STORE_UNIT_SIZE

    @property
    def bases(self) -> I64:
        return self.units["msg_base_offset"].astype(np.int64)

    @property
    def batch_sizes(self) -> I64:
        return self.units["batch_size"].astype(np.int64)


@dataclass
class BatchQueue:
    """One BatchConsumeQueue after the broker's load: the bytes of each file it reads
    (``wrote``), its min and max queue offset and the end of its last unit's record."""

    qid: QueueId
    files: FileQueue
    wrote: list[int]  # readable bytes of each file after recovery (0: a file recovery drops)
    min_offset: int  # minOffsetInQueue (-1 when the first file holds no unit)
    max_offset: int  # maxOffsetInQueue: msgBaseOffset + batchSize of the last unit
    max_physic: int  # end (offset + size) of the last valid unit's record; -1 when none
    last_phy_offset: int  # start of the last valid unit's record; -1 when none
    first_base: int = -1  # msgBaseOffset of the first file's first unit (-1: none)
    min_note: str = ""

    def chunks(
        self, maps: MappedFiles, start: int, stop: int, chunk: int, *, everything: bool = False
    ) -> Iterator[BatchChunk]:
        """The units whose queue offsets meet ``[start, stop)``, in file order, at most
        ``chunk`` a piece. ``everything``: past the recovered end too (``consumequeue
        --all``)."""
        for f, wrote in zip(self.files.files, self.wrote, strict=True):
            limit = f.length if everything else wrote
            if limit < BCQ_STORE_UNIT_SIZE:
                continue
            buf = maps.view(f)
            try:
                units = bcq_units_array(buf[: limit - limit % BCQ_STORE_UNIT_SIZE])
                base = units["msg_base_offset"].astype(np.int64)
                end = base + units["batch_size"].astype(np.int64)
                # ranges, not a search: a hostile file's bases need not rise (an all-zero
                # unit serves no offset, so files' zero tails are never listed)
                picked = np.flatnonzero((end > start) & (base < stop))
                del base, end
                for a in range(0, len(picked), chunk):
                    idx = picked[a : a + chunk]
                    first = int(idx[0])
                    if int(idx[-1]) - first + 1 == len(idx):
                        rows = units[first : first + len(idx)].copy()
                        yield BatchChunk(f, first * BCQ_STORE_UNIT_SIZE, rows)
                    else:  # not consecutive (bases out of order): one unit a chunk
                        for i in idx.tolist():
                            yield BatchChunk(f, i * BCQ_STORE_UNIT_SIZE, units[i : i + 1].copy())
                del units, picked
            finally:
                buf.release()

    def unit_holding(self, maps: MappedFiles, queue_offset: int) -> BatchChunk | None:
        """The unit serving ``queue_offset`` (``getBatchMsgIndexBuffer``: msgBaseOffset <=
        offset < msgBaseOffset + batchSize), as a one-unit chunk; None when none does."""
        if not self.min_offset <= queue_offset < self.max_offset:
            return None
        for c in self.chunks(maps, queue_offset, queue_offset + 1, 1):
            return c
        return None


def load_batch_queue(
    maps: MappedFiles, qid: QueueId, files: FileQueue, commitlog_min: int
) -> BatchQueue:
    """The queue as ``BatchConsumeQueue.recover`` and ``correctMinOffset(commitlog_min)``
    leave it."""
    fs = files.files
    wrote = [f.length - f.length % BCQ_STORE_UNIT_SIZE for f in fs]
    if not fs:
        return BatchQueue(qid, files, [], -1, 0, -1, -1)
    index = max(len(fs) - 3, 0)
    last_phy = -1
    last_end = -1
    while index < len(fs):
        f = fs[index]
        buf = maps.view(f)
        try:
            units = bcq_units_array(buf[: min(f.length, files.file_size)])
            valid = bcq_valid_prefix(units)
            if valid:
                last_phy = int(units["phy_offset"][valid - 1])
                last_end = last_phy + int(units["size"][valid - 1])
            del units
        finally:
            buf.release()
        wrote[index] = valid * BCQ_STORE_UNIT_SIZE
        if wrote[index] < files.file_size:
            # truncateDirtyFiles: the files after the recovered end are dropped
            for later in range(index + 1, len(fs)):
                wrote[later] = 0
            break
        index += 1
    q = BatchQueue(qid, files, wrote, -1, 0, last_end, last_phy)
    _revise(maps, q)
    _correct_min(maps, q, commitlog_min)
    return q


def _unit(maps: MappedFiles, f: StoreFile, position: int) -> npt.NDArray[np.void]:
    buf = maps.view(f)
    try:
        return bcq_units_array(buf[position : position + BCQ_STORE_UNIT_SIZE]).copy()
    finally:
        buf.release()


def _revise(maps: MappedFiles, q: BatchQueue) -> None:
    """``reviseMinOffsetInQueue`` (the first file's first unit's base; -1 when it holds none)
    and ``reviseMaxOffsetInQueue`` (the last unit's base + batchSize, of the last file or, when
    it holds none, the one before; 0 when neither does)."""
    first = q.files.files[0]
    if q.wrote[0] >= BCQ_STORE_UNIT_SIZE:
        q.min_offset = q.first_base = int(_unit(maps, first, 0)["msg_base_offset"][0])
    candidates = list(zip(q.files.files, q.wrote, strict=True))[-2:][::-1]
    for f, w in candidates:
        if w >= BCQ_STORE_UNIT_SIZE:
            u = _unit(maps, f, w - BCQ_STORE_UNIT_SIZE)
            q.max_offset = int(u["msg_base_offset"][0]) + int(u["batch_size"][0])
            break


def _correct_min(maps: MappedFiles, q: BatchQueue, commitlog_min: int) -> None:
    """``correctMinOffset``: each unit of the first file whose record lies below the
    commitlog's first file moves the min past its batch (no validity test, as the broker)."""
    first, wrote = q.files.files[0], q.wrote[0]
    if wrote < BCQ_STORE_UNIT_SIZE:
        return
    buf = maps.view(first)
    try:
        units = bcq_units_array(buf[:wrote])
        below = units["phy_offset"] < commitlog_min
        n = len(below) if below.all() else int(np.argmin(below))
        if n:
            u = units[n - 1]
            q.min_offset = int(u["msg_base_offset"]) + int(u["batch_size"])
            q.min_note = f"the first {n} unit(s) point below the commitlog's first file"
        del units, below
    finally:
        buf.release()
