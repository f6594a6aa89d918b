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

The query and report types are :mod:`rmqinspect.analysis.trace_model`'s, the search for the
copies :mod:`rmqinspect.analysis.trace_walk`'s, each group's fate
:mod:`rmqinspect.analysis.trace_fate`'s; this module builds the chains from them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace

import numpy as np

from rmqinspect.analysis import Progress
from rmqinspect.analysis.offsets import OffsetsReport, offsets_report
from rmqinspect.analysis.pop import PopMessage, pop_report
from rmqinspect.analysis.pop_records import has_pop_records
from rmqinspect.analysis.recovery.keeps import RestartKeeps, predict_keeps
from rmqinspect.analysis.trace_fate import (
    base_topic,
    group_fate,
    pop_fate,
    wait_words,
    waiting_copy,
)
from rmqinspect.analysis.trace_model import (
    BadQuery,
    Chain,
    Copy,
    Finding,
    FindingKind,
    GroupFate,
    GroupState,
    Restart,
    Search,
    TraceQuery,
    TraceReport,
)
from rmqinspect.analysis.trace_timer import TIMER_ROLES, timer_line, timer_units
from rmqinspect.analysis.trace_walk import (
    Pool,
    chain_components,
    find_seeds,
    follow_origins,
    read_origin,
    walk_copies,
)
from rmqinspect.analysis.transactions import FindingKind as TxFindingKind
from rmqinspect.analysis.transactions import TransactionsReport, transactions_report
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format import timer
from rmqinspect.format.fate import HALF_TOPIC, Role, link_keys, long_property, role_of
from rmqinspect.format.ids import msg_id
from rmqinspect.format.trace_data import TraceProblem, TraceRecord, decode_trace_data
from rmqinspect.store.model import Store

# The query and report types live in trace_model; callers import them from here.
__all__ = [
    "BadQuery",
    "Chain",
    "Copy",
    "Finding",
    "FindingKind",
    "GroupFate",
    "GroupState",
    "Restart",
    "Search",
    "TraceQuery",
    "TraceReport",
    "trace_report",
]


def _origin_findings(
    store: Store, records: list[cl.MessageRecord], pool: Pool, findings: list[Finding]
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
        found = read_origin(store, o)
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


def _chain(
    store: Store,
    records: list[cl.MessageRecord],
    pool: Pool,
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
    base = base_topic(copies)
    groups = sorted(
        {g for (t, _), rows in ctx.consumer.items() if t == base for g, _, _ in rows}
        | {c.group for c in copies if c.group is not None}
    )
    fates = tuple(
        pop_fate(group_fate(store, g, base, copies, q.consume_from_where), copies) for g in groups
    )
    summary = [f.summary for f in fates]
    if not fates:
        summary.append("no consumer group has a committed offset on " + (base or "its topic"))
        delivered = [c for c in copies if c.topic == base and c.role is not Role.SCHEDULE]
        w = waiting_copy(copies, (base,), delivered)
        if w is not None:
            summary.append(wait_words(w, None))
    if state is not None:
        summary.append(f"transaction {state.replace('_', ' ')}")
    if timed:
        fire = next((c.fire_timestamp for c in copies if c.role in TIMER_ROLES), None)
        summary.append(timer_line([c.role for c in copies], [c.timer for c in copies], fire))
    if not any(c.role in (Role.RETRY, Role.DLQ) for c in copies):
        summary.append("no retry copies")
    uniq = next(iter(sorted(keys)), None)
    return Chain(uniq, base, tuple(copies), fates, state, tuple(summary))


def _trace_finding(position: int, p: TraceProblem) -> Finding:
    return Finding(FindingKind.BAD_TRACE_BODY, position, f"trace record {p.index}: {p.detail}")


def trace_report(store: Store, q: TraceQuery, progress: Progress | None = None) -> TraceReport:
    seeds = find_seeds(store, q, progress)
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
    pool = Pool()
    for rec in seeds.records:
        pool.add(rec, "seed")
    follow_origins(store, pool)
    walk_copies(store, pool, q.trace_topics, progress)
    for rec in seeds.records:
        pool.linked_by[rec.position] = "seed"
    seed_positions = {r.position for r in seeds.records}
    components = [
        c for c in chain_components(pool) if seed_positions.intersection(r.position for r in c)
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
