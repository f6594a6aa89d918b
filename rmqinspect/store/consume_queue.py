"""One consume queue as the broker holds it in memory: the one home of its rules.

:class:`ConsumeQueue` reproduces ``ConsumeQueue`` over the read-only files of one queue:
``recover`` (§10.2), ``truncateDirtyFiles`` (§10.7), ``truncateDirtyLogicFiles`` (§10.8),
``correctMinOffset`` in its 4.9 and 5.x forms (§10.9), ``putMessagePositionInfo`` with its skip,
pre-blank and append-at-current quirks (§5.1) and ``destroy``. Writes land in an in-memory
overlay per file, never on disk. ``info``, ``offsets``, ``lookup`` and the recovery emulation all
derive queue bounds from this class, so they cannot disagree.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rmqinspect.format.consumequeue import (
    CQ_STORE_UNIT_SIZE,
    CQ_UNIT_DTYPE,
    PRE_BLANK_UNIT,
    valid_mask,
    valid_prefix,
)
from rmqinspect.format.javamath import jdiv, jmod, wrap64
from rmqinspect.format.npbytes import distinct, first_false
from rmqinspect.store.files import MappedFiles, StoreFile

RECOVER_FILES_BACK = 3  # ConsumeQueue.recover trusts all but the last three files
_UNIT = struct.Struct(">qiq")
_CHUNK_UNITS = 1 << 16  # units read per chunk (1.25 MiB)
# Units may sit a few slots from their queue offset ("appended at the current position"), so a
# record counts as served when a unit within this many slots of its queue offset leads to it.
MISPLACED_SLOTS = 64


class CorrectMinOffsetError(Exception):
    """5.x ``correctMinOffset`` throws, so ``DefaultMessageStore.load()`` fails."""


class CqFile:
    """One ``MappedFile`` of a queue: the disk file (None for a file the broker creates), its
    read/write position, and the units written in memory as one contiguous overlay."""

    __slots__ = ("disk", "first_create", "overlay", "overlay_start", "start", "wrote")

    def __init__(
        self, start: int, disk: StoreFile | None, wrote: int, first_create: bool = False
    ) -> None:
        self.start = start
        self.disk = disk
        self.wrote = wrote
        self.first_create = first_create  # MappedFile.isFirstCreateInQueue
        self.overlay_start = 0
        self.overlay = bytearray()

    @property
    def name(self) -> str:
        return f"{self.start:020d}"


@dataclass
class QueueCounters:
    """What the broker's steps did to the queue, for reports."""

    dropped_by_recover: int = 0  # valid units in files ConsumeQueue.recover deleted
    truncated: int = 0  # units removed by truncateDirtyLogicFiles or destroy
    written: dict[str, int] = field(default_factory=dict)  # units written, per phase
    pre_blank: int = 0  # fillPreBlank placeholders written
    misplaced: int = 0  # units appended at a position other than their queue offset
    deleted: list[str] = field(default_factory=list)  # disk files deleted
    created: list[str] = field(default_factory=list)  # files the broker creates


