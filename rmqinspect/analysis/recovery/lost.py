"""What the restart destroys: every intact message on disk the restarted broker cannot serve.

Three places (``where``): past the recovered end in the cut file (``past_end``), in the files
truncation deletes (``deleted_file``), and in the kept commitlog without a consume-queue unit after
the restart (``no_queue_unit``: a queue that nothing rebuilds, units ``ConsumeQueue.recover``
dropped, or the part of a queue before the abnormal recovery's start file). Damage is skipped by
resynchronising on the next intact record that names its own position.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqinspect.analysis.recovery.report import BadRecord, LostMessage, LostReport
from rmqinspect.analysis.recovery.served import Scan, ServedCheck, walk_unserved
from rmqinspect.analysis.recovery.state import BrokerState
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.format.columns import RecordColumns, decode_text
from rmqinspect.format.ids import msg_id
from rmqinspect.format.javamath import wrap32
from rmqinspect.format.scan import FileEvent, Skipped, data_extent
from rmqinspect.store.files import StoreFile
from rmqinspect.store.layout import QueueId

_MESSAGE_MAGICS = (cl.MESSAGE_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE_V2)


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
    restart, per queue, and the queues with records but no consume queue at all; in a DLedger
    store also the damage kept inside it (DLedger checks no record)."""

    per_queue: dict[QueueId, int]
    queues_without_consume_queue: list[QueueId]
    kept_damage: list[BadRecord] = field(default_factory=list)


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
    damaged = 0
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
                    damaged += 1
                continue
            cols = event.columns
            for i in _lost_in_run(cols, queue_max):
                if listing.wants():
                    listing.add(cols.record(i), disk.name, where)
                else:
                    listing.tally(where)
    finally:
        buf.release()
        state.store.maps.release(disk, begin, disk.length)
    return damaged, extent


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
                    kept_damage.append(_bad(found, f.start, f.name))
                continue
            qid = QueueId(found.topic, found.queue_id)
            per_queue[qid] = per_queue.get(qid, 0) + 1
            listing.add(found, f.name, "no_queue_unit")
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


def served_check(state: BrokerState) -> ServedCheck:
    """The no-queue-unit rule over the state after the restart."""
    return ServedCheck(
        state.store.maps,
        state.queues,
        state.commitlog,
        state.commitlog_file_size,
        state.checks.intact,
    )


def _bad(event: Skipped, file_start: int, name: str) -> BadRecord:
    r = event.result
    return BadRecord(
        file_start + event.start,
        name,
        event.start,
        r.reason.value,
        r.detail,
        r.total_size,
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
        rec.physical_offset,
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
