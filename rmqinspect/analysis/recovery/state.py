"""The restarting broker's in-memory state, and ``load()``'s file checks that build it.

:class:`BrokerState` holds what ``DefaultMessageStore`` holds during ``load()``/``start()``: the
mapped commitlog files with their write positions, the consume queues
(:class:`rmqinspect.store.consume_queue.ConsumeQueue`), the record checks it runs with, and what
the emulation noticed on the way. Nothing here writes to disk.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from rmqinspect.analysis import Progress
from rmqinspect.analysis.batch_units import inner_batch
from rmqinspect.analysis.recovery.report import LoadFailure
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.format.checkpoint import CHECKPOINT_FILE_SIZE, Checkpoint, decode_checkpoint
from rmqinspect.format.javamath import jmod
from rmqinspect.format.profile import Profile
from rmqinspect.format.scan import FileEvent, WalkPolicy, scan_file
from rmqinspect.store.batch_restart import BatchRestartQueue
from rmqinspect.store.consume_queue import ConsumeQueue
from rmqinspect.store.files import LayoutProblem, StoreFile
from rmqinspect.store.layout import QueueId, StorePart
from rmqinspect.store.model import Store
from rmqinspect.store.rocksdb_restart import RocksRestartQueue


@dataclass(frozen=True, slots=True)
class RecoverOptions:
    """Broker settings and emulation switches (defaults are the broker's defaults). The store
    settings (profile, file sizes, index geometry) are those the :class:`Store` was opened with."""

    last_exit_ok: bool | None = None  # None: from the abort file
    check_crc: bool = True  # checkCRCOnRecover
    message_index_enable: bool = True
    message_index_safe: bool = False
    force_verify_prop_crc: bool = False  # 5.2+
    lost_limit: int | None = 1000  # messages listed (the count is always complete)
    # Search the store for what the restart destroys (lost.py). Off when only the restarted
    # state is wanted (queue bounds, the rebuilt index): the report's loss fields are then None.
    find_lost: bool = True
    master: bool = True  # brokerId 0: the reput skips an unreadable region instead of stalling
    # Emulate the 5.x timer store's recovery too (recovery/timer.py: a second walk of the
    # commitlog, so only ``recover`` asks for it), the restart happening at ``now`` (epoch ms;
    # None: the store's newest store time).
    read_timer: bool = False
    now: int | None = None


class LoadFailed(Exception):
    """A step of ``load()`` throws: the broker refuses to start."""

    def __init__(self, failure: LoadFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class CommitlogFile:
    """A commitlog ``MappedFile``: the disk file and the in-memory write position."""

    __slots__ = ("disk", "start", "wrote")

    def __init__(self, disk: StoreFile, wrote: int) -> None:
        self.disk = disk
        self.start = disk.start
        self.wrote = wrote

    @property
    def name(self) -> str:
        return self.disk.name


@dataclass
class Ledger:
    """What ``DLedgerMmapFileStore`` holds after ``recover()`` (-1: none): RocketMQ's max offset
    is the committed position, not the data end, until an election commits the rest."""

    data_end: int  # processOffset: where the data files' write position is set
    begin_index: int = -1
    end_index: int = -1
    end_term: int = -1
    end_pos: int = -1  # position + size of the last entry (the committed position once all is)
    committed_index: int = -1
    committed_pos: int = -1

    def max_offset(self, committed_pos: int, first_file_start: int) -> int:
        """``DLedgerCommitLog.getMaxOffset`` for a committed position."""
        if committed_pos > 0:
            return committed_pos
        return first_file_start if first_file_start > 0 else 0


@dataclass
class QueueHistory:
    """What a report needs about a queue beyond its current state."""

    existed: bool  # a directory with files was loaded
    files_before: int
    deleted_at_load: list[str] = field(default_factory=list)  # 5.x zero-length last file
    max_offset_on_disk: int = 0  # bytes: ConsumeQueue.recover's end
    after_load: tuple[int, int, int] = (0, 0, -1)  # min, max (units), maxPhysicOffset


@dataclass
class BrokerState:
    store: Store
    options: RecoverOptions
    profile: Profile
    checks: RecordChecks
    progress: Progress
    commitlog: list[CommitlogFile] = field(default_factory=list)
    commitlog_deleted: list[str] = field(default_factory=list)  # by truncateDirtyFiles
    commitlog_deleted_at_load: list[str] = field(default_factory=list)  # 5.x zero-length
    queues: dict[QueueId, ConsumeQueue] = field(default_factory=dict)
    history: dict[QueueId, QueueHistory] = field(default_factory=dict)
    failures: list[LoadFailure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    logics_timestamp: int | None = None  # checkpoint logicsMsgTimestamp moved by dispatch
    first_dispatched: int | None = None
    ledger: Ledger | None = None  # DLedger's state after its recovery, in a DLedger store

    @property
    def commitlog_file_size(self) -> int:
        return self.store.commitlog.file_size

    @property
    def cq_file_size(self) -> int:
        return self.store.cq_file_size

    @property
    def commitlog_min_offset(self) -> int:
        """``CommitLog.getMinOffset``: -1 without files."""
        return self.commitlog[0].start if self.commitlog else -1

    @property
    def commitlog_max_offset(self) -> int:
        """``CommitLog.getMaxOffset``: the last file's start + write position (DLedger: the
        committed position after ``load()``)."""
        if self.ledger is not None:
            first = self.commitlog[0].start if self.commitlog else 0
            return self.ledger.max_offset(self.ledger.committed_pos, first)
        if not self.commitlog:
            return 0
        last = self.commitlog[-1]
        return last.start + last.wrote

    def scan_file(
        self,
        buf: memoryview,
        file_start: int,
        pos: int,
        options: cl.CheckOptions,
        data_end: int | None = None,
    ) -> Iterator[FileEvent]:
        """The one walk of a commitlog file from ``pos`` (DLedger: entry by entry), resyncing
        past damage on records that name their own position; ``data_end``: where the file's
        data ends (see :meth:`MappedFiles.data_end`)."""
        if self.store.dledger is not None:
            return dl.scan_data_file(
                buf, file_start, pos, options, policy=WalkPolicy.FORENSIC, data_end=data_end
            )
        return scan_file(
            buf, file_start, pos, options, policy=WalkPolicy.FORENSIC, data_end=data_end
        )

    def find_commitlog(self, offset: int) -> CommitlogFile | None:
        for f in self.commitlog:
            if f.start <= offset < f.start + self.commitlog_file_size:
                return f
        return None

    def queue(self, qid: QueueId) -> ConsumeQueue:
        """``findConsumeQueue``: an unknown queue is created empty; files appear with units."""
        q = self.queues.get(qid)
        if q is None:
            q = ConsumeQueue(self.store.maps, qid.topic, qid.queue_id, [], self.cq_file_size)
            self.queues[qid] = q
            self.history[qid] = QueueHistory(existed=False, files_before=0)
        return q

    def read_checkpoint(self) -> tuple[Checkpoint, bool]:
        """The checkpoint as ``StoreCheckpoint`` maps it (a missing file reads as zeros)."""
        raw = self.store.checkpoint_file()
        data = (raw.data if raw else b"").ljust(CHECKPOINT_FILE_SIZE, b"\0")
        return decode_checkpoint(data[:CHECKPOINT_FILE_SIZE]), raw is not None

    def truncate_commitlog(self, end: int) -> None:
        """``truncateDirtyFiles(E)`` on the commitlog (§10.7)."""
        kept: list[CommitlogFile] = []
        size = self.commitlog_file_size
        for f in self.commitlog:
            if f.start + size > end:
                if end >= f.start:
                    f.wrote = jmod(end, size)
                else:
                    self.commitlog_deleted.append(f.name)
                    continue
            kept.append(f)
        self.commitlog = kept


@dataclass(frozen=True, slots=True)
class RecordChecks:
    """The three ways the restarting broker (and the loss search) check records."""

    recover: cl.CheckOptions  # recoverNormally/Abnormally: checkCRCOnRecover, body read
    reput: cl.CheckOptions  # ReputMessageService: no CRC, body skipped
    intact: cl.CheckOptions  # rmqinspect's own "intact message" test: every check on

    @classmethod
    def of(cls, store: Store, options: RecoverOptions) -> RecordChecks:
        profile = store.profile.profile
        recover = store.check_options(check_crc=options.check_crc, read_body=True)
        return cls(
            recover=replace(
                recover,
                force_verify_prop_crc=options.force_verify_prop_crc,
                # 4.9 loads the delay table after recovery: recovery checks levels against none.
                delay_levels=recover.delay_levels
                if profile.delay_levels_loaded_before_recovery
                else (),
            ),
            reput=store.check_options(check_crc=False, read_body=False),
            intact=store.check_options(check_crc=True, read_body=True),
        )


def load(store: Store, options: RecoverOptions, progress: Progress) -> BrokerState:
    """``commitLog.load()`` and the consume queues' ``load()`` (§1.2): which files are mapped,
    and the problems that make ``MappedFileQueue.load`` fail (recorded in ``failures``; the
    files before the failing one stay mapped, as the broker leaves them)."""
    profile = store.profile.profile
    state = BrokerState(store, options, profile, RecordChecks.of(store, options), progress)
    deleted: set[str] = set()
    if store.dledger is not None:
        fails = _ledger_failures(store)
    else:
        fails, deleted = _layout_failures(profile, store.commitlog.problems)
    state.failures.extend(fails)
    files = sorted(store.commitlog.files, key=lambda f: f.name)
    state.commitlog_deleted_at_load = [f.name for f in files if str(f.path) in deleted]
    failing = {f.path for f in fails}
    for f in files:
        if str(f.path) in failing:
            break  # MappedFileQueue.load stops here
        if str(f.path) not in deleted:
            state.commitlog.append(CommitlogFile(f, state.commitlog_file_size))
    if state.failures:
        return state
    store.read_rocksdb_queues()  # the one reader of a RocksDB consume queue (StoreError: not one)
    for qid in store.queue_dirs:
        if store.rocksdb is not None and store.rocksdb_queue(qid):
            rq = RocksRestartQueue(
                store.maps, store.rocksdb, store.rocksdb.queues[qid], state.cq_file_size
            )
            state.queues[qid] = rq
            state.history[qid] = QueueHistory(existed=rq.existed, files_before=0)
            continue
        bq = store.batch_queue(qid)
        if bq is not None:
            state.queues[qid] = BatchRestartQueue(
                store.maps, bq, state.cq_file_size, functools.partial(inner_batch, store)
            )
            files = bq.files.files
            state.history[qid] = QueueHistory(existed=bool(files), files_before=len(files))
            continue
        fq = store.consume_queue_files(qid.topic, qid.queue_id)
        fails, deleted = _layout_failures(profile, fq.problems)
        state.failures.extend(fails)
        ordered = sorted(fq.files, key=lambda f: f.name)
        kept = [f for f in ordered if str(f.path) not in deleted]
        state.queues[qid] = ConsumeQueue(
            store.maps, qid.topic, qid.queue_id, kept, state.cq_file_size
        )
        state.history[qid] = QueueHistory(
            existed=bool(kept),
            files_before=len(kept),
            deleted_at_load=[f.name for f in ordered if str(f.path) in deleted],
        )
    for start, end in store.commitlog.gaps():
        state.warnings.append(f"commitlog files are missing between offsets {start} and {end}")
    for u in store.unsupported:
        if u.takes_over & StorePart.RESTART:  # a layout the emulation does not read
            state.warnings.append(f"{u.note} ({u.path}); the emulation ignores it")
    return state


def _ledger_failures(store: Store) -> list[LoadFailure]:
    """DLedger's ``MmapFileList.load`` accepts only files of exactly the configured size (a
    directory, an empty file, a name that is no offset: ``System.exit``), and its
    ``checkSelf`` rejects a gap between files (recovery throws, ``load()`` fails)."""
    ledger = store.dledger
    assert ledger is not None
    fails = [
        LoadFailure("dledger_exit", p.path, f"{p.message}: DLedger's load() calls System.exit")
        for p in ledger.problems
        if p.broker_fails_to_load or p.kind == "directory_entry"
    ]
    for family in (ledger.data, ledger.index):
        for start, end in family.gaps():
            fails.append(
                LoadFailure(
                    "exception",
                    str(family.directory),
                    f"files are missing between offsets {start} and {end}: DLedger's checkSelf "
                    "fails, recovery throws and load() returns false",
                )
            )
    return fails


def _layout_failures(
    profile: Profile, problems: list[LayoutProblem]
) -> tuple[list[LoadFailure], set[str]]:
    """Problems that make ``MappedFileQueue.load`` fail under ``profile``, and the paths of
    zero-length last files that 5.x deletes instead."""
    fails: list[LoadFailure] = []
    deleted: set[str] = set()
    for p in problems:
        if p.kind == "zero_length" and profile.deletes_zero_length_last_file:
            deleted.add(p.path)
        elif p.kind == "directory_entry":
            if not profile.skips_directories_in_file_lists:
                fails.append(
                    LoadFailure(
                        p.kind,
                        p.path,
                        "a directory among the files: its length differs from the file size "
                        "(4.9 fails)",
                    )
                )
        elif p.broker_fails_to_load:
            fails.append(LoadFailure(p.kind, p.path, p.message))
    return fails, deleted
