"""Columnar decoding of many CommitLog records per call, for scans and the Parquet export.

Finding record boundaries is inherently sequential (each TOTALSIZE leads to the next record), so
:func:`walk_records` reads only the two leading ints of each record. Every other field is then
gathered for the whole run at once with numpy, and bodies, topics and properties become Arrow
binary columns without per-field Python work.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rmqinspect.format import commitlog as cl

_HEAD2 = struct.Struct(">ii")
_MIN_RECORD = 91  # calMsgLength of an empty V1 IPv4 record

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


@dataclass(frozen=True, slots=True)
class Walk:
    """Record starts (buffer positions) of a run, and where and why the run ended."""

    positions: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int32]
    end: int  # buffer position after the last record of the run
    stop: str  # "blank", "limit", "bad_magic" or "bad_size"


def walk_records(
    buf: bytes | memoryview,
    pos: int = 0,
    *,
    max_records: int = 1 << 16,
    accept_v2: bool = True,
) -> Walk:
    """Follow TOTALSIZE from ``pos`` through well-formed message headers.

    Stops at a BLANK, at a magic that is not a message, at a TOTALSIZE that cannot be a record
    (below the minimum or past the buffer), or after ``max_records`` (then ``stop`` is "limit"
    and the caller continues from ``end``). Checksums and inner lengths are checked later.
    """
    limit = len(buf)
    positions: list[int] = []
    sizes: list[int] = []
    unpack = _HEAD2.unpack_from
    v1, v2 = cl.MESSAGE_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE_V2 if accept_v2 else cl.MESSAGE_MAGIC_CODE
    stop = "limit"
    while len(positions) < max_records:
        if pos + 8 > limit:
            stop = "bad_size"
            break
        size, magic = unpack(buf, pos)
        if magic != v1 and magic != v2:
            stop = "blank" if magic == cl.BLANK_MAGIC_CODE else "bad_magic"
            break
        if size < _MIN_RECORD or pos + size > limit:
            stop = "bad_size"
            break
        positions.append(pos)
        sizes.append(size)
        pos += size
    return Walk(np.array(positions, np.int64), np.array(sizes, np.int32), pos, stop)


def _gather(
    data: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], dtype: str
) -> npt.NDArray[np.int64]:
    """Big-endian integers of ``dtype`` ('>i2', '>i4', '>i8') read at every offset in ``at``."""
    width = np.dtype(dtype).itemsize
    raw = data[at[:, None] + np.arange(width)]
    return np.ascontiguousarray(raw).view(dtype).reshape(-1).astype(np.int64)


def _binary(
    mv: memoryview, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> pa.Array:
    """An Arrow binary array of ``mv[start:start+length]`` slices, built from one joined buffer."""
    lengths = np.maximum(lengths, 0)
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


def decode_batch(buf: bytes | memoryview, walk: Walk, file_start: int = 0) -> pa.RecordBatch:
    """Decode every record of ``walk`` into a :data:`RECORD_SCHEMA` batch.

    Raises :class:`BatchDecodeError` naming the first record whose fields do not add up to its
    TOTALSIZE (callers fall back to the record-by-record check there).
    """
    mv = memoryview(buf)
    data = np.frombuffer(mv, np.uint8)
    p = walk.positions
    n = len(p)
    sys_flag = _gather(data, p + 36, ">i4")
    born_len = np.where(sys_flag & cl.BORNHOST_V6_FLAG, 20, 8)
    store_len = np.where(sys_flag & cl.STOREHOSTADDRESS_V6_FLAG, 20, 8)
    magic = _gather(data, p + 4, ">i4")
    v2 = magic == cl.MESSAGE_MAGIC_CODE_V2
    store_ts_at = p + 48 + born_len
    store_host_at = store_ts_at + 8
    tail_at = store_host_at + store_len  # RECONSUMETIMES
    ends = p + walk.sizes
    # Hosts flagged IPv6 in a too-short record would put the fixed fields past its end.
    short = tail_at + 16 > ends
    if np.any(short):
        raise BatchDecodeError("fixed fields run past the record", int(p[np.argmax(short)]))
    body_len = _gather(data, tail_at + 12, ">i4")
    body_at = tail_at + 16
    topic_len_at = body_at + np.maximum(body_len, 0)
    # A corrupt body length could point outside the record; clamp before gathering past it.
    if np.any(topic_len_at + 2 > ends):
        bad = int(p[np.argmax(topic_len_at + 2 > ends)])
        raise BatchDecodeError("body length runs past the record", bad)
    topic_len = np.where(
        v2, _gather(data, topic_len_at, ">i2"), data[topic_len_at].astype(np.int8).astype(np.int64)
    )
    topic_at = topic_len_at + np.where(v2, 2, 1)
    props_len_at = topic_at + np.maximum(topic_len, 0)
    if np.any(props_len_at + 2 > ends):
        bad = int(p[np.argmax(props_len_at + 2 > ends)])
        raise BatchDecodeError("topic length runs past the record", bad)
    props_len = _gather(data, props_len_at, ">i2")
    expected = props_len_at + 2 + np.maximum(props_len, 0) - p
    mismatch = (expected != walk.sizes) | (topic_len < 0)
    if np.any(mismatch):
        bad = int(p[np.argmax(mismatch)])
        raise BatchDecodeError("record fields do not add up to TOTALSIZE", bad)
    body = _binary(mv, body_at, body_len)
    crc_ok = np.fromiter(
        (
            zlib.crc32(mv[s : s + max(k, 0)]) & 0x7FFFFFFF
            for s, k in zip(body_at.tolist(), body_len.tolist(), strict=True)
        ),
        np.int64,
        n,
    ) == _gather(data, p + 8, ">i4")
    born_ip = _binary(mv, p + 48, born_len - 4)
    store_ip = _binary(mv, store_host_at, store_len - 4)
    columns = [
        pa.array(p + file_start, pa.int64()),
        pa.array(walk.sizes, pa.int32()),
        pa.array(np.where(v2, 2, 1), pa.int8()),
        pa.array(_gather(data, p + 8, ">i4"), pa.int32()),
        pa.array(crc_ok, pa.bool_()),
        pa.array(_gather(data, p + 12, ">i4"), pa.int32()),
        pa.array(_gather(data, p + 16, ">i4"), pa.int32()),
        pa.array(_gather(data, p + 20, ">i8"), pa.int64()),
        pa.array(_gather(data, p + 28, ">i8"), pa.int64()),
        pa.array(sys_flag, pa.int32()),
        pa.array(_gather(data, p + 40, ">i8"), pa.int64()),
        born_ip,
        pa.array(_gather(data, p + 48 + born_len - 4, ">i4"), pa.int32()),
        pa.array(_gather(data, store_ts_at, ">i8"), pa.int64()),
        store_ip,
        pa.array(_gather(data, store_host_at + store_len - 4, ">i4"), pa.int32()),
        pa.array(_gather(data, tail_at, ">i4"), pa.int32()),
        pa.array(_gather(data, tail_at + 4, ">i8"), pa.int64()),
        _topics(mv, topic_at, topic_len),
        _binary(mv, props_len_at + 2, props_len),
        body,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)
