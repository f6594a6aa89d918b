"""``offsets --at TIME``: per queue the first offset whose message was stored at or after TIME,
what ``mqadmin resetOffsetByTime`` would set (the broker answers each queue's
``getOffsetInQueueByTime``), beside a group's committed offsets when one is named."""

from __future__ import annotations

from dataclasses import dataclass

from rmqinspect.analysis.lookup.direct import offset_at_time
from rmqinspect.analysis.offsets import offsets_report
from rmqinspect.analysis.queues import queue_bounds
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store


@dataclass(frozen=True, slots=True)
class OffsetAtTime:
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    offset: int  # the first queue offset stored at or after the time (max_offset: none is)
    store_timestamp: int | None  # of the message at ``offset`` (None: none, or unreadable)
    committed_offset: int | None = None  # the group's, from consumerOffset.json

    @property
    def moves_by(self) -> int | None:
        """What a reset does to the group's offset: negative replays that many messages,
        positive skips them."""
        return None if self.committed_offset is None else self.offset - self.committed_offset


@dataclass(frozen=True, slots=True)
class OffsetsAtReport:
    timestamp: int
    group: str | None
    queues: tuple[OffsetAtTime, ...]
    groups: tuple[str, ...]  # every group with committed offsets (to name when --group misses)


def offsets_at(
    store: Store, timestamp: int, group: str | None = None, topic: str | None = None
) -> OffsetsAtReport:
    """Every queue (of ``topic``; with ``group``, of the topics the group has committed offsets
    for, as resetOffsetByTime resets the group's subscribed topics) answered at ``timestamp``."""
    committed: dict[QueueId, int] = {}
    topics: set[str] = set()
    report = offsets_report(store, group, topic, restart=False)
    if group is not None:
        committed = {
            QueueId(r.topic, r.queue_id): r.offset
            for r in report.rows
            if r.table == "consumer" and r.group == group
        }
        topics = {q.topic for q in committed}
    rows = []
    for qid in store.queue_dirs:
        if (topic is not None and qid.topic != topic) or (
            group is not None and qid.topic not in topics
        ):
            continue
        bounds = queue_bounds(store, qid)
        offset, unit = offset_at_time(store, qid, bounds, timestamp)
        message = unit.message if unit is not None else None
        rows.append(
            OffsetAtTime(
                qid.topic,
                qid.queue_id,
                bounds.min_offset,
                bounds.max_offset,
                offset,
                None if message is None else message.store_timestamp,
                committed.get(qid),
            )
        )
    return OffsetsAtReport(timestamp, group, tuple(rows), report.groups)
