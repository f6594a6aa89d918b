"""What ``recover`` reports: one dataclass per section, the JSON schema (``schema_version`` 1).

Each step of the emulation (:mod:`rmqinspect.analysis.recovery.emulator`) returns its own
section; :class:`RecoveryReport` assembles them. Field order is the JSON order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmqinspect.analysis.recovery.timer import TimerRecoveryReport

SCHEMA_VERSION = 1
_WHERE = {
    "past_end": "past the recovered end",
    "deleted_file": "in commitlog files the restart deletes",
    "no_queue_unit": "left without a consume-queue unit",
}


class RecoveryPath(StrEnum):
    NORMAL = "normal"
    ABNORMAL = "abnormal"


# --- report ------------------------------------------------------------------------------------


@dataclass
class LoadFailure:
    """Why ``DefaultMessageStore.load()`` returns false (the broker then refuses to start)."""

    kind: str  # stable id: wrong_size, zero_length, bad_name, directory_entry, exception
    path: str
    message: str


@dataclass
class StartCandidate:
    """A commitlog file the abnormal path examined (newest first) to pick its start file."""

    name: str
    first_store_timestamp: int | None
    matched: bool
    note: str


@dataclass
class StartFile:
    name: str
    offset: int
    index: int  # position in the commitlog file list
    rule: str  # third_from_last | newest_covered_by_cq | checkpoint_timestamp | first_file
    reason: str
    candidates: list[StartCandidate] = field(default_factory=list)


@dataclass
class RecordInfo:
    physical_offset: int
    store_size: int
    file: str  # relative to the store
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int


@dataclass
class BadRecord:
    physical_offset: int
    file: str  # relative to the store
    file_position: int
    reason: str  # cl.CheckReason value
    detail: str
    store_size: int | None
    magic: str | None


@dataclass
class FilePosition:
    name: str
    wrote_position: int


@dataclass
class CommitlogReport:
    """The commitlog after recovery. When the broker refuses to start there is no such state:
    the offsets, the kept files and the discarded bytes are None."""

    file_size: int
    files_before: list[str]
    min_offset: int | None  # getMinOffset after load: -1 without files
    max_offset: int | None  # the recovered end E (getMaxOffset)
    scan_start_offset: int | None
    scanned_bytes: int
    end_reason: str  # bad_record | blank_in_last_file | no_files | load_failed
    last_valid_record: RecordInfo | None
    first_bad_record: BadRecord | None
    discarded_bytes: int | None  # data (non-zero) bytes past E the broker ignores/deletes (None:
    # no end state, or the loss search was not run)
    deleted_files: list[str]
    deleted_at_load: list[str]  # 5.x: a zero-length last file is deleted by load()
    last_file: FilePosition | None
    files_after: list[FilePosition] | None  # every file kept, with its write position
    confirm_offset: int | None  # 5.x: start of the last valid record (checkpoint byte 32)


@dataclass
class QueueReport:
    topic: str
    queue_id: int
    existed: bool  # a directory with files was loaded
    files_before: int
    max_offset_on_disk: int  # ConsumeQueue.recover's end, before commitlog recovery
    min_offset_after_load: int
    max_offset_after_load: int
    max_physic_offset_after_load: int
    min_offset_after_start: int
    max_offset_after_dispatch: int
    units_dropped_by_cq_recover: int  # valid units in files ConsumeQueue.recover deleted
    units_truncated: int  # units removed by truncateDirtyLogicFiles
    units_written_at_load: int  # written by the dispatch inside recovery
    units_written_after_start: int  # written by the reput service
    pre_blank_units: int  # fillPreBlank placeholders written
    misplaced_units: int  # appended at a position other than their queue offset
    unreachable_after_start: int | None  # intact messages no unit serves (None: not searched)
    files_deleted: list[str]
    files_created: list[str]

    @property
    def changed_by_restart(self) -> bool:
        """Units or files the restart removes or writes (offsets aside)."""
        return bool(
            self.units_truncated
            or self.units_dropped_by_cq_recover
            or self.units_written_at_load
            or self.units_written_after_start
            or self.files_deleted
            or self.files_created
        )


@dataclass
class IndexFileInfo:
    name: str
    begin_phy_offset: int
    end_phy_offset: int
    begin_timestamp: int
    end_timestamp: int
    index_count: int


@dataclass
class OffsetRange:
    """Records whose start offset lies in ``[first_offset, last_offset]`` (both inclusive)."""

    first_offset: int
    last_offset: int
    reason: str


@dataclass
class IndexReport:
    geometry: dict[str, int]
    geometry_source: str
    files_before: list[str]
    deleted_files: list[str]
    deleted_reason: str
    files_created: int  # new files are named by the wall clock: only the count is predictable
    files_continued: list[str]  # kept files the dispatch appends to
    entries_written: int
    new_files: list[IndexFileInfo]  # headers of the created files (names are placeholders)
    unfindable_ranges: list[OffsetRange]  # deleted entries the dispatch does not rebuild
    stale_ranges: list[OffsetRange]  # kept entries that point past the recovered end


@dataclass
class ReputReport:
    start_offset: int
    end_offset: int
    rule: str
    dispatched_records: int
    skipped_records: int  # length-mismatch records skipped without dispatch
    stop_offset: int | None  # where an unreadable record stopped a round
    stop_reason: str | None


@dataclass
class LostMessage:
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_size: int
    msg_id: str
    uniq_key: str | None
    keys: list[str]
    tags: str | None
    store_timestamp: int
    transaction: str
    file: str  # relative to the store
    where: str  # past_end (in the cut file), deleted_file, or no_queue_unit (kept, unserved)


@dataclass
class LostReport:
    count: int
    listed: int
    truncated: bool
    # Records past E that are not intact: message-like records that fail the check (torn,
    # corrupt), the record the recovery cut at, and (forceVerifyPropCRC) a wrong __CRC32#.
    damaged_records: int
    messages: list[LostMessage]
    by_where: dict[str, int] = field(default_factory=dict)  # count per ``where``
    damaged: list[BadRecord] = field(default_factory=list)  # the first ``lost_limit``, with why


@dataclass
class CheckpointReport:
    present: bool
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    min_timestamp: int
    min_timestamp_index: int
    confirm_phy_offset: int | None
    after_shutdown: dict[str, int]  # what a clean shutdown after the restart persists


@dataclass
class EntryInfo:
    """A DLedger entry: its index, term, position in the data space and size (header + body)."""

    index: int
    term: int
    position: int
    size: int


@dataclass
class LedgerState:
    """The DLedger node as RocketMQ sees it at one moment (after ``load()``, after ``start()``)."""

    role: str  # CANDIDATE until an election ran, then LEADER
    leader_id: str | None
    current_term: int | None
    ledger_begin_index: int
    ledger_end_index: int
    ledger_end_term: int
    committed_index: int  # -1: none
    committed_pos: int  # -1: none
    max_offset: int  # DLedgerCommitLog.getMaxOffset: committedPos when > 0


@dataclass
class TextFileReport:
    """``checkpoint`` or ``currterm`` of the DLedger home, as read."""

    present: bool
    lines: list[str]
    values: dict[str, str]
    bak_present: bool
    tmp_present: bool  # an interrupted write left it


@dataclass
class DLedgerReport:
    """DLedger's own recovery (dledger-store-format.md §7) and what RocketMQ builds on it (§8)."""

    home: str
    self_id: str
    data_file_size: int
    data_files_before: list[str]
    index_files_before: list[str]
    start_entry_index: int  # the first entry of the start file (-1 when no file passed)
    scanned_bytes: int
    end_reason: str  # blank_in_last_file | end_of_data | a header reason | no_files
    first_bad_entry: BadRecord | None  # the header the scan stopped at (not for end_of_data)
    last_entry: EntryInfo | None
    data_end: int  # the data write position after recovery (processOffset)
    index_end: int  # (ledgerEndIndex + 1) * 32
    index_rebuilt_from: int | None  # first entry whose index unit disagreed: rewritten from it
    index_rebuilt_position: int | None  # that entry's position
    index_units_rewritten: int
    data_files_deleted: list[str]
    index_files_deleted: list[str]
    data_files_after: list[FilePosition]
    index_files_after: list[FilePosition]
    checkpoint: TextFileReport
    currterm: TextFileReport
    committed_index_source: str  # how the committed index after load was found
    after_load: LedgerState
    after_start: LedgerState
    undispatched_at_load: int  # bytes between the max offset after load and after start
    # Kept entries whose record the reput cannot read (or bad bytes between entries DLedger
    # never scanned): DLedger keeps and serves them as they are. None: not searched (find_lost).
    kept_damage: list[BadRecord] | None
    assumption: str  # what after_start takes for granted
    checkpoint_after_shutdown: dict[str, int]  # committedIndex and endIndex persisted


