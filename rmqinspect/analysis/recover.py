"""Predict what a broker restart does to a store: emulate ``DefaultMessageStore.load()/start()``.

The emulation follows rocketmq-store-format.md §10 step by step, per profile:

1. load checks (§1.2): file lengths and names that make ``MappedFileQueue.load`` fail;
2. ``IndexService.load`` (§10.10): index files deleted after a crash;
3. ``ConsumeQueue.recover`` per queue (§10.2);
4. ``CommitLog.recoverNormally`` / ``recoverAbnormally`` (§10.4-10.6) with the start-file rule of
   the profile, the record check (§10.3) and the dispatch done inside recovery;
5. ``truncateDirtyFiles`` (§10.7) and ``truncateDirtyLogicFiles`` (§10.8);
6. ``recoverTopicQueueTable`` / ``correctMinOffset`` (§10.9, 4.9 and 5.x variants);
7. the reput service after ``start()`` (§10.11) and, in 4.9, the second ``recoverTopicQueueTable``.

Nothing is written: consume-queue writes land in small in-memory overlays, index writes in header
counters (or, for ``--apply-to``, in :class:`IndexFileBuilder` buffers written to another
directory). Quirks the spec marks OBSERVATION are reproduced, because they are what happens.
"""

from __future__ import annotations

import re
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.checkpoint import CHECKPOINT_FILE_SIZE, Checkpoint, decode_checkpoint
from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE, CQ_UNIT_DTYPE, PRE_BLANK_UNIT
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.format.index import (
    DEFAULT_INDEX_NUM,
    DEFAULT_SLOT_NUM,
    INDEX_HEADER_SIZE,
    IndexFileBuilder,
    IndexGeometry,
    IndexHeader,
    index_keys,
)
from rmqinspect.format.javahash import java_hash
from rmqinspect.format.javamath import jdiv, jmod, wrap32, wrap64
from rmqinspect.format.profile import Profile
from rmqinspect.store.files import LayoutProblem, StoreFile
from rmqinspect.store.model import QueueId, Store

SCHEMA_VERSION = 1
_UNIT = struct.Struct(">qiq")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_CHUNK_UNITS = 1 << 16  # consume-queue units read per chunk (1.25 MiB)
_NOT_OR_COMMIT = (cl.TRANSACTION_NOT_TYPE, cl.TRANSACTION_COMMIT_TYPE)


class RecoveryPath(StrEnum):
    NORMAL = "normal"
    ABNORMAL = "abnormal"


@dataclass(frozen=True, slots=True)
class RecoverOptions:
    """Broker settings and emulation switches (defaults are the broker's defaults). The store
    settings (profile, file sizes, index geometry) are those the :class:`Store` was opened with."""

    last_exit_ok: bool | None = None  # None: from the abort file
    check_crc: bool = True  # checkCRCOnRecover
    message_index_enable: bool = True
    message_index_safe: bool = False
    force_verify_prop_crc: bool = False  # 5.2+
    delay_levels: str = cl.DEFAULT_DELAY_LEVELS
    lost_limit: int | None = 1000  # messages listed (the count is always complete)
    master: bool = True  # brokerId 0: the reput skips an unreadable region instead of stalling


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
    offset: int
    size: int
    file: str
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int


@dataclass
class BadRecord:
    offset: int
    file: str
    position: int  # inside the file
    reason: str  # cl.CheckReason value
    detail: str
    total_size: int | None
    magic: str | None


@dataclass
class FilePosition:
    name: str
    wrote_position: int


@dataclass
class CommitlogReport:
    file_size: int
    files_before: list[str]
    min_offset: int  # getMinOffset after load: -1 without files
    max_offset: int  # the recovered end E (getMaxOffset)
    scan_start_offset: int | None
    scanned_bytes: int
    end_reason: str  # bad_record | blank_in_last_file | no_files | load_failed
    last_valid_record: RecordInfo | None
    first_bad_record: BadRecord | None
    discarded_bytes: int  # data (non-zero) bytes past E that the broker ignores or deletes
    deleted_files: list[str]
    deleted_at_load: list[str]  # 5.x: a zero-length last file is deleted by load()
    last_file: FilePosition | None
    files_after: list[FilePosition]  # every file kept, with its write position after load
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
    unreachable_after_start: int  # scanned records of this queue at or past its final max
    files_deleted: list[str]
    files_created: list[str]


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
    size: int
    msg_id: str
    uniq_key: str | None
    keys: list[str]
    tags: str | None
    store_timestamp: int
    transaction: str
    file: str
    where: str  # past_end (in the cut file) or deleted_file


@dataclass
class LostReport:
    count: int
    listed: int
    truncated: bool
    damaged_records: int  # message-like records past E that fail the check (torn, corrupt)
    messages: list[LostMessage]


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
    lost_messages: LostReport
    unreachable_messages: int  # scanned records below E left without a consume-queue unit
    queues_without_consume_queue: list[str]  # queues the scan saw records of but none exists
    warnings: list[str]

    @property
    def loses_data(self) -> bool:
        """Exit-code rule: the restart destroys messages (intact or damaged records past the
        end, or consume-queue units below it that ConsumeQueue.recover drops and nothing
        rebuilds). Units truncated past the end are covered by the first two."""
        if self.lost_messages.count or self.lost_messages.damaged_records:
            return True
        return any(
            q.units_dropped_by_cq_recover > q.units_written_at_load + q.units_written_after_start
            for q in self.consume_queues
        )


# --- the emulated state ------------------------------------------------------------------------


