"""Store files: the one way they are opened, listed, read and mapped, always read-only.

Every reader in :mod:`rmqinspect.store` goes through this module (its open and read primitives are
:mod:`rmqinspect.store.fileio`'s, imported from here), so hostile input is met in one place:
:func:`open_regular` never blocks (a FIFO or device where a file should be is refused
before anything is read), never follows a symlink, and accepts only a regular file;
:func:`read_small` never reads more than its caller's cap, whatever a file's size says;
:func:`list_family` lists a directory without following or opening anything, and parses names
as the broker writes them (:mod:`rmqinspect.format.names`); :class:`MappedFiles` maps files
read-only and knows where their data ends (sparse holes are never walked).

A family (the commitlog, one consume queue) is a directory of files whose names are the 20-digit
offset of their first byte. :class:`FileQueue` orders them, infers their configured size, finds the
file holding an offset by bisection and reports the layout problems the broker would trip over.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import mmap
import os
import stat
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from rmqinspect.errors import StoreError
from rmqinspect.format.crc import crc32c_zeros
from rmqinspect.format.names import fits_offset_stream, parse_offset_name
from rmqinspect.store import mapguard
from rmqinspect.store.fileio import READ_CHUNK, file_kind, link_target
from rmqinspect.store.fileio import SmallFile as SmallFile
from rmqinspect.store.fileio import data_extents as data_extents
from rmqinspect.store.fileio import last_data_end as last_data_end
from rmqinspect.store.fileio import open_regular as open_regular
from rmqinspect.store.fileio import read_small as read_small
from rmqinspect.store.mapguard import Guard

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# The last commitlog file is copied rather than mapped up to this size (see MappedFiles).
SNAPSHOT_MAX_BYTES = 1 << 30
# Files up to this size are read whole with one pread and kept (see MappedFiles), up to
# COPIES_MAX_BYTES of them at once.
COPY_MAX_BYTES = 4096  # a page: mapping a smaller file costs a page and four system calls
COPIES_MAX_BYTES = 64 << 20


# --- families -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreFile:
    path: Path
    start: int  # offset of the first byte in the family's stream (the file name)
    length: int  # length on disk when listed

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True, slots=True)
class LayoutProblem:
    """Something about the files themselves (not their content) that is wrong."""

    # stable id: bad_name, wrong_size, gap, overlap, zero_length, directory_entry, symlink,
    # not_regular, unreadable
    kind: str
    path: str
    message: str
    broker_fails_to_load: bool = False


@dataclass
class FileQueue:
    """The files of one family in stream order (``MappedFileQueue`` without the writing)."""

    directory: Path
    file_size: int
    files: list[StoreFile] = field(default_factory=list)
    problems: list[LayoutProblem] = field(default_factory=list)

    @property
    def min_offset(self) -> int:
        """First offset of the first file; -1 when there are none (``getMinOffset``)."""
        return self.files[0].start if self.files else -1

    @property
    def end_offset(self) -> int:
        """End of the last file's mapped space (its start + configured size)."""
        return self.files[-1].start + self.file_size if self.files else 0

    def find(self, offset: int) -> StoreFile | None:
        """The file whose ``[start, start + file_size)`` holds ``offset``, by bisection."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        f = self.files[i]
        return f if offset < f.start + self.file_size else None

    def find_many(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
        """:meth:`find` for many offsets: the index of each one's file, -1 where none holds it."""
        import numpy as np  # here: commands that read one record start without numpy

        starts = np.array(self._starts, np.int64)
        which = np.searchsorted(starts, offsets, side="right") - 1
        inside = which >= 0
        # start <= offset here, so the difference cannot overflow (a sum near 2**63 could)
        inside[inside] = offsets[inside] - starts[which[inside]] < self.file_size
        out: npt.NDArray[np.intp] = np.where(inside, which, -1)
        return out

    def index_of(self, file: StoreFile) -> int:
        return self.files.index(file)

    @functools.cached_property
    def _starts(self) -> list[int]:
        return [f.start for f in self.files]

    def gaps(self) -> list[tuple[int, int]]:
        """Missing ``[start, end)`` ranges between consecutive files."""
        out = []
        for a, b in zip(self.files, self.files[1:], strict=False):
            if b.start > a.start + self.file_size:
                out.append((a.start + self.file_size, b.start))
        return out

    def overlaps(self) -> list[tuple[StoreFile, StoreFile]]:
        """Consecutive files whose names put the second inside the first."""
        return [
            (a, b)
            for a, b in zip(self.files, self.files[1:], strict=False)
            if b.start < a.start + self.file_size
        ]


