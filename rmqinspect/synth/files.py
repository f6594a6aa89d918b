"""File primitives of the store writer: files are created at full size (sparse, so zero tails
cost no disk space) and never opened if they already exist."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rmqinspect.format.index import Buffer


def create_file(path: Path, size: int) -> int:
    """A new file of ``size`` bytes (sparse); refuses to touch an existing one."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.ftruncate(fd, size)
    return fd


def write_at(path: Path, offset: int, data: bytes) -> None:
    """Write ``data`` at ``offset`` of an existing file."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def write_pieces(path: Path, size: int, pieces: Iterable[tuple[int, Buffer]]) -> None:
    """A new file of ``size`` bytes holding ``(position, data)`` pieces written in order."""
    fd = create_file(path, size)
    try:
        for position, data in pieces:
            os.pwrite(fd, data, position)
    finally:
        os.close(fd)
