"""The reference index write path: ``IndexFile.putKey`` and ``IndexService.buildIndex`` one key
at a time, transcribed from the broker (spec §7.3-7.5) into plain Python over one bytearray per
file. Slow and obvious on purpose: the vectorised builder in ``rmqinspect.format`` must produce
the same bytes and headers."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from rmqinspect.errors import DecodeError
from rmqinspect.format.commitlog import TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from rmqinspect.format.index import (
    INDEX_HEADER_SIZE,
    INVALID_INDEX,
    IndexGeometry,
    IndexHeader,
    index_keys,
)
from rmqinspect.format.javahash import index_key_hash
from rmqinspect.format.javamath import INT_MAX, wrap32, wrap64

Buffer = bytes | bytearray | memoryview

_ENTRY = struct.Struct(">iqii")
_I32 = struct.Struct(">i")


class ReferenceIndexFile:
    """An in-memory ``IndexFile``: ``put_key`` writes the same bytes, in the same order, as the
    broker's mapped buffer receives them (header fields are written in place as they change)."""

    def __init__(self, geometry: IndexGeometry, end_phy_offset: int = 0, end_timestamp: int = 0):
        """``new IndexFile(name, slots, indexNum, endPhyOffset, endTimestamp)``."""
        self.geometry = geometry
        self._buf = bytearray(geometry.file_size)
        self._begin_timestamp = 0
        self._end_timestamp = 0
        self._begin_phy_offset = 0
        self._end_phy_offset = 0
        self._hash_slot_count = 0
        self._index_count = 1
        if end_phy_offset > 0:
            self._set_long(16, "_begin_phy_offset", end_phy_offset)
            self._set_long(24, "_end_phy_offset", end_phy_offset)
        if end_timestamp > 0:
            self._set_long(0, "_begin_timestamp", end_timestamp)
            self._set_long(8, "_end_timestamp", end_timestamp)

    @classmethod
    def new_rolled(cls, previous: ReferenceIndexFile) -> ReferenceIndexFile:
        """The file ``getAndCreateLastIndexFile`` creates after ``previous`` (spec 7.5)."""
        return cls(previous.geometry, previous._end_phy_offset, previous._end_timestamp)

    @classmethod
    def from_bytes(cls, buf: Buffer, geometry: IndexGeometry) -> ReferenceIndexFile:
        """Continue an existing file, as ``IndexFile.load`` does before the broker appends."""
        if len(buf) > geometry.file_size:
            raise DecodeError(f"index file of {len(buf)} bytes exceeds {geometry.file_size}")
        header = IndexHeader.decode(buf)
        builder = cls(geometry)
        builder._buf[: len(buf)] = buf
        builder._begin_timestamp = header.begin_timestamp
        builder._end_timestamp = header.end_timestamp
        builder._begin_phy_offset = header.begin_phy_offset
        builder._end_phy_offset = header.end_phy_offset
        builder._hash_slot_count = header.hash_slot_count
        builder._index_count = header.loaded_index_count
        return builder

    def _set_long(self, pos: int, attr: str, value: int) -> None:
        setattr(self, attr, value)
        struct.pack_into(">q", self._buf, pos, value)

    @property
    def header(self) -> IndexHeader:
        """The broker's in-memory header (``index_count`` ≥ 1 even before the first put)."""
        return IndexHeader(
            self._begin_timestamp,
            self._end_timestamp,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._hash_slot_count,
            self._index_count,
        )

    @property
    def is_full(self) -> bool:
        return self._index_count >= self.geometry.index_num

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """``IndexFile.putKey``; False when full. ``key`` is the full ``topic#key`` string."""
        return self.put_key_hash(index_key_hash(key), phy_offset, store_timestamp)

    def put_key_hash(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """``IndexFile.putKey`` of a key whose hash is ``key_hash``; False when full."""
        if self.is_full:
            return False
        geometry = self.geometry
        slot_pos = geometry.slot_position(key_hash % geometry.slot_num)
        slot_value = _I32.unpack_from(self._buf, slot_pos)[0]
        if slot_value <= INVALID_INDEX or slot_value > self._index_count:
            slot_value = INVALID_INDEX
        # Negative differences clamp to 0, so floor division gives Java's truncating result.
        time_diff = (wrap64(store_timestamp - self._begin_timestamp)) // 1000
        if self._begin_timestamp <= 0 or time_diff < 0:
            time_diff = 0
        time_diff = min(time_diff, INT_MAX)
        entry_pos = geometry.entry_position(self._index_count)
        _ENTRY.pack_into(self._buf, entry_pos, key_hash, phy_offset, time_diff, slot_value)
        _I32.pack_into(self._buf, slot_pos, self._index_count)
        # After the entry: the first entry's timeDiff used the previous begin (spec 7.3).
        if self._index_count <= 1:
            self._set_long(16, "_begin_phy_offset", phy_offset)
            self._set_long(0, "_begin_timestamp", store_timestamp)
        if slot_value == INVALID_INDEX:
            self._hash_slot_count = wrap32(self._hash_slot_count + 1)
            _I32.pack_into(self._buf, 32, self._hash_slot_count)
        self._index_count += 1
        _I32.pack_into(self._buf, 36, self._index_count)
        self._set_long(24, "_end_phy_offset", phy_offset)
        self._set_long(8, "_end_timestamp", store_timestamp)
        return True

    def flush(self) -> None:
        """``IndexFile.flush``: rewrite the whole header."""
        self._buf[:INDEX_HEADER_SIZE] = self.header.encode()

    def to_bytes(self) -> bytes:
        return bytes(self._buf)


class ReferenceIndexService:
    """``IndexService.buildIndex`` one record at a time over in-memory files: rolls to a new
    file when the last one is full. ``triggers`` holds the store timestamp of the record that
    created each new file; ``index_msg_timestamp`` the checkpoint's value after the rolls."""

    def __init__(self, geometry: IndexGeometry, files: Sequence[ReferenceIndexFile] = ()) -> None:
        self.geometry = geometry
        self.files: list[ReferenceIndexFile] = list(files)
        self.triggers: list[int] = []
        self.index_msg_timestamp: int | None = None
        self.first_indexed_offset: int | None = None
        self.entries = 0

    def _last_file(self, store_timestamp: int) -> ReferenceIndexFile:
        """``getAndCreateLastIndexFile``; the previous full file is flushed."""
        if not self.files or self.files[-1].is_full:
            if self.files:
                previous = self.files[-1]
                self.files.append(ReferenceIndexFile.new_rolled(previous))
                if previous.header.end_timestamp > 0:
                    self.index_msg_timestamp = previous.header.end_timestamp
            else:
                self.files.append(ReferenceIndexFile(self.geometry))
            self.triggers.append(store_timestamp)
        return self.files[-1]

    def dispatch(
        self, phy_offset: int, store_timestamp: int, sys_flag: int, key_hashes: Sequence[int]
    ) -> None:
        """Index one record: ``key_hashes`` of its keys (UNIQ_KEY, then the KEYS elements)."""
        current = self._last_file(store_timestamp)
        if phy_offset < current.header.end_phy_offset:
            return
        if sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE:
            return
        if self.first_indexed_offset is None:
            self.first_indexed_offset = phy_offset
        for key_hash in key_hashes:
            while not current.put_key_hash(key_hash, phy_offset, store_timestamp):
                current = self._last_file(store_timestamp)
            self.entries += 1

    def dispatch_keys(
        self,
        topic: str,
        phy_offset: int,
        store_timestamp: int,
        sys_flag: int,
        uniq_key: str | None,
        keys: str | None,
    ) -> None:
        """:meth:`dispatch` of a record given its stored topic and properties."""
        hashes = [index_key_hash(k) for k in index_keys(topic, uniq_key, keys)]
        self.dispatch(phy_offset, store_timestamp, sys_flag, hashes)
