"""Scanner columns as Arrow record batches, for listings and the Parquet export.

:mod:`rmqinspect.format.columns` finds the records and reads their fields as numpy columns; this
module only turns those columns into a :data:`RECORD_SCHEMA` batch, bodies, topics and
properties becoming Arrow binary columns built from one joined buffer each.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.compression import ConsumerBody, consumer_body
from rmqinspect.format.host import HostAddress
from rmqinspect.format.properties import KEY_SEPARATOR, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from rmqinspect.format.speedups import binary_views, property_entries

if importlib.util.find_spec("dateutil") is None:
    # pyarrow tries to import dateutil on every compute call and never remembers that it is
    # absent: each search of sys.path cost 55 us, twenty times the call itself. A None entry
    # makes the import fail at once, as it would anyway.
    sys.modules.setdefault("dateutil", None)  # type: ignore[arg-type]

RECORD_SCHEMA = pa.schema(
    [
        ("physical_offset", pa.int64()),
        ("store_size", pa.int32()),
        ("version", pa.int8()),
        ("body_crc", pa.int32()),
        ("body_crc_ok", pa.bool_()),
        ("queue_id", pa.int32()),
        ("flag", pa.int32()),
        ("queue_offset", pa.int64()),
        ("physical_offset_field", pa.int64()),
        ("sys_flag", pa.int32()),
        ("born_timestamp", pa.int64()),
        ("born_host", pa.binary()),
        ("born_port", pa.int32()),
        ("store_timestamp", pa.int64()),
        ("store_host", pa.binary()),
        ("store_port", pa.int32()),
        ("reconsume_times", pa.int32()),
        ("prepared_transaction_offset", pa.int64()),
        ("topic", pa.string()),
        ("properties", pa.binary()),
        ("body", pa.binary()),
    ]
)


_VIEW_OFFSET_MAX = 2**31 - 1


def _binary(
    mv: memoryview,
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    text: bool = False,
) -> pa.Array:
    """An Arrow binary array of the ``mv[start:start+length]`` slices (a string array with
    ``text``, for slices known to be UTF-8).

    The slices become an Arrow binary *view* array pointing into ``mv`` (its views written in
    one call, :func:`~rmqinspect.format.speedups.binary_views`), which Arrow then copies into a
    plain array in one pass.
    """
    lengths = np.maximum(lengths, 0)
    if len(mv) > _VIEW_OFFSET_MAX or (starts + lengths > len(mv)).any():
        joined = _joined(mv, starts, lengths)
        return joined.cast(pa.string()) if text else joined
    n = len(starts)
    views = binary_views(mv, starts, lengths)
    view_type, plain_type = (
        (pa.string_view(), pa.string()) if text else (pa.binary_view(), pa.binary())
    )
    as_view = pa.Array.from_buffers(view_type, n, [None, pa.py_buffer(views), pa.py_buffer(mv)])
    return as_view.cast(plain_type)


def _joined(
    mv: memoryview, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> pa.Array:
    """:func:`_binary` for a buffer too large for view offsets: one joined copy."""
    data = b"".join([mv[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)])
    offsets = np.zeros(len(starts) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(
        pa.binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _topics(
    mv: memoryview, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> pa.Array:
    raw = _binary(mv, starts, lengths)
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        # Java decodes with replacement characters; do the same for corrupt topics.
        return pa.array([b.decode("utf-8", "replace") for b in raw.to_pylist()], pa.string())


class BatchDecodeError(ValueError):
    """A record whose inner lengths disagree with TOTALSIZE, at buffer position ``position``."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


