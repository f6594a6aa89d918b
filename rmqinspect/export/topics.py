"""Topic names as Hive partition directory values that can neither escape OUT nor collide.

A topic may be anything the record holds: ``..``, ``/``, ``%RETRY%group``, NUL, thousands of
bytes (V2 records). The value keeps ``[A-Za-z0-9_-]`` and writes every other byte of the UTF-8
name as ``~XX`` (upper-case hex), so it never holds a separator, a dot or a ``%`` that readers
would URL-decode, and Spark's own path escaping leaves it unchanged (both engines name the same
directories). The empty name is ``~``. A value longer than :data:`MAX_VALUE_LENGTH` keeps a
prefix and ends in ``~~`` and 32 hex digits of the name's SHA-256; ``~~`` never occurs in a short
value, so long and short names cannot meet. Topics that differ only in letter case get
directories that differ only in case: keep OUT on a case-sensitive filesystem.
"""

from __future__ import annotations

import hashlib
import string

import pyarrow as pa
import pyarrow.compute as pc

MAX_VALUE_LENGTH = 200  # "topic_partition=" + value stays under NAME_MAX (255)
_KEPT = frozenset((string.ascii_letters + string.digits + "_-").encode())
_HASH_DIGITS = 32


def partition_value(topic: str) -> str:
    """The directory value (after ``topic_partition=``) of one topic."""
    raw = topic.encode("utf-8")
    if not raw:
        return "~"
    value = "".join(chr(b) if b in _KEPT else f"~{b:02X}" for b in raw)
    if len(value) <= MAX_VALUE_LENGTH:
        return value
    keep = MAX_VALUE_LENGTH - 2 - _HASH_DIGITS
    cut = value.rfind("~", keep - 2, keep)  # never split an escape
    prefix = value[: cut if cut >= 0 else keep]
    return f"{prefix}~~{hashlib.sha256(raw).hexdigest()[:_HASH_DIGITS]}"


def partition_column(topics: pa.Array) -> pa.Array:
    """:func:`partition_value` of every row; each distinct topic is encoded once."""
    encoded = pc.dictionary_encode(topics)
    values = pa.array([partition_value(t) for t in encoded.dictionary.to_pylist()], pa.string())
    return values.take(encoded.indices)
