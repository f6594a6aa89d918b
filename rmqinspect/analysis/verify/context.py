"""What every check of one ``verify`` run shares: the options, the record check they imply,
and (per process) the consume queues as the broker loads them."""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmqinspect.analysis.indexes import IndexFileInfo, open_index_files
from rmqinspect.analysis.queues import QueueBounds, loaded_queue, queue_bounds
from rmqinspect.format.npbytes import I64
from rmqinspect.store.consume_queue import ConsumeQueue
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store

_READ_AHEAD = 1 << 12  # units read at once for a queue's records (80 KiB)
_UNITS_HELD = 1 << 21  # units kept read ahead in all (40 MiB)


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    check_crc: bool = True  # BODYCRC and the 5.x property CRC (--no-crc turns both off)
    hexdump: bool = False  # attach the bytes around each bad record to its finding


class Context:
    """One process's view of the store under verification."""

    def __init__(self, store: Store, options: VerifyOptions) -> None:
        # The database's queues too, in every process (a worker opens its own handle: one
        # forked from the driver's is not RocksDB's to share).
        store.read_rocksdb_queues()
        self.store = store
        self.options = options
        self.profile = store.profile.profile
        self.delay_table = dict(store.delay_table)
        self.check = store.check_options(check_crc=options.check_crc, read_body=True)
        self._queues: dict[QueueId, tuple[ConsumeQueue, str]] = {}  # loaded_queue's
        # QueueCoverage.proven_runs of each queue, once the commitlog's walk has made them
        self.proven: dict[QueueId, tuple[I64, I64]] = {}
        # units read ahead per queue (first queue offset, units), least recently used first
        self._units: OrderedDict[QueueId, tuple[int, np.ndarray]] = OrderedDict()
        self._units_held = 0
        self._batch_units: dict[QueueId, dict[int, int]] = {}
        # topics served from batchconsumequeue/ (analysis/verify/batch_queues.py)
        self.batch_topics = frozenset(q.topic for q in store.batch_dirs)

    def rel(self, path: Path | str) -> str:
        """A path as findings name it: relative to the store root."""
        return self.store.relative(path)

    @functools.cached_property
    def index_files(self) -> list[IndexFileInfo]:
        """Every index file with its header and geometry, in load order."""
        return open_index_files(self.store)

    def batch_units(self, qid: QueueId) -> dict[int, int]:
        """msgBaseOffset -> commitlog offset of each unit of a BatchConsumeQueue as the broker
        loads it (empty when the queue has none), kept for the records of later runs."""
        found = self._batch_units.get(qid)
        if found is None:
            found = self._batch_units[qid] = {}
            bq = self.store.batch_queue(qid)
            for c in bq.chunks(self.store.maps, 0, 2**63, 1 << 14) if bq is not None else ():
                found.update(zip(c.bases.tolist(), c.units["phy_offset"].tolist(), strict=True))
        return found

    def units_at(self, qid: QueueId, q: ConsumeQueue, queue_offsets: I64) -> np.ndarray:
        """``q.units_at(queue_offsets)`` (ascending, inside the queue's range), read ahead
        (:meth:`units_window`)."""
        base, units = self.units_window(qid, q, int(queue_offsets[0]), int(queue_offsets[-1]) + 1)
        return units[queue_offsets - base]

    def units_window(
        self, qid: QueueId, q: ConsumeQueue, lo: int, hi: int
    ) -> tuple[int, np.ndarray]:
        """The units of queue offsets ``lo`` to ``hi`` (inside the queue's range) and more
        around them, and the queue offset of the first: read ahead and kept, since the records
        of a run are a few of each queue's, and reading each queue's file for each run
        remapped it run after run where the store has more queues than open maps."""
        kept = self._units.get(qid)
        if kept is None or lo < kept[0] or hi > kept[0] + len(kept[1]):
            stop = min(max(hi, lo + _READ_AHEAD), q.max_offset_in_queue)
            kept = (lo, q.units_at(np.arange(lo, stop, dtype=np.int64)))
            self._units_held += len(kept[1]) - len(self._units.pop(qid, (0, ()))[1])
            self._units[qid] = kept
            while self._units_held > _UNITS_HELD and len(self._units) > 1:
                _, (_, old) = self._units.popitem(last=False)
                self._units_held -= len(old)
        else:
            self._units.move_to_end(qid)
        return kept

    def queue(self, qid: QueueId) -> ConsumeQueue | None:
        """The queue as the broker loads it (None when its directory does not exist)."""
        return self._loaded(self.store, qid)[0] if qid in self.store.queue_dirs else None

    def bounds(self, qid: QueueId) -> QueueBounds:
        """The queue's bounds on disk (the offsets' check), from the queue loaded once."""
        return queue_bounds(
            self.store,
            qid,
            self._loaded,
            functools.partial(proven_covers, self.proven.get(qid)),
            functools.partial(self._held_unit, qid),
        )

    def _held_unit(self, qid: QueueId, queue_offset: int) -> tuple[int, int] | None:
        """(phyOffset, size) of a unit the records' check read ahead and still keeps (the
        offsets' check asks each queue's last one: a second map of its file otherwise)."""
        kept = self._units.get(qid)
        if kept is None or not kept[0] <= queue_offset < kept[0] + len(kept[1]):
            return None
        unit = kept[1][queue_offset - kept[0]]
        phy = int(unit["phy_offset"])
        return None if phy < 0 else (phy, int(unit["size"]))  # -1: a unit no file held

    def _loaded(self, store: Store, qid: QueueId) -> tuple[ConsumeQueue, str]:
        found = self._queues.get(qid)
        if found is None:
            found = self._queues[qid] = loaded_queue(store, qid)
        return found


def proven_covers(proven: tuple[I64, I64] | None, lo: int, hi: int) -> bool:
    """Whether the ``proven`` runs (sorted by start) hold every queue offset of ``[lo, hi)``."""
    reach = lo
    starts, ends = proven if proven is not None else ((), ())
    for a, b in zip(starts, ends, strict=True):
        if reach >= hi or a > reach:
            break
        reach = max(reach, int(b))
    return reach >= hi
