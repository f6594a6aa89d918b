"""Which messages the restarted broker cannot serve: the rule behind the ``no_queue_unit`` loss.

An intact NOT/COMMIT message in the kept commitlog is unserved when its queue has no consume
queue after the restart, or no unit of ``[minOffset, maxOffset)`` within ``MISPLACED_SLOTS`` of
its queue offset leads to it (a fillPreBlank placeholder stands there, or the queue ends before),
unless it is a stale copy of a queue offset another record is served at.

:class:`ServedCheck` judges the runs of a walk. The emulation walks the whole kept commitlog
with it (:mod:`.lost`); the export's range tasks walk their own ranges with the same check over
the post-restart state the emulation hands over as a :class:`ServingState`. Every verdict is
per record, so the walks agree however the records are grouped.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis.recovery.state import CommitlogFile
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RecordColumns, decode_text
from rmqinspect.format.javamath import wrap32
from rmqinspect.format.npbytes import I64, Buffer
from rmqinspect.format.scan import FileEvent, Skipped, WalkPolicy, scan_file
from rmqinspect.store.consume_queue import MISPLACED_SLOTS, ConsumeQueue, CqFile
from rmqinspect.store.files import MappedFiles
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store

_I64 = struct.Struct(">q")
TopicIds = tuple[I64, list[bytes]]  # RecordColumns.topic_ids()
BoolArray = npt.NDArray[np.bool_]


class ServedCheck:
    """The unserved messages of runs of the kept commitlog ``commitlog`` (files with their
    post-restart write positions), against the post-restart ``queues``."""

    def __init__(
        self,
        maps: MappedFiles,
        queues: Mapping[QueueId, ConsumeQueue],
        commitlog: Sequence[CommitlogFile],
        commitlog_file_size: int,
        intact: cl.CheckOptions,
    ) -> None:
        self.maps = maps
        self.queues = {qid: q for qid, q in queues.items() if q.files}
        self.commitlog = list(commitlog)
        self.file_size = commitlog_file_size
        self.intact = intact
        self.seen: set[QueueId] = set()  # every queue the judged runs hold records of

    def unserved(
        self, region: Buffer, file_start: int, cols: RecordColumns, topics: TopicIds | None = None
    ) -> Iterator[cl.MessageRecord]:
        """The unserved messages of one run of ``region`` (a kept file up to its write
        position); ``topics``: ``cols.topic_ids()`` when the caller has them. Headers are
        judged with numpy; only candidates get the full check."""
        for i in self._lacking(cols, topics or cols.topic_ids()):
            r = cl.check_message(region, int(cols.positions[i]), file_start, self.intact)
            if r.is_message and r.record is not None:
                yield r.record

    def _lacking(self, cols: RecordColumns, topic_ids: TopicIds) -> list[int]:
        """Records of a run that enter a consume queue whose units near their queue offset do
        not lead to them, and that are no stale copy of a served record."""
        if not len(cols):
            return []
        tids, topics = topic_ids
        names = [decode_text(t) for t in topics]
        keys = (tids << 32) | (cols.queue_id & 0xFFFFFFFF)
        cq_type = cols.enters_consume_queue()
        lacking = cq_type.copy()
        candidates = np.flatnonzero(cq_type)
        if not len(candidates):  # PREPARED/ROLLBACK records only: nothing enters a queue
            return []
        uniq, inverse = np.unique(keys[candidates], return_inverse=True)
        by_queue = candidates[np.argsort(inverse, kind="stable")]
        bounds = np.cumsum(np.bincount(inverse, minlength=len(uniq)))[:-1]
        qoff = cols.queue_offset
        positions = cols.file_start + cols.positions
        for key, members in zip(uniq.tolist(), np.split(by_queue, bounds), strict=True):
            qid = QueueId(names[key >> 32], wrap32(key & 0xFFFFFFFF))
            self.seen.add(qid)
            q = self.queues.get(qid)
            if q is not None:
                lacking[members] = ~q.serves(qoff[members], positions[members])
                missed = members[lacking[members]]
                lacking[missed] = ~self._copies_of_served(q, qoff[missed], positions[missed])
        return np.flatnonzero(lacking).tolist()

    def _copies_of_served(self, q: ConsumeQueue, queue_offsets: I64, positions: I64) -> BoolArray:
        """Which records (their queue offsets and positions) are stale copies: a unit near the
        queue offset serves another record that stores the same queue offset (the message
        itself is served; this copy is a leftover). The units are read once per distinct
        queue offset: a region of copies of one record costs one look."""
        uniq, inverse = np.unique(queue_offsets, return_inverse=True)
        first = np.full(len(uniq), -1, np.int64)  # the one position served there, if one
        several = np.zeros(len(uniq), bool)  # records at two positions served there
        for u, queue_offset in enumerate(uniq.tolist()):
            served = self._served_at(q, queue_offset)
            if served:
                first[u], several[u] = served[0], len(served) > 1
        at = first[inverse]
        copies: BoolArray = several[inverse] | ((at >= 0) & (at != positions))
        return copies

    def _served_at(self, q: ConsumeQueue, queue_offset: int) -> list[int]:
        """The distinct positions the units near ``queue_offset`` lead to whose record stores
        that queue offset."""
        low = max(queue_offset - MISPLACED_SLOTS, q.min_offset_in_queue)
        high = min(queue_offset + MISPLACED_SLOTS + 1, q.max_offset_in_queue)
        if low >= high:
            return []
        served: list[int] = []
        for phy in q.unit_offsets(np.arange(low, high, dtype=np.int64)).tolist():
            f = self._find(phy)
            if f is None or phy - f.start + cl.PHYSICALOFFSET_POS > f.wrote or phy in served:
                continue
            raw = self.maps.read_padded(f.disk, phy - f.start + cl.QUEUEOFFSET_POS, 8)
            if _I64.unpack(raw)[0] == queue_offset:
                served.append(phy)
        return served

    def serving_state(self, reput: cl.CheckOptions) -> ServingState:
        """This check's state, detached from the store (``reput``: the walk it judges)."""
        queues = tuple(
            QueueServing(
                qid.topic,
                qid.queue_id,
                q.min_logic,
                tuple(
                    (f.start, f.disk is not None, f.wrote, f.overlay_start, bytes(f.overlay))
                    for f in q.files
                ),
            )
            for qid, q in self.queues.items()
        )
        commitlog = tuple((f.name, f.wrote) for f in self.commitlog)
        cq_size = next((q.file_size for q in self.queues.values()), 0)
        return ServingState(commitlog, self.file_size, queues, cq_size, reput, self.intact)

    def release(self) -> None:
        """Drop this process's pages of the consume-queue files read so far (a worker that
        judges range after range would otherwise keep every queue it met mapped)."""
        for q in self.queues.values():
            for f in q.files:
                if f.disk is not None:
                    self.maps.release(f.disk, 0, f.disk.length)

    def _find(self, offset: int) -> CommitlogFile | None:
        for f in self.commitlog:
            if f.start <= offset < f.start + self.file_size:
                return f
        return None


