"""``transactions``: every transactional message's fate, as the broker's own records tell it.

The rules, from RocketMQ's broker (4.9.8 and 5.3.3 agree unless noted):

- ``TransactionalMessageBridge.parseHalfMessageInner``: a prepared message is stored as a *half*
  in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, its own topic and queue kept in ``REAL_TOPIC`` /
  ``REAL_QID``, its sysFlag reset to TRANSACTION_NOT_TYPE (so it enters the half queue).
- ``TransactionalMessageServiceImpl.check`` / ``putBackHalfMsgQueue``
  (``TransactionalMessageBridge.renewHalfMessageInner``): each check stores the half again, a
  new copy with ``TRANSACTION_CHECK_TIMES`` + 1 (properties, UNIQ_KEY included, copied), and the
  producer is asked about the *new* copy. The check's progress through the half queue is
  group ``CID_RMQ_SYS_TRANS`` in ``consumerOffset.json``
  (``TransactionalMessageUtil.buildConsumerGroup``).
- ``TransactionalMessageServiceImpl.check`` (``needDiscard || needSkip``): past
  ``transactionCheckMax`` (15) checks, or older than ``fileReservedTime``, the half is given up:
  ``DefaultTransactionalMessageCheckListener.resolveDiscardMsg`` stores it in
  ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0 (properties copied) and the check moves past it.
- ``EndTransactionProcessor.processRequest`` / ``endMessageTransaction``: a commit stores a record
  in the real topic/queue with the COMMIT transaction type and ``preparedTransactionOffset`` =
  the half's physical offset, then ``deletePrepareMessage``; a rollback only calls
  ``deletePrepareMessage`` (no record; pre-4.3 brokers wrote a ROLLBACK-type record, read here too).
- ``TransactionalMessageBridge.putOpMessage`` / ``addRemoveTagInTransactionOp``: the *op* record
  goes to ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (queue = the half's queue) with tag ``d``
  (``TransactionalMessageUtil.REMOVE_TAG``); its body is the half's queue offset as decimal text
  (4.9), or several, comma-separated (5.x ``TransactionalOpBatchService``; read in
  ``TransactionalMessageServiceImpl.fillOpRemoveMap`` by ``split(OFFSET_SEPARATOR)``).

Everything is read by one forensic commitlog walk (damage stepped over and reported): commit
records are found by their ``preparedTransactionOffset``, which no queue or index holds, so a
walk is needed anyway, and the same walk reads the half and op records (their consume queues
would only repeat it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from rmqinspect.analysis import Progress
from rmqinspect.analysis.messages import ForensicWalk, SkippedRange
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.config import ConsumerOffsetTable
from rmqinspect.format.fate import (
    CHECK_GROUP,
    CHECK_TIMES,
    GIVEN_UP_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    REMOVE_TAG,
    TRANSACTION_CHECK_MAX,
    int_property,
    op_offsets,
)
from rmqinspect.store.configfiles import load_config_file
from rmqinspect.store.model import Store

# BrokerConfig.transactionCheckInterval (60 s) x transactionCheckMax: a half still pending after
# the check service's whole budget is stuck (apache/rocketmq#1517, #2133).
DEFAULT_STUCK_AFTER_MS = TRANSACTION_CHECK_MAX * 60_000


class TxState(StrEnum):
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    PENDING = "pending"
    GIVEN_UP = "given_up"


class FindingKind(StrEnum):
    OP_NOT_NUMBER = "op_not_number"  # an op body token that is no decimal offset
    OP_POINTS_NOWHERE = "op_points_nowhere"  # an op offset no half on disk has
    OP_OTHER_TAG = "op_other_tag"  # an op record whose tag is not "d"
    COMMIT_WITHOUT_HALF = "commit_without_half"  # preparedTransactionOffset names no half
    COMMIT_WITHOUT_OP = "commit_without_op"  # committed, op record missing: it will be checked
    COMMIT_ELSEWHERE = "commit_elsewhere"  # commit record not in the half's REAL_TOPIC/REAL_QID
    COMMIT_REPEATED = "commit_repeated"  # more than one commit record for one transaction
    ROLLBACK_AND_COMMIT = "rollback_and_commit"
    GIVEN_UP_AND_RESOLVED = "given_up_and_resolved"
    HALF_WITHOUT_REAL_TOPIC = "half_without_real_topic"
    PASSED_BY_CHECK = "passed_by_check"  # below the check offset, unresolved, no newer copy
    STUCK = "stuck"  # pending longer than the threshold


# What is inconsistent on disk (exit 1), as opposed to what only waits.
INCONSISTENT = frozenset(FindingKind) - {FindingKind.STUCK, FindingKind.PASSED_BY_CHECK}


@dataclass(frozen=True, slots=True)
class TxFinding:
    kind: FindingKind
    position: int  # the record the finding is about (physical offset)
    uniq_key: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class HalfCopy:
    """One stored half: the original or a copy a check stored again."""

    position: int
    queue_id: int
    queue_offset: int
    store_timestamp: int
    check_times: int


@dataclass(slots=True)
class Transaction:
    """One transaction: its half copies (linked by UNIQ_KEY) and what resolved it."""

    uniq_key: str | None
    real_topic: str | None
    real_queue_id: int | None
    producer_group: str | None
    state: TxState = TxState.PENDING
    halves: list[HalfCopy] = field(default_factory=list)
    check_times: int = 0  # the most any copy says
    first_store_timestamp: int | None = None
    age_ms: int | None = None  # to the newest record of the commitlog, while pending
    op_positions: list[int] = field(default_factory=list)
    commit_positions: list[int] = field(default_factory=list)
    rollback_positions: list[int] = field(default_factory=list)
    given_up_position: int | None = None
    checked_past: bool = False  # the check service's offset is past its newest copy


@dataclass(frozen=True, slots=True)
class TransactionsReport:
    source: str
    half_records: int
    op_records: int
    commit_records: int
    rollback_records: int
    given_up_records: int
    prepared_outside_half_topic: int  # PREPARED-type records stored in a real topic
    check_offset: int | None  # CID_RMQ_SYS_TRANS's committed offset in half queue 0
    newest_store_timestamp: int | None
    counts: dict[str, int]
    oldest_pending: Transaction | None
    transactions: tuple[Transaction, ...]
    findings: tuple[TxFinding, ...]
    skipped: tuple[SkippedRange, ...]

    @property
    def empty(self) -> bool:
        return not (
            self.half_records
            or self.op_records
            or self.commit_records
            or self.rollback_records
            or self.given_up_records
            or self.prepared_outside_half_topic
        )

    @property
    def inconsistent(self) -> bool:
        return any(f.kind in INCONSISTENT for f in self.findings)

    @property
    def stuck(self) -> bool:
        return any(f.kind is FindingKind.STUCK for f in self.findings)


@dataclass(frozen=True, slots=True)
class _Op:
    """What the rules read of an op record: its body parsed when read (bodies are not kept)."""

    position: int
    queue_id: int
    tags: str | None
    offsets: tuple[int, ...]
    bad: tuple[str, ...]  # tokens that are no offset, their first 40 characters


@dataclass(frozen=True, slots=True)
class _End:
    """What the rules read of a COMMIT or ROLLBACK record."""

    position: int
    prepared_transaction_offset: int
    uniq_key: str | None  # None too where a half read before it has its offset
    topic: str
    queue_id: int


@dataclass(slots=True)
class _Records:
    """The walk's harvest, without the records themselves (a MessageRecord with its
    properties took about a kilobyte, for every transactional record of the store): halves
    are linked as they are read, in the walk's order as before."""

    links: _Links
    half_records: int = 0
    ops: list[_Op] = field(default_factory=list)
    commits: list[_End] = field(default_factory=list)
    rollbacks: list[_End] = field(default_factory=list)
    given_up: list[cl.MessageRecord] = field(default_factory=list)
    prepared: int = 0
    newest: int | None = None
    skipped: list[SkippedRange] = field(default_factory=list)


