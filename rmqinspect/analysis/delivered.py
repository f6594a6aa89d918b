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

import contextlib
import hashlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format import properties as props
from rmqinspect.format.columns import RecordColumns, decode_text
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.format.fate import DLQ_PREFIX, RETRY_PREFIX, dlq_topic, retry_topic
from rmqinspect.format.ids import decode_offset_msg_id
from rmqinspect.format.npbytes import I64
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


@dataclass
class _Proof:
    """One group's send-backs and retry copies as read, in compact form: as text and tuples
    they took about 250 bytes a record (30 MB for a 2 GB store's 190,000 of them), here 16
    bytes a send-back and 28 a retry copy."""

    backs: bytearray = field(default_factory=bytearray)  # links of its send-backs
    retry_links: bytearray = field(default_factory=bytearray)  # each retry copy's next link
    retry_queue_ids: array[int] = field(default_factory=lambda: array("i"))
    retry_queue_offsets: array[int] = field(default_factory=lambda: array("q"))
    origins: array[int] = field(default_factory=lambda: array("q"))  # physical offsets named


def _link(uniq: str, times: int) -> bytes:
    """A send-back's link (UNIQ_KEY, reconsume times) as a 16-byte BLAKE2b digest: two distinct
    links share one with a chance of about 2**-64 among 2**32 records."""
    text = f"{times}\0{uniq}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).digest()


def consumed_by_groups(store: Store, groups: set[str]) -> dict[str, dict[QueueId, I64]]:
    """Per group, the queue offsets (by queue, sorted, distinct) of copies the store proves
    were delivered to it: the copy an ``ORIGIN_MESSAGE_ID`` of one of its send-backs names, and
    each copy in its ``%RETRY%`` topic that a later send-back of the same message (same
    UNIQ_KEY, reconsume times + 1) followed. An ``ORIGIN_MESSAGE_ID`` that names no record is
    left out (``trace`` reports it)."""
    bound = {retry_topic(g): g for g in groups} | {dlq_topic(g): g for g in groups}
    proofs: dict[str, _Proof] = {}
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
            proof = proofs.setdefault(group, _Proof())
            times = int(cols.reconsume_times[i])
            key = uniq[k]
            if topic == SCHEDULE_TOPIC or topic.startswith(DLQ_PREFIX):
                text = origin[k]
                if text:
                    with contextlib.suppress(DecodeError):  # names no record
                        proof.origins.append(decode_offset_msg_id(text).physical_offset)
                if key is not None:
                    proof.backs += _link(key, times)
            elif key is not None:
                # Its topic is the group's %RETRY% topic (``bound``): only the queue is kept.
                proof.retry_links += _link(key, times + 1)
                proof.retry_queue_ids.append(int(cols.queue_id[i]))
                proof.retry_queue_offsets.append(int(cols.queue_offset[i]))
    out: dict[str, dict[QueueId, I64]] = {}
    for group, proof in proofs.items():
        marks: dict[QueueId, list[I64]] = {}
        # Sorted and searched (np.isin's sort of both took three times as much).
        backs = np.sort(np.frombuffer(proof.backs, "S16"))
        links = np.frombuffer(proof.retry_links, "S16")
        at = np.minimum(np.searchsorted(backs, links), max(len(backs) - 1, 0))
        again = backs[at] == links if len(backs) else np.zeros(len(links), bool)
        del backs, at
        queue_ids = np.frombuffer(proof.retry_queue_ids, np.int32)[again]
        queue_offsets = np.frombuffer(proof.retry_queue_offsets, np.int64)[again]
        for queue_id in np.unique(queue_ids).tolist():
            qid = QueueId(retry_topic(group), queue_id)
            marks.setdefault(qid, []).append(queue_offsets[queue_ids == queue_id])
        named: dict[QueueId, array[int]] = {}
        for position in np.unique(np.frombuffer(proof.origins, np.int64)).tolist():
            try:
                record = store.read_message(position, with_body=False)
            except (DecodeError, StoreError):
                continue
            qid = QueueId(record.topic, record.queue_id)
            named.setdefault(qid, array("q")).append(record.queue_offset)
        for qid, offsets in named.items():
            marks.setdefault(qid, []).append(np.frombuffer(offsets, np.int64))
        if marks:
            out[group] = {qid: np.unique(np.concatenate(parts)) for qid, parts in marks.items()}
    return out
