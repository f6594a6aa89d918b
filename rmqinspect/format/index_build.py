"""``IndexService.buildIndex`` over chunks of dispatched records (spec §7.4-7.5), vectorised.

:class:`IndexBuilder` is the one index write path: the store writer, and the recovery emulator
for both its report and ``recover --out``, feed it the records the reput service dispatches, in
dispatch order, and it rolls files exactly as ``getAndCreateLastIndexFile`` does. It is pure:
files live in memory as :class:`~rmqinspect.format.index.IndexFileBuilder` values and are handed
to the caller when the broker would stop writing them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import DecodeError
from rmqinspect.format.commitlog import TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from rmqinspect.format.index import (
    ENTRY_DTYPE,
    HASH_SLOT_SIZE,
    INDEX_HEADER_SIZE,
    INVALID_INDEX,
    Buffer,
    IndexGeometry,
    IndexHeader,
)
from rmqinspect.format.javamath import INT_MAX, wrap32

_ENDS = struct.Struct(">qqqq")  # the header's timestamps and offsets


class IndexFileBuilder:
    """One index file as ``IndexFile.putKey`` leaves it (spec 7.3), a run of keys per numpy call.

    It holds the header and the slot table (4 bytes a slot, allocated at the first put). With
    ``materialise`` it also keeps the entries it wrote and, for a continued file, the loaded
    bytes they overlay, so :meth:`writes` gives the file exactly; without it only the header is
    kept (what a recovery report needs). :class:`~rmqinspect.format.index_build.IndexBuilder`
    drives it across files.
    """

    def __init__(
        self,
        geometry: IndexGeometry,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        *,
        name: str = "",
        materialise: bool = True,
    ) -> None:
        """``new IndexFile(name, slots, indexNum, endPhyOffset, endTimestamp)``: each end value
        becomes both begin and end of the new file, but only if positive."""
        self.geometry = geometry
        self.name = name
        self.materialise = materialise
        timestamp, phy_offset = max(end_timestamp, 0), max(end_phy_offset, 0)
        self._begin_timestamp = self._end_timestamp = timestamp
        self._begin_phy_offset = self._end_phy_offset = phy_offset
        self._hash_slot_count = 0
        self._index_count = 1
        # The header bytes until a put or flush rewrites them: the constructor stores only the
        # copied ends, so indexCount reads 0 in a file that never got a key.
        self._stored_header = _ENDS.pack(timestamp, timestamp, phy_offset, phy_offset) + bytes(8)
        self._header_current = False  # the stored header equals the in-memory one
        self._slots: npt.NDArray[np.int32] | None = None
        self._blocks: list[tuple[int, bytes]] = []  # (first entry number, entries)
        self._base: Buffer | None = None  # the loaded file the entries overlay

    @classmethod
    def new_rolled(cls, previous: IndexFileBuilder, name: str = "") -> IndexFileBuilder:
        """The file ``getAndCreateLastIndexFile`` creates after ``previous`` (spec 7.5)."""
        end = previous.header
        return cls(
            previous.geometry,
            end.end_phy_offset,
            end.end_timestamp,
            name=name,
            materialise=previous.materialise,
        )

    @classmethod
    def from_bytes(
        cls, buf: Buffer, geometry: IndexGeometry, *, name: str = "", materialise: bool = True
    ) -> IndexFileBuilder:
        """Continue an existing file as ``IndexFile.load`` leaves it: its header (indexCount
        <= 0 read as 1) and its slot table, whatever they hold. ``buf`` may be short (the broker
        maps the configured size, so missing bytes read as zeros); a materialising builder keeps
        a reference to it."""
        if len(buf) > geometry.file_size:
            raise DecodeError(f"index file of {len(buf)} bytes exceeds {geometry.file_size}")
        header = IndexHeader.decode(buf)
        builder = cls(geometry, name=name, materialise=materialise)
        builder._begin_timestamp = header.begin_timestamp
        builder._end_timestamp = header.end_timestamp
        builder._begin_phy_offset = header.begin_phy_offset
        builder._end_phy_offset = header.end_phy_offset
        builder._hash_slot_count = header.hash_slot_count
        builder._index_count = header.loaded_index_count
        builder._stored_header = bytes(buf[:INDEX_HEADER_SIZE])
        # Zeros stay untouched pages: memory follows the slots the file holds, not the geometry.
        builder._slots = np.zeros(geometry.slot_num, dtype=np.int32)
        present = max(0, min(len(buf), geometry.entries_base) - INDEX_HEADER_SIZE) // HASH_SLOT_SIZE
        builder._slots[:present] = np.frombuffer(buf, ">i4", present, INDEX_HEADER_SIZE)
        if materialise:
            builder._base = buf
        return builder

    @property
    def header(self) -> IndexHeader:
        """The broker's in-memory header (``index_count`` >= 1 even before the first put)."""
        return IndexHeader(
            self._begin_timestamp,
            self._end_timestamp,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._hash_slot_count,
            self._index_count,
        )

    @property
    def end_phy_offset(self) -> int:
        return self._end_phy_offset

    @property
    def is_full(self) -> bool:
        return self.room == 0

    @property
    def room(self) -> int:
        """Keys that still fit before ``putKey`` refuses."""
        return max(self.geometry.index_num - self._index_count, 0)

    def put(
        self,
        key_hashes: npt.NDArray[np.int64],
        phy_offsets: npt.NDArray[np.int64],
        store_timestamps: npt.NDArray[np.int64],
    ) -> None:
        """``IndexFile.putKey`` for consecutive keys (their index key hashes, and the offset and
        store time of the record each belongs to); they must all fit (see :attr:`room`)."""
        count = len(key_hashes)
        if count > self.room:
            raise ValueError(f"{count} keys do not fit in the {self.room} entries left")
        if not count:
            return
        slot_num = self.geometry.slot_num
        if self._slots is None:
            self._slots = np.zeros(slot_num, dtype=np.int32)
        numbers = self._index_count + np.arange(count, dtype=np.int64)
        slots = key_hashes % slot_num
        # Per slot, in put order: the first key reads the table, the others chain to the
        # previous key of the same slot in this run.
        # Sorting slot * count + put number (distinct values) orders the keys as a stable
        # argsort by slot would, several times faster (numpy's SIMD sort of plain integers).
        order = np.sort(slots * count + np.arange(count, dtype=np.int64)) % count
        sorted_slots = slots[order]
        sorted_numbers = numbers[order]
        same = sorted_slots[1:] == sorted_slots[:-1]
        stored = self._slots[sorted_slots].astype(np.int64)
        # slotValue <= 0 or > indexCount (at that put) is no chain: a loaded file may hold any.
        prev_sorted = np.where((stored > 0) & (stored <= sorted_numbers), stored, INVALID_INDEX)
        prev_sorted[1:] = np.where(same, sorted_numbers[:-1], prev_sorted[1:])
        prev = np.empty(count, dtype=np.int64)
        prev[order] = prev_sorted
        last_of_slot = np.append(~same, True)
        self._slots[sorted_slots[last_of_slot]] = sorted_numbers[last_of_slot]
        # timeDiff is computed before the first put sets beginTimestamp (spec 7.3 observation).
        begin = np.full(count, self._begin_timestamp, dtype=np.int64)
        if self._index_count <= 1:
            self._begin_timestamp = int(store_timestamps[0])
            self._begin_phy_offset = int(phy_offsets[0])
            begin[1:] = self._begin_timestamp
        # int64 subtraction wraps like Java's long; negatives clamp to 0, so floor is truncation.
        elapsed = np.clip((store_timestamps - begin) // 1000, 0, INT_MAX)
        time_diff = np.where(begin <= 0, 0, elapsed)
        if self.materialise:
            entries = np.empty(count, dtype=ENTRY_DTYPE)
            entries["key_hash"] = key_hashes
            entries["phy_offset"] = phy_offsets
            entries["time_diff"] = time_diff
            entries["prev"] = prev
            self._blocks.append((self._index_count, entries.tobytes()))
        empty = int(np.count_nonzero(prev == INVALID_INDEX))
        self._hash_slot_count = wrap32(self._hash_slot_count + empty)
        self._index_count += count
        self._end_timestamp = int(store_timestamps[-1])
        self._end_phy_offset = int(phy_offsets[-1])
        # putKey writes every field it changes, so the stored header is the in-memory one.
        self._header_current = True

    def flush(self) -> None:
        """``IndexFile.flush``: rewrite the whole header (stores indexCount 1 in a file that
        never got a key, where the bytes still hold 0)."""
        self._header_current = True

    @property
    def header_bytes(self) -> bytes:
        """The 40 header bytes as the file holds them now."""
        return self.header.encode() if self._header_current else self._stored_header

    @property
    def continues_loaded_file(self) -> bool:
        """Whether this file continues loaded bytes (:meth:`from_bytes`, materialising)."""
        return self._base is not None

    def writes(self, *, with_loaded: bool = True) -> Iterator[tuple[int, Buffer]]:
        """``(position, data)`` pieces that, written in order over a zero-filled file of the
        geometry's size, give this file: the loaded bytes (when continued; left out with
        ``with_loaded=False``, for a caller that already holds a copy), the header, the slot
        table's used range and the entry runs. Sparse: most of a file stays zeros."""
        if not self.materialise:
            raise ValueError("a header-only index file builder keeps no file bytes")
        if self._base is not None and with_loaded:
            yield 0, self._base
        yield 0, self.header_bytes
        if self._slots is not None:
            used = np.flatnonzero(self._slots)
            if used.size:
                lo, hi = int(used[0]), int(used[-1]) + 1
                yield self.geometry.slot_position(lo), self._slots[lo:hi].astype(">i4").tobytes()
        for number, data in self._blocks:
            yield self.geometry.entry_position(number), data

    def to_bytes(self) -> bytes:
        """The whole file (``geometry.file_size`` bytes)."""
        out = bytearray(self.geometry.file_size)
        for position, data in self.writes():
            out[position : position + len(data)] = data
        return bytes(out)


# Keys per IndexFileBuilder.put: beyond this the sort by slot leaves the CPU caches.
_PUT_BATCH = 1 << 16

IndexNamer = Callable[[int, int], str]
"""Names a new index file from the store timestamp of the record whose dispatch created it and
the file's sequence number among the files the builder created (0 for the first)."""

IndexSink = Callable[[IndexFileBuilder], None]
"""Receives each file the builder rolls past, already flushed; the builder then drops it."""


class IndexBuilder:
    """``buildIndex`` and ``getAndCreateLastIndexFile`` over chunks of records, vectorised.

    Per record :meth:`dispatch` takes the PHYSICALOFFSET field, the store timestamp, the sysFlag
    and the index key hashes (``UNIQ_KEY`` first, then each non-empty ``KEYS`` element, of the
    string ``topic#key``). As the broker does, every record first gets the last file (a full
    one is replaced even by a record that then puts nothing), a record whose offset is below
    that file's endPhyOffset is skipped, ROLLBACK records put nothing (PREPARED ones do), and a
    file that fills in the middle of a record's keys is replaced by that record.

    Modes: with ``materialise`` every file keeps its bytes (see
    :meth:`IndexFileBuilder.writes`); without it only headers and slot tables are kept, which is
    enough for exact headers and counts. Either way at most the current file is held: a rolled
    file is flushed (``IndexService.flush``) and passed to ``on_rolled``, then dropped.
    ``last_file`` continues a file kept from before (``IndexFileBuilder.from_bytes``).
    """

    def __init__(
        self,
        geometry: IndexGeometry,
        namer: IndexNamer,
        *,
        materialise: bool = False,
        last_file: IndexFileBuilder | None = None,
        on_rolled: IndexSink | None = None,
    ) -> None:
        if geometry.index_num < 2:
            raise ValueError("an index file needs maxIndexNum >= 2 to hold any entry")
        if last_file is not None and (
            last_file.geometry != geometry or last_file.materialise != materialise
        ):
            raise ValueError("the continued file must share the builder's geometry and mode")
        self.geometry = geometry
        self.namer = namer
        self.materialise = materialise
        self.on_rolled = on_rolled
        self.created: list[str] = []  # names of the files this builder created, in order
        self.entries = 0  # keys put
        # The checkpoint's indexMsgTimestamp after the flushes of full files (None: unchanged).
        self.index_msg_timestamp: int | None = None
        # PHYSICALOFFSET of the first record that passed the skip and ROLLBACK tests.
        self.first_indexed_offset: int | None = None
        self._current = last_file
        self._rolled: list[tuple[str, IndexHeader]] = []
        self._finished = False

    # --- state the caller reads ---------------------------------------------------------------

    @property
    def current(self) -> IndexFileBuilder | None:
        """The last file (None before the first dispatch when nothing was continued)."""
        return self._current

    @property
    def creates_file(self) -> bool:
        """Whether the next dispatched record creates a file (none yet, or the last is full)."""
        return self._current is None or self._current.is_full

    @property
    def end_phy_offset(self) -> int:
        """The endPhyOffset the next record is compared with: records below it are skipped."""
        current = self._current
        if current is None:
            return 0
        return max(current.end_phy_offset, 0) if current.is_full else current.end_phy_offset

    def headers(self) -> list[tuple[str, IndexHeader]]:
        """Name and in-memory header of every file the builder held, oldest first."""
        current = [] if self._current is None else [(self._current.name, self._current.header)]
        return self._rolled + current

    # --- dispatch -----------------------------------------------------------------------------

    def dispatch(
        self,
        physical_offset: npt.NDArray[np.int64],
        store_timestamp: npt.NDArray[np.int64],
        sys_flag: npt.NDArray[np.int64],
        key_hash: npt.NDArray[np.int64],
        key_owner: npt.NDArray[np.int64],
    ) -> None:
        """Index a chunk of dispatched records, in dispatch order. ``key_hash`` holds index key
        hashes (``index_key_hash``) of the records ``key_owner`` (positions in the chunk,
        non-decreasing), each record's keys in put order."""
        if self._finished:
            raise ValueError("the index builder has handed over its last file")
        phy = np.asarray(physical_offset, dtype=np.int64)
        timestamps = np.asarray(store_timestamp, dtype=np.int64)
        flags = np.asarray(sys_flag, dtype=np.int64)
        hashes = np.asarray(key_hash, dtype=np.int64)
        owners = np.asarray(key_owner, dtype=np.int64)
        count = len(phy)
        if len(timestamps) != count or len(flags) != count or len(owners) != len(hashes):
            raise ValueError("record and key columns differ in length")
        if len(owners) and (owners[0] < 0 or owners[-1] >= count or (np.diff(owners) < 0).any()):
            raise ValueError("key owners must be record positions in non-decreasing order")
        if len(hashes) and (hashes.min() < 0 or hashes.max() > INT_MAX):
            raise ValueError("index key hashes lie in 0..Integer.MAX_VALUE")
        if not count:
            return
        indexed = (flags & TRANSACTION_TYPE_MASK) != TRANSACTION_ROLLBACK_TYPE
        # Where offsets never decrease and are not negative, the records a run skips are a
        # prefix of it (each put, and each new file, only raises endPhyOffset to an offset not
        # above the next one). Anywhere else every record is a run of its own.
        negative = phy < 0
        cuts = np.flatnonzero((phy[1:] < phy[:-1]) | negative[1:] | negative[:-1]) + 1
        bounds = [0, *cuts.tolist(), count]
        key_bounds = np.searchsorted(owners, bounds).tolist()
        for n in range(len(bounds) - 1):
            first, end = bounds[n], bounds[n + 1]
            keys = slice(key_bounds[n], key_bounds[n + 1])
            self._run(
                phy[first:end],
                timestamps[first:end],
                indexed[first:end],
                hashes[keys],
                owners[keys] - first,
            )

    def _run(
        self,
        phy: npt.NDArray[np.int64],
        timestamps: npt.NDArray[np.int64],
        indexed: npt.NDArray[np.bool_],
        hashes: npt.NDArray[np.int64],
        owners: npt.NDArray[np.int64],
    ) -> None:
        """Records whose skips form a prefix (see :meth:`dispatch`)."""
        current = self._current
        if current is None or current.is_full:
            current = self._roll(int(timestamps[0]))
        first = int(np.searchsorted(phy, current.end_phy_offset, side="left"))
        passed = np.flatnonzero(indexed[first:])
        if passed.size and self.first_indexed_offset is None:
            self.first_indexed_offset = int(phy[first + passed[0]])
        keep = (owners >= first) & indexed[owners]
        hashes, owners = hashes[keep], owners[keep]
        total = len(hashes)
        pos = 0
        filler = -1  # the record that put the last key
        while pos < total:
            room = current.room
            if not room:
                # putKey refused: the same record retries in a new file if the key is its own,
                # otherwise the next record's getAndCreateLastIndexFile replaced the file.
                trigger = filler if int(owners[pos]) == filler else filler + 1
                current = self._roll(int(timestamps[trigger]))
                continue
            take = min(room, total - pos, _PUT_BATCH)
            rows = owners[pos : pos + take]
            current.put(hashes[pos : pos + take], phy[rows], timestamps[rows])
            pos += take
            filler = int(owners[pos - 1])
        self.entries += total
        if current.is_full and 0 <= filler < len(phy) - 1:
            self._roll(int(timestamps[filler + 1]))

    def _roll(self, trigger_timestamp: int) -> IndexFileBuilder:
        """``getAndCreateLastIndexFile`` when there is no file or the last one is full."""
        previous = self._current
        name = self.namer(trigger_timestamp, len(self.created))
        if previous is not None and name <= previous.name:
            raise ValueError(f"index file name {name!r} does not sort after {previous.name!r}")
        if previous is None:
            current = IndexFileBuilder(self.geometry, name=name, materialise=self.materialise)
        else:
            current = IndexFileBuilder.new_rolled(previous, name)
        self.created.append(name)
        self._current = current
        if previous is not None:
            # IndexService.flush(previous) runs once the new file exists; only a full file
            # with a positive end moves the checkpoint.
            previous.flush()
            if previous.header.end_timestamp > 0:
                self.index_msg_timestamp = previous.header.end_timestamp
            self._rolled.append((previous.name, previous.header))
            if self.on_rolled is not None:
                self.on_rolled(previous)
        return current

    def finish(self) -> IndexFileBuilder | None:
        """Hand over the last file as it stands (the caller flushes it if its shutdown does);
        the builder takes no more records."""
        self._finished = True
        current, self._current = self._current, None
        if current is not None:
            self._rolled.append((current.name, current.header))
        return current
