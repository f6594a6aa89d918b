"""A BatchConsumeQueue as the restarting broker holds it: the one home of its restart rules
(docs/batch-consume-queue.md §4-5).

:class:`BatchRestartQueue` is a :class:`~rmqinspect.store.consume_queue.MemoryQueue` whose
slot ``n`` (20 bytes, in in-memory files of the configured size) holds the unit whose
msgBaseOffset is ``n``: a record of a BatchCQ topic is written at its base (its QUEUEOFFSET
and ``INNER_BASE``), so the restart emulation's serving test and loss search find it there as
in a file queue. The slots a batch's other offsets take stay empty; the queue's end is the last
unit's msgBaseOffset + batchSize (``reviseMaxOffsetInQueue``). The broker's steps:

- the load (``BatchConsumeQueue.recover``, ``reviseMin/MaxOffsetInQueue``,
  ``correctMinOffset``): :func:`~rmqinspect.store.batch_queue.load_batch_queue`;
- ``truncate_dirty_logic`` (``BatchConsumeQueue.truncateDirtyLogicFiles``): units whose
  phyOffset is at or past the recovered end go, from the last one back;
- ``put`` (``putBatchMessagePositionInfo``): the dispatch request's msgBaseOffset and
  batchSize come from the record's ``INNER_BASE``/``INNER_NUM`` (``setBatchSizeIfNeeded``);
  a record without both is dropped (``putMessagePositionInfoWrapper``: a negative base).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE
from rmqinspect.format.javamath import wrap64
from rmqinspect.store.batch_queue import BatchQueue
from rmqinspect.store.consume_queue import MemoryQueue
from rmqinspect.store.files import MappedFiles

_UNIT = struct.Struct(">qiq")
_RUN = 8192  # units read at a time
# (msgBaseOffset, batchSize) a record's INNER_BASE and INNER_NUM give the dispatch, or None
InnerBatch = Callable[[int], "tuple[int, int] | None"]


class BatchRestartQueue(MemoryQueue):
    """One BatchConsumeQueue through the restart; ``files`` are in memory only."""

    def __init__(
        self, maps: MappedFiles, bq: BatchQueue, file_size: int, inner: InnerBatch
    ) -> None:
        super().__init__(maps, bq.qid.topic, bq.qid.queue_id, [], file_size)
        self.inner = inner
        self.batches: dict[int, int] = {}  # msgBaseOffset -> batchSize of each kept unit
        self.end = 0  # maxOffsetInQueue
        for c in bq.chunks(maps, 0, 2**63, _RUN):
            for u, base, n in zip(c.units, c.bases.tolist(), c.batch_sizes.tolist(), strict=True):
                self._place(base, int(u["phy_offset"]), int(u["size"]), int(u["tags_code"]), n)
        self.end = bq.max_offset
        self.max_physic = bq.max_physic
        self.min_logic = max(bq.min_offset, 0) * CQ_STORE_UNIT_SIZE
        self._sync()

    @property
    def max_offset(self) -> int:
        """``getMaxOffsetInQueue`` in slot bytes: the last unit's base + batchSize."""
        return self.end * CQ_STORE_UNIT_SIZE

    def recover(self) -> None:
        """Done by the load (store/batch_queue.py)."""

    def truncate_dirty_logic(self, phy_offset: int) -> None:
        """``BatchConsumeQueue.truncateDirtyLogicFiles``: the units at or past ``phy_offset``
        go, the last kept one's batch ends the queue."""
        for base in sorted(self.batches, reverse=True):
            phy, size, _ = self._unit_at(base * CQ_STORE_UNIT_SIZE)
            if phy < phy_offset:
                self.end = base + self.batches[base]
                self.max_physic = wrap64(phy + size)
                break
            self._clear(base)
            self.counters.truncated += 1
        else:
            self.end = self.min_logic // CQ_STORE_UNIT_SIZE
            self.max_physic = -1
        self._sync()

    def correct_min_offset(self, min_phy: int, binary_search: bool) -> None:
        """The load corrected it; nothing the restart moves changes it."""

    def put(self, phy: int, size: int, tags_code: int, cq_offset: int, phase: str) -> None:
        """The dispatch's unit at the record's ``INNER_BASE`` with its ``INNER_NUM``."""
        if wrap64(phy + size) <= self.max_physic:
            return
        batch = self.inner(phy)
        if batch is None or batch[0] < 0 or batch[1] <= 0:
            return
        base, n = batch
        self._place(base, phy, size, tags_code, n)
        self.end = base + n
        self.max_physic = wrap64(phy + size)
        self.counters.written[phase] = self.counters.written.get(phase, 0) + 1
        self._sync()

    def destroy(self) -> None:
        self.counters.truncated += len(self.batches)
        self.batches.clear()
        self.files.clear()
        self.end = 0
        self.max_physic = -1
        self.min_logic = 0

    # internals --------------------------------------------------------------------------------

    def _place(self, base: int, phy: int, size: int, tags: int, n: int) -> None:
        if base < 0 or wrap64(base * CQ_STORE_UNIT_SIZE) != base * CQ_STORE_UNIT_SIZE:
            return  # no slot for it (a hostile base): the unit serves nothing findable
        self._slot(base * CQ_STORE_UNIT_SIZE, _UNIT.pack(phy, size, tags))
        self.batches[base] = n

    def _clear(self, base: int) -> None:
        self._slot(base * CQ_STORE_UNIT_SIZE, bytes(CQ_STORE_UNIT_SIZE))
        del self.batches[base]

    def _sync(self) -> None:
        self._end_at(self.max_offset)
