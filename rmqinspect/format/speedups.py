"""The scanner's per-record loops: the C extension ``_speedups`` when it is built, else their
pure-Python twins here (same arguments, same results; tests run both).

* :func:`walk_chain` follows TOTALSIZE through message headers, the only sequential part of a
  scan, and :func:`walk_gather` follows it while it reads every field and the body's CRC-32
  (each record's bytes read once, while in cache);
* :func:`index_keys` finds, hashes (Java's ``String.hashCode`` of ``topic#key``) and
  fingerprints the index keys of many records, :func:`property_hashes` one property's value
  (the tag hash) of many records, and :func:`span_ids` numbers spans by content;
* :func:`follow_links` follows the prev links of an index file's hash chain;
* :func:`crc32_many` and :func:`crc32c_many` checksum many slices of one buffer in one call;
* :func:`property_entries` parses the properties of many records into entry columns (the
  Parquet export's ``properties`` map);
* :func:`message_json` writes the JSON of many message objects (``messages -F jsonl``; the
  caller writes the rows it declines, such as text that is not UTF-8, record by record).

In Python each costs about 0.3 µs per record, which bounds a scan of ~1 KiB records to well
under 1 GB/s; the C loops run at the speed of memory (CRC-32 with PCLMULQDQ, CRC-32C with the
SSE4.2 instruction, where the CPU has them). With ``RMQINSPECT_SCALAR=1`` in the environment
at import the extension uses none of those instructions (nor SSSE3 or SSE2): its portable
paths, the ones a host without them runs, which ``make test`` tests that way.
"""

from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from rmqinspect.format.javahash import index_key_hash, java_hash
from rmqinspect.format.npbytes import windows

I64 = npt.NDArray[np.int64]
Buffer = bytes | bytearray | memoryview

# Every loop this module calls: a build older than this file lacks some.
LOOPS = (
    "walk", "walk_gather", "gather", "follow_links", "message_json", "crc32", "crc32_many",
    "crc32c_many", "binary_views", "property_entries", "index_keys", "property_hashes",
    "span_ids", "features",
)  # fmt: skip


def check_build(module: ModuleType) -> None:
    """Refuse a build of the extension without every loop of :data:`LOOPS` (one built from an
    older source): this module would fail half-way through a command instead."""
    missing = [name for name in LOOPS if not hasattr(module, name)]
    if missing:
        raise ImportError(
            f"rmqinspect.format._speedups lacks {', '.join(missing)}: it was built from an older "
            "source; rebuild it (pip install -e .)"
        )


_speedups: ModuleType | None
try:
    _speedups = importlib.import_module("rmqinspect.format._speedups")
except ImportError:  # pragma: no cover - built at install where a C compiler is present
    _speedups = None
if _speedups is not None:
    check_build(_speedups)

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


def py_follow_links(
    buf: Buffer, base: int, stride: int, link_at: int, head: int, limit: int
) -> tuple[I64, int]:
    """The entries of a chain of links (entry ``n`` at ``base + n * stride``, its link to the
    next entry a big-endian int32 ``link_at`` bytes into it) from ``head``, while the number is
    in ``[1, limit)`` and not met before, in walk order; and the number that ended the walk
    (out of range, or the first met twice). Every entry below ``limit`` lies in ``buf``."""
    unpack = _I32.unpack_from
    seen: set[int] = set()
    path: list[int] = []
    at = head
    while 0 < at < limit and at not in seen:
        seen.add(at)
        path.append(at)
        at = unpack(buf, base + at * stride + link_at)[0]
    return np.array(path, np.int64), at


def follow_links(
    buf: Buffer, base: int, stride: int, link_at: int, head: int, limit: int
) -> tuple[I64, int]:
    """:func:`py_follow_links`, in C when built (an index chain of a million entries: 1 s in
    Python)."""
    if _speedups is None:
        return py_follow_links(buf, base, stride, link_at, head, limit)
    numbers, end = _speedups.follow_links(buf, base, stride, link_at, head, limit)
    return np.frombuffer(numbers, np.int64), int(end)


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


_INLINE = 12  # an Arrow binary view holds values this short inline


