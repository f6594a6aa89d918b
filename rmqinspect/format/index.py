"""Index files (``index/``): header, hash slots, entries, the broker's query and write paths.

Spec section 7. The slot and entry counts are broker configuration, not file content, so every
function takes an :class:`IndexGeometry`. Readers work on ``bytes``/``memoryview``/``mmap``
without copying; an index file is 420 MB with the defaults. One file's write path
(:class:`IndexFileBuilder`) lives here with its layout and readers;
:mod:`rmqinspect.format.index_build` runs ``buildIndex`` across files.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import DecodeError
from rmqinspect.format.javahash import index_key, index_key_hash
from rmqinspect.format.javamath import INT_MAX, wrap32, wrap64
from rmqinspect.format.properties import split_keys

Buffer = bytes | bytearray | memoryview

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
INVALID_INDEX = 0
DEFAULT_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 20_000_000
MAX_MSGS_NUM_BATCH = 64
DEFAULT_QUERY_MAX_NUM = 32

_HEADER = struct.Struct(">qqqqii")
_ENDS = struct.Struct(">qqqq")  # the header's timestamps and offsets
_ENTRY = struct.Struct(">iqii")
_ENTRY_DTYPE = np.dtype(
    [("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")]
)
_I32 = struct.Struct(">i")
_PUT_KEY_QUEUE = 4096  # IndexFileBuilder.put_key puts its keys in runs of this many


# --- header and geometry ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexHeader:
    """The 40-byte header, values exactly as stored (``index_count`` is not normalised)."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    @classmethod
    def decode(cls, buf: Buffer, offset: int = 0) -> IndexHeader:
        if len(buf) - offset < INDEX_HEADER_SIZE:
            raise DecodeError(
                f"index header needs {INDEX_HEADER_SIZE} bytes, {max(len(buf) - offset, 0)} left",
                offset,
            )
        return cls(*_HEADER.unpack_from(buf, offset))

    def encode(self) -> bytes:
        return _HEADER.pack(
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    @property
    def loaded_index_count(self) -> int:
        """``IndexHeader.load``: a stored count ≤ 0 is taken as 1 (the empty file)."""
        return self.index_count if self.index_count > 0 else 1

    @property
    def entry_count(self) -> int:
        """Entries written: numbering starts at 1, so one less than the next entry number."""
        return self.loaded_index_count - 1

    def is_time_matched(self, begin: int, end: int) -> bool:
        """``IndexFile.isTimeMatched``."""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)


