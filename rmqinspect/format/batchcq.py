"""BatchConsumeQueue units (46 bytes; RocketMQ 5.x topics with ``queue.type=BatchCQ``;
docs/batch-consume-queue.md). Pure decoders over bytes, big-endian as ``ByteBuffer`` writes.

A unit (``BatchConsumeQueue.putBatchMessagePositionInfo``): commitlog offset long, size int,
tagsCode long, store timestamp long, msgBaseOffset long, batchSize short, compactedOffset int
(written -1, ``INVALID_POS``), 4 reserved bytes. One unit serves the queue offsets
``[msgBaseOffset, msgBaseOffset + batchSize)``: the messages of one inner-batch record.
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

from rmqinspect.format.consumequeue import CQ_UNIT_DTYPE
from rmqinspect.format.npbytes import first_false

BCQ_STORE_UNIT_SIZE = 46  # BatchConsumeQueue.CQ_STORE_UNIT_SIZE
# MessageStoreConfig.mapperFileSizeBatchConsumeQueue
DEFAULT_BCQ_FILE_SIZE = 300_000 * BCQ_STORE_UNIT_SIZE
INVALID_POS = -1  # BatchConsumeQueue.INVALID_POS: the compactedOffset every unit is written with

BCQ_UNIT_DTYPE = np.dtype(
    [
        ("phy_offset", ">i8"),
        ("size", ">i4"),
        ("tags_code", ">i8"),
        ("store_timestamp", ">i8"),
        ("msg_base_offset", ">i8"),
        ("batch_size", ">i2"),
        ("compacted_offset", ">i4"),
        ("reserved", ">i4"),
    ]
)
assert BCQ_UNIT_DTYPE.itemsize == BCQ_STORE_UNIT_SIZE

_UNIT = struct.Struct(">qiqqqhii")


def encode_bcq_unit(
    phy_offset: int,
    size: int,
    tags_code: int,
    store_timestamp: int,
    msg_base_offset: int,
    batch_size: int,
) -> bytes:
    """One unit as ``putBatchMessagePositionInfo`` writes it."""
    return _UNIT.pack(
        phy_offset, size, tags_code, store_timestamp, msg_base_offset, batch_size, INVALID_POS, 0
    )


def bcq_units_array(buf: bytes | memoryview) -> npt.NDArray[np.void]:
    """All whole units of a BCQ file as a zero-copy structured view (a torn last unit is not
    one)."""
    return np.frombuffer(buf, dtype=BCQ_UNIT_DTYPE, count=len(buf) // BCQ_STORE_UNIT_SIZE)


def bcq_valid_mask(units: npt.NDArray[np.void]) -> npt.NDArray[np.bool_]:
    """The broker's test of a unit (``BatchConsumeQueue.recover`` and
    ``truncateDirtyLogicFiles``: ``offset >= 0 && size > 0 && msgBaseOffset >= 0 &&
    batchSize > 0``): the one home of the rule."""
    mask: npt.NDArray[np.bool_] = (
        (units["phy_offset"] >= 0)
        & (units["size"] > 0)
        & (units["msg_base_offset"] >= 0)
        & (units["batch_size"] > 0)
    )
    return mask


def bcq_valid_prefix(units: npt.NDArray[np.void]) -> int:
    """How many units from the start pass :func:`bcq_valid_mask` (recovery stops at the first
    that fails)."""
    return first_false(bcq_valid_mask(units))


def bcq_as_file_units(units: npt.NDArray[np.void]) -> npt.NDArray[np.void]:
    """``BCQ_UNIT_DTYPE`` rows as the 20-byte units (``CQ_UNIT_DTYPE``) the unit rule reads."""
    out = np.empty(len(units), CQ_UNIT_DTYPE)
    for name in ("phy_offset", "size", "tags_code"):
        out[name] = units[name]
    return out
