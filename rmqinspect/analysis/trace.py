"""``trace``: a message's original and every copy the broker stored of it, and what each consumer
group and the next restart make of them.

The roles and links are :mod:`rmqinspect.format.fate`'s. How the copies are found:

- the seed: by offsetMsgId the record it points to (no search), by UNIQ_KEY or key the index
  (``lookup``'s broker query path plus the unindexed tail), a commitlog walk where the index is
  missing or broken (``search`` says which);
- the copies: one ordered commitlog walk. A copy is always stored after what it copies, so a
  record whose UNIQ_KEY is the chain's, or whose ``ORIGIN_MESSAGE_ID`` is the offsetMsgId (or
  UNIQ_KEY) of a record met before, joins the chain, and its own keys link the records after it;
  trace records join by their KEYS (``AsyncTraceDispatcher`` puts the traced msgIds there). No
  index holds ``ORIGIN_MESSAGE_ID``, so the walk is needed whatever the index holds;
- transactions: a chain with a half takes its state, op records and commit records from
  :func:`transactions_report` (op bodies and ``preparedTransactionOffset`` are its rules).

Consumption is judged with :func:`offsets_report` (a committed offset past a copy's queue offset
consumed it; ``delayOffset.json`` past a schedule copy delivered it), the restart with
:func:`predict_keeps` (kept, cut at or past the recovered end, or kept but no queue entry serves
it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis import Progress
from rmqinspect.analysis.lookup.keys import KeyQuery, default_max_num, known_topics, lookup_key
from rmqinspect.analysis.lookup.offset import lookup_msg_id
from rmqinspect.analysis.messages import ForensicWalk, SkippedRange
from rmqinspect.analysis.offsets import (
    ConsumeFromWhere,
    OffsetsReport,
    offsets_report,
    start_without_offset,
)
from rmqinspect.analysis.pop import PopMessage, pop_outcome, pop_report
from rmqinspect.analysis.pop_records import has_pop_records
from rmqinspect.analysis.queues import queue_bounds
from rmqinspect.analysis.recovery.keeps import RestartKeeps, predict_keeps
from rmqinspect.analysis.trace_timer import TIMER_ROLES, TimerUnit, timer_line, timer_units
from rmqinspect.analysis.transactions import FindingKind as TxFindingKind
from rmqinspect.analysis.transactions import TransactionsReport, transactions_report
from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format import timer
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.fate import (
    HALF_TOPIC,
    RETRY_PREFIX,
    TRACE_TOPIC,
    Role,
    dlq_topic,
    link_keys,
    long_property,
    retry_topic,
    role_of,
)
from rmqinspect.format.ids import decode_offset_msg_id, decode_uniq_key, msg_id
from rmqinspect.format.npbytes import spans_equal
from rmqinspect.format.properties_text import PropertiesText
from rmqinspect.format.times import iso_ms
from rmqinspect.format.trace_data import TraceProblem, TraceRecord, decode_trace_data
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store

# Copies in the topic the producer sent to that a consumer of it receives.
_DELIVERED = frozenset({Role.ORIGINAL, Role.SCHEDULED_DELIVERY, Role.COMMIT, Role.TIMER_DELIVERY})


class Search(StrEnum):
    PHYSICAL_OFFSET = "physical_offset"  # --msg-id: the id names the offset
    INDEX = "index"
    SCAN = "scan"


class Restart(StrEnum):
    KEPT = "kept"
    CUT = "cut"  # at or past the recovered end, or in a file the restart deletes
    QUEUE_ENTRY_LOST = "queue_entry_lost"  # kept, but no consume-queue unit serves it
    BROKER_DOES_NOT_START = "broker_does_not_start"


class FindingKind(StrEnum):
    ORIGIN_NOWHERE = "origin_nowhere"  # ORIGIN_MESSAGE_ID names no readable record
    ORIGIN_OTHER_MESSAGE = "origin_other_message"  # ... names a record of another message
    ORIGIN_NOT_AN_ID = "origin_not_an_id"  # ... is neither an offsetMsgId nor a known UNIQ_KEY
    ORIGIN_CYCLE = "origin_cycle"  # following ORIGIN_MESSAGE_ID comes back to a copy
    BAD_TRACE_BODY = "bad_trace_body"
    BAD_PROPERTY = "bad_property"  # DELAY / REAL_QID that is no number
    TRANSACTION = "transaction"  # a transactions finding about this chain's records


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    physical_offset: int
    detail: str


@dataclass(frozen=True, slots=True)
class GroupState:
    """One group's committed offset on a copy's queue, against the copy."""

    group: str
    committed_offset: int
    consumed: bool  # the offset is past the copy's queue offset
    # The offset against the queue the restart rebuilds (offsets' status_after_restart: ok,
    # below_min, above_max, no_queue; None when the broker would not start).
    status_after_restart: str | None


@dataclass(frozen=True, slots=True)
class Copy:
    role: Role
    physical_offset: int
    store_size: int
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    reconsume_times: int
    offset_msg_id: str
    uniq_key: str | None
    keys: str | None
    tags: str | None
    linked_by: str  # seed, uniq_key, origin_message_id, op_record, trace_keys
    delay_level: int | None
    due_timestamp: int | None  # schedule copies: when the schedule service delivers it
    delivered: bool | None  # schedule copies: delayOffset.json is past it
    real_topic: str | None
    real_queue_id: int | None
    retry_topic: str | None
    origin_message_id: str | None
    group: str | None  # the group a retry/DLQ topic names
    pop_topic: str | None
    prepared_transaction_offset: int | None  # commit/rollback records
    groups: tuple[GroupState, ...]
    restart: Restart
    traces: tuple[TraceRecord, ...] = ()
    pops: tuple[PopMessage, ...] = ()  # POP groups' pops of this copy (analysis.pop)
    fire_timestamp: int | None = None  # timer copies and deliveries: TIMER_OUT_MS
    timer: TimerUnit | None = None  # timer-topic copies: their timerlog unit


@dataclass(frozen=True, slots=True)
class GroupFate:
    group: str
    outcome: str  # consumed, pending, in_delay, dlq, not_delivered, lost_by_restart
    retries: int  # retry copies delivered to the group
    attempts: int  # deliveries: the last copy's reconsume times + 1 (a DLQ copy's own count)
    summary: str


@dataclass(frozen=True, slots=True)
class Chain:
    uniq_key: str | None
    topic: str | None  # the topic the producer sent to
    copies: tuple[Copy, ...]
    groups: tuple[GroupFate, ...]
    transaction_state: str | None
    summary: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TraceQuery:
    msg_id: str | None = None
    uniq_keys: tuple[str, ...] = ()
    key: str | None = None
    topic: str | None = None
    trace_topics: tuple[str, ...] = (TRACE_TOPIC,)
    # Where a group without a committed offset on a copy's queue starts reading it
    # (offsets.start_without_offset, the rule groups uses).
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.UNKNOWN


@dataclass(frozen=True, slots=True)
class TraceReport:
    query: dict[str, object]
    search: Search
    chains: tuple[Chain, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    broker_starts: bool | None  # None: nothing to judge
    restart_end: int | None  # where the restarted broker's commitlog ends
    skipped: tuple[SkippedRange, ...]

    @property
    def found(self) -> bool:
        return bool(self.chains)


class BadQuery(ValueError):
    """The query names no message in a form the store could hold (exit 2)."""


# --- seeds -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Seeds:
    records: list[cl.MessageRecord] = field(default_factory=list)
    search: Search = Search.INDEX
    notes: list[str] = field(default_factory=list)
    skipped: list[SkippedRange] = field(default_factory=list)


def _is_uniq_key(text: str) -> bool:
    try:
        decode_uniq_key(text)
    except DecodeError:
        return False
    return True


def _seeds(store: Store, q: TraceQuery, progress: Progress | None) -> _Seeds:
    out = _Seeds()
    if q.msg_id is not None:
        text = q.msg_id.strip()
        try:
            result = lookup_msg_id(store, text)
        except StoreError as err:
            if not _is_uniq_key(text):
                raise BadQuery(f"--msg-id {text!r}: {err}") from None
            result = None
        if result is not None and result.hits:
            out.search = Search.PHYSICAL_OFFSET
            out.records.append(result.hits[0].record)
            return out
        out.search = Search.PHYSICAL_OFFSET
        if result is not None and result.rejected:
            out.notes.append(f"as an offsetMsgId: {result.rejected[0].reason}")
        if not _is_uniq_key(text):
            return out
        # MessageClientExt.getMsgId: the id a client shows is the UNIQ_KEY.
        out.search = Search.INDEX
        out.notes.append("the msg id is read as a UNIQ_KEY (the client's msgId)")
        return _by_keys(store, (text,), None, None, out, progress)
    if q.key is not None:
        if q.topic is None:
            raise BadQuery("--key needs --topic")
        return _by_keys(store, (), q.key, q.topic, out, progress)
    if not q.uniq_keys:
        raise BadQuery("give --msg-id, --uniq-key or --key with --topic")
    return _by_keys(store, q.uniq_keys, None, None, out, progress)


def _by_keys(
    store: Store,
    uniq_keys: Iterable[str],
    key: str | None,
    topic: str | None,
    out: _Seeds,
    progress: Progress | None,
) -> _Seeds:
    """The index where it answers, else a walk (``lookup --scan``'s)."""
    queries = [
        KeyQuery(k, tuple(known_topics(store)), True, default_max_num(True)) for k in uniq_keys
    ]
    if key is not None and topic is not None:
        queries.append(KeyQuery(key, (topic,), False, default_max_num(False)))
    for query in queries:
        result = lookup_key(store, query, progress=progress)
        if not result.hits and result.index is not None and result.index.state != "ok":
            out.search = Search.SCAN
            out.notes.append(f"index {result.index.state}: the commitlog was walked instead")
            result = lookup_key(store, query, scan=True, progress=progress)
            out.skipped.extend(s for s in result.skipped if s not in out.skipped)
        out.records.extend(h.record for h in result.hits)
    return out


# --- the walk ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Pool:
    """The records met so far that belong to some traced chain."""

    records: dict[int, cl.MessageRecord] = field(default_factory=dict)
    linked_by: dict[int, str] = field(default_factory=dict)
    uniq_keys: set[str] = field(default_factory=set)
    ids: dict[str, int] = field(default_factory=dict)  # offsetMsgId (upper case) -> position
    trace_bodies: list[cl.MessageRecord] = field(default_factory=list)
    skipped: list[SkippedRange] = field(default_factory=list)

    def add(self, rec: cl.MessageRecord, how: str) -> None:
        if rec.position in self.records:
            return
        self.records[rec.position] = rec
        self.linked_by[rec.position] = how
        if rec.uniq_key is not None:
            self.uniq_keys.add(rec.uniq_key)
        self.ids[msg_id(rec).upper()] = rec.position

    def traced_by(self, trace_keys: Iterable[str]) -> bool:
        """A trace message's KEYS name a record met: its UNIQ_KEY, or for a message without
        one its offsetMsgId (``MessageClientExt.getMsgId``, the msgId a tracing consumer
        records)."""
        return any(k in self.uniq_keys or k.upper() in self.ids for k in trace_keys)


def _follow_origins(store: Store, pool: _Pool) -> None:
    """Before the walk: the records a seed's ORIGIN_MESSAGE_ID names (a seed may be a copy), as
    far back as they go, each read once."""
    todo = list(pool.records.values())
    while todo:
        rec = todo.pop()
        origin = rec.properties.get(props.ORIGIN_MESSAGE_ID)
        if origin is None or origin in pool.uniq_keys or origin.upper() in pool.ids:
            continue
        target = _read_origin(store, origin)
        if isinstance(target, cl.MessageRecord):
            # A record of another message is a finding (:func:`_origin_findings`), no link.
            if target.position not in pool.records and _same_message(rec, target):
                pool.add(target, props.ORIGIN_MESSAGE_ID.lower())
                todo.append(target)
        elif not isinstance(target, cl.MessageRecord) and _is_uniq_key(origin):
            pool.uniq_keys.add(origin)  # the client's fallback path: the original's UNIQ_KEY


def _same_message(a: cl.MessageRecord, b: cl.MessageRecord) -> bool:
    """Copies keep the original's UNIQ_KEY (the properties are copied): two records with
    different ones are different messages, whatever an ORIGIN_MESSAGE_ID says."""
    return a.uniq_key is None or b.uniq_key is None or a.uniq_key == b.uniq_key


def _read_origin(store: Store, origin: str) -> cl.MessageRecord | str:
    """The record an offsetMsgId names, or why there is none."""
    try:
        mid = decode_offset_msg_id(origin)
    except DecodeError:
        return "not an offsetMsgId"
    if store.commitlog.find(mid.physical_offset) is None:
        return f"offset {mid.physical_offset} is in no commitlog file"
    try:
        return store.read_message(mid.physical_offset)
    except StoreError as err:
        return f"no record at offset {mid.physical_offset}: {err}"


def _walk(
    store: Store, pool: _Pool, trace_topics: tuple[str, ...], progress: Progress | None
) -> None:
    walk = ForensicWalk()
    for cols in walk.runs(store, progress):
        trace_at = np.flatnonzero(cols.topic_mask(list(trace_topics)))
        rows = np.union1d(_candidates(cols, pool.uniq_keys), trace_at)
        uniq = cols.property_values(props.UNIQ_KEY, rows)
        origin = cols.property_values(props.ORIGIN_MESSAGE_ID, rows)
        keys = dict(zip(trace_at.tolist(), cols.property_values(props.KEYS, trace_at), strict=True))
        for j, i in enumerate(rows.tolist()):
            u, o = uniq[j], origin[j]
            how = None
            if i in keys:
                if pool.traced_by(props.split_keys(keys[i])):
                    pool.trace_bodies.append(store.with_entry(cols.record(i, with_body=True)))
                continue
            if u is not None and u in pool.uniq_keys:
                how = "uniq_key"
            elif u is None and o is not None and (o in pool.uniq_keys or o.upper() in pool.ids):
                how = "origin_message_id"  # a copy without UNIQ_KEY (see _same_message)
            if how is not None:
                pool.add(store.with_entry(cols.record(i, with_body=False)), how)
    pool.skipped.extend(walk.skipped)


def _candidates(cols: RecordColumns, uniq_keys: set[str]) -> npt.NDArray[np.int64]:
    """The records of a run the walk must look at one by one: those with one of the chain's
    UNIQ_KEYs (compared as bytes, a key at a time, while there are few) and those without a
    UNIQ_KEY that carry an ORIGIN_MESSAGE_ID. Every other record cannot join (the keys do not
    change during the walk: a record joins by its UNIQ_KEY or, having none, by its origin)."""
    everything = np.arange(len(cols), dtype=np.int64)
    text = PropertiesText(cols, everything)
    at, length = text.spans(props.UNIQ_KEY)
    origin_at, _ = text.spans(props.ORIGIN_MESSAGE_ID)
    wanted = (at < 0) & (origin_at >= 0)
    if len(uniq_keys) > _BYTE_COMPARED_KEYS or not all(k.isascii() for k in uniq_keys):
        wanted |= at >= 0  # many keys, or text that decoding may have changed: compare as text
    else:
        data = np.frombuffer(cols.buf, np.uint8)
        for key in uniq_keys:
            wanted |= spans_equal(data, at, length, key.encode())
    return np.flatnonzero(wanted).astype(np.int64)


_BYTE_COMPARED_KEYS = 32


# --- chains -----------------------------------------------------------------------------------


def _components(pool: _Pool) -> list[list[cl.MessageRecord]]:
    """Records linked by a shared UNIQ_KEY or an ORIGIN_MESSAGE_ID, in physical order."""
    parent = {p: p for p in pool.records}

    def root(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    def union(a: int, b: int) -> None:
        parent[root(a)] = root(b)

    by_uniq: dict[str, int] = {}
    for p, rec in sorted(pool.records.items()):
        if rec.uniq_key is not None:
            union(p, by_uniq.setdefault(rec.uniq_key, p))
    for p, rec in pool.records.items():
        o = rec.properties.get(props.ORIGIN_MESSAGE_ID)
        if o is None:
            continue
        target = pool.ids.get(o.upper())
        if target is None and o in by_uniq:
            target = by_uniq[o]
        if target is not None and _same_message(rec, pool.records[target]):
            union(p, target)
    groups: dict[int, list[cl.MessageRecord]] = {}
    for p in sorted(pool.records):
        groups.setdefault(root(p), []).append(pool.records[p])
    return list(groups.values())


def _origin_findings(
    store: Store, records: list[cl.MessageRecord], pool: _Pool, findings: list[Finding]
) -> None:
    """ORIGIN_MESSAGE_IDs that name nothing, another message, or lead round in a circle."""
    mine = {r.position for r in records}
    keys = {r.uniq_key for r in records if r.uniq_key is not None}
    points: dict[int, int] = {}
    for rec in records:
        o = rec.properties.get(props.ORIGIN_MESSAGE_ID)
        if o is None or o in keys:
            continue
        target = pool.ids.get(o.upper())
        if target is not None and target in mine:
            points[rec.position] = target
            continue
        found = _read_origin(store, o)
        if isinstance(found, str):
            kind = (
                FindingKind.ORIGIN_NOT_AN_ID
                if found == "not an offsetMsgId"
                else FindingKind.ORIGIN_NOWHERE
            )
            findings.append(Finding(kind, rec.position, f"ORIGIN_MESSAGE_ID {o[:64]!r}: {found}"))
        elif found.uniq_key not in keys:
            findings.append(
                Finding(
                    FindingKind.ORIGIN_OTHER_MESSAGE,
                    rec.position,
                    f"ORIGIN_MESSAGE_ID {o} names the record at {found.position}, whose "
                    f"UNIQ_KEY is {found.uniq_key!r}, not this message's",
                )
            )
    reported: set[int] = set()
    for start in points:
        seen = [start]
        at = points.get(start)
        while at is not None and at not in seen:
            seen.append(at)
            at = points.get(at)
        if at is not None:  # came back: a cycle, reported once at its lowest position
            cycle = seen[seen.index(at) :]
            if min(cycle) not in reported:
                reported.add(min(cycle))
                path = " -> ".join(str(p) for p in [*cycle, at])
                findings.append(
                    Finding(
                        FindingKind.ORIGIN_CYCLE, min(cycle), f"ORIGIN_MESSAGE_ID cycle: {path}"
                    )
                )


@dataclass(frozen=True, slots=True)
class _Context:
    # (topic, queue) -> (group, offset, status after restart)
    consumer: dict[tuple[str, int], list[tuple[str, int, str | None]]]
    delay: dict[int, int]  # schedule queue id -> delayOffset.json offset
    keeps: RestartKeeps | None
    delays: dict[int, int]
    groups: tuple[str, ...]


def _context(store: Store, progress: Progress | None) -> _Context:
    report: OffsetsReport = offsets_report(store, progress=progress)
    consumer: dict[tuple[str, int], list[tuple[str, int, str | None]]] = {}
    delay: dict[int, int] = {}
    for row in report.rows:
        if row.table == "consumer" and row.group is not None:
            after = row.status_after_restart
            consumer.setdefault((row.topic, row.queue_id), []).append(
                (row.group, row.offset, None if after is None else after.value)
            )
        elif row.table == "delay":
            delay[row.queue_id] = row.offset
    keeps = predict_keeps(store) if store.commitlog.files else None
    return _Context(consumer, delay, keeps, dict(store.delay_table), report.groups)


def _restart(store: Store, ctx: _Context, position: int) -> Restart:
    keeps = ctx.keeps
    if keeps is None or not keeps.broker_starts:
        return Restart.BROKER_DOES_NOT_START
    f = store.commitlog.find(position)
    offsets = np.array([position], np.int64)
    if f is not None and bool(keeps.keeps(f.name, offsets)[0]):
        return Restart.KEPT
    at = int(np.searchsorted(keeps.unserved, position))  # sorted physical offsets
    if at < len(keeps.unserved) and int(keeps.unserved[at]) == position:
        return Restart.QUEUE_ENTRY_LOST
    return Restart.CUT


def _copy(
    store: Store,
    rec: cl.MessageRecord,
    how: str,
    ctx: _Context,
    trace_topics: tuple[str, ...],
    findings: list[Finding],
    traces: tuple[TraceRecord, ...],
) -> Copy:
    p = rec.properties
    role = role_of(rec.topic, p, rec.sys_flag, trace_topics)
    links = link_keys(rec.topic, p, ctx.groups)
    for name, value in ((props.DELAY, links.delay_level), (props.REAL_QID, links.real_queue_id)):
        if p.get(name) is not None and value is None:
            findings.append(
                Finding(
                    FindingKind.BAD_PROPERTY, rec.position, f"{name} {p[name][:40]!r} is no number"
                )
            )
    due = delivered = None
    if role is Role.SCHEDULE and p.get(props.DELAY) is not None:
        _, millis = cl.schedule_delay(p[props.DELAY], ctx.delays)
        due = None if millis is None else rec.store_timestamp + millis
        offset = ctx.delay.get(rec.queue_id)
        delivered = None if offset is None else offset > rec.queue_offset
    groups = tuple(
        GroupState(g, off, off > rec.queue_offset, after)
        for g, off, after in sorted(ctx.consumer.get((rec.topic, rec.queue_id), []))
        if role not in (Role.RETRY, Role.DLQ) or g == links.group
    )
    tx = rec.sys_flag & cl.TRANSACTION_TYPE_MASK
    prepared = (
        rec.prepared_transaction_offset
        if tx in (cl.TRANSACTION_COMMIT_TYPE, cl.TRANSACTION_ROLLBACK_TYPE)
        else None
    )
    return Copy(
        role,
        rec.position,
        rec.store_size,
        rec.topic,
        rec.queue_id,
        rec.queue_offset,
        rec.store_timestamp,
        rec.reconsume_times,
        msg_id(rec),
        rec.uniq_key,
        p.get(props.KEYS),
        rec.tags,
        how,
        links.delay_level,
        due,
        delivered,
        links.real_topic,
        links.real_queue_id,
        links.retry_topic,
        links.origin_message_id,
        links.group,
        links.pop_topic,
        prepared,
        groups,
        _restart(store, ctx, rec.position),
        traces,
        fire_timestamp=long_property(p, timer.TIMER_OUT_MS)
        if role in TIMER_ROLES or role is Role.TIMER_DELIVERY
        else None,
    )


def _base_topic(copies: list[Copy]) -> str | None:
    for c in copies:
        if c.role in _DELIVERED:
            return c.topic
    for c in copies:
        if c.retry_topic is not None:
            return c.retry_topic
        if c.role in (Role.SCHEDULE, Role.HALF, Role.TIMER) and c.real_topic is not None:
            return c.real_topic
    return None


def _group_fate(
    store: Store, group: str, base: str | None, copies: list[Copy], where: ConsumeFromWhere
) -> GroupFate:
    retry = retry_topic(group)
    dlq = next((c for c in copies if c.topic == dlq_topic(group)), None)
    if dlq is not None:
        attempts = dlq.reconsume_times
        return GroupFate(
            group,
            "dlq",
            max(attempts - 1, 0),
            attempts,
            f"moved to {dlq.topic} after {attempts} attempts" + _dlq_restart_words(dlq),
        )
    delivered = [
        c
        for c in copies
        if (c.topic == base and c.role in _DELIVERED) or (c.role is Role.RETRY and c.group == group)
    ]
    w = _waiting(copies, (retry, base), delivered)
    if w is not None:
        return GroupFate(
            group,
            "in_delay",
            w.reconsume_times,
            w.reconsume_times,
            _wait_words(w, retry) + _restart_words(w, group),
        )
    if not delivered:
        return GroupFate(group, "not_delivered", 0, 0, f"no copy for {group} on disk")
    last = delivered[-1]
    retries = last.reconsume_times if last.role is Role.RETRY else 0
    state = next((s for s in last.groups if s.group == group), None)
    where_text = f"{last.topic}:{last.queue_id} offset {last.queue_offset}"
    if state is None:
        return _uncommitted_fate(store, group, last, retries, where)
    if state.consumed:
        after = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
        return GroupFate(group, "consumed", retries, retries + 1, f"consumed by {group}{after}")
    lost = _restart_words(last, group)
    return GroupFate(
        group,
        "lost_by_restart" if lost else "pending",
        retries,
        retries + 1,
        f"pending for {group} at {where_text} (committed offset {state.committed_offset})" + lost,
    )


def _uncommitted_fate(
    store: Store, group: str, last: Copy, retries: int, where: ConsumeFromWhere
) -> GroupFate:
    """The group has no committed offset on the copy's queue: it reads the queue from where
    :func:`start_without_offset` says (getMessage moves a start below the min up to it)."""
    qid = QueueId(last.topic, last.queue_id)
    b = queue_bounds(store, qid) if qid in store.queue_dirs else None
    lo, hi = (0, 0) if b is None else (b.min_offset, b.max_offset)
    retry = last.topic.startswith(RETRY_PREFIX)
    start = start_without_offset(retry, where, lo, hi)
    at = f"{last.topic}:{last.queue_id} offset {last.queue_offset}"
    text = start.basis.removeprefix("no committed offset: ")
    head = f"{group} has no committed offset on {last.topic}:{last.queue_id}"
    if start.offset is None:
        return GroupFate(
            group,
            "pending",
            retries,
            retries + 1,
            f"{head}: the copy at {at} is not known to be consumed" + _restart_words(last, group),
        )
    begin = max(start.offset, lo)
    if last.queue_offset < begin:
        return GroupFate(
            group,
            "not_delivered",
            retries,
            retries,
            f"{head}: it starts at {begin} ({text}), past the copy at {at}: never delivered",
        )
    return GroupFate(
        group,
        "pending",
        retries,
        retries + 1,
        f"{head}: it starts at {begin} ({text}) and gets the copy at {at}, again if it "
        "consumed it before" + _restart_words(last, group),
    )


def _waiting(
    copies: list[Copy], real_topics: tuple[str | None, ...], delivered: list[Copy]
) -> Copy | None:
    """The newest schedule copy bound for one of ``real_topics`` that the schedule service has
    not delivered (delayOffset.json is not past it and no later copy with its reconsume count
    was stored), or timer copy whose unit is pending."""
    waiting = [
        c
        for c in copies
        if (
            c.role is Role.SCHEDULE
            and c.real_topic in real_topics
            and c.delivered is not True
            and not any(
                d.physical_offset > c.physical_offset and d.reconsume_times == c.reconsume_times
                for d in delivered
            )
        )
        or (c.real_topic in real_topics and c.timer is not None and c.timer.state == "pending")
    ]
    return waiting[-1] if waiting else None


def _wait_words(w: Copy, retry: str | None) -> str:
    what = "the retry copy" if retry is not None and w.real_topic == retry else "the message"
    if w.timer is not None:
        fire = iso_ms(w.fire_timestamp) or w.fire_timestamp
        return f"{what} waits in the timer until {fire}"
    due = "" if w.due_timestamp is None else f" until {iso_ms(w.due_timestamp) or w.due_timestamp}"
    return f"{what} waits in delay level {w.delay_level}{due}"


def _restart_words(c: Copy, group: str) -> str:
    name = "retry copy" if c.role is Role.RETRY else f"{c.role.value.replace('_', ' ')} copy"
    if c.restart is Restart.CUT:
        return f"; the restart cuts the {name}: {group} will never see it"
    if c.restart is Restart.QUEUE_ENTRY_LOST:
        return (
            f"; the restart keeps the {name} but no queue entry serves it: "
            f"{group} will never see it"
        )
    return ""


def _dlq_restart_words(c: Copy) -> str:
    """No group consumes a DLQ copy, so what its loss means is that the DLQ will not hold it."""
    if c.restart is Restart.CUT:
        return f"; the restart cuts the DLQ copy: {c.topic} will not hold it"
    if c.restart is Restart.QUEUE_ENTRY_LOST:
        return f"; the restart keeps the DLQ copy but no queue entry of {c.topic} serves it"
    return ""


def _chain(
    store: Store,
    records: list[cl.MessageRecord],
    pool: _Pool,
    ctx: _Context,
    txs: TransactionsReport | None,
    pops: dict[tuple[str, int, int], list[PopMessage]],
    q: TraceQuery,
    findings: list[Finding],
) -> Chain:
    keys = {r.uniq_key for r in records if r.uniq_key is not None}
    ids = {msg_id(r).upper() for r in records}
    extra: list[tuple[cl.MessageRecord, str]] = []
    state = None
    if txs is not None and any(r.topic == HALF_TOPIC for r in records):
        for tx in txs.transactions:
            if tx.uniq_key in keys:
                state = tx.state.value
                extra += [(store.read_message(p), "op_record") for p in tx.op_positions]
        mine = {r.position for r in records} | {r.position for r, _ in extra}
        findings += [
            Finding(FindingKind.TRANSACTION, f.position, f"{f.kind.value}: {f.detail}")
            for f in txs.findings
            if f.uniq_key in keys or f.position in mine or f.kind is TxFindingKind.OP_NOT_NUMBER
        ]
    traces: dict[int, tuple[TraceRecord, ...]] = {}
    for rec in pool.trace_bodies:
        named = props.split_keys(rec.properties.get(props.KEYS))
        if not any(k in keys or k.upper() in ids for k in named):
            continue
        decoded, problems = decode_trace_data(rec.body or b"")
        findings += [_trace_finding(rec.position, p) for p in problems]
        # A msgId is the UNIQ_KEY, or the offsetMsgId of a copy without one.
        traces[rec.position] = tuple(
            t
            for t in decoded
            if t.msg_id in keys or t.msg_id.upper() in ids or (t.offset_msg_id or "").upper() in ids
        )
        extra.append((rec, "trace_keys"))
    all_records = sorted(
        [(r, pool.linked_by[r.position]) for r in records] + extra, key=lambda x: x[0].position
    )
    copies = [
        _copy(store, r, how, ctx, q.trace_topics, findings, traces.get(r.position, ()))
        for r, how in all_records
    ]
    # A POP group's committed offset moves at pop time: its checkpoints and acks say more.
    copies = [
        replace(c, pops=tuple(pops.get((c.topic, c.queue_id, c.queue_offset), ()))) for c in copies
    ]
    _origin_findings(store, records, pool, findings)
    timed = [c.physical_offset for c in copies if c.role in TIMER_ROLES]
    if timed:
        units = timer_units(store, timed)
        copies = [
            dataclasses.replace(c, timer=units.get(c.physical_offset))
            if c.role in TIMER_ROLES
            else c
            for c in copies
        ]
    base = _base_topic(copies)
    groups = sorted(
        {g for (t, _), rows in ctx.consumer.items() if t == base for g, _, _ in rows}
        | {c.group for c in copies if c.group is not None}
    )
    fates = tuple(
        _pop_fate(_group_fate(store, g, base, copies, q.consume_from_where), copies) for g in groups
    )
    summary = [f.summary for f in fates]
    if not fates:
        summary.append("no consumer group has a committed offset on " + (base or "its topic"))
        delivered = [c for c in copies if c.topic == base and c.role is not Role.SCHEDULE]
        w = _waiting(copies, (base,), delivered)
        if w is not None:
            summary.append(_wait_words(w, None))
    if state is not None:
        summary.append(f"transaction {state.replace('_', ' ')}")
    if timed:
        fire = next((c.fire_timestamp for c in copies if c.role in TIMER_ROLES), None)
        summary.append(timer_line([c.role for c in copies], [c.timer for c in copies], fire))
    if not any(c.role in (Role.RETRY, Role.DLQ) for c in copies):
        summary.append("no retry copies")
    uniq = next(iter(sorted(keys)), None)
    return Chain(uniq, base, tuple(copies), fates, state, tuple(summary))


def _pop_fate(fate: GroupFate, copies: list[Copy]) -> GroupFate:
    """A POP group's fate from its newest popped copy's checkpoint, where it has one."""
    for c in reversed(copies):
        said = pop_outcome(fate.group, list(c.pops))
        if said is None:
            continue
        outcome, words = said
        if outcome != "consumed":
            return replace(fate, outcome=outcome, summary=f"{fate.group}: {words}")
        head = fate.summary if fate.outcome == "consumed" else f"consumed by {fate.group}"
        return replace(fate, outcome=outcome, summary=f"{head} ({words})")
    return fate


def _trace_finding(position: int, p: TraceProblem) -> Finding:
    return Finding(FindingKind.BAD_TRACE_BODY, position, f"trace record {p.index}: {p.detail}")


def trace_report(store: Store, q: TraceQuery, progress: Progress | None = None) -> TraceReport:
    seeds = _seeds(store, q, progress)
    query: dict[str, object] = {
        k: v
        for k, v in (
            ("msg_id", q.msg_id),
            ("uniq_keys", list(q.uniq_keys) or None),
            ("key", q.key),
            ("topic", q.topic),
        )
        if v is not None
    }
    findings: list[Finding] = []
    if not seeds.records:
        return TraceReport(
            query, seeds.search, (), (), tuple(seeds.notes), None, None, tuple(seeds.skipped)
        )
    pool = _Pool()
    for rec in seeds.records:
        pool.add(rec, "seed")
    _follow_origins(store, pool)
    _walk(store, pool, q.trace_topics, progress)
    for rec in seeds.records:
        pool.linked_by[rec.position] = "seed"
    seed_positions = {r.position for r in seeds.records}
    components = [
        c for c in _components(pool) if seed_positions.intersection(r.position for r in c)
    ]
    ctx = _context(store, progress)
    has_half = any(r.topic == HALF_TOPIC for r in pool.records.values())
    txs = transactions_report(store, progress=progress) if has_half else None
    pops: dict[tuple[str, int, int], list[PopMessage]] = {}
    if has_pop_records(store):
        for m in pop_report(store, progress=progress, read_uniq_keys=False).messages:
            pops.setdefault((m.topic, m.queue_id, m.queue_offset), []).append(m)
    chains = tuple(_chain(store, c, pool, ctx, txs, pops, q, findings) for c in components)
    keeps = ctx.keeps
    return TraceReport(
        query,
        seeds.search,
        chains,
        tuple(sorted(set(findings), key=lambda f: (f.physical_offset, f.kind))),
        tuple(seeds.notes),
        None if keeps is None else keeps.broker_starts,
        None if keeps is None or not keeps.broker_starts else keeps.end,
        tuple(seeds.skipped + [s for s in pool.skipped if s not in seeds.skipped]),
    )
