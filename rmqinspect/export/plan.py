"""Partition planning on the driver: what each task of either engine reads.

Commitlog files split into byte ranges at record boundaries found by following the TOTALSIZE
chain (a 1 GiB file becomes several ranges, so a few big files still use every core); consume
queues split into queue-offset slices, index files into entry-number slices. Parts are small
frozen dataclasses: they pickle into Spark partitions and process-pool tasks, and a task reopens
the store from a :class:`StoreRef`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rmqinspect.analysis.indexes import entry_numbers, open_index_files
from rmqinspect.analysis.queues import all_queue_bounds
from rmqinspect.export.records import record_runs
from rmqinspect.export.timers import TimersPart
from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE
from rmqinspect.format.index import INDEX_ENTRY_SIZE
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store, StoreOptions

SPLIT_BYTES = 128 << 20  # commitlog bytes per range
SLICE_UNITS = 250_000  # consume-queue units per slice (each unit is checked against its record)
GROUP_QUEUES = 1000  # small queues per slice: enough slices that every core has some
SLICE_ENTRIES = 2_000_000  # index entries per slice
HASH_GROUP_BYTES = 1 << 30  # source-file bytes hashed per task


@dataclass(frozen=True, slots=True)
class StoreRef:
    """How a task reopens the store: the absolute root and every setting resolved on the
    driver (profile, file sizes, the commitlog files it listed), so all tasks read the store
    the same way, even one a live broker adds files to meanwhile."""

    root: str
    options: StoreOptions

    @classmethod
    def of(cls, store: Store) -> StoreRef:
        options = replace(
            store.options,
            profile=store.profile.profile,
            commitlog_file_size=store.commitlog.file_size,
            cq_file_size=store.cq_file_size,
            commitlog_files=tuple(f.name for f in store.commitlog.files),
        )
        return cls(str(store.root.resolve()), options)

    def open(self) -> Store:
        store = Store.open(self.root, self.options)
        try:
            store.read_rocksdb_queues()  # the driver's queues include the database's
        except BaseException:
            store.close()
            raise
        return store


@dataclass(frozen=True, slots=True)
class CommitlogRange:
    """The records starting in file positions ``[begin, end)`` of one commitlog file: ``begin``
    is a record boundary of the scan (or 0), ``end`` the next range's begin (or the file's
    length for its last range)."""

    number: int
    file: str  # file name in the commitlog's directory
    begin: int
    end: int
    directory: str = "commitlog"  # relative to the store (dledger-<selfId>/data for DLedger)
    # Where a walk of the file that reaches ``begin`` may start: ``begin``, or the first damage
    # the scan met in the file before it (past damage, walks with other checks may resync
    # elsewhere, so the restart emulation's walk is resumed from there).
    walk_from: int = 0

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def source(self) -> str:
        return f"{self.directory}/{self.file}"


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Queue offsets ``[start, stop)`` of one consume queue."""

    topic: str
    queue_id: int
    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class QueueSlice:
    """Consume-queue units one task exports: a slice of one queue, or several small queues
    whole (a part and a Parquet file for every one of 100,000 one-unit queues cost more than
    their units)."""

    number: int
    ranges: tuple[QueueRange, ...]

    @property
    def nbytes(self) -> int:
        return sum(r.stop - r.start for r in self.ranges) * CQ_STORE_UNIT_SIZE

    @property
    def source(self) -> str:
        if len(self.ranges) > 1:
            return "consumequeue"
        r = self.ranges[0]
        return f"consumequeue/{r.topic}/{r.queue_id}"


@dataclass(frozen=True, slots=True)
class IndexSlice:
    """Entry numbers ``[start, stop)`` of one index file."""

    number: int
    file: str  # file name in index/
    start: int
    stop: int

    @property
    def nbytes(self) -> int:
        return (self.stop - self.start) * INDEX_ENTRY_SIZE

    @property
    def source(self) -> str:
        return f"index/{self.file}"


@dataclass(frozen=True, slots=True)
class OffsetsPart:
    """The config files holding consumer and delay offsets (one small task)."""

    number: int = 0
    nbytes: int = 0
    source: str = "config"


@dataclass(frozen=True, slots=True)
class FileGroup:
    """Store files (paths relative to the root) whose CRC32C one task computes."""

    number: int
    paths: tuple[str, ...]
    nbytes: int
    source: str = ""  # hashing reads files the other parts count already


def commitlog_file(store: Store, name: str) -> StoreFile:
    for f in store.commitlog.files:
        if f.name == name:
            return f
    raise FileNotFoundError(f"commitlog file {name} is gone from {store.commitlog.directory}")


def file_ranges(
    store: Store, f: StoreFile, split_bytes: int, directory: str
) -> Generator[CommitlogRange]:
    """The ranges of about ``split_bytes`` of one file (numbered from 0 in the file), cut at
    record boundaries the scan reaches (its runs are read without decoding), so every range
    reads what a scan of the whole file reads there. A range is yielded as soon as the walk
    finds where the next one starts: a reader of the k-th range walks the headers up to its
    end only. In a DLedger store the cuts are records inside entries: a range starts at its
    first record's entry."""
    if not f.length:
        return
    begin, walk_from = 0, 0
    damage: int | None = None  # the first damage the scan meets in the file
    number = 0
    for run in record_runs(store, f, 0, f.length, decode=False):
        if damage is None:
            damage = run.damage_at
        positions = run.positions
        while len(positions):
            i = int(np.searchsorted(positions, begin + split_bytes))
            if i >= len(positions):
                break
            cut = int(positions[i])
            yield CommitlogRange(number, f.name, begin, cut, directory, walk_from)
            number += 1
            begin, walk_from = cut, cut if damage is None else damage
            positions = positions[i + 1 :]
    yield CommitlogRange(number, f.name, begin, f.length, directory, walk_from)


