"""What the restart destroys: intact messages past the recovered end, in the cut file and in the
files truncation deletes, found by resynchronising past damage."""

from __future__ import annotations

import struct

import numpy as np

from rmqinspect.analysis.recovery import _fastpath as fast
from rmqinspect.analysis.recovery.dispatch import record_of
from rmqinspect.analysis.recovery.report import LostMessage, LostReport
from rmqinspect.analysis.recovery.state import BrokerState
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.format.javamath import wrap32
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import QueueId

_I32 = struct.Struct(">i")
_NOT_OR_COMMIT = (cl.TRANSACTION_NOT_TYPE, cl.TRANSACTION_COMMIT_TYPE)


def lost_messages(
    state: BrokerState, end: int, deleted: list[StoreFile], queue_max: dict[QueueId, int]
) -> tuple[LostReport, int]:
    """Intact records past E in the cut file and in deleted files (resynchronising past damage
    by magic code + matching PHYSICALOFFSET), and the count of non-zero bytes there."""
    limit = state.options.lost_limit
    check = state.checks.intact
    listed: list[LostMessage] = []
    count = damaged = 0
    data_bytes = 0
    regions: list[tuple[StoreFile, int, str]] = []
    cut = state.find_commitlog(end) if state.commitlog else None
    if cut is not None:
        regions.append((cut.disk, end - cut.start, "past_end"))
    regions.extend((d, 0, "deleted_file") for d in deleted)
    accept_v2 = state.profile.accepts_v2_magic
    magic_re = fast.MAGIC_RE_ANY if accept_v2 else fast.MAGIC_RE_V1
    for disk, begin, where in regions:
        if disk.length == 0:
            continue
        buf = state.store.view(disk)
        try:
            extent = fast.data_extent(buf, begin)
            data_bytes += extent
            stop = begin + extent  # zeros after this hold no record: skip searching them
            pos = begin
            while pos + 8 <= stop:
                run = fast.fast_run(buf, pos, True, accept_v2)
                lost, taken = _lost_in_run(state, buf, run, queue_max)
                count += len(lost)
                for i in lost:
                    if limit is not None and len(listed) >= limit:
                        break
                    r = cl.check_message(buf, int(run.positions[i]), disk.start, check)
                    assert r.record is not None
                    listed.append(_lost(r.record, disk.name, where))
                if taken:
                    pos = int(run.positions[taken - 1] + run.sizes[taken - 1])
                if taken == run.count and run.complete:
                    continue
                r = cl.check_message(buf, pos, disk.start, check)
                rec = r.record
                if r.success and r.size > 0 and rec is not None:
                    if _is_lost(rec, queue_max):
                        count += 1
                        if limit is None or len(listed) < limit:
                            listed.append(_lost(rec, disk.name, where))
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
    truncated = limit is not None and count > len(listed)
    return LostReport(count, len(listed), truncated, damaged, listed), data_bytes


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