class ConsumeQueue:
    """``ConsumeQueue`` of one ``topic``/``queue_id`` over its files (in stream order)."""

    def __init__(
        self, maps: MappedFiles, topic: str, queue_id: int, files: list[StoreFile], file_size: int
    ) -> None:
        self.maps = maps
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.files = [CqFile(f.start, f, file_size) for f in files]
        self.max_physic = -1  # maxPhysicOffset: end of the last unit (-1 for an empty queue)
        self.min_logic = 0  # minLogicOffset, in bytes
        self.counters = QueueCounters()

    # reading ----------------------------------------------------------------------------------

    def read(self, f: CqFile, lo: int, hi: int) -> bytes:
        """Bytes ``[lo, hi)`` of ``f`` as the broker's mapped buffer holds them."""
        hi = min(hi, self.file_size)
        if hi <= lo:
            return b""
        data = self.maps.read_padded(f.disk, lo, hi - lo)
        if f.overlay:
            a, b = max(lo, f.overlay_start), min(hi, f.overlay_start + len(f.overlay))
            if a < b:
                out = bytearray(data)
                out[a - lo : b - lo] = f.overlay[a - f.overlay_start : b - f.overlay_start]
                return bytes(out)
        return data

    def unit(self, f: CqFile, pos: int) -> tuple[int, int, int]:
        phy, size, tags = _UNIT.unpack(self.read(f, pos, pos + CQ_STORE_UNIT_SIZE))
        return int(phy), int(size), int(tags)

    def chunks(self, f: CqFile, lo: int, hi: int) -> Iterator[tuple[int, npt.NDArray[np.void]]]:
        """Units of ``[lo, hi)`` in bounded chunks: (byte position of the first unit, units).
        The units are copies, so each chunk's pages are dropped once read: a queue walked whole
        (``recover``, ``correctMinOffset``) stayed resident to the end of the command, 2.3 MB
        per queue of a 2 GB store."""
        step = _CHUNK_UNITS * CQ_STORE_UNIT_SIZE
        for pos in range(lo, min(hi, self.file_size), step):
            end = min(pos + step, hi, self.file_size)
            data = self.read(f, pos, end)
            if f.disk is not None:
                self.maps.release(f.disk, pos, end)
            yield pos, np.frombuffer(data, CQ_UNIT_DTYPE, len(data) // CQ_STORE_UNIT_SIZE)

    def zeros_from(self, f: CqFile) -> int:
        """Where only zero units remain in ``f``: past the disk file's data (the hole of a
        sparse, preallocated file, or the padding past a short one) and past the overlay. A zero
        unit is invalid (size 0), so a walk that stops at the first invalid unit stops there at
        the latest and need not read the rest: a queue of a few units in a 6 MB file costs what
        its units cost, not a copy of the file's holes."""
        end = 0
        if f.disk is not None and f.disk.length:
            end = self.maps.data_end(f.disk)
        if f.overlay:
            end = max(end, f.overlay_start + len(f.overlay))
        return -(-end // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    def valid_run(self, f: CqFile, lo: int, hi: int) -> tuple[int, tuple[int, int] | None]:
        """Valid units (:func:`~rmqinspect.format.consumequeue.valid_mask`) from ``lo`` up to
        the first invalid one: (count, (phy, size) of the last of them)."""
        count = 0
        last: tuple[int, int] | None = None
        for _, units in self.chunks(f, lo, min(hi, self.zeros_from(f))):
            n = valid_prefix(units)
            if n:
                last = (int(units["phy_offset"][n - 1]), int(units["size"][n - 1]))
            count += n
            if n < len(units):
                break
        return count, last

    def unit_offsets(self, queue_offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The physical offset stored in the unit of each queue offset (ascending, all within
        ``[minOffset, maxOffset)``), read through the overlay; -1 where no file holds it."""
        offsets: npt.NDArray[np.int64] = self.units_at(queue_offsets)["phy_offset"].astype(np.int64)
        return offsets

    def units_at(self, queue_offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
        """The unit (``CQ_UNIT_DTYPE``) of each queue offset (ascending, all within
        ``[minOffset, maxOffset)``), read through the overlay; phy_offset -1 where no file
        holds it."""
        out = np.zeros(len(queue_offsets), CQ_UNIT_DTYPE)
        out["phy_offset"] = -1
        if not len(queue_offsets) or not self.files:
            return out
        at = queue_offsets * CQ_STORE_UNIT_SIZE
        starts = np.array([f.start for f in self.files], np.int64)
        lo, hi = int(queue_offsets[0]), int(queue_offsets[-1]) + 1
        # Consecutive offsets (ascending: as many as their span), as a read ahead asks them
        whole = self._units_span(starts, lo, hi) if hi - lo == len(queue_offsets) else None
        if whole is not None:
            return whole
        which = np.searchsorted(starts, at, side="right") - 1
        for i in distinct(which[which >= 0]).tolist():
            f = self.files[i]
            sel = np.flatnonzero(which == i)
            rel = at[sel] - f.start
            inside = rel + CQ_STORE_UNIT_SIZE <= min(f.wrote, self.file_size)
            sel, rel = sel[inside], rel[inside]
            # Read spans of at most one chunk, so scattered offsets never read a whole file.
            span = _CHUNK_UNITS * CQ_STORE_UNIT_SIZE
            k = 0
            while k < len(sel):
                lo = int(rel[k])
                end = k + int(np.searchsorted(rel[k:], lo + span, side="left"))
                hi = int(rel[end - 1]) + CQ_STORE_UNIT_SIZE
                units = np.frombuffer(self.read(f, lo, hi), CQ_UNIT_DTYPE)
                out[sel[k:end]] = units[(rel[k:end] - lo) // CQ_STORE_UNIT_SIZE]
                k = end
            if f.disk is not None:
                # The units are copied: drop the pages read, or a walk that asks every queue
                # for its units (verify's) ends with every consume-queue file resident.
                self.maps.release(f.disk, 0, f.disk.length)
        return out

    def _units_span(
        self, starts: npt.NDArray[np.int64], lo: int, hi: int
    ) -> npt.NDArray[np.void] | None:
        """The units of queue offsets ``[lo, hi)`` where one file holds them all below its
        read position (None otherwise): one read, where a read ahead of a queue's units spent
        more on placing them one by one than on reading them."""
        i = int(np.searchsorted(starts, lo * CQ_STORE_UNIT_SIZE, side="right")) - 1
        if i < 0 or hi - lo > _CHUNK_UNITS:
            return None
        f = self.files[i]
        a, b = lo * CQ_STORE_UNIT_SIZE - f.start, hi * CQ_STORE_UNIT_SIZE - f.start
        if b > min(f.wrote, self.file_size):
            return None
        units = np.frombuffer(bytearray(self.read(f, a, b)), CQ_UNIT_DTYPE)
        if f.disk is not None:
            self.maps.release(f.disk, 0, f.disk.length)  # copied, as units_at's are
        return units

    def serves(
        self, queue_offsets: npt.NDArray[np.int64], positions: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        """Whether a unit of ``[minOffset, maxOffset)`` within ``MISPLACED_SLOTS`` of each
        record's queue offset holds the record's physical offset (``positions``). Each record
        is judged on its own window, so the answer does not depend on which records are asked
        together (a whole-file walk and a range of it agree)."""
        served = np.zeros(len(positions), bool)
        if not len(positions):
            return served
        low = max(int(queue_offsets.min()) - MISPLACED_SLOTS, self.min_offset_in_queue)
        high = min(int(queue_offsets.max()) + MISPLACED_SLOTS + 1, self.max_offset_in_queue)
        if low >= high:
            return served
        units = self.unit_offsets(np.arange(low, high, dtype=np.int64))
        order = np.argsort(units, kind="stable")
        by_offset = units[order]
        first = np.searchsorted(by_offset, positions, side="left")
        count = np.searchsorted(by_offset, positions, side="right") - first
        slot = order[np.minimum(first, len(order) - 1)] + low  # the first unit holding it
        served[:] = (count > 0) & (np.abs(slot - queue_offsets) <= MISPLACED_SLOTS)
        # Records several units hold (stale copies, hostile files): look at every slot of
        # their window instead, so the work stays bounded by the window.
        again = np.flatnonzero((count > 1) & ~served)
        for delta in range(-MISPLACED_SLOTS, MISPLACED_SLOTS + 1) if len(again) else ():
            at = queue_offsets[again] + delta - low
            inside = (at >= 0) & (at < len(units))
            hit = inside & (units[np.clip(at, 0, len(units) - 1)] == positions[again])
            served[again[hit]] = True
        return served

    @property
    def max_offset(self) -> int:
        """``getMaxOffsetInQueue`` in bytes: the last file's start + read position."""
        if not self.files:
            return 0
        last = self.files[-1]
        return last.start + last.wrote

    @property
    def min_offset_in_queue(self) -> int:
        return jdiv(self.min_logic, CQ_STORE_UNIT_SIZE)

    @property
    def max_offset_in_queue(self) -> int:
        return jdiv(self.max_offset, CQ_STORE_UNIT_SIZE)

    # broker steps -----------------------------------------------------------------------------

    def recover(self) -> None:
        """``ConsumeQueue.recover`` (§10.2): from the third-last file to the first invalid
        unit; files after it are deleted."""
        if not self.files:
            return
        idx = max(0, len(self.files) - RECOVER_FILES_BACK)
        f = self.files[idx]
        while True:
            count, last = self.valid_run(f, 0, self.file_size)
            if last is not None:
                self.max_physic = wrap64(last[0] + last[1])
            valid_bytes = count * CQ_STORE_UNIT_SIZE
            if valid_bytes == self.file_size and idx + 1 < len(self.files):
                idx += 1
                f = self.files[idx]
                continue
            break
        for gone in self.truncate_dirty_files(f.start + valid_bytes):
            # Whatever these files held is dropped; count their valid units for the report.
            count, _ = self.valid_run(gone, 0, self.file_size)
            self.counters.dropped_by_recover += count

    def truncate_dirty_files(self, offset: int) -> list[CqFile]:
        """``MappedFileQueue.truncateDirtyFiles`` (§10.7); returns the deleted files."""
        removed: list[CqFile] = []
        for f in self.files:
            if f.start + self.file_size > offset:
                if offset >= f.start:
                    f.wrote = jmod(offset, self.file_size)
                else:
                    removed.append(f)
        for f in removed:
            self._drop(f)
        return removed

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
                self.counters.truncated += old // CQ_STORE_UNIT_SIZE
                self._drop(f)
                continue
            kept = 1
            self.max_physic = wrap64(phy + size)
            # Units past zeros_from are zero, hence not ok: the walk ends there at the latest.
            for _, units in self.chunks(f, CQ_STORE_UNIT_SIZE, self.zeros_from(f)):
                offs, sizes = units["phy_offset"], units["size"]
                n = first_false(valid_mask(units) & (offs < phy_offset))
                if n:
                    self.max_physic = wrap64(int(offs[n - 1]) + int(sizes[n - 1]))
                kept += n
                if n < len(units):
                    break
            f.wrote = kept * CQ_STORE_UNIT_SIZE
            self.counters.truncated += max(0, old - f.wrote) // CQ_STORE_UNIT_SIZE
            return

    def correct_min_offset(self, min_phy: int, binary_search: bool) -> None:
        """``correctMinOffset(commitLog.minOffset)``: the 5.x form (``binary_search``) or 4.9's
        linear scan of the first file."""
        if binary_search:
            self._correct_min_offset_5x(min_phy)
        else:
            self._correct_min_offset_49(min_phy)

    def _correct_min_offset_49(self, min_phy: int) -> None:
        """4.9.8: the first unit of the first file with phy >= minPhy; unchanged if none."""
        if not self.files:
            return
        f = self.files[0]
        for pos, units in self.chunks(f, 0, f.wrote):
            hit = np.flatnonzero(units["phy_offset"] >= min_phy)
            if hit.size:
                self.min_logic = f.start + pos + int(hit[0]) * CQ_STORE_UNIT_SIZE
                return

    def _correct_min_offset_5x(self, min_phy: int) -> None:
        """5.x (§10.9 step 3): an empty queue keeps min = max; otherwise a binary search over
        the first file (which assumes the units are sorted by offset, as written)."""
        if self.min_logic >= self.max_offset or not self.files:
            return
        last = self.files[-1]
        rp = last.wrote
        if rp < CQ_STORE_UNIT_SIZE:
            # selectMappedBuffer(rp - 20, 20) passes its bounds test and then positions the
            # buffer at -20 (derived from the 5.3.3 source, not observed).
            raise CorrectMinOffsetError(
                f"consume queue {self.topic}/{self.queue_id}: the last file {last.name} has read "
                f"position {rp}, so correctMinOffset positions a buffer at -20 "
                "(IllegalArgumentException; derived from the 5.3.3 source, not observed)"
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

    def put(self, phy: int, size: int, tags_code: int, cq_offset: int, phase: str) -> None:
        """``putMessagePositionInfo`` (§5.1), including its skip and append-at-current quirks."""
        if wrap64(phy + size) <= self.max_physic:
            return  # "Maybe try to build consume queue repeatedly"
        expect = wrap64(cq_offset * CQ_STORE_UNIT_SIZE)
        f = self._last_file_for(expect)
        if f.first_create and cq_offset != 0 and f.wrote == 0:
            self.min_logic = expect
            until = jmod(expect, self.file_size)
            for _ in range(0, until, CQ_STORE_UNIT_SIZE):
                if f.wrote + CQ_STORE_UNIT_SIZE <= self.file_size:
                    self._write(f, f.wrote, PRE_BLANK_UNIT)
                    f.wrote += CQ_STORE_UNIT_SIZE
                    self.counters.pre_blank += 1
        if cq_offset != 0:
            current = f.wrote + f.start
            if expect < current:
                return  # "Build consume queue repeatedly"
            if expect != current:
                self.counters.misplaced += 1  # "[BUG]logic queue order maybe wrong"
        self.max_physic = wrap64(phy + size)
        if f.wrote + CQ_STORE_UNIT_SIZE <= self.file_size:
            self._write(f, f.wrote, _UNIT.pack(phy, size, tags_code))
            f.wrote += CQ_STORE_UNIT_SIZE
            self.counters.written[phase] = self.counters.written.get(phase, 0) + 1

    def destroy(self) -> None:
        """``ConsumeQueue.destroy`` (no commitlog files left): every file goes."""
        for f in list(self.files):
            self.counters.truncated += f.wrote // CQ_STORE_UNIT_SIZE
            self._drop(f)
        self.max_physic = -1
        self.min_logic = 0

    # internals --------------------------------------------------------------------------------

    def _write(self, f: CqFile, pos: int, data: bytes) -> None:
        """Write at ``pos`` (always the write position) into the overlay, growing it as needed."""
        if not f.overlay:
            f.overlay_start = pos
            f.overlay += data
            return
        end = f.overlay_start + len(f.overlay)
        if pos > end:
            f.overlay += self.maps.read_padded(f.disk, end, pos - end)
        elif pos < f.overlay_start:
            f.overlay[0:0] = self.maps.read_padded(f.disk, pos, f.overlay_start - pos)
            f.overlay_start = pos
        rel = pos - f.overlay_start
        f.overlay[rel : rel + len(data)] = data

    def _last_file_for(self, expect: int) -> CqFile:
        """``MappedFileQueue.getLastMappedFile(startOffset)``: the last file unless it is full;
        a new file after it, or at the rounded-down expected offset when there is none."""
        if self.files and self.files[-1].wrote < self.file_size:
            return self.files[-1]
        first = not self.files
        if first:
            start = expect - jmod(expect, self.file_size)
        else:
            start = self.files[-1].start + self.file_size
        f = CqFile(start, None, 0, first_create=first)
        self.files.append(f)
        self.counters.created.append(f.name)
        return f

    def _drop(self, f: CqFile) -> None:
        self.files.remove(f)
        if f.disk is not None:
            self.counters.deleted.append(f.disk.name)
        else:
            self.counters.created.remove(f.name)


class MemoryQueue(ConsumeQueue):
    """A queue whose units the broker does not keep in consume-queue files (a RocksDB consume
    queue, a BatchConsumeQueue), held for the restart emulation as 20-byte slots in in-memory
    files of the configured size, so that the dispatch, the serving test and the loss search
    read it as a file queue. Files exist only where slots were written."""

    def _file_for(self, pos: int) -> CqFile:
        """The in-memory file holding byte ``pos``, made (in order) when there is none."""
        start = pos - pos % self.file_size
        for i, f in enumerate(self.files):
            if f.start == start:
                return f
            if f.start > start:
                made = CqFile(start, None, self.file_size)
                self.files.insert(i, made)
                return made
        made = CqFile(start, None, self.file_size)
        self.files.append(made)
        return made

    def _slot(self, pos: int, unit: bytes) -> None:
        """Units at byte ``pos``, all inside one file."""
        f = self._file_for(pos)
        self._write(f, pos - f.start, unit)

    def _unit_at(self, pos: int) -> tuple[int, int, int]:
        f = self._file_for(pos)
        return self.unit(f, pos - f.start)

    def _end_at(self, end: int) -> None:
        """The queue's read position at byte ``end``: files after it go, the one holding its
        last slot is read up to it (an empty queue keeps no file)."""
        if end <= 0:
            self.files.clear()
            return
        last = self._file_for(end - CQ_STORE_UNIT_SIZE)
        self.files = [f for f in self.files if f.start <= last.start]
        for f in self.files:
            f.wrote = self.file_size
        last.wrote = end - last.start
