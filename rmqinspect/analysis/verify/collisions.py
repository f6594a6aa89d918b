"""Key hashes shared by distinct keys in one index file, found in bounded memory.

Each part of an index file's check hands over the fingerprints of the keys its records hold
(``hash << 32 | fingerprint of the string``, distinct, 8 bytes a key). Held until the file's
parts were all in, they grew with the file (27 MB of a 2 GB store's file, 160 MB of a full one),
and with the store while the restart emulation kept this process busy. A :class:`KeySpill`
writes each part's keys, sorted, to a temporary file outside the store, with where each range
of hashes begins; the collisions are then found a range of hashes at a time: a hash lies in one
range only, so no shared hash is missed. Where the parts run in other processes that send
their results through an engine (the export's pool or Spark tasks, which collect every result
at once), each part writes its keys to a file of its own (:func:`write_keys`) in a directory
both sides see, and only the file's name and ranges travel.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from rmqinspect.format.npbytes import I64

_RANGE_BITS = 6  # 64 ranges of hashes: a range of a full file's keys is about 5 MB
# Where ranges 1.. begin, multiples of 2**32 (a hash's keys never straddle two ranges).
_EDGES = (np.arange(1, 1 << _RANGE_BITS, dtype=np.int64) - (1 << (_RANGE_BITS - 1))) << (
    64 - _RANGE_BITS
)


def shared_hashes(keys: I64) -> I64:
    """The hashes (sorted, distinct) that distinct keys share. ``keys`` is sorted in place:
    a shared hash is two neighbours with the same high word and different low words, read
    through views (8 bytes per key in all, not 3x)."""
    keys.sort()
    words = keys.view(np.uint32).reshape(-1, 2)
    high, low = (words[:, 1], words[:, 0]) if np.little_endian else (words[:, 0], words[:, 1])
    at = np.flatnonzero((high[1:] == high[:-1]) & (low[1:] != low[:-1]))
    out: I64 = np.unique(keys[at] >> 32)
    return out


def _write_sorted(fd: int, at: int, fingerprints: list[I64]) -> tuple[int, list[int]]:
    """The keys, sorted, written at ``at`` of ``fd`` (the arrays are emptied): their length in
    bytes and where each range of hashes begins, in keys."""
    keys = np.concatenate(fingerprints) if fingerprints else np.zeros(0, np.int64)
    fingerprints.clear()
    keys.sort()
    starts = [0, *np.searchsorted(keys, _EDGES).tolist(), len(keys)]
    data = keys.tobytes()
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], at + done)
    return len(data), starts


def write_keys(fingerprints: list[I64], path: Path) -> list[int]:
    """One part's keys written, sorted, to a new file ``path`` (for :meth:`KeySpill.add_file`);
    where each range of hashes begins."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        return _write_sorted(fd, 0, fingerprints)[1]
    finally:
        os.close(fd)


class KeySpill:
    """The key fingerprints of one index file's parts, kept in a temporary file (or in the
    parts' own files)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close)
        # (a part's own file, or None: this one; its first byte; where each range begins)
        self._parts: list[tuple[Path | None, int, list[int]]] = []
        self._end = 0

    def add(self, fingerprints: list[I64]) -> None:
        """One part's keys (its arrays are emptied: only the file holds them then)."""
        if not fingerprints:
            return
        size, starts = _write_sorted(self._file.fileno(), self._end, fingerprints)
        self._parts.append((None, self._end, starts))
        self._end += size

    def add_file(self, path: Path, starts: list[int]) -> None:
        """One part's keys as :func:`write_keys` wrote them (the file is read, not removed)."""
        self._parts.append((path, 0, starts))

    def shared_hashes(self) -> I64:
        """:func:`shared_hashes` over every part's keys, a range of hashes at a time."""
        found = []
        for r in range(1 << _RANGE_BITS):
            pieces = [
                self._read(path, first + a * 8, (b - a) * 8)
                for path, first, starts in self._parts
                for a, b in [(starts[r], starts[r + 1])]
                if b > a
            ]
            if pieces:
                found.append(shared_hashes(np.concatenate(pieces)))
        out: I64 = np.concatenate(found) if found else np.zeros(0, np.int64)
        return out

    def _read(self, path: Path | None, at: int, size: int) -> I64:
        if path is None:
            data = os.pread(self._file.fileno(), size, at)
        else:
            with open(path, "rb") as fh:
                fh.seek(at)
                data = fh.read(size)
        if len(data) != size:
            raise OSError(f"{path or 'the key spill'}: {len(data)} of {size} bytes at {at}")
        return np.frombuffer(data, np.int64)

    def close(self) -> None:
        self._file.close()
