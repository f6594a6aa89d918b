"""Store files that shrink while they are mapped: one error naming the file, never a SIGBUS death.

A map read past the end of a file that another process truncated (a copy in progress, a file
system repair) faults with SIGBUS, wherever the read is: numpy, pyarrow, the C loops. The C
extension ``_mapguard`` handles the signal for the maps :func:`guard` registers: the rest of the
map reads as zeros, the read finishes, and the fault is recorded. Nothing read since then is
trusted: :func:`check` raises :class:`StoreError` naming the file and the first missing byte, and
every unit of work calls it before its results leave it (:func:`checked`; the CLI's error
handling, the verify and export workers), as do :class:`~rmqinspect.store.files.MappedFiles`'s
reads, so that a walk stops at its next step. A forked worker inherits the handler; each process
records and reports its own faults.

Without the extension (no C compiler at install), or with its table of maps full, a map is
unguarded: :meth:`Guard.recheck` then compares the file's size with its map each time the map
is read through :class:`~rmqinspect.store.files.MappedFiles`, so a file found shorter is the
same error before it is read, but a file that shrinks during a read still ends the process by
SIGBUS, as the kernel delivers it.
"""

from __future__ import annotations

import functools
import importlib
import mmap
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ParamSpec, TypeVar

from rmqinspect.errors import StoreError

P = ParamSpec("P")
R = TypeVar("R")

_mapguard: ModuleType | None
try:
    _mapguard = importlib.import_module("rmqinspect.store._mapguard")
except ImportError:  # pragma: no cover - built at install where a C compiler is present
    _mapguard = None

SHRANK = (
    "shrank while it was read (truncated by another process?); nothing read from it is reported"
)


@dataclass(frozen=True, slots=True)
class _Fault:
    path: Path
    offset: int  # the first byte read that was gone
    seq: int  # the fault's number in this process (0: being recorded)


_live: dict[int, Path] = {}  # slot -> file of each guarded map
_past: list[_Fault] = []  # faults of maps since unmapped


def compiled() -> bool:
    """Whether maps are guarded (the C extension is built)."""
    return _mapguard is not None


class Guard:
    """One mapped file's watch: by the handler where it could be registered, else by size."""

    def __init__(self, m: mmap.mmap, path: Path, fd: int) -> None:
        st = os.fstat(fd)
        self.path = path
        self._identity = (st.st_dev, st.st_ino)
        self._length = len(m)
        guards = _mapguard
        self._slot = -1 if guards is None else int(guards.guard(m))
        if guards is not None and self._slot >= 0:
            _live[self._slot] = path
            # After the map is unmapped (mmap's dealloc unmaps before its weak references go).
            weakref.finalize(m, _unguard, guards, self._slot, path)

    def recheck(self) -> None:
        """For an unguarded map: raise the shrink error when the file is now shorter than the
        map, before anything reads past its end. (A guarded map needs no system call here.)"""
        if self._slot >= 0:
            return
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return  # gone or replaced: the map still holds the old file's pages
        if (st.st_dev, st.st_ino) == self._identity and st.st_size < self._length:
            raise StoreError(SHRANK, str(self.path), st.st_size)


def _unguard(guards: ModuleType, slot: int, path: Path) -> None:
    fault = guards.unguard(slot)
    del _live[slot]
    if fault is not None:
        _past.append(_Fault(path, *fault))


def mark() -> int:
    """The faults so far: :func:`check` with it reports only later ones."""
    return 0 if _mapguard is None else int(_mapguard.faults())


def check(since: int) -> None:
    """Raise :class:`StoreError` for the first map fault after ``since`` (from :func:`mark`),
    naming the file and the first byte that was gone."""
    if _mapguard is None or _mapguard.faults() == since:
        return
    found = list(_past)
    for slot, path in list(_live.items()):  # a collection here may unguard a map
        fault = _mapguard.fault(slot)
        if fault is not None:
            found.append(_Fault(path, *fault))
    recent = [f for f in found if f.seq > since or f.seq == 0]
    if recent:
        first = min(recent, key=lambda f: f.seq or 1 << 64)
        raise StoreError(SHRANK, str(first.path), first.offset)


def checked(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` as a unit of work whose result is not trusted if a map faulted during it: the
    fault's error replaces whatever it returned or raised."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        since = mark()
        try:
            return func(*args, **kwargs)
        finally:
            check(since)

    return wrapper
