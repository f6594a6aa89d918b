"""``groups``: every consumer group's backlog, and what its next pull does to each queue.

Built on :func:`offsets_report` (its rows, config loading and restart view): a row per committed
offset, plus the queues a group reads without one (its ``%RETRY%`` and 5.x POP retry queues, the
other queues of a topic it commits for). Each is judged by :func:`next_pull`, the broker's
``getMessage`` rule, against the queues on disk or, with ``after_restart``, as the restart
rebuilds them: a reset that replays or skips messages is a finding, and so is a ``.bak`` that
disagrees with the offset the broker loads. Beside it: the store time of the last consumed
message (mqadmin's ``lastTimestamp``: ``AdminBrokerProcessor.getConsumeStats`` reads the message at
committed offset - 1), the ``%DLQ%`` queue, the ``subscriptionGroup.json`` settings, and the 4.9
``OFFSET_MOVED_EVENT`` records (``PullMessageProcessor.generateOffsetMovedEvent``), read through
their consume queue.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from rmqinspect.analysis import Progress
from rmqinspect.analysis.delays import newest_store_time
from rmqinspect.analysis.delivered import Proven, consumed_by_groups
from rmqinspect.analysis.groups_model import (
    Group,
    GroupsReport,
    MovedEvent,
    QueueRow,
    Subscription,
)
from rmqinspect.analysis.moved_events import moved_events
from rmqinspect.analysis.offsets import (
    MOVED_EVENT_BEFORE,
    BrokerVersion,
    ConsumeFromWhere,
    NextPull,
    OffsetRow,
    OffsetsReport,
    file_use,
    next_pull,
    offsets_report,
    start_without_offset,
)
from rmqinspect.analysis.pop import PopGroup, PopState, pop_report
from rmqinspect.analysis.pop_records import has_pop_records
from rmqinspect.analysis.queues import iter_unit_chunks, queue_bounds, unit_at
from rmqinspect.analysis.recovery import RecoveryReport
from rmqinspect.errors import StoreError
from rmqinspect.format import properties as props
from rmqinspect.format.config import (
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
)
from rmqinspect.format.fate import (
    DLQ_PREFIX,
    POP_RETRY_SEPARATORS,
    RETRY_PREFIX,
    dlq_topic,
    parse_retry_topic,
    retry_topic,
    retry_topic_kind,
)
from rmqinspect.store.configfiles import load_config_file
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store
from rmqinspect.store.ordered_reads import OrderedReads

DLQ_QUEUE_ID = 0  # SendMessageProcessor sends every dead letter to queue 0
BUILTIN_GROUPS = frozenset(
    {
        # SubscriptionGroupManager.init (4.9.8; 5.3.3 adds the transaction check's group):
        # every broker's subscriptionGroup.json names them, consumers or not.
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PULL",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_RMQ_SYS_TRANS",
    }
)
TOPIC_EVIDENCE_UNITS = 256
"""Units of a group's retry and DLQ queues read for the topics it consumes (``RETRY_TOPIC``)."""

_Bounds = tuple[int, int]


