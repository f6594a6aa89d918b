"""Scanner columns as Arrow record batches, for listings and the Parquet export.

:mod:`rmqinspect.format.columns` finds the records and reads their fields as numpy columns; this
module only turns those columns into a :data:`RECORD_SCHEMA` batch, bodies, topics and
properties becoming Arrow binary columns built from one joined buffer each.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.npbytes import windows

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


_INLINE = 12  # an Arrow binary view holds values this short inline
_VIEW_OFFSET_MAX = 2**31 - 1


def _binary(
    mv: memoryview, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> pa.Array:
    """An Arrow binary array of the ``mv[start:start+length]`` slices.

    The slices become an Arrow binary *view* array pointing into ``mv`` (built with numpy, no
    Python per record), which Arrow then copies into a plain binary array in one pass.
    """
    lengths = np.maximum(lengths, 0)
    n = len(starts)
    data = np.frombuffer(mv, np.uint8)
    ends = starts + lengths
    if len(mv) > _VIEW_OFFSET_MAX or (ends > len(mv)).any():
        return _joined(mv, starts, lengths)
    views = np.zeros((n, 16), np.uint8)
    views[:, :4] = lengths.astype("<i4").view(np.uint8).reshape(n, 4)
    head = windows(data, starts, _INLINE)
    short = lengths <= _INLINE
    views[short, 4:] = head[short] * (np.arange(_INLINE) < lengths[short, None])
    # Rows near the buffer's end were read from an earlier position: take those few by slicing.
    for i in np.flatnonzero(short & (starts + _INLINE > len(mv))).tolist():
        value = bytes(mv[int(starts[i]) : int(ends[i])])
        views[i, 4 : 4 + len(value)] = np.frombuffer(value, np.uint8)
    long = ~short
    views[long, 4:8] = head[long, :4]  # prefix; buffer index 0 stays zero
    views[long, 12:] = starts[long].astype("<i4").view(np.uint8).reshape(-1, 4)
    as_view = pa.Array.from_buffers(
        pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(mv)]
    )
    return as_view.cast(pa.binary())


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


def decode_batch(cols: RecordColumns) -> pa.RecordBatch:
    """The records of ``cols`` as a :data:`RECORD_SCHEMA` batch.

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
        pa.array(cols.sizes, pa.int32()),
        pa.array(cols.version, pa.int8()),
        pa.array(cols.body_crc, pa.int32()),
        pa.array(cols.body_crcs() == cols.body_crc, pa.bool_()),
        pa.array(cols.queue_id, pa.int32()),
        pa.array(cols.flag, pa.int32()),
        pa.array(cols.queue_offset, pa.int64()),
        pa.array(cols.physical_offset, pa.int64()),
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