class _LoadFailed(Exception):
    def __init__(self, failure: LoadFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class _ClFile:
    """A commitlog ``MappedFile``: the disk file and the in-memory write position."""

    __slots__ = ("disk", "start", "wrote")

    def __init__(self, disk: StoreFile, start: int, wrote: int) -> None:
        self.disk = disk
        self.start = start
        self.wrote = wrote

    @property
    def name(self) -> str:
        return self.disk.name


class CqFile:
    """A consume-queue ``MappedFile``: disk bytes (or none, for a file the broker creates) plus
    the units written by the emulated dispatch, kept as one contiguous overlay."""

    __slots__ = ("disk", "first_create", "ov", "ov_start", "start", "wrote")

    def __init__(
        self, start: int, disk: StoreFile | None, wrote: int, first_create: bool = False
    ) -> None:
        self.start = start
        self.disk = disk
        self.wrote = wrote
        self.first_create = first_create  # MappedFile.isFirstCreateInQueue
        self.ov_start = 0
        self.ov = bytearray()

    @property
    def name(self) -> str:
        return f"{self.start:020d}"


class _Queue:
    """One ``ConsumeQueue``: its files, ``maxPhysicOffset`` and ``minLogicOffset``."""

    def __init__(self, emu: _Emulator, qid: QueueId, disk_files: list[StoreFile]) -> None:
        self.emu = emu
        self.qid = qid
        self.size = emu.cq_size
        self.files = [CqFile(f.start, f, self.size) for f in disk_files]
        self.existed = bool(disk_files)
        self.files_before = len(disk_files)
        self.max_physic = -1
        self.min_logic = 0
        self.max_on_disk = 0
        self.dropped_by_recover = 0
        self.truncated = 0
        self.written = {"load": 0, "start": 0}
        self.pre_blank = 0
        self.misplaced = 0
        self.deleted: list[str] = []
        self.created: list[str] = []
        self.after_load: tuple[int, int, int] = (0, 0, -1)

    # reading ----------------------------------------------------------------------------------

    def read(self, f: CqFile, lo: int, hi: int) -> bytes:
        """Bytes ``[lo, hi)`` of ``f`` as the broker's mapped buffer holds them."""
        hi = min(hi, self.size)
        if hi <= lo:
            return b""
        data = self.emu.read_disk(f.disk, lo, hi - lo)
        if f.ov:
            a, b = max(lo, f.ov_start), min(hi, f.ov_start + len(f.ov))
            if a < b:
                out = bytearray(data)
                out[a - lo : b - lo] = f.ov[a - f.ov_start : b - f.ov_start]
                return bytes(out)
        return data

    def unit(self, f: CqFile, pos: int) -> tuple[int, int, int]:
        phy, size, tags = _UNIT.unpack(self.read(f, pos, pos + CQ_STORE_UNIT_SIZE))
        return int(phy), int(size), int(tags)

    def chunks(self, f: CqFile, lo: int, hi: int) -> Iterator[tuple[int, npt.NDArray[np.void]]]:
        """Units of ``[lo, hi)`` in chunks: (byte position of the first unit, units)."""
        step = _CHUNK_UNITS * CQ_STORE_UNIT_SIZE
        for pos in range(lo, min(hi, self.size), step):
            data = self.read(f, pos, min(pos + step, hi, self.size))
            yield pos, np.frombuffer(data, CQ_UNIT_DTYPE, len(data) // CQ_STORE_UNIT_SIZE)

    def valid_run(self, f: CqFile, lo: int, hi: int) -> tuple[int, tuple[int, int] | None]:
        """Valid units (``phy >= 0 && size > 0``) from ``lo`` up to the first invalid one:
        (count, (phy, size) of the last of them)."""
        count = 0
        last: tuple[int, int] | None = None
        for _, units in self.chunks(f, lo, hi):
            ok = (units["phy_offset"] >= 0) & (units["size"] > 0)
            bad = np.flatnonzero(~ok)
            n = int(bad[0]) if bad.size else len(units)
            if n:
                last = (int(units["phy_offset"][n - 1]), int(units["size"][n - 1]))
            count += n
            if n < len(units):
                break
        return count, last

    # writing ----------------------------------------------------------------------------------

    def write(self, f: CqFile, pos: int, data: bytes) -> None:
        """Write at ``pos`` (always the write position) into the overlay, growing it as needed."""
        if not f.ov:
            f.ov_start = pos
            f.ov += data
            return
        end = f.ov_start + len(f.ov)
        if pos > end:
            f.ov += self.emu.read_disk(f.disk, end, pos - end)
        elif pos < f.ov_start:
            f.ov[0:0] = self.emu.read_disk(f.disk, pos, f.ov_start - pos)
            f.ov_start = pos
        rel = pos - f.ov_start
        f.ov[rel : rel + len(data)] = data

    # broker steps -----------------------------------------------------------------------------

    def recover(self) -> None:
        """``ConsumeQueue.recover`` (§10.2): trust all but the last three files."""
        if not self.files:
            return
        idx = max(0, len(self.files) - 3)
        f = self.files[idx]
        valid_bytes = 0
        while True:
            count, last = self.valid_run(f, 0, self.size)
            if last is not None:
                self.max_physic = wrap64(last[0] + last[1])
            valid_bytes = count * CQ_STORE_UNIT_SIZE
            if valid_bytes == self.size and idx + 1 < len(self.files):
                idx += 1
                f = self.files[idx]
                continue
            break
        process = f.start + valid_bytes
        for gone in self.truncate_dirty_files(process):
            # Whatever these files held is dropped; count their valid units for the report.
            count, _ = self.valid_run(gone, 0, self.size)
            self.dropped_by_recover += count
        self.max_on_disk = self.max_offset

    def truncate_dirty_files(self, offset: int) -> list[CqFile]:
        """``MappedFileQueue.truncateDirtyFiles`` (§10.7); returns the deleted files."""
        removed: list[CqFile] = []
        for f in self.files:
            if f.start + self.size > offset:
                if offset >= f.start:
                    f.wrote = jmod(offset, self.size)
                else:
                    removed.append(f)
        for f in removed:
            self._drop(f)
        return removed

    def _drop(self, f: CqFile) -> None:
        self.files.remove(f)
        if f.disk is not None:
            self.deleted.append(f.disk.name)
        else:
            self.created.remove(f.name)

    @property
    def max_offset(self) -> int:
        """``getMaxOffsetInQueue`` in bytes: last file start + read position."""
        if not self.files:
            return 0
        last = self.files[-1]
        return last.start + last.wrote

    def put(self, phy: int, size: int, tags_code: int, cq_offset: int, phase: str) -> None:
        """``putMessagePositionInfo`` (§5.1), including its skip and append-at-current quirks."""
        if wrap64(phy + size) <= self.max_physic:
            return  # "Maybe try to build consume queue repeatedly"
        expect = wrap64(cq_offset * CQ_STORE_UNIT_SIZE)
        f = self._last_file_for(expect)
        if f.first_create and cq_offset != 0 and f.wrote == 0:
            self.min_logic = expect
            until = jmod(expect, self.size)
            for _ in range(0, until, CQ_STORE_UNIT_SIZE):
                if f.wrote + CQ_STORE_UNIT_SIZE <= self.size:
                    self.write(f, f.wrote, PRE_BLANK_UNIT)
                    f.wrote += CQ_STORE_UNIT_SIZE
                    self.pre_blank += 1
        if cq_offset != 0:
            current = f.wrote + f.start
            if expect < current:
                return  # "Build consume queue repeatedly"
            if expect != current:
                self.misplaced += 1  # "[BUG]logic queue order maybe wrong": appended anyway
        self.max_physic = wrap64(phy + size)
        if f.wrote + CQ_STORE_UNIT_SIZE <= self.size:
            self.write(f, f.wrote, _UNIT.pack(phy, size, tags_code))
            f.wrote += CQ_STORE_UNIT_SIZE
            self.written[phase] += 1

    def _last_file_for(self, expect: int) -> CqFile:
        """``MappedFileQueue.getLastMappedFile(startOffset)``: the last file unless it is full;
        a new file after it, or at the rounded-down expected offset when there is none."""
        if self.files and self.files[-1].wrote < self.size:
            return self.files[-1]
        first = not self.files
        start = expect - jmod(expect, self.size) if first else self.files[-1].start + self.size
        f = CqFile(start, None, 0, first_create=first)
        self.files.append(f)
        self.created.append(f.name)
        return f

    def truncate_dirty_logic(self, phy_offset: int) -> None:
        """``ConsumeQueue.truncateDirtyLogicFiles`` (§10.8); unit 0 is read without a validity
        check (OBSERVATION: an all-zero unit 0 keeps the file with position 20)."""
        self.max_physic = phy_offset
        while self.files:
            f = self.files[-1]
            old = f.wrote
            f.wrote = 0
            phy, size, _ = self.unit(f, 0)
            if phy >= phy_offset:
                self.truncated += old // CQ_STORE_UNIT_SIZE
                self._drop(f)
                continue
            kept = 1
            self.max_physic = wrap64(phy + size)
            for _, units in self.chunks(f, CQ_STORE_UNIT_SIZE, self.size):
                offs, sizes = units["phy_offset"], units["size"]
                ok = (offs >= 0) & (sizes > 0) & (offs < phy_offset)
                bad = np.flatnonzero(~ok)
                n = int(bad[0]) if bad.size else len(units)
                if n:
                    self.max_physic = wrap64(int(offs[n - 1]) + int(sizes[n - 1]))
                kept += n
                if n < len(units):
                    break
            f.wrote = kept * CQ_STORE_UNIT_SIZE
            self.truncated += max(0, old - f.wrote) // CQ_STORE_UNIT_SIZE
            return

    def correct_min_offset_49(self, min_phy: int) -> None:
        """4.9.8 ``correctMinOffset``: the first unit of the first file with phy >= minPhy."""
        if not self.files:
            return
        f = self.files[0]
        for pos, units in self.chunks(f, 0, f.wrote):
            hit = np.flatnonzero(units["phy_offset"] >= min_phy)
            if hit.size:
                self.min_logic = f.start + pos + int(hit[0]) * CQ_STORE_UNIT_SIZE
                return

    def correct_min_offset_5x(self, min_phy: int) -> None:
        """5.x ``correctMinOffset`` (§10.9 step 3), binary search included."""
        if self.min_logic >= self.max_offset or not self.files:
            return
        last = self.files[-1]
        rp = last.wrote
        if rp < CQ_STORE_UNIT_SIZE:
            # selectMappedBuffer(rp - 20, 20) passes its bounds test and then positions the
            # buffer at -20: IllegalArgumentException out of load() (UNVERIFIED by running).
            raise _LoadFailed(
                LoadFailure(
                    "exception",
                    str(
                        self.emu.store.root
                        / "consumequeue"
                        / self.qid.topic
                        / str(self.qid.queue_id)
                    ),
                    f"consume queue {self.qid}: the last file {last.name} has read position "
                    f"{rp}, so correctMinOffset positions a buffer at -20 "
                    "(IllegalArgumentException; derived from the 5.3.3 source, not observed)",
                )
            )
        if self.unit(last, rp - CQ_STORE_UNIT_SIZE)[0] < min_phy:
            self.min_logic = last.start + rp
            return
        first = self.files[0]
        start = self.min_logic - first.start
        intact = True
        if start < 0:
            intact, start = False, 0
        if not 0 <= start < first.wrote:
            return
        size = first.wrote - start

        def phy_at(rel: int) -> int:
            return self.unit(first, start + rel)[0]

        if intact and phy_at(0) >= min_phy:
            return
        low, high = 0, size - CQ_STORE_UNIT_SIZE
        while high - low > CQ_STORE_UNIT_SIZE:
            mid = (low + high) // 2 // CQ_STORE_UNIT_SIZE * CQ_STORE_UNIT_SIZE
            value = phy_at(mid)
            if value > min_phy:
                high = mid
            elif value == min_phy:
                low = high = mid
                break
            else:
                low = mid
        for i in range(low, high + 1, CQ_STORE_UNIT_SIZE):
            if phy_at(i) >= min_phy:
                self.min_logic = first.start + start + i
                break

    def destroy(self) -> None:
        """``ConsumeQueue.destroy`` (no commitlog files left): every file goes."""
        for f in list(self.files):
            self.truncated += f.wrote // CQ_STORE_UNIT_SIZE
            self._drop(f)
        self.max_physic = -1
        self.min_logic = 0


@dataclass
class _IdxFile:
    name: str | None  # None for a file the broker creates (named by its wall clock)
    header: IndexHeader
    builder: IndexFileBuilder | None = None
    continued: bool = False


class _IndexState:
    """``IndexService`` during dispatch: the loaded file list and ``buildIndex``/``putKey``.

    Only header counters are tracked unless ``out_dir`` is given; then every file that receives
    entries gets a byte-exact :class:`IndexFileBuilder`, written to ``out_dir`` when the broker
    would roll past it (so at most two are in memory)."""

    def __init__(
        self,
        geometry: IndexGeometry,
        files: list[_IdxFile],
        out_dir: Path | None,
        read_file: Callable[[str], bytes],
    ) -> None:
        self.geometry = geometry
        self.files = files
        self.out_dir = out_dir
        self.read_file = read_file
        self.created = 0
        self.entries = 0
        self.full_flushed_end_ts: int | None = None  # checkpoint indexMsgTimestamp updates
        self.indexed_min: int | None = None
        self.written: list[str] = []

    def skip_below(self) -> int:
        """``buildIndex`` skips records below this offset (the last file's endPhyOffset; a new
        file inherits it)."""
        return self.files[-1].header.end_phy_offset if self.files else 0

    def creates_file(self) -> bool:
        """The next ``buildIndex`` call creates a file (none yet, or the last one is full)."""
        return not self.files or self._full(self.files[-1])

    def _full(self, f: _IdxFile) -> bool:
        return f.header.loaded_index_count >= self.geometry.index_num

    def _last(self) -> _IdxFile:
        """``getAndCreateLastIndexFile``."""
        if self.files and not self._full(self.files[-1]):
            return self.files[-1]
        prev = self.files[-1] if self.files else None
        end_phy = prev.header.end_phy_offset if prev else 0
        end_ts = prev.header.end_timestamp if prev else 0
        header = IndexHeader(
            end_ts if end_ts > 0 else 0,
            end_ts if end_ts > 0 else 0,
            end_phy if end_phy > 0 else 0,
            end_phy if end_phy > 0 else 0,
            0,
            1,
        )
        f = _IdxFile(None, header)
        if self.out_dir is not None:
            builder = (
                IndexFileBuilder.new_rolled(prev.builder)
                if prev is not None and prev.builder is not None
                else IndexFileBuilder(self.geometry, max(end_phy, 0), max(end_ts, 0))
            )
            f.builder = builder
            f.name = self._new_name()
        if prev is not None:
            # The broker flushes the full file in the background; a full file moves the
            # checkpoint's indexMsgTimestamp.
            self.full_flushed_end_ts = prev.header.end_timestamp
            self._write_out(prev)
        self.files.append(f)
        self.created += 1
        return f

    def _new_name(self) -> str:
        """``yyyyMMddHHmmssSSS`` of now (local time, as the broker names it); when the clock is
        behind the existing names, the next number after the newest, so the load order holds."""
        ms = int(time.time() * 1000)
        name = datetime.fromtimestamp(ms / 1000).strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"
        newest = max((x.name for x in self.files if x.name is not None), default="")
        if name <= newest:
            name = f"{int(newest) + 1:017d}" if newest.isdigit() else newest + "1"
        return name

    def _builder(self, f: _IdxFile) -> IndexFileBuilder | None:
        if self.out_dir is None:
            return None
        if f.builder is None and f.name is not None:
            data = self.read_file(f.name)
            size = self.geometry.file_size
            f.builder = IndexFileBuilder.from_bytes(data[:size], self.geometry)
            f.continued = True
        return f.builder

    def _write_out(self, f: _IdxFile) -> None:
        if f.builder is None or self.out_dir is None or f.name is None:
            return
        f.builder.flush()
        _write_sparse(self.out_dir / f.name, f.builder.buffer)
        self.written.append(f.name)
        f.builder = None

    def build(self, m: _Msg) -> None:
        """``IndexService.buildIndex`` for one dispatched record (§7.4)."""
        f = self._last()
        if m.phy < f.header.end_phy_offset:
            return
        if m.sys_flag & cl.TRANSACTION_TYPE_MASK == cl.TRANSACTION_ROLLBACK_TYPE:
            return
        p = m.props
        for key in index_keys(m.topic, p.get(props.UNIQ_KEY), p.get(props.KEYS)):
            while not self._put(f, key, m.phy, m.store_ts):
                f = self._last()
        if self.indexed_min is None:
            self.indexed_min = m.phy

    def _put(self, f: _IdxFile, key: str, phy: int, ts: int) -> bool:
        """``IndexFile.putKey`` on the header (and on the bytes, when materialising)."""
        if self._full(f):
            return False
        builder = self._builder(f)
        if builder is not None:
            builder.put_key(key, phy, ts)
        h = f.header
        count = h.loaded_index_count
        begin_phy, begin_ts = h.begin_phy_offset, h.begin_timestamp
        if count <= 1:
            begin_phy, begin_ts = phy, ts
        f.header = IndexHeader(begin_ts, ts, begin_phy, phy, h.hash_slot_count, count + 1)
        self.entries += 1
        return True

    def finish(self) -> None:
        """Write the builders still in memory (the broker flushes them at shutdown)."""
        for f in self.files:
            if f.builder is not None:
                self._write_out(f)


# --- the record check's fast path --------------------------------------------------------------

_FAST_HEAD = struct.Struct(">iiiiiqqi")  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QOFFSET PHY SYSFLAG
_I16 = struct.Struct(">h")
_MIN_RECORD = 91
_CRC_MASK = 0x7FFFFFFF
_SCHEDULE = cl.SCHEDULE_TOPIC.encode()
_topic_names: dict[bytes, str] = {}
_tag_codes: dict[str, int] = {}


class _Msg:
    """A record the check accepted, as the dispatcher sees it; properties parsed on demand."""

    __slots__ = (
        "_props",
        "_raw",
        "_tags",
        "phy",
        "queue_id",
        "queue_offset",
        "size",
        "store_ts",
        "sys_flag",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        phy: int,
        size: int,
        sys_flag: int,
        store_ts: int,
        raw: bytes,
        props_map: dict[str, str] | None = None,
        tags_code: int | None = None,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.phy = phy
        self.size = size
        self.sys_flag = sys_flag
        self.store_ts = store_ts
        self._raw = raw
        self._props = props_map
        self._tags = tags_code

    @classmethod
    def of(cls, r: cl.CheckResult) -> _Msg:
        rec = r.record
        assert rec is not None
        return cls(
            rec.topic,
            rec.queue_id,
            rec.queue_offset,
            rec.physical_offset,
            rec.store_size,
            rec.sys_flag,
            rec.store_timestamp,
            rec.properties_raw,
            rec.properties,
            r.tags_code,
        )

    @property
    def props(self) -> dict[str, str]:
        if self._props is None:
            self._props = props.parse_properties(self._raw.decode("utf-8", "replace"))
        return self._props

    @property
    def tags_code(self) -> int:
        """The tag hash; schedule-topic records arrive with their tagsCode already computed."""
        if self._tags is None:
            tags = self.props.get(props.TAGS)
            if not tags:
                self._tags = 0
            else:
                code = _tag_codes.get(tags)
                if code is None:
                    code = _tag_codes[tags] = java_hash(tags)
                self._tags = code
        return self._tags


def _fast_check(
    buf: memoryview, pos: int, limit: int, check_crc: bool, accept_v2: bool
) -> _Msg | None:
    """The common case of ``checkMessageAndReturnSize``: a well-formed message record that fits
    its buffer, whose fields add up to TOTALSIZE and whose body CRC matches, outside the
    schedule topic. Such a record gets ``(TOTALSIZE, true)`` from the broker in every profile
    (the 5.3.2 bounds checks pass because it fits). Anything else returns None and the caller
    asks :func:`cl.check_message` for the exact verdict."""
    if pos + _MIN_RECORD > limit:
        return None
    total, magic, body_crc, queue_id, _flag, queue_offset, phy, sys_flag = _FAST_HEAD.unpack_from(
        buf, pos
    )
    end = pos + total
    if total < _MIN_RECORD or end > limit:
        return None
    v2 = magic == cl.MESSAGE_MAGIC_CODE_V2
    if magic != cl.MESSAGE_MAGIC_CODE and not (v2 and accept_v2):
        return None
    born = 20 if sys_flag & cl.BORNHOST_V6_FLAG else 8
    body_len_at = pos + 68 + born + (20 if sys_flag & cl.STOREHOSTADDRESS_V6_FLAG else 8)
    body_len = _I32.unpack_from(buf, body_len_at)[0]
    body_at = body_len_at + 4
    topic_len_at = body_at + body_len
    if body_len < 0 or topic_len_at + 2 > end:
        return None
    if v2:
        topic_len = _I16.unpack_from(buf, topic_len_at)[0]
        topic_at = topic_len_at + 2
    else:
        topic_len = buf[topic_len_at]
        if topic_len > 127:
            return None
        topic_at = topic_len_at + 1
    props_len_at = topic_at + topic_len
    if topic_len < 0 or props_len_at + 2 > end:
        return None
    props_len = _I16.unpack_from(buf, props_len_at)[0]
    props_at = props_len_at + 2
    if props_at + max(props_len, 0) != end:
        return None
    if check_crc and body_len > 0 and zlib.crc32(buf[body_at:topic_len_at]) & _CRC_MASK != body_crc:
        return None
    topic_b = bytes(buf[topic_at:props_len_at])
    if topic_b == _SCHEDULE:
        return None
    topic = _topic_names.get(topic_b)
    if topic is None:
        topic = _topic_names[topic_b] = topic_b.decode("utf-8", "replace")
    return _Msg(
        topic,
        queue_id,
        queue_offset,
        phy,
        total,
        sys_flag,
        _I64.unpack_from(buf, pos + 48 + born)[0],
        bytes(buf[props_at:end]) if props_len > 0 else b"",
    )


_V2 = cl.MESSAGE_MAGIC_CODE_V2
_RUN_RECORDS = 1 << 14
_I64N = npt.NDArray[np.int64]


@dataclass(slots=True)
class _Run:
    """Consecutive records from one position that pass :func:`_fast_check`'s conditions (the
    schedule topic included: its DELAY is judged later), as numpy columns."""

    count: int
    end: int  # buffer position after the accepted records
    complete: bool  # the walk stopped only because it reached its record limit
    positions: _I64N
    sizes: _I64N
    queue_ids: _I64N
    queue_offsets: _I64N
    phys: _I64N
    sys_flags: _I64N
    store_ts: _I64N
    topic_at: _I64N
    topic_len: _I64N
    props_at: _I64N
    props_len: _I64N


def _gather(data: npt.NDArray[np.uint8], at: _I64N, dtype: str) -> _I64N:
    """Big-endian integers of ``dtype`` read at every offset in ``at``."""
    width = np.dtype(dtype).itemsize
    raw = data[at[:, None] + np.arange(width)]
    return np.ascontiguousarray(raw).view(dtype).reshape(-1).astype(np.int64)


_HEAD_DTYPE = np.dtype(
    {
        "names": ["total", "magic", "crc", "qid", "qoff", "phy", "sys"],
        "formats": [">i4", ">i4", ">i4", ">i4", ">i8", ">i8", ">i4"],
        "offsets": [0, 4, 8, 12, 20, 28, 36],
        "itemsize": 48,
    }
)
_HEAD2 = struct.Struct(">ii")


def _walk(buf: memoryview, pos: int, accept_v2: bool) -> tuple[list[int], bool]:
    """Follow TOTALSIZE from ``pos`` through message headers (magic and size plausible):
    the record starts, and whether the record limit (not a header) ended the walk."""
    limit = len(buf)
    unpack = _HEAD2.unpack_from
    v1 = cl.MESSAGE_MAGIC_CODE
    v2 = _V2 if accept_v2 else v1
    positions: list[int] = []
    append = positions.append
    for _ in range(_RUN_RECORDS):
        if pos + _MIN_RECORD > limit:
            return positions, False
        size, magic = unpack(buf, pos)
        if (magic != v1 and magic != v2) or size < _MIN_RECORD or pos + size > limit:
            return positions, False
        append(pos)
        pos += size
    return positions, True


def _fast_run(buf: memoryview, pos: int, check_crc: bool, accept_v2: bool) -> _Run:
    """:func:`_fast_check` for a whole run at once: the TOTALSIZE chain is walked in Python
    (it is sequential), every other condition is checked with numpy, the CRCs in one pass."""
    starts, complete = _walk(buf, pos, accept_v2)
    p = np.array(starts, np.int64)
    n = len(p)
    data = np.frombuffer(buf, np.uint8)
    head = np.ascontiguousarray(data[p[:, None] + np.arange(48)]).view(_HEAD_DTYPE).reshape(-1)
    ends = p + head["total"].astype(np.int64)
    sys_flag = head["sys"].astype(np.int64)
    born = np.where(sys_flag & cl.BORNHOST_V6_FLAG, 20, 8)
    body_len_at = p + 68 + born + np.where(sys_flag & cl.STOREHOSTADDRESS_V6_FLAG, 20, 8)
    ok = body_len_at + 4 <= ends
    body_len = _gather(data, np.where(ok, body_len_at, p), ">i4")
    body_at = body_len_at + 4
    topic_len_at = body_at + body_len
    ok &= (body_len >= 0) & (topic_len_at + 2 <= ends)
    safe = np.where(ok, topic_len_at, p)
    v2 = head["magic"] == _V2
    short = data[safe].astype(np.int8).astype(np.int64)
    topic_len = np.where(v2, _gather(data, safe, ">i2"), short)
    topic_at = topic_len_at + np.where(v2, 2, 1)
    props_len_at = topic_at + topic_len
    ok &= (topic_len >= 0) & (props_len_at + 2 <= ends)
    props_len = _gather(data, np.where(ok, props_len_at, p), ">i2")
    ok &= props_len_at + 2 + np.maximum(props_len, 0) == ends
    k = n if ok.all() else int(np.argmin(ok))
    if check_crc and k:
        stored = head["crc"][:k].tolist()
        at, lengths = body_at[:k].tolist(), body_len[:k].tolist()
        crc32 = zlib.crc32
        for i in range(k):
            length = lengths[i]
            if length and crc32(buf[at[i] : at[i] + length]) & _CRC_MASK != stored[i]:
                k = i
                break
    first = p[:k]
    return _Run(
        k,
        int(ends[k - 1]) if k else pos,
        k == n and complete,
        first,
        ends[:k] - first,
        head["qid"][:k].astype(np.int64),
        head["qoff"][:k].astype(np.int64),
        head["phy"][:k].astype(np.int64),
        sys_flag[:k],
        _gather(data, first + 48 + born[:k], ">i8"),
        topic_at[:k],
        topic_len[:k],
        props_len_at[:k] + 2,
        np.maximum(props_len[:k], 0),
    )


def _topic_ids(buf: memoryview, at: _I64N, length: _I64N) -> tuple[_I64N, list[bytes]]:
    """Topic of every record as an index into a list of distinct topic byte strings.

    Records are grouped by a hash of (length, first 8 bytes, last 8 bytes) with numpy; a group
    whose members all have the same length and bytes (checked in full) gets one id, any other
    group is resolved record by record. A run holds few topics: no bytes object per record."""
    n = len(at)
    data = np.frombuffer(buf, np.uint8)
    tids = np.empty(n, np.int64)
    topics: list[bytes] = []
    ids: dict[bytes, int] = {}
    if not n:
        return tids, topics
    span = np.arange(8)
    # Bytes outside the topic (short topics) are masked to zero so they cannot split a group.
    head_bytes = data[at[:, None] + span] * (span < length[:, None])
    tail_at = at + length - 8
    tail_bytes = data[np.maximum(tail_at, 0)[:, None] + span] * (
        span >= -tail_at[:, None] + at[:, None]
    )
    head = np.ascontiguousarray(head_bytes.astype(np.uint8)).view(">u8").reshape(-1)
    tail = np.ascontiguousarray(tail_bytes.astype(np.uint8)).view(">u8").reshape(-1)
    with np.errstate(over="ignore"):
        key = (
            (head * np.uint64(0x9E3779B97F4A7C15))
            ^ tail.astype(np.uint64)
            ^ (length.astype(np.uint64) << np.uint64(48))
        )
    order = np.argsort(key, kind="stable")
    bounds = np.flatnonzero(np.diff(key[order])) + 1
    for members in np.split(order, bounds):
        i = int(members[0])
        size = int(length[i])
        rows = data[at[members][:, None] + np.arange(size)]
        if (length[members] == size).all() and (rows == rows[0]).all():
            tids[members] = ids.setdefault(bytes(rows[0]), len(ids))
        else:  # a hash collision between different topics: resolve one by one
            for j in members.tolist():
                a = int(at[j])
                tids[j] = ids.setdefault(bytes(buf[a : a + int(length[j])]), len(ids))
    topics.extend(ids)
    return tids, topics


def _schedule_tags_code(msg: _Msg, delays: dict[int, int]) -> int | None:
    """:func:`cl.dispatch_tags_code` of a SCHEDULE_TOPIC_XXXX record."""
    p = msg.props
    return cl.dispatch_tags_code(
        msg.topic, p.get(props.TAGS), p.get(props.DELAY), msg.store_ts, delays
    )


def _write_sparse(path: Path, data: memoryview) -> None:
    """Write ``data`` leaving all-zero 1 MiB blocks as holes (an index file is mostly zeros)."""
    step = 1 << 20
    zeros = bytes(step)
    with open(path, "wb") as fh:
        for at in range(0, len(data), step):
            block = data[at : at + step]
            if block == zeros[: len(block)]:
                fh.seek(len(block), 1)
            else:
                fh.write(block)
        fh.truncate(len(data))


# --- the emulator ------------------------------------------------------------------------------

_MESSAGE_MAGICS = (cl.MESSAGE_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE_V2)
_MAGIC_RE_V1 = re.compile(re.escape(struct.pack(">i", cl.MESSAGE_MAGIC_CODE)))
_MAGIC_RE_ANY = re.compile(
    re.escape(struct.pack(">i", cl.MESSAGE_MAGIC_CODE))
    + b"|"
    + re.escape(struct.pack(">i", cl.MESSAGE_MAGIC_CODE_V2))
)


@dataclass
class RecoveryOutcome:
    """The report plus the final emulated state ``--apply-to`` writes out."""

    report: RecoveryReport
    commitlog_deleted: list[str]
    queues: dict[QueueId, _Queue]
    index_deleted: list[str]
    index_written: list[str]  # files (new or continued) materialised into the index out dir
    checkpoint_after: bytes | None


class _Emulator:
    def __init__(
        self,
        store: Store,
        options: RecoverOptions,
        progress: Callable[[int], None] | None,
        index_out: Path | None,
    ) -> None:
        self.store = store
        self.opts = options
        self.progress = progress or (lambda _n: None)
        self.index_out = index_out
        detection = store.profile
        self.profile = detection.profile
        self.profile_reasons = list(detection.reasons)
        self.cl_size = store.commitlog.file_size
        self.cq_size = store.cq_file_size
        self.warnings: list[str] = []
        self.failures: list[LoadFailure] = []
        self.queues: dict[QueueId, _Queue] = {}
        self.cl_files: list[_ClFile] = []
        self.cl_deleted: list[str] = []
        self.cl_deleted_at_load: list[str] = []
        self.cq_deleted_at_load: dict[QueueId, list[str]] = {}
        self.logics_ts: int | None = None
        self.first_dispatched: int | None = None
        self.dispatch_index: _IndexState | None = None
        # (topic, queueId) -> [records, highest queue offset] among the recovery scan's records
        self.scanned_queues: dict[tuple[str, int], list[int]] = {}
        delay_table = tuple(cl.parse_delay_levels(options.delay_levels).items())
        # 4.9.8 loads the delay table after recovery: load-time dispatch hashes SCHEDULE tags.
        load_delays = () if self.profile is Profile.V4_9 else delay_table
        self.recover_check = cl.CheckOptions(
            profile=self.profile,
            check_crc=options.check_crc,
            read_body=True,
            force_verify_prop_crc=options.force_verify_prop_crc,
            delay_levels=load_delays,
        )
        self.reput_check = cl.CheckOptions(
            profile=self.profile, check_crc=False, read_body=False, delay_levels=delay_table
        )
        self.intact_check = cl.CheckOptions(
            profile=self.profile, check_crc=True, read_body=True, delay_levels=delay_table
        )

    # disk access ------------------------------------------------------------------------------

    def read_disk(self, disk: StoreFile | None, pos: int, n: int) -> bytes:
        """``n`` bytes at ``pos``; zeros past the end (the broker maps the configured size)."""
        if disk is None or n <= 0:
            return bytes(max(n, 0))
        data = self.store.maps.read(disk, pos, n) if pos < disk.length else b""
        return data if len(data) == n else data + bytes(n - len(data))

    # step 1: load -----------------------------------------------------------------------------

    def _layout_failures(self, problems: list[LayoutProblem]) -> tuple[list[LoadFailure], set[str]]:
        """Problems that make ``MappedFileQueue.load`` fail under this profile, and the paths of
        zero-length last files that 5.x deletes instead."""
        fails: list[LoadFailure] = []
        deleted: set[str] = set()
        five = self.profile is not Profile.V4_9
        for p in problems:
            if p.kind == "zero_length" and five:
                deleted.add(p.path)
            elif p.kind == "directory_entry":
                if not five:
                    fails.append(
                        LoadFailure(
                            p.kind,
                            p.path,
                            "a directory among the files: its "
                            "length differs from the file size (4.9 fails)",
                        )
                    )
            elif p.broker_fails_to_load:
                fails.append(LoadFailure(p.kind, p.path, p.message))
        return fails, deleted

    def load(self) -> None:
        fails, deleted = self._layout_failures(self.store.commitlog.problems)
        self.failures.extend(fails)
        files = sorted(self.store.commitlog.files, key=lambda f: f.name)
        for f in files:
            if str(f.path) in deleted:
                self.cl_deleted_at_load.append(f.name)
        failing = {f.path for f in fails}
        self.cl_files = []
        for f in files:
            if str(f.path) in failing:
                break  # MappedFileQueue.load stops here; the files before it stay mapped
            if str(f.path) not in deleted:
                self.cl_files.append(_ClFile(f, f.start, self.cl_size))
        if self.failures:
            return
        for qid in self.store.queue_dirs:
            fq = self.store.consume_queue(qid.topic, qid.queue_id)
            fails, deleted = self._layout_failures(fq.problems)
            self.failures.extend(fails)
            kept = [f for f in sorted(fq.files, key=lambda f: f.name) if str(f.path) not in deleted]
            gone = [f.name for f in fq.files if str(f.path) in deleted]
            if gone:
                self.cq_deleted_at_load[qid] = gone
            self.queues[qid] = _Queue(self, qid, kept)
        for gap in self.store.commitlog.gaps():
            self.warnings.append(
                f"commitlog files are missing between offsets {gap[0]} and {gap[1]}"
            )
        for u in self.store.unsupported:
            self.warnings.append(f"{u.note} ({u.path}); the emulation ignores it")

    # checkpoint -------------------------------------------------------------------------------

    def read_checkpoint(self) -> tuple[Checkpoint, bool]:
        raw = self.store.checkpoint_bytes()
        present = raw is not None
        data = (raw or b"").ljust(CHECKPOINT_FILE_SIZE, b"\0")[:CHECKPOINT_FILE_SIZE]
        return decode_checkpoint(data), present

    # step 2: index load -----------------------------------------------------------------------

    def index_geometry(self) -> tuple[IndexGeometry, str]:
        slots, entries = self.store.options.index_slot_num, self.store.options.index_num
        sizes = [f.length for f in self.store.index_files]
        size = max(set(sizes), key=sizes.count) if sizes else None
        if slots is not None and entries is not None:
            return IndexGeometry(slots, entries), "options"
        if size is not None:
            try:
                return IndexGeometry.infer(size, slots, entries), "file size"
            except ValueError:
                pass  # not the defaults nor the default ratio: try the full files below
            # A rolled (full) file stores indexCount == maxIndexNum: the geometry follows.
            counts = {self._index_header(f).index_count for f in self.store.index_files[:-1]}
            if len(counts) == 1:
                num = counts.pop()
                rest = size - INDEX_HEADER_SIZE - 20 * num
                if num >= 2 and rest > 0 and rest % 4 == 0:
                    return IndexGeometry(rest // 4, num), "full files' indexCount"
            self.warnings.append(
                f"index geometry of {size}-byte files could not be inferred; pass --index-slots "
                "and --index-entries (rollover predictions use the defaults)"
            )
        return IndexGeometry(slots or DEFAULT_SLOT_NUM, entries or DEFAULT_INDEX_NUM), ("defaults")

    def _index_header(self, f: StoreFile) -> IndexHeader:
        data = self.read_disk(f, 0, INDEX_HEADER_SIZE)
        return IndexHeader.decode(data)

    # step 4: commitlog recovery ---------------------------------------------------------------

    def _abnormal_start(self, cp: Checkpoint) -> StartFile:
        """``isMappedFileMatchedRecover`` from the newest file back (§10.6)."""
        use_index = self.opts.message_index_enable and self.opts.message_index_safe
        limit = cp.min_timestamp_index() if use_index else cp.min_timestamp()
        what = (
            "min(checkpoint min timestamp, indexMsgTimestamp) (messageIndexSafe)"
            if use_index
            else "min(physicMsgTimestamp, logicsMsgTimestamp) - 3000 ms"
        )
        candidates: list[StartCandidate] = []
        for i in range(len(self.cl_files) - 1, -1, -1):
            f = self.cl_files[i]
            head = self.read_disk(f.disk, 0, cl.store_timestamp_pos(cl.BORNHOST_V6_FLAG) + 8)
            magic = _I32.unpack_from(head, cl.MAGIC_POS)[0]
            ok_magic = magic == cl.MESSAGE_MAGIC_CODE or (
                magic == cl.MESSAGE_MAGIC_CODE_V2 and self.profile.accepts_v2_magic
            )
            if not ok_magic:
                candidates.append(
                    StartCandidate(
                        f.name, None, False, f"first record magic {cl.magic_name(magic)}"
                    )
                )
                continue
            sys_flag = _I32.unpack_from(head, cl.SYSFLAG_POS)[0]
            ts = _I64.unpack_from(head, cl.store_timestamp_pos(sys_flag))[0]
            if ts == 0:
                candidates.append(StartCandidate(f.name, ts, False, "first store timestamp is 0"))
                continue
            if ts <= limit:
                candidates.append(StartCandidate(f.name, ts, True, f"{ts} <= {limit}"))
                return StartFile(
                    f.name,
                    f.start,
                    i,
                    "checkpoint_timestamp",
                    f"newest file whose first record's store timestamp {ts} is <= {limit} ({what})",
                    candidates,
                )
            candidates.append(StartCandidate(f.name, ts, False, f"{ts} > {limit}"))
        f = self.cl_files[0]
        return StartFile(
            f.name,
            f.start,
            0,
            "first_file",
            f"no file's first record is at or before {limit} ({what}); recovery starts at file 0",
            candidates,
        )

    def _normal_start(self, max_phy_cq: int) -> StartFile:
        n = len(self.cl_files)
        if self.profile is Profile.V5_3:
            i = n - 1
            while i > 0 and self.cl_files[i].start > max_phy_cq:
                i -= 1
            f = self.cl_files[i]
            return StartFile(
                f.name,
                f.start,
                i,
                "newest_covered_by_cq",
                f"newest file whose start {f.start} is <= the max consume-queue physical offset "
                f"{max_phy_cq} (5.3.2+), or file 0",
            )
        i = max(0, n - 3)
        f = self.cl_files[i]
        return StartFile(
            f.name, f.start, i, "third_from_last", "the third file from the end (recoverNormally)"
        )

    def recover_commitlog(
        self,
        start: StartFile,
        dispatch: Callable[[_Msg], None] | None,
        dispatch_above: int | None,
    ) -> tuple[int, str, RecordInfo | None, BadRecord | None, int]:
        """The shared scan loop (§10.4): returns E, the end reason, the last valid record, the
        bad record, and the bytes scanned."""
        idx = start.index
        f = self.cl_files[idx]
        pos = 0
        scanned = 0
        last: tuple[_ClFile, int, _Msg] | None = None
        opts = self.recover_check
        check_crc = opts.check_crc and not opts.force_verify_prop_crc
        fast_ok = not opts.force_verify_prop_crc and not opts.check_dup_info
        accept_v2 = self.profile.accepts_v2_magic
        above = -(1 << 63) if dispatch_above is None else dispatch_above
        while True:
            buf = self.store.view(f.disk)
            result: cl.CheckResult | None = None
            begin = pos
            try:
                while True:
                    if fast_ok:
                        run = _fast_run(buf, pos, check_crc, accept_v2)
                        done = self._take_run(buf, f, run, dispatch, above)
                        if done:
                            last = (f, int(run.positions[done - 1]), self._msg(buf, run, done - 1))
                        if done < run.count:
                            pos = int(run.positions[done])
                        else:
                            pos = run.end
                            if run.complete:
                                continue
                    result = cl.check_message(buf, pos, f.start, opts)
                    if not (result.success and result.size > 0):
                        break
                    msg = _Msg.of(result)
                    self._scanned(msg)
                    last = (f, pos, msg)
                    if dispatch is not None and msg.phy > above:
                        dispatch(msg)
                    pos += msg.size
            finally:
                buf.release()
            assert result is not None
            scanned += pos - begin
            self.progress(pos - begin)
            if result.success:  # BLANK: the next file, or the end after the last one
                if idx + 1 >= len(self.cl_files):
                    reason = "blank_in_last_file"
                    break
                scanned += self.cl_size - pos
                self.progress(self.cl_size - pos)
                idx += 1
                f = self.cl_files[idx]
                pos = 0
                continue
            reason = "bad_record"
            break
        end = f.start + pos
        info = None
        if last is not None:
            lf, lpos, m = last
            info = RecordInfo(
                lf.start + lpos, m.size, lf.name, m.topic, m.queue_id, m.queue_offset, m.store_ts
            )
        bad = None
        if reason == "bad_record":
            bad = BadRecord(
                end,
                f.name,
                pos,
                result.reason.value,
                result.detail,
                result.total_size,
                cl.magic_name(result.magic) if result.magic is not None else None,
            )
        return end, reason, info, bad, scanned

    def _msg(self, buf: memoryview, run: _Run, i: int, tags_code: int | None = None) -> _Msg:
        topic_at = int(run.topic_at[i])
        topic_b = bytes(buf[topic_at : topic_at + int(run.topic_len[i])])
        topic = _topic_names.get(topic_b)
        if topic is None:
            topic = _topic_names[topic_b] = topic_b.decode("utf-8", "replace")
        pa, pl = int(run.props_at[i]), int(run.props_len[i])
        return _Msg(
            topic,
            int(run.queue_ids[i]),
            int(run.queue_offsets[i]),
            int(run.phys[i]),
            int(run.sizes[i]),
            int(run.sys_flags[i]),
            int(run.store_ts[i]),
            bytes(buf[pa : pa + pl]),
            None,
            tags_code,
        )

    def _take_run(
        self,
        buf: memoryview,
        f: _ClFile,
        run: _Run,
        dispatch: Callable[[_Msg], None] | None,
        above: int,
    ) -> int:
        """Account for the records of ``run`` as the scan loop would, one by one, but with numpy
        where the outcome is known: returns how many it took (fewer than ``run.count`` when a
        schedule record's DELAY is not an integer; the broker's check rejects that one)."""
        count = run.count
        if not count:
            return 0
        tids, topics = _topic_ids(buf, run.topic_at, run.topic_len)
        # Schedule records: the DELAY property decides the verdict and the tagsCode.
        sched: dict[int, int] = {}
        delays = dict(self.recover_check.delay_levels)
        if _SCHEDULE in topics:
            for i in np.flatnonzero(tids == topics.index(_SCHEDULE)).tolist():
                code = _schedule_tags_code(self._msg(buf, run, i), delays)
                if code is None:
                    count = i
                    break
                sched[i] = code
        if not count:
            return 0
        tids = tids[:count]
        names = [
            _topic_names.get(t) or _topic_names.setdefault(t, t.decode("utf-8", "replace"))
            for t in topics
        ]
        qids = run.queue_ids[:count]
        tt = run.sys_flags[:count] & cl.TRANSACTION_TYPE_MASK
        cq_type = (tt == cl.TRANSACTION_NOT_TYPE) | (tt == cl.TRANSACTION_COMMIT_TYPE)
        keys = (tids << 32) | (qids & 0xFFFFFFFF)
        # Per queue: records read and the highest queue offset (scanned_queues).
        if cq_type.any():
            k, qo = keys[cq_type], run.queue_offsets[:count][cq_type]
            order = np.argsort(k, kind="stable")
            k, qo = k[order], qo[order]
            starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
            tops = np.maximum.reduceat(qo, starts)
            sizes = np.diff(np.r_[starts, len(k)])
            for key, n, top in zip(k[starts].tolist(), sizes.tolist(), tops.tolist(), strict=True):
                name = (names[key >> 32], wrap32(key & 0xFFFFFFFF))
                seen = self.scanned_queues.get(name)
                if seen is None:
                    self.scanned_queues[name] = [n, top]
                else:
                    seen[0] += n
                    seen[1] = max(seen[1], top)
        if dispatch is None:
            return count
        phys = run.phys[:count]
        sel = phys > above
        if not sel.any():
            return count
        first = int(np.argmax(sel))
        if self.first_dispatched is None:
            self.first_dispatched = int(phys[first])
        # A dispatch is a no-op (except for logicsMsgTimestamp) when the queue already holds the
        # unit (phy + size <= its maxPhysicOffset, which only grows) and the index skips the
        # record (phy below the last file's endPhyOffset, which only grows).
        uniq, inverse = np.unique(keys, return_inverse=True)
        known = [
            self.queues.get(QueueId(names[key >> 32], wrap32(key & 0xFFFFFFFF)))
            for key in uniq.tolist()
        ]
        maxp = np.array([-1 if q is None else q.max_physic for q in known], np.int64)[inverse]
        need = sel & cq_type & (phys + run.sizes[:count] > maxp)
        index = self.dispatch_index
        if index is not None:
            need |= sel & (phys >= index.skip_below())
            if index.creates_file():
                need[first] = True  # getAndCreateLastIndexFile creates a file even for a skip
        for i in np.flatnonzero(need).tolist():
            dispatch(self._msg(buf, run, i, sched.get(i)))
        ts = run.store_ts[:count][sel & cq_type]
        if ts.size:
            self.logics_ts = int(ts[-1])
        return count

    def _scanned(self, m: _Msg) -> None:
        """Per queue: records the recovery scan read, and the highest queue offset among them."""
        if m.sys_flag & cl.TRANSACTION_TYPE_MASK in _NOT_OR_COMMIT:
            key = (m.topic, m.queue_id)
            seen = self.scanned_queues.get(key)
            if seen is None:
                self.scanned_queues[key] = [1, m.queue_offset]
            else:
                seen[0] += 1
                if m.queue_offset > seen[1]:
                    seen[1] = m.queue_offset

    def truncate_commitlog(self, end: int) -> None:
        """``truncateDirtyFiles(E)`` on the commitlog (§10.7)."""
        kept: list[_ClFile] = []
        for f in self.cl_files:
            if f.start + self.cl_size > end:
                if end >= f.start:
                    f.wrote = jmod(end, self.cl_size)
                else:
                    self.cl_deleted.append(f.name)
                    continue
            kept.append(f)
        self.cl_files = kept

    @property
    def cl_min_offset(self) -> int:
        return self.cl_files[0].start if self.cl_files else -1

    @property
    def cl_max_offset(self) -> int:
        if not self.cl_files:
            return 0
        last = self.cl_files[-1]
        return last.start + last.wrote

    # dispatch ---------------------------------------------------------------------------------

    def queue(self, qid: QueueId) -> _Queue:
        q = self.queues.get(qid)
        if q is None:
            # findConsumeQueue creates an empty queue; files appear when the first unit lands.
            q = _Queue(self, qid, [])
            self.queues[qid] = q
        return q

    def make_dispatch(self, phase: str, index: _IndexState | None) -> Callable[[_Msg], None]:
        """``doDispatch``: the consume-queue and index dispatchers (§10.11). Properties are only
        parsed when a queue or the index will actually write."""
        index_on = self.opts.message_index_enable and index is not None
        queues: dict[tuple[str, int], _Queue] = {}

        def dispatch(m: _Msg) -> None:
            if self.first_dispatched is None:
                self.first_dispatched = m.phy
            if m.sys_flag & cl.TRANSACTION_TYPE_MASK in _NOT_OR_COMMIT:
                key = (m.topic, m.queue_id)
                q = queues.get(key)
                if q is None:
                    q = queues[key] = self.queue(QueueId(m.topic, m.queue_id))
                if wrap64(m.phy + m.size) > q.max_physic:
                    q.put(m.phy, m.size, m.tags_code, m.queue_offset, phase)
                # putMessagePositionInfoWrapper moves logicsMsgTimestamp even on a skip.
                self.logics_ts = m.store_ts
            if index_on:
                assert index is not None
                index.build(m)

        return dispatch

    # step 7: reput ----------------------------------------------------------------------------

    def _find_cl(self, offset: int) -> _ClFile | None:
        for f in self.cl_files:
            if f.start <= offset < f.start + self.cl_size:
                return f
        return None

    def reput(self, start: int, dispatch: Callable[[_Msg], None]) -> ReputReport:
        """``ReputMessageService.doReput``, called until caught up (§10.11).

        Each call reads the readable bytes of the file holding ``reputFromOffset``. The Java
        buffer position and ``reputFromOffset`` drift apart after a length-mismatch record (the
        buffer moved by the fields' length, the offset by TOTALSIZE); both are tracked.
        """
        rule = (
            "max consume-queue maxPhysicOffset, at least the commitlog min offset (4.9)"
            if self.profile is Profile.V4_9
            else "commitlog confirm offset = recovered end (5.x)"
        )
        end = self.cl_max_offset
        five = self.profile is not Profile.V4_9
        accept_v2 = self.profile.accepts_v2_magic
        reput = max(start, self.cl_min_offset)
        dispatched = skipped = 0
        stop_at: int | None = None
        stop_reason: str | None = None
        while reput < end:
            f = self._find_cl(reput)
            pos = jmod(reput, self.cl_size)
            if f is None or not 0 <= pos < f.wrote:
                break  # getData returns null: this round ends, and so would every later one
            buf = self.store.view(f.disk)
            region = buf[: f.wrote]
            stuck = False
            try:
                result_size = f.wrote - pos
                bpos, read = pos, 0
                limit = len(region)
                while read < result_size and (not five or reput < end):
                    msg = _fast_check(region, bpos, limit, False, accept_v2)
                    if msg is not None:
                        if five and reput + msg.size > end:
                            stuck = True
                            break
                        dispatch(msg)
                        dispatched += 1
                        reput += msg.size
                        read += msg.size
                        bpos += msg.size
                        continue
                    r = cl.check_message(region, bpos, f.start, self.reput_check)
                    size = r.size
                    if five and reput + size > end:
                        stuck = True
                        break
                    if r.success and size > 0:
                        dispatch(_Msg.of(r))
                        dispatched += 1
                        reput += size
                        read += size
                        bpos += size
                    elif r.success:
                        reput = reput + self.cl_size - jmod(reput, self.cl_size)
                        read = result_size
                    elif size > 0:
                        skipped += 1
                        reput += size
                        bpos += _read_length(region, bpos, r)
                    else:
                        if stop_at is None:
                            stop_at, stop_reason = reput, r.reason.value
                        if not self.opts.master:
                            stuck = True
                            break
                        reput += result_size - read  # the master skips the rest of the region
                        break
            finally:
                region.release()
                buf.release()
            if stuck:
                if reput < end:
                    self.warnings.append(
                        f"the reput service cannot get past offset {reput}: dispatch stays "
                        f"behind by {end - reput} bytes (4.9 start() waits for it forever)"
                    )
                break
        return ReputReport(start, end, rule, dispatched, skipped, stop_at, stop_reason)

    # lost messages ----------------------------------------------------------------------------

    def lost_messages(
        self, end: int, deleted: list[StoreFile], queue_max: dict[QueueId, int]
    ) -> tuple[LostReport, int]:
        """Intact records past E in the cut file and in deleted files (resynchronising past
        damage by magic code + matching PHYSICALOFFSET), and the non-zero bytes there."""
        limit = self.opts.lost_limit
        listed: list[LostMessage] = []
        count = damaged = 0
        data_bytes = 0
        regions: list[tuple[StoreFile, int, str]] = []
        cut = self._find_cl(end) if self.cl_files else None
        if cut is not None:
            regions.append((cut.disk, end - cut.start, "past_end"))
        regions.extend((d, 0, "deleted_file") for d in deleted)
        magic_re = _MAGIC_RE_ANY if self.profile.accepts_v2_magic else _MAGIC_RE_V1
        for disk, begin, where in regions:
            if disk.length == 0:
                continue
            buf = self.store.view(disk)
            try:
                extent = _data_extent(buf, begin)
                data_bytes += extent
                stop = begin + extent  # zeros after this hold no record: skip searching them
                pos = begin
                accept_v2 = self.profile.accepts_v2_magic
                while pos + 8 <= stop:
                    run = _fast_run(buf, pos, True, accept_v2)
                    lost, taken = self._lost_in_run(buf, run, queue_max)
                    count += len(lost)
                    for i in lost:
                        if limit is not None and len(listed) >= limit:
                            break
                        r = cl.check_message(
                            buf, int(run.positions[i]), disk.start, self.intact_check
                        )
                        assert r.record is not None
                        listed.append(_lost(r.record, disk.name, where))
                    if taken:
                        pos = int(run.positions[taken - 1] + run.sizes[taken - 1])
                    if taken == run.count and run.complete:
                        continue
                    r = cl.check_message(buf, pos, disk.start, self.intact_check)
                    rec = r.record
                    if r.success and r.size > 0 and rec is not None:
                        if _is_lost(rec, queue_max):
                            count += 1
                            if limit is None or len(listed) < limit:
                                listed.append(_lost(rec, disk.name, where))
                        pos += r.size
                        continue
                    if r.success:  # BLANK: the rest of the file is filler
                        break
                    if _I32.unpack_from(buf, pos + 4)[0] in _MESSAGE_MAGICS:
                        damaged += 1  # a message header whose record fails the check
                    nxt = _resync(buf, pos + 1, stop, disk.start, magic_re, self.intact_check)
                    if nxt is None:
                        break
                    pos = nxt
            finally:
                buf.release()
        truncated = limit is not None and count > len(listed)
        return LostReport(count, len(listed), truncated, damaged, listed), data_bytes

    def _lost_in_run(
        self, buf: memoryview, run: _Run, queue_max: dict[QueueId, int]
    ) -> tuple[list[int], int]:
        """Which records of an intact run (checked with CRC) are lost, and how many records of
        the run count as intact (a schedule record with a non-integer DELAY ends it)."""
        count = run.count
        if not count:
            return [], 0
        tids, topics = _topic_ids(buf, run.topic_at, run.topic_len)
        if _SCHEDULE in topics:
            delays = dict(self.intact_check.delay_levels)
            for i in np.flatnonzero(tids == topics.index(_SCHEDULE)).tolist():
                if _schedule_tags_code(self._msg(buf, run, i), delays) is None:
                    count = i
                    break
        names = [t.decode("utf-8", "replace") for t in topics]
        tids, qids = tids[:count], run.queue_ids[:count]
        keys = (tids << 32) | (qids & 0xFFFFFFFF)
        uniq, inverse = np.unique(keys, return_inverse=True)
        tops = np.array(
            [
                queue_max.get(QueueId(names[k >> 32], wrap32(k & 0xFFFFFFFF)), 0)
                for k in uniq.tolist()
            ],
            np.int64,
        )[inverse]
        tt = run.sys_flags[:count] & cl.TRANSACTION_TYPE_MASK
        cq_type = (tt == cl.TRANSACTION_NOT_TYPE) | (tt == cl.TRANSACTION_COMMIT_TYPE)
        lost = ~cq_type | (run.queue_offsets[:count] >= tops)
        return np.flatnonzero(lost).tolist(), count

    # the whole restart ------------------------------------------------------------------------

    def run(self) -> RecoveryOutcome:
        store, opts = self.store, self.opts
        abort = store.abort_present
        if opts.last_exit_ok is None:
            last_ok, source = not abort, "abort_file"
        else:
            last_ok = opts.last_exit_ok
            source = "assume_clean" if last_ok else "assume_crash"
        report = RecoveryReport(
            schema_version=SCHEMA_VERSION,
            store=str(store.root),
            profile=self.profile.value,
            profile_reasons=self.profile_reasons,
            options=_options_dict(opts, self.cl_size, self.cq_size),
            broker_starts=True,
            load_failures=self.failures,
            abort_present=abort,
            last_exit_ok=last_ok,
            last_exit_source=source,
            recovery_path=None,
            start_file=None,
            max_phy_offset_of_consume_queue=None,
            cq_truncation=False,
            commitlog=None,
            consume_queues=[],
            index=None,
            reput=None,
            checkpoint=None,
            lost_messages=LostReport(0, 0, False, 0, []),
            unreachable_messages=0,
            queues_without_consume_queue=[],
            warnings=self.warnings,
        )
        outcome = RecoveryOutcome(report, [], self.queues, [], [], None)
        self.load()
        if self.failures:
            # load() returns false before recovery: report the state it leaves (the files
            # mapped so far at full write position) and the path lastExitOK had chosen.
            report.broker_starts = False
            report.recovery_path = (RecoveryPath.NORMAL if last_ok else RecoveryPath.ABNORMAL).value
            report.commitlog = self._commitlog_report([], "load_failed", None, None, 0, 0, None)
            return outcome
        cp, cp_present = self.read_checkpoint()
        files_before = [f.name for f in self.cl_files]

        # IndexService.load(lastExitOK): before recovery, so the dispatch sees the kept files.
        geometry, geometry_source = self.index_geometry()
        kept: list[_IdxFile] = []
        idx_deleted: list[str] = []
        for f in store.index_files:
            header = self._index_header(f)
            if not last_ok and header.end_timestamp > cp.index_msg_timestamp:
                idx_deleted.append(f.name)
            else:
                kept.append(_IdxFile(f.name, header))
        kept_end = kept[-1].header.end_phy_offset if kept else 0
        by_name = {f.name: f for f in store.index_files}
        index = _IndexState(
            geometry,
            kept,
            self.index_out,
            lambda name: self.read_disk(by_name[name], 0, geometry.file_size),
        )

        if opts.message_index_enable:
            self.dispatch_index = index
        # recover(lastExitOK)
        for q in self.queues.values():
            q.recover()
        max_phy_cq = max((q.max_physic for q in self.queues.values()), default=-1)
        report.max_phy_offset_of_consume_queue = max_phy_cq
        path = RecoveryPath.NORMAL if last_ok else RecoveryPath.ABNORMAL
        report.recovery_path = path.value
        end = 0
        end_reason = "no_files"
        last_valid: RecordInfo | None = None
        bad: BadRecord | None = None
        scanned = 0
        deleted_disks: list[StoreFile] = []
        if not self.cl_files:
            # destroyLogics / queue store re-initialisation: every consume queue goes.
            for q in self.queues.values():
                q.destroy()
        else:
            load_dispatch = self.make_dispatch("load", index)
            dispatch: Callable[[_Msg], None] | None
            above: int | None = None
            if path is RecoveryPath.ABNORMAL:
                start = self._abnormal_start(cp)
                dispatch = load_dispatch
            else:
                start = self._normal_start(max_phy_cq)
                dispatch = load_dispatch if self.profile is Profile.V5_3 else None
                above = max_phy_cq
            report.start_file = start
            end, end_reason, last_valid, bad, scanned = self.recover_commitlog(
                start, dispatch, above
            )
            by_cl = {f.name: f.disk for f in self.cl_files}
            self.truncate_commitlog(end)
            deleted_disks = [by_cl[n] for n in self.cl_deleted]
            if max_phy_cq >= end:
                report.cq_truncation = True
                for q in self.queues.values():
                    q.truncate_dirty_logic(end)

        # recoverTopicQueueTable
        try:
            self.correct_min_offsets()
        except _LoadFailed as failed:
            self.failures.append(failed.failure)
            report.broker_starts = False
        for q in self.queues.values():
            q.after_load = (jdiv(q.min_logic, 20), jdiv(q.max_offset, 20), q.max_physic)
        min_offset = self.cl_min_offset

        # start(): the reput service, then (4.9) recoverTopicQueueTable again.
        if report.broker_starts:
            if self.profile is Profile.V4_9:
                reput_from = min_offset
                for q in self.queues.values():
                    reput_from = max(reput_from, q.max_physic)
                reput_from = max(reput_from, 0, min_offset)
            else:
                reput_from = self.cl_max_offset
            report.reput = self.reput(reput_from, self.make_dispatch("start", index))
            if self.profile is Profile.V4_9:
                self.correct_min_offsets()
        index.finish()

        queue_max = {qid: jdiv(q.max_offset, 20) for qid, q in self.queues.items()}
        lost, data_bytes = (
            self.lost_messages(end, deleted_disks, queue_max)
            if self.cl_files or (deleted_disks)
            else (LostReport(0, 0, False, 0, []), 0)
        )
        report.lost_messages = lost
        five = self.profile is not Profile.V4_9
        confirm = None
        if five and last_valid is not None:
            confirm = last_valid.offset
        elif five and report.start_file is not None:
            confirm = report.start_file.offset
        report.commitlog = self._commitlog_report(
            files_before, end_reason, last_valid, bad, scanned, data_bytes, confirm
        )
        if report.start_file is not None:
            report.commitlog.scan_start_offset = report.start_file.offset
        report.consume_queues = [
            self._queue_report(q) for q in self.queues.values() if q.existed or q.files or q.deleted
        ]
        report.unreachable_messages = sum(q.unreachable_after_start for q in report.consume_queues)
        listed = {(q.topic, q.queue_id) for q in report.consume_queues}
        for (topic, queue_id), _seen in sorted(self.scanned_queues.items()):
            if (topic, queue_id) not in listed:
                report.queues_without_consume_queue.append(f"{topic}/{queue_id}")
                report.unreachable_messages += self._unreachable(topic, queue_id, 0)
        report.index = self._index_report(
            geometry, geometry_source, idx_deleted, index, kept_end, end, last_ok, cp
        )
        report.checkpoint, outcome.checkpoint_after = self._checkpoint_report(
            cp, cp_present, index, confirm
        )
        outcome.commitlog_deleted = list(self.cl_deleted) + self.cl_deleted_at_load
        outcome.index_deleted = idx_deleted
        outcome.index_written = index.written
        return outcome

    def _commitlog_report(
        self,
        files_before: list[str],
        end_reason: str,
        last_valid: RecordInfo | None,
        bad: BadRecord | None,
        scanned: int,
        data_bytes: int,
        confirm: int | None,
    ) -> CommitlogReport:
        last_file = self.cl_files[-1] if self.cl_files else None
        before = files_before or sorted(f.name for f in self.store.commitlog.files)
        return CommitlogReport(
            file_size=self.cl_size,
            files_before=sorted(set(before) | set(self.cl_deleted_at_load)),
            min_offset=self.cl_min_offset,
            max_offset=self.cl_max_offset,
            scan_start_offset=None,
            scanned_bytes=scanned,
            end_reason=end_reason,
            last_valid_record=last_valid,
            first_bad_record=bad,
            discarded_bytes=data_bytes,
            deleted_files=list(self.cl_deleted),
            deleted_at_load=self.cl_deleted_at_load,
            last_file=FilePosition(last_file.name, last_file.wrote) if last_file else None,
            files_after=[FilePosition(f.name, f.wrote) for f in self.cl_files],
            confirm_offset=confirm,
        )

    def correct_min_offsets(self) -> None:
        min_phy = self.cl_min_offset
        for q in self.queues.values():
            if self.profile is Profile.V4_9:
                q.correct_min_offset_49(min_phy)
            else:
                q.correct_min_offset_5x(min_phy)

    def _queue_report(self, q: _Queue) -> QueueReport:
        min_load, max_load, phys_load = q.after_load
        return QueueReport(
            topic=q.qid.topic,
            queue_id=q.qid.queue_id,
            existed=q.existed,
            files_before=q.files_before,
            max_offset_on_disk=jdiv(q.max_on_disk, 20),
            min_offset_after_load=min_load,
            max_offset_after_load=max_load,
            max_physic_offset_after_load=phys_load,
            min_offset_after_start=jdiv(q.min_logic, 20),
            max_offset_after_dispatch=jdiv(q.max_offset, 20),
            units_dropped_by_cq_recover=q.dropped_by_recover,
            units_truncated=q.truncated,
            units_written_at_load=q.written["load"],
            units_written_after_start=q.written["start"],
            pre_blank_units=q.pre_blank,
            misplaced_units=q.misplaced,
            unreachable_after_start=self._unreachable(q.qid.topic, q.qid.queue_id, q.max_offset),
            files_deleted=self.cq_deleted_at_load.get(q.qid, []) + q.deleted,
            files_created=list(q.created),
        )

    def _unreachable(self, topic: str, queue_id: int, max_bytes: int) -> int:
        """Records the recovery scan read whose queue offset is at or past the queue's final max:
        in the commitlog below E but without a consume-queue unit after the restart."""
        seen = self.scanned_queues.get((topic, queue_id))
        if seen is None:
            return 0
        return max(0, min(seen[0], seen[1] + 1 - jdiv(max_bytes, 20)))

    def _index_report(
        self,
        geometry: IndexGeometry,
        source: str,
        deleted: list[str],
        index: _IndexState,
        kept_end: int,
        end: int,
        last_ok: bool,
        cp: Checkpoint,
    ) -> IndexReport:
        headers = {f.name: self._index_header(f) for f in self.store.index_files}
        cover: int | None = None
        if index.indexed_min is not None:
            cover = max(kept_end, index.indexed_min)
        unfindable: list[OffsetRange] = []
        for name in deleted:
            h = headers[name]
            if h.loaded_index_count <= 1:
                continue
            first, last = h.begin_phy_offset, min(h.end_phy_offset, end - 1)
            if cover is not None:
                last = min(last, cover - 1)
            if first <= last:
                unfindable.append(OffsetRange(first, last, f"entries of deleted {name}"))
        stale: list[OffsetRange] = []
        for f in index.files:
            if f.name in headers and f.name not in deleted:
                h = headers[f.name]
                if h.loaded_index_count > 1 and h.end_phy_offset >= end:
                    stale.append(
                        OffsetRange(
                            max(end, h.begin_phy_offset),
                            h.end_phy_offset,
                            f"kept {f.name} points past the recovered end",
                        )
                    )
        new_files = [
            IndexFileInfo(
                f.name or f"<new {i + 1}>",
                f.header.begin_phy_offset,
                f.header.end_phy_offset,
                f.header.begin_timestamp,
                f.header.end_timestamp,
                f.header.index_count,
            )
            for i, f in enumerate(x for x in index.files if x.name not in headers)
        ]
        continued = sorted(
            {f.name for f in index.files if f.name in headers and f.header != headers[f.name]}
        )
        reason = (
            "clean shutdown: index files are kept"
            if last_ok
            else f"crash: files whose endTimestamp > checkpoint indexMsgTimestamp "
            f"{cp.index_msg_timestamp} are deleted"
        )
        return IndexReport(
            geometry={"slots": geometry.slot_num, "entries": geometry.index_num},
            geometry_source=source,
            files_before=[f.name for f in self.store.index_files],
            deleted_files=deleted,
            deleted_reason=reason,
            files_created=index.created,
            files_continued=continued,
            entries_written=index.entries,
            new_files=new_files,
            unfindable_ranges=unfindable,
            stale_ranges=stale,
        )

    def _checkpoint_report(
        self, cp: Checkpoint, present: bool, index: _IndexState, confirm: int | None
    ) -> tuple[CheckpointReport, bytes]:
        """The checkpoint now, and what the shutdown after the restart persists (§8)."""
        logics = self.logics_ts if self.logics_ts is not None else cp.logics_msg_timestamp
        index_ts = (
            index.full_flushed_end_ts
            if index.full_flushed_end_ts is not None
            else cp.index_msg_timestamp
        )
        five = self.profile is not Profile.V4_9
        after = {
            "physic_msg_timestamp": cp.physic_msg_timestamp,
            "logics_msg_timestamp": logics,
            "index_msg_timestamp": index_ts,
        }
        raw = bytearray((self.store.checkpoint_bytes() or b"").ljust(CHECKPOINT_FILE_SIZE, b"\0"))
        struct.pack_into(">qqq", raw, 0, cp.physic_msg_timestamp, logics, index_ts)
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


def _options_dict(o: RecoverOptions, cl_size: int, cq_size: int) -> dict[str, object]:
    return {
        "check_crc_on_recover": o.check_crc,
        "message_index_enable": o.message_index_enable,
        "message_index_safe": o.message_index_safe,
        "force_verify_prop_crc": o.force_verify_prop_crc,
        "message_delay_level": o.delay_levels,
        "commitlog_file_size": cl_size,
        "cq_file_size": cq_size,
        "lost_limit": o.lost_limit,
        "broker_is_master": o.master,
    }


def run_recovery(
    store: Store,
    options: RecoverOptions | None = None,
    progress: Callable[[int], None] | None = None,
    index_out: Path | None = None,
) -> RecoveryOutcome:
    """Emulate the restart of ``store``; the store is only read.

    ``index_out``: a directory that receives byte-exact copies of the index files the restart
    writes (new ones named by the current wall clock, as the broker would), for ``--apply-to``.
    """
    return _Emulator(store, options or RecoverOptions(), progress, index_out).run()


def analyze_recovery(
    store: Store,
    options: RecoverOptions | None = None,
    progress: Callable[[int], None] | None = None,
) -> RecoveryReport:
    """The recovery report for ``store`` (see :func:`run_recovery`)."""
    return run_recovery(store, options, progress).report


def _read_length(buf: memoryview, pos: int, r: cl.CheckResult) -> int:
    """How far the Java buffer moved over a length-mismatch record: the length its fields add
    up to (``calMsgLength``), not TOTALSIZE."""
    rec = r.record
    if rec is None:
        return max(r.size, 1)
    born = 20 if rec.sys_flag & cl.BORNHOST_V6_FLAG else 8
    store = 20 if rec.sys_flag & cl.STOREHOSTADDRESS_V6_FLAG else 8
    at = pos + 72 + born + store + max(rec.body_length, 0)  # TOPICLENGTH
    v2 = rec.magic == cl.MESSAGE_MAGIC_CODE_V2
    if at + (2 if v2 else 1) > len(buf):
        return max(r.size, 1)
    topic_len = struct.unpack_from(">h" if v2 else ">b", buf, at)[0]
    return cl.calc_msg_length(
        rec.sys_flag, rec.body_length, topic_len, len(rec.properties_raw), 2 if v2 else 1
    )


def _data_extent(buf: memoryview, begin: int) -> int:
    """Bytes from ``begin`` to the last non-zero byte (inclusive), scanning back in chunks."""
    step = 1 << 22
    end = len(buf)
    while end > begin:
        lo = max(begin, end - step)
        chunk = np.frombuffer(buf[lo:end], np.uint8)
        nz = np.flatnonzero(chunk)
        if nz.size:
            return lo + int(nz[-1]) + 1 - begin
        end = lo
    return 0


def _resync(
    buf: memoryview,
    pos: int,
    stop: int,
    file_start: int,
    magic_re: re.Pattern[bytes],
    opts: cl.CheckOptions,
) -> int | None:
    """The next position in ``(pos, stop)`` holding an intact record whose PHYSICALOFFSET field
    names that very position (a record that cannot be stale bytes of another file)."""
    while True:
        m = magic_re.search(buf, pos + 4, stop)
        if m is None:
            return None
        cand = m.start() - 4
        r = cl.check_message(buf, cand, file_start, opts)
        if r.is_message and r.record is not None and r.record.physical_offset == file_start + cand:
            return cand
        pos = cand + 1


def _is_lost(rec: cl.MessageRecord, queue_max: dict[QueueId, int]) -> bool:
    """A record past E is acknowledged data the restart destroys, unless its queue already holds
    that queue offset after the restart (then it is a stale copy from an earlier generation)."""
    if rec.sys_flag & cl.TRANSACTION_TYPE_MASK not in _NOT_OR_COMMIT:
        return True
    return rec.queue_offset >= queue_max.get(QueueId(rec.topic, rec.queue_id), 0)


def _lost(rec: cl.MessageRecord, file: str, where: str) -> LostMessage:
    return LostMessage(
        rec.topic,
        rec.queue_id,
        rec.queue_offset,
        rec.physical_offset,
        rec.store_size,
        encode_offset_msg_id(rec.store_host, rec.physical_offset),
        rec.uniq_key,
        rec.keys,
        rec.tags,
        rec.store_timestamp,
        rec.transaction_name,
        file,
        where,
    )