def groups_report(
    store: Store,
    version: BrokerVersion,
    version_text: str,
    version_basis: str,
    *,
    group: str | None = None,
    after_restart: bool = False,
    now: int | None = None,
    progress: Progress | None = None,
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.UNKNOWN,
    prove_deliveries: bool = True,
    recovery: RecoveryReport | None = None,
) -> GroupsReport:
    """``prove_deliveries``: walk the commitlog for the send-backs that prove a pending message
    reached its group before (``delivered_before``; None on every row without it).
    ``recovery``: with ``after_restart``, a finished emulation of this store's restart to judge
    against (see :func:`offsets_report`)."""
    offsets = offsets_report(store, group, None, progress, restart=after_restart, recovery=recovery)
    after = offsets.queues_after_restart if after_restart else None
    restarted = after_restart and offsets.restart is not None and offsets.restart.broker_starts
    subs_file = load_config_file(store.config_dir, "subscriptionGroup.json")
    files = [f for f in offsets.files if f.name != "delayOffset.json"]  # `delays` judges it
    problems: list[str] = []
    subs: dict[str, SubscriptionGroupConfig] = {}
    if not (subs_file.main_state == "missing" and subs_file.bak_state == "missing"):
        files.append(file_use(subs_file))
        if isinstance(subs_file.value, SubscriptionGroupTable):
            subs = subs_file.value.subscription_group_table
    for f in files:
        problems.extend(f.errors)
    events, source, event_problems = moved_events(store)
    problems.extend(event_problems)
    by_group = _rows_by_group(offsets)
    # A group the broker created a subscription for (autoCreateSubscriptionGroup: at its first
    # heartbeat, persisted at once) is known even before any offset was persisted.
    subscribed = {g for g in subs if g not in BUILTIN_GROUPS}
    known = set(offsets.groups) | _groups_on_disk(store, offsets.groups, subscribed)
    events_of: dict[str, list[MovedEvent]] = {}
    for e in events:
        if e.event is not None:
            events_of.setdefault(e.event.consumer_group, []).append(e)
    known |= set(events_of)
    # POP groups, from their checkpoints: pop's walk of the commitlog, made only where a revive
    # or timer queue could hold them.
    pops = pop_report(store, group, now=now) if has_pop_records(store) else None
    pop_of = {} if pops is None else {g.group: g for g in pops.groups}
    known |= set(pop_of)
    on_disk = _Queues(store)
    names = sorted(known if group is None else known & {group})
    # Only a group with retry or DLQ copies can be proven to have consumed anything.
    provable = {
        n
        for n in names
        if prove_deliveries
        and (retry_topic(n) in on_disk.by_topic or dlq_topic(n) in on_disk.by_topic)
    }
    proof = consumed_by_groups(store, provable) if provable else None
    judged: list[Group] = []
    reference: int | None = now
    basis = "--now" if now is not None else "not needed"
    if pop_of and pops is not None:
        # In flight or due: the POP states were judged against pop's clock.
        reference, basis = pops.reference_timestamp, pops.reference_basis
    for name in names:
        evidence = _topics_from_copies(store, on_disk, name)
        rows = _queue_rows(
            store,
            on_disk,
            name,
            by_group.get(name, []),
            version,
            after if restarted else None,
            consume_from_where,
            evidence,
            proof if name in provable else None,
        )
        dlq = _dlq(store, name, after if restarted else None)
        if dlq is not None and dlq[1] is not None and reference is None:
            reference, basis = newest_store_time(store)
        judged.append(
            _group(
                name,
                subs.get(name),
                rows,
                dlq,
                reference,
                tuple(events_of.get(name, ())),
                evidence,
                consume_from_where,
                pop_of.get(name),
            )
        )
    return GroupsReport(
        version_text,
        version_basis,
        "after restart" if restarted else "disk",
        consume_from_where.value,
        tuple(files),
        offsets.restart if after_restart else None,
        reference,
        basis,
        tuple(judged),
        tuple(sorted(known)),
        source,
        tuple(problems),
    )


# --- rows -----------------------------------------------------------------------------------------


def _rows_by_group(offsets: OffsetsReport) -> dict[str, list[OffsetRow]]:
    out: dict[str, list[OffsetRow]] = {}
    for row in offsets.rows:
        if row.group is not None:  # delay rows have none
            out.setdefault(row.group, []).append(row)
    return out


def _groups_on_disk(store: Store, with_offsets: tuple[str, ...], subscribed: set[str]) -> set[str]:
    """Groups named only by their %RETRY% or %DLQ% queues (a crash before the first persist of
    consumerOffset.json leaves no other trace) or by ``subscriptionGroup.json``; a POP retry
    topic of a known group is its own, and so is a subscription named like one when that
    retry topic is on disk."""
    names = set()
    for qid in store.queue_dirs:
        retry = parse_retry_topic(qid.topic)
        if retry is not None and retry.pop_topic is not None:
            # A V2 POP retry topic names its group before the "+" (KeyBuilder.parseGroup).
            names.add(retry.group)
            continue
        for prefix in (RETRY_PREFIX, DLQ_PREFIX):
            if qid.topic.startswith(prefix) and len(qid.topic) > len(prefix):
                names.add(qid.topic[len(prefix) :])
    groups = names | set(with_offsets) | subscribed
    # "<g>_<topic>" is g's POP retry topic when g is a group: tried at each separator.
    pop = {
        n
        for n in names
        if any(c in POP_RETRY_SEPARATORS and n[:i] in groups for i, c in enumerate(n) if i)
    }
    return (names | subscribed) - (pop - set(with_offsets))


