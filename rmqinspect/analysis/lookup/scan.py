"""Commitlog walks for lookups: a whole-log scan, and the tail the queues do not hold yet."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis import Progress
from rmqinspect.analysis.inventory import commitlog_summary
from rmqinspect.analysis.lookup.result import Hit, LookupResult, Via
from rmqinspect.analysis.messages import SkippedRange, skipped_range
from rmqinspect.analysis.queues import (
    all_queue_bounds,
)
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.scan import Skipped, WalkPolicy
from rmqinspect.store.model import Store

# --- scanning -------------------------------------------------------------------------------------


def scan_records(
    store: Store,
    start: int | None,
    end: int | None,
    progress: Progress | None,
    topics: Sequence[str],
    skipped: list[SkippedRange],
    select: Callable[[RecordColumns], npt.NDArray[np.bool_]] | None = None,
) -> Iterator[cl.MessageRecord]:
    """Every intact record of ``topics`` in ``[start, end)`` (and ``select``, a mask over the
    scanner's columns, when given), CRC unchecked, without its body: matching needs only the
    header and properties (see :func:`with_body`). Records are built only for what the columns
    already match. A lookup answers which messages exist, so the walk is the forensic one, as
    ``messages`` walks: past damage at the next record, each byte range stepped over added to
    ``skipped`` (the answer is complete but for what they held)."""
    opts = store.check_options(check_crc=False, read_body=False)
    last_pos = start if start is not None else max(store.commitlog.min_offset, 0)
    for f, event in store.scan(start, opts, policy=WalkPolicy.FORENSIC):
        if isinstance(event, Skipped):
            damage = skipped_range(store, f, event)
            if end is not None and damage.physical_offset >= end:
                break
            if damage not in skipped:  # another walk of the same lookup may have met it
                skipped.append(damage)
            continue
        cols = event.columns
        keep = cols.topic_mask(topics)
        if end is not None:
            keep &= cols.positions + f.start < end
        if select is not None:
            keep &= select(cols)
        yield from cols.records(np.flatnonzero(keep), with_body=False)
        run_end = f.start + event.end
        if end is not None and run_end >= end:
            break
        if progress is not None and run_end > last_pos:
            progress(run_end - last_pos)
            last_pos = run_end


def with_body(store: Store, rec: cl.MessageRecord) -> cl.MessageRecord:
    return store.read_message(rec.position)


def readable_end_offset(store: Store) -> int:
    """Where valid records end (walking forward from the consume queues' end, CRC unchecked)."""
    return commitlog_summary(store, all_queue_bounds(store)).max_offset


@dataclass(frozen=True, slots=True)
class Tail:
    """The commitlog after the consume queues' last record: what the broker stored but had not
    dispatched. It dispatches ``[start, readable_end)`` when it restarts; past
    ``readable_end`` (the first record the broker's walk rejects) lie only messages it would
    not."""

    start: int
    readable_end: int

    def note(self, rec: cl.MessageRecord) -> str:
        """Why a message found in the tail is not in its consume queue on disk."""
        return UNDISPATCHED if rec.position < self.readable_end else PAST_DAMAGE


UNDISPATCHED = "not in the consume queue on disk: stored after the last dispatched record"
PAST_DAMAGE = (
    "not in the consume queue on disk: stored after damage that ends the broker's walk, "
    "so a restart would not dispatch it"
)


def undispatched_tail(store: Store) -> Tail:
    bounds = all_queue_bounds(store)
    start = max((b.last_phy_offset for b in bounds), default=-1)
    if start < 0 or store.commitlog.find(start) is None:
        start = max(store.commitlog.min_offset, 0)
    return Tail(start, commitlog_summary(store, bounds).max_offset)


def find_undispatched(
    store: Store,
    result: LookupResult,
    topic: str,
    queue_id: int,
    offset: int,
    progress: Progress | None,
) -> None:
    """Look for the record in the commitlog after the consume queues' end (up to the broker's
    readable end: a queue offset past it is one the broker never assigns)."""
    tail = undispatched_tail(store)
    if tail.start >= tail.readable_end:
        return
    result.tail_scanned = (tail.start, tail.readable_end)

    def select(cols: RecordColumns) -> npt.NDArray[np.bool_]:
        keep: npt.NDArray[np.bool_] = cols.queue_id == queue_id
        keep &= cols.queue_offset == offset
        return keep

    found = scan_records(
        store, tail.start, tail.readable_end, progress, [topic], result.skipped, select
    )
    for rec in found:
        if (rec.topic, rec.queue_id, rec.queue_offset) == (topic, queue_id, offset) and (
            rec.enters_consume_queue
        ):
            result.hits.append(Hit(with_body(store, rec), Via.TAIL_SCAN, (UNDISPATCHED,)))
            return


def in_time(begin: int, end: int) -> Callable[[RecordColumns], npt.NDArray[np.bool_]]:
    def select(cols: RecordColumns) -> npt.NDArray[np.bool_]:
        keep: npt.NDArray[np.bool_] = cols.store_timestamp >= begin
        keep &= cols.store_timestamp <= end
        return keep

    return select


def time_tail(
    store: Store,
    topic: str,
    begin: int,
    end: int,
    result: LookupResult,
    progress: Progress | None,
) -> None:
    """The messages of ``topic`` in ``[begin, end]`` the consume queues do not hold yet: the
    commitlog from their end to its own, past any damage (see :class:`Tail`)."""
    tail = undispatched_tail(store)
    stop = store.commitlog.end_offset
    if tail.start >= stop:
        return
    result.tail_scanned = (tail.start, stop)
    seen = {h.record.position for h in result.hits}
    found = scan_records(
        store, tail.start, None, progress, [topic], result.skipped, in_time(begin, end)
    )
    for rec in found:
        if rec.topic != topic or not rec.enters_consume_queue or rec.position in seen:
            continue
        if begin <= rec.store_timestamp <= end:
            result.hits.append(Hit(with_body(store, rec), Via.TAIL_SCAN, (tail.note(rec),)))
