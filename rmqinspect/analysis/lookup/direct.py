"""Lookups by queue offset and store time."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis import Progress
from rmqinspect.analysis.lookup.result import (
    Hit,
    LookupResult,
    Mode,
    Rejected,
    Via,
    keep_limit,
    sort_hits,
)
from rmqinspect.analysis.lookup.scan import (
    find_undispatched,
    in_time,
    scan_records,
    time_tail,
    with_body,
)
from rmqinspect.analysis.queues import QueueBounds, iter_unit_runs, queue_bounds, unit_holding
from rmqinspect.analysis.units import UnitStatus, UnitView, resolve_unit
from rmqinspect.errors import StoreError
from rmqinspect.format.columns import RecordColumns
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store

# --- queue offset ---------------------------------------------------------------------------


def parse_queue_ref(text: str) -> tuple[str, int, int]:
    """``TOPIC:QUEUE_ID:OFFSET`` (topic names cannot contain ':')."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise ValueError(f"expected TOPIC:QUEUE_ID:OFFSET, got {text!r}")
    try:
        return parts[0], int(parts[1]), int(parts[2])
    except ValueError:
        raise ValueError(f"queue id and offset must be integers in {text!r}") from None


def lookup_queue_offset(
    store: Store, topic: str, queue_id: int, offset: int, progress: Progress | None = None
) -> LookupResult:
    result = LookupResult(
        Mode.QUEUE_OFFSET, {"topic": topic, "queue_id": queue_id, "queue_offset": offset}
    )
    qid = QueueId(topic, queue_id)
    if qid not in store.queue_dirs:
        result.warnings.append(f"no consume queue directory for {qid}")
        result.rejected.append(Rejected(-1, f"no consume queue {qid} on disk"))
        find_undispatched(store, result, topic, queue_id, offset, progress)
        return result
    bounds = queue_bounds(store, qid)
    if not bounds.min_offset <= offset < bounds.max_offset:
        result.warnings.append(
            f"queue offset {offset} is outside {qid}'s range "
            f"[{bounds.min_offset}, {bounds.max_offset})"
        )
    try:
        # a BatchConsumeQueue's unit serves the offsets of its batch from its msgBaseOffset
        written_at, unit = unit_holding(store, topic, queue_id, offset)
    except StoreError as err:
        result.rejected.append(Rejected(-1, err.message))
        if offset >= bounds.max_offset:
            find_undispatched(store, result, topic, queue_id, offset, progress)
        return result
    view = resolve_unit(store, topic, queue_id, written_at, unit)
    shown: dict[str, int] = {} if written_at == offset else {"msg_base_offset": written_at}
    result.query["unit"] = {
        **shown,
        "physical_offset": view.phy_offset,
        "size": view.size,
        "tags_code": unit[2],
    }
    if view.status is UnitStatus.FOUND and view.message is not None:
        result.hits.append(Hit(view.message, Via.CONSUME_QUEUE))
        return result
    why = f"unit points nowhere: {view.status.value}"
    result.rejected.append(
        Rejected(view.phy_offset, f"{why} ({view.detail})" if view.detail else why, view.message)
    )
    if offset >= bounds.max_offset:
        find_undispatched(store, result, topic, queue_id, offset, progress)
    return result


# --- store time ---------------------------------------------------------------------------


def lookup_time(
    store: Store,
    topic: str,
    begin: int,
    end: int,
    *,
    limit: int | None,
    scan: bool = False,
    progress: Progress | None = None,
) -> LookupResult:
    """Messages of ``topic`` stored in ``[begin, end]``: a binary search per consume queue on
    store time (``getOffsetInQueueByTime``), then a forward walk, and the commitlog after the
    queues' end (what they do not hold yet); ``scan`` walks the whole commitlog instead. Where
    units do not lead to their messages, the commitlog between their neighbours is walked."""
    result = LookupResult(Mode.TIME, {"topic": topic, "begin": begin, "end": end, "limit": limit})
    if scan:
        result.scanned = True
        found = scan_records(
            store, None, None, progress, [topic], result.skipped, in_time(begin, end)
        )
        for rec in found:
            if rec.topic == topic and begin <= rec.store_timestamp <= end:
                result.hits.append(Hit(with_body(store, rec), Via.SCAN))
                if limit is not None and len(result.hits) > limit:
                    break  # one more than asked for: enough to know the list is cut
        sort_hits(result)
        keep_limit(result, limit)
        return result
    queues = [qid for qid in store.queue_dirs if qid.topic == topic]
    for qid in queues:
        _queue_window(store, qid, begin, end, limit, result)
    time_tail(store, topic, begin, end, result, progress)
    if not queues and not result.hits:
        result.warnings.append(
            f"no consume queue for topic {topic!r}; messages only in the commitlog need --scan"
        )
        result.suggest_scan = True
    sort_hits(result)
    keep_limit(result, limit)
    return result


