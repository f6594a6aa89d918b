"""The ``abort`` and ``lock`` marker files (rocketmq-store-format.md §9)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AbortMarker:
    """``abort`` exists while a broker runs: 4.9 leaves it empty, 5.x writes the broker PID."""

    pid: int | None
    size: int
    note: str


def decode_abort(content: bytes) -> AbortMarker:
    text = content.strip()
    if not text:
        return AbortMarker(None, len(content), "empty (4.9 style)")
    if text.isdigit():
        return AbortMarker(int(text), len(content), "holds the broker PID (5.x style)")
    return AbortMarker(None, len(content), "unexpected content; only its existence matters")


@dataclass(frozen=True, slots=True)
class LockMarker:
    """``lock`` holds the 4 ASCII bytes ``lock`` once a broker has started on the store."""

    size: int
    as_written: bool


def decode_lock(content: bytes) -> LockMarker:
    return LockMarker(len(content), content[:4] == b"lock")