def transactions_report(
    store: Store, stuck_after_ms: int = DEFAULT_STUCK_AFTER_MS, progress: Progress | None = None
) -> TransactionsReport:
    findings: list[TxFinding] = []
    recs = _walk(store, progress, _Links(findings))
    txs, by_position, by_queue_offset = recs.links.txs, recs.links.by_position, recs.links.by_queue
    _apply_ops(recs.ops, txs, by_queue_offset, findings)
    _apply_commits(recs.commits, recs.rollbacks, by_position, findings)
    _apply_given_up(recs.given_up, txs, findings)
    check_offset = _check_offset(store)
    for tx in txs.values():
        _judge(tx, check_offset, recs.newest, stuck_after_ms, findings)
    ordered = sorted(txs.values(), key=lambda t: t.halves[0].position if t.halves else -1)
    counts = {s.value: sum(1 for t in ordered if t.state is s) for s in TxState}
    pending = [t for t in ordered if t.state is TxState.PENDING and t.halves]
    oldest = min(pending, key=lambda t: t.halves[0].store_timestamp) if pending else None
    return TransactionsReport(
        source="commitlog scan",
        half_records=recs.half_records,
        op_records=len(recs.ops),
        commit_records=len(recs.commits),
        rollback_records=len(recs.rollbacks),
        given_up_records=len(recs.given_up),
        prepared_outside_half_topic=recs.prepared,
        check_offset=check_offset,
        newest_store_timestamp=recs.newest,
        counts=counts,
        oldest_pending=oldest,
        transactions=tuple(ordered),
        findings=tuple(sorted(findings, key=lambda f: (f.position, f.kind))),
        skipped=tuple(recs.skipped),
    )


