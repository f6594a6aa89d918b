"""Index files (``index/``): header, hash slots, entries, the broker's query and write paths.

Spec section 7. The slot and entry counts are broker configuration, not file content, so every
function takes an :class:`IndexGeometry`. Readers work on ``bytes``/``memoryview``/``mmap``
without copying; an index file is 420 MB with the defaults. One file's write path
(:class:`IndexFileBuilder`) lives here with its layout and readers;
:mod:`rmqinspect.format.index_build` runs ``buildIndex`` across files.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import DecodeError
from rmqinspect.format import speedups
from rmqinspect.format.javahash import index_key, index_key_hash
from rmqinspect.format.javamath import INT_MAX
from rmqinspect.format.properties import index_key_values
from rmqinspect.format.sizes import (  # re-exported: the index codec's sizes
    HASH_SLOT_SIZE as HASH_SLOT_SIZE,
)
from rmqinspect.format.sizes import (
    INDEX_ENTRY_SIZE as INDEX_ENTRY_SIZE,
)
from rmqinspect.format.sizes import (
    INDEX_HEADER_SIZE as INDEX_HEADER_SIZE,
)

Buffer = bytes | bytearray | memoryview

INVALID_INDEX = 0
DEFAULT_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 20_000_000
MAX_MSGS_NUM_BATCH = 64
DEFAULT_QUERY_MAX_NUM = 32

_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
ENTRY_DTYPE = np.dtype(
    [("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")]
)
_I32 = struct.Struct(">i")


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
        if self.file_size > INT_MAX:
            # IndexFile computes its size as a Java int: the broker cannot create such a file.
            raise DecodeError(
                f"maxHashSlotNum {self.slot_num} and maxIndexNum {self.index_num} make an index "
                f"file of {self.file_size} bytes, more than a Java int: no broker writes one"
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
        if geometry.slot_position(self._slot) + HASH_SLOT_SIZE > len(self._buf):
            return  # past a short buffer the broker's full-size mapping reads zeros: no chain
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


def chain_problem(
    buf: Buffer, geometry: IndexGeometry, header: IndexHeader, slot: int
) -> ChainProblem | None:
    """The problem a :class:`ChainWalk` of bucket ``slot`` ends on (None: a sound chain), from
    one walk of the links (:func:`~rmqinspect.format.speedups.follow_links`, in C when built)
    judged with numpy, not an entry object per step (a million-entry cycle: 3 s)."""
    count = header.loaded_index_count
    limit = min(count, geometry.index_num)
    slot_pos = geometry.slot_position(slot)
    if slot_pos + HASH_SLOT_SIZE > len(buf):
        return None  # as ChainWalk: past a short buffer there is no chain
    head = read_slot(buf, geometry, slot)
    if head == INVALID_INDEX:
        return None
    if not 0 < head < limit:
        return ChainProblem("bad_slot_value", slot, head, slot_pos)
    whole = min(_whole_entries(buf, geometry), limit)
    numbers, end = speedups.follow_links(
        buf, geometry.entries_base, INDEX_ENTRY_SIZE, _PREV_AT, head, whole
    )
    if not len(numbers):  # the head lies past the buffer's end
        return ChainProblem("truncated", end, end, geometry.entry_position(end))
    prev = _entry_table(buf, geometry, whole)["prev"][numbers].astype(np.int64)
    # The walk ends at the first link that is not to an older entry: a strictly descending
    # walk cannot come back, so such a link exists wherever the links went on or round.
    stops = np.flatnonzero((prev <= INVALID_INDEX) | (prev >= limit) | (prev >= numbers))
    if not len(stops):  # every link pointed lower, down to an entry not wholly in the buffer
        return ChainProblem("truncated", end, end, geometry.entry_position(end))
    k = int(stops[0])
    number, link = int(numbers[k]), int(prev[k])
    kind: ChainProblemKind
    if link == INVALID_INDEX:
        return None
    if not 0 < link < limit:
        kind = "prev_out_of_range"
    elif link == number:
        kind = "self_loop"
    elif (numbers[:k] == link).any():
        kind = "cycle"
    else:
        kind = "forward_link"
    return ChainProblem(kind, number, link, geometry.entry_position(number) + _PREV_AT)


# --- the broker's query path ------------------------------------------------------------------


_TIME_PREV = struct.Struct(">ii")
_PREV_AT = 16  # the prev link's place in an entry (after the key hash, offset and time diff)


def _whole_entries(buf: Buffer, geometry: IndexGeometry) -> int:
    """How many entry numbers (from 0) lie wholly in ``buf``."""
    return max((len(buf) - geometry.entries_base) // INDEX_ENTRY_SIZE, 0)


def _entry_table(buf: Buffer, geometry: IndexGeometry, whole: int) -> npt.NDArray[np.void]:
    """Entries ``0..whole-1`` of ``buf`` as one ENTRY_DTYPE array (a view, no copy)."""
    return np.frombuffer(buf, ENTRY_DTYPE, count=whole, offset=geometry.entries_base)


def _broker_path(
    buf: Buffer, geometry: IndexGeometry, count: int, head: int
) -> tuple[list[int], int]:
    """The entries ``IndexFile.selectPhyOffset`` reads from ``head``, in order, whatever the
    query: up to the first that ends every walk (a negative time diff ends it unread; a prev
    that is 0, above ``count`` or the entry itself ends it after it is read), or up to the
    first entry read twice, which is not listed; and where that cycle starts in the list (-1
    when the walk ends without one).

    Each entry is read once: a cycle costs one lap, not one lap per hit the broker collects.
    The links are followed in one call (:func:`~rmqinspect.format.speedups.follow_links`, in
    C when built) through the entries wholly in the buffer, and the broker's stops found in
    them with numpy; the walk goes on step by step only past the buffer's end.
    """
    base = geometry.entries_base
    # Entries below ``whole`` lie wholly in the buffer; those up to ``inside`` lie in the
    # configured file, the rest of them reading as zeros (the broker's extended mapping).
    whole = _whole_entries(buf, geometry)
    inside = geometry.index_num
    numbers, number = speedups.follow_links(buf, base, INDEX_ENTRY_SIZE, _PREV_AT, head, whole)
    if len(numbers):
        entries = _entry_table(buf, geometry, whole)[numbers]
        prev = entries["prev"].astype(np.int64)
        unread = np.flatnonzero((numbers >= inside) | (entries["time_diff"] < 0))
        last = np.flatnonzero((prev <= INVALID_INDEX) | (prev > count) | (prev == numbers))
        if len(unread) and (not len(last) or unread[0] <= last[0]):
            return numbers[: unread[0]].tolist(), -1  # that entry ends the walk unread
        if len(last):
            return numbers[: last[0] + 1].tolist(), -1
        if 0 < number < whole:  # met again: a cycle
            return numbers.tolist(), int(np.flatnonzero(numbers == number)[0])
    # Past the buffer's end (rare: a short buffer), step by step.
    path: list[int] = numbers.tolist()
    at = {n: k for k, n in enumerate(path)}
    unpack = _TIME_PREV.unpack_from
    while number not in at:
        if number >= inside:
            return path, -1
        if number < whole:
            time_diff, prev = unpack(buf, base + number * INDEX_ENTRY_SIZE + 12)
        else:
            time_diff, prev = _ENTRY.unpack(_zero_padded_entry(buf, geometry, number))[2:]
        if time_diff < 0:
            return path, -1
        at[number] = len(path)
        path.append(number)
        if prev <= INVALID_INDEX or prev > count or prev == number:
            return path, -1
        number = prev
    return path, at[number]


def _zero_padded_entry(buf: Buffer, geometry: IndexGeometry, number: int) -> bytes:
    """Entry ``number`` as the broker's full-size mapping reads it past a short buffer."""
    pos = geometry.entry_position(number)
    tail = bytes(buf[pos : len(buf)]) if pos < len(buf) else b""
    return tail.ljust(INDEX_ENTRY_SIZE, b"\0")