@dataclass(frozen=True, slots=True)
class IndexGeometry:
    """``maxHashSlotNum`` and ``maxIndexNum`` of the broker that wrote the file."""

    slot_num: int
    index_num: int

    def __post_init__(self) -> None:
        if self.slot_num < 1 or self.index_num < 1:
            raise ValueError(
                f"index geometry must be positive, got {self.slot_num}/{self.index_num}"
            )

    @property
    def file_size(self) -> int:
        return (
            INDEX_HEADER_SIZE + self.slot_num * HASH_SLOT_SIZE + self.index_num * INDEX_ENTRY_SIZE
        )

    @property
    def entries_base(self) -> int:
        return INDEX_HEADER_SIZE + self.slot_num * HASH_SLOT_SIZE

    def slot_position(self, slot: int) -> int:
        return INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE

    def entry_position(self, number: int) -> int:
        return self.entries_base + number * INDEX_ENTRY_SIZE

    def slot_of(self, key: str) -> int:
        return index_key_hash(key) % self.slot_num

    @classmethod
    def infer(
        cls, file_size: int, slot_num: int | None = None, index_num: int | None = None
    ) -> IndexGeometry:
        """The geometry of a file of ``file_size`` bytes (spec 7.1).

        Explicit values win and must fit the size. Without them: the broker defaults if the file
        has their size, otherwise the default ratio ``index_num = 4 * slot_num``.
        """
        body = file_size - INDEX_HEADER_SIZE
        if slot_num is not None and index_num is not None:
            candidate = (slot_num, index_num)
        elif slot_num is not None:
            rest = body - slot_num * HASH_SLOT_SIZE
            candidate = (slot_num, rest // INDEX_ENTRY_SIZE if rest % INDEX_ENTRY_SIZE == 0 else 0)
        elif index_num is not None:
            rest = body - index_num * INDEX_ENTRY_SIZE
            candidate = (rest // HASH_SLOT_SIZE if rest % HASH_SLOT_SIZE == 0 else 0, index_num)
        elif file_size == cls(DEFAULT_SLOT_NUM, DEFAULT_INDEX_NUM).file_size:
            candidate = (DEFAULT_SLOT_NUM, DEFAULT_INDEX_NUM)
        else:
            per_slot = HASH_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE
            slots = body // per_slot if body % per_slot == 0 else 0
            candidate = (slots, 4 * slots)
        if candidate[0] >= 1 and candidate[1] >= 1:
            geometry = cls(*candidate)
            if geometry.file_size == file_size:
                return geometry
        raise DecodeError(
            f"no index geometry fits a {file_size}-byte file "
            f"(maxHashSlotNum={slot_num}, maxIndexNum={index_num}); pass both explicitly",
            0,
        )


# --- slots and entries ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexEntry:
    number: int
    key_hash: int
    phy_offset: int
    time_diff: int  # seconds after the header's beginTimestamp
    prev_index: int


def read_slot(buf: Buffer, geometry: IndexGeometry, slot: int) -> int:
    """The entry number stored in hash slot ``slot`` (0 = empty)."""
    if not 0 <= slot < geometry.slot_num:
        raise DecodeError(f"slot {slot} outside 0..{geometry.slot_num - 1}")
    pos = geometry.slot_position(slot)
    if pos + HASH_SLOT_SIZE > len(buf):
        raise DecodeError(f"slot {slot} lies past the end of a {len(buf)}-byte buffer", pos)
    return int(_I32.unpack_from(buf, pos)[0])


def read_entry(buf: Buffer, geometry: IndexGeometry, number: int) -> IndexEntry:
    if not 0 <= number < geometry.index_num:
        raise DecodeError(f"entry {number} outside 0..{geometry.index_num - 1}")
    pos = geometry.entry_position(number)
    if pos + INDEX_ENTRY_SIZE > len(buf):
        raise DecodeError(f"entry {number} lies past the end of a {len(buf)}-byte buffer", pos)
    return IndexEntry(number, *_ENTRY.unpack_from(buf, pos))


ChainProblemKind = Literal[
    "bad_slot_value",  # slot value negative or not below indexCount
    "prev_out_of_range",  # prev negative or not below indexCount
    "self_loop",  # prev == the entry itself (the broker stops here too)
    "cycle",  # prev points back to an entry already walked
    "forward_link",  # prev points to a newer entry: putKey never writes that
    "truncated",  # the entry lies past the end of the buffer
]


@dataclass(frozen=True, slots=True)
class ChainProblem:
    kind: ChainProblemKind
    entry: int  # the entry (or, for bad_slot_value, the slot) where the walk stopped
    target: int  # the offending slot/prev value
    offset: int  # byte offset in the buffer of the value that was rejected

    def describe(self) -> str:
        where = "slot" if self.kind == "bad_slot_value" else "entry"
        return f"{self.kind.replace('_', ' ')} at {where} {self.entry} (value {self.target})"


class ChainWalk:
    """Entries of one hash bucket, newest to oldest; ``problem`` is set once iteration ends on
    a corrupt link. Every link must point to an older entry, so a walk takes at most
    ``indexCount`` steps whatever the file holds."""

    def __init__(
        self, buf: Buffer, geometry: IndexGeometry, header: IndexHeader, slot: int
    ) -> None:
        self._buf = buf
        self._geometry = geometry
        self._header = header
        self._slot = slot
        self.problem: ChainProblem | None = None

    def __iter__(self) -> Iterator[IndexEntry]:
        self.problem = None
        geometry, count = self._geometry, self._header.loaded_index_count
        limit = min(count, geometry.index_num)
        head = read_slot(self._buf, geometry, self._slot)
        if head == INVALID_INDEX:
            return
        if not 0 < head < limit:
            self.problem = ChainProblem(
                "bad_slot_value", self._slot, head, geometry.slot_position(self._slot)
            )
            return
        seen: set[int] = set()
        number = head
        while True:
            pos = geometry.entry_position(number)
            if pos + INDEX_ENTRY_SIZE > len(self._buf):
                self.problem = ChainProblem("truncated", number, number, pos)
                return
            entry = IndexEntry(number, *_ENTRY.unpack_from(self._buf, pos))
            yield entry
            seen.add(number)
            prev = entry.prev_index
            if prev == INVALID_INDEX:
                return
            kind: ChainProblemKind | None = None
            if not 0 < prev < limit:
                kind = "prev_out_of_range"
            elif prev == number:
                kind = "self_loop"
            elif prev in seen:
                kind = "cycle"
            elif prev > number:
                kind = "forward_link"
            if kind is not None:
                self.problem = ChainProblem(kind, number, prev, pos + 16)
                return
            number = prev


def walk_chain(buf: Buffer, geometry: IndexGeometry, header: IndexHeader, slot: int) -> ChainWalk:
    """Iterate the bucket ``slot``; check ``.problem`` of the result after iterating."""
    return ChainWalk(buf, geometry, header, slot)


# --- the broker's query path ------------------------------------------------------------------


def _select_into(
    found: list[int],
    buf: Buffer,
    geometry: IndexGeometry,
    header: IndexHeader,
    key: str,
    max_num: int,
    begin: int,
    end: int,
) -> None:
    """``IndexFile.selectPhyOffset`` appending to the caller's list, as the broker does.

    Bytes past a short buffer read as zeros, because the broker maps the configured size and
    so extends the file; a read past the configured size stops the walk (the broker catches
    the IndexOutOfBoundsException and keeps what it found).
    """
    size = len(buf)
    file_size = geometry.file_size
    count = header.loaded_index_count
    key_hash = index_key_hash(key)
    slot_pos = geometry.slot_position(key_hash % geometry.slot_num)
    slot_value = _I32.unpack_from(buf, slot_pos)[0] if slot_pos + 4 <= size else 0
    if slot_value <= INVALID_INDEX or slot_value > count or count <= 1:
        return
    # A corrupt chain can cycle; the broker then loops until max_num hits, or forever if the
    # cycle yields none. Revisiting an entry with no hit since the last visit means "forever".
    since_hit: set[int] = set()
    number = slot_value
    while len(found) < max_num:
        pos = geometry.entry_position(number)
        if pos + INDEX_ENTRY_SIZE > file_size:
            return
        if pos + INDEX_ENTRY_SIZE <= size:
            hash_read, phy_read, time_diff, prev = _ENTRY.unpack_from(buf, pos)
        else:
            tail = bytes(buf[pos:size]) if pos < size else b""
            hash_read, phy_read, time_diff, prev = _ENTRY.unpack(
                tail.ljust(INDEX_ENTRY_SIZE, b"\0")
            )
        if time_diff < 0:
            return
        time_read = wrap64(header.begin_timestamp + time_diff * 1000)
        if hash_read == key_hash and begin <= time_read <= end:
            found.append(phy_read)
            since_hit.clear()
        if prev <= INVALID_INDEX or prev > count or prev == number or time_read < begin:
            return
        if number in since_hit:
            return
        since_hit.add(number)
        number = prev


def select_phy_offsets(
    buf: Buffer, geometry: IndexGeometry, key: str, max_num: int, begin: int, end: int
) -> list[int]:
    """``IndexFile.selectPhyOffset`` for one file; ``key`` is the full ``topic#key`` string.

    Hits match on the key hash only (collisions included), newest first.
    """
    found: list[int] = []
    _select_into(found, buf, geometry, IndexHeader.decode(buf), key, max_num, begin, end)
    return found


def query_offsets(
    files: Sequence[tuple[IndexHeader, Buffer]],
    geometry: IndexGeometry,
    key: str,
    max_num: int,
    begin: int,
    end: int,
    max_msgs_num_batch: int = MAX_MSGS_NUM_BATCH,
) -> list[int]:
    """``IndexService.queryOffset``: ``files`` in load order (sorted by name, oldest first),
    each with the header the broker loaded; ``key`` is the full ``topic#key`` string."""
    max_num = min(max_num, max_msgs_num_batch)
    found: list[int] = []
    for header, buf in reversed(files):
        if header.is_time_matched(begin, end):
            _select_into(found, buf, geometry, header, key, max_num, begin, end)
        if header.begin_timestamp < begin or len(found) >= max_num:
            break
    return found


# --- statistics -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlotStatistics:
    slot_num: int
    entries: int  # entries the header claims and the buffer holds (numbers 1..entries)
    used_slots: int  # slots pointing at a written entry
    bad_slots: int  # non-zero slots pointing outside 1..indexCount-1
    broken_links: int  # entries whose prev is neither 0 nor an older entry
    unreachable_entries: int  # written entries no chain reaches (overwritten or cut-off links)
    max_chain: int
    mean_chain: float  # over used slots
    chain_histogram: dict[int, int] = field(default_factory=dict)  # length -> number of slots


def slot_statistics(buf: Buffer, geometry: IndexGeometry, header: IndexHeader) -> SlotStatistics:
    """Bucket occupancy and chain lengths, vectorised over numpy views of ``buf``.

    Chain lengths come from pointer jumping over the prev links (O(entries · log chain)), and
    only links to strictly older entries are followed, so corrupt files cannot loop.
    """
    size = len(buf)
    slot_count = max(0, min(geometry.slot_num, (size - INDEX_HEADER_SIZE) // HASH_SLOT_SIZE))
    heads = np.zeros(0, dtype=np.int64)
    if slot_count:
        heads = np.frombuffer(buf, ">i4", slot_count, INDEX_HEADER_SIZE).astype(np.int64)
    fits = max(0, (size - geometry.entries_base) // INDEX_ENTRY_SIZE - 1)
    entries = max(0, min(header.entry_count, geometry.index_num - 1, fits))
    # Index 0 is the chain terminator: rank 0, links to itself.
    # int32 suffices (entry numbers are i32) and halves the working set on 20M-entry files.
    nxt = np.zeros(entries + 1, dtype=np.int32)
    if entries:
        table = np.frombuffer(buf, _ENTRY_DTYPE, entries, geometry.entry_position(1))
        nxt[1:] = table["prev"]
        del table
    nonzero = int(np.count_nonzero(nxt))
    nxt[(nxt < 0) | (nxt >= np.arange(entries + 1, dtype=np.int32))] = 0
    broken = nonzero - int(np.count_nonzero(nxt))
    rank = np.ones(entries + 1, dtype=np.int32)
    rank[0] = 0
    while nxt.any():
        rank += rank[nxt]
        nxt = nxt[nxt]
    del nxt
    valid = (heads > 0) & (heads <= entries)
    lengths: npt.NDArray[np.int32] = rank[heads[valid]]
    used = int(lengths.size)
    histogram = np.bincount(lengths) if used else np.zeros(0, dtype=np.int64)
    total = int(lengths.sum()) if used else 0
    return SlotStatistics(
        slot_num=geometry.slot_num,
        entries=entries,
        used_slots=used,
        bad_slots=int(np.count_nonzero((heads != 0) & ~valid)),
        broken_links=broken,
        unreachable_entries=max(0, entries - total),
        max_chain=int(lengths.max()) if used else 0,
        mean_chain=total / used if used else 0.0,
        chain_histogram={int(n): int(c) for n, c in enumerate(histogram) if c},
    )


# --- the broker's write path ------------------------------------------------------------------


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
        self._queued: list[tuple[int, int, int]] = []  # put_key's keys not yet put

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
        table = bytes(buf[INDEX_HEADER_SIZE : geometry.entries_base])
        table = table.ljust(geometry.slot_num * HASH_SLOT_SIZE, b"\0")
        builder._slots = np.frombuffer(table, ">i4").astype(np.int32)
        if materialise:
            builder._base = buf
        return builder

    @property
    def header(self) -> IndexHeader:
        """The broker's in-memory header (``index_count`` >= 1 even before the first put)."""
        self._put_queued()
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
        self._put_queued()
        return self._end_phy_offset

    @property
    def is_full(self) -> bool:
        return self.room == 0

    @property
    def room(self) -> int:
        """Keys that still fit before ``putKey`` refuses."""
        return max(self.geometry.index_num - self._index_count - len(self._queued), 0)

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
        self._put_queued()
        if not count:
            return
        slot_num = self.geometry.slot_num
        if self._slots is None:
            self._slots = np.zeros(slot_num, dtype=np.int32)
        numbers = self._index_count + np.arange(count, dtype=np.int64)
        slots = key_hashes % slot_num
        # Per slot, in put order: the first key reads the table, the others chain to the
        # previous key of the same slot in this run.
        order = np.argsort(slots, kind="stable")
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
            entries = np.empty(count, dtype=_ENTRY_DTYPE)
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

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """``IndexFile.putKey`` of one ``topic#key`` string; False when full. Keys are queued
        and put a run at a time (one numpy call per key would cost 20 times more); everything
        that reads the file puts the queue first."""
        if self.is_full:
            return False
        self._queued.append((index_key_hash(key), phy_offset, store_timestamp))
        if len(self._queued) >= _PUT_KEY_QUEUE:
            self._put_queued()
        return True

    def _put_queued(self) -> None:
        if self._queued:
            hashes, phy_offsets, timestamps = np.array(self._queued, dtype=np.int64).T
            self._queued = []
            self.put(hashes, phy_offsets, timestamps)

    def flush(self) -> None:
        """``IndexFile.flush``: rewrite the whole header (stores indexCount 1 in a file that
        never got a key, where the bytes still hold 0)."""
        self._put_queued()
        self._header_current = True

    @property
    def header_bytes(self) -> bytes:
        """The 40 header bytes as the file holds them now."""
        self._put_queued()
        return self.header.encode() if self._header_current else self._stored_header

    def writes(self) -> Iterator[tuple[int, Buffer]]:
        """``(position, data)`` pieces that, written in order over a zero-filled file of the
        geometry's size, give this file: the loaded bytes (when continued), the header, the
        slot table's used range and the entry runs. Sparse: most of a file stays zeros."""
        if not self.materialise:
            raise ValueError("a header-only index file builder keeps no file bytes")
        self._put_queued()
        if self._base is not None:
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

    @property
    def buffer(self) -> memoryview:
        """A read-only view of :meth:`to_bytes`."""
        return memoryview(self.to_bytes())


def index_keys(topic: str, uniq_key: str | None, keys: str | None) -> list[str]:
    """The strings ``IndexService.buildIndex`` puts for a message, in order (spec 7.4)."""
    result = [] if uniq_key is None else [index_key(topic, uniq_key)]
    result += [index_key(topic, key) for key in split_keys(keys)]
    return result
