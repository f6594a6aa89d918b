"""Dispatch (``doDispatch``: consume queue and index, §10.11) and the reput service after
``start()``.

:class:`Dispatcher` takes records one at a time or a whole run at once; for a run it works out
with numpy which records would change anything (a queue that lacks the unit, an index that has
not passed the offset) and hands only those over, one by one, in order.
"""

from __future__ import annotations

import numpy as np

from rmqinspect.analysis.recovery import _fastpath as fast
from rmqinspect.analysis.recovery.index_service import IndexService
from rmqinspect.analysis.recovery.report import ReputReport
from rmqinspect.analysis.recovery.state import BrokerState, DispatchedRecord
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.javamath import jmod, wrap32, wrap64
from rmqinspect.store.consume_queue import ConsumeQueue
from rmqinspect.store.model import QueueId

_NOT_OR_COMMIT = (cl.TRANSACTION_NOT_TYPE, cl.TRANSACTION_COMMIT_TYPE)


class Dispatcher:
    """``CommitLogDispatcherBuildConsumeQueue`` and ``CommitLogDispatcherBuildIndex``."""

    def __init__(self, state: BrokerState, index: IndexService | None) -> None:
        self.state = state
        self.index = index if state.options.message_index_enable else None
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}

    def dispatch(self, m: DispatchedRecord, phase: str) -> None:
        """``doDispatch`` of one record; properties are parsed only when something writes."""
        state = self.state
        if state.first_dispatched is None:
            state.first_dispatched = m.phy
        if m.sys_flag & cl.TRANSACTION_TYPE_MASK in _NOT_OR_COMMIT:
            key = (m.topic, m.queue_id)
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = state.queue(QueueId(m.topic, m.queue_id))
            if wrap64(m.phy + m.size) > q.max_physic:
                q.put(m.phy, m.size, m.tags_code, m.queue_offset, phase)
            # putMessagePositionInfoWrapper moves logicsMsgTimestamp even on a skip.
            state.logics_timestamp = m.store_ts
        if self.index is not None:
            self.index.build(m)

    def take_run(
        self,
        buf: memoryview,
        run: fast.Run,
        phase: str | None,
        above: int,
        delays: dict[int, int],
    ) -> int:
        """Take the records of ``run`` as the scan loop would, one by one, but with numpy where
        the outcome is known, dispatching (when ``phase`` is given) the records whose physical
        offset is above ``above``. Returns how many records it took: fewer than ``run.count``
        when a schedule record's DELAY is not an integer (the broker's check rejects that one)."""
        count = run.count
        if not count:
            return 0
        tids, topics = fast.topic_ids(buf, run.topic_at, run.topic_len)
        # Schedule records: the DELAY property decides the verdict and the tagsCode.
        sched: dict[int, int] = {}
        if fast.SCHEDULE_BYTES in topics:
            for i in np.flatnonzero(tids == topics.index(fast.SCHEDULE_BYTES)).tolist():
                m = record_of(buf, run, i)
                p = m.props
                code = cl.dispatch_tags_code(
                    m.topic, p.get(props.TAGS), p.get(props.DELAY), m.store_ts, delays
                )
                if code is None:
                    count = i
                    break
                sched[i] = code
        if not count:
            return 0
        if phase is None:
            return count
        tids = tids[:count]
        names = [fast.topic_name(t) for t in topics]
        qids = run.queue_ids[:count]
        tt = run.sys_flags[:count] & cl.TRANSACTION_TYPE_MASK
        cq_type = (tt == cl.TRANSACTION_NOT_TYPE) | (tt == cl.TRANSACTION_COMMIT_TYPE)
        keys = (tids << 32) | (qids & 0xFFFFFFFF)
        phys = run.phys[:count]
        sel = phys > above
        if not sel.any():
            return count
        first = int(np.argmax(sel))
        state = self.state
        if state.first_dispatched is None:
            state.first_dispatched = int(phys[first])
        # A dispatch is a no-op (except for logicsMsgTimestamp) when the queue already holds the
        # unit (phy + size <= its maxPhysicOffset, which only grows) and the index skips the
        # record (phy below the last file's endPhyOffset, which only grows).
        uniq, inverse = np.unique(keys, return_inverse=True)
        known = [
            state.queues.get(QueueId(names[key >> 32], wrap32(key & 0xFFFFFFFF)))
            for key in uniq.tolist()
        ]
        maxp = np.array([-1 if q is None else q.max_physic for q in known], np.int64)[inverse]
        need = sel & cq_type & (phys + run.sizes[:count] > maxp)
        index = self.index
        if index is not None:
            need |= sel & (phys >= index.skip_below())
            if index.creates_file():
                need[first] = True  # getAndCreateLastIndexFile creates a file even for a skip
        for i in np.flatnonzero(need).tolist():
            self.dispatch(record_of(buf, run, i, sched.get(i)), phase)
        ts = run.store_ts[:count][sel & cq_type]
        if ts.size:
            state.logics_timestamp = int(ts[-1])
        return count