def _walk(store: Store, progress: Progress | None, links: _Links) -> _Records:
    """The half, op and given-up records and every COMMIT/ROLLBACK/PREPARED-type record, in one
    forensic walk; bodies are read for op records only."""
    out = _Records(links)
    walk = ForensicWalk()
    for cols in walk.runs(store, progress):
        tx_type = cols.sys_flag & cl.TRANSACTION_TYPE_MASK
        rows = np.flatnonzero(cols.topic_mask([HALF_TOPIC]))
        for r in cols.records(rows, with_body=False):
            links.add(store.with_entry(r))
        out.half_records += len(rows)
        rows = np.flatnonzero(cols.topic_mask([GIVEN_UP_TOPIC]))
        out.given_up.extend(store.with_entry(r) for r in cols.records(rows, with_body=False))
        op_rows = np.flatnonzero(cols.topic_mask([OP_TOPIC]))
        out.ops.extend(_op(store.with_entry(r)) for r in cols.records(op_rows, with_body=True))
        for kind, bucket in (
            (cl.TRANSACTION_COMMIT_TYPE, out.commits),
            (cl.TRANSACTION_ROLLBACK_TYPE, out.rollbacks),
        ):
            rows = np.flatnonzero(tx_type == kind)
            bucket.extend(
                _end(store.with_entry(r), links) for r in cols.records(rows, with_body=False)
            )
        out.prepared += int(np.count_nonzero(tx_type == cl.TRANSACTION_PREPARED_TYPE))
    out.skipped, out.newest = walk.skipped, walk.newest
    return out


def _op(rec: cl.MessageRecord) -> _Op:
    offsets, bad = op_offsets(rec.body)
    return _Op(rec.position, rec.queue_id, rec.tags, tuple(offsets), tuple(t[:40] for t in bad))


def _end(rec: cl.MessageRecord, links: _Links) -> _End:
    # Its UNIQ_KEY is read only for a commit whose offset names no half; a half read before it
    # stays linked, so that key need not be kept (3.5 MB of a 2 GB crashed synth store).
    named = rec.prepared_transaction_offset in links.by_position
    return _End(
        rec.position,
        rec.prepared_transaction_offset,
        None if named else rec.uniq_key,
        links.shared(rec.topic),
        rec.queue_id,
    )


