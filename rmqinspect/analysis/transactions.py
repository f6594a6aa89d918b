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

from array import array
from collections import Counter
from dataclasses import dataclass

import numpy as np

from rmqinspect.analysis import Progress
from rmqinspect.analysis.messages import ForensicWalk, SkippedRange
from rmqinspect.analysis.transactions_columns import (
    FindingSink,
    FindingSpill,
    Halves,
    Links,
    PositionIndex,
    TransactionList,
    TxColumns,
    TxFindings,
    int64s,
)
from rmqinspect.analysis.transactions_model import (
    INCONSISTENT,
    FindingKind,
    HalfCopy,
    Transaction,
    TxFinding,
    TxState,
)
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

__all__ = [
    "DEFAULT_STUCK_AFTER_MS",
    "INCONSISTENT",
    "FindingKind",
    "HalfCopy",
    "Transaction",
    "TransactionList",
    "TransactionsReport",
    "TxFinding",
    "TxFindings",
    "TxState",
    "transactions_report",
]

# BrokerConfig.transactionCheckInterval (60 s) x transactionCheckMax: a half still pending after
# the check service's whole budget is stuck (apache/rocketmq#1517, #2133).
DEFAULT_STUCK_AFTER_MS = TRANSACTION_CHECK_MAX * 60_000


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
    transactions: TransactionList  # made again each time they are read
    findings: TxFindings  # read again from a temporary file each time
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
        return self.findings.count(INCONSISTENT) > 0

    @property
    def stuck(self) -> bool:
        return self.findings.count([FindingKind.STUCK]) > 0


@dataclass(frozen=True, slots=True)
class _GivenUp:
    """What the rules read of a TRANS_CHECK_MAX_TIME_TOPIC record."""

    position: int
    uniq_key: str | None
    real_topic: str | None
    real_queue_id: int | None
    producer_group: str | None
    check_times: int


# An op offset past a long's range (decimal text can say anything): no half has it. Kept
# aside, its slot in the offsets column says -1.
_LONG_END = 2**63


class _Walked:
    """The walk's harvest, without the records themselves (a MessageRecord with its properties
    took about a kilobyte): halves are linked to their transaction as they are read, in the
    walk's order; op, commit and rollback records kept as columns of numbers."""

    def __init__(self, findings: FindingSpill) -> None:
        self.findings = findings
        self.txs = TxColumns()
        self.halves = Halves()
        # Transactions keyed by UNIQ_KEY (a half without one is a transaction of its own, "@"
        # and its position): the copies a check stores keep the original's properties
        # (``renewHalfMessageInner``).
        self.keys: dict[str, int] = {}
        # Topics and groups are few: one string each, not one per transaction.
        self._names: dict[str, str] = {}
        self.half_records = self.op_records = self.prepared = 0
        self.op_position, self.op_queue_id, self.op_offset = array("q"), array("q"), array("q")
        self.large_offsets: dict[int, int] = {}  # index in the op columns -> the offset
        self.commit_position, self.commit_prepared = array("q"), array("q")
        self.commit_queue_id = array("q")
        self.commit_topic: list[str] = []
        self.commit_key: list[str | None] = []
        self.rollback_position, self.rollback_prepared = array("q"), array("q")
        self.given_up: list[_GivenUp] = []
        self.newest: int | None = None
        self.skipped: list[SkippedRange] = []

    def shared(self, name: str | None) -> str | None:
        return None if name is None else self._names.setdefault(name, name)

    def add_half(self, rec: cl.MessageRecord) -> None:
        self.half_records += 1
        key = rec.uniq_key if rec.uniq_key is not None else f"@{rec.position}"
        p = rec.properties
        tx = self.keys.get(key)
        if tx is None:
            real_topic = self.shared(p.get(props.REAL_TOPIC))
            tx = self.txs.add(
                rec.uniq_key,
                real_topic,
                int_property(p, props.REAL_QID),
                self.shared(p.get(props.PGROUP)),
                0,
            )
            self.keys[key] = tx
            if real_topic is None:
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
        self.halves.add(copy, tx)

    def add_op(self, rec: cl.MessageRecord) -> None:
        """An op record, its body parsed as it is read (bodies are not kept); what it says of
        itself is judged now, its offsets once every half is read."""
        self.op_records += 1
        if rec.tags != REMOVE_TAG:
            self.findings.append(
                TxFinding(
                    FindingKind.OP_OTHER_TAG,
                    rec.position,
                    None,
                    f"op record with tag {rec.tags!r}, not {REMOVE_TAG!r}: the check ignores it",
                )
            )
            return
        offsets, bad = op_offsets(rec.body)
        for token in bad:
            self.findings.append(
                TxFinding(
                    FindingKind.OP_NOT_NUMBER,
                    rec.position,
                    None,
                    f"op body token {token[:40]!r} is not a half-queue offset",
                )
            )
        for offset in offsets:
            if offset >= _LONG_END:
                self.large_offsets[len(self.op_offset)] = offset
            self.op_position.append(rec.position)
            self.op_queue_id.append(rec.queue_id)
            self.op_offset.append(offset if offset < _LONG_END else -1)

    def add_commit(self, rec: cl.MessageRecord) -> None:
        # Its UNIQ_KEY is read only for a commit whose offset names no half; a half read before
        # it stays linked, so that key need not be kept (3.5 MB of a 2 GB crashed synth store).
        named = self.halves.read_at(rec.prepared_transaction_offset)
        self.commit_position.append(rec.position)
        self.commit_prepared.append(rec.prepared_transaction_offset)
        self.commit_queue_id.append(rec.queue_id)
        self.commit_topic.append(self._names.setdefault(rec.topic, rec.topic))
        self.commit_key.append(None if named else rec.uniq_key)

    def add_rollback(self, rec: cl.MessageRecord) -> None:
        self.rollback_position.append(rec.position)
        self.rollback_prepared.append(rec.prepared_transaction_offset)

    def add_given_up(self, rec: cl.MessageRecord) -> None:
        p = rec.properties
        self.given_up.append(
            _GivenUp(
                rec.position,
                rec.uniq_key,
                p.get(props.REAL_TOPIC),
                int_property(p, props.REAL_QID),
                p.get(props.PGROUP),
                int_property(p, CHECK_TIMES) or 0,
            )
        )


