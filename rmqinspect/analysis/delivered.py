"""What the store proves was delivered: the copies a delivery leaves behind.

- The schedule service delivers a unit by storing a new record in its ``REAL_TOPIC`` with the
  unit's UNIQ_KEY and reconsume times (``ScheduleMessageService.messageTimeup`` copies the
  message): :func:`delivered_units`.
- A push consumer that fails a message sends it back (``consumerSendMsgBack``): the broker
  stores a ``SCHEDULE_TOPIC_XXXX`` copy bound for ``%RETRY%<group>`` (or a ``%DLQ%<group>``
  copy) whose ``ORIGIN_MESSAGE_ID`` is the offsetMsgId of the copy the group first consumed
  and whose reconsume times is the failed copy's + 1: :func:`consumed_by_groups`. A message
  the group consumed successfully leaves nothing behind, so this is a lower bound.

Each is one forensic walk of the commitlog (damage stepped over) that keeps only the records
that matter (with ``REAL_TOPIC``, or in a schedule, retry or DLQ topic).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format import properties as props
from rmqinspect.format.columns import RecordColumns, decode_text
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.format.fate import DLQ_PREFIX, RETRY_PREFIX, dlq_topic, retry_topic
from rmqinspect.format.ids import decode_offset_msg_id
from rmqinspect.format.scan import Skipped, WalkPolicy
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store


def _runs(store: Store) -> Iterator[tuple[int, RecordColumns]]:
    """(file start, columns) of each run of a forensic walk without bodies."""
    opts = store.check_options(check_crc=False, read_body=False)
    for f, event in store.scan(None, opts, policy=WalkPolicy.FORENSIC):
        if not isinstance(event, Skipped):
            yield f.start, event.columns


def delivered_units(store: Store, end: int | None) -> dict[int, set[int]]:
    """Per schedule queue, the queue offsets of the units whose delivery is stored: a record in
    the unit's ``REAL_TOPIC`` with its UNIQ_KEY and reconsume times after it
    (``ScheduleMessageService.messageTimeup`` copies both), before ``end`` (the commitlog the
    restart keeps; None: all of it). One walk; only records with ``REAL_TOPIC`` are kept. A
    unit without UNIQ_KEY cannot be matched and counts as not delivered. Several units of one
    key are matched in store order, each delivery to the oldest unmatched unit before it
    (a level delivers in queue order)."""
    units: dict[tuple[str, str, int], list[tuple[int, int, int]]] = {}
    copies: dict[tuple[str, str, int], list[int]] = {}
    for file_start, cols in _runs(store):
        rows = np.arange(len(cols), dtype=np.int64)
        real = cols.property_values(props.REAL_TOPIC, rows)
        present = [i for i, v in enumerate(real) if v]
        if not present:
            continue
        uniq = cols.property_values(props.UNIQ_KEY, rows[present])
        topic_ids, topic_bytes = cols.topic_ids()
        topics = [decode_text(t) for t in topic_bytes]
        for i, key in zip(present, uniq, strict=True):
            position = file_start + int(cols.positions[i])
            if key is None or (end is not None and position >= end):
                continue
            real_topic = real[i] or ""
            link = (key, real_topic, int(cols.reconsume_times[i]))
            topic = topics[topic_ids[i]]
            if topic == SCHEDULE_TOPIC:
                units.setdefault(link, []).append(
                    (position, int(cols.queue_id[i]), int(cols.queue_offset[i]))
                )
            elif topic == real_topic:
                copies.setdefault(link, []).append(position)
    out: dict[int, set[int]] = {}
    for link, stored in units.items():
        waiting = sorted(stored)
        taken = 0
        for position in sorted(copies.get(link, ())):
            if taken < len(waiting) and waiting[taken][0] < position:
                _, queue_id, queue_offset = waiting[taken]
                out.setdefault(queue_id, set()).add(queue_offset)
                taken += 1
    return out


def consumed_by_groups(store: Store, groups: set[str]) -> dict[str, dict[QueueId, set[int]]]:
    """Per group, the queue offsets (by queue) of copies the store proves were delivered to it:
    the copy an ``ORIGIN_MESSAGE_ID`` of one of its send-backs names, and each copy in its
    ``%RETRY%`` topic that a later send-back of the same message (same UNIQ_KEY, reconsume
    times + 1) followed. An ``ORIGIN_MESSAGE_ID`` that names no record is left out (``trace``
    reports it)."""
    bound = {retry_topic(g): g for g in groups} | {dlq_topic(g): g for g in groups}
    origins: dict[str, set[str]] = {}
    sent_back: dict[str, set[tuple[str, int]]] = {}
    retries: dict[str, list[tuple[str, int, QueueId, int]]] = {}
    for _start, cols in _runs(store):
        topic_ids, topic_bytes = cols.topic_ids()
        topics = [decode_text(t) for t in topic_bytes]
        wanted = [
            i
            for i, t in enumerate(topics)
            if t == SCHEDULE_TOPIC or t.startswith((RETRY_PREFIX, DLQ_PREFIX))
        ]
        rows = np.flatnonzero(np.isin(topic_ids, np.array(wanted, np.int64)))
        if not len(rows):
            continue
        real = cols.property_values(props.REAL_TOPIC, rows)
        origin = cols.property_values(props.ORIGIN_MESSAGE_ID, rows)
        uniq = cols.property_values(props.UNIQ_KEY, rows)
        for k, i in enumerate(rows.tolist()):
            topic = topics[topic_ids[i]]
            dest = real[k] if topic == SCHEDULE_TOPIC else topic
            group = bound.get(dest or "")
            if group is None:
                continue
            times = int(cols.reconsume_times[i])
            if topic == SCHEDULE_TOPIC or topic.startswith(DLQ_PREFIX):
                if origin[k]:
                    origins.setdefault(group, set()).add(origin[k] or "")
                if uniq[k] is not None:
                    sent_back.setdefault(group, set()).add((uniq[k] or "", times))
            elif uniq[k] is not None:
                qid = QueueId(topic, int(cols.queue_id[i]))
                retries.setdefault(group, []).append(
                    (uniq[k] or "", times, qid, int(cols.queue_offset[i]))
                )
    out: dict[str, dict[QueueId, set[int]]] = {}
    for group in groups:
        marks: dict[QueueId, set[int]] = {}
        backs = sent_back.get(group, set())
        for key, times, qid, queue_offset in retries.get(group, ()):
            if (key, times + 1) in backs:
                marks.setdefault(qid, set()).add(queue_offset)
        for text in sorted(origins.get(group, ())):
            try:
                record = store.read_message(
                    decode_offset_msg_id(text).physical_offset, with_body=False
                )
            except (DecodeError, StoreError):
                continue
            marks.setdefault(QueueId(record.topic, record.queue_id), set()).add(record.queue_offset)
        if marks:
            out[group] = marks
    return out
