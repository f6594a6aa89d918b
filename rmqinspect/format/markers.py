"""The ``abort`` and ``lock`` marker files (rocketmq-store-format.md §9)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AbortMarker:
    """``abort`` exists while a broker runs: 4.9 leaves it empty, 5.x writes the broker PID."""

    pid: int | None
    size: int
    note: str


MARKER_READ_LIMIT = 64  # a PID or "lock": what the broker writes fits many times over
_PID_DIGITS = 19  # a Java long; anything longer is not what the broker writes


def decode_abort(content: bytes, size: int | None = None) -> AbortMarker:
    """``content``: the file's first bytes; ``size``: its size when that is more."""
    size = len(content) if size is None else size
    text = content.strip()
    if not text and size == len(content):
        return AbortMarker(None, size, "empty (4.9 style)")
    if text.isdigit() and len(text) <= _PID_DIGITS and size == len(content):
        return AbortMarker(int(text), size, "holds the broker PID (5.x style)")
    return AbortMarker(None, size, "unexpected content; only its existence matters")


@dataclass(frozen=True, slots=True)
class LockMarker:
    """``lock`` holds the 4 ASCII bytes ``lock`` once a broker has started on the store."""

    size: int
    as_written: bool


def decode_lock(content: bytes, size: int | None = None) -> LockMarker:
    return LockMarker(len(content) if size is None else size, content[:4] == b"lock")