def transactions_report(
    store: Store, stuck_after_ms: int = DEFAULT_STUCK_AFTER_MS, progress: Progress | None = None
) -> TransactionsReport:
    findings = FindingSpill()
    try:
        return _report(store, stuck_after_ms, progress, findings)
    except BaseException:
        findings.close()  # a store error says one line: no warning of a file left open
        raise


def _report(
    store: Store, stuck_after_ms: int, progress: Progress | None, findings: FindingSpill
) -> TransactionsReport:
    w = _walk(store, progress, _Walked(findings))
    index = PositionIndex(w.halves)
    ops, commits, rollbacks = Links(), Links(), Links()
    _apply_ops(w, index, ops)
    _apply_commits(w, index, commits, rollbacks)
    _apply_given_up(w)
    check_offset = _check_offset(store)
    newest = w.newest

    def judge(tx: Transaction, sink: FindingSink) -> None:
        _judge(tx, check_offset, newest, stuck_after_ms, sink)

    txs = TransactionList(w.txs, w.halves, (ops, commits, rollbacks), judge)
    # The one making of each transaction that keeps the judge's findings.
    states: Counter[TxState] = Counter()
    oldest: Transaction | None = None
    for tx in txs.each(findings):
        states[tx.state] += 1
        if tx.state is TxState.PENDING and tx.halves:
            first = tx.halves[0].store_timestamp
            if oldest is None or first < oldest.halves[0].store_timestamp:
                oldest = tx
    return TransactionsReport(
        source="commitlog scan",
        half_records=w.half_records,
        op_records=w.op_records,
        commit_records=len(w.commit_position),
        rollback_records=len(w.rollback_position),
        given_up_records=len(w.given_up),
        prepared_outside_half_topic=w.prepared,
        check_offset=check_offset,
        newest_store_timestamp=newest,
        counts={s.value: states[s] for s in TxState},
        oldest_pending=oldest,
        transactions=txs,
        findings=findings.sorted(),
        skipped=tuple(w.skipped),
    )


