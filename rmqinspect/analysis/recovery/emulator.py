"""The restart as the broker runs it: ``DefaultMessageStore.load()`` then ``start()``, one named
step per broker step (rocketmq-store-format.md §10.1), each returning its own part of the report.

1. :func:`decide_last_exit`: ``lastExitOK`` from the abort file (or the user's assumption);
2. :func:`rmqinspect.analysis.recovery.state.load`: the file checks of ``MappedFileQueue.load``;
3. :func:`rmqinspect.analysis.recovery.index_service.load_index`: ``IndexService.load``;
4. :func:`recover_consume_queues`: ``ConsumeQueue.recover`` per queue → maxPhyOffsetOfCQ (a
   RocksDB consume queue: its dispatch checkpoint, :mod:`rmqinspect.analysis.recovery.rocksdb`);
5. :func:`recover_commitlog`: ``recoverNormally``/``recoverAbnormally`` with the profile's
   start-file rule, the scan loop and its dispatch, ``truncateDirtyFiles`` and
   ``truncateDirtyLogicFiles``; in a DLedger store :func:`recover_dledger_commitlog`, DLedger's
   own recovery (:mod:`rmqinspect.analysis.recovery.dledger`) whatever the abort file says;
6. :func:`recover_topic_queue_table`: ``correctMinOffset`` per queue;
7. :func:`start`: the reput service (over DLedger entries in a DLedger store), and 4.9's
   second ``recoverTopicQueueTable``;
8. the loss search (:mod:`rmqinspect.analysis.recovery.lost`; skipped without
   ``RecoverOptions.find_lost``) and the report sections.

Nothing is written to the store; consume-queue writes land in in-memory overlays, index files in
an optional output directory.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from rmqinspect.analysis import Progress
from rmqinspect.analysis.recovery.commitlog import (
    ScanOutcome,
    abnormal_start,
    normal_start,
    scan,
    scan_wanted,
)
from rmqinspect.analysis.recovery.dispatch import Dispatcher, reput
from rmqinspect.analysis.recovery.dledger import (
    LedgerRecovery,
    last_record,
    ledger_report,
    ledger_reput,
    recover_ledger,
)
from rmqinspect.analysis.recovery.fields import Wanted
from rmqinspect.analysis.recovery.index_service import (
    IndexService,
    IndexSink,
    index_report,
    load_index,
)
from rmqinspect.analysis.recovery.lost import Unserved, lost_messages, served_check
from rmqinspect.analysis.recovery.outcome import RecoveryOutcome, queues_after
from rmqinspect.analysis.recovery.ranges import RangeChecker
from rmqinspect.analysis.recovery.report import (
    SCHEMA_VERSION,
    CheckpointReport,
    CommitlogReport,
    FilePosition,
    LoadFailure,
    LostReport,
    QueueReport,
    RecoveryPath,
    RecoveryReport,
    ReputReport,
    StartFile,
)
from rmqinspect.analysis.recovery.rocksdb import (
    rocksdb_abnormal_start,
    rocksdb_checkpoint,
    truncates_logics,
)
from rmqinspect.analysis.recovery.state import BrokerState, RecoverOptions, load
from rmqinspect.analysis.recovery.timer import recover_timer_store
from rmqinspect.format.checkpoint import CHECKPOINT_FILE_SIZE, Checkpoint
from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE
from rmqinspect.format.javamath import jdiv
from rmqinspect.format.profile import Profile
from rmqinspect.store.consume_queue import CorrectMinOffsetError
from rmqinspect.store.files import StoreFile
from rmqinspect.store.layout import QueueId, is_plain_name
from rmqinspect.store.model import Store


def run_recovery(
    store: Store,
    options: RecoverOptions | None = None,
    progress: Progress | None = None,
    index_sink: IndexSink | None = None,
    checker: RangeChecker | None = None,
) -> RecoveryOutcome:
    """Emulate the restart of ``store``; the store is only read.

    ``index_sink`` receives, byte for byte, every index file the restart writes (new ones named
    by the current wall clock, as the broker would), for ``--apply-to`` and ``--as-recovered``.
    ``checker``: worker processes that check the commitlog scan's records (``--jobs``).
    """
    opts = options or RecoverOptions()
    last_ok, source = decide_last_exit(store, opts)
    state = load(store, opts, progress or (lambda _n: None))
    if state.failures:
        return _refused(state, last_ok, source)
    cp, cp_present = state.read_checkpoint()
    loaded = load_index(store, last_ok, cp, state.warnings)
    index = IndexService(store, loaded, index_sink)
    dispatcher = Dispatcher(state, index)
    max_phy_cq = recover_consume_queues(state)
    ledger: LedgerRecovery | None = None
    if store.dledger is not None:
        recovered, ledger = recover_dledger_commitlog(state, max_phy_cq)
        if state.failures:
            return _refused(state, last_ok, source)
    else:
        recovered = recover_commitlog(state, dispatcher, last_ok, max_phy_cq, cp, checker)
    failure = recover_topic_queue_table(state)
    for qid, q in state.queues.items():
        state.history[qid].after_load = (
            q.min_offset_in_queue,
            q.max_offset_in_queue,
            q.max_physic,
        )
    reput_report = start(state, dispatcher) if failure is None else None
    index.finish()
    state.warnings.extend(
        f"the restart dispatches into consume queue {qid}, whose topic is no plain file name: "
        "the broker joins it into the queue's path as it is, which leaves consumequeue/ (or "
        "fails)"
        for qid, q in state.queues.items()
        if q.files and not is_plain_name(qid.topic)
    )
    if failure is not None:
        state.failures.append(failure)
    lost: LostReport | None = None
    data_bytes: int | None = None
    unserved: Unserved | None = None
    if opts.find_lost:
        queue_max = {qid: q.max_offset_in_queue for qid, q in state.queues.items()}
        end, deleted_disks = recovered.scan.end, recovered.deleted_disks
        # DLedger cuts at an entry header, not at a record: no record there to call damaged.
        cut_at = recovered.scan.first_bad if state.ledger is None else None
        lost, data_bytes, unserved = lost_messages(
            state, end, deleted_disks, queue_max, cut_at, checker
        )
    confirm = _confirm_offset(state, recovered)
    queues = [
        _queue_report(state, unserved, qid)
        for qid, q in state.queues.items()
        if state.history[qid].existed or q.files or q.counters.deleted
    ]
    checkpoint, checkpoint_after = _checkpoint_report(state, cp, cp_present, index, confirm)
    report = RecoveryReport(
        **_identity(state, last_ok, source),
        broker_starts=failure is None,
        start_file=recovered.start_file,
        max_phy_offset_of_consume_queue=max_phy_cq,
        cq_truncation=recovered.cq_truncation,
        commitlog=_commitlog_report(state, recovered, data_bytes, confirm),
        consume_queues=queues,
        index=index_report(loaded, index, recovered.scan.end, last_ok, cp),
        reput=reput_report,
        checkpoint=checkpoint,
        lost_messages=lost,
        unreachable_messages=None if unserved is None else sum(unserved.per_queue.values()),
        queues_without_consume_queue=None
        if unserved is None
        else [str(q) for q in unserved.queues_without_consume_queue],
        warnings=state.warnings,
        dledger=None
        if ledger is None
        else ledger_report(
            state,
            ledger,
            recovered.files_before,
            None if unserved is None else unserved.kept_damage,
        ),
    )
    if opts.read_timer:
        _recover_timer(store, report, opts.now)
    return RecoveryOutcome(
        report,
        state.commitlog_deleted + state.commitlog_deleted_at_load,
        queues_after(state),
        loaded.deleted,
        index.written,
        checkpoint_after,
        None if failure is not None else served_check(state).serving_state(state.checks.reput),
    )


def _recover_timer(store: Store, report: RecoveryReport, now: int | None) -> None:
    """The timer store's recovery, which ``BrokerController`` runs after the message store's
    load (``TimerMessageStore.load``): a timer file it refuses stops the broker too."""
    end = report.end_after_start if report.broker_starts else None
    section = recover_timer_store(store, end, report.consume_queues, now)
    report.timer = section
    if section is not None and section.load_failures:
        report.load_failures.extend(section.load_failures)
        report.broker_starts = False


@dataclass(frozen=True, slots=True)
class ScanPlan:
    """Where the commitlog's recovery scan starts, and what its dispatch can ask of the
    records (None: it dispatches none)."""

    start: StartFile
    wanted: Wanted | None


def scan_plan(store: Store, options: RecoverOptions | None = None) -> ScanPlan | None:
    """The file the commitlog's recovery scan starts at and what its dispatch wants, found as
    :func:`run_recovery` finds them (``load()``, the index's load, ``ConsumeQueue.recover``,
    the start-file rule) without the scan: work that grows with the files and queues, not with
    the commitlog's bytes. None where no plain commitlog scan runs (``load()`` fails, no
    files, DLedger)."""
    opts = options or RecoverOptions()
    last_ok, _ = decide_last_exit(store, opts)
    state = load(store, opts, lambda _n: None)
    if state.failures or store.dledger is not None or not state.commitlog:
        return None
    cp = state.read_checkpoint()[0]
    index = IndexService(store, load_index(store, last_ok, cp, state.warnings), None)
    dispatcher = Dispatcher(state, index)
    max_phy_cq = recover_consume_queues(state)
    start_file, dispatch, above = _scan_from(state, last_ok, max_phy_cq, cp)
    return ScanPlan(start_file, scan_wanted(dispatcher, dispatch, above))


def analyze_recovery(
    store: Store,
    options: RecoverOptions | None = None,
    progress: Progress | None = None,
    checker: RangeChecker | None = None,
) -> RecoveryReport:
    """The recovery report for ``store`` (see :func:`run_recovery`)."""
    return run_recovery(store, options, progress, checker=checker).report


# --- the steps ---------------------------------------------------------------------------------


def decide_last_exit(store: Store, options: RecoverOptions) -> tuple[bool, str]:
    """``lastExitOK = !exists(abort)``, unless the user assumes a clean or crashed exit."""
    if options.last_exit_ok is None:
        return not store.abort_present, "abort_file"
    return options.last_exit_ok, "assume_clean" if options.last_exit_ok else "assume_crash"


def crash_start(state: BrokerState, cp: Checkpoint, max_phy_cq: int) -> StartFile:
    """Where ``recoverAbnormally`` starts: by the checkpoint's times, or with RocksDB consume
    queues by their dispatch checkpoint (analysis/recovery/rocksdb.py)."""
    if rocksdb_checkpoint(state) is None:
        return abnormal_start(state, cp)
    return rocksdb_abnormal_start(state, max_phy_cq)


def recover_consume_queues(state: BrokerState) -> int:
    """``ConsumeQueue.recover`` for every queue; returns maxPhyOffsetOfConsumeQueue (-1 when
    there are no queues)."""
    for qid, q in state.queues.items():
        q.recover()
        state.history[qid].max_offset_on_disk = q.max_offset
    checkpoint = rocksdb_checkpoint(state)
    if checkpoint is not None:
        return checkpoint
    return max((q.max_physic for q in state.queues.values()), default=-1)


@dataclass(frozen=True, slots=True)
class CommitlogRecovery:
    start_file: StartFile | None
    scan: ScanOutcome
    files_before: list[str]
    deleted_disks: list[StoreFile]
    cq_truncation: bool


def recover_commitlog(
    state: BrokerState,
    dispatcher: Dispatcher,
    last_exit_ok: bool,
    max_phy_cq: int,
    cp: Checkpoint,
    checker: RangeChecker | None = None,
) -> CommitlogRecovery:
    """``recoverNormally`` or ``recoverAbnormally`` (§10.5-10.6), then the truncations."""
    files_before = [f.name for f in state.commitlog]
    if not state.commitlog:
        # destroyLogics / queue store re-initialisation: every consume queue goes.
        for q in state.queues.values():
            q.destroy()
        return CommitlogRecovery(
            None, ScanOutcome(0, "no_files", None, None, 0), files_before, [], False
        )
    start_file, dispatch, above = _scan_from(state, last_exit_ok, max_phy_cq, cp)
    outcome = scan(state, start_file, dispatcher, dispatch, above, checker)
    disks = {f.name: f.disk for f in state.commitlog}
    state.truncate_commitlog(outcome.end)
    deleted = [disks[name] for name in state.commitlog_deleted]
    truncate_logics = truncates_logics(state, max_phy_cq, outcome.end)
    if truncate_logics:
        for q in state.queues.values():
            q.truncate_dirty_logic(outcome.end)
    return CommitlogRecovery(start_file, outcome, files_before, deleted, truncate_logics)


def _scan_from(
    state: BrokerState, last_exit_ok: bool, max_phy_cq: int, cp: Checkpoint
) -> tuple[StartFile, bool, int | None]:
    """Where ``recoverNormally`` or ``recoverAbnormally`` starts its scan, whether the scan
    dispatches, and above which offset (None: every record)."""
    if last_exit_ok:
        dispatch = state.profile.normal_recovery_starts_at_cq_max
        return normal_start(state, max_phy_cq), dispatch, max_phy_cq
    return crash_start(state, cp, max_phy_cq), True, None


def recover_dledger_commitlog(
    state: BrokerState, max_phy_cq: int
) -> tuple[CommitlogRecovery, LedgerRecovery]:
    """``DLedgerCommitLog.recover`` (dledger-store-format.md §8), the same after a clean
    shutdown or a crash: DLedger's recovery, then ``truncateDirtyLogicFiles`` at the data end
    when the consume queues reach it; nothing is dispatched."""
    files_before = [f.name for f in state.commitlog]
    disks = {f.name: f.disk for f in state.commitlog}
    if state.profile is not Profile.V4_9:
        state.warnings.append(
            f"DLedger on {state.profile}: the 4.9.8 + DLedger 0.3.1.2 restart rules are applied "
            "(not checked against a 5.x broker)"
        )
    ledger = recover_ledger(state)
    if not files_before:
        # No data files: the (empty) old commitlog is recovered plainly, which destroys the
        # consume queues.
        for q in state.queues.values():
            q.destroy()
    assert state.ledger is not None
    end = state.ledger.data_end
    truncate_logics = bool(files_before) and max_phy_cq >= end
    if truncate_logics:
        for q in state.queues.values():
            q.truncate_dirty_logic(end)
    outcome = ScanOutcome(
        end,
        ledger.end_reason,
        last_record(state, ledger.last_entry),
        ledger.first_bad,
        ledger.scanned_bytes,
    )
    deleted = [disks[name] for name in state.commitlog_deleted]
    return (
        CommitlogRecovery(ledger.start_file, outcome, files_before, deleted, truncate_logics),
        ledger,
    )


def recover_topic_queue_table(state: BrokerState) -> LoadFailure | None:
    """``recoverTopicQueueTable``: ``correctMinOffset(commitLog.minOffset)`` per queue; a 5.x
    throw fails ``load()``."""
    min_phy = state.commitlog_min_offset
    binary = state.profile.correct_min_offset_binary_search
    for qid, q in state.queues.items():
        try:
            q.correct_min_offset(min_phy, binary)
        except CorrectMinOffsetError as err:
            path = qid.shown_under(state.store.root)
            return LoadFailure("exception", str(path), str(err))
    return None


def start(state: BrokerState, dispatcher: Dispatcher) -> ReputReport:
    """``start()``: the reput service from the profile's start offset until it catches up, then
    (4.9) ``recoverTopicQueueTable`` again."""
    min_offset = state.commitlog_min_offset
    if state.profile.tracks_confirm_offset and state.ledger is None:
        reput_from = state.commitlog_max_offset
    else:
        reput_from = max(
            [min_offset, 0, *(q.max_physic for q in state.queues.values())],
        )
    if state.ledger is not None:
        report = ledger_reput(state, dispatcher, reput_from)
    else:
        report = reput(state, dispatcher, reput_from)
    if state.profile.recovers_topic_queue_table_after_reput:
        recover_topic_queue_table(state)
    return report


# --- report sections ---------------------------------------------------------------------------


def _identity(state: BrokerState, last_ok: bool, source: str) -> dict[str, Any]:
    """The report fields that describe the store and the run, whatever the restart does."""
    store = state.store
    return {
        "schema_version": SCHEMA_VERSION,
        "store": str(store.root),
        "profile": state.profile.value,
        "profile_reasons": list(store.profile.reasons),
        "options": _options_dict(state),
        "load_failures": state.failures,
        "abort_present": store.abort_present,
        "last_exit_ok": last_ok,
        "last_exit_source": source,
        "recovery_path": (RecoveryPath.NORMAL if last_ok else RecoveryPath.ABNORMAL).value,
    }


def _refused(state: BrokerState, last_ok: bool, source: str) -> RecoveryOutcome:
    """``load()`` returned false before recovery: the verdict and why, the path lastExitOK had
    chosen, and no end state (the broker never reaches one)."""
    store = state.store
    report = RecoveryReport(
        **_identity(state, last_ok, source),
        broker_starts=False,
        start_file=None,
        max_phy_offset_of_consume_queue=None,
        cq_truncation=False,
        commitlog=CommitlogReport(
            file_size=state.commitlog_file_size,
            files_before=sorted(f.name for f in store.commitlog.files),
            min_offset=None,
            max_offset=None,
            scan_start_offset=None,
            scanned_bytes=0,
            end_reason="load_failed",
            last_valid_record=None,
            first_bad_record=None,
            discarded_bytes=None,
            deleted_files=[],
            deleted_at_load=[],
            last_file=None,
            files_after=None,
            confirm_offset=None,
        ),
        consume_queues=[],
        index=None,
        reput=None,
        checkpoint=None,
        lost_messages=LostReport(0, 0, False, 0, []),
        unreachable_messages=0,
        queues_without_consume_queue=[],
        warnings=state.warnings,
    )
    return RecoveryOutcome(report, [], [], [], [], None)


def _confirm_offset(state: BrokerState, recovered: CommitlogRecovery) -> int | None:
    """5.x: the confirm offset recovery sets, the start of the last valid record (or of the
    first scanned file when none was valid)."""
    if not state.profile.tracks_confirm_offset or state.ledger is not None:
        return None
    if recovered.scan.last_valid is not None:
        return recovered.scan.last_valid.physical_offset
    return recovered.start_file.offset if recovered.start_file is not None else None


def _commitlog_report(
    state: BrokerState, recovered: CommitlogRecovery, data_bytes: int | None, confirm: int | None
) -> CommitlogReport:
    outcome = recovered.scan
    last_file = state.commitlog[-1] if state.commitlog else None
    before = recovered.files_before or sorted(f.name for f in state.store.commitlog.files)
    start = recovered.start_file
    return CommitlogReport(
        file_size=state.commitlog_file_size,
        files_before=sorted(set(before) | set(state.commitlog_deleted_at_load)),
        min_offset=state.commitlog_min_offset,
        max_offset=state.commitlog_max_offset,
        scan_start_offset=start.offset if start is not None else None,
        scanned_bytes=outcome.scanned_bytes,
        end_reason=outcome.reason,
        last_valid_record=outcome.last_valid,
        first_bad_record=outcome.first_bad,
        discarded_bytes=data_bytes,
        deleted_files=list(state.commitlog_deleted),
        deleted_at_load=state.commitlog_deleted_at_load,
        last_file=FilePosition(last_file.name, last_file.wrote) if last_file else None,
        files_after=[FilePosition(f.name, f.wrote) for f in state.commitlog],
        confirm_offset=confirm,
    )


def _queue_report(state: BrokerState, unserved: Unserved | None, qid: QueueId) -> QueueReport:
    q = state.queues[qid]
    h = state.history[qid]
    min_load, max_load, phys_load = h.after_load
    c = q.counters
    return QueueReport(
        topic=qid.topic,
        queue_id=qid.queue_id,
        existed=h.existed,
        files_before=h.files_before,
        max_offset_on_disk=jdiv(h.max_offset_on_disk, CQ_STORE_UNIT_SIZE),
        min_offset_after_load=min_load,
        max_offset_after_load=max_load,
        max_physic_offset_after_load=phys_load,
        min_offset_after_start=q.min_offset_in_queue,
        max_offset_after_dispatch=q.max_offset_in_queue,
        units_dropped_by_cq_recover=c.dropped_by_recover,
        units_truncated=c.truncated,
        units_written_at_load=c.written.get("load", 0),
        units_written_after_start=c.written.get("start", 0),
        pre_blank_units=c.pre_blank,
        misplaced_units=c.misplaced,
        unreachable_after_start=None if unserved is None else unserved.per_queue.get(qid, 0),
        files_deleted=h.deleted_at_load + c.deleted,
        files_created=list(c.created),
    )


def _checkpoint_report(
    state: BrokerState,
    cp: Checkpoint,
    present: bool,
    index: IndexService,
    confirm: int | None,
) -> tuple[CheckpointReport, bytes]:
    """The checkpoint now, and what the shutdown after the restart persists (§8)."""
    logics = state.logics_timestamp
    if logics is None:
        logics = cp.logics_msg_timestamp
    index_ts = index.index_msg_timestamp
    if index_ts is None:
        index_ts = cp.index_msg_timestamp
    five = state.profile.checkpoint_has_confirm_offset
    physic = cp.physic_msg_timestamp
    if state.ledger is not None and state.logics_timestamp is not None:
        physic = state.logics_timestamp  # DLedger: the consume-queue dispatch sets it too
    after = {
        "physic_msg_timestamp": physic,
        "logics_msg_timestamp": logics,
        "index_msg_timestamp": index_ts,
    }
    on_disk = state.store.checkpoint_file()
    raw = bytearray((on_disk.data if on_disk else b"").ljust(CHECKPOINT_FILE_SIZE, b"\0"))
    struct.pack_into(">qqq", raw, 0, physic, logics, index_ts)
    if five:
        confirm_after = confirm if confirm is not None else cp.confirm_phy_offset
        after["master_flushed_offset"] = cp.master_flushed_offset
        after["confirm_phy_offset"] = confirm_after
        struct.pack_into(">qq", raw, 24, cp.master_flushed_offset, confirm_after)
    report = CheckpointReport(
        present=present,
        physic_msg_timestamp=cp.physic_msg_timestamp,
        logics_msg_timestamp=cp.logics_msg_timestamp,
        index_msg_timestamp=cp.index_msg_timestamp,
        min_timestamp=cp.min_timestamp(),
        min_timestamp_index=cp.min_timestamp_index(),
        confirm_phy_offset=cp.confirm_phy_offset if five else None,
        after_shutdown=after,
    )
    return report, bytes(raw[:CHECKPOINT_FILE_SIZE])


def _options_dict(state: BrokerState) -> dict[str, object]:
    o = state.options
    return {
        "check_crc_on_recover": o.check_crc,
        "message_index_enable": o.message_index_enable,
        "message_index_safe": o.message_index_safe,
        "force_verify_prop_crc": o.force_verify_prop_crc,
        "message_delay_level": state.store.message_delay_level,
        "commitlog_file_size": state.commitlog_file_size,
        "cq_file_size": state.cq_file_size,
        "lost_limit": o.lost_limit,
        "broker_is_master": o.master,
    }
