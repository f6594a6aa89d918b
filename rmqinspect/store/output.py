"""Every file rmqinspect writes goes through this module, into an output directory that is never
the inspected store.

:func:`prepare_output_dir` owns the refusal rules shared by ``recover --apply-to``, ``salvage``,
``export`` and ``synth``: not the store itself, not inside it, not a directory holding it, and
not a non-empty directory (unless the caller asked to overwrite, where that is allowed). The
writers keep all-zero blocks as holes, so preallocated commitlog and index tails cost no disk.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import BinaryIO

from rmqinspect.errors import StoreError
from rmqinspect.store.files import data_extents, open_regular

_BLOCK = 1 << 20
_ZEROS = bytes(_BLOCK)


def prepare_output_dir(
    dest: Path, option: str, store: Path | None = None, *, overwrite: bool = False
) -> bool:
    """Make ``dest`` ready to receive output: refuse it when it is ``store`` or lies inside
    it, when it holds ``store``, when it is not a directory, or when it is non-empty (with
    ``overwrite``, its contents are removed instead). Returns whether ``dest`` was created."""
    d = dest.resolve()
    if store is not None:
        s = store.resolve()
        if d == s or s in d.parents:
            raise StoreError(f"{option} must be outside the inspected store", str(dest))
        if d in s.parents:
            raise StoreError(f"{option} must not contain the inspected store", str(dest))
    if d.exists() and not d.is_dir():
        raise StoreError(f"{option} is not a directory", str(dest))
    if d.exists() and any(d.iterdir()):
        if not overwrite:
            raise StoreError(f"{option} needs a new or empty directory", str(dest))
        for entry in d.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    created = not d.exists()
    d.mkdir(parents=True, exist_ok=True)
    return created


def open_new(path: Path) -> BinaryIO:
    """A new file opened for writing (never an existing one): for output written as a stream."""
    return open(path, "xb")


def write_sparse(path: Path, data: bytes | memoryview) -> None:
    """Write ``data`` as a new file, leaving all-zero 1 MiB blocks as holes."""
    view = memoryview(data)
    with open(path, "xb") as fh:
        for at in range(0, len(view), _BLOCK):
            block = view[at : at + _BLOCK]
            if block == _ZEROS[: len(block)]:
                fh.seek(len(block), os.SEEK_CUR)
            else:
                fh.write(block)
        fh.truncate(len(view))


def copy_sparse(src: Path, dst: Path) -> int:
    """Copy the store file ``src`` to the new file ``dst``, reading only its data extents (a
    sparse file's holes are neither read nor written) and keeping zero blocks as holes; returns
    the size. ``src`` is opened as every store file is (:func:`open_regular`)."""
    fd = open_regular(src)
    try:
        size = os.fstat(fd).st_size
        with open(dst, "xb") as fo:
            for a, b in data_extents(fd, 0, size):
                at = a
                while at < b:
                    chunk = os.pread(fd, min(_BLOCK, b - at), at)
                    if not chunk:
                        break
                    if chunk != _ZEROS[: len(chunk)]:
                        fo.seek(at)
                        fo.write(chunk)
                    at += len(chunk)
            fo.truncate(size)
    finally:
        os.close(fd)
    return size


def create_sized(path: Path, size: int) -> None:
    """A new all-zero (sparse) file of ``size`` bytes, as ``MappedFile`` creates one. Where the
    copied store already holds something of that name (a directory the broker's file listing
    skipped), neither the broker nor this can create the file: a one-line error, nothing
    overwritten."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise StoreError(
            "cannot create this file: the store holds something else of that name", str(path)
        ) from None
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def write_at(path: Path, offset: int, data: bytes | bytearray | memoryview) -> None:
    """Overwrite ``data`` at ``offset`` of an output file."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def zero_range(path: Path, start: int, end: int) -> bool:
    """Zero ``[start, end)`` of an output file where it is not zero (only its data extents are
    read); True if it wrote."""
    wrote = False
    with open(path, "r+b") as fh:
        extents = list(data_extents(fh.fileno(), start, min(end, os.fstat(fh.fileno()).st_size)))
        for a, b in extents:
            pos = a
            while pos < b:
                fh.seek(pos)
                chunk = fh.read(min(_BLOCK, b - pos))
                if not chunk:
                    break
                if chunk != _ZEROS[: len(chunk)]:
                    fh.seek(pos)
                    fh.write(_ZEROS[: len(chunk)])
                    wrote = True
                pos += len(chunk)
    return wrote