@dataclass(frozen=True, slots=True)
class Listing:
    """A directory's regular files (name, lstat size) and what else it holds, as problems."""

    files: list[tuple[Path, int]]
    problems: list[LayoutProblem]


def list_directory(directory: Path, what: str) -> Listing:
    """Regular files of ``directory`` by name, without following or opening anything: a
    symlink, FIFO, device or subdirectory is a problem, not a file. A missing directory is
    empty; one that cannot be listed raises :class:`StoreError`."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return Listing([], [])
    except OSError as err:
        raise StoreError(f"cannot list {what}: {err.strerror or err}", str(directory)) from None
    files: list[tuple[Path, int]] = []
    problems: list[LayoutProblem] = []
    for entry in entries:
        path = Path(entry.path)
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # gone since the listing
        if stat.S_ISREG(st.st_mode):
            files.append((path, st.st_size))
        elif stat.S_ISDIR(st.st_mode):
            problems.append(
                LayoutProblem("directory_entry", str(path), f"unexpected directory in {what}")
            )
        elif stat.S_ISLNK(st.st_mode):
            target = link_target(path)
            problems.append(
                LayoutProblem(
                    "symlink",
                    str(path),
                    f"symbolic link in {what} (to {target!r}): not followed, not read",
                    broker_fails_to_load=False,
                )
            )
        else:
            problems.append(
                LayoutProblem(
                    "not_regular",
                    str(path),
                    f"{file_kind(st.st_mode)} in {what}: not read",
                    broker_fails_to_load=True,
                )
            )
    return Listing(files, problems)


def list_family(
    directory: Path,
    file_size: int | None,
    family: str,
    default_size: int,
    listing: Listing | None = None,
) -> FileQueue:
    """List one family directory the way ``MappedFileQueue.load`` does, without failing on oddities.

    The configured size is ``file_size`` when given, otherwise the most common length among the
    files (stores often run with a non-default size), otherwise ``default_size``. ``listing``:
    the directory's listing when the caller has just taken it.
    """
    if listing is None:
        listing = list_directory(directory, family)
    problems = list(listing.problems)
    named: list[tuple[Path, int, int]] = []
    for path, length in listing.files:
        start = parse_offset_name(path.name)
        if start is None:
            problems.append(
                LayoutProblem(
                    "bad_name",
                    str(path),
                    f"{family} file name is not a 20-digit offset",
                    broker_fails_to_load=True,
                )
            )
        else:
            named.append((path, start, length))
    if file_size is None:
        lengths = Counter(length for _, _, length in named if length > 0)
        file_size = lengths.most_common(1)[0][0] if lengths else default_size
    files: list[StoreFile] = []
    for path, start, length in named:
        if fits_offset_stream(start, file_size):
            files.append(StoreFile(path, start, length))
        else:
            problems.append(
                LayoutProblem(
                    "bad_name",
                    str(path),
                    f"{family} file at offset {start} would end past the largest offset "
                    f"(a Java long) with files of {file_size} bytes",
                    broker_fails_to_load=True,
                )
            )
    files.sort(key=lambda f: f.start)
    for i, f in enumerate(files):
        if f.length == file_size:
            continue
        last = i == len(files) - 1
        if f.length == 0 and last:
            problems.append(
                LayoutProblem(
                    "zero_length",
                    str(f.path),
                    f"zero-length last {family} file (4.9 refuses to load it; 5.3 deletes it)",
                    broker_fails_to_load=True,
                )
            )
        else:
            problems.append(
                LayoutProblem(
                    "wrong_size",
                    str(f.path),
                    f"{family} file is {f.length} bytes, expected {file_size}",
                    broker_fails_to_load=True,
                )
            )
    queue = FileQueue(directory, file_size, files, problems)
    for start, end in queue.gaps():
        problems.append(
            LayoutProblem(
                "gap",
                str(directory),
                f"{family} files are missing between offsets {start} and {end}",
            )
        )
    for a, b in queue.overlaps():
        problems.append(
            LayoutProblem(
                "overlap",
                str(b.path),
                f"{family} file {b.name} starts inside {a.name} (files of {file_size} bytes)",
            )
        )
    return queue


# --- reading ------------------------------------------------------------------------------------


def read_range(file: StoreFile, start: int, length: int) -> bytes:
    """``length`` bytes at ``start`` (fewer at the end of the file), read with ``pread``.

    For streaming a large file once: pages touched through a mapping stay in the process's
    resident set until it is unmapped, bytes read this way are gone once dropped.
    """
    parts: list[bytes] = []
    try:
        fd = open_regular(file.path)
    except (FileNotFoundError, NotADirectoryError):
        raise StoreError("vanished since the store was listed", str(file.path)) from None
    try:
        # pread allocates what it is asked for: ask no more than the file holds.
        length = min(length, max(0, os.fstat(fd).st_size - start))
        while length > 0:
            part = os.pread(fd, min(length, 1 << 30), start)
            if not part:
                break
            parts.append(part)
            start += len(part)
            length -= len(part)
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def content_crc32c(path: Path) -> tuple[int, int, int]:
    """(size, mtime in ns, CRC-32C of the content) of a regular store file, read once through
    its data extents: holes are checksummed as the zeros they read as without being read, so a
    sparse-extended file costs what its data costs."""
    import crc32c  # only the export checksums files: other commands start without it

    fd = open_regular(path)
    try:
        st = os.fstat(fd)
        crc, done = 0, 0
        for a, b in data_extents(fd, 0, st.st_size):
            crc = crc32c_zeros(crc, a - done)
            at = a
            while at < b:
                chunk = os.pread(fd, min(b - at, 16 * READ_CHUNK), at)
                if not chunk:
                    break  # the file shrank while read: the rest counts as zeros
                crc = crc32c.crc32c(chunk, crc)
                at += len(chunk)
            crc = crc32c_zeros(crc, b - at)
            done = b
        return st.st_size, st.st_mtime_ns, crc32c_zeros(crc, st.st_size - done)
    finally:
        os.close(fd)


def _snapshot(fd: int, size: int) -> tuple[mmap.mmap, int]:
    """A private copy of the file in anonymous memory (holes stay untouched zero pages) and
    where its data ends. MAP_PRIVATE: mmap's default for anonymous memory, MAP_SHARED, puts the
    pages in shmem, whose faults, and whose freeing at close, cost about half as much again
    (0.4 s more CPU for a 1 GiB file)."""
    copy = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
    end = 0
    with memoryview(copy) as whole:
        for a, b in data_extents(fd, 0, size):
            at = a
            while at < b:
                got = os.preadv(fd, [whole[at : min(b, at + READ_CHUNK)]], at)
                if got <= 0:
                    break  # the file shrank: the rest stays zeros
                at += got
            end = b
    return copy, end


class MappedFiles:
    """Read-only views of store files, a bounded number open at once.

    Files are mapped with ``ACCESS_READ``: the inspected store can never be written through
    them. A map covers the file as it is when first viewed, not as it was listed. The files in
    :attr:`snapshot_paths` (the commitlog's last file while a broker holds the store's lock: the
    only file a live broker writes) are
    copied instead, up to :data:`SNAPSHOT_MAX_BYTES`, and kept for the whole run: every step
    then sees the same bytes, and a writer truncating the file cannot fault a reader. Every
    other map is guarded (:mod:`rmqinspect.store.mapguard`): a file that shrinks while mapped
    reads as zeros past its new end, and the next :meth:`view`, :meth:`read` or
    :meth:`release` raises :class:`StoreError` naming it.

    A file of at most :data:`COPY_MAX_BYTES` (a small consume-queue file) is not mapped: it is
    read with one ``pread`` when first viewed and the bytes are kept, up to
    :data:`COPIES_MAX_BYTES` of such copies, the least recently used dropped first. A store of
    100,000 small queues then costs one open and one read per file, not a map and an unmap per
    step that reads it (only :attr:`max_open` maps stay open); a copy cannot fault.
    """

    def __init__(self, max_open: int = 32) -> None:
        self._max_open = max_open
        self._maps: OrderedDict[Path, mmap.mmap] = OrderedDict()
        self._copies: OrderedDict[Path, bytes] = OrderedDict()
        self._copied_bytes = 0
        self._guards: dict[Path, Guard] = {}
        self._since = mapguard.mark()  # faults before this instance are not its own
        self._pinned: dict[Path, mmap.mmap | None] = {}
        self._data_ends: dict[Path, int] = {}
        self.snapshot_paths: set[Path] = set()

    def view(self, file: StoreFile) -> memoryview:
        """A read-only memoryview of the whole file; release it (``with``) before the file is
        closed."""
        m = self._map(file.path)
        if m is None:
            return memoryview(b"")
        return memoryview(m) if isinstance(m, bytes) else memoryview(m).toreadonly()

    def check(self) -> None:
        """Raise :class:`StoreError` naming a file that shrank while one of these maps (or any
        other in this process) was read since this instance was made."""
        mapguard.check(self._since)

    def read(self, file: StoreFile, start: int, length: int) -> bytes:
        """Copy ``length`` bytes at ``start``; shorter at the end of the file."""
        if length <= 0 or start < 0:
            return b""
        m = self._map(file.path)
        if m is None:
            return b""
        data = m[start : start + length]
        mapguard.check(self._since)  # zeros copied from a shrunken file are never returned
        return data

    def release(self, file: StoreFile, start: int, end: int) -> None:
        """Drop this process's pages of ``[start, end)`` of a mapped file (rounded inward to
        whole pages): a long walk keeps only what it still reads mapped, so its memory stays
        flat however large the files (the data stays in the page cache). A walk releases what
        it has read: where that was cut short by a shrinking file, this raises."""
        mapguard.check(self._since)
        m = self._maps.get(file.path)
        first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
        # To the end of the file: its last page too, though the file ends inside it.
        last = file.length if end >= file.length else end // mmap.PAGESIZE * mmap.PAGESIZE
        if m is not None and last > first and hasattr(m, "madvise"):
            m.madvise(mmap.MADV_DONTNEED, first, last - first)

    def read_padded(self, file: StoreFile | None, start: int, length: int) -> bytes:
        """``length`` bytes at ``start`` as the broker's full-size mapping shows them: zeros past
        the end of the file on disk (or for a file that does not exist yet)."""
        if length <= 0:
            return b""
        data = self.read(file, start, length) if file is not None and start < file.length else b""
        return data if len(data) == length else data + bytes(length - len(data))

    def data_end(self, file: StoreFile) -> int:
        """Where the file's data ends: only zeros (holes) lie past it. Scans for the end of a
        zero tail start here, so a sparse 100 GiB file costs nothing."""
        end = self._data_ends.get(file.path)
        if end is None and 0 < file.length <= COPY_MAX_BYTES:
            self._map(file.path)  # a small file: its copy is taken with its data end
            end = self._data_ends.get(file.path)
        if end is None:
            fd = self._open(file.path)
            try:
                end = last_data_end(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            self._data_ends[file.path] = end
        return end

    def _open(self, path: Path) -> int:
        try:
            return open_regular(path)
        except (FileNotFoundError, NotADirectoryError):
            raise StoreError("vanished since the store was listed", str(path)) from None

    def _map(self, path: Path) -> mmap.mmap | bytes | None:
        if path in self._pinned:
            return self._pinned[path]
        mapguard.check(self._since)
        kept = self._copies.get(path)
        if kept is not None:
            self._copies.move_to_end(path)
            return kept
        m = self._maps.get(path)
        if m is not None:
            self._guards[path].recheck()
            self._maps.move_to_end(path)
            return m
        fd = self._open(path)
        try:
            size = os.fstat(fd).st_size
            if 0 < size <= COPY_MAX_BYTES and path not in self.snapshot_paths:
                return self._copy(path, fd, size)
            if path in self.snapshot_paths and size <= SNAPSHOT_MAX_BYTES:
                copy: mmap.mmap | None = None
                self._data_ends[path] = 0
                if size:
                    copy, self._data_ends[path] = _snapshot(fd, size)
                self._pinned[path] = copy
                return copy
            if not size:
                return None
            m = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            self._guards[path] = Guard(m, path, fd)
        except OSError as err:
            raise StoreError(f"cannot read: {err.strerror or err}", str(path)) from None
        finally:
            os.close(fd)
        self._maps[path] = m
        while len(self._maps) > self._max_open:
            old_path, old = self._maps.popitem(last=False)
            del self._guards[old_path]
            _close(old)
        self._guards[path].recheck()
        return m

    def _copy(self, path: Path, fd: int, size: int) -> bytes:
        """Read a small file whole (holes read as zeros) and keep it; its data end with it."""
        data = os.pread(fd, size, 0)
        self._data_ends.setdefault(path, last_data_end(fd, len(data)))
        self._copies[path] = data
        self._copied_bytes += len(data)
        while self._copied_bytes > COPIES_MAX_BYTES:
            _, old = self._copies.popitem(last=False)
            self._copied_bytes -= len(old)
        return data

    def close(self) -> None:
        self._copies.clear()
        self._copied_bytes = 0
        while self._maps:
            _, m = self._maps.popitem()
            _close(m)
        self._guards.clear()
        for copy in self._pinned.values():
            if copy is not None:
                _close(copy)
        self._pinned.clear()

    def __enter__(self) -> MappedFiles:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _close(m: mmap.mmap) -> None:
    # A memoryview still exported by a caller keeps the map alive; it is unmapped when collected.
    with contextlib.suppress(BufferError):
        m.close()


HOME_PREFIX = "dledger-"  # dledger-<selfId>: DLedger's storeBaseDir under the store root


def dledger_homes(root: Path) -> list[Path]:
    """``dledger-*`` directories under a store root (real ones: links are not followed). Here,
    not in :mod:`rmqinspect.store.dledger`, so that opening a plain store needs no numpy."""
    return sorted(p for p in root.glob(HOME_PREFIX + "*") if p.is_dir() and not p.is_symlink())
