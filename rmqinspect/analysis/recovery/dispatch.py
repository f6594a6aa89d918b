"""Dispatch (``doDispatch``: consume queue and index, §10.11) and the reput service after
``start()``.

:class:`Dispatcher` takes the records of a checked run
(:class:`~rmqinspect.format.scan.CheckedRun`), or the fields ``recover --jobs``' workers read of
them (:mod:`.fields`), as columns: numpy works out which records would change anything (a queue
that lacks the unit, an index that has not passed the offset); consume-queue units are put one
by one (the broker's placement rules are sequential), index keys are found and hashed for the
whole run at once.
"""

from __future__ import annotations

import numpy as np

from rmqinspect.analysis.recovery.fields import (
    DispatchRecords,
    RunRecords,
    Wanted,
    indexed_rows,
    lacking_units,
)
from rmqinspect.analysis.recovery.index_service import IndexService
from rmqinspect.analysis.recovery.report import ReputReport
from rmqinspect.analysis.recovery.state import BrokerState
from rmqinspect.format import commitlog as cl
from rmqinspect.format.javamath import jmod, wrap64
from rmqinspect.format.npbytes import I64
from rmqinspect.format.scan import CheckedRun, check_run
from rmqinspect.store.consume_queue import ConsumeQueue
from rmqinspect.store.layout import QueueId


class Dispatcher:
    """``CommitLogDispatcherBuildConsumeQueue`` and ``CommitLogDispatcherBuildIndex``."""

    def __init__(self, state: BrokerState, index: IndexService | None) -> None:
        self.state = state
        self.index = index if state.options.message_index_enable else None
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}

    def dispatch_rows(
        self,
        run: CheckedRun | DispatchRecords,
        rows: I64,
        phase: str,
        index_rows: I64 | None = None,
    ) -> None:
        """``doDispatch`` of the records ``rows`` (ascending) of a run: the consume queues get
        ``putMessagePositionInfo`` for the NOT and COMMIT records among them, the index
        ``buildIndex`` for ``index_rows`` (default: the same rows)."""
        records = RunRecords(run) if isinstance(run, CheckedRun) else run
        index_rows = rows if index_rows is None else index_rows
        if not len(rows) and not len(index_rows):
            return
        state = self.state
        if state.first_dispatched is None:
            first = min(rows[:1].tolist() + index_rows[:1].tolist())
            state.first_dispatched = int(records.physical_offset_field[first])
        units = rows[records.enters_consume_queue()[rows]]
        if len(units):
            self._put_units(records, units, phase)
            # putMessagePositionInfoWrapper moves logicsMsgTimestamp even on a skip.
            state.logics_timestamp = int(records.store_timestamp[units[-1]])
        if self.index is not None:
            self.index.add_run(records, index_rows)

    def _put_units(self, records: DispatchRecords, rows: I64, phase: str) -> None:
        """``putMessagePositionInfo`` record by record (skips, pre-blank fill and placement are
        sequential rules); the tagsCode is the tag hash, or the schedule topic's delivery time."""
        tids, names = records.topics()
        codes = records.tags_codes(rows).tolist()
        phys = records.physical_offset_field[rows].tolist()
        sizes = records.store_size[rows].tolist()
        qids = records.queue_id[rows].tolist()
        qoffs = records.queue_offset[rows].tolist()
        for n, i in enumerate(rows.tolist()):
            key = (names[int(tids[i])], qids[n])
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = self.state.queue(QueueId(*key))
            phy, size = phys[n], sizes[n]
            if wrap64(phy + size) > q.max_physic:
                q.put(phy, size, codes[n], qoffs[n], phase)

    def take_run(self, records: DispatchRecords, phase: str, above: int) -> None:
        """Dispatch, as the recovery scan loop would one by one, the records whose physical
        offset is above ``above``, handing over only those that change anything."""
        if not len(records):
            return
        phys = records.physical_offset_field
        sel = phys > above
        if not sel.any():
            return
        first = int(np.argmax(sel))
        state = self.state
        if state.first_dispatched is None:
            state.first_dispatched = int(phys[first])
        # A queue already holds the unit when phy + size <= its maxPhysicOffset (which only
        # grows); the index skips a record below the last file's endPhyOffset (which only
        # grows), but a record still makes getAndCreateLastIndexFile create a file.
        queues = state.queues

        def end(topic: str, queue_id: int) -> int:
            q = queues.get(QueueId(topic, queue_id))
            return -1 if q is None else q.max_physic

        candidates = sel
        may = records.may_lack()
        if may is not None:  # the others' queues held them when they were read
            candidates = np.zeros(len(sel), bool)
            candidates[may] = True
            candidates &= sel
        units = lacking_units(records, candidates, end)
        indexed = np.zeros(0, np.int64)
        if self.index is not None:
            indexed = indexed_rows(records, sel, self.index.skip_below(), self.index.creates_file())
        self.dispatch_rows(records, units, phase, indexed)
        ts = records.store_timestamp[sel & records.enters_consume_queue()]
        if ts.size:
            state.logics_timestamp = int(ts[-1])

    def wanted(self, above: int) -> Wanted:
        """What :meth:`take_run` can ask of the records above ``above`` from now on (the queues'
        ends and the index's, as they stand)."""
        index = None if self.index is None else self.index.skip_below()
        reach = {(q.topic, q.queue_id): c.max_physic for q, c in self.state.queues.items()}
        return Wanted(above, index, reach)


def read_length(r: cl.CheckResult) -> int:
    """How far the Java buffer moves over a length-mismatch record: the length its fields add
    up to (``calMsgLength``), not TOTALSIZE."""
    return max(r.size, 1) if r.fields_length is None else r.fields_length


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
                taken = len(run)
                if bounded and taken:
                    # 5.x stops before a record that would pass the confirm offset.
                    ends = reput_at + np.cumsum(run.columns.store_size)
                    taken = int(np.searchsorted(ends, end, side="right"))
                    stuck = taken < len(run)
                dispatcher.dispatch_rows(run, np.arange(taken, dtype=np.int64), "start")
                state.store.maps.release(f.disk, bpos, run.end)  # memory stays flat
                size = int(run.columns.store_size[:taken].sum())
                dispatched += taken
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
                    bpos += read_length(r)
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
