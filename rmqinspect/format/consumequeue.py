"""ConsumeQueue units (20 bytes) and ConsumeQueueExt units (rocketmq-store-format.md §5)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import DecodeError
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.format.npbytes import first_false
from rmqinspect.format.sizes import CQ_STORE_UNIT_SIZE as CQ_STORE_UNIT_SIZE  # re-exported

DEFAULT_CQ_FILE_SIZE = 300_000 * CQ_STORE_UNIT_SIZE
PRE_BLANK_SIZE = 0x7FFFFFFF  # fillPreBlank writes (0, Integer.MAX_VALUE, 0)

CQ_UNIT_DTYPE = np.dtype([("phy_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert CQ_UNIT_DTYPE.itemsize == CQ_STORE_UNIT_SIZE

_UNIT = struct.Struct(">qiq")

# ConsumeQueueExt addressing: a tagsCode at or below MAX_ADDR is a decorated ext offset.
EXT_MAX_ADDR = -(2**31) - 1
_LONG_MIN = -(2**63)
EXT_END_BLANK_DATA_LENGTH = 4
_EXT_HEAD = struct.Struct(">hqqh")  # size, tagsCode, msgStoreTime, bitMapSize


def cq_file_size(configured: int) -> int:
    """``getMappedFileSizeConsumeQueue``: the configured size rounded up to whole units."""
    units = -(-configured // CQ_STORE_UNIT_SIZE)
    return units * CQ_STORE_UNIT_SIZE


@dataclass(frozen=True, slots=True)
class CqUnit:
    phy_offset: int
    size: int
    tags_code: int


def decode_unit(buf: bytes | memoryview, offset: int) -> CqUnit:
    if offset < 0 or offset + CQ_STORE_UNIT_SIZE > len(buf):
        raise DecodeError("consume queue unit runs past the end of the file", offset)
    return CqUnit(*_UNIT.unpack_from(buf, offset))


def encode_unit(phy_offset: int, size: int, tags_code: int) -> bytes:
    return _UNIT.pack(phy_offset, size, tags_code)


PRE_BLANK_UNIT = encode_unit(0, PRE_BLANK_SIZE, 0)


def units_array(buf: bytes | memoryview) -> npt.NDArray[np.void]:
    """All whole units of a CQ file as a zero-copy structured numpy view."""
    count = len(buf) // CQ_STORE_UNIT_SIZE
    return np.frombuffer(buf, dtype=CQ_UNIT_DTYPE, count=count)


def valid_mask(units: npt.NDArray[np.void]) -> npt.NDArray[np.bool_]:
    """Which units pass the broker's test (``offset >= 0 && size > 0``): the one home of the
    rule. Pre-blank units pass it."""
    mask: npt.NDArray[np.bool_] = (units["phy_offset"] >= 0) & (units["size"] > 0)
    return mask


def pre_blank_mask(units: npt.NDArray[np.void]) -> npt.NDArray[np.bool_]:
    return (  # type: ignore[no-any-return]
        (units["phy_offset"] == 0) & (units["size"] == PRE_BLANK_SIZE) & (units["tags_code"] == 0)
    )


def valid_prefix(units: npt.NDArray[np.void]) -> int:
    """How many units from the start pass the broker's validity test (``ConsumeQueue.recover``
    stops at the first that fails)."""
    return first_false(valid_mask(units))


class TagsCodeKind(StrEnum):
    TAG_HASH = "tag_hash"
    DELIVER_TIME = "deliver_time"
    EXT_ADDRESS = "ext_address"
    NONE = "none"


TAGS_CODE_KINDS = (
    TagsCodeKind.EXT_ADDRESS,
    TagsCodeKind.DELIVER_TIME,
    TagsCodeKind.NONE,
    TagsCodeKind.TAG_HASH,
)
_DELIVER_TIME_ABOVE = 2**31  # a delivery time in ms is far past any 32-bit tag hash


def tags_code_kinds(tags_codes: npt.NDArray[np.int64], topic: str) -> npt.NDArray[np.int8]:
    """What each tagsCode of a ``topic`` queue means (an index into :data:`TAGS_CODE_KINDS`):
    an ext address, a delay delivery time, none, or a tag hash."""
    ext = tags_codes <= EXT_MAX_ADDR
    deliver = ~ext & (tags_codes > _DELIVER_TIME_ABOVE) & (topic == SCHEDULE_TOPIC)
    none = ~ext & ~deliver & (tags_codes == 0)
    kinds: npt.NDArray[np.int8] = np.select([ext, deliver, none], [0, 1, 2], 3).astype(np.int8)
    return kinds


def tags_code_kind(tags_code: int, topic: str) -> TagsCodeKind:
    """:func:`tags_code_kinds` of one unit."""
    return TAGS_CODE_KINDS[int(tags_code_kinds(np.array([tags_code], np.int64), topic)[0])]


def is_ext_address(tags_code: int) -> bool:
    return tags_code <= EXT_MAX_ADDR


def ext_address_to_offset(address: int) -> int:
    """Undecorate an ext address into a byte offset of the consumequeue_ext stream."""
    return address - _LONG_MIN


def ext_offset_to_address(offset: int) -> int:
    return offset + _LONG_MIN


@dataclass(frozen=True, slots=True)
class CqExtUnit:
    size: int
    tags_code: int
    msg_store_time: int
    filter_bitmap: bytes


def decode_ext_unit(buf: bytes | memoryview, offset: int) -> CqExtUnit | None:
    """The ext unit at ``offset``; None at an end-of-file marker (size ≤ 0)."""
    if offset + 2 > len(buf):
        raise DecodeError("consume queue ext unit runs past the end of the file", offset)
    (size,) = struct.unpack_from(">h", buf, offset)
    if size <= 0:
        return None
    if size < _EXT_HEAD.size or offset + size > len(buf):
        raise DecodeError(f"consume queue ext unit of size {size} is malformed", offset)
    _, tags_code, store_time, bitmap_size = _EXT_HEAD.unpack_from(buf, offset)
    if bitmap_size < 0 or _EXT_HEAD.size + bitmap_size != size:
        raise DecodeError(f"ext unit bitmap size {bitmap_size} disagrees with size {size}", offset)
    start = offset + _EXT_HEAD.size
    return CqExtUnit(size, tags_code, store_time, bytes(buf[start : start + bitmap_size]))
