"""Scanner columns as Arrow record batches, for listings and the Parquet export.

:mod:`rmqinspect.format.scan` finds the records and reads their fields as numpy columns; this
module only turns those columns into a :data:`RECORD_SCHEMA` batch, bodies, topics and
properties becoming Arrow binary columns built from one joined buffer each.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rmqinspect.format import commitlog as cl
from rmqinspect.format.scan import RecordColumns

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
