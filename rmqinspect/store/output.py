"""Every file rmqinspect writes goes through this module, into an output directory that is never
the inspected store.

:func:`prepare_output_dir` owns the refusal rules shared by ``recover --out``, ``salvage``,
``export`` and ``synth``: not the store itself, not inside it, not a directory holding it (by
device and inode: symlinks and bind mounts are seen through), and not a non-empty directory
unless what it holds is the caller's own earlier output. The
writers keep all-zero blocks as holes, so preallocated commitlog and index tails cost no disk.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Collection
from pathlib import Path
from typing import BinaryIO

from rmqinspect.errors import StoreError
from rmqinspect.store.files import data_extents, open_regular

_BLOCK = 1 << 20
_ZEROS = bytes(_BLOCK)


def prepare_output_dir(
    dest: Path,
    option: str,
    store: Path | None = None,
    *,
    removable: Callable[[Path], Collection[str]] | None = None,
    hint: str = "",
    also: Collection[Path] = (),
) -> bool:
    """Make ``dest`` ready to receive output, before anything is created or deleted: refuse
    it when it is ``store`` or lies inside it, when it holds ``store``, when it is not a
    directory, or when it is non-empty. Returns whether ``dest`` was created.

    Directories are compared by device and inode, not by name, so a symlink or a bind mount
    that reaches the store by another path is seen through. A non-empty ``dest`` is emptied
    only with ``removable``: it names the entries of ``dest`` that the caller's own earlier
    output wrote (read from that output's manifest), and anything else there refuses; ``hint``
    ends the message that refuses a non-empty ``dest`` (how the caller's option would empty it).
    ``also``: more stores ``dest`` is refused in, as in ``store`` (a fleet export's)."""
    d = Path(os.path.abspath(dest))
    for other in [] if store is None else [store, *also]:
        _refuse_store_overlap(d, other, option, str(dest))
    if d.exists() and not d.is_dir():
        raise StoreError(f"{option} is not a directory", str(dest))
    if d.exists() and any(d.iterdir()):
        if removable is None:
            raise StoreError(f"{option} needs a new or empty directory{hint}", str(dest))
        _remove_own_output(d, removable(d), option, store)
    created = not d.exists()
    d.mkdir(parents=True, exist_ok=True)
    return created


def prepare_output_file(path: Path, option: str, store: Path) -> Path:
    """Refuse an output file inside ``store`` (by device and inode of every directory above it,
    as written and with links resolved) or one that is a directory; create its directory.
    Returns the absolute path to write with :func:`replace_file`."""
    p = Path(os.path.abspath(path))
    device, inodes = _store_directories(store)
    for above in [*_ancestry(p.parent), Path(os.path.realpath(p)).parent]:
        ident = _identity(above)
        if ident is not None and ident[0] == device and ident[1] in inodes:
            raise StoreError(f"{option} must be outside the inspected store", str(path))
    if p.is_dir():
        raise StoreError(f"{option} is a directory, not a file", str(path))
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` as ``path``, through a new file beside it renamed over it: a link at
    ``path`` is replaced, never written through, and a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open_new(tmp) as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` reaches (links followed), None where nothing is."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_dev, st.st_ino


def _ancestry(path: Path) -> list[Path]:
    """``path`` and every directory above it, both as written and with links resolved."""
    real = Path(os.path.realpath(path))
    return [path, *path.parents, real, *real.parents]


def _store_directories(store: Path) -> tuple[int, set[int]]:
    """The store's device and the inodes of its directories (links not followed): an output
    path that passes through one of them, under any name, writes into the store."""
    root = os.stat(store)
    inodes = {root.st_ino}
    pending = [os.fspath(store)]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        inodes.add(e.inode())
                        pending.append(e.path)
        except OSError:
            continue  # a directory that cannot be listed cannot be written through either
    return root.st_dev, inodes


def _refuse_store_overlap(d: Path, store: Path, option: str, shown: str) -> None:
    device, inodes = _store_directories(store)
    for above in _ancestry(d):
        ident = _identity(above)
        if ident is not None and ident[0] == device and ident[1] in inodes:
            raise StoreError(f"{option} must be outside the inspected store", shown)
    target = _identity(d)
    if target is not None and target in {_identity(p) for p in _ancestry(store)}:
        raise StoreError(f"{option} must not contain the inspected store", shown)


def _remove_own_output(d: Path, names: Collection[str], option: str, store: Path | None) -> None:
    """Remove the entries ``names`` of ``d`` (an earlier output's own), after checking that
    ``d`` holds nothing else and that no directory below them is the store under another
    name (a bind mount inside an earlier output)."""
    present = sorted(e.name for e in os.scandir(d))
    foreign = [n for n in present if n not in names]
    if foreign:
        raise StoreError(
            f"{option} holds {foreign[0]!r}, which no earlier rmqinspect output wrote: "
            "refusing to delete it (empty the directory yourself)",
            str(d),
        )
    store_dir = _identity(store) if store is not None else None
    trees = [d / n for n in present if (d / n).is_dir() and not (d / n).is_symlink()]
    for tree in trees:  # all checked before anything goes
        if store_dir is not None and _holds(tree, store_dir):
            raise StoreError(f"{option} must not contain the inspected store", str(tree))
    for tree in trees:
        shutil.rmtree(tree)
    for name in present:  # the files (a manifest) last: a removal cut short can be redone
        if (d / name) not in trees:
            (d / name).unlink()


def _holds(tree: Path, ident: tuple[int, int]) -> bool:
    """Whether a directory of ``tree`` (links not followed) is the directory ``ident``."""
    if _identity(tree) == ident:
        return True
    for dirpath, dirnames, _ in os.walk(tree):
        for name in dirnames:
            if _identity(Path(dirpath, name)) == ident:
                return True
    return False


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