class _Queues:
    """The queues on disk by topic, and the retry topics in order (a group's own and its POP
    retry topics share a prefix): each group's queues found without a walk of every queue."""

    def __init__(self, store: Store) -> None:
        self.by_topic: dict[str, list[QueueId]] = {}
        for qid in sorted(store.queue_dirs, key=lambda q: (q.topic, q.queue_id)):
            self.by_topic.setdefault(qid.topic, []).append(qid)
        self.retry = sorted(t for t in self.by_topic if t.startswith(RETRY_PREFIX))

    def of(self, group: str, topics: set[str]) -> Iterator[tuple[QueueId, str]]:
        """(queue, kind) of the group's topics and retry topics, in topic order."""
        own = retry_topic(group)
        start = bisect.bisect_left(self.retry, own)
        wanted = {t: "topic" for t in topics}
        for t in itertools.takewhile(lambda t: t.startswith(own), self.retry[start:]):
            kind = retry_topic_kind(t, group)
            if kind is not None:
                wanted[t] = kind
        for topic in sorted(wanted):
            for qid in self.by_topic.get(topic, ()):
                yield qid, wanted[topic]


def _queue_rows(
    store: Store,
    queues: _Queues,
    group: str,
    rows: list[OffsetRow],
    version: BrokerVersion,
    after: dict[QueueId, _Bounds] | None,
    where: ConsumeFromWhere,
    evidence: tuple[str, ...],
    proof: Proven | None,
) -> list[QueueRow]:
    out = [_proven(_committed(store, group, r, version, after), proof, r.offset) for r in rows]
    seen = {QueueId(r.topic, r.queue_id) for r in rows}
    topics = {r.topic for r in rows if r.table == "consumer"} | set(evidence)
    for qid, kind in queues.of(group, topics):
        if qid not in seen:
            row = _uncommitted(store, group, qid, kind, version, after, where)
            out.append(_proven(row, proof, None))
    return out


def _proven(row: QueueRow, proof: Proven | None, offset: int | None) -> QueueRow:
    """The row with the pending messages the store proves the group was delivered before."""
    if proof is None:
        return row
    judged = (
        row.next_pull_after_restart if row.min_offset_after_restart is not None else row.next_pull
    )
    if judged is None or row.pending is None:
        return row
    start = judged.next_offset
    again = proof.count(row.group, QueueId(row.topic, row.queue_id), start, start + row.pending)
    findings = row.findings
    if again:
        since = "its committed offset" if offset is not None else "where it starts"
        findings = (
            *findings,
            f"{again} of the {row.pending} message(s) from {since} on reached the group before "
            "(a send-back of theirs is stored): delivered again",
        )
    return replace(row, findings=findings, delivered_before=again)


def _topics_from_copies(store: Store, queues: _Queues, group: str) -> tuple[str, ...]:
    """The original topics (``RETRY_TOPIC``, set by ``consumerSendMsgBack`` on every retry and
    DLQ copy) named by the first units of the group's ``%RETRY%`` and ``%DLQ%`` queues: a
    group sends back only what it consumed, so it subscribes to them."""
    found: set[str] = set()
    for topic in (retry_topic(group), dlq_topic(group)):
        for qid in queues.by_topic.get(topic, ()):
            b = queue_bounds(store, qid)
            count = min(b.max_offset - b.min_offset, TOPIC_EVIDENCE_UNITS)
            if count <= 0:
                continue
            reads = OrderedReads(store)
            for chunk in iter_unit_chunks(store, qid.topic, qid.queue_id, b.min_offset, count):
                for phy in np.unique(chunk.units["phy_offset"]).tolist():
                    record = reads.record(phy)
                    if record is None:
                        continue  # a unit past the commitlog on disk names nothing
                    original = record.properties.get(props.RETRY_TOPIC)
                    if original and not original.startswith((RETRY_PREFIX, DLQ_PREFIX)):
                        found.add(original)
            reads.close()
    return tuple(sorted(found))