def _queue_window(
    store: Store,
    qid: QueueId,
    begin: int,
    end: int,
    limit: int | None,
    result: LookupResult,
) -> None:
    """The messages of one queue stored in ``[begin, end]``, read through its units. A run of
    units that do not lead to their messages is a gap: the commitlog between the messages of
    the units around it (to the commitlog's end after the queue's last) is walked for the
    queue's messages instead, and a warning says so."""
    bounds = queue_bounds(store, qid)
    first = _first_at_or_after(store, qid, bounds.min_offset, bounds.max_offset, begin)
    before = _readable(store, qid, first - 1) if first > bounds.min_offset else None
    after_last = None if before is None else before.phy_offset + before.size
    gap: range | None = None  # the queue offsets of the current gap (a gap is contiguous)
    taken = 0
    for qoff, last, view in _readable_units(store, qid, first, bounds.max_offset):
        if limit is not None and taken > limit:
            return  # times rise along a queue: later units cannot make the first ``limit``
        if view is None:
            gap = range(qoff if gap is None else gap.start, last + 1)
            continue
        if gap is not None:
            taken += _walk_gap(store, qid, gap, after_last, view.phy_offset, begin, end, result)
            gap = None
        assert view.message is not None
        ts = view.message.store_timestamp
        if ts > end:
            return
        if ts >= begin:
            result.hits.append(Hit(view.message, Via.CONSUME_QUEUE))
            taken += 1
        after_last = view.phy_offset + view.size
    if gap is not None:
        _walk_gap(store, qid, gap, after_last, None, begin, end, result)


def _readable_units(
    store: Store, qid: QueueId, start: int, stop: int
) -> Iterator[tuple[int, int, UnitView | None]]:
    """(first, last queue offset, view) for each unit of ``[start, stop)`` with what
    :func:`_readable` says of it, except that a run of zero units (a queue range over files of
    zeros: a million units in 20,000 files of 1,000 bytes) or of offsets no file holds comes
    as one, None: it leads to no message, and resolving each of its units took minutes."""
    at = start
    for qoff, unit, n in iter_unit_runs(store, qid.topic, qid.queue_id, start, stop - start):
        if qoff > at:
            yield at, qoff - 1, None  # no file holds these
        if unit == (0, 0, 0):
            yield qoff, qoff + n - 1, None
        else:
            # n > 1: a BatchConsumeQueue unit, whose record serves its n offsets
            view = resolve_unit(store, qid.topic, qid.queue_id, qoff, unit)
            found = view.status is UnitStatus.FOUND and view.message is not None
            yield qoff, qoff + n - 1, view if found else None
        at = qoff + n
    if at < stop:
        yield at, stop - 1, None


def _walk_gap(
    store: Store,
    qid: QueueId,
    gap: range,
    start: int | None,
    stop: int | None,
    begin: int,
    end: int,
    result: LookupResult,
) -> int:
    """Walk the commitlog ``[start, stop)`` (None: its first record, its end) for the messages
    of queue ``qid`` at the queue offsets ``gap`` stored in ``[begin, end]``; returns how many
    it adds."""
    first, last = gap.start, gap.stop - 1
    span = f"queue offset {first} does" if first == last else f"queue offsets {first}..{last} do"
    lo = "start" if start is None else str(start)
    hi = "end" if stop is None else str(stop)
    result.warnings.append(
        f"{qid}: {span} not lead to a message; walked the commitlog [{lo}, {hi}) instead"
    )
    wanted = gap

    def select(cols: RecordColumns) -> npt.NDArray[np.bool_]:
        keep: npt.NDArray[np.bool_] = in_time(begin, end)(cols) & (cols.queue_id == qid.queue_id)
        return keep

    seen = {h.record.position for h in result.hits}
    added = 0
    for rec in scan_records(store, start, stop, None, [qid.topic], result.skipped, select):
        if rec.position in seen or rec.queue_offset not in wanted:
            continue
        if rec.topic == qid.topic and rec.enters_consume_queue:
            note = f"its unit ({qid} queue offset {rec.queue_offset}) does not lead to it"
            result.hits.append(Hit(with_body(store, rec), Via.SCAN, (note,)))
            added += 1
    return added


def _readable(store: Store, qid: QueueId, qoff: int) -> UnitView | None:
    """The unit at ``qoff`` when it leads to its message; None when it does not, or when no
    consume-queue file holds it."""
    try:
        written_at, unit = unit_holding(store, qid.topic, qid.queue_id, qoff)
    except StoreError:
        return None
    view = resolve_unit(store, qid.topic, qid.queue_id, written_at, unit)
    return view if view.status is UnitStatus.FOUND and view.message is not None else None


def offset_at_time(
    store: Store, qid: QueueId, bounds: QueueBounds, ts: int
) -> tuple[int, UnitView | None]:
    """The first queue offset of ``qid`` whose message was stored at or after ``ts``, and the
    unit there when it leads to its message: what 5.x answers ``getOffsetInQueueByTime`` with
    (ConsumeQueue.binarySearchInQueueByTime, BoundaryType.LOWER: the first of equal store
    times; the queue's max when every message is older; its min when none is). 4.9.8's
    ConsumeQueue.getOffsetInQueueByTime picks the file by modification time and answers the
    nearer of the two units around ``ts``: neither is on disk to reproduce offline. ``bounds``:
    the queue's (:func:`queue_bounds`)."""
    offset = _first_at_or_after(store, qid, bounds.min_offset, bounds.max_offset, ts)
    return offset, _readable(store, qid, offset) if offset < bounds.max_offset else None


def _first_at_or_after(store: Store, qid: QueueId, low: int, high: int, ts: int) -> int:
    """Where a forward walk meets every message of the queue stored at or after ``ts`` (store
    times rise along a queue): the queue offset after the last unit that leads to a message
    stored before ``ts``. A unit that does not lead to a message has no time: the search reads
    on to the next one that does, so damage cannot turn it past an earlier match."""
    while low < high:
        mid = (low + high) // 2
        last, view = mid, None
        for _, last, view in _readable_units(store, qid, mid, high):  # noqa: B007
            if view is not None:
                break
        if view is not None and view.message is not None and view.message.store_timestamp < ts:
            # past every offset the unit serves (a batch's: more than one), so low rises
            low = max(last, mid) + 1
        else:
            high = mid
    return low