def decode_batch(
    cols: RecordColumns, body_crcs: npt.NDArray[np.int64] | None = None
) -> pa.RecordBatch:
    """The records of ``cols`` as a :data:`RECORD_SCHEMA` batch (``body_crcs``: the records'
    :meth:`~RecordColumns.body_crcs`, when the caller has them already).

    Raises :class:`BatchDecodeError` naming the first record whose fields do not add up to its
    TOTALSIZE (callers fall back to the record-by-record check there).
    """
    if not cols.well_formed.all():
        bad = int(cols.positions[int(np.argmin(cols.well_formed))])
        raise BatchDecodeError("record fields do not add up to TOTALSIZE", bad)
    mv = memoryview(cols.buf)
    v6 = cl.IPV6_HOST_SIZE - 4
    v4 = cl.IPV4_HOST_SIZE - 4
    born_ip = np.where(cols.sys_flag & cl.BORNHOST_V6_FLAG, v6, v4)
    store_ip = np.where(cols.sys_flag & cl.STOREHOSTADDRESS_V6_FLAG, v6, v4)
    columns = [
        pa.array(cols.positions + cols.file_start, pa.int64()),
        pa.array(cols.store_size, pa.int32()),
        pa.array(cols.version, pa.int8()),
        pa.array(cols.body_crc, pa.int32()),
        pa.array((cols.body_crcs() if body_crcs is None else body_crcs) == cols.body_crc),
        pa.array(cols.queue_id, pa.int32()),
        pa.array(cols.flag, pa.int32()),
        pa.array(cols.queue_offset, pa.int64()),
        pa.array(cols.physical_offset_field, pa.int64()),
        pa.array(cols.sys_flag, pa.int32()),
        pa.array(cols.born_timestamp, pa.int64()),
        _binary(mv, cols.born_host_at, born_ip),
        pa.array(cols.born_port, pa.int32()),
        pa.array(cols.store_timestamp, pa.int64()),
        _binary(mv, cols.store_host_at, store_ip),
        pa.array(cols.store_port, pa.int32()),
        pa.array(cols.reconsume_times, pa.int32()),
        pa.array(cols.prepared_transaction_offset, pa.int64()),
        _topics(mv, cols.topic_at, cols.topic_length),
        _binary(mv, cols.properties_at, cols.properties_length),
        _binary(mv, cols.body_at, cols.body_length),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)


# --- whole columns of the message object (the Parquet export) --------------------------------

# Decompressed bodies held at once by :func:`consumer_bodies` (one body may exceed it alone).
BODY_BUDGET = 256 * 1024 * 1024


class BodyColumns(NamedTuple):
    """The body columns of rows ``[start, stop)``: ``body`` as its consumer gets it (a
    compressed body decompressed; the stored bytes where it does not decompress),
    ``body_stored`` (the stored bytes of a compressed body, null otherwise) and ``body_error``
    (why a compressed body does not decompress, null otherwise)."""

    start: int
    stop: int
    body: pa.Array
    body_stored: pa.Array
    body_error: pa.Array


def consumer_bodies(
    stored: pa.Array, sys_flag: npt.NDArray[np.int64], budget: int = BODY_BUDGET
) -> Iterator[BodyColumns]:
    """The body columns of a batch's rows (``stored``: its binary ``body`` column, ``sys_flag``
    its sysFlags), in consecutive slices whose decompressed bodies add up to at most
    ``budget`` bytes, so that compressed bodies (a decompression bomb each, in hostile input)
    never make a batch's memory grow past it. Without compressed rows: one slice, the
    stored column itself."""
    n = len(stored)
    rows = np.flatnonzero(sys_flag & cl.COMPRESSED_FLAG)
    if not len(rows):
        yield BodyColumns(0, n, stored, pa.nulls(n, pa.binary()), pa.nulls(n, pa.string()))
        return
    start, size = 0, 0
    pending: list[tuple[int, ConsumerBody]] = []
    for r in rows.tolist():
        decoded = consumer_body(stored[r].as_py(), int(sys_flag[r]))
        if pending and size + len(decoded.body) > budget:
            yield _body_slice(stored, start, r, pending)
            start, size, pending = r, 0, []
        pending.append((r, decoded))
        size += len(decoded.body)
    yield _body_slice(stored, start, n, pending)


def _body_slice(
    stored: pa.Array, start: int, stop: int, decoded: list[tuple[int, ConsumerBody]]
) -> BodyColumns:
    part = stored.slice(start, stop - start)
    k = stop - start
    rel = np.array([r - start for r, _ in decoded], np.int64)
    take = np.arange(k, dtype=np.int64)
    take[rel] = k + np.arange(len(rel))
    new = pa.array([d.body for _, d in decoded], pa.binary())
    body = pa.concat_arrays([part.cast(pa.binary()), new]).take(pa.array(take))
    which = np.full(k, -1, np.int64)
    which[rel] = rel
    errors = np.full(k, None, object)
    errors[rel] = [d.error for _, d in decoded]
    return BodyColumns(
        start,
        stop,
        body,
        part.take(pa.array(which, mask=which < 0)),
        pa.array(errors.tolist(), pa.string()),
    )


# The two hex digits of each byte value as one uint16: a lookup gives a byte's text at once.
_HEX_PAIRS = np.frombuffer(b"".join(b"%02X" % i for i in range(256)), np.uint16)


PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
KEYS_TYPE = pa.list_(pa.field("element", pa.string()))  # Parquet's name for list items


def utf8_column(raw: pa.Array) -> pa.Array:
    """Binary to string, decoding invalid UTF-8 with replacement characters as Java does."""
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()],
            pa.string(),
        )


def properties_column(raw: pa.Array) -> pa.Array:
    """:func:`parse_properties` for a binary column of raw properties: a map column, entries
    in order of appearance (the later of two equal names in its place).

    The entries are found in C (:func:`~rmqinspect.format.speedups.property_entries`) and
    become the map's names and values without a Python step per record; rows C declines (text
    that is not UTF-8, or many entries) and a build without the extension take
    :func:`_arrow_properties_column`, which gives the same map.
    """
    entries = None
    if len(raw) and not raw.null_count:
        offsets = np.frombuffer(raw.buffers()[1], np.int32)[raw.offset : raw.offset + len(raw) + 1]
        data = raw.buffers()[2]
        mv = memoryview(data if data is not None else b"")
        starts = offsets[:-1].astype(np.int64)
        entries = property_entries(mv, starts, offsets[1:] - starts)
    if entries is None:
        return _arrow_properties_column(raw)
    rows, name_at, name_len, value_at, value_len = entries
    map_offsets = np.zeros(len(raw) + 1, np.int32)
    np.cumsum(np.bincount(rows, minlength=len(raw)), out=map_offsets[1:])
    return pa.MapArray.from_arrays(
        pa.array(map_offsets, pa.int32()),
        _binary(mv, name_at, name_len, text=True),
        _binary(mv, value_at, value_len, text=True),
        type=PROPERTIES_TYPE,
    )


def map_values(maps: pa.MapArray, name: str) -> pa.Array:
    """The value under ``name`` in each map (null where absent): ``pc.map_lookup(maps, name,
    "first")`` for maps without repeated names, found with one comparison over all keys."""
    offsets = maps.offsets.to_numpy()
    at = np.flatnonzero(pc.equal(maps.keys, name).to_numpy(zero_copy_only=False))
    which = np.full(len(maps), -1, np.int64)
    which[np.searchsorted(offsets, at, side="right") - 1] = at
    return maps.items.take(pa.array(which, mask=which < 0))


def _arrow_properties_column(raw: pa.Array) -> pa.Array:
    """:func:`properties_column` with Arrow compute functions alone.

    The same rules, applied to all rows at once: entries split on 0x02, the name ends at the
    entry's first 0x01, entries with an empty name or value are dropped and a later duplicate
    name wins. Splitting the bytes before decoding equals decoding first, because 0x01 and 0x02
    never belong to a multi-byte UTF-8 sequence.
    """
    entries = pc.split_pattern(raw, pattern=PROPERTY_SEPARATOR.encode())
    rows = pc.list_parent_indices(entries).to_numpy()
    pairs = pc.split_pattern(
        pc.list_flatten(entries), pattern=NAME_VALUE_SEPARATOR.encode(), max_splits=1
    )
    bounds = pairs.offsets.to_numpy()
    first = bounds[:-1]
    names = pairs.values.take(pa.array(first))
    # An entry without 0x01 has no value; it is dropped like an empty one.
    values = pairs.values.take(pa.array(first + 1, mask=np.diff(bounds) != 2))
    keep = pc.and_kleene(
        pc.greater(pc.binary_length(names), 0), pc.greater(pc.binary_length(values), 0)
    )
    valid = pc.fill_null(keep, False)
    # Names are compared decoded: two invalid byte sequences can decode to the same name.
    names, values, rows = (
        utf8_column(names.filter(valid)),
        values.filter(valid),
        rows[valid.to_numpy(zero_copy_only=False)],
    )
    last = _last_of_each_name(names, rows)
    rows = rows[last]
    mask = pa.array(last)
    offsets = np.zeros(len(raw) + 1, np.int32)
    np.cumsum(np.bincount(rows, minlength=len(raw)), out=offsets[1:])
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        names.filter(mask),
        utf8_column(values.filter(mask)),
        type=PROPERTIES_TYPE,
    )


