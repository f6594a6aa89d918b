"""The 4.9 ``OFFSET_MOVED_EVENT`` records a pull of an out-of-range offset leaves
(``PullMessageProcessor.generateOffsetMovedEvent``), read through their consume queue."""

from __future__ import annotations

from rmqinspect.analysis.groups_model import MovedEvent
from rmqinspect.analysis.queues import iter_unit_chunks, queue_bounds
from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format.config import parse_offset_moved_event
from rmqinspect.format.fastjson import loads
from rmqinspect.format.fate import OFFSET_MOVED_EVENT
from rmqinspect.store.model import Store


def moved_events(store: Store) -> tuple[list[MovedEvent], str | None, list[str]]:
    """The store's ``OFFSET_MOVED_EVENT`` records read through their consume queue on disk,
    how they were read (None: no such queue) and the records that do not decode."""
    queues = sorted(
        (q for q in store.queue_dirs if q.topic == OFFSET_MOVED_EVENT),
        key=lambda q: q.queue_id,
    )
    if not queues:
        return [], None, []
    events: list[MovedEvent] = []
    problems: list[str] = []
    for qid in queues:
        b = queue_bounds(store, qid)
        if b.max_offset <= b.min_offset:
            continue
        for chunk in iter_unit_chunks(
            store, qid.topic, qid.queue_id, b.min_offset, b.message_count
        ):
            for q_off, unit in zip(chunk.queue_offsets.tolist(), chunk.units, strict=True):
                event = _moved_event(store, qid.queue_id, q_off, int(unit["phy_offset"]))
                events.append(event)
                if event.problem is not None:
                    problems.append(
                        f"{OFFSET_MOVED_EVENT}/{qid.queue_id} queue offset {q_off} "
                        f"(physical offset {event.physical_offset}): {event.problem}"
                    )
    return events, "its consume queue on disk", problems


def _moved_event(
    store: Store, queue_id: int, queue_offset: int, physical_offset: int
) -> MovedEvent:
    try:
        record = store.read_message(physical_offset)
    except StoreError as err:
        return MovedEvent(queue_id, queue_offset, physical_offset, 0, None, f"unreadable: {err}")
    try:
        event = parse_offset_moved_event(loads(record.body or b""))
    except DecodeError as err:
        return MovedEvent(
            queue_id,
            queue_offset,
            physical_offset,
            record.store_timestamp,
            None,
            f"the body is not an OffsetMovedEvent: {err.message}",
        )
    return MovedEvent(queue_id, queue_offset, physical_offset, record.store_timestamp, event, None)
