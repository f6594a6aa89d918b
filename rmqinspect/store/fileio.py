"""How a store file is opened and read at the OS level (:mod:`rmqinspect.store.files` is where
the store's readers take these from): never blocking, never following a link, a regular file
only, never more bytes than asked for, and sparse holes never walked."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rmqinspect.errors import StoreError

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
READ_CHUNK = 1 << 20


def file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path) -> int:
    """Open a store file for reading: the only way rmqinspect opens one.

    ``lstat`` first, so nothing that is not a regular file is ever opened (opening a FIFO or a
    device can block or act); then ``O_RDONLY | O_NONBLOCK | O_NOFOLLOW`` and ``fstat`` again,
    so a file swapped in between is refused too. Symlinks are not followed: what a store holds
    is judged, not what a link points to. Raises :class:`StoreError` naming the file, except for
    a missing one (``FileNotFoundError``/``NotADirectoryError``, which callers tell apart).
    """
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            raise StoreError(
                f"is a symbolic link (to {link_target(path)!r}); not followed", str(path)
            )
        if not stat.S_ISREG(mode):
            raise StoreError(f"is {file_kind(mode)}, not a regular file; not read", str(path))
        fd = os.open(path, _OPEN_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise StoreError("is a symbolic link; not followed", str(path)) from None
        raise StoreError(f"cannot open: {err.strerror or err}", str(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise StoreError(f"is {file_kind(mode)}, not a regular file; not read", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass(frozen=True, slots=True)
class SmallFile:
    """The first bytes of a small file (at most what the caller asked for) and its size."""

    data: bytes
    size: int

    @property
    def truncated(self) -> bool:
        return self.size > len(self.data)


def read_small(path: Path, limit: int) -> SmallFile | None:
    """At most ``limit`` bytes of a small store file (checkpoint, markers, config JSON), however
    large it is or says it is; None when it does not exist."""
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        size = os.fstat(fd).st_size
        chunks: list[bytes] = []
        got = 0
        while got < limit:
            chunk = os.read(fd, min(limit - got, READ_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return SmallFile(b"".join(chunks), size)
    except OSError as err:
        raise StoreError(f"cannot read: {err.strerror or err}", str(path)) from None
    finally:
        os.close(fd)


# --- sparse files -------------------------------------------------------------------------------


def data_extents(fd: int, start: int, end: int) -> Iterator[tuple[int, int]]:
    """``[a, b)`` ranges of ``[start, end)`` that hold data (``SEEK_DATA``/``SEEK_HOLE``); holes
    read as zeros. Where the file system cannot tell, the whole range is one extent."""
    pos = start
    while pos < end:
        try:
            a = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as err:
            if err.errno != errno.ENXIO:
                yield pos, end
            return
        if a >= end:
            return
        b = min(os.lseek(fd, a, os.SEEK_HOLE), end)
        yield a, b
        pos = b


def last_data_end(fd: int, size: int) -> int:
    """Where the last data extent of a file ends: past it the file is a hole (zeros). Probed
    backwards from the end in doubling steps, so a huge sparse file costs a few system calls."""
    step = READ_CHUNK
    while size > 0:
        lo = max(0, size - step)
        try:
            first = os.lseek(fd, lo, os.SEEK_DATA)
        except OSError as err:
            if err.errno != errno.ENXIO:
                return size  # no SEEK_DATA here: assume data to the end
            if lo == 0:
                return 0
            step *= 2
            continue
        end = first
        for _, b in data_extents(fd, first, size):
            end = b
        return end
    return 0


def link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to ask
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        info = ctypes.CDLL(None).mallinfo2  # glibc 2.33 and later
    except (OSError, AttributeError):
        return None
    info.restype = _MallInfo2
    found: Callable[[], _MallInfo2] = info
    return found


_MALLINFO2 = _mallinfo2()


def release_freed_heap(past: int = 0) -> None:
    """Hand the C heap's free pages back to the kernel (glibc's ``malloc_trim``, which frees the
    pages of free chunks inside the heap too). Where a walk's long-lived allocations (the
    Parquet writer's row-group metadata) land between its runs' freed buffers, glibc keeps
    those pages: the heap grew with the store though what it held hardly did. ``past``: only
    once the heap's free chunks hold more than that many bytes (each trim costs the faults
    that give the pages back, a tenth of an export's time if done at every row group)."""
    if _MALLOC_TRIM is None:
        return
    if past and _MALLINFO2 is not None and _MALLINFO2().fordblks <= past:
        return
    _MALLOC_TRIM(0)
