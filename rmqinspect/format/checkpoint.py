"""The store checkpoint (``<root>/checkpoint``, spec section 8): five big-endian i64 fields in a
4096-byte page. 4.9 writes the first three; 5.x adds the HA flushed offset and the confirm
offset."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from rmqinspect.errors import DecodeError
from rmqinspect.format.javamath import wrap64
from rmqinspect.format.profile import Profile

Buffer = bytes | bytearray | memoryview

CHECKPOINT_FILE_SIZE = 4096  # OS_PAGE_SIZE: the broker maps exactly one page
CHECKPOINT_MIN_SIZE = 24  # the three timestamps every version reads
CHECKPOINT_FIELDS_SIZE = 40
CHECKPOINT_READ_LIMIT = 2 * CHECKPOINT_FILE_SIZE  # enough to tell a bad size and a dirty tail
MIN_TIMESTAMP_MARGIN_MS = 3000

_THREE = struct.Struct(">qqq")
_FIVE = struct.Struct(">qqqqq")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    file_size: int = CHECKPOINT_FILE_SIZE  # bytes decoded; the broker always maps 4096
    nonzero_tail: bool = False  # bytes after the five fields are not all zero

    @property
    def size_anomaly(self) -> str | None:
        """Why the file does not look like one the broker wrote, or None."""
        if self.file_size < CHECKPOINT_FIELDS_SIZE:
            return (
                f"checkpoint is {self.file_size} bytes; fields past the end read as 0, as the "
                f"broker would see them after extending the file to {CHECKPOINT_FILE_SIZE}"
            )
        if self.file_size != CHECKPOINT_FILE_SIZE:
            return f"checkpoint is {self.file_size} bytes, the broker maps {CHECKPOINT_FILE_SIZE}"
        return None

    def min_timestamp(self) -> int:
        """``StoreCheckpoint.getMinTimestamp``: the 3 s safety margin, floored at 0."""
        low = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return max(0, wrap64(low - MIN_TIMESTAMP_MARGIN_MS))

    def min_timestamp_index(self) -> int:
        """``StoreCheckpoint.getMinTimestampIndex``: the index time gets no margin."""
        return min(self.min_timestamp(), self.index_msg_timestamp)


def decode_checkpoint(buf: Buffer, file_size: int | None = None) -> Checkpoint:
    """Read all five fields; bytes the buffer lacks read as 0 (see ``size_anomaly``).
    ``file_size`` is the size of the file when ``buf`` holds only its first bytes."""
    size = len(buf)
    if size < CHECKPOINT_MIN_SIZE:
        raise DecodeError(
            f"checkpoint needs at least {CHECKPOINT_MIN_SIZE} bytes, got {size}", size
        )
    head = bytes(buf[:CHECKPOINT_FIELDS_SIZE]).ljust(CHECKPOINT_FIELDS_SIZE, b"\0")
    physic, logics, index, master_flushed, confirm = _FIVE.unpack(head)
    tail = np.frombuffer(buf, np.uint8, offset=min(size, CHECKPOINT_FIELDS_SIZE))
    return Checkpoint(
        physic,
        logics,
        index,
        master_flushed,
        confirm,
        size if file_size is None else max(file_size, size),
        nonzero_tail=bool(tail.any()),
    )


def encode_checkpoint(cp: Checkpoint, profile: Profile) -> bytes:
    """The 4096-byte file ``StoreCheckpoint.flush`` leaves for a fresh store of ``profile``."""
    out = bytearray(CHECKPOINT_FILE_SIZE)
    if profile.checkpoint_has_confirm_offset:
        _FIVE.pack_into(
            out,
            0,
            cp.physic_msg_timestamp,
            cp.logics_msg_timestamp,
            cp.index_msg_timestamp,
            cp.master_flushed_offset,
            cp.confirm_phy_offset,
        )
    else:
        _THREE.pack_into(
            out, 0, cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp
        )
    return bytes(out)
