"""verify's records-to-units check (:class:`QueueCoverage`, fed by the commitlog walk): every
NOT/COMMIT record is served by a unit of its queue
(:meth:`~rmqinspect.store.consume_queue.ConsumeQueue.serves`), and the unit at its queue offset
holds the tagsCode dispatch computes (the tag hash, or in ``SCHEDULE_TOPIC_XXXX`` the delivery
time; ext addresses are the exception). The tags are checked here, where the records come in
dense runs, because finding TAGS is one search per run; the usual case is judged for all the
queues of a run at once. Records after their queue's last unit, or of a queue without a
directory, are what a killed broker's dispatch had not reached: :func:`classify_lagging` asks
the restart prediction whether the restart rebuilds their units (a warning) or not (an error).
The other direction, units to records, is :mod:`.queues`'.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rmqinspect.analysis.recovery import RecoveryReport
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.finding import Findings
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE, CQ_UNIT_DTYPE, EXT_MAX_ADDR
from rmqinspect.format.javamath import wrap32
from rmqinspect.format.npbytes import I64, Mask, members
from rmqinspect.format.profile import Profile
from rmqinspect.store.consume_queue import ConsumeQueue
from rmqinspect.store.layout import QueueId

_RAW_UNIT = np.dtype((np.void, CQ_STORE_UNIT_SIZE))


def queue_dir(qid: QueueId, *, batch: bool = False) -> str:
    """The queue's directory as findings name it (``batch``: a BatchConsumeQueue's)."""
    return f"{'batchconsumequeue' if batch else 'consumequeue'}/{qid.topic}/{qid.queue_id}"


@dataclass
class Lagging:
    """Records of one queue that no unit serves yet, in log order."""

    positions: list[I64] = field(default_factory=list)
    queue_offsets: list[I64] = field(default_factory=list)

    def add(self, positions: I64, queue_offsets: I64) -> None:
        self.positions.append(positions)
        self.queue_offsets.append(queue_offsets)

    def extend(self, other: Lagging) -> None:
        self.positions.extend(other.positions)
        self.queue_offsets.extend(other.queue_offsets)

    def arrays(self) -> tuple[I64, I64]:
        empty = np.zeros(0, np.int64)
        return (
            np.concatenate(self.positions) if self.positions else empty,
            np.concatenate(self.queue_offsets) if self.queue_offsets else empty,
        )


@dataclass
class QueueCoverage:
    """Records to units, run by run: records inside their queue's range that no unit serves are
    findings at once; those past its end (or without a queue) wait for :func:`classify_lagging`.

    ``proven``: per queue, runs ``[start, end)`` of queue offsets whose unit this walk found
    leading to its record (the record's position and TOTALSIZE, in the queue's topic, queue id
    and offset): what the units-to-records check would find reading those records again, so
    it need not (:func:`check_queue_file`)."""

    lagging: dict[QueueId, Lagging] = field(default_factory=dict)
    proven: dict[QueueId, list[tuple[I64, I64]]] = field(default_factory=dict)
    # Offsets proven, not yet runs: per part, each offset's queue (its number in _qids).
    _pending: list[tuple[I64, I64]] = field(default_factory=list)
    _qids: list[QueueId] = field(default_factory=list)
    _numbers: dict[QueueId, int] = field(default_factory=dict)

    def add_run(
        self,
        ctx: Context,
        cols: RecordColumns,
        rows: I64,
        topic_ids: I64,
        topics: list[str],
        findings: Findings,
        file: str,
    ) -> None:
        """Check the records ``rows`` of a run (those that enter a consume queue): each is
        served by a unit of its queue, and a unit at its own queue offset holds the tagsCode
        dispatch computes for it. The usual case, every record of a queue inside its range
        and served by the unit at its own offset with the right tagsCode, is judged for all
        the run's queues at once; a queue where it is not is checked apart (:meth:`_queue`)."""
        if not len(rows):
            return
        # Found for the whole run at once: one search over the run, not one per queue.
        codes, _ = cols.tags_codes(rows, ctx.delay_table, (topic_ids, topics))
        keys = (topic_ids[rows] << 32) | (cols.queue_id[rows] & 0xFFFFFFFF)
        uniq, inverse = np.unique(keys, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        counts = np.bincount(inverse, minlength=len(uniq))
        starts = np.cumsum(counts) - counts
        grouped = rows[order]  # the run's records queue by queue, each queue's in log order
        qoffs = cols.queue_offset[grouped]
        low, high = np.minimum.reduceat(qoffs, starts), np.maximum.reduceat(qoffs, starts)
        qids = [QueueId(topics[key >> 32], wrap32(key & 0xFFFFFFFF)) for key in uniq.tolist()]
        fast = np.zeros(len(uniq), bool)
        units: list[np.ndarray] = []
        for g, (qid, lo, hi, at, n) in enumerate(
            zip(qids, low.tolist(), high.tolist(), starts.tolist(), counts.tolist(), strict=True)
        ):
            q = None if qid.topic in ctx.batch_topics else ctx.queue(qid)
            if q is None or lo < q.min_offset_in_queue or hi >= q.max_offset_in_queue:
                continue
            base, window = ctx.units_window(qid, q, lo, hi + 1)
            # As raw 20-byte units: joining structured arrays compares their fields each time.
            units.append(window[qoffs[at : at + n] - base].view(_RAW_UNIT))
            fast[g] = True
        slow = ~fast
        if units:
            took = fast[inverse[order]]
            got = np.concatenate(units).view(CQ_UNIT_DTYPE)
            taken = grouped[took]
            hit = got["phy_offset"] == cols.positions[taken] + cols.file_start
            tags = got["tags_code"].astype(np.int64)
            wrong = (tags > EXT_MAX_ADDR) & (tags != codes[order][took])
            group = inverse[order][took]
            slow |= _any_by_group(~hit | wrong, group, len(uniq))
            sized = got["size"].astype(np.int64) == cols.store_size[taken]
            proven = sized & ~slow[group]
            numbers = np.array([self._number(q) for q in qids], np.int64)
            readable = np.array(["\ufffd" not in q.topic for q in qids], bool)
            proven &= readable[group]
            self._pending.append((numbers[group[proven]], qoffs[took][proven]))
        for g in np.flatnonzero(slow).tolist():
            group_rows = order[starts[g] : starts[g] + counts[g]]
            self._queue(ctx, qids[g], cols, rows[group_rows], codes[group_rows], findings, file)

    def _number(self, qid: QueueId) -> int:
        n = self._numbers.get(qid)
        if n is None:
            n = self._numbers[qid] = len(self._qids)
            self._qids.append(qid)
        return n

    def _queue(
        self,
        ctx: Context,
        qid: QueueId,
        cols: RecordColumns,
        members: I64,
        codes: I64,
        findings: Findings,
        file: str,
    ) -> None:
        """:meth:`add_run`'s check of one queue's records ``members`` (their tagsCodes
        ``codes``), record by record where needed."""
        positions = cols.positions[members] + cols.file_start
        qoffs = cols.queue_offset[members]
        if qid.topic in ctx.batch_topics:
            from rmqinspect.analysis.verify.batch_queues import batch_coverage

            late = batch_coverage(ctx, qid, positions, qoffs, file, findings)
            if late is not None and late.any():
                self.lagging.setdefault(qid, Lagging()).add(positions[late], qoffs[late])
            return
        q = ctx.queue(qid)
        if q is None:
            self.lagging.setdefault(qid, Lagging()).add(positions, qoffs)
            return
        missing = ~self._exact(ctx, q, qid, cols, members, codes, findings)
        if not missing.any():  # every record's own unit serves it
            return
        missing[missing] = ~q.serves(qoffs[missing], positions[missing])
        late = missing & (qoffs >= q.max_offset_in_queue)
        if late.any():
            self.lagging.setdefault(qid, Lagging()).add(positions[late], qoffs[late])
        for i in np.flatnonzero(missing & ~late).tolist():
            findings.add(
                "consumequeue.missing_unit",
                file,
                f"no unit of {qid} near queue offset {int(qoffs[i])} leads to this record "
                f"(the queue holds offsets {q.min_offset_in_queue}..."
                f"{q.max_offset_in_queue - 1})",
                file_position=int(cols.positions[members[i]]),
                physical_offset=int(positions[i]),
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=int(qoffs[i]),
            )

    def _exact(
        self,
        ctx: Context,
        q: ConsumeQueue,
        qid: QueueId,
        cols: RecordColumns,
        members: I64,
        codes: I64,
        findings: Findings,
    ) -> Mask:
        """Which records the unit at their own queue offset serves; those units' tagsCodes are
        checked against ``codes`` (dispatch's, per record; ext addresses are not checked)."""
        qoffs = cols.queue_offset[members]
        positions = cols.positions[members] + cols.file_start
        exact = np.zeros(len(members), bool)
        low, high = q.min_offset_in_queue, q.max_offset_in_queue
        if int(qoffs.min()) >= low and int(qoffs.max()) < high:
            inside = np.arange(len(qoffs))
        else:
            inside = np.flatnonzero((qoffs >= low) & (qoffs < high))
            if not len(inside):
                return exact
        if not bool((qoffs[inside][1:] >= qoffs[inside][:-1]).all()):
            inside = inside[np.argsort(qoffs[inside], kind="stable")]
        units = ctx.units_at(qid, q, qoffs[inside])
        hit = units["phy_offset"] == positions[inside]
        exact[inside[hit]] = True
        at, units = inside[hit], units[hit]
        # A topic name that is not its record's bytes (replacement characters) is left to the
        # units' own check, which compares bytes.
        if "\ufffd" not in qid.topic:
            sized = units["size"].astype(np.int64) == cols.store_size[members[at]]
            found = qoffs[at[sized]]
            self._pending.append((np.full(len(found), self._number(qid), np.int64), found))
        tags = units["tags_code"].astype(np.int64)
        wrong = (tags > EXT_MAX_ADDR) & (tags != codes[at])
        if not wrong.any():
            return exact
        if ctx.profile is Profile.V4_9 and qid.topic == cl.SCHEDULE_TOPIC:
            # 4.9.8 dispatches during load() before it parses the delay levels: tag hashes then.
            hashes, _ = cols.tags_codes(members[at], {})
            wrong &= tags != hashes
        # A delay message's tagsCode is its store time plus its level's delay: the broker's
        # messageDelayLevel, which no store file holds.
        hint = (
            "; is the broker's messageDelayLevel --delay-levels?"
            if qid.topic == cl.SCHEDULE_TOPIC
            else ""
        )
        for k in np.flatnonzero(wrong).tolist():
            qoff = int(qoffs[at[k]])
            unit_at = qoff * CQ_STORE_UNIT_SIZE
            f = next(f for f in reversed(q.files) if f.start <= unit_at)
            findings.add(
                "consumequeue.tags_code",
                ctx.rel(f.disk.path) if f.disk is not None else queue_dir(qid),
                f"unit ({int(units['phy_offset'][k])}, {int(units['size'][k])}, {int(tags[k])}): "
                f"dispatch computes {int(codes[at[k]])}{hint}",
                file_position=unit_at - f.start,
                physical_offset=int(positions[at[k]]),
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=qoff,
            )
        return exact

    def compact(self) -> None:
        """Turn the offsets proven since the last call into runs of consecutive ones, queue
        by queue (a range's walk ends with this: runs are what travels)."""
        if not self._pending:
            return
        numbers = np.concatenate([n for n, _ in self._pending])
        offsets = np.concatenate([o for _, o in self._pending])
        self._pending.clear()
        if not len(offsets):
            return
        order = np.lexsort((offsets, numbers))
        numbers, offsets = numbers[order], offsets[order]
        again = (numbers[1:] == numbers[:-1]) & (offsets[1:] == offsets[:-1])
        keep = np.concatenate(([True], ~again))
        numbers, offsets = numbers[keep], offsets[keep]
        new_queue = np.concatenate(([True], numbers[1:] != numbers[:-1]))
        begins = np.flatnonzero(new_queue | np.concatenate(([True], np.diff(offsets) != 1)))
        ends = np.concatenate((begins[1:], [len(offsets)])) - 1
        queue_of = numbers[begins]
        firsts = np.flatnonzero(np.concatenate(([True], queue_of[1:] != queue_of[:-1])))
        lasts = np.concatenate((firsts[1:], [len(begins)]))
        for a, b in zip(firsts.tolist(), lasts.tolist(), strict=True):
            qid = self._qids[int(queue_of[a])]
            runs = (offsets[begins[a:b]], offsets[ends[a:b]] + 1)
            self.proven.setdefault(qid, []).append(runs)

    def proven_runs(self, qid: QueueId) -> tuple[I64, I64]:
        """The queue's proven runs, sorted by start."""
        self.compact()
        runs = self.proven.get(qid, [])
        starts = np.concatenate([a for a, _ in runs]) if runs else np.zeros(0, np.int64)
        ends = np.concatenate([b for _, b in runs]) if runs else np.zeros(0, np.int64)
        order = np.argsort(starts, kind="stable")
        return starts[order], ends[order]

    def extend(self, other: QueueCoverage) -> None:
        for qid, lag in other.lagging.items():
            self.lagging.setdefault(qid, Lagging()).extend(lag)
        other.compact()
        for qid, runs in other.proven.items():
            self.proven.setdefault(qid, []).extend(runs)


def _any_by_group(flags: Mask, group: I64, groups: int) -> Mask:
    """Per group, whether any of its ``flags`` is set (``group``: each flag's group)."""
    return np.bincount(group[flags], minlength=groups) > 0


def classify_lagging(
    ctx: Context,
    coverage: QueueCoverage,
    restart: RecoveryReport | None,
    findings: Findings,
) -> None:
    """One finding per queue for the records no unit serves yet: those the restart
    (``restart``, :func:`~rmqinspect.analysis.recovery.run_recovery` with every lost message
    listed) dispatches are a warning; those it keeps but leaves without a unit an error
    (``missing_queue`` when the directory is missing); those it cuts are said in passing (the
    damage that cuts them has its own finding)."""
    unserved: set[int] = set()
    end = -1
    kept_files: list[tuple[int, int]] = []
    size = ctx.store.commitlog.file_size
    if restart is not None and restart.commitlog is not None:
        cl_report = restart.commitlog
        end = cl_report.max_offset if cl_report.max_offset is not None else -1
        kept_files = [(int(f.name), int(f.name) + size) for f in cl_report.files_after or []]
        lost = restart.lost_messages.messages if restart.lost_messages is not None else []
        unserved = {m.physical_offset for m in lost if m.where == "no_queue_unit"}
    for qid, lag in sorted(coverage.lagging.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id)):
        positions, qoffs = lag.arrays()
        kept = positions < end
        if kept_files:
            inside = np.zeros(len(positions), bool)
            for a, b in kept_files:
                inside |= (positions >= a) & (positions < b)
            kept &= inside
        else:
            kept[:] = False
        left = kept & members(positions, np.fromiter(unserved, np.int64, len(unserved)))
        rebuilt = kept & ~left
        cut = int(np.count_nonzero(~kept))
        has_dir = qid in ctx.store.queue_dirs
        where = queue_dir(qid, batch=qid in ctx.store.batch_dirs)
        if rebuilt.any():
            i = int(np.argmax(rebuilt))
            note = f"; {cut} more lie past the restart's end and are cut with it" if cut else ""
            findings.add(
                "consumequeue.lagging",
                where,
                f"no unit yet for {_records(int(np.count_nonzero(rebuilt)))} from queue offset "
                f"{int(qoffs[i])}{'' if has_dir else ' (the directory does not exist yet)'}; "
                f"the restart dispatches them{note}",
                physical_offset=int(positions[i]),
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=int(qoffs[i]),
            )
        if left.any():
            i = int(np.argmax(left))
            why = (
                "the restart does not rebuild it"
                if restart is not None and restart.broker_starts
                else "the broker refuses to start"
            )
            findings.add(
                "consumequeue.missing_unit" if has_dir else "consumequeue.missing_queue",
                where,
                f"no unit for {_records(int(np.count_nonzero(left)))} of {qid} from queue "
                f"offset {int(qoffs[i])}{'' if has_dir else ' (no directory for the queue)'}, "
                f"and {why}",
                physical_offset=int(positions[i]),
                topic=qid.topic,
                queue_id=qid.queue_id,
                queue_offset=int(qoffs[i]),
            )


def _records(n: int) -> str:
    return f"{n} record{'' if n == 1 else 's'}"
