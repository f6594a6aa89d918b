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
that matter (with ``REAL_TOPIC``, or in a schedule, retry or DLQ topic). They grow with the
store, so they go to a scratch database as the walk reads them and are matched there; this
process holds one run of the walk and a few rows, whatever the store's size.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

import numpy as np

from rmqinspect.analysis.scratch import Scratch
from rmqinspect.errors import DecodeError
from rmqinspect.format import properties as props
from rmqinspect.format.columns import RecordColumns, decode_text
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.format.fate import dlq_topic, retry_topic
from rmqinspect.format.ids import decode_offset_msg_id
from rmqinspect.format.message_record import MessageRecord
from rmqinspect.format.npbytes import I64
from rmqinspect.format.scan import Skipped, WalkPolicy
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store
from rmqinspect.store.ordered_reads import OrderedReads


def _runs(store: Store) -> Iterator[tuple[int, RecordColumns]]:
    """(file start, columns) of each run of a forensic walk without bodies."""
    opts = store.check_options(check_crc=False, read_body=False)
    for f, event in store.scan(None, opts, policy=WalkPolicy.FORENSIC):
        if not isinstance(event, Skipped):
            yield f.start, event.columns


BY_SCHEDULE = ""
"""The owner of :func:`delivered_units`' proof: the schedule service, not a group."""


class Proven:
    """Queue offsets proven delivered, per owner (a group, or :data:`BY_SCHEDULE`), in a scratch
    database's ``proven`` table (one row per owner, queue and offset; indexed), read a range at
    a time."""

    def __init__(self, scratch: Scratch, owners: dict[str, int]) -> None:
        self._scratch = scratch
        self._owners = owners

    def count(self, owner: str, qid: QueueId, start: int, end: int) -> int:
        """How many distinct offsets of ``qid`` in [start, end) were delivered to ``owner``."""
        g = self._owners.get(owner)
        if g is None:
            return 0
        (n,) = self._scratch.db.execute(
            "SELECT COUNT(DISTINCT queue_offset) FROM proven WHERE g = ? AND topic = ? "
            "AND queue_id = ? AND queue_offset >= ? AND queue_offset < ?",
            (g, qid.topic, qid.queue_id, start, end),
        ).fetchone()
        return int(n)

    def offsets(self, owner: str, qid: QueueId, start: int, end: int) -> I64:
        """The distinct offsets of ``qid`` in [start, end) delivered to ``owner``, ascending."""
        g = self._owners.get(owner)
        if g is None:
            return np.zeros(0, np.int64)
        rows = self._scratch.db.execute(
            "SELECT DISTINCT queue_offset FROM proven WHERE g = ? AND topic = ? "
            "AND queue_id = ? AND queue_offset >= ? AND queue_offset < ? ORDER BY queue_offset",
            (g, qid.topic, qid.queue_id, start, end),
        )
        return np.array([q for (q,) in rows], np.int64)


_PROVEN = "CREATE TABLE proven (g INTEGER, topic TEXT, queue_id INTEGER, queue_offset INTEGER);"
_PROVEN_INDEX = "CREATE INDEX proven_at ON proven (g, topic, queue_id, queue_offset)"
_BATCH = 4096  # rows a statement inserts at once


def delivered_units(store: Store, end: int | None) -> Proven:
    """The schedule queues' units whose delivery is stored (owner :data:`BY_SCHEDULE`): a record
    in the unit's ``REAL_TOPIC`` with its UNIQ_KEY and reconsume times after it
    (``ScheduleMessageService.messageTimeup`` copies both), before ``end`` (the commitlog the
    restart keeps; None: all of it). One walk; only records with ``REAL_TOPIC`` are kept, in a
    scratch database. A unit without UNIQ_KEY cannot be matched and counts as not delivered.
    Several units of one key are matched in store order, each delivery to the oldest unmatched
    unit before it (a level delivers in queue order)."""
    scratch = Scratch()
    db = scratch.db
    db.executescript(_UNIT_TABLES + _PROVEN)
    db.execute("BEGIN")
    for file_start, cols in _runs(store):
        _keep_deliveries(db, file_start, cols, end)
    db.execute("COMMIT")
    db.execute("BEGIN")
    # Per link, in store order: a copy takes the oldest unit not taken yet if one is before it,
    # so the taken units are the link's first ones; only their number is kept.
    events = db.execute(
        "SELECT uniq, real, times, unit FROM event ORDER BY uniq, real, times, position"
    )
    link = ("", "", 0)  # no link: a unit without UNIQ_KEY is not kept
    units = taken = 0
    batch: list[tuple[str, str, int, int]] = []
    for uniq, real, times, unit in events:
        if link != (uniq, real, times):
            if taken:
                batch.append((*link, taken))
            link, units, taken = (uniq, real, times), 0, 0
            if len(batch) >= _BATCH:
                db.executemany("INSERT INTO taken VALUES (?, ?, ?, ?)", batch)
                batch.clear()
        if unit:
            units += 1
        elif units > taken:
            taken += 1
    if taken:
        batch.append((*link, taken))
    db.executemany("INSERT INTO taken VALUES (?, ?, ?, ?)", batch)
    db.execute("CREATE INDEX taken_link ON taken (uniq, real, times)")
    db.execute(
        "INSERT INTO proven SELECT 0, ?, queue_id, queue_offset FROM ("
        "SELECT e.queue_id, e.queue_offset, t.n, ROW_NUMBER() OVER "
        "(PARTITION BY e.uniq, e.real, e.times ORDER BY e.position) AS r FROM event AS e "
        "JOIN taken AS t ON t.uniq = e.uniq AND t.real = e.real AND t.times = e.times "
        "WHERE e.unit = 1) WHERE r <= n",
        (SCHEDULE_TOPIC,),
    )
    db.execute("DROP TABLE event")
    db.execute("DROP TABLE taken")
    db.execute(_PROVEN_INDEX)
    db.execute("COMMIT")
    return Proven(scratch, {BY_SCHEDULE: 0})


