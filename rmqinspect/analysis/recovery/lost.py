"""What the restart destroys: every intact message on disk the restarted broker cannot serve.

Three places (``where``): past the recovered end in the cut file (``past_end``), in the files
truncation deletes (``deleted_file``), and in the kept commitlog without a consume-queue unit after
the restart (``no_queue_unit``: a queue that nothing rebuilds, units ``ConsumeQueue.recover``
dropped, or the part of a queue before the abnormal recovery's start file). Damage is skipped by
resynchronising on the next intact record that names its own position.

A record past the end that is not intact is listed as damaged, with why, never as a lost
message: one the intact check rejects, the record the recovery cut at (whatever the intact
check says: with ``forceVerifyPropCRC`` a changed property value passes every other check), and
with ``forceVerifyPropCRC`` any other record whose ``__CRC32#`` does not match.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from rmqinspect.analysis.ranges import plan_ranges
from rmqinspect.analysis.recovery.ranges import RangeChecker
from rmqinspect.analysis.recovery.report import BadRecord, LostMessage, LostReport
from rmqinspect.analysis.recovery.served import (
    Scan,
    ServedCheck,
    ServingState,
    reput_scan,
    walk_unserved,
)
from rmqinspect.analysis.recovery.state import BrokerState
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.format.columns import RecordColumns, decode_text
from rmqinspect.format.ids import msg_id
from rmqinspect.format.javamath import wrap32
from rmqinspect.format.scan import FileEvent, Skipped, certain_mask, data_extent, resync
from rmqinspect.store.files import StoreFile
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store

_MESSAGE_MAGICS = (cl.MESSAGE_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE_V2)
NO_QUEUE_UNIT = "no_queue_unit"


class _Listing:
    """Lost messages and damaged records: all counted, the first ``limit`` of each listed."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.count = 0
        self.messages: list[LostMessage] = []
        self.by_where: dict[str, int] = {}
        self.damaged_count = 0
        self.damaged: list[BadRecord] = []

    def tally(self, where: str) -> None:
        self.count += 1
        self.by_where[where] = self.by_where.get(where, 0) + 1

    def wants(self) -> bool:
        return self.limit is None or len(self.messages) < self.limit

    def add(self, rec: cl.MessageRecord, file: str, where: str) -> None:
        self.tally(where)
        if self.wants():
            self.messages.append(_lost(rec, file, where))

    def damage(self, bad: BadRecord) -> None:
        self.damaged_count += 1
        if self.limit is None or len(self.damaged) < self.limit:
            self.damaged.append(bad)

    def extend(self, count: int, messages: list[LostMessage], where: str) -> None:
        """``count`` messages found at once, the first of them listed (``messages``, as
        :meth:`add` lists them)."""
        if not count:
            return
        self.count += count
        self.by_where[where] = self.by_where.get(where, 0) + count
        room = len(messages) if self.limit is None else self.limit - len(self.messages)
        self.messages.extend(messages[: max(room, 0)])


@dataclass(frozen=True, slots=True)
class Unserved:
    """Intact messages in the kept commitlog that no consume-queue unit serves after the
    restart, per queue, and the queues with records but no consume queue at all; in a DLedger
    store also the damage kept inside it (DLedger checks no record)."""

    per_queue: dict[QueueId, int]
    queues_without_consume_queue: list[QueueId]
    kept_damage: list[BadRecord] = field(default_factory=list)


def lost_messages(
    state: BrokerState,
    end: int,
    deleted: list[StoreFile],
    queue_max: dict[QueueId, int],
    cut_at: BadRecord | None,
    checker: RangeChecker | None = None,
) -> tuple[LostReport, int, Unserved]:
    """Every intact message the restart destroys and every damaged record past E (see the
    module docstring; ``cut_at``: the record the recovery stopped at), and the count of
    non-zero bytes past E (in the cut file and the deleted files). With a ``checker`` that
    cuts ranges, the kept commitlog's unserved messages are looked for by ranges there."""
    listing = _Listing(state.options.lost_limit)
    data_bytes = 0
    regions: list[tuple[StoreFile, int, str]] = []
    cut = state.find_commitlog(end) if state.commitlog else None
    if cut is not None:
        regions.append((cut.disk, end - cut.start, "past_end"))
    regions.extend((d, 0, "deleted_file") for d in deleted)
    for disk, begin, where in regions:
        cut_here = cut_at if where == "past_end" else None
        data_bytes += _past_end(state, disk, begin, where, queue_max, listing, cut_here)
    unserved = None if checker is None else _unserved_by_ranges(state, listing, checker)
    if unserved is None:
        unserved = _unserved(state, listing)
    truncated = listing.limit is not None and listing.count > len(listing.messages)
    report = LostReport(
        listing.count,
        len(listing.messages),
        truncated,
        listing.damaged_count,
        listing.messages,
        listing.by_where,
        listing.damaged,
    )
    return report, data_bytes, unserved