class _Links:
    """Transactions keyed by UNIQ_KEY (a half without one is a transaction of its own), fed
    the halves in the walk's order: the copies a check stores keep the original's properties
    (``renewHalfMessageInner``)."""

    def __init__(self, findings: list[TxFinding]) -> None:
        self.findings = findings
        self.txs: dict[str, Transaction] = {}
        self.by_position: dict[int, Transaction] = {}
        self.by_queue: dict[tuple[int, int], Transaction] = {}
        # Topics and groups are few: one string each, not one per transaction (4 MB of a 2 GB
        # crashed synth store's 34,000 transactions).
        self._names: dict[str, str] = {}

    def shared(self, name: str) -> str:
        return self._names.setdefault(name, name)

    def _shared(self, name: str | None) -> str | None:
        return None if name is None else self.shared(name)

    def add(self, rec: cl.MessageRecord) -> None:
        key = rec.uniq_key if rec.uniq_key is not None else f"@{rec.position}"
        p = rec.properties
        tx = self.txs.get(key)
        if tx is None:
            tx = Transaction(
                rec.uniq_key,
                self._shared(p.get(props.REAL_TOPIC)),
                int_property(p, props.REAL_QID),
                self._shared(p.get(props.PGROUP)),
            )
            self.txs[key] = tx
            if tx.real_topic is None:
                self.findings.append(
                    TxFinding(
                        FindingKind.HALF_WITHOUT_REAL_TOPIC,
                        rec.position,
                        rec.uniq_key,
                        "half without REAL_TOPIC: a commit has no topic to go to",
                    )
                )
        copy = HalfCopy(
            rec.position,
            rec.queue_id,
            rec.queue_offset,
            rec.store_timestamp,
            int_property(p, CHECK_TIMES) or 0,
        )
        tx.halves.append(copy)
        tx.check_times = max(tx.check_times, copy.check_times)
        self.by_position[rec.position] = tx
        self.by_queue[(rec.queue_id, rec.queue_offset)] = tx


def _apply_ops(
    ops: list[_Op],
    txs: dict[str, Transaction],
    by_queue_offset: dict[tuple[int, int], Transaction],
    findings: list[TxFinding],
) -> None:
    """Each op offset marks the half at that offset of the half queue with the op's queue id
    (``TransactionalMessageBridge.getOpQueueByHalf`` keeps the id)."""
    offsets = [o for q, o in by_queue_offset if q == 0]
    held = f"[{min(offsets)}, {max(offsets)}]" if offsets else "none"
    for op in ops:
        if op.tags != REMOVE_TAG:
            findings.append(
                TxFinding(
                    FindingKind.OP_OTHER_TAG,
                    op.position,
                    None,
                    f"op record with tag {op.tags!r}, not {REMOVE_TAG!r}: the check ignores it",
                )
            )
            continue
        for token in op.bad:
            findings.append(
                TxFinding(
                    FindingKind.OP_NOT_NUMBER,
                    op.position,
                    None,
                    f"op body token {token!r} is not a half-queue offset",
                )
            )
        for offset in op.offsets:
            tx = by_queue_offset.get((op.queue_id, offset))
            if tx is None:
                findings.append(
                    TxFinding(
                        FindingKind.OP_POINTS_NOWHERE,
                        op.position,
                        None,
                        f"op names half-queue {op.queue_id} offset {offset}; no half on disk "
                        f"has it (queue 0 offsets read: {held})",
                    )
                )
                continue
            tx.op_positions.append(op.position)


def _apply_commits(
    commits: list[_End],
    rollbacks: list[_End],
    by_position: dict[int, Transaction],
    findings: list[TxFinding],
) -> None:
    for rec in commits:
        tx = by_position.get(rec.prepared_transaction_offset)
        if tx is None:
            unset = rec.prepared_transaction_offset == 0
            findings.append(
                TxFinding(
                    FindingKind.COMMIT_WITHOUT_HALF,
                    rec.position,
                    rec.uniq_key,
                    f"COMMIT record in {rec.topic}:{rec.queue_id}: preparedTransactionOffset "
                    f"{rec.prepared_transaction_offset} is no half's physical offset"
                    + (" (0: unset, not stored by EndTransactionProcessor)" if unset else ""),
                )
            )
            continue
        tx.commit_positions.append(rec.position)
        if (tx.real_topic, tx.real_queue_id) != (rec.topic, rec.queue_id):
            findings.append(
                TxFinding(
                    FindingKind.COMMIT_ELSEWHERE,
                    rec.position,
                    tx.uniq_key,
                    f"committed into {rec.topic}:{rec.queue_id}, the half says "
                    f"{tx.real_topic}:{tx.real_queue_id}",
                )
            )
    for rec in rollbacks:
        tx = by_position.get(rec.prepared_transaction_offset)
        if tx is not None:
            tx.rollback_positions.append(rec.position)