def record_of(
    buf: memoryview, run: fast.Run, i: int, tags_code: int | None = None
) -> DispatchedRecord:
    """Record ``i`` of a run as the dispatcher sees it."""
    topic_at = int(run.topic_at[i])
    topic = fast.topic_name(bytes(buf[topic_at : topic_at + int(run.topic_len[i])]))
    pa, pl = int(run.props_at[i]), int(run.props_len[i])
    return DispatchedRecord(
        topic,
        int(run.queue_ids[i]),
        int(run.queue_offsets[i]),
        int(run.phys[i]),
        int(run.sizes[i]),
        int(run.sys_flags[i]),
        int(run.store_ts[i]),
        bytes(buf[pa : pa + pl]),
        None,
        tags_code,
    )


def reput(state: BrokerState, dispatcher: Dispatcher, start: int) -> ReputReport:
    """``ReputMessageService.doReput``, called until caught up (§10.11).

    Each call reads the readable bytes of the file holding ``reputFromOffset``. The Java buffer
    position and ``reputFromOffset`` drift apart after a length-mismatch record (the buffer moved
    by the fields' length, the offset by TOTALSIZE); both are tracked.
    """
    profile = state.profile
    rule = (
        "commitlog confirm offset = recovered end (5.x)"
        if profile.tracks_confirm_offset
        else "max consume-queue maxPhysicOffset, at least the commitlog min offset (4.9)"
    )
    end = state.commitlog_max_offset
    bounded = profile.tracks_confirm_offset  # 5.x never dispatches past the confirm offset
    accept_v2 = profile.accepts_v2_magic
    size_cl = state.commitlog_file_size
    reput_at = max(start, state.commitlog_min_offset)
    dispatched = skipped = 0
    stop_at: int | None = None
    stop_reason: str | None = None
    while reput_at < end:
        f = state.find_commitlog(reput_at)
        pos = jmod(reput_at, size_cl)
        if f is None or not 0 <= pos < f.wrote:
            break  # getData returns null: this round ends, and so would every later one
        buf = state.store.view(f.disk)
        region = buf[: f.wrote]
        stuck = False
        try:
            result_size = f.wrote - pos
            bpos, read = pos, 0
            limit = len(region)
            while read < result_size and (not bounded or reput_at < end):
                msg = fast.fast_check(region, bpos, limit, False, accept_v2)
                if msg is not None:
                    if bounded and reput_at + msg.size > end:
                        stuck = True
                        break
                    dispatcher.dispatch(msg, "start")
                    dispatched += 1
                    reput_at += msg.size
                    read += msg.size
                    bpos += msg.size
                    continue
                r = cl.check_message(region, bpos, f.start, state.checks.reput)
                size = r.size
                if bounded and reput_at + size > end:
                    stuck = True
                    break
                if r.success and size > 0:
                    dispatcher.dispatch(DispatchedRecord.of(r), "start")
                    dispatched += 1
                    reput_at += size
                    read += size
                    bpos += size
                elif r.success:
                    reput_at = reput_at + size_cl - jmod(reput_at, size_cl)
                    read = result_size
                elif size > 0:
                    skipped += 1
                    reput_at += size
                    bpos += fast.read_length(region, bpos, r)
                else:
                    if stop_at is None:
                        stop_at, stop_reason = reput_at, r.reason.value
                    if not state.options.master:
                        stuck = True
                        break
                    reput_at += result_size - read  # the master skips the rest of the region
                    break
        finally:
            region.release()
            buf.release()
        if stuck:
            if reput_at < end:
                state.warnings.append(
                    f"the reput service cannot get past offset {reput_at}: dispatch stays "
                    f"behind by {end - reput_at} bytes (4.9 start() waits for it forever)"
                )
            break
    return ReputReport(start, end, rule, dispatched, skipped, stop_at, stop_reason)