def _past_end(
    state: BrokerState,
    disk: StoreFile,
    begin: int,
    where: str,
    queue_max: dict[QueueId, int],
    listing: _Listing,
    cut_at: BadRecord | None,
) -> int:
    """Intact records and damaged message headers from ``begin`` of a file the restart cuts
    or deletes (``cut_at``: the record the recovery stopped at, when it is in this file);
    returns the non-zero bytes from ``begin``."""
    if disk.length == 0:
        return 0
    # A message header whose record fails the check; in DLedger data also an entry header
    # (magic 1) that DLedger stops at.
    headers = _MESSAGE_MAGICS + ((dl.ENTRY_MAGIC,) if state.ledger is not None else ())
    buf = state.store.view(disk)
    released = begin
    try:
        data_end = state.store.maps.data_end(disk)
        extent = data_extent(buf, begin, data_end)
        for event in state.scan_file(buf, disk.start, begin, state.checks.intact, data_end):
            state.store.maps.release(disk, released, event.start)  # memory stays flat
            released = event.start
            if isinstance(event, Skipped):
                if event.result.magic in headers:
                    # At the cut, the recovery's own verdict is the why.
                    at_cut = (
                        cut_at is not None and cut_at.physical_offset == disk.start + event.start
                    )
                    listing.damage(
                        cut_at if cut_at is not None and at_cut else _bad(state, event, disk)
                    )
                continue
            cols = event.columns
            rejected = _rejected(state, cols, disk, cut_at)
            for bad in rejected.values():
                listing.damage(bad)
            for i in _lost_in_run(cols, queue_max):
                if i in rejected:
                    continue
                if listing.wants():
                    listing.add(cols.record(i), state.store.relative(disk.path), where)
                else:
                    listing.tally(where)
    finally:
        buf.release()
        state.store.maps.release(disk, begin, disk.length)
    return extent


def _rejected(
    state: BrokerState, cols: RecordColumns, disk: StoreFile, cut_at: BadRecord | None
) -> dict[int, BadRecord]:
    """The records of an intact run that are damaged all the same, by row: the one the
    recovery cut at, and with ``forceVerifyPropCRC`` those whose ``__CRC32#`` does not match
    (a record that only lacks one is intact: it is lost, not damaged). Only that switch makes
    the recovery's check reject what the intact check accepts, so only then is it run again."""
    found: dict[int, BadRecord] = {}
    if not len(cols):
        return found
    if cut_at is not None and disk.start + int(cols.positions[0]) == cut_at.physical_offset:
        found[0] = cut_at
    recover = state.checks.recover
    if not (recover.check_crc and recover.force_verify_prop_crc):
        return found
    for i in np.flatnonzero(~certain_mask(cols, recover)).tolist():
        pos = int(cols.positions[i])
        result = cl.check_message(cols.buf, pos, disk.start, recover)
        if i not in found and result.reason is cl.CheckReason.PROP_CRC_MISMATCH:
            found[i] = _bad_record(result, disk.start + pos, state.store.relative(disk.path), pos)
    return dict(sorted(found.items()))


def _unserved(state: BrokerState, listing: _Listing) -> Unserved:
    """Walk the kept commitlog ``[min, E)`` (each file up to its write position) and list the
    intact NOT/COMMIT messages no consume-queue unit serves after the restart
    (:class:`~rmqinspect.analysis.recovery.served.ServedCheck`)."""
    check = served_check(state)
    per_queue: dict[QueueId, int] = {}
    kept_damage: list[BadRecord] = []
    for f in state.commitlog:
        for found in walk_unserved(check, state.store, f, 0, _reput_scan(state)):
            if isinstance(found, Skipped):
                if state.ledger is not None:
                    kept_damage.append(_bad(state, found, f.disk))
                continue
            qid = QueueId(found.topic, found.queue_id)
            per_queue[qid] = per_queue.get(qid, 0) + 1
            listing.add(found, state.store.relative(f.disk.path), NO_QUEUE_UNIT)
    queues = check.queues
    without = sorted(
        (q for q in check.seen if q not in queues), key=lambda q: (q.topic, q.queue_id)
    )
    return Unserved(per_queue, without, kept_damage)