# A walk of a commitlog file's region: (region, file start, position, data end) -> events.
Scan = Callable[[memoryview, int, int, int], Iterator[FileEvent]]


def forensic_scan(opts: cl.CheckOptions) -> Scan:
    """The walk of a plain commitlog file's region with the check ``opts``, on past damage (the
    reput's walk, which the no-queue-unit rule judges; the walk past the recovered end)."""

    def scan(region: memoryview, file_start: int, pos: int, data_end: int) -> Iterator[FileEvent]:
        return scan_file(
            region, file_start, pos, opts, policy=WalkPolicy.FORENSIC, data_end=data_end
        )

    return scan


def walk_unserved(
    check: ServedCheck,
    store: Store,
    f: CommitlogFile,
    pos: int,
    scan: Scan,
    stop: int | None = None,
) -> Generator[Skipped | cl.MessageRecord, None, int | None]:
    """Walk the kept file ``f`` up to its write position from ``pos`` (up to the first record
    or damage at ``stop`` or past it): its damage (Skipped) and its unserved messages, in file
    order; returns where it stopped (None: the walk of the file ended first). Pages are
    released behind the walk, so memory stays flat."""
    buf = store.view(f.disk)
    region = buf[: min(f.wrote, len(buf))]
    released = pos
    try:
        for event in scan(region, f.start, pos, store.maps.data_end(f.disk)):
            if stop is not None and event.start >= stop:
                return event.start
            if isinstance(event, Skipped):
                yield event
            else:
                cols = event.columns
                if stop is not None and len(cols) and cols.positions[-1] >= stop:
                    inside = int(np.searchsorted(cols.positions, stop))
                    yield from check.unserved(region, f.start, cols.select(slice(0, inside)))
                    return int(cols.positions[inside])
                yield from check.unserved(region, f.start, cols)
            # The run is judged: its pages go now, not when the next one is read.
            store.maps.release(f.disk, released, event.end)
            released = event.end
        return None
    finally:
        region.release()
        buf.release()
        store.maps.release(f.disk, pos, f.disk.length)


@dataclass(frozen=True, slots=True)
class QueueServing:
    """One consume queue after the restart: its files (start, on disk, write position, and the
    units the dispatch wrote in memory: their start and bytes) and its minLogicOffset."""

    topic: str
    queue_id: int
    min_logic: int
    files: tuple[tuple[int, bool, int, int, bytes], ...]


@dataclass(frozen=True, slots=True)
class ServingState:
    """The post-restart state :class:`ServedCheck` needs, without the store's mappings: it is
    pickled to the export's workers, which :meth:`bind` it to their own open store."""

    commitlog: tuple[tuple[str, int], ...]  # kept commitlog files: (name, write position)
    commitlog_file_size: int
    queues: tuple[QueueServing, ...]
    cq_file_size: int
    reput: cl.CheckOptions  # the walk the emulation judges (ReputMessageService's check)
    intact: cl.CheckOptions

    @property
    def overlay_bytes(self) -> int:
        """Bytes of units the dispatch wrote in memory (what shipping this state costs)."""
        return sum(len(f[4]) for q in self.queues for f in q.files)

    def bind(self, store: Store) -> ServedCheck:
        disks = {f.name: f for f in store.commitlog.files}
        commitlog = [CommitlogFile(disks[name], wrote) for name, wrote in self.commitlog]
        queues: dict[QueueId, ConsumeQueue] = {}
        for s in self.queues:
            on_disk = {f.start: f for f in store.consume_queue_files(s.topic, s.queue_id).files}
            q = ConsumeQueue(store.maps, s.topic, s.queue_id, [], self.cq_file_size)
            for start, disk, wrote, overlay_start, overlay in s.files:
                f = CqFile(start, on_disk[start] if disk else None, wrote)
                f.overlay_start, f.overlay = overlay_start, bytearray(overlay)
                q.files.append(f)
            q.min_logic = s.min_logic
            queues[QueueId(s.topic, s.queue_id)] = q
        return ServedCheck(store.maps, queues, commitlog, self.commitlog_file_size, self.intact)