def plan_commitlog(store: Store, split_bytes: int = SPLIT_BYTES) -> list[CommitlogRange]:
    """Every file's :func:`file_ranges`, numbered across the store (a whole walk of the
    commitlog: the engines plan :class:`CommitlogChunk` parts instead, which read nothing)."""
    directory = _directory(store)
    ranges = [
        r for f in store.commitlog.files for r in file_ranges(store, f, split_bytes, directory)
    ]
    return [replace(r, number=i) for i, r in enumerate(ranges)]


@dataclass(frozen=True, slots=True)
class CommitlogChunk:
    """The ``index``-th :func:`file_ranges` range of one commitlog file, planned from the
    file's length alone: the task that reads it finds its bounds (:func:`resolve_chunk`) by
    walking the file's record headers up to it, so no walk of the store precedes the tasks.
    Ranges start at least ``split_bytes`` apart, so a file has at most ``ceil(length /
    split_bytes)`` of them; a chunk past the file's last range reads nothing."""

    number: int
    file: str
    index: int
    split_bytes: int
    length: int  # the file's
    directory: str = "commitlog"

    @property
    def nbytes(self) -> int:  # about: the range's own bounds are known to its task only
        return max(0, min(self.split_bytes, self.length - self.index * self.split_bytes))

    @property
    def source(self) -> str:
        return f"{self.directory}/{self.file}"


Part = (
    CommitlogRange | CommitlogChunk | QueueSlice | IndexSlice | OffsetsPart | FileGroup | TimersPart
)


def plan_chunks(store: Store, split_bytes: int = SPLIT_BYTES) -> list[CommitlogChunk]:
    """The commitlog's parts, from the files' lengths: nothing of the commitlog is read."""
    directory = _directory(store)
    chunks: list[CommitlogChunk] = []
    for f in store.commitlog.files:
        for index in range(-(-f.length // split_bytes)):
            chunk = CommitlogChunk(len(chunks), f.name, index, split_bytes, f.length, directory)
            chunks.append(chunk)
    return chunks


def resolve_chunk(store: Store, chunk: CommitlogChunk) -> CommitlogRange | None:
    """The range ``chunk`` stands for (numbered as the chunk), or None past the file's last."""
    f = commitlog_file(store, chunk.file)
    ranges = file_ranges(store, f, chunk.split_bytes, chunk.directory)
    try:
        found = next(itertools.islice(ranges, chunk.index, None), None)
    finally:
        ranges.close()  # the walk's pages are released now, not when collected
    return None if found is None else replace(found, number=chunk.number)


def _directory(store: Store) -> str:
    return store.commitlog.directory.relative_to(store.root).as_posix()


def plan_queues(
    store: Store, slice_units: int = SLICE_UNITS, group_queues: int = GROUP_QUEUES
) -> list[QueueSlice]:
    """Each queue's units from the first on disk up to the broker's max offset: a queue of
    ``slice_units`` or more in slices of its own, smaller ones whole, up to ``group_queues``
    of them and ``slice_units`` units together in one slice."""
    slices: list[QueueSlice] = []
    group: list[QueueRange] = []
    units = 0
    for b in all_queue_bounds(store):
        count = b.max_offset - b.first_unit
        if count <= 0:
            continue
        if count >= slice_units:
            for start in range(b.first_unit, b.max_offset, slice_units):
                stop = min(start + slice_units, b.max_offset)
                queue = QueueRange(b.topic, b.queue_id, start, stop)
                slices.append(QueueSlice(len(slices), (queue,)))
            continue
        if group and (units + count > slice_units or len(group) >= group_queues):
            slices.append(QueueSlice(len(slices), tuple(group)))
            group, units = [], 0
        group.append(QueueRange(b.topic, b.queue_id, b.first_unit, b.max_offset))
        units += count
    if group:
        slices.append(QueueSlice(len(slices), tuple(group)))
    return slices


def plan_index(store: Store, slice_entries: int = SLICE_ENTRIES) -> list[IndexSlice]:
    slices: list[IndexSlice] = []
    for info in open_index_files(store):
        numbers = entry_numbers(store, info)
        for start in range(numbers.start, numbers.stop, slice_entries):
            stop = min(start + slice_entries, numbers.stop)
            slices.append(IndexSlice(len(slices), info.file.name, start, stop))
    return slices


def source_files(root: Path) -> Iterator[tuple[str, int, int]]:
    """Every regular file under the store (relative path, size, mtime in ns), in path order
    (a directory's files, then its subdirectories); links are not followed. One ``lstat`` a
    file from its directory entry, no paths built: a store of 100,000 queue directories is
    walked three times by an export (its files before, to hash, and after)."""
    pending = [(os.fspath(root), "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue  # as os.walk: what cannot be listed holds nothing to hash
        subdirectories = []
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                subdirectories.append((e.path, f"{prefix}{e.name}/"))
            elif e.is_file(follow_symlinks=False):
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone since the listing
                yield prefix + e.name, st.st_size, st.st_mtime_ns
        pending.extend(reversed(subdirectories))


def plan_hashes(root: Path, group_bytes: int = HASH_GROUP_BYTES) -> list[FileGroup]:
    groups: list[FileGroup] = []
    paths: list[str] = []
    size = 0
    for path, length, _ in source_files(root):
        paths.append(path)
        size += length
        if size >= group_bytes:
            groups.append(FileGroup(len(groups), tuple(paths), size))
            paths, size = [], 0
    if paths:
        groups.append(FileGroup(len(groups), tuple(paths), size))
    return groups
