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

from collections import Counter
from dataclasses import dataclass

import numpy as np

from rmqinspect.analysis import Progress
from rmqinspect.analysis.messages import ForensicWalk, SkippedRange
from rmqinspect.analysis.transactions_db import FindingSink, TransactionList, TxDb, TxFindings
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
    transactions: TransactionList  # made again from the scratch database each time read
    findings: TxFindings  # read again from the scratch database each time
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


def transactions_report(
    store: Store, stuck_after_ms: int = DEFAULT_STUCK_AFTER_MS, progress: Progress | None = None
) -> TransactionsReport:
    db = TxDb()
    try:
        return _report(store, stuck_after_ms, progress, db)
    except BaseException:
        db.close()  # a store error says one line: no warning of a database left open
        raise


def _report(
    store: Store, stuck_after_ms: int, progress: Progress | None, db: TxDb
) -> TransactionsReport:
    walk = _walk(store, progress, db)
    _link(db)
    check_offset = _check_offset(store)
    newest = walk.newest

    def judge(tx: Transaction, sink: FindingSink) -> None:
        _judge(tx, check_offset, newest, stuck_after_ms, sink)

    txs = db.order(judge)
    # The one making of each transaction that keeps the judge's findings.
    states: Counter[TxState] = Counter()
    oldest: Transaction | None = None
    for tx in txs.each(db):
        states[tx.state] += 1
        if tx.state is TxState.PENDING and tx.halves:
            first = tx.halves[0].store_timestamp
            if oldest is None or first < oldest.halves[0].store_timestamp:
                oldest = tx
    return TransactionsReport(
        source="commitlog scan",
        half_records=db.half_records,
        op_records=db.op_records,
        commit_records=db.commit_records,
        rollback_records=db.rollback_records,
        given_up_records=db.given_up_records,
        prepared_outside_half_topic=walk.prepared,
        check_offset=check_offset,
        newest_store_timestamp=newest,
        counts={s.value: states[s] for s in TxState},
        oldest_pending=oldest,
        transactions=txs,
        findings=db.findings(),
        skipped=tuple(walk.skipped),
    )


@dataclass(frozen=True, slots=True)
class _WalkEnd:
    prepared: int  # PREPARED-type records outside the half topic
    newest: int | None
    skipped: list[SkippedRange]


def _walk(store: Store, progress: Progress | None, db: TxDb) -> _WalkEnd:
    """The half, op and given-up records and every COMMIT/ROLLBACK/PREPARED-type record, in one
    forensic walk, into the database (in batches); bodies are read for op records only."""
    walk = ForensicWalk()
    prepared = 0
    for cols in walk.runs(store, progress):
        tx_type = cols.sys_flag & cl.TRANSACTION_TYPE_MASK
        rows = np.flatnonzero(cols.topic_mask([HALF_TOPIC]))
        for r in cols.records(rows, with_body=False):
            _add_half(db, store.with_entry(r))
        rows = np.flatnonzero(cols.topic_mask([GIVEN_UP_TOPIC]))
        for r in cols.records(rows, with_body=False):
            rec = store.with_entry(r)
            p = rec.properties
            db.add_given_up(
                rec.position,
                rec.uniq_key,
                p.get(props.REAL_TOPIC),
                int_property(p, props.REAL_QID),
                p.get(props.PGROUP),
                int_property(p, CHECK_TIMES) or 0,
            )
        rows = np.flatnonzero(cols.topic_mask([OP_TOPIC]))
        for r in cols.records(rows, with_body=True):
            _add_op(db, store.with_entry(r))
        rows = np.flatnonzero(tx_type == cl.TRANSACTION_COMMIT_TYPE)
        for r in cols.records(rows, with_body=False):
            rec = store.with_entry(r)
            db.add_commit(
                rec.position, rec.prepared_transaction_offset, rec.queue_id, rec.topic, rec.uniq_key
            )
        rows = np.flatnonzero(tx_type == cl.TRANSACTION_ROLLBACK_TYPE)
        for r in cols.records(rows, with_body=False):
            rec = store.with_entry(r)
            db.add_rollback(rec.position, rec.prepared_transaction_offset)
        prepared += int(np.count_nonzero(tx_type == cl.TRANSACTION_PREPARED_TYPE))
    return _WalkEnd(prepared, walk.newest, walk.skipped)


def _add_half(db: TxDb, rec: cl.MessageRecord) -> None:
    p = rec.properties
    copy = HalfCopy(
        rec.position,
        rec.queue_id,
        rec.queue_offset,
        rec.store_timestamp,
        int_property(p, CHECK_TIMES) or 0,
    )
    db.add_half(
        rec.uniq_key,
        copy,
        p.get(props.REAL_TOPIC),
        int_property(p, props.REAL_QID),
        p.get(props.PGROUP),
    )


def _add_op(db: TxDb, rec: cl.MessageRecord) -> None:
    """An op record, its body parsed as it is read (bodies are not kept); what it says of
    itself is judged now, its offsets once every half is read."""
    db.op_records += 1
    if rec.tags != REMOVE_TAG:
        db.append(
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
        db.append(
            TxFinding(
                FindingKind.OP_NOT_NUMBER,
                rec.position,
                None,
                f"op body token {token[:40]!r} is not a half-queue offset",
            )
        )
    for offset in offsets:
        db.add_op_offset(rec.position, rec.queue_id, offset)


def _link(db: TxDb) -> None:
    """Halves to their transaction by UNIQ_KEY (a half without one is a transaction of its own),
    given-up records likewise; then each op offset to the half at that offset of the half queue
    with the op's queue id (``TransactionalMessageBridge.getOpQueueByHalf`` keeps the id), and
    each commit or rollback to the half at its ``preparedTransactionOffset``."""
    for position, uniq_key in db.link_halves():
        db.append(
            TxFinding(
                FindingKind.HALF_WITHOUT_REAL_TOPIC,
                position,
                uniq_key,
                "half without REAL_TOPIC: a commit has no topic to go to",
            )
        )
    db.link_records()
    queue0 = db.queue0_range()
    held = "none" if queue0 is None else "[{}, {}]".format(*queue0)
    for position, queue_id, offset in db.unlinked_ops():
        db.append(
            TxFinding(
                FindingKind.OP_POINTS_NOWHERE,
                position,
                None,
                f"op names half-queue {queue_id} offset {offset}; no half on disk "
                f"has it (queue 0 offsets read: {held})",
            )
        )
    for position, offset, topic, queue_id, uniq_key, half in db.odd_commits():
        if half is None:
            unset = offset == 0
            db.append(
                TxFinding(
                    FindingKind.COMMIT_WITHOUT_HALF,
                    position,
                    uniq_key,
                    f"COMMIT record in {topic}:{queue_id}: preparedTransactionOffset "
                    f"{offset} is no half's physical offset"
                    + (" (0: unset, not stored by EndTransactionProcessor)" if unset else ""),
                )
            )
            continue
        tx_key, real_topic, real_queue_id = half
        db.append(
            TxFinding(
                FindingKind.COMMIT_ELSEWHERE,
                position,
                tx_key,
                f"committed into {topic}:{queue_id}, the half says {real_topic}:{real_queue_id}",
            )
        )


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
