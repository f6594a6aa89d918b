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

from rmqinspect.analysis.ranges import Range, plan_ranges
from rmqinspect.analysis.recovery.ranges import RangeChecker
from rmqinspect.analysis.recovery.report import BadRecord, LostMessage, LostReport
from rmqinspect.analysis.recovery.served import (
    Scan,
    ServedCheck,
    ServingState,
    forensic_scan,
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

    def merge(self, other: _Listing) -> None:
        """Add what ``other`` found after what this one found (each lists its first ones)."""
        self.count += other.count
        for where, n in other.by_where.items():
            self.by_where[where] = self.by_where.get(where, 0) + n
        self.damaged_count += other.damaged_count
        self.messages += other.messages[: self._room(self.messages)]
        self.damaged += other.damaged[: self._room(self.damaged)]

    def _room(self, listed: list[LostMessage] | list[BadRecord]) -> int | None:
        return None if self.limit is None else max(self.limit - len(listed), 0)


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
    cuts ranges, the files are walked by ranges in its workers (:func:`_by_ranges`)."""
    listing = _Listing(state.options.lost_limit)
    # A message header whose record fails the check; in DLedger data also an entry header
    # (magic 1) that DLedger stops at.
    headers = _MESSAGE_MAGICS + ((dl.ENTRY_MAGIC,) if state.ledger is not None else ())
    rules = _Rules(state.checks.intact, state.checks.recover, queue_max, cut_at, headers)
    parts: list[_Part] = []
    data_bytes = 0
    cut = state.find_commitlog(end) if state.commitlog else None
    regions = [(cut.disk, end - cut.start, "past_end")] if cut is not None else []
    regions.extend((d, 0, "deleted_file") for d in deleted)
    for disk, begin, where in regions:
        if disk.length:
            data_bytes += _extent(state.store, disk, begin)
            parts.append(_Part("", where, disk.name, begin, None, False, listing.limit))
    parts.extend(
        _Part("", NO_QUEUE_UNIT, f.name, 0, None, False, listing.limit) for f in state.commitlog
    )
    reput = state.checks.reput
    intact = _scan(state, state.checks.intact)
    ledger = state.ledger is not None
    disks = {disk.name: disk for disk, _, _ in regions}
    check = served_check(state)
    here = _Judges(rules, check, intact, _scan(state, reput), reput, ledger, disks)
    found = None if checker is None else _by_ranges(state, here, parts, checker)
    if found is None:
        found = (_judge(state.store, here, p) for p in parts)
    per_queue: dict[QueueId, int] = {}
    without: set[QueueId] = set()
    kept_damage: list[BadRecord] = []
    for f in found:
        listing.merge(f.listing)
        for qid, n in f.per_queue.items():
            per_queue[qid] = per_queue.get(qid, 0) + n
        without |= f.without
        kept_damage += f.kept_damage
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
    queues = sorted(without, key=lambda q: (q.topic, q.queue_id))
    return report, data_bytes, Unserved(per_queue, queues, kept_damage)


def _extent(store: Store, disk: StoreFile, begin: int) -> int:
    """The non-zero bytes of ``disk`` from ``begin``."""
    buf = store.view(disk)
    try:
        return data_extent(buf, begin, store.maps.data_end(disk))
    finally:
        buf.release()
        store.maps.release(disk, begin, disk.length)


@dataclass(frozen=True, slots=True)
class _Rules:
    """What the walk past E judges by: the intact check, the recovery's (which rejects some
    records the intact one accepts), each queue's max offset after the restart, the record the
    recovery stopped at, and the headers whose failing records count as damaged."""

    intact: cl.CheckOptions
    recover: cl.CheckOptions
    queue_max: dict[QueueId, int]
    cut_at: BadRecord | None
    headers: tuple[int, ...]


@dataclass
class _Judges:
    """The rules and walks the search judges a part by."""

    rules: _Rules
    check: ServedCheck  # the no-queue-unit rule over the post-restart state
    intact: Scan  # the walk past E
    reput: Scan  # the walk of the kept commitlog
    reput_check: cl.CheckOptions  # its check
    ledger: bool  # DLedger data: damage in the kept commitlog is listed too
    disks: dict[str, StoreFile]  # the files walked past E, by name


@dataclass(frozen=True, slots=True)
class _Part:
    """Records (and damage) of the commitlog file ``file`` from ``begin`` up to ``end`` (None:
    the end of the file's walk) that the search judges as ``where`` (``past_end`` and
    ``deleted_file``: the intact records the restart destroys; ``no_queue_unit``: the kept
    file's unserved messages); ``sync``: ``begin`` is a cut, not a position the walk
    reaches; ``shipped``: where a worker finds the rules (empty: judged here)."""

    shipped: str
    where: str
    file: str
    begin: int
    end: int | None
    sync: bool
    limit: int | None  # messages and damaged records listed, at most


@dataclass(frozen=True, slots=True)
class _Found:
    """A part's walk: where it started (None: nothing found from its cut), where it stopped
    (the first record or damage at or past the part's end; ``ended``: the file's walk ended
    first), and what it found there."""

    start: int | None
    stop: int
    ended: bool
    listing: _Listing
    per_queue: dict[QueueId, int] = field(default_factory=dict)
    without: frozenset[QueueId] = frozenset()  # queues of judged records with no queue
    kept_damage: list[BadRecord] = field(default_factory=list)


def _judge(store: Store, judges: _Judges, part: _Part) -> _Found:
    """The search's walk of ``part``."""
    kept = part.where == NO_QUEUE_UNIT
    if kept:
        f = next(f for f in judges.check.commitlog if f.name == part.file)
        disk, length, opts = f.disk, f.wrote, judges.reput_check
    else:
        disk = judges.disks[part.file]
        length, opts = disk.length, judges.rules.intact
    listing = _Listing(part.limit)
    start = part.begin
    if part.sync:
        buf = store.view(disk)
        region = buf[: min(length, len(buf))]
        try:
            bound = len(region) if part.end is None else min(len(region), part.end)
            found = resync(region, part.begin - 1, bound, disk.start, opts)
        finally:
            region.release()
            buf.release()
            store.maps.release(disk, 0, disk.length)
        if found is None:
            return _Found(None, length if part.end is None else part.end, False, listing)
        start = found
    if not kept:
        stopped = _walk_past_end(store, disk, start, part, judges, listing)
        return _Found(start, _stop(stopped, part, length), stopped is None, listing)
    check = judges.check
    check.seen = set()
    per_queue: dict[QueueId, int] = {}
    kept_damage: list[BadRecord] = []
    file = store.relative(disk.path)
    walk = walk_unserved(check, store, f, start, judges.reput, stop=part.end)
    while True:
        try:
            rec = next(walk)
        except StopIteration as done:
            stopped = done.value
            break
        if isinstance(rec, Skipped):
            if judges.ledger:
                kept_damage.append(_bad_record(rec.result, disk.start + rec.start, file, rec.start))
            continue
        qid = QueueId(rec.topic, rec.queue_id)
        per_queue[qid] = per_queue.get(qid, 0) + 1
        listing.add(rec, file, NO_QUEUE_UNIT)
    without = frozenset(q for q in check.seen if q not in check.queues)
    stop = _stop(stopped, part, length)
    return _Found(start, stop, stopped is None, listing, per_queue, without, kept_damage)


def _stop(stopped: int | None, part: _Part, length: int) -> int:
    if stopped is not None:
        return stopped
    return length if part.end is None else part.end


def _walk_past_end(
    store: Store, disk: StoreFile, pos: int, part: _Part, judges: _Judges, listing: _Listing
) -> int | None:
    """Intact records and damaged message headers of a file the restart cuts or deletes, from
    ``pos`` (a position the walk reaches) up to the first at the part's end or past it;
    returns where it stopped (None: the file's walk ended first)."""
    rules = judges.rules
    cut_at = rules.cut_at if part.where == "past_end" else None
    file = store.relative(disk.path)
    buf = store.view(disk)
    released = pos
    try:
        for event in judges.intact(buf, disk.start, pos, store.maps.data_end(disk)):
            if part.end is not None and event.start >= part.end:
                return event.start
            if isinstance(event, Skipped):
                if event.result.magic in rules.headers:
                    # At the cut, the recovery's own verdict is the why.
                    at = disk.start + event.start
                    if cut_at is not None and cut_at.physical_offset == at:
                        listing.damage(cut_at)
                    else:
                        listing.damage(_bad_record(event.result, at, file, event.start))
            else:
                cols = event.columns
                after: int | None = None
                if part.end is not None and len(cols) and cols.positions[-1] >= part.end:
                    inside = int(np.searchsorted(cols.positions, part.end))
                    after = int(cols.positions[inside])
                    cols = cols.select(slice(0, inside))
                rejected = _rejected(rules.recover, cols, disk, file, cut_at)
                for bad in rejected.values():
                    listing.damage(bad)
                for i in _lost_in_run(cols, rules.queue_max):
                    if i in rejected:
                        continue
                    if listing.wants():
                        listing.add(cols.record(i), file, part.where)
                    else:
                        listing.tally(part.where)
                if after is not None:
                    return after
            # The run is judged: its pages go now, not when the next one is read.
            store.maps.release(disk, released, event.end)
            released = event.end
        return None
    finally:
        buf.release()
        store.maps.release(disk, pos, disk.length)


def _rejected(
    recover: cl.CheckOptions,
    cols: RecordColumns,
    disk: StoreFile,
    file: str,
    cut_at: BadRecord | None,
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
    if not (recover.check_crc and recover.force_verify_prop_crc):
        return found
    for i in np.flatnonzero(~certain_mask(cols, recover)).tolist():
        pos = int(cols.positions[i])
        result = cl.check_message(cols.buf, pos, disk.start, recover)
        if i not in found and result.reason is cl.CheckReason.PROP_CRC_MISMATCH:
            found[i] = _bad_record(result, disk.start + pos, file, pos)
    return dict(sorted(found.items()))


def _scan(state: BrokerState, opts: cl.CheckOptions) -> Scan:
    """The walk of a region with the check ``opts`` (DLedger: entry by entry)."""

    def scan(region: memoryview, file_start: int, pos: int, data_end: int) -> Iterator[FileEvent]:
        return state.scan_file(region, file_start, pos, opts, data_end)

    return scan


# --- by ranges (recover --jobs) ----------------------------------------------------------------
#
# Each file's walk is cut into byte ranges that workers walk from the first record (or damage)
# their resync finds, with the rules and the post-restart state shipped to them once (pickled
# to a temporary file, bound to each worker's own store). As for the recovery scan's checks
# (:mod:`.ranges`), a range whose walk starts where the one before stopped is the file's walk
# there; any other is walked again here from where the one before stopped. Every verdict is
# per record, so the merged findings, in order, are the whole walk's.


@dataclass(frozen=True, slots=True)
class _Shipped:
    rules: _Rules
    serving: ServingState


_BOUND: tuple[str, _Judges] | None = None  # a worker's judges, by the file they came in


def _judge_in_worker(store: Store, part: _Part) -> _Found:
    """:func:`_judge` with the shipped rules and state, read and bound once per worker."""
    global _BOUND
    if _BOUND is None or _BOUND[0] != part.shipped:
        with open(part.shipped, "rb") as fh:
            shipped: _Shipped = pickle.load(fh)
        check = shipped.serving.bind(store)
        intact, reput = shipped.rules.intact, shipped.serving.reput
        disks = {f.name: f for f in store.commitlog.files}
        judges = _Judges(
            shipped.rules, check, forensic_scan(intact), forensic_scan(reput), reput, False, disks
        )
        _BOUND = (part.shipped, judges)
    judges = _BOUND[1]
    try:
        return _judge(store, judges, part)
    finally:
        judges.check.release()  # a worker that judges range after range keeps no queue mapped


def _by_ranges(
    state: BrokerState, here: _Judges, parts: list[_Part], checker: RangeChecker
) -> Iterator[_Found] | None:
    """The findings of ``parts``, in order, from their ranges judged in ``checker``'s
    workers; None where it cuts none (or the commitlog is DLedger's, walked entry by entry)."""
    if not checker.cuts_ranges or here.ledger:
        return None
    assert checker.split_bytes is not None
    planned: dict[str, list[Range]] = {}
    for r in plan_ranges(state.store, checker.split_bytes):
        planned.setdefault(state.store.commitlog.files[r.file].name, []).append(r)
    return _stitched(state, here, parts, planned, checker)


def _cut(part: _Part, r: Range, shipped: str) -> _Part:
    """The part of ``part`` in range ``r`` (which ends past the part's begin)."""
    begin = max(part.begin, r.begin)
    return replace(
        part, shipped=shipped, begin=begin, end=r.end, sync=r.sync and begin > part.begin
    )


def _stitched(
    state: BrokerState,
    here: _Judges,
    parts: list[_Part],
    planned: dict[str, list[Range]],
    checker: RangeChecker,
) -> Iterator[_Found]:
    serving = here.check.serving_state(state.checks.reput)
    with tempfile.TemporaryDirectory(prefix="rmqinspect-") as tmp:
        path = os.path.join(tmp, f"shipped-{uuid.uuid4().hex}.pickle")
        with open(path, "wb") as fh:
            pickle.dump(_Shipped(here.rules, serving), fh, pickle.HIGHEST_PROTOCOL)
        kept = {f.name: f.wrote for f in state.commitlog}
        tasks = [
            (n, _cut(p, r, path))
            for n, p in enumerate(parts)
            for r in planned.get(p.file, [])
            if (r.end is None or r.end > p.begin)
            and (p.where != NO_QUEUE_UNIT or r.begin < kept[p.file])
        ]
        results = checker.map(_judge_in_worker, [t for _, t in tasks])
        assert results is not None
        expected = [p.begin for p in parts]
        ended = [False] * len(parts)
        for (n, task), found in zip(tasks, results, strict=True):
            if ended[n]:
                continue  # the file's walk ended in an earlier range
            if found.start != expected[n]:
                again = replace(task, shipped="", begin=expected[n], sync=False)
                found = _judge(state.store, here, again)
            yield found
            expected[n], ended[n] = found.stop, found.ended
    global _BOUND
    _BOUND = None  # one process: it held this store's queues


def served_check(state: BrokerState) -> ServedCheck:
    """The no-queue-unit rule over the state after the restart."""
    return ServedCheck(
        state.store.maps,
        state.queues,
        state.commitlog,
        state.commitlog_file_size,
        state.checks.intact,
    )


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