def _path_entries(buf: Buffer, geometry: IndexGeometry, path: list[int]) -> npt.NDArray[np.void]:
    """The entries of ``path`` as one ENTRY_DTYPE array (zeros past a short buffer)."""
    whole = _whole_entries(buf, geometry)
    numbers = np.array(path, np.int64)
    entries = np.zeros(len(path), ENTRY_DTYPE)
    inside = numbers < whole
    if inside.any():
        entries[inside] = _entry_table(buf, geometry, whole)[numbers[inside]]
    for k in np.flatnonzero(~inside):
        entries[k] = np.frombuffer(_zero_padded_entry(buf, geometry, path[k]), ENTRY_DTYPE)[0]
    return entries


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
    count = header.loaded_index_count
    key_hash = index_key_hash(key)
    slot_pos = geometry.slot_position(key_hash % geometry.slot_num)
    slot_value = _I32.unpack_from(buf, slot_pos)[0] if slot_pos + 4 <= len(buf) else 0
    if slot_value <= INVALID_INDEX or slot_value > count or count <= 1 or len(found) >= max_num:
        return
    path, cycle_start = _broker_path(buf, geometry, count, slot_value)
    if not path:
        return
    entries = _path_entries(buf, geometry, path)
    # timeRead as the broker computes it, a Java long: unsigned arithmetic wraps like it does.
    begin_ts = np.uint64(header.begin_timestamp & 0xFFFF_FFFF_FFFF_FFFF)
    diff_ms = entries["time_diff"].astype(np.int64) * 1000  # a positive int times 1000: exact
    time_read = (diff_ms.astype(np.uint64) + begin_ts).view(np.int64)
    early = np.flatnonzero(time_read < begin)
    if len(early):  # the entry older than the window is read, then the walk stops
        stop = int(early[0]) + 1
        entries, time_read, cycle_start = entries[:stop], time_read[:stop], -1
    hit = (entries["key_hash"] == key_hash) & (time_read >= begin) & (time_read <= end)
    hits = [int(v) for v in entries["phy_offset"][hit]]
    room = max_num - len(found)
    found.extend(hits[:room])
    if cycle_start < 0 or len(hits) >= room:
        return
    # The broker laps a cycle for as long as a lap collects a hit, until max_num is reached;
    # a lap without one would spin forever, and the walk stops there instead.
    lap = [int(v) for v in entries["phy_offset"][cycle_start:][hit[cycle_start:]]]
    if lap:
        found.extend(itertools.islice(itertools.cycle(lap), room - len(hits)))


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
        table = np.frombuffer(buf, ENTRY_DTYPE, entries, geometry.entry_position(1))
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


def index_keys(topic: str, uniq_key: str | None, keys: str | None) -> list[str]:
    """The strings ``IndexService.buildIndex`` puts for a message, in order (spec 7.4)."""
    return [index_key(topic, key) for key in index_key_values(uniq_key, keys)]