def _apply_given_up(
    given_up: list[cl.MessageRecord], txs: dict[str, Transaction], findings: list[TxFinding]
) -> None:
    """``resolveDiscardMsg`` copies the half's properties: the UNIQ_KEY links it. One whose half
    is gone (retention) is a transaction of its own."""
    for rec in given_up:
        tx = txs.get(rec.uniq_key) if rec.uniq_key is not None else None
        if tx is None:
            p = rec.properties
            tx = Transaction(
                rec.uniq_key,
                p.get(props.REAL_TOPIC),
                int_property(p, props.REAL_QID),
                p.get(props.PGROUP),
            )
            tx.check_times = int_property(p, CHECK_TIMES) or 0
            txs[rec.uniq_key or f"@{rec.position}"] = tx
        tx.given_up_position = rec.position


def _check_offset(store: Store) -> int | None:
    r = load_config_file(store.config_dir, "consumerOffset.json")
    if not isinstance(r.value, ConsumerOffsetTable):
        return None
    return r.value.offset_table.get(f"{HALF_TOPIC}@{CHECK_GROUP}", {}).get(0)


def _judge(
    tx: Transaction,
    check_offset: int | None,
    newest: int | None,
    stuck_after_ms: int,
    findings: list[TxFinding],
) -> None:
    at = tx.halves[-1].position if tx.halves else (tx.given_up_position or 0)
    if tx.commit_positions:
        tx.state = TxState.COMMITTED
        if not tx.op_positions:
            findings.append(
                TxFinding(
                    FindingKind.COMMIT_WITHOUT_OP,
                    tx.commit_positions[0],
                    tx.uniq_key,
                    "committed, but no op record: the check service will ask the producer again",
                )
            )
        if len(tx.commit_positions) > 1:
            findings.append(
                TxFinding(
                    FindingKind.COMMIT_REPEATED,
                    tx.commit_positions[1],
                    tx.uniq_key,
                    f"{len(tx.commit_positions)} commit records: consumers see it that often",
                )
            )
        if tx.rollback_positions:
            findings.append(
                TxFinding(
                    FindingKind.ROLLBACK_AND_COMMIT,
                    tx.rollback_positions[0],
                    tx.uniq_key,
                    "both a COMMIT and a ROLLBACK record",
                )
            )
    elif tx.op_positions or tx.rollback_positions:
        # An op record alone: a rollback, or a commit whose real-topic record is lost (the
        # broker writes that record first, so a torn tail keeps the op only if it survived).
        tx.state = TxState.ROLLED_BACK
    elif tx.given_up_position is not None:
        tx.state = TxState.GIVEN_UP
    if tx.given_up_position is not None and tx.state is not TxState.GIVEN_UP:
        findings.append(
            TxFinding(
                FindingKind.GIVEN_UP_AND_RESOLVED,
                tx.given_up_position,
                tx.uniq_key,
                f"in {GIVEN_UP_TOPIC} and also {tx.state.value}",
            )
        )
    if not tx.halves:
        return
    tx.first_store_timestamp = tx.halves[0].store_timestamp
    newest_copy = tx.halves[-1]
    if check_offset is not None and newest_copy.queue_id == 0:
        tx.checked_past = newest_copy.queue_offset < check_offset
    if tx.state is not TxState.PENDING:
        return
    if newest is not None:
        tx.age_ms = newest - tx.first_store_timestamp
    if tx.checked_past:
        findings.append(
            TxFinding(
                FindingKind.PASSED_BY_CHECK,
                at,
                tx.uniq_key,
                f"the check offset ({check_offset}) is past its newest copy "
                f"(offset {newest_copy.queue_offset}) with no op record, newer copy or "
                f"{GIVEN_UP_TOPIC} record (the check writes one of these for every half it "
                "passes): the check will not look at it again",
            )
        )
    if tx.age_ms is not None and tx.age_ms > stuck_after_ms:
        findings.append(
            TxFinding(
                FindingKind.STUCK,
                at,
                tx.uniq_key,
                f"pending for {tx.age_ms / 1000:.0f} s (to the newest record), "
                f"{tx.check_times} check(s)",
            )
        )