def _committed(
    store: Store,
    group: str,
    r: OffsetRow,
    version: BrokerVersion,
    after: dict[QueueId, _Bounds] | None,
) -> QueueRow:
    kind = "lmq" if r.table == "lmq" else retry_topic_kind(r.topic, group) or "topic"
    # A missing queue is created empty by findConsumeQueue: min = max = 0 to getMessage.
    lo, hi = (r.min_offset or 0, r.max_offset or 0)
    # A queue the restart does not rebuild is as missing to it: empty.
    a_bounds = None if after is None else after.get(QueueId(r.topic, r.queue_id), (0, 0))
    notes: list[str] = []
    findings: list[str] = []
    if r.offset < 0:
        # ConsumerManageProcessor.queryConsumerOffset answers only an offset >= 0: a negative
        # one is no committed offset to the client.
        notes.append(f"committed offset {r.offset} is negative: the broker treats it as none")
        pull = pull_after = None
    else:
        pull = next_pull(r.offset, lo, hi, version)
        pull_after = None if a_bounds is None else next_pull(r.offset, *a_bounds, version)
    judged = pull if a_bounds is None else pull_after
    judged_hi = hi if a_bounds is None else a_bounds[1]
    if judged is not None:
        findings.extend(_reset_findings(r.offset, judged, version))
    if r.bak_note is not None:
        findings.append(f"consumerOffset.json.bak disagrees: {r.bak_note}")
    last = _last_consumed(store, r.topic, r.queue_id, r.offset, lo, hi, notes)
    return QueueRow(
        group,
        r.topic,
        r.queue_id,
        kind,
        r.offset,
        r.bak_offset,
        r.bak_note,
        lo,
        hi,
        hi - r.offset,
        last,
        pull,
        None if a_bounds is None else a_bounds[0],
        None if a_bounds is None else a_bounds[1],
        None if a_bounds is None else a_bounds[1] - r.offset,
        pull_after,
        None if judged is None else max(judged_hi - judged.next_offset, 0),
        tuple(notes),
        tuple(findings),
    )


def _uncommitted(
    store: Store,
    group: str,
    qid: QueueId,
    kind: str,
    version: BrokerVersion,
    after: dict[QueueId, _Bounds] | None,
    where: ConsumeFromWhere,
) -> QueueRow:
    b = queue_bounds(store, qid) if qid in store.queue_dirs else None
    lo, hi = (0, 0) if b is None else (b.min_offset, b.max_offset)
    a_bounds = None if after is None else after.get(qid, (0, 0))
    j_lo, j_hi = (lo, hi) if a_bounds is None else a_bounds
    findings: list[str] = []
    pull = pull_after = None
    pending = None
    # The start is asked of the broker when the group starts: after a restart, of the queue
    # the restart rebuilt.
    retry = kind in ("retry", "pop_retry")
    start = start_without_offset(retry, where, j_lo, j_hi)
    notes = [start.basis]
    if start.offset is not None:
        pull = next_pull(start.offset, lo, hi, version)
        if a_bounds is not None:
            pull_after = next_pull(start.offset, a_bounds[0], a_bounds[1], version)
        judged = pull if a_bounds is None else pull_after
        assert judged is not None
        pending = max(j_hi - judged.next_offset, 0)
        if pending:
            findings.append(
                f"no committed offset: the group reads {qid.topic}/{qid.queue_id} from "
                f"{judged.next_offset} and gets its {pending} message(s) again if it consumed "
                "them before" + (" (the retry queue starts at 0)" if retry else "")
            )
    return QueueRow(
        group,
        qid.topic,
        qid.queue_id,
        kind,
        None,
        None,
        None,
        lo,
        hi,
        None,
        None,
        pull,
        None if a_bounds is None else a_bounds[0],
        None if a_bounds is None else a_bounds[1],
        None,
        pull_after,
        pending,
        tuple(notes),
        tuple(findings),
    )


def _reset_findings(offset: int, p: NextPull, version: BrokerVersion) -> list[str]:
    if not p.moved:
        return []
    event = (
        "; the broker stores an OFFSET_MOVED_EVENT record"
        if version < MOVED_EVENT_BEFORE
        else "; the broker only logs it"
    )
    if p.replayed:
        what = (
            f"{p.replayed} message(s) delivered again (before 4.9.4 a queue whose min is 0 "
            "resets to 0, #4215)"
        )
    elif p.skipped:
        what = f"{p.skipped} message(s) deleted before the group read them are skipped"
    else:
        what = "nothing replayed or skipped"
    return [f"{p.status.value}: offset {offset} reset to {p.next_offset}: {what}{event}"]


def _last_consumed(
    store: Store, topic: str, queue_id: int, offset: int, lo: int, hi: int, notes: list[str]
) -> int | None:
    """``getMessageStoreTimeStamp(topic, queueId, offset - 1)``: the unit's record's store time;
    none when that unit is outside the queue on disk."""
    at = offset - 1
    if not lo <= at < hi:
        return None
    try:
        phy, _size, _tags = unit_at(store, topic, queue_id, at)
        return store.read_message(phy, with_body=False).store_timestamp
    except StoreError as err:
        notes.append(f"the last consumed message (queue offset {at}) cannot be read: {err}")
        return None


# --- group totals, DLQ ----------------------------------------------------------------------------


