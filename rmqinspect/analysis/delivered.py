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
import sqlite3
from collections.abc import Iterator

import numpy as np

from rmqinspect.analysis.scratch import Scratch
from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format import properties as props
from rmqinspect.format.columns import RecordColumns, decode_text
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.format.fate import dlq_topic, retry_topic
from rmqinspect.format.ids import decode_offset_msg_id
from rmqinspect.format.message_record import MessageRecord
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


class GroupProof:
    """What :func:`consumed_by_groups` proves, held in its scratch database (``proven``: one row
    per group, queue and proven queue offset) and counted a range at a time."""

    def __init__(self, scratch: Scratch, group_ids: dict[str, int]) -> None:
        self._scratch = scratch
        self._group_ids = group_ids

    def count(self, group: str, qid: QueueId, start: int, end: int) -> int:
        """How many distinct queue offsets of ``qid`` in [start, end) the store proves were
        delivered to ``group``."""
        g = self._group_ids.get(group)
        if g is None:
            return 0
        (n,) = self._scratch.db.execute(
            "SELECT COUNT(DISTINCT queue_offset) FROM proven WHERE g = ? AND topic = ? "
            "AND queue_id = ? AND queue_offset >= ? AND queue_offset < ?",
            (g, qid.topic, qid.queue_id, start, end),
        ).fetchone()
        return int(n)


_PROOF_TABLES = """
CREATE TABLE back (g INTEGER, times INTEGER, uniq TEXT);
CREATE TABLE retry (g INTEGER, times INTEGER, uniq TEXT, queue_id INTEGER, queue_offset INTEGER);
CREATE TABLE origin (g INTEGER, position INTEGER);
CREATE TABLE proven (g INTEGER, topic TEXT, queue_id INTEGER, queue_offset INTEGER);
"""
_BATCH = 4096  # rows a statement inserts at once
_BACK, _RETRY = 1, 2  # what a topic's records are to the group it is bound to


def consumed_by_groups(store: Store, groups: set[str]) -> GroupProof:
    """Per group, the queue offsets of copies the store proves were delivered to it: the copy
    an ``ORIGIN_MESSAGE_ID`` of one of its send-backs names, and each copy in its ``%RETRY%``
    topic that a later send-back of the same message (same UNIQ_KEY, reconsume times + 1)
    followed. An ``ORIGIN_MESSAGE_ID`` that names no record is left out (``trace`` reports it).

    The send-backs, retry copies and origins grow with the store: they go to a scratch
    database as the walk reads them, and are joined there, so this process holds one run."""
    group_ids = {g: n for n, g in enumerate(sorted(groups))}
    bound = {retry_topic(g): (n, _RETRY) for g, n in group_ids.items()} | {
        dlq_topic(g): (n, _BACK) for g, n in group_ids.items()
    }
    scratch = Scratch()
    db = scratch.db
    db.executescript(_PROOF_TABLES)
    db.execute("BEGIN")
    for _start, cols in _runs(store):
        _keep_links(db, cols, bound)
    db.execute("COMMIT")
    db.execute("BEGIN")
    db.execute("CREATE INDEX back_link ON back (g, times, uniq)")
    db.executemany(
        "INSERT INTO proven SELECT r.g, ?, r.queue_id, r.queue_offset FROM retry AS r "
        "WHERE r.g = ? AND EXISTS (SELECT 1 FROM back AS b "
        "WHERE b.g = r.g AND b.times = r.times AND b.uniq = r.uniq)",
        [(retry_topic(g), n) for g, n in group_ids.items()],
    )
    db.execute("DROP TABLE back")
    db.execute("DROP TABLE retry")
    _named_copies(store, db)
    db.execute("DROP TABLE origin")
    db.execute("CREATE INDEX proven_at ON proven (g, topic, queue_id, queue_offset)")
    db.execute("COMMIT")
    return GroupProof(scratch, group_ids)


def _keep_links(
    db: sqlite3.Connection, cols: RecordColumns, bound: dict[str, tuple[int, int]]
) -> None:
    """One run's send-backs (schedule copies bound for a group's ``%RETRY%`` topic, copies in
    its ``%DLQ%`` topic), their origins and the group's retry copies, as rows of the scratch
    tables (a retry copy under the link of the send-back that would follow it)."""
    topic_ids, topic_bytes = cols.topic_ids()
    topics = [decode_text(t) for t in topic_bytes]
    of_topic = np.array([bound.get(t, (-1, 0)) for t in topics], np.int64).reshape(-1, 2)
    schedule = np.array([t == SCHEDULE_TOPIC for t in topics], bool)
    rows = np.flatnonzero((of_topic[topic_ids, 0] >= 0) | schedule[topic_ids])
    if not len(rows):
        return
    group, kind = of_topic[topic_ids[rows]].T.copy()
    scheduled = np.flatnonzero(schedule[topic_ids[rows]])
    if len(scheduled):
        # A schedule copy is bound where its REAL_TOPIC says; it is a send-back.
        real = cols.property_values(props.REAL_TOPIC, rows[scheduled])
        group[scheduled] = [bound.get(t or "", (-1, 0))[0] for t in real]
        kind[scheduled] = _BACK
    keep = group >= 0
    rows, group, kind = rows[keep], group[keep], kind[keep]
    if not len(rows):
        return
    uniq = cols.property_values(props.UNIQ_KEY, rows)
    times = cols.reconsume_times[rows].astype(np.int64)
    backs = np.flatnonzero(kind == _BACK)
    origins = cols.property_values(props.ORIGIN_MESSAGE_ID, rows[backs])
    named = []
    for g, text in zip(group[backs].tolist(), origins, strict=True):
        if text:
            with contextlib.suppress(DecodeError):  # names no record
                named.append((g, decode_offset_msg_id(text).physical_offset))
    db.executemany("INSERT INTO origin VALUES (?, ?)", named)
    linked = np.array([k is not None for k in uniq], bool)
    back = np.flatnonzero(linked & (kind == _BACK))
    db.executemany(
        "INSERT INTO back VALUES (?, ?, ?)",
        zip(
            group[back].tolist(),
            times[back].tolist(),
            [uniq[i] for i in back.tolist()],
            strict=True,
        ),
    )
    retry = np.flatnonzero(linked & (kind == _RETRY))
    at = rows[retry]
    db.executemany(
        "INSERT INTO retry VALUES (?, ?, ?, ?, ?)",
        zip(
            group[retry].tolist(),
            (times[retry] + 1).tolist(),
            [uniq[i] for i in retry.tolist()],
            cols.queue_id[at].tolist(),
            cols.queue_offset[at].tolist(),
            strict=True,
        ),
    )


def _named_copies(store: Store, db: sqlite3.Connection) -> None:
    """The records the origins name, in ``proven`` under their own queue: each read once, in
    commitlog order, as the cursor yields them."""
    rows = db.execute("SELECT DISTINCT position, g FROM origin ORDER BY position, g")
    batch: list[tuple[int, str, int, int]] = []
    read: tuple[int, MessageRecord | None] | None = None
    for position, g in rows:
        if read is None or read[0] != position:
            try:
                read = position, store.read_message(position, with_body=False)
            except (DecodeError, StoreError):
                read = position, None
        record = read[1]
        if record is not None:
            batch.append((g, record.topic, record.queue_id, record.queue_offset))
        if len(batch) >= _BATCH:
            db.executemany("INSERT INTO proven VALUES (?, ?, ?, ?)", batch)
            batch.clear()
    db.executemany("INSERT INTO proven VALUES (?, ?, ?, ?)", batch)
