"""What the restart destroys: every intact message on disk the restarted broker cannot serve.

Three places (``where``): past the recovered end in the cut file (``past_end``), in the files
truncation deletes (``deleted_file``), and in the kept commitlog without a consume-queue unit after
the restart (``no_queue_unit``: a queue that nothing rebuilds, units ``ConsumeQueue.recover``
dropped, or the part of a queue before the abnormal recovery's start file). Damage is skipped by
resynchronising on the next intact record that names its own position.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis.recovery import _fastpath as fast
from rmqinspect.analysis.recovery.dispatch import record_of
from rmqinspect.analysis.recovery.report import LostMessage, LostReport
from rmqinspect.analysis.recovery.state import BrokerState
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.format.javamath import wrap32
from rmqinspect.store.consume_queue import ConsumeQueue
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import QueueId

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_NOT_OR_COMMIT = (cl.TRANSACTION_NOT_TYPE, cl.TRANSACTION_COMMIT_TYPE)


class _Listing:
    """Lost messages: all counted, the first ``limit`` listed."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.count = 0
        self.messages: list[LostMessage] = []
        self.by_where: dict[str, int] = {}

    def tally(self, where: str) -> None:
        self.count += 1
        self.by_where[where] = self.by_where.get(where, 0) + 1

    def wants(self) -> bool:
        return self.limit is None or len(self.messages) < self.limit

    def add(self, rec: cl.MessageRecord, file: str, where: str) -> None:
        self.tally(where)
        if self.wants():
            self.messages.append(_lost(rec, file, where))


@dataclass(frozen=True, slots=True)
class Unserved:
    """Intact messages in the kept commitlog that no consume-queue unit serves after the
    restart, per queue, and the queues with records but no consume queue at all."""

    per_queue: dict[QueueId, int]
    queues_without_consume_queue: list[QueueId]


def lost_messages(
    state: BrokerState, end: int, deleted: list[StoreFile], queue_max: dict[QueueId, int]
) -> tuple[LostReport, int, Unserved]:
    """Every intact message the restart destroys (see the module docstring), and the count of
    non-zero bytes past E (in the cut file and the deleted files)."""
    listing = _Listing(state.options.lost_limit)
    damaged = 0
    data_bytes = 0
    regions: list[tuple[StoreFile, int, str]] = []
    cut = state.find_commitlog(end) if state.commitlog else None
    if cut is not None:
        regions.append((cut.disk, end - cut.start, "past_end"))
    regions.extend((d, 0, "deleted_file") for d in deleted)
    for disk, begin, where in regions:
        found, data = _past_end(state, disk, begin, where, queue_max, listing)
        damaged += found
        data_bytes += data
    unserved = _unserved(state, listing)
    truncated = listing.limit is not None and listing.count > len(listing.messages)
    report = LostReport(
        listing.count, len(listing.messages), truncated, damaged, listing.messages, listing.by_where
    )
    return report, data_bytes, unserved


def _past_end(
    state: BrokerState,
    disk: StoreFile,
    begin: int,
    where: str,
    queue_max: dict[QueueId, int],
    listing: _Listing,
) -> tuple[int, int]:
    """Intact records from ``begin`` of a file the restart cuts or deletes; returns the damaged
    message headers met and the non-zero bytes from ``begin``."""
    if disk.length == 0:
        return 0, 0
    check = state.checks.intact
    accept_v2 = state.profile.accepts_v2_magic
    magic_re = fast.MAGIC_RE_ANY if accept_v2 else fast.MAGIC_RE_V1
    damaged = 0
    buf = state.store.view(disk)
    try:
        extent = fast.data_extent(buf, begin)
        stop = begin + extent  # zeros after this hold no record: skip searching them
        pos = begin
        while pos + 8 <= stop:
            run = fast.fast_run(buf, pos, True, accept_v2)
            lost, taken = _lost_in_run(state, buf, run, queue_max)
            for i in lost:
                if listing.wants():
                    r = cl.check_message(buf, int(run.positions[i]), disk.start, check)
                    assert r.record is not None
                    listing.add(r.record, disk.name, where)
                else:
                    listing.tally(where)
            if taken:
                pos = int(run.positions[taken - 1] + run.sizes[taken - 1])
            if taken == run.count and run.complete:
                continue
            r = cl.check_message(buf, pos, disk.start, check)
            rec = r.record
            if r.success and r.size > 0 and rec is not None:
                if _is_lost(rec, queue_max):
                    listing.add(rec, disk.name, where)
                pos += r.size
                continue
            if r.success:  # BLANK: the rest of the file is filler
                break
            if _I32.unpack_from(buf, pos + cl.MAGIC_POS)[0] in fast.MESSAGE_MAGICS:
                damaged += 1  # a message header whose record fails the check
            nxt = fast.resync(buf, pos + 1, stop, disk.start, magic_re, check)
            if nxt is None:
                break
            pos = nxt
    finally:
        buf.release()
    return damaged, extent