def _dlq(
    store: Store, group: str, after: dict[QueueId, _Bounds] | None
) -> tuple[int, int | None] | None:
    """(messages, store time of the oldest) of ``%DLQ%<group>`` queue 0; None without one."""
    qid = QueueId(dlq_topic(group), DLQ_QUEUE_ID)
    if qid not in store.queue_dirs and (after is None or qid not in after):
        return None
    if after is not None:
        lo, hi = after.get(qid, (0, 0))
    else:
        b = queue_bounds(store, qid)
        lo, hi = b.min_offset, b.max_offset
    if hi <= lo:
        return 0, None
    try:
        phy, _size, _tags = unit_at(store, qid.topic, qid.queue_id, lo)
        return hi - lo, store.read_message(phy, with_body=False).store_timestamp
    except StoreError:
        return hi - lo, None  # the unit is not on disk yet (the restart dispatches it)


def _group(
    name: str,
    sub: SubscriptionGroupConfig | None,
    rows: list[QueueRow],
    dlq: tuple[int, int | None] | None,
    reference: int | None,
    events: tuple[MovedEvent, ...],
    evidence: tuple[str, ...],
    where: ConsumeFromWhere,
    pop: PopGroup | None,
) -> Group:
    findings = [f"{r.topic}/{r.queue_id}: {f}" for r in rows for f in r.findings]

    def judged(r: QueueRow) -> NextPull | None:
        return r.next_pull_after_restart if r.min_offset_after_restart is not None else r.next_pull

    # A queue without a committed offset skips nothing: the group never read below its start.
    pulls = [p for r in rows if r.offset is not None and (p := judged(r)) is not None]
    lag = sum(r.pending or 0 for r in rows if r.kind in ("topic", "lmq"))
    retry = sum(r.pending or 0 for r in rows if r.kind in ("retry", "pop_retry"))
    replayed = sum(p.replayed for p in pulls)
    replayed += sum(r.pending or 0 for r in rows if r.offset is None and r.flagged)
    skipped = sum(p.skipped for p in pulls)
    oldest = None if dlq is None else dlq[1]
    age = None if oldest is None or reference is None else reference - oldest
    subscription = None if sub is None else _subscription(sub)
    delivered_again = sum(r.delivered_before or 0 for r in rows)
    notes = []
    if evidence:
        notes.append(f"consumes {', '.join(evidence)}: its retry/DLQ copies' RETRY_TOPIC names it")
    if not any(r.kind in ("topic", "lmq") for r in rows):
        if where is ConsumeFromWhere.UNKNOWN:
            start = "where ConsumeFromWhere says (pass --consume-from-where)"
        elif where is ConsumeFromWhere.FIRST:
            start = "its min (the broker answers 0 where the min is 0; FIRST: 0, moved to the min)"
        else:
            start = f"0 where the queue's min is 0, else as ConsumeFromWhere {where.value} says"
        notes.append(
            "no committed offset on a topic queue and no retry copy names the topics it "
            "subscribes (the client holds its subscription): on its next start it reads every "
            f"queue of them from {start}"
        )
    if pop is not None:
        notes.extend(_pop_notes(pop))
    return Group(
        name,
        subscription,
        tuple(rows),
        lag,
        retry,
        replayed,
        skipped,
        None if dlq is None else dlq[0],
        oldest,
        age,
        events,
        tuple(findings),
        evidence,
        tuple(notes),
        delivered_again,
        pop,
    )


def _pop_notes(pop: PopGroup) -> list[str]:
    """What a POP group's committed offsets do not say (``pop`` judges its records)."""
    in_flight = pop.counts[PopState.IN_FLIGHT.value]
    awaiting = pop.counts[PopState.AWAITING_REVIVE.value]
    notes = [
        f"POP: its committed offsets move at pop time, so its lag leaves out the "
        f"{pop.outstanding} popped message(s) not acked ({in_flight} in flight, {awaiting} "
        "awaiting revive)"
    ]
    if pop.revive_uncommitted:
        notes.append(
            f"POP: {pop.revive_uncommitted} revived message(s) whose checkpoints the revive "
            "service's persisted progress has not passed: a restart revives them again (a "
            "duplicate delivery; see pop)"
        )
    return notes


def _subscription(s: SubscriptionGroupConfig) -> Subscription:
    return Subscription(
        s.retry_max_times,
        s.consume_enable,
        s.consume_broadcast_enable,
        s.consume_from_min_enable,
        s.retry_queue_nums,
        s.broker_id,
        s.which_broker_when_consume_slowly,
        s.consume_message_orderly,
        s.group_retry_policy,
    )
