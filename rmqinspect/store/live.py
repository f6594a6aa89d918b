"""Is the store being written while it is read? Evidence for a one-line warning, never a verdict.

A broker holds a POSIX lock on ``<root>/lock`` while it runs (``FileChannel.tryLock``); another
process can see it with ``F_GETLK`` without taking it. And files that change between the start
and the end of a command (sizes, mtimes, files appearing or going) show a writer at work. The
model snapshots the file the broker appends to (see
:class:`~rmqinspect.store.files.MappedFiles`), so the report is consistent; this module only
says the store looked live.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from rmqinspect.errors import StoreError
from rmqinspect.store.files import open_regular

_FLOCK = struct.Struct("hhqqi4x")  # struct flock on 64-bit Linux


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """Kind, size and mtime of the files a broker writes first (the commitlog, checkpoint,
    abort marker and index), as listed at one moment."""

    entries: dict[str, tuple[int, int, int]]

    @classmethod
    def take(cls, root: Path, commitlog: Path) -> Fingerprint:
        """``commitlog``: the directory of the log's files (``commitlog/``, or DLedger's data)."""
        entries: dict[str, tuple[int, int, int]] = {}
        paths = [*_children(commitlog), *_children(root / "index")]
        for p in (*paths, root / "checkpoint", root / "abort"):
            try:
                st = os.lstat(p)
            except OSError:
                continue
            entries[str(p.relative_to(root))] = (
                stat.S_IFMT(st.st_mode),
                st.st_size,
                st.st_mtime_ns,
            )
        return cls(entries)

    def changed(self, later: Fingerprint) -> list[str]:
        """Paths (relative to the root) that appeared, went or changed since this one."""
        keys = set(self.entries) | set(later.entries)
        return sorted(k for k in keys if self.entries.get(k) != later.entries.get(k))


def _children(directory: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(directory)]
    except OSError:
        return []


def lock_holder(path: Path) -> int | None:
    """The PID of a process holding a lock on ``path`` (the broker's ``lock`` file), or None.
    Asked with ``F_GETLK`` on a read-only descriptor: nothing is locked or written."""
    try:
        fd = open_regular(path)
    except (StoreError, FileNotFoundError, NotADirectoryError):
        return None
    try:
        probe = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, probe))
    except (OSError, struct.error):
        return None
    finally:
        os.close(fd)
    return None if kind == fcntl.F_UNLCK else pid


def live_evidence(
    root: Path, commitlog: Path, opened: Fingerprint, holder: int | None
) -> str | None:
    """One sentence saying why the store looked live while it was read, or None."""
    why = []
    if holder is not None:
        who = f"process {holder}" if holder > 0 else "a process"
        why.append(f"{who} holds the broker's lock")
    changed = opened.changed(Fingerprint.take(root, commitlog))
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        shown = ", ".join(changed[:3]) + more
        why.append(f"{shown} changed while it was read")
    if not why:
        return None
    return (
        f"the store looked live ({'; '.join(why)}): the results describe the files as they were "
        "read, and the commitlog's last file as it was when first read"
    )