def _last_of_each_name(names: pa.Array, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """False for an entry whose name comes again later in the same row (the later one wins).

    Writers never repeat a name, so rows are only inspected one by one where the cheap test
    (distinct names per row fewer than entries per row) says a repeat exists.
    """
    keep = np.ones(len(names), np.bool_)
    if not len(names):
        return keep
    encoded = pc.dictionary_encode(names)
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    starts = np.flatnonzero(np.diff(rows, prepend=-1))  # rows come in order, entries together
    total = np.diff(starts, append=len(rows))
    if len(encoded.dictionary) <= 64:
        seen_bits = np.bitwise_or.reduceat(
            np.left_shift(np.uint64(1), codes.astype(np.uint64)), starts
        )
        distinct = np.unpackbits(seen_bits.view(np.uint8)).reshape(-1, 64).sum(axis=1)
    else:
        pairs = np.unique(rows * len(encoded.dictionary) + codes) // len(encoded.dictionary)
        distinct = np.bincount(pairs, minlength=int(rows.max()) + 1)[rows[starts]]
    for first, count in zip(starts[distinct < total], total[distinct < total], strict=True):
        at = np.arange(first, first + count)
        seen: set[int] = set()
        for i in at[::-1]:
            keep[i] = int(codes[i]) not in seen
            seen.add(int(codes[i]))
    return keep


def keys_column(keys: pa.Array) -> pa.Array:
    """:func:`split_keys` for a string column (null for a message without KEYS)."""
    pieces = pc.split_pattern(pc.fill_null(keys, ""), pattern=KEY_SEPARATOR)
    rows = pc.list_parent_indices(pieces).to_numpy()
    flat = pc.list_flatten(pieces)
    mask = pc.greater(pc.binary_length(flat), 0)
    rows = rows[mask.to_numpy(zero_copy_only=False)]
    offsets = np.zeros(len(keys) + 1, np.int32)
    np.cumsum(np.bincount(rows, minlength=len(keys)), out=offsets[1:])
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), flat.filter(mask), type=KEYS_TYPE
    )


def host_text_column(ip: pa.Array, port: pa.Array) -> pa.Array:
    """``str(HostAddress)`` for a column of raw addresses (binary) and ports (int32).

    A store holds few distinct addresses, so each is formatted once and the text is taken per row.
    """
    encoded = pc.dictionary_encode(ip)
    texts = pa.array(
        [HostAddress(raw, 0).host_text for raw in encoded.dictionary.to_pylist()], pa.string()
    )
    return pc.binary_join_element_wise(texts.take(encoded.indices), pc.cast(port, pa.string()), ":")


def offset_msg_id_column(
    ip: pa.Array, port: npt.NDArray[np.int64], physical_offset: npt.NDArray[np.int64]
) -> pa.Array:
    """:func:`encode_offset_msg_id` for whole columns: raw store addresses (binary, 4 or 16
    bytes), ports and PHYSICALOFFSET fields in, a string column of offsetMsgIds out."""
    n = len(ip)
    offsets = np.frombuffer(ip.buffers()[1], np.int32)[ip.offset : ip.offset + n + 1]
    data = np.frombuffer(ip.buffers()[2] or b"", np.uint8)
    widths = np.diff(offsets).astype(np.int64)
    if np.any((widths != 4) & (widths != 16)):
        raise ValueError("store host addresses must be 4 or 16 bytes")
    # Each address width's ids are fixed-width rows of hex text, one block per width; the
    # column is then views into the blocks, copied into one string array.
    blocks, starts = [], np.zeros(n, np.int64)
    at = 0
    for width in (4, 16):
        rows = np.flatnonzero(widths == width)
        if not len(rows):
            continue
        raw = np.empty((rows.size, width + 12), np.uint8)
        same = rows.size == n  # one width (the usual store): the addresses lie back to back
        raw[:, :width] = (
            data[offsets[0] : offsets[0] + n * width].reshape(n, width)
            if same
            else data[offsets[rows, None] + np.arange(width)]
        )
        raw[:, width : width + 4] = port[rows].astype(">i4").view(np.uint8).reshape(-1, 4)
        raw[:, width + 4 :] = physical_offset[rows].astype(">i8").view(np.uint8).reshape(-1, 8)
        blocks.append(np.take(_HEX_PAIRS, raw).view(np.uint8).reshape(-1))
        starts[rows] = at + np.arange(rows.size, dtype=np.int64) * 2 * (width + 12)
        at += blocks[-1].size
    text = np.concatenate(blocks) if blocks else np.zeros(0, np.uint8)
    return _binary(text.data, starts, 2 * (widths + 12), text=True)