def _unserved(state: BrokerState, listing: _Listing) -> Unserved:
    """Walk the kept commitlog ``[min, E)`` (each file up to its write position) and list the
    intact NOT/COMMIT messages no consume-queue unit serves after the restart: their queue is
    missing, or no unit of ``[minOffset, maxOffset)`` near their queue offset leads to them (a
    fillPreBlank placeholder stands there, or the queue ends before). Headers are read in runs
    with numpy; only candidates get the full check."""
    queues = {qid: q for qid, q in state.queues.items() if q.files}
    per_queue: dict[QueueId, int] = {}
    seen: set[QueueId] = set()
    check = state.checks.intact
    accept_v2 = state.profile.accepts_v2_magic
    magic_re = fast.MAGIC_RE_ANY if accept_v2 else fast.MAGIC_RE_V1

    def add(rec: cl.MessageRecord, file: str) -> None:
        qid = QueueId(rec.topic, rec.queue_id)
        if _copy_of_served(state, queues.get(qid), rec):
            return
        per_queue[qid] = per_queue.get(qid, 0) + 1
        listing.add(rec, file, "no_queue_unit")

    for f in state.commitlog:
        buf = state.store.view(f.disk)
        region = buf[: min(f.wrote, len(buf))]
        try:
            pos = 0
            while pos + 8 <= len(region):
                run = fast.fast_run(region, pos, False, accept_v2)
                for i in _unserved_in_run(region, run, f.start, queues, seen):
                    r = cl.check_message(region, int(run.positions[i]), f.start, check)
                    if r.is_message and r.record is not None:
                        add(r.record, f.name)
                if run.count:
                    pos = int(run.positions[-1] + run.sizes[-1])
                if run.complete:
                    continue
                r = cl.check_message(region, pos, f.start, check)
                if r.is_blank:
                    break
                rec = r.record
                if r.is_message and rec is not None:
                    if rec.enters_consume_queue:
                        qid = QueueId(rec.topic, rec.queue_id)
                        seen.add(qid)
                        if not _served(queues.get(qid), rec.queue_offset, f.start + pos):
                            add(rec, f.name)
                    pos += r.size
                    continue
                nxt = fast.resync(region, pos + 1, len(region), f.start, magic_re, check)
                if nxt is None:
                    break
                pos = nxt
        finally:
            region.release()
            buf.release()
    without = sorted((q for q in seen if q not in queues), key=lambda q: (q.topic, q.queue_id))
    return Unserved(per_queue, without)


# Units may sit a few slots from their queue offset ("appended at the current position"), so a
# record counts as served when a unit within this many slots of its queue offset leads to it.
_MISPLACED_SLOTS = 64


def _served_mask(
    q: ConsumeQueue | None, queue_offsets: fast.I64N, positions: fast.I64N
) -> npt.NDArray[np.bool_]:
    """Whether a unit of ``q`` near each record's queue offset holds the record's position."""
    served = np.zeros(len(positions), bool)
    if q is None or not len(positions):
        return served
    low = max(int(queue_offsets.min()) - _MISPLACED_SLOTS, q.min_offset_in_queue)
    high = min(int(queue_offsets.max()) + _MISPLACED_SLOTS + 1, q.max_offset_in_queue)
    if low >= high:
        return served
    units = q.unit_offsets(np.arange(low, high, dtype=np.int64))
    return np.isin(positions, units)


def _copy_of_served(state: BrokerState, q: ConsumeQueue | None, rec: cl.MessageRecord) -> bool:
    """A stale copy: a unit near the record's queue offset serves another record that stores
    the same queue offset (the message itself is served; this copy is a leftover)."""
    if q is None:
        return False
    low = max(rec.queue_offset - _MISPLACED_SLOTS, q.min_offset_in_queue)
    high = min(rec.queue_offset + _MISPLACED_SLOTS + 1, q.max_offset_in_queue)
    if low >= high:
        return False
    for phy in q.unit_offsets(np.arange(low, high, dtype=np.int64)).tolist():
        f = state.find_commitlog(phy) if phy != rec.position else None
        if f is None or phy - f.start + cl.PHYSICALOFFSET_POS > f.wrote:
            continue
        raw = state.store.maps.read_padded(f.disk, phy - f.start + cl.QUEUEOFFSET_POS, 8)
        if _I64.unpack(raw)[0] == rec.queue_offset:
            return True
    return False