def _reput_scan(state: BrokerState) -> Scan:
    """The reput's walk of a region (DLedger: entry by entry)."""

    def scan(region: memoryview, file_start: int, pos: int, data_end: int) -> Iterator[FileEvent]:
        return state.scan_file(region, file_start, pos, state.checks.reput, data_end)

    return scan


# --- the kept commitlog's unserved messages by ranges (recover --jobs) -------------------------
#
# The walk :func:`_unserved` makes of each kept file is cut into byte ranges that workers walk
# from the first record (or damage) their resync finds, with the post-restart state shipped to
# them once (a pickled ServingState, bound to each worker's own store). As for the recovery
# scan's checks (:mod:`.ranges`), a range whose walk starts where the one before stopped is the
# file's walk there; any other is walked again here from where the one before stopped. Every
# verdict is per record, so the merged findings, in order, are the whole walk's.


@dataclass(frozen=True, slots=True)
class _KeptRange:
    """Records (and damage) from ``begin`` up to ``end`` (None: the end of the walk) of the
    ``kept``-th kept file; ``sync``: ``begin`` is a cut, not a position the walk reaches."""

    serving: str  # where the pickled ServingState is
    kept: int
    begin: int
    end: int | None
    sync: bool
    limit: int | None  # messages listed, at most


@dataclass(frozen=True, slots=True)
class _RangeUnserved:
    """A range's walk: where it started (None: nothing found from its cut), where it stopped
    (the first record or damage at or past the range's end; ``ended``: the file's walk ended
    first), the unserved messages found per queue and the first of them listed, and the
    queues of the records judged that have no consume queue."""

    start: int | None
    stop: int
    ended: bool
    per_queue: dict[QueueId, int]
    listed: list[LostMessage]
    without: frozenset[QueueId]


_BOUND: tuple[str, ServingState, ServedCheck] | None = None  # a worker's state, by its file


def _judge_in_worker(store: Store, task: _KeptRange) -> _RangeUnserved:
    """:func:`_judge` with the shipped post-restart state, read and bound once per worker."""
    global _BOUND
    if _BOUND is None or _BOUND[0] != task.serving:
        with open(task.serving, "rb") as fh:
            serving: ServingState = pickle.load(fh)
        _BOUND = (task.serving, serving, serving.bind(store))
    _, serving, check = _BOUND
    try:
        return _judge(check, store, task, reput_scan(serving.reput), serving.reput)
    finally:
        check.release()  # a worker that judges range after range keeps no queue mapped


def _judge(
    check: ServedCheck, store: Store, task: _KeptRange, scan: Scan, reput: cl.CheckOptions
) -> _RangeUnserved:
    f = check.commitlog[task.kept]
    start = task.begin
    if task.sync:
        buf = store.view(f.disk)
        region = buf[: min(f.wrote, len(buf))]
        try:
            bound = len(region) if task.end is None else min(len(region), task.end)
            found = resync(region, task.begin - 1, bound, f.start, reput)
        finally:
            region.release()
            buf.release()
            store.maps.release(f.disk, 0, f.disk.length)
        if found is None:
            stop = f.wrote if task.end is None else task.end
            return _RangeUnserved(None, stop, False, {}, [], frozenset())
        start = found
    check.seen = set()
    per_queue: dict[QueueId, int] = {}
    listed: list[LostMessage] = []
    file = store.relative(f.disk.path)
    walk = walk_unserved(check, store, f, start, scan, stop=task.end)
    while True:
        try:
            rec = next(walk)
        except StopIteration as done:
            stopped: int | None = done.value
            break
        if isinstance(rec, Skipped):
            continue  # damage in a plain kept file is no finding of this search
        qid = QueueId(rec.topic, rec.queue_id)
        per_queue[qid] = per_queue.get(qid, 0) + 1
        if task.limit is None or len(listed) < task.limit:
            listed.append(_lost(rec, file, NO_QUEUE_UNIT))
    without = frozenset(q for q in check.seen if q not in check.queues)
    stop = (f.wrote if task.end is None else task.end) if stopped is None else stopped
    return _RangeUnserved(start, stop, stopped is None, per_queue, listed, without)