@dataclass
class RecoveryReport:
    schema_version: int
    store: str
    profile: str
    profile_reasons: list[str]
    options: dict[str, object]
    broker_starts: bool
    load_failures: list[LoadFailure]
    abort_present: bool
    last_exit_ok: bool
    last_exit_source: str  # abort_file | assume_clean | assume_crash
    recovery_path: str | None
    start_file: StartFile | None
    max_phy_offset_of_consume_queue: int | None
    cq_truncation: bool  # truncateDirtyLogicFiles ran (maxPhyCQ >= E)
    commitlog: CommitlogReport | None
    consume_queues: list[QueueReport]
    index: IndexReport | None
    reput: ReputReport | None
    checkpoint: CheckpointReport | None
    # The loss search's findings; None when it was not run (RecoverOptions.find_lost).
    lost_messages: LostReport | None
    unreachable_messages: int | None  # intact messages below E no consume-queue unit serves
    queues_without_consume_queue: list[str] | None  # queues with records but none exists
    warnings: list[str]
    dledger: DLedgerReport | None = None  # set for a DLedger commitlog
    # The 5.x timer store after the restart (RecoverOptions.read_timer and a timer store).
    timer: TimerRecoveryReport | None = None

    @property
    def loses_data(self) -> bool | None:
        """Exit-code rule: the restart destroys messages: intact ones it can no longer serve
        (past the end, in deleted files, or without a consume-queue unit), or damaged records
        past the end. None when the loss search was not run."""
        lost = self.lost_messages
        return None if lost is None else bool(lost.count or lost.damaged_records)

    @property
    def end_after_start(self) -> int | None:
        """Where the commitlog the restarted broker serves ends (None: it does not start):
        the recovered end; in a DLedger store the last kept entry's end, which the committed
        position reaches once the node is leader again (after ``load()`` the max offset is
        only the committed position, ``commitlog.max_offset``)."""
        if self.dledger is not None:
            return self.dledger.after_start.max_offset
        return self.commitlog.max_offset if self.commitlog is not None else None

    @property
    def verdict(self) -> str:
        """refuses_to_start, loses_data, no_loss or loss_not_computed: what the restart does,
        in one word."""
        if not self.broker_starts:
            return "refuses_to_start"
        if self.loses_data is None:
            return "loss_not_computed"
        return "loses_data" if self.loses_data else "no_loss"

    @property
    def verdict_reason(self) -> str:
        if not self.broker_starts:
            why = "; ".join(f"{f.path}: {f.message}" for f in self.load_failures)
            return f"the broker refuses to start: {why}"
        lost = self.lost_messages
        if lost is None:
            return "what the restart loses was not searched for"
        if not self.loses_data:
            return "nothing is lost"
        parts = [
            f"{n} intact message{'' if n == 1 else 's'} {_WHERE[where]}"
            for where, n in sorted(lost.by_where.items())
        ]
        if lost.damaged_records:
            n = lost.damaged_records
            parts.append(f"{n} damaged record{'' if n == 1 else 's'} past the recovered end")
        return "the restart loses data: " + ", ".join(parts)