def _served(q: ConsumeQueue | None, queue_offset: int, position: int) -> bool:
    one = np.array([queue_offset], np.int64)
    return bool(_served_mask(q, one, np.array([position], np.int64))[0])


def _unserved_in_run(
    buf: memoryview,
    run: fast.Run,
    file_start: int,
    queues: dict[QueueId, ConsumeQueue],
    seen: set[QueueId],
) -> list[int]:
    """Records of a run (headers only) that enter a consume queue whose unit at their queue
    offset does not lead to them; also adds every queue the run holds records of to ``seen``."""
    if not run.count:
        return []
    tids, topics = fast.topic_ids(buf, run.topic_at, run.topic_len)
    names = [fast.topic_name(t) for t in topics]
    keys = (tids << 32) | (run.queue_ids & 0xFFFFFFFF)
    tt = run.sys_flags & cl.TRANSACTION_TYPE_MASK
    cq_type = (tt == cl.TRANSACTION_NOT_TYPE) | (tt == cl.TRANSACTION_COMMIT_TYPE)
    lacking = cq_type.copy()
    candidates = np.flatnonzero(cq_type)
    uniq, inverse = np.unique(keys[candidates], return_inverse=True)
    by_queue = candidates[np.argsort(inverse, kind="stable")]
    bounds = np.cumsum(np.bincount(inverse, minlength=len(uniq)))[:-1]
    qoff = run.queue_offsets
    for key, members in zip(uniq.tolist(), np.split(by_queue, bounds), strict=True):
        qid = QueueId(names[key >> 32], wrap32(key & 0xFFFFFFFF))
        seen.add(qid)
        q = queues.get(qid)
        lacking[members] = ~_served_mask(q, qoff[members], file_start + run.positions[members])
    return np.flatnonzero(lacking).tolist()


def _lost_in_run(
    state: BrokerState, buf: memoryview, run: fast.Run, queue_max: dict[QueueId, int]
) -> tuple[list[int], int]:
    """Which records of an intact run (checked with CRC) are lost, and how many records of the
    run count as intact (a schedule record with a non-integer DELAY ends it)."""
    count = run.count
    if not count:
        return [], 0
    tids, topics = fast.topic_ids(buf, run.topic_at, run.topic_len)
    if fast.SCHEDULE_BYTES in topics:
        delays = dict(state.checks.intact.delay_levels)
        for i in np.flatnonzero(tids == topics.index(fast.SCHEDULE_BYTES)).tolist():
            m = record_of(buf, run, i)
            p = m.props
            tags, delay = p.get(props.TAGS), p.get(props.DELAY)
            if cl.dispatch_tags_code(m.topic, tags, delay, m.store_ts, delays) is None:
                count = i
                break
    names = [fast.topic_name(t) for t in topics]
    tids, qids = tids[:count], run.queue_ids[:count]
    keys = (tids << 32) | (qids & 0xFFFFFFFF)
    uniq, inverse = np.unique(keys, return_inverse=True)
    tops = np.array(
        [queue_max.get(QueueId(names[k >> 32], wrap32(k & 0xFFFFFFFF)), 0) for k in uniq.tolist()],
        np.int64,
    )[inverse]
    tt = run.sys_flags[:count] & cl.TRANSACTION_TYPE_MASK
    cq_type = (tt == cl.TRANSACTION_NOT_TYPE) | (tt == cl.TRANSACTION_COMMIT_TYPE)
    lost = ~cq_type | (run.queue_offsets[:count] >= tops)
    return np.flatnonzero(lost).tolist(), count


def _is_lost(rec: cl.MessageRecord, queue_max: dict[QueueId, int]) -> bool:
    """A record past E is acknowledged data the restart destroys, unless its queue already holds
    that queue offset after the restart (then it is a stale copy from an earlier generation)."""
    if rec.sys_flag & cl.TRANSACTION_TYPE_MASK not in _NOT_OR_COMMIT:
        return True
    return rec.queue_offset >= queue_max.get(QueueId(rec.topic, rec.queue_id), 0)


def _lost(rec: cl.MessageRecord, file: str, where: str) -> LostMessage:
    return LostMessage(
        rec.topic,
        rec.queue_id,
        rec.queue_offset,
        rec.physical_offset,
        rec.store_size,
        encode_offset_msg_id(rec.store_host, rec.physical_offset),
        rec.uniq_key,
        rec.keys,
        rec.tags,
        rec.store_timestamp,
        rec.transaction_name,
        file,
        where,
    )
