"""The scanner's per-record loops: the C extension ``_speedups`` when it is built, else their
pure-Python twins here (same arguments, same results; tests run both).

* :func:`walk_chain` follows TOTALSIZE through message headers, the only sequential part of a
  scan;
* :func:`crc32_many` and :func:`crc32c_many` checksum many slices of one buffer in one call;
* :func:`message_json` writes the JSON of many message objects (``messages -F jsonl``; the
  caller writes the rows it declines, such as text that is not UTF-8, record by record).

In Python each costs about 0.3 µs per record, which bounds a scan of ~1 KiB records to well
under 1 GB/s; the C loops run at the speed of memory (CRC-32 with PCLMULQDQ, CRC-32C with the
SSE4.2 instruction, where the CPU has them).
"""

from __future__ import annotations

import importlib
import struct
from types import ModuleType

import numpy as np
import numpy.typing as npt

from rmqinspect.format.crc import crc32

I64 = npt.NDArray[np.int64]
Buffer = bytes | memoryview

_speedups: ModuleType | None
try:
    _speedups = importlib.import_module("rmqinspect.format._speedups")
except ImportError:  # pragma: no cover - built at install where a C compiler is present
    _speedups = None

_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ii")


def compiled() -> bool:
    """Whether the C loops are in use."""
    return _speedups is not None


def py_walk_chain(
    buf: Buffer, pos: int, max_records: int, min_size: int, magics: tuple[int, ...]
) -> tuple[I64, I64, int]:
    """The starts and TOTALSIZEs of at most ``max_records`` records from ``pos`` whose size is
    at least ``min_size``, inside ``buf``, and whose magic is one of ``magics``; and the
    position after the last one."""
    limit = len(buf)
    unpack = _HEAD.unpack_from
    starts: list[int] = []
    sizes: list[int] = []
    at = pos
    while len(starts) < max_records and at + 8 <= limit:
        size, magic = unpack(buf, at)
        if size < min_size or size > limit - at or magic not in magics:
            break
        starts.append(at)
        sizes.append(size)
        at += size
    return np.array(starts, np.int64), np.array(sizes, np.int64), at


def walk_chain(
    buf: Buffer, pos: int, max_records: int, min_size: int, magics: tuple[int, ...]
) -> tuple[I64, I64, int]:
    """:func:`py_walk_chain`, in C when built."""
    if _speedups is None:
        return py_walk_chain(buf, pos, max_records, min_size, magics)
    positions = np.empty(max_records, np.int64)
    sizes = np.empty(max_records, np.int64)
    count, end = _speedups.walk(buf, pos, max_records, min_size, magics, positions, sizes)
    return positions[:count], sizes[:count], end


def message_fields() -> tuple[str, ...]:
    """The :class:`~rmqinspect.format.columns.RecordColumns` columns :func:`message_json`
    reads, in the order of its ``fields`` array."""
    return tuple(_speedups.MESSAGE_FIELDS) if _speedups is not None else ()


def message_values() -> tuple[str, ...]:
    """The JSON keys whose values :func:`message_json` can write (none without the
    extension)."""
    return tuple(_speedups.VALUE_KEYS) if _speedups is not None else ()


def message_json(
    buf: Buffer,
    file_start: int,
    fields: I64,
    keys: tuple[tuple[bytes, int], ...],
    body_mode: int,
    settings: tuple[int, ...],
    transactions: tuple[bytes, ...],
    separator: bytes,
    out: bytearray,
) -> tuple[int, I64, I64]:
    """The compact JSON text of many message objects, each followed by ``separator`` (see
    ``_speedups.message_json``), written to the start of ``out`` (grown when too short, never
    shrunk, so a caller that hands the same bytearray batch after batch writes into memory
    already mapped): the text's length, each row's end in it, and the rows left to the caller.
    ``keys`` are the objects' keys in order, each as the bytes written before its value and the
    value's index in :func:`message_values` (which is empty without the extension: callers
    write every row themselves then)."""
    if _speedups is None:
        raise RuntimeError("message_json needs the C extension")
    length, ends, fallback = _speedups.message_json(
        buf,
        file_start,
        np.ascontiguousarray(fields, np.int64),
        keys,
        body_mode,
        settings,
        transactions,
        separator,
        out,
    )
    return length, np.frombuffer(ends, np.int64), np.frombuffer(fallback, np.int64)


def py_crc32_many(buf: Buffer, starts: I64, lengths: I64) -> I64:
    """zlib's CRC-32 (unmasked) of ``buf[s:s + n]`` for each pair (0 for ``n <= 0``)."""
    view = memoryview(buf)
    return np.array(
        [
            crc32(view[s : s + n]) if n > 0 else 0
            for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
        ],
        np.int64,
    )


def crc32_many(buf: Buffer, starts: I64, lengths: I64) -> I64:
    """:func:`py_crc32_many`, in C when built."""
    if _speedups is None:
        return py_crc32_many(buf, starts, lengths)
    out = np.empty(len(starts), np.int64)
    _speedups.crc32_many(buf, _i64(starts), _i64(lengths), out)
    return out


def py_crc32c_many(buf: Buffer, starts: I64, lengths: I64) -> I64:
    """CRC-32C of ``buf[s:s + n]`` for each pair (0 for ``n <= 0``)."""
    import crc32c

    view = memoryview(buf)
    return np.array(
        [
            crc32c.crc32c(view[s : s + n]) if n > 0 else 0
            for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
        ],
        np.int64,
    )


def crc32c_many(buf: Buffer, starts: I64, lengths: I64) -> I64:
    """:func:`py_crc32c_many`, in C when built."""
    if _speedups is None:
        return py_crc32c_many(buf, starts, lengths)
    out = np.empty(len(starts), np.int64)
    _speedups.crc32c_many(buf, _i64(starts), _i64(lengths), out)
    return out


def _i64(a: I64) -> I64:
    return np.ascontiguousarray(a, np.int64)
