"""Java ``String.hashCode`` and the two hashes RocketMQ derives from it."""

from __future__ import annotations

_MASK32 = 0xFFFFFFFF


def java_hash(text: str) -> int:
    """``java.lang.String.hashCode()``: 31-polynomial over UTF-16 code units, signed 32-bit."""
    h = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """Consume-queue tagsCode of a normal message: the tag hash sign-extended, 0 without tags."""
    if not tags:
        return 0
    return java_hash(tags)


def index_key_hash(key: str) -> int:
    """Index key hash: ``abs(hashCode)`` with ``Integer.MIN_VALUE`` mapped to 0 (IndexFile)."""
    h = abs(java_hash(key))
    return 0 if h > 0x7FFFFFFF else h


def index_key(topic: str, key: str) -> str:
    """The string the broker indexes for a key of a message stored in ``topic``."""
    return f"{topic}#{key}"