def py_binary_views(buf: Buffer, starts: I64, lengths: I64) -> npt.NDArray[np.uint8]:
    """The 16-byte Arrow binary views (one row each) of ``buf[s:s + n]`` for each pair, with
    ``buf`` as data buffer 0 (callers make sure every slice lies inside ``buf``, shorter than
    2 GiB): values of at most 12 bytes inline, longer ones as prefix and offset."""
    lengths = np.maximum(lengths, 0)
    n = len(starts)
    data = np.frombuffer(buf, np.uint8)
    views = np.zeros((n, 16), np.uint8)
    views[:, :4] = lengths.astype("<i4").view(np.uint8).reshape(n, 4)
    head = windows(data, starts, _INLINE)
    short = lengths <= _INLINE
    views[short, 4:] = head[short] * (np.arange(_INLINE) < lengths[short, None])
    # Rows near the buffer's end were read from an earlier position: take those few by slicing.
    for i in np.flatnonzero(short & (starts + _INLINE > len(data))).tolist():
        s = int(starts[i])
        value = bytes(data[s : s + int(lengths[i])])
        views[i, 4 : 4 + len(value)] = np.frombuffer(value, np.uint8)
    long = ~short
    views[long, 4:8] = head[long, :4]  # prefix; buffer index 0 stays zero
    views[long, 12:] = starts[long].astype("<i4").view(np.uint8).reshape(-1, 4)
    return views


def binary_views(buf: Buffer, starts: I64, lengths: I64) -> npt.NDArray[np.uint8]:
    """:func:`py_binary_views`, in C when built."""
    if _speedups is None:
        return py_binary_views(buf, starts, lengths)
    views = np.empty((len(starts), 16), np.uint8)
    _speedups.binary_views(buf, _i64(starts), _i64(lengths), views)
    return views


def gather_columns() -> tuple[str, ...]:
    """The :class:`~rmqinspect.format.columns.RecordColumns` columns of :func:`gather_fields`'
    rows, in order, as the extension names them (none without it)."""
    return tuple(_speedups.GATHER_COLUMNS) if _speedups is not None else ()


def gather_fields(buf: Buffer, positions: I64, layout: tuple[int, ...]) -> I64 | None:
    """Every field of the records at ``positions`` as rows of one int64 array, one row per
    column of :func:`gather_columns` (see ``_speedups.gather``); None without the extension
    (:func:`rmqinspect.format.columns.gather` then reads them with numpy)."""
    if _speedups is None:
        return None
    out = np.empty((len(_speedups.GATHER_COLUMNS), len(positions)), np.int64)
    _speedups.gather(buf, _i64(positions), layout, out)
    return out


def walk_gather(
    buf: Buffer,
    pos: int,
    max_records: int,
    min_size: int,
    magics: tuple[int, ...],
    layout: tuple[int, ...],
    with_crc: bool,
) -> tuple[I64, I64, I64, int] | None:
    """:func:`walk_chain` and :func:`gather_fields` in one pass over the bytes (each record's
    header, fields and, ``with_crc``, the CRC-32 of its body read while it is in cache): the
    starts, the field rows, the CRCs (unmasked; 0 for a record that is not well formed, or
    without ``with_crc``) and the position after the last record. None without the extension
    (:func:`rmqinspect.format.columns.walk_columns` then walks, gathers and checksums apart)."""
    if _speedups is None:
        return None
    positions = np.empty(max_records, np.int64)
    out = np.empty((len(_speedups.GATHER_COLUMNS), max_records), np.int64)
    crcs = np.zeros(max_records, np.int64)
    count, end = _speedups.walk_gather(
        buf, pos, max_records, min_size, magics, layout, with_crc, positions, out, crcs
    )
    return positions[:count], out[:, :count], crcs[:count], end


def span_ids(buf: Buffer, at: I64, length: I64) -> tuple[I64, list[bytes]] | None:
    """:func:`rmqinspect.format.npbytes.span_ids` of spans that all lie inside ``buf``, in one
    C pass (the same ids); None without the extension."""
    if _speedups is None:
        return None
    n = len(at)
    ids, firsts = np.empty(n, np.int64), np.empty(n, np.int64)
    count = _speedups.span_ids(buf, _i64(at), _i64(length), ids, firsts)
    starts, ends = at[firsts[:count]].tolist(), (at + length)[firsts[:count]].tolist()
    return ids, [bytes(buf[a:b]) for a, b in zip(starts, ends, strict=True)]


