"""Dispatch (``doDispatch``: consume queue and index, §10.11) and the reput service after
``start()``.

:class:`Dispatcher` takes records one at a time or a whole run at once; for a run it works out
with numpy which records would change anything (a queue that lacks the unit, an index that has
not passed the offset) and hands only those over, one by one, in order.
"""

from __future__ import annotations

import numpy as np

from rmqinspect.analysis.recovery.index_service import IndexService
from rmqinspect.analysis.recovery.report import ReputReport
from rmqinspect.analysis.recovery.state import BrokerState, DispatchedRecord
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import decode_text
from rmqinspect.format.javamath import jmod, wrap32, wrap64
from rmqinspect.format.scan import CheckedRun, check_run
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
            self.index.add(m)

    def take_run(self, run: CheckedRun, phase: str, above: int) -> None:
        """Dispatch, as the scan loop would one by one, the records of ``run`` whose physical
        offset is above ``above``: numpy works out which of them would change anything (a queue
        that lacks the unit, an index that has not passed the offset), and only those are
        handed over, in order."""
        cols = run.columns
        count = len(cols)
        if not count:
            return
        phys = cols.physical_offset
        sel = phys > above
        if not sel.any():
            return
        first = int(np.argmax(sel))
        state = self.state
        if state.first_dispatched is None:
            state.first_dispatched = int(phys[first])
        tids, topics = cols.topic_ids()
        names = [decode_text(t) for t in topics]
        tt = cols.sys_flag & cl.TRANSACTION_TYPE_MASK
        cq_type = (tt == cl.TRANSACTION_NOT_TYPE) | (tt == cl.TRANSACTION_COMMIT_TYPE)
        keys = (tids << 32) | (cols.queue_id & 0xFFFFFFFF)
        # A dispatch is a no-op (except for logicsMsgTimestamp) when the queue already holds the
        # unit (phy + size <= its maxPhysicOffset, which only grows) and the index skips the
        # record (phy below the last file's endPhyOffset, which only grows).
        uniq, inverse = np.unique(keys, return_inverse=True)
        known = [
            state.queues.get(QueueId(names[key >> 32], wrap32(key & 0xFFFFFFFF)))
            for key in uniq.tolist()
        ]
        maxp = np.array([-1 if q is None else q.max_physic for q in known], np.int64)[inverse]
        need = sel & cq_type & (phys + cols.sizes > maxp)
        index = self.index
        if index is not None:
            need |= sel & (phys >= index.skip_below())
            if index.creates_file():
                need[first] = True  # getAndCreateLastIndexFile creates a file even for a skip
        for i in np.flatnonzero(need).tolist():
            self.dispatch(record_of(run, i, names[int(tids[i])]), phase)
        ts = cols.store_timestamp[sel & cq_type]
        if ts.size:
            state.logics_timestamp = int(ts[-1])


def record_of(run: CheckedRun, i: int, topic: str | None = None) -> DispatchedRecord:
    """Record ``i`` of a run as the dispatcher sees it (its ``DispatchRequest``)."""
    cols = run.columns
    name = cols.topic(i) if topic is None else topic
    return DispatchedRecord(
        name,
        int(cols.queue_id[i]),
        int(cols.queue_offset[i]),
        int(cols.physical_offset[i]),
        int(cols.sizes[i]),
        int(cols.sys_flag[i]),
        int(cols.store_timestamp[i]),
        cols.properties_raw(i) if cols.properties_length[i] > 0 else b"",
        None,
        run.tags_code(i) if name == cl.SCHEDULE_TOPIC else None,
    )


def read_length(buf: memoryview, pos: int, r: cl.CheckResult) -> int:
    """How far the Java buffer moves over a length-mismatch record: the length its fields add
    up to (``calMsgLength``), not TOTALSIZE."""
    rec = r.record
    if rec is None:
        return max(r.size, 1)
    at = pos + cl.mid_fields_pos(rec.sys_flag) + cl.BODY_REL + max(rec.body_length, 0)
    width = cl.topic_length_size(rec.magic)
    if at + width > len(buf):
        return max(r.size, 1)
    topic_len = int.from_bytes(buf[at : at + width], "big", signed=True)
    return cl.calc_msg_length(
        rec.sys_flag, rec.body_length, topic_len, len(rec.properties_raw), width
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
            while read < result_size and (not bounded or reput_at < end):
                run = check_run(region, bpos, f.start, state.checks.reput)
                for i in range(len(run)):
                    size = int(run.columns.sizes[i])
                    if bounded and reput_at + size > end:
                        stuck = True
                        break
                    dispatcher.dispatch(record_of(run, i), "start")
                    dispatched += 1
                    reput_at += size
                    read += size
                if stuck or read >= result_size or (bounded and reput_at >= end):
                    break
                bpos = run.end
                r = run.stop
                if r is None:
                    continue  # the run's record limit
                size = r.size
                if bounded and reput_at + size > end:
                    stuck = True
                    break
                if r.success:  # BLANK: the next file
                    reput_at = reput_at + size_cl - jmod(reput_at, size_cl)
                    read = result_size
                elif size > 0:
                    skipped += 1
                    reput_at += size
                    bpos += read_length(region, bpos, r)
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