_UNIT_TABLES = """
CREATE TABLE event (
    uniq TEXT, real TEXT, times INTEGER, position INTEGER, unit INTEGER,
    queue_id INTEGER, queue_offset INTEGER
);
CREATE TABLE taken (uniq TEXT, real TEXT, times INTEGER, n INTEGER);
"""


def _keep_deliveries(
    db: sqlite3.Connection, file_start: int, cols: RecordColumns, end: int | None
) -> None:
    """One run's schedule units and their copies in the real topic, as rows of ``event``."""
    real = cols.property_values(props.REAL_TOPIC, np.arange(len(cols), dtype=np.int64))
    rows = np.array([i for i, v in enumerate(real) if v], np.int64)
    if not len(rows):
        return
    positions = file_start + cols.positions[rows].astype(np.int64)
    if end is not None:
        rows, positions = rows[positions < end], positions[positions < end]
    uniq = cols.property_values(props.UNIQ_KEY, rows)
    topic_ids, topic_bytes = cols.topic_ids()
    topics = [decode_text(t) for t in topic_bytes]
    reals = [real[i] for i in rows.tolist()]
    # 1: a schedule unit; 0: a copy in its real topic; -1: neither.
    kind = [
        1 if topics[t] == SCHEDULE_TOPIC else 0 if topics[t] == r else -1
        for t, r in zip(topic_ids[rows].tolist(), reals, strict=True)
    ]
    keep = [i for i, (k, key) in enumerate(zip(kind, uniq, strict=True)) if k >= 0 and key]
    at = rows[keep]
    db.executemany(
        "INSERT INTO event VALUES (?, ?, ?, ?, ?, ?, ?)",
        zip(
            [uniq[i] for i in keep],
            [reals[i] for i in keep],
            cols.reconsume_times[at].tolist(),
            positions[keep].tolist(),
            [kind[i] for i in keep],
            cols.queue_id[at].tolist(),
            cols.queue_offset[at].tolist(),
            strict=True,
        ),
    )


_PROOF_TABLES = """
CREATE TABLE back (g INTEGER, times INTEGER, uniq TEXT);
CREATE TABLE retry (g INTEGER, times INTEGER, uniq TEXT, queue_id INTEGER, queue_offset INTEGER);
CREATE TABLE origin (g INTEGER, position INTEGER);
CREATE TABLE grp (g INTEGER PRIMARY KEY, retry TEXT);
"""
_BACK, _RETRY = 1, 2  # what a topic's records are to the group it is bound to


def consumed_by_groups(store: Store, groups: set[str]) -> Proven:
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
    db.executescript(_PROOF_TABLES + _PROVEN)
    db.execute("BEGIN")
    for _start, cols in _runs(store):
        _keep_links(db, cols, bound)
    db.execute("COMMIT")
    db.execute("BEGIN")
    db.execute("CREATE INDEX back_link ON back (g, times, uniq)")
    db.executemany(
        "INSERT INTO grp VALUES (?, ?)", [(n, retry_topic(g)) for g, n in group_ids.items()]
    )
    db.execute(
        "INSERT INTO proven SELECT r.g, grp.retry, r.queue_id, r.queue_offset "
        "FROM retry AS r JOIN grp USING (g) WHERE EXISTS (SELECT 1 FROM back AS b "
        "WHERE b.g = r.g AND b.times = r.times AND b.uniq = r.uniq)"
    )
    for table in ("back", "retry", "grp"):
        db.execute(f"DROP TABLE {table}")
    _named_copies(store, db)
    db.execute("DROP TABLE origin")
    db.execute(_PROVEN_INDEX)
    db.execute("COMMIT")
    return Proven(scratch, group_ids)


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
    reads = OrderedReads(store)
    read: tuple[int, MessageRecord | None] | None = None
    for position, g in rows:
        if read is None or read[0] != position:
            read = position, reads.record(position)
        record = read[1]
        if record is not None:
            batch.append((g, record.topic, record.queue_id, record.queue_offset))
        if len(batch) >= _BATCH:
            db.executemany("INSERT INTO proven VALUES (?, ?, ?, ?)", batch)
            batch.clear()
    reads.close()
    db.executemany("INSERT INTO proven VALUES (?, ?, ?, ?)", batch)