def _walk(store: Store, progress: Progress | None, out: _Walked) -> _Walked:
    """The half, op and given-up records and every COMMIT/ROLLBACK/PREPARED-type record, in one
    forensic walk; bodies are read for op records only."""
    walk = ForensicWalk()
    for cols in walk.runs(store, progress):
        tx_type = cols.sys_flag & cl.TRANSACTION_TYPE_MASK
        rows = np.flatnonzero(cols.topic_mask([HALF_TOPIC]))
        for r in cols.records(rows, with_body=False):
            out.add_half(store.with_entry(r))
        rows = np.flatnonzero(cols.topic_mask([GIVEN_UP_TOPIC]))
        for r in cols.records(rows, with_body=False):
            out.add_given_up(store.with_entry(r))
        rows = np.flatnonzero(cols.topic_mask([OP_TOPIC]))
        for r in cols.records(rows, with_body=True):
            out.add_op(store.with_entry(r))
        rows = np.flatnonzero(tx_type == cl.TRANSACTION_COMMIT_TYPE)
        for r in cols.records(rows, with_body=False):
            out.add_commit(store.with_entry(r))
        rows = np.flatnonzero(tx_type == cl.TRANSACTION_ROLLBACK_TYPE)
        for r in cols.records(rows, with_body=False):
            out.add_rollback(store.with_entry(r))
        out.prepared += int(np.count_nonzero(tx_type == cl.TRANSACTION_PREPARED_TYPE))
    out.skipped, out.newest = walk.skipped, walk.newest
    return out


def _apply_ops(w: _Walked, index: PositionIndex, links: Links) -> None:
    """Each op offset marks the half at that offset of the half queue with the op's queue id
    (``TransactionalMessageBridge.getOpQueueByHalf`` keeps the id)."""
    queue_ids = int64s(w.op_queue_id)
    offsets = int64s(w.op_offset)
    txs = index.by_queue(queue_ids, offsets)
    held = "none" if index.queue0_range is None else "[{}, {}]".format(*index.queue0_range)
    for i in np.flatnonzero(txs < 0).tolist():
        offset = w.large_offsets.get(i, int(offsets[i]))
        w.findings.append(
            TxFinding(
                FindingKind.OP_POINTS_NOWHERE,
                w.op_position[i],
                None,
                f"op names half-queue {w.op_queue_id[i]} offset {offset}; no half on disk "
                f"has it (queue 0 offsets read: {held})",
            )
        )
    linked = txs >= 0
    links.extend(txs[linked], int64s(w.op_position)[linked])


def _apply_commits(w: _Walked, index: PositionIndex, commits: Links, rollbacks: Links) -> None:
    prepared = int64s(w.commit_prepared)
    for i, tx in enumerate(index.by_position(prepared).tolist()):
        position, topic, queue_id = w.commit_position[i], w.commit_topic[i], w.commit_queue_id[i]
        if tx < 0:
            offset = w.commit_prepared[i]
            unset = offset == 0
            w.findings.append(
                TxFinding(
                    FindingKind.COMMIT_WITHOUT_HALF,
                    position,
                    w.commit_key[i],
                    f"COMMIT record in {topic}:{queue_id}: preparedTransactionOffset "
                    f"{offset} is no half's physical offset"
                    + (" (0: unset, not stored by EndTransactionProcessor)" if unset else ""),
                )
            )
            continue
        commits.add(tx, position)
        real_topic, real_queue_id = w.txs.real(tx)
        if (real_topic, real_queue_id) != (topic, queue_id):
            w.findings.append(
                TxFinding(
                    FindingKind.COMMIT_ELSEWHERE,
                    position,
                    w.txs.uniq_key[tx],
                    f"committed into {topic}:{queue_id}, the half says "
                    f"{real_topic}:{real_queue_id}",
                )
            )
    txs = index.by_position(int64s(w.rollback_prepared))
    linked = txs >= 0
    rollbacks.extend(txs[linked], int64s(w.rollback_position)[linked])


def _apply_given_up(w: _Walked) -> None:
    """``resolveDiscardMsg`` copies the half's properties: the UNIQ_KEY links it. One whose half
    is gone (retention) is a transaction of its own."""
    for g in w.given_up:
        tx = w.keys.get(g.uniq_key) if g.uniq_key is not None else None
        if tx is None:
            tx = w.txs.add(
                g.uniq_key, g.real_topic, g.real_queue_id, g.producer_group, g.check_times
            )
            w.keys[g.uniq_key or f"@{g.position}"] = tx
        w.txs.given_up[tx] = g.position


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
    findings: FindingSink,
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
