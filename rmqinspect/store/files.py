"""File families of a store: ordered lists of offset-named files, mapped read-only.

A family (the commitlog, one consume queue) is a directory of files whose names are the 20-digit
offset of their first byte. :class:`FileQueue` orders them, infers their configured size, finds the
file holding an offset by bisection and reports the layout problems the broker would trip over.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import functools
import mmap
import os
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from rmqinspect.errors import StoreError


@dataclass(frozen=True, slots=True)
class StoreFile:
    path: Path
    start: int  # offset of the first byte in the family's stream (the file name)
    length: int  # length on disk

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True, slots=True)
class LayoutProblem:
    """Something about the files themselves (not their content) that is wrong."""

    kind: str  # stable id: bad_name, wrong_size, gap, zero_length, directory_entry
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

    def index_of(self, file: StoreFile) -> int:
        return self.files.index(file)

    @functools.cached_property
    def _starts(self) -> list[int]:
        return [f.start for f in self.files]

    def gaps(self) -> list[tuple[int, int]]:
        """Missing ``[start, end)`` ranges between consecutive files."""
        out = []
        for a, b in zip(self.files, self.files[1:], strict=False):
            if b.start != a.start + self.file_size:
                out.append((a.start + self.file_size, b.start))
        return out


def list_family(
    directory: Path, file_size: int | None, family: str, default_size: int
) -> FileQueue:
    """List one family directory the way ``MappedFileQueue.load`` does, without failing on oddities.

    The configured size is ``file_size`` when given, otherwise the most common length among the
    files (stores often run with a non-default size), otherwise ``default_size``.
    """
    problems: list[LayoutProblem] = []
    files: list[StoreFile] = []
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return FileQueue(directory, file_size or default_size)
    except NotADirectoryError as exc:
        raise StoreError(f"{family} path is not a directory", str(directory)) from exc
    for entry in entries:
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            problems.append(
                LayoutProblem("directory_entry", str(path), f"unexpected directory in {family}")
            )
            continue
        if not (entry.name.isascii() and entry.name.isdigit()):
            problems.append(
                LayoutProblem(
                    "bad_name",
                    str(path),
                    f"{family} file name is not a decimal offset",
                    broker_fails_to_load=True,
                )
            )
            continue
        files.append(StoreFile(path, int(entry.name), entry.stat().st_size))
    files.sort(key=lambda f: f.start)
    if file_size is None:
        lengths = Counter(f.length for f in files if f.length > 0)
        file_size = lengths.most_common(1)[0][0] if lengths else default_size
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
    return queue


def read_range(file: StoreFile, start: int, length: int) -> bytes:
    """``length`` bytes at ``start`` (fewer at the end of the file), read with ``pread``.

    For streaming a large file once: pages touched through a mapping stay in the process's
    resident set until it is unmapped, bytes read this way are gone once dropped.
    """
    parts: list[bytes] = []
    fd = os.open(file.path, os.O_RDONLY)
    try:
        while length > 0:
            part = os.pread(fd, length, start)
            if not part:
                break
            parts.append(part)
            start += len(part)
            length -= len(part)
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def zeros_from(file: StoreFile) -> int:
    """A position past which the file holds only zeros: the end of its last data extent
    (``SEEK_DATA``/``SEEK_HOLE``), so a search for the end of the data never reads the
    never-written tail of a preallocated file (the broker's files are sparse until written).
    The file's length where the filesystem cannot tell."""
    if not file.length or not hasattr(os, "SEEK_HOLE"):
        return file.length
    try:
        fd = os.open(file.path, os.O_RDONLY)
    except OSError:
        return file.length
    try:
        end, at = 0, 0
        while at < file.length:
            try:
                at = os.lseek(fd, at, os.SEEK_DATA)
            except OSError as err:
                if err.errno != errno.ENXIO:
                    raise
                break  # no data at or after ``at``
            at = os.lseek(fd, at, os.SEEK_HOLE)
            end = at
        return min(end, file.length)
    except OSError:
        return file.length
    finally:
        os.close(fd)


class MappedFiles:
    """Read-only memory maps of store files, a bounded number open at once.

    Maps are opened with ``ACCESS_READ``: the inspected store can never be written through them.
    """

    def __init__(self, max_open: int = 32) -> None:
        self._max_open = max_open
        self._maps: OrderedDict[Path, mmap.mmap] = OrderedDict()

    def view(self, file: StoreFile) -> memoryview:
        """A memoryview of the whole file; release it (``with``) before the file is closed."""
        return memoryview(self._map(file.path)) if file.length else memoryview(b"")

    def read(self, file: StoreFile, start: int, length: int) -> bytes:
        """Copy ``length`` bytes at ``start``; shorter at the end of the file."""
        if not file.length:
            return b""
        m = self._map(file.path)
        return m[start : start + length]

    def release(self, file: StoreFile, start: int, end: int) -> None:
        """Drop this process's pages of ``[start, end)`` of a mapped file (rounded inward to
        whole pages): a long walk keeps only what it still reads mapped, so its memory stays
        flat however large the files (the data stays in the page cache)."""
        m = self._maps.get(file.path)
        first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
        last = min(end, file.length) // mmap.PAGESIZE * mmap.PAGESIZE
        if m is not None and last > first and hasattr(m, "madvise"):
            m.madvise(mmap.MADV_DONTNEED, first, last - first)

    def read_padded(self, file: StoreFile | None, start: int, length: int) -> bytes:
        """``length`` bytes at ``start`` as the broker's full-size mapping shows them: zeros past
        the end of the file on disk (or for a file that does not exist yet)."""
        if length <= 0:
            return b""
        data = self.read(file, start, length) if file is not None and start < file.length else b""
        return data if len(data) == length else data + bytes(length - len(data))

    def _map(self, path: Path) -> mmap.mmap:
        m = self._maps.get(path)
        if m is not None:
            self._maps.move_to_end(path)
            return m
        with open(path, "rb") as fh:
            m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self._maps[path] = m
        while len(self._maps) > self._max_open:
            _, old = self._maps.popitem(last=False)
            _close(old)
        return m

    def close(self) -> None:
        while self._maps:
            _, m = self._maps.popitem()
            _close(m)

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