def property_entries(
    buf: Buffer, starts: I64, lengths: I64
) -> tuple[I64, I64, I64, I64, I64] | None:
    """:func:`~rmqinspect.format.properties.parse_properties` of ``buf[s:s + n]`` for each
    pair, as columns of its entries in order of appearance (the later of two equal names kept,
    in its place): each entry's row, and the positions and lengths of its name and value in
    ``buf``. None without the extension, or when a row has a name or value that is not UTF-8 or
    more than 64 entries: :func:`rmqinspect.format.batch.properties_column` then takes the
    Arrow path, which decodes with replacement characters as Java does."""
    if _speedups is None:
        return None
    lengths = _i64(lengths)
    capacity = int((np.maximum(lengths, 0) // 3).sum())  # an entry takes at least 3 bytes
    out = [np.empty(capacity, np.int64) for _ in range(5)]
    count, declined = _speedups.property_entries(buf, _i64(starts), lengths, *out)
    if declined >= 0:
        return None
    rows, name_at, name_len, value_at, value_len = (a[:count] for a in out)
    return rows, name_at, name_len, value_at, value_len


class KeySpans(NamedTuple):
    """The index keys of many records (see :func:`index_keys`), one row per key."""

    owners: I64  # the record's row among those asked about
    starts: I64  # the key's bytes in the buffer
    lengths: I64
    hashes: I64  # the index hash of ``topic#key`` (IndexFile.indexKeyHashMethod)
    prints: I64  # a fingerprint of the key's bytes (to tell distinct keys apart)


_UNIQ_NAME = b"UNIQ_KEY\x01"
_KEYS_NAME = b"KEYS\x01"
_KEY_SEPARATOR = 0x20  # MessageConst.KEY_SEPARATOR


def _last_value(raw: bytes, needle: bytes) -> int:
    """Where the value of the last entry ``needle`` names (name and 0x01) starts in ``raw``,
    with a non-empty value, entries split as ``parse_properties`` splits them; -1 for none."""
    found, at = -1, 0
    for entry in raw.split(b"\x02"):
        if entry.startswith(needle) and len(entry) > len(needle):
            found = at + len(needle)
        at += len(entry) + 1
    return found


def _key_hash(topic: bytes, key: bytes) -> int:
    """The index hash of ``topic#key``, both decoded as Java decodes (replacement characters)."""
    text = topic.decode("utf-8", "replace") + "#" + key.decode("utf-8", "replace")
    return index_key_hash(text)


def _fingerprint(key: bytes) -> int:
    """:func:`~rmqinspect.format.npbytes.span_fingerprints`' polynomial of any length."""
    v = 0
    for b in key:
        v = (v * 0x100000001B3 + b) & 0xFFFFFFFFFFFFFFFF
    v ^= len(key)
    return v - (1 << 64) if v >> 63 else v


def py_index_keys(
    buf: Buffer, topic_at: I64, topic_len: I64, props_at: I64, props_len: I64
) -> KeySpans:
    """The keys ``IndexService.buildIndex`` puts for each record whose topic and properties
    lie at the given spans of ``buf`` (ROLLBACK records are the caller's to leave out), in
    order: the record's UNIQ_KEY, then its KEYS split on spaces, empty parts dropped (the
    values as ``parse_properties`` keeps them: the last entry with a non-empty value)."""
    view = memoryview(buf)
    rows: list[tuple[int, int, int, int, int]] = []
    spans = zip(
        topic_at.tolist(), topic_len.tolist(), props_at.tolist(), props_len.tolist(), strict=True
    )
    for r, (ta, tl, pa, pl) in enumerate(spans):
        raw = bytes(view[pa : pa + max(pl, 0)])
        uniq, keys = _last_value(raw, _UNIQ_NAME), _last_value(raw, _KEYS_NAME)
        found: list[tuple[int, int]] = []
        if uniq >= 0:
            stop = raw.find(b"\x02", uniq)
            found.append((uniq, (len(raw) if stop < 0 else stop) - uniq))
        if keys >= 0:
            stop = raw.find(b"\x02", keys)
            at = keys
            for part in raw[keys : len(raw) if stop < 0 else stop].split(bytes([_KEY_SEPARATOR])):
                if part:
                    found.append((at, len(part)))
                at += len(part) + 1
        topic = bytes(view[ta : ta + max(tl, 0)])
        for start, length in found:
            key = raw[start : start + length]
            rows.append((r, pa + start, length, _key_hash(topic, key), _fingerprint(key)))
    columns = np.array(rows, np.int64).reshape(-1, 5).T
    return KeySpans(*(np.ascontiguousarray(c) for c in columns))


def index_keys(
    buf: Buffer, topic_at: I64, topic_len: I64, props_at: I64, props_len: I64
) -> KeySpans:
    """:func:`py_index_keys`, in C when built (keys whose text is not UTF-8, which Java decodes
    with replacement characters, are hashed here)."""
    if _speedups is None:
        return py_index_keys(buf, topic_at, topic_len, props_at, props_len)
    topic_at, topic_len, props_at, props_len = map(_i64, (topic_at, topic_len, props_at, props_len))
    n, done, parts = len(props_at), 0, []
    while done < n:
        # Room for a few keys a record; the call stops where a record might not fit.
        room = max(4 * (n - done), 2 + max(int(props_len[done]), 0) // 2)
        out = [np.empty(room, np.int64) for _ in range(5)]
        count, rows = _speedups.index_keys(
            buf,
            topic_at[done:],
            topic_len[done:],
            props_at[done:],
            props_len[done:],
            _KEY_SEPARATOR,
            *out,
        )
        out[0] += done
        parts.append([a[:count] for a in out])
        done += rows
    if len(parts) == 1:
        keys = KeySpans(*parts[0])
    elif parts:
        keys = KeySpans(*(np.concatenate(c) for c in zip(*parts, strict=True)))
    else:
        keys = KeySpans(*(np.zeros(0, np.int64) for _ in range(5)))
    view = memoryview(buf)
    for j in np.flatnonzero(keys.hashes < 0).tolist():
        r, start = int(keys.owners[j]), int(keys.starts[j])
        ta = int(topic_at[r])
        topic = bytes(view[ta : ta + max(int(topic_len[r]), 0)])
        keys.hashes[j] = _key_hash(topic, bytes(view[start : start + int(keys.lengths[j])]))
    return keys


def py_property_hashes(
    buf: Buffer, props_at: I64, props_len: I64, name: bytes
) -> tuple[I64, I64, I64]:
    """For each record's properties ``buf[a:a + n]``, the value ``parse_properties`` keeps
    under ``name`` (the last entry with a non-empty value): its position and length in
    ``buf``, (-1, 0) for none, and ``String.hashCode`` of it as Java decodes it (0 for none)."""
    view = memoryview(buf)
    needle = name + b"\x01"
    n = len(props_at)
    at, length, hashes = np.full(n, -1, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    spans = zip(props_at.tolist(), props_len.tolist(), strict=True)
    for r, (pa, pl) in enumerate(spans):
        raw = bytes(view[pa : pa + max(pl, 0)])
        start = _last_value(raw, needle)
        if start >= 0:
            stop = raw.find(b"\x02", start)
            value = raw[start : len(raw) if stop < 0 else stop]
            at[r], length[r] = pa + start, len(value)
            hashes[r] = java_hash(value.decode("utf-8", "replace"))
    return at, length, hashes


def property_hashes(
    buf: Buffer, props_at: I64, props_len: I64, name: bytes
) -> tuple[I64, I64, I64]:
    """:func:`py_property_hashes`, in C when built (values that are not UTF-8, which Java
    decodes with replacement characters, are hashed here)."""
    if _speedups is None:
        return py_property_hashes(buf, props_at, props_len, name)
    n = len(props_at)
    at, length, hashes = (np.empty(n, np.int64) for _ in range(3))
    _speedups.property_hashes(buf, _i64(props_at), _i64(props_len), name, at, length, hashes)
    for r in np.flatnonzero(hashes > _INT_MAX).tolist():
        a = int(at[r])
        hashes[r] = java_hash(bytes(buf[a : a + int(length[r])]).decode("utf-8", "replace"))
    return at, length, hashes


_INT_MAX = (1 << 31) - 1


def py_crc32_many(buf: Buffer, starts: I64, lengths: I64) -> I64:
    """zlib's CRC-32 (unmasked) of ``buf[s:s + n]`` for each pair (0 for ``n <= 0``), by zlib
    itself: not :func:`rmqinspect.format.crc.crc32`, which is the C code this twin is checked
    against where the extension is built."""
    view = memoryview(buf)
    return np.array(
        [
            zlib.crc32(view[s : s + n]) if n > 0 else 0
            for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
        ],
        np.int64,
    )


def crc32_many(buf: Buffer, starts: I64, lengths: I64) -> I64:
    """:func:`py_crc32_many`, in C when built."""
    return _crc_many("crc32_many", py_crc32_many, buf, starts, lengths)


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
    return _crc_many("crc32c_many", py_crc32c_many, buf, starts, lengths)


def _crc_many(
    name: str, twin: Callable[[Buffer, I64, I64], I64], buf: Buffer, starts: I64, lengths: I64
) -> I64:
    if _speedups is None:
        return twin(buf, starts, lengths)
    out = np.empty(len(starts), np.int64)
    getattr(_speedups, name)(buf, _i64(starts), _i64(lengths), out)
    return out


def _i64(a: I64) -> I64:
    return np.ascontiguousarray(a, np.int64)
