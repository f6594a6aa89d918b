"""Index files opened for reading: geometry resolution, headers, and ``index`` command data.

The slot and entry counts are broker configuration, not file content. They come from the
command line, else from the file size (defaults or the default 1:4 ratio), else from the
content: the first entry's physical offset equals the header's ``beginPhyOffset`` and the last
entry's equals ``endPhyOffset``, which pins down where the entry table starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format.index import (
    ENTRY_DTYPE,
    HASH_SLOT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    IndexEntry,
    IndexGeometry,
    IndexHeader,
    SlotStatistics,
    slot_statistics,
)
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store

CONTENT_INFERENCE_MAX_BYTES = 64 << 20  # beyond this, ask for --index-slots/--index-entries


@dataclass(frozen=True, slots=True)
class IndexFileInfo:
    """One index file: its header and geometry, or why it cannot be used."""

    file: StoreFile
    header: IndexHeader | None
    geometry: IndexGeometry | None
    geometry_basis: str  # "given", "file size", "content"
    error: str | None = None

    @property
    def usable(self) -> bool:
        return self.header is not None and self.geometry is not None and self.error is None


def open_index_files(store: Store, files: list[StoreFile] | None = None) -> list[IndexFileInfo]:
    """Every file under ``index/`` (or ``files``) in the broker's load order (by name). A file
    whose geometry cannot be told on its own (an empty one) takes that of a same-size sibling."""
    infos = [describe_index_file(store, f) for f in (store.index_files if files is None else files)]
    known = {i.file.length: i.geometry for i in infos if i.geometry is not None}
    out = []
    for i in infos:
        geometry = known.get(i.file.length)
        if i.geometry is None and i.header is not None and geometry is not None:
            i = IndexFileInfo(i.file, i.header, geometry, "same size as the other files")
        out.append(i)
    return out


def describe_index_file(store: Store, f: StoreFile) -> IndexFileInfo:
    try:
        header = IndexHeader.decode(store.maps.read(f, 0, INDEX_HEADER_SIZE))
    except DecodeError as err:
        return IndexFileInfo(f, None, None, "", f"{f.path}: {err.message}")
    try:
        geometry, basis = resolve_geometry(store, f, header)
    except DecodeError as err:
        return IndexFileInfo(f, header, None, "", f"{f.path}: {err.message}")
    return IndexFileInfo(f, header, geometry, basis)


def resolve_geometry(store: Store, f: StoreFile, header: IndexHeader) -> tuple[IndexGeometry, str]:
    slots, entries = store.options.index_slot_num, store.options.index_num
    if slots is not None or entries is not None:
        return IndexGeometry.infer(f.length, slots, entries), "given"
    with contextlib.suppress(DecodeError):  # no standard geometry fits: read the content
        return IndexGeometry.infer(f.length), "file size"
    geometry = _infer_from_content(store, f, header)
    if geometry is None:
        raise DecodeError(
            f"cannot tell maxHashSlotNum/maxIndexNum of a {f.length}-byte index file; "
            "pass --index-slots and --index-entries",
            0,
        )
    return geometry, "content"


def _infer_from_content(store: Store, f: StoreFile, header: IndexHeader) -> IndexGeometry | None:
    """The slot count whose entry table holds ``beginPhyOffset`` in entry 1 and
    ``endPhyOffset`` in the last entry, with every slot head hashing to its own slot."""
    count = header.loaded_index_count
    if count <= 1 or f.length > CONTENT_INFERENCE_MAX_BYTES:
        return None
    body = f.length - INDEX_HEADER_SIZE
    buf = store.view(f)
    try:
        words = np.frombuffer(buf, ">u4", body // 4, INDEX_HEADER_SIZE).astype(np.int64)
        found: IndexGeometry | None = None
        # body - 4 * slots must be a multiple of 20: only every fifth slot count fits.
        first = next(
            (s for s in range(1, 6) if (body - s * HASH_SLOT_SIZE) % INDEX_ENTRY_SIZE == 0), 0
        )
        for slots in range(first or body, body // HASH_SLOT_SIZE, 5):
            rest = body - slots * HASH_SLOT_SIZE
            if rest // INDEX_ENTRY_SIZE < count:
                break
            if _phy_at(words, slots, 1) != header.begin_phy_offset:
                continue
            if _phy_at(words, slots, count - 1) != header.end_phy_offset:
                continue
            candidate = IndexGeometry(slots, rest // INDEX_ENTRY_SIZE)
            if _heads_consistent(words, candidate, count):
                found = candidate
                break
        del words
        return found
    finally:
        buf.release()


def _phy_at(words: np.ndarray, slots: int, number: int) -> int:
    """The i64 phyOffset of entry ``number`` read from 32-bit words after the header."""
    w = slots + (number * INDEX_ENTRY_SIZE + 4) // 4
    if w + 1 >= len(words):
        return -1
    value = (int(words[w]) << 32) | int(words[w + 1])
    return value - (1 << 64) if value >> 63 else value


def _heads_consistent(words: np.ndarray, geometry: IndexGeometry, count: int) -> bool:
    heads = words[: geometry.slot_num]
    used = np.flatnonzero(heads)
    if used.size == 0 or int(heads.max()) >= count:
        return False
    entry_words = geometry.slot_num + heads[used] * (INDEX_ENTRY_SIZE // 4)
    if int(entry_words.max()) >= len(words):
        return False
    key_hash = words[entry_words]
    return bool(np.all(key_hash % geometry.slot_num == used))


# --- the ``index`` command ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexFileReport:
    info: IndexFileInfo
    statistics: SlotStatistics | None
    file: str  # relative to the store


def index_reports(store: Store, name: str | None = None) -> list[IndexFileReport]:
    """Header and slot statistics of every index file, or of the one named ``name``."""
    infos = open_index_files(store)
    if name is not None:
        infos = [i for i in infos if i.file.name == name or str(i.file.path) == name]
        if not infos:
            raise StoreError(f"no index file named {name}", str(store.root / "index"))
    out = []
    for info in infos:
        stats = None
        if info.usable:
            assert info.geometry is not None and info.header is not None
            buf = store.view(info.file)
            try:
                stats = slot_statistics(buf, info.geometry, info.header)
            finally:
                buf.release()
        out.append(IndexFileReport(info, stats, store.relative(info.file.path)))
    return out


@dataclass(frozen=True, slots=True)
class IndexEntryRow:
    file: str
    entry: IndexEntry
    slot: int  # the bucket keyHash maps to
    store_timestamp: int  # beginTimestamp + timeDiff * 1000, as the query path computes it


@dataclass(frozen=True, slots=True)
class IndexEntryBlock:
    """Consecutive entries of one file as columns (the fields of :class:`IndexEntryRow`)."""

    file: str
    number: npt.NDArray[np.int64]
    key_hash: npt.NDArray[np.int64]
    phy_offset: npt.NDArray[np.int64]
    time_diff: npt.NDArray[np.int64]
    prev: npt.NDArray[np.int64]
    slot: npt.NDArray[np.int64]  # -1 for a negative keyHash
    store_timestamp: npt.NDArray[np.int64]


def entry_numbers(store: Store, info: IndexFileInfo) -> range:
    """The written entries of one file, 1..indexCount-1, cut where the file on disk ends."""
    if not info.usable:
        return range(1, 1)
    assert info.geometry is not None and info.header is not None
    geometry = info.geometry
    fits = max(0, (info.file.length - geometry.entries_base) // INDEX_ENTRY_SIZE)
    return range(1, max(1, min(info.header.loaded_index_count, geometry.index_num, fits)))


def entry_blocks(
    store: Store, info: IndexFileInfo, numbers: range | None = None, rows: int = 1 << 16
) -> Iterator[IndexEntryBlock]:
    """The entries ``numbers`` (default: all of :func:`entry_numbers`) in blocks of ``rows``.
    A block's pages are dropped once the caller is done with it (the blocks are copies), so a
    reader of a whole 400 MB index file stays flat."""
    wanted = entry_numbers(store, info)
    if numbers is not None:
        wanted = range(max(wanted.start, numbers.start), min(wanted.stop, numbers.stop))
    if not wanted:
        return
    assert info.geometry is not None and info.header is not None
    geometry, header = info.geometry, info.header
    buf = store.view(info.file)
    try:
        for first in range(wanted.start, wanted.stop, rows):
            count = min(rows, wanted.stop - first)
            table = np.frombuffer(buf, ENTRY_DTYPE, count, geometry.entry_position(first))
            key_hash = table["key_hash"].astype(np.int64)
            time_diff = table["time_diff"].astype(np.int64)
            block = IndexEntryBlock(
                store.relative(info.file.path),
                np.arange(first, first + count, dtype=np.int64),
                key_hash,
                table["phy_offset"].astype(np.int64),
                time_diff,
                table["prev"].astype(np.int64),
                np.where(key_hash >= 0, key_hash % geometry.slot_num, -1),
                header.begin_timestamp + time_diff * 1000,
            )
            del table
            yield block
            end = geometry.entry_position(first + count)
            store.maps.release(info.file, geometry.entry_position(first), end)
    finally:
        buf.release()
        # The whole file: the pages that straddled two blocks, and the header and slots read
        # to find the entries, go too (a page another reader still wants is read again).
        store.maps.release(info.file, 0, info.file.length)


def iter_entries(store: Store, info: IndexFileInfo) -> Iterator[IndexEntryRow]:
    """Entries 1..indexCount-1 of one file, in write order."""
    for b in entry_blocks(store, info):
        for i in range(len(b.number)):
            yield IndexEntryRow(
                b.file,
                IndexEntry(
                    int(b.number[i]),
                    int(b.key_hash[i]),
                    int(b.phy_offset[i]),
                    int(b.time_diff[i]),
                    int(b.prev[i]),
                ),
                int(b.slot[i]),
                int(b.store_timestamp[i]),
            )