def _unserved_by_ranges(
    state: BrokerState, listing: _Listing, checker: RangeChecker
) -> Unserved | None:
    """:func:`_unserved` by ranges in ``checker``'s workers; None where it cuts none (or the
    commitlog is DLedger's, whose walk is entry by entry)."""
    if not checker.cuts_ranges or state.store.dledger is not None:
        return None
    here = served_check(state)
    serving = here.serving_state(state.checks.reput)
    kept = {f.name: i for i, f in enumerate(state.commitlog)}
    per_queue: dict[QueueId, int] = {}
    without: set[QueueId] = set()
    with tempfile.TemporaryDirectory(prefix="rmqinspect-") as tmp:
        path = os.path.join(tmp, f"serving-{uuid.uuid4().hex}.pickle")
        with open(path, "wb") as fh:
            pickle.dump(serving, fh, pickle.HIGHEST_PROTOCOL)
        assert checker.split_bytes is not None
        tasks = [
            _KeptRange(path, kept[name], r.begin, r.end, r.sync, listing.limit)
            for r in plan_ranges(state.store, checker.split_bytes)
            if (name := state.store.commitlog.files[r.file].name) in kept
            and r.begin < state.commitlog[kept[name]].wrote
        ]
        results = checker.map(_judge_in_worker, tasks)
        assert results is not None
        expected = dict.fromkeys(range(len(state.commitlog)), 0)
        ended: set[int] = set()
        for task, found in zip(tasks, results, strict=True):
            if task.kept in ended:
                continue  # the file's walk ended in an earlier range
            if found.start != expected[task.kept]:
                again = replace(task, begin=expected[task.kept], sync=False)
                found = _judge(here, state.store, again, _reput_scan(state), state.checks.reput)
            listing.extend(sum(found.per_queue.values()), found.listed, NO_QUEUE_UNIT)
            for qid, n in found.per_queue.items():
                per_queue[qid] = per_queue.get(qid, 0) + n
            without |= found.without
            expected[task.kept] = found.stop
            if found.ended:
                ended.add(task.kept)
    global _BOUND
    _BOUND = None  # one process: it held this store's queues
    return Unserved(per_queue, sorted(without, key=lambda q: (q.topic, q.queue_id)))


def served_check(state: BrokerState) -> ServedCheck:
    """The no-queue-unit rule over the state after the restart."""
    return ServedCheck(
        state.store.maps,
        state.queues,
        state.commitlog,
        state.commitlog_file_size,
        state.checks.intact,
    )


def _bad(state: BrokerState, event: Skipped, disk: StoreFile) -> BadRecord:
    file = state.store.relative(disk.path)
    return _bad_record(event.result, disk.start + event.start, file, event.start)


def _bad_record(r: cl.CheckResult, offset: int, file: str, position: int) -> BadRecord:
    return BadRecord(
        offset,
        file,
        position,
        r.reason.value,
        r.detail,
        r.store_size,
        cl.magic_name(r.magic) if r.magic is not None else None,
    )


def _lost_in_run(cols: RecordColumns, queue_max: dict[QueueId, int]) -> list[int]:
    """Which records of an intact run past E are lost: all but NOT/COMMIT copies of a queue
    offset the queue holds after the restart (stale copies of an earlier generation)."""
    if not len(cols):
        return []
    tids, topics = cols.topic_ids()
    names = [decode_text(t) for t in topics]
    keys = (tids << 32) | (cols.queue_id & 0xFFFFFFFF)
    uniq, inverse = np.unique(keys, return_inverse=True)
    tops = np.array(
        [queue_max.get(QueueId(names[k >> 32], wrap32(k & 0xFFFFFFFF)), 0) for k in uniq.tolist()],
        np.int64,
    )[inverse]
    cq_type = cols.enters_consume_queue()
    lost = ~cq_type | (cols.queue_offset >= tops)
    return np.flatnonzero(lost).tolist()


def _lost(rec: cl.MessageRecord, file: str, where: str) -> LostMessage:
    return LostMessage(
        rec.topic,
        rec.queue_id,
        rec.queue_offset,
        rec.position,
        rec.store_size,
        msg_id(rec),
        rec.uniq_key,
        rec.keys,
        rec.tags,
        rec.store_timestamp,
        rec.transaction_name,
        file,
        where,
    )
