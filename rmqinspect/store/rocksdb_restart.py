"""A queue the RocksDB consume queue holds, as the restarting broker holds it: the one home of
the RocksDB restart rules (docs/rocksdb-consume-queue.md §5).

:class:`RocksRestartQueue` is a :class:`~rmqinspect.store.consume_queue.MemoryQueue` whose
units are the database's rows up to the queue's ``max`` entry, copied into in-memory files of
the configured size (no file on disk backs them), so that the restart emulation's dispatch,
serving and loss search read it as they read a file queue. What differs is the broker's:

- ``recover``: nothing is rebuilt (``RocksDBConsumeQueueStore.recover`` only reads
  ``getMaxPhyOffsetInConsumeQueue``); the queue ends at its ``max`` entry + 1;
- ``truncate_dirty_logic``: ``RocksDBConsumeQueueOffsetTable.truncateDirty`` moves a ``max``
  entry at or past the recovered end back to the last unit below it (``correctMaxCqOffset``);
  the rows past it stay, to be overwritten;
- ``correct_min_offset``: ``getMinCqOffset`` (store/rocksdb_queue.py);
- ``put``: ``RocksDBConsumeQueueTable.buildAndPutCQByteBuffer`` writes the row at its queue
  offset, whatever was there, and the ``max`` entry follows the last row (no pre-blank, no
  skip of a repeated build).
"""

from __future__ import annotations

import struct

from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE
from rmqinspect.format.javamath import wrap64
from rmqinspect.format.rocksdb_cq import as_file_units
from rmqinspect.store.consume_queue import MemoryQueue
from rmqinspect.store.files import MappedFiles
from rmqinspect.store.rocksdb_queue import (
    RocksConsumeQueues,
    RocksQueue,
    max_offset_in_queue,
    min_offset_in_queue,
)

_UNIT = struct.Struct(">qiq")
_RUN = 8192  # rows read from the database at a time


class RocksRestartQueue(MemoryQueue):
    """One RocksDB-held queue through the restart; ``files`` are in memory only."""

    def __init__(
        self, maps: MappedFiles, db: RocksConsumeQueues, q: RocksQueue, file_size: int
    ) -> None:
        super().__init__(maps, q.qid.topic, q.qid.queue_id, [], file_size)
        self.db = db
        self.rocks = q
        # Only the rows up to the max entry: those past it are stale rows the broker never
        # serves (the dispatch overwrites them), and a key far out costs nothing here.
        end = max_offset_in_queue(q)
        for first, rows in db.runs(q.qid, 0, end, _RUN):
            data = as_file_units(rows).tobytes()
            pos = first * CQ_STORE_UNIT_SIZE
            while data:  # a run may cross a file's end
                take = self.file_size - pos % self.file_size
                self._slot(pos, data[:take])
                pos, data = pos + take, data[take:]
        self._end_at(end * CQ_STORE_UNIT_SIZE)

    @property
    def existed(self) -> bool:
        """The database holds a ``max`` entry or rows for the queue."""
        return self.rocks.max_entry is not None or self.rocks.first_key is not None

    def recover(self) -> None:
        """``RocksDBConsumeQueueStore.recover``: nothing is read back but the end of the last
        row (maxPhysicOffset from the ``max`` entry's unit)."""
        self.max_physic = self._end_of_last_unit()

    def truncate_dirty_logic(self, phy_offset: int) -> None:
        """``RocksDBConsumeQueueOffsetTable.truncateDirtyOffset`` → ``correctMaxCqOffset``: the
        ``max`` entry moves back to the last unit below ``phy_offset`` (when its own unit is
        at or past it); the rows after it stay in the database, counted as truncated since
        the broker no longer serves them."""
        end = self.max_offset
        if end <= self.min_logic or self._unit_at(end - CQ_STORE_UNIT_SIZE)[0] < phy_offset:
            return
        keep = end
        while keep > self.min_logic:
            phy, size, _ = self._unit_at(keep - CQ_STORE_UNIT_SIZE)
            if size > 0 and phy < phy_offset:
                break
            keep -= CQ_STORE_UNIT_SIZE
        self.counters.truncated += (end - keep) // CQ_STORE_UNIT_SIZE
        self._end_at(keep)
        self.max_physic = self._end_of_last_unit()

    def correct_min_offset(self, min_phy: int, binary_search: bool) -> None:
        """``getMinCqOffset(commitLog.minOffset)`` as the database answers it (the ``min``
        entry, else ``correctMinCqOffset``'s search); its note is store/rocksdb_queue.py's."""
        if not self.files:
            self.min_logic = 0
            return
        found, _ = min_offset_in_queue(self.db, self.rocks, min_phy)
        self.min_logic = min(found * CQ_STORE_UNIT_SIZE, self.max_offset)

    def put(self, phy: int, size: int, tags_code: int, cq_offset: int, phase: str) -> None:
        """The dispatch's row at ``cq_offset`` (overwriting), and the ``max`` entry on it."""
        pos = wrap64(cq_offset * CQ_STORE_UNIT_SIZE)
        if pos < 0:
            return  # no key the broker's ByteBuffer could build; the dispatch request fails
        self._slot(pos, _UNIT.pack(phy, size, tags_code))
        self._end_at(pos + CQ_STORE_UNIT_SIZE)
        self.max_physic = wrap64(phy + size)
        self.counters.written[phase] = self.counters.written.get(phase, 0) + 1

    def destroy(self) -> None:
        """No commitlog left: the database's queue is emptied (``destroy``)."""
        self.counters.truncated += self.max_offset_in_queue - self.min_offset_in_queue
        self.files.clear()
        self.max_physic = -1
        self.min_logic = 0

    # internals --------------------------------------------------------------------------------

    def _end_of_last_unit(self) -> int:
        if not self.files or self.max_offset <= 0:
            return -1
        phy, size, _ = self._unit_at(self.max_offset - CQ_STORE_UNIT_SIZE)
        return wrap64(phy + size) if size > 0 else -1
