"""RocksDB consume queue keys and values (``storeType=defaultRocksDB``, RocketMQ 5.2+;
docs/rocksdb-consume-queue.md). Pure decoders over bytes, big-endian as ``ByteBuffer`` writes.

- unit key (``RocksDBConsumeQueueTable.buildCQKeyBB0``): topic length int, CTRL_1, topic,
  CTRL_1, queueId int, CTRL_1, consume queue offset long; value (``buildCQValueBB0``): 28 bytes,
  commitlog offset long, size int, tagsCode long, store timestamp long.
- offset key (``RocksDBConsumeQueueOffsetTable.buildOffsetKeyBB0``): topic length int, CTRL_1,
  topic, CTRL_1, ``max``/``min``, CTRL_1, queueId int; value: commitlog offset long, consume
  queue offset long (16 bytes), except the dispatch checkpoint's (``appendMaxPhyOffset``): one
  long.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import DecodeError
from rmqinspect.format.consumequeue import CQ_UNIT_DTYPE

CTRL_0, CTRL_1, CTRL_2 = 0, 1, 2  # RocksDBConsumeQueueStore.CTRL_*
UNIT_FAMILY = "default"  # ConsumeQueueRocksDBStorage.postLoad: RocksDB.DEFAULT_COLUMN_FAMILY
OFFSET_FAMILY = "offset"
# TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC: the key of the dispatch checkpoint
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"

ROCKS_UNIT_SIZE = 28  # RocksDBConsumeQueueTable.CQ_UNIT_SIZE
OFFSET_VALUE_SIZE = 16  # RocksDBConsumeQueueOffsetTable.OFFSET_VALUE_LENGTH
UNIT_KEY_EXTRA = 4 + 1 + 1 + 4 + 1 + 8  # CQ_KEY_LENGTH_WITHOUT_TOPIC_BYTES
OFFSET_KEY_EXTRA = 4 + 1 + 1 + 3 + 1 + 4  # OFFSET_KEY_LENGTH_WITHOUT_TOPIC_BYTES

ROCKS_UNIT_DTYPE = np.dtype(
    [("phy_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"), ("store_timestamp", ">i8")]
)
assert ROCKS_UNIT_DTYPE.itemsize == ROCKS_UNIT_SIZE

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_OFFSET_VALUE = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class UnitKey:
    topic: str
    queue_id: int
    queue_offset: int


@dataclass(frozen=True, slots=True)
class OffsetKey:
    topic: str
    kind: str  # "max" or "min"
    queue_id: int


def _topic(key: bytes, extra: int) -> tuple[str, int]:
    """The topic of a key whose fixed part is ``extra`` bytes, and its length; DecodeError when
    the length field disagrees with the key (it never decides how much is read)."""
    if len(key) < extra:
        raise DecodeError(f"key of {len(key)} bytes is shorter than its {extra} fixed bytes", 0)
    (n,) = _INT.unpack_from(key, 0)
    if n < 0 or n + extra != len(key):
        raise DecodeError(
            f"topic length {n} does not fit a key of {len(key)} bytes ({extra} fixed)", 0
        )
    if key[4] != CTRL_1 or key[5 + n] != CTRL_1:
        raise DecodeError("key separators are not CTRL_1 (0x01)", 4)
    try:
        return key[5 : 5 + n].decode("utf-8"), n
    except UnicodeDecodeError:
        raise DecodeError("topic is not UTF-8", 5) from None


def decode_unit_key(key: bytes) -> UnitKey:
    topic, n = _topic(key, UNIT_KEY_EXTRA)
    at = 5 + n + 1
    if key[at + 4] != CTRL_1:
        raise DecodeError("key separator before the offset is not CTRL_1 (0x01)", at + 4)
    (queue_id,) = _INT.unpack_from(key, at)
    (queue_offset,) = _LONG.unpack_from(key, at + 5)
    return UnitKey(topic, queue_id, queue_offset)


def encode_unit_key(topic: str, queue_id: int, queue_offset: int) -> bytes:
    t = topic.encode("utf-8")
    return (
        _INT.pack(len(t))
        + bytes([CTRL_1])
        + t
        + bytes([CTRL_1])
        + _INT.pack(queue_id)
        + bytes([CTRL_1])
        + _LONG.pack(queue_offset)
    )


def unit_key_prefix(topic: str, queue_id: int) -> bytes:
    """The bytes every unit key of one queue starts with (the key less its offset)."""
    return encode_unit_key(topic, queue_id, 0)[:-8]


def encode_unit_value(phy_offset: int, size: int, tags_code: int, store_timestamp: int) -> bytes:
    return struct.pack(">qiqq", phy_offset, size, tags_code, store_timestamp)


def decode_offset_key(key: bytes) -> OffsetKey:
    topic, n = _topic(key, OFFSET_KEY_EXTRA)
    at = 5 + n + 1
    kind = key[at : at + 3]
    if kind not in (b"max", b"min") or key[at + 3] != CTRL_1:
        raise DecodeError(f"offset key names {kind!r}, not max or min", at)
    (queue_id,) = _INT.unpack_from(key, at + 4)
    return OffsetKey(topic, kind.decode("ascii"), queue_id)


def encode_offset_key(topic: str, kind: str, queue_id: int) -> bytes:
    t = topic.encode("utf-8")
    return (
        _INT.pack(len(t))
        + bytes([CTRL_1])
        + t
        + bytes([CTRL_1])
        + kind.encode("ascii")
        + bytes([CTRL_1])
        + _INT.pack(queue_id)
    )


def decode_offset_value(value: bytes) -> tuple[int, int]:
    """(commitlog offset, consume queue offset) of an offset entry."""
    if len(value) != OFFSET_VALUE_SIZE:
        raise DecodeError(f"offset value is {len(value)} bytes, not {OFFSET_VALUE_SIZE}", 0)
    phy, cq = _OFFSET_VALUE.unpack(value)
    return int(phy), int(cq)


def encode_offset_value(phy_offset: int, queue_offset: int) -> bytes:
    return _OFFSET_VALUE.pack(phy_offset, queue_offset)


def decode_checkpoint_value(value: bytes) -> int:
    """The dispatch checkpoint: the end of the furthest record dispatched."""
    if len(value) != _LONG.size:
        raise DecodeError(f"checkpoint value is {len(value)} bytes, not 8", 0)
    return int(_LONG.unpack(value)[0])


def as_file_units(units: npt.NDArray[np.void]) -> npt.NDArray[np.void]:
    """``ROCKS_UNIT_DTYPE`` rows as the file store's 20-byte units (``CQ_UNIT_DTYPE``)."""
    out = np.empty(len(units), CQ_UNIT_DTYPE)
    for name in ("phy_offset", "size", "tags_code"):
        out[name] = units[name]
    return out
