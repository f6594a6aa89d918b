"""Lookups by queue offset and store time."""

from __future__ import annotations

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
from rmqinspect.analysis.queues import queue_bounds, unit_at
from rmqinspect.analysis.units import UnitStatus, resolve_unit
from rmqinspect.errors import StoreError
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
        unit = unit_at(store, topic, queue_id, offset)
    except StoreError as err:
        result.rejected.append(Rejected(-1, err.message))
        if offset >= bounds.max_offset:
            find_undispatched(store, result, topic, queue_id, offset, progress)
        return result
    view = resolve_unit(store, topic, queue_id, offset, unit)
    result.query["unit"] = {"phy_offset": view.phy_offset, "size": view.size, "tags_code": unit[2]}
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
    queues' end (what they do not hold yet); ``scan`` walks the whole commitlog instead."""
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
        bounds = queue_bounds(store, qid)
        first = _first_at_or_after(store, qid, bounds.min_offset, bounds.max_offset, begin)
        taken = 0
        for qoff in range(first, bounds.max_offset):
            if limit is not None and taken > limit:
                break  # times rise along a queue: later units cannot make the first ``limit``
            view = resolve_unit(store, topic, qid.queue_id, qoff, unit_at(store, *_ref(qid), qoff))
            if view.message is None or view.status is not UnitStatus.FOUND:
                continue
            ts = view.message.store_timestamp
            if ts > end:
                break
            if ts >= begin:
                result.hits.append(Hit(view.message, Via.CONSUME_QUEUE))
                taken += 1
    time_tail(store, topic, begin, end, result, progress)
    if not queues and not result.hits:
        result.warnings.append(
            f"no consume queue for topic {topic!r}; messages only in the commitlog need --scan"
        )
        result.suggest_scan = True
    sort_hits(result)
    keep_limit(result, limit)
    return result


def _ref(qid: QueueId) -> tuple[str, int]:
    return qid.topic, qid.queue_id


def _first_at_or_after(store: Store, qid: QueueId, low: int, high: int, ts: int) -> int:
    """Smallest queue offset whose message was stored at or after ``ts`` (store times rise
    along a queue); units that point nowhere count as "before"."""
    while low < high:
        mid = (low + high) // 2
        view = resolve_unit(store, qid.topic, qid.queue_id, mid, unit_at(store, *_ref(qid), mid))
        t = view.message.store_timestamp if view.message is not None else None
        if t is not None and t >= ts:
            high = mid
        else:
            low = mid + 1
    return low
