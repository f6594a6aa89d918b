"""A store writer that lays out a store directory byte for byte as a broker would.

:class:`StoreWriter` follows the broker's append path (rocketmq-store-format.md §2.10): the
delay-level rewrite, queue-offset assignment, the V2 magic for long topics, BLANK records and file
rolling (§2.3), the properties string of the profile, body and property CRCs (§3). It dispatches
what the reput service would (§10.11) to the consume queues (§5.1, including the pre-blank fill)
and to the index (§7.3-7.5, including rollover), and on :meth:`StoreWriter.close` writes the
checkpoint (§8), ``lock``, ``abort`` (§9) and the ``config/`` JSON files (§11).

Speed matters (a 1 GiB store must take seconds): records are encoded with precompiled structs
and written in large batches; consume-queue units and index entries are buffered per dispatch
chunk and built with numpy. Files are created at full size with ``ftruncate`` and only their
data is written, so zero tails cost no disk space.
"""

from __future__ import annotations

import errno
import functools
import os
import struct
import zlib
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from rmqinspect.format import properties as props
from rmqinspect.format.checkpoint import Checkpoint, encode_checkpoint
from rmqinspect.format.commitlog import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    CRC32_RESERVED_LEN,
    DEFAULT_DELAY_LEVELS,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MULTI_TAGS_FLAG,
    SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    calc_msg_length,
    encode_prop_crc_digits,
    java_parse_int,
    parse_delay_levels,
)
from rmqinspect.format.config import (
    ConsumerOffsetTable,
    DataVersion,
    DelayOffsetTable,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
    encode_consumer_offsets,
    encode_delay_offsets,
    encode_subscription_groups,
    encode_topics,
    split_topic_group,
)
from rmqinspect.format.consumequeue import (
    CQ_STORE_UNIT_SIZE,
    CQ_UNIT_DTYPE,
    DEFAULT_CQ_FILE_SIZE,
    PRE_BLANK_UNIT,
    cq_file_size,
)
from rmqinspect.format.host import HostAddress
from rmqinspect.format.index import (
    DEFAULT_INDEX_NUM,
    DEFAULT_SLOT_NUM,
    IndexGeometry,
    IndexHeader,
)
from rmqinspect.format.javahash import java_hash
from rmqinspect.format.profile import Profile

DEFAULT_COMMITLOG_FILE_SIZE = 1 << 30
DEFAULT_STORE_HOST = HostAddress(bytes([10, 0, 0, 1]), 10911)
DEFAULT_BORN_HOST = HostAddress(bytes([10, 0, 0, 2]), 50001)
DEFAULT_CLOCK_START_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
DEFAULT_PID = 4242
CHECKPOINT_NAME = "checkpoint"
LOCK_CONTENT = b"lock"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"

_INT_MAX = 2**31 - 1
_PROP_CRC_TAIL_HEAD = (props.CRC32 + props.NAME_VALUE_SEPARATOR).encode()
_I16 = struct.Struct(">h")
_BLANK = struct.Struct(">ii")
_BODY_CRC_MASK = 0x7FFFFFFF
# Fixed part of a record up to BODYLENGTH, one struct per (born v6, store v6) combination:
# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP BORNHOST
# STORETIMESTAMP STOREHOST RECONSUMETIMES PREPAREDOFFSET BODYLENGTH.
_HEADS = {
    (born6, store6): struct.Struct(f">iiiiiqqiq{20 if born6 else 8}sq{20 if store6 else 8}siqi")
    for born6 in (False, True)
    for store6 in (False, True)
}
_INDEX_ENTRY_DTYPE = np.dtype(
    [("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")]
)
# Dispatch work is buffered and done with numpy in chunks of this many messages.
_DISPATCH_CHUNK = 1 << 15
# Commitlog bytes are gathered into writes of about this size.
_WRITE_BATCH = 16 << 20
# System topics whose broker-created config has more queues than the store may show.
_SYSTEM_TOPIC_QUEUES = {SCHEDULE_TOPIC: 18}
# Transaction types that get a queue offset and a consume-queue unit (NOT and COMMIT).
_QUEUE_TYPES = frozenset((TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE))

IndexNamer = Callable[[int, int], str]
"""Names a new index file from the store timestamp of the message whose dispatch created it and
the file's sequence number (0 for the first file the writer creates)."""


def utc_index_name(timestamp_ms: int) -> str:
    """``UtilAll.timeMillisToHumanString`` (``yyyyMMddHHmmssSSS``) in UTC."""
    seconds, millis = divmod(timestamp_ms, 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y%m%d%H%M%S") + f"{millis:03d}"


class _UtcNamer:
    """The default namer: the trigger's store time in UTC, moved 1 ms past the previous name
    when several files would be created within one millisecond (a broker would then reuse the
    same file name; a synthetic store keeps them apart)."""

    def __init__(self) -> None:
        self._last = -(2**63)

    def __call__(self, timestamp_ms: int, sequence: int) -> str:
        self._last = max(timestamp_ms, self._last + 1)
        return utc_index_name(self._last)


@dataclass(frozen=True, slots=True)
class StoreLayout:
    """Broker configuration that shapes the files (the ``MessageStoreConfig`` values)."""

    profile: Profile = Profile.V4_9
    commitlog_file_size: int = DEFAULT_COMMITLOG_FILE_SIZE
    cq_file_size: int = DEFAULT_CQ_FILE_SIZE  # rounded up to whole 20-byte units
    index_slot_num: int = DEFAULT_SLOT_NUM
    index_num: int = DEFAULT_INDEX_NUM
    message_index_enable: bool = True
    append_prop_crc: bool = False  # enabledAppendPropCRC, 5.3 only
    auto_message_version_on_topic_len: bool = True  # 5.x: V2 magic for topics over 127 chars
    store_host: HostAddress = DEFAULT_STORE_HOST
    delay_levels: str = DEFAULT_DELAY_LEVELS
    commitlog_start_offset: int = 0  # first file's offset (older files deleted by retention)

    def __post_init__(self) -> None:
        if self.commitlog_file_size <= END_FILE_MIN_BLANK_LENGTH:
            raise ValueError(f"commitlog file size {self.commitlog_file_size} is too small")
        if self.cq_file_size < CQ_STORE_UNIT_SIZE:
            raise ValueError(f"consume queue file size {self.cq_file_size} is below one unit")
        if self.index_num < 2:
            raise ValueError("maxIndexNum must be at least 2 for an index file to hold an entry")
        IndexGeometry(self.index_slot_num, self.index_num)
        if self.append_prop_crc and not self.profile.supports_prop_crc:
            raise ValueError(f"property CRC needs profile 5.3, not {self.profile}")
        if (
            self.commitlog_start_offset % self.commitlog_file_size
            or self.commitlog_start_offset < 0
        ):
            raise ValueError("commitlog start offset must be a non-negative multiple of the size")
        parse_delay_levels(self.delay_levels)

    @property
    def cq_unit_file_size(self) -> int:
        return cq_file_size(self.cq_file_size)

    @property
    def index_geometry(self) -> IndexGeometry:
        return IndexGeometry(self.index_slot_num, self.index_num)


@dataclass(slots=True)
class MessageSpec:
    """One message as a producer (or, for round trips, the stored record) describes it.

    ``properties`` is either user properties (merged with ``tags``/``keys``/``uniq_key``/
    ``delay_level`` and laid out in Java ``HashMap`` order, as ``messageProperties2String``
    does) or the raw stored properties bytes, written verbatim. The IPv6 sysFlag bits are
    derived from the hosts; ``sys_flag`` carries the transaction type, compression and
    multi-tag bits.
    """

    topic: str
    body: bytes = b""
    queue_id: int = 0
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    uniq_key: str | None = None
    properties: Mapping[str, str] | bytes | None = None
    delay_level: int = 0
    sys_flag: int = 0
    flag: int = 0
    born_timestamp: int | None = None  # None: the store timestamp
    store_timestamp: int | None = None  # None: the writer's clock
    born_host: HostAddress = DEFAULT_BORN_HOST
    store_host: HostAddress | None = None  # None: the layout's store host
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    dispatch: bool = True  # False: the reput service has not reached this message (crash)


class PutResult(NamedTuple):
    """Where :meth:`StoreWriter.put` stored a message."""

    physical_offset: int
    size: int
    topic: str  # as stored (SCHEDULE_TOPIC_XXXX for a rewritten delay message)
    queue_id: int
    queue_offset: int
    store_timestamp: int
    version: int  # 1 or 2 (magic 0xDAA320AB)
    blank_offset: int | None  # where a BLANK closed the previous file to make room, if one did


@dataclass(frozen=True, slots=True)
class StoreSummary:
    """What :meth:`StoreWriter.close` left on disk."""

    root: Path
    profile: Profile
    messages: int
    dispatched: int
    commitlog_files: tuple[str, ...]
    commitlog_end: int  # physical offset after the last record
    data_bytes: int  # record and BLANK bytes written to the commitlog
    consume_queues: dict[str, int]  # "topic/queueId" -> units written (pre-blank ones included)
    index_files: tuple[str, ...]
    index_entries: int
    checkpoint: Checkpoint
    crashed: bool


# --- Java collection ordering -------------------------------------------------------------------


def _spread(name: str) -> int:
    h = java_hash(name) & 0xFFFFFFFF
    return h ^ (h >> 16)


@functools.lru_cache(maxsize=4096)
def _hashmap_order(names: tuple[str, ...]) -> tuple[int, ...]:
    """Iteration order of a ``new HashMap<>()`` after putting ``names`` (distinct) in order.

    Buckets are ``spread(hash) & (capacity - 1)``; the table starts at 16 and doubles when the
    size passes 0.75 x capacity, or when a bucket reaches 9 nodes while the table is below 64
    (``treeifyBin``). Resizing keeps the relative order inside a bucket, so the final order is by
    bucket, then insertion. (Tree bins, which need 9+ colliding names and a 64+ table, are not
    modelled.)
    """
    spreads = [_spread(name) for name in names]
    capacity = 16
    for count in range(1, len(spreads) + 1):
        bucket = spreads[count - 1] & (capacity - 1)
        chain = sum(1 for h in spreads[:count] if h & (capacity - 1) == bucket)
        if chain >= 9 and capacity < 64:
            capacity *= 2
        if count > capacity * 3 // 4:
            capacity *= 2
    mask = capacity - 1
    return tuple(sorted(range(len(names)), key=lambda i: (spreads[i] & mask, i)))


@functools.lru_cache(maxsize=4096)
def _hashmap_prefixes(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``(name, name + 0x01)`` in ``HashMap`` iteration order, for encoding properties."""
    return tuple((names[i], names[i] + "\x01") for i in _hashmap_order(names))


def java_map_order(names: Iterable[str], capacity: int) -> list[str]:
    """Iteration order of a (Concurrent)HashMap with a table of ``capacity`` slots that holds
    ``names`` (inserted in the given order, no resize): what fastjson writes for the broker's
    config tables."""
    mask = capacity - 1
    ranked = sorted((_spread(name) & mask, i, name) for i, name in enumerate(names))
    return [name for _, _, name in ranked]


# --- vectorised Java hashing ----------------------------------------------------------------------


def java_hashes(strings: Sequence[str]) -> npt.NDArray[np.int64]:
    """``String.hashCode`` of each string (signed), vectorised.

    Strings are grouped by length, each group becomes a (count, length) array of code points,
    and Horner's rule runs over its columns in uint32, which wraps exactly like Java's int.
    Characters outside the BMP are two UTF-16 units in Java: such strings (rare) are hashed
    one by one.
    """
    count = len(strings)
    out = np.zeros(count, dtype=np.int64)
    if not count:
        return out
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=count)
    order = np.argsort(lengths, kind="stable")
    bounds = np.flatnonzero(np.diff(lengths[order])) + 1
    thirty_one = np.uint32(31)
    for group in np.split(order, bounds):
        length = int(lengths[group[0]])
        if length == 0:
            continue
        rows = [strings[i] for i in group]
        codes = np.array(rows, dtype=f"<U{length}").view(np.uint32).reshape(len(rows), length)
        columns = np.ascontiguousarray(codes.T)
        h = np.zeros(len(rows), dtype=np.uint32)
        for column in columns:
            h *= thirty_one
            h += column
        hashes = h.view(np.int32).astype(np.int64)
        astral = np.flatnonzero((codes > 0xFFFF).any(axis=1))
        for k in astral:
            hashes[k] = java_hash(rows[k])
        out[group] = hashes
    return out


def index_key_hashes(keys: Sequence[str]) -> npt.NDArray[np.int64]:
    """``abs(hashCode)`` with ``Integer.MIN_VALUE`` mapped to 0, as ``IndexFile`` stores it."""
    hashes = np.abs(java_hashes(keys))
    hashes[hashes > _INT_MAX] = 0
    return hashes


# --- files ----------------------------------------------------------------------------------------


def _create_file(path: Path, size: int) -> int:
    """A new file of ``size`` bytes (sparse); refuses to touch an existing one."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.ftruncate(fd, size)
    return fd


def _write_at(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def offset_file_name(offset: int) -> str:
    return f"{offset:020d}"


class _CommitLog:
    """Commitlog files: the write position, BLANK records and rolling (§2.3).

    Records are encoded straight into a staging buffer (``reserve``, then the caller writes at
    ``used`` and advances ``used``, ``position`` and ``data_bytes``); the buffer goes out in large
    ``pwrite`` calls.
    """

    def __init__(self, directory: Path, file_size: int, start: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.file_start = start
        self.position = 0  # write position inside the current file
        self.files: list[str] = []
        self.data_bytes = 0
        self.buffer = bytearray(min(_WRITE_BATCH, file_size))
        self.view = memoryview(self.buffer)
        self.used = 0  # staged bytes; buffer[0] belongs at file position position - used
        self.fd: int | None = None

    @property
    def end(self) -> int:
        return self.file_start + self.position

    def _open_current(self) -> int:
        if self.fd is None:
            name = offset_file_name(self.file_start)
            self.fd = _create_file(self.directory / name, self.file_size)
            self.files.append(name)
        return self.fd

    def reserve(self, length: int) -> int | None:
        """Make room for a record of ``length`` bytes at ``buffer[used:]``; returns the BLANK's
        offset if the current file had to be closed with one (``msgLen + 8 > remaining``)."""
        if length + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise ValueError(f"a {length}-byte record cannot fit a {self.file_size}-byte file")
        blank_at = None
        if self.fd is None:
            self._open_current()
        remaining = self.file_size - self.position
        if length + END_FILE_MIN_BLANK_LENGTH > remaining:
            blank_at = self.end
            self._stage(_BLANK.pack(remaining, BLANK_MAGIC_CODE))
            self.flush()
            assert self.fd is not None
            os.close(self.fd)
            self.fd = None
            self.file_start += self.file_size
            self.position = 0
            self._open_current()
        if self.used + length > len(self.buffer):
            self.flush()
            if length > len(self.buffer):
                self.buffer = bytearray(length)
                self.view = memoryview(self.buffer)
        return blank_at

    def _stage(self, data: bytes) -> None:
        if self.used + len(data) > len(self.buffer):
            self.flush()
        self.view[self.used : self.used + len(data)] = data
        self.used += len(data)
        self.position += len(data)
        self.data_bytes += len(data)

    def flush(self) -> None:
        if self.used:
            os.pwrite(self._open_current(), self.view[: self.used], self.position - self.used)
            self.used = 0

    def close(self, preallocate_next: bool) -> None:
        """Write what is staged; with ``preallocate_next`` leave the all-zero next file that
        ``AllocateMappedFileService`` had already created (a crash keeps it)."""
        self.flush()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            if preallocate_next:
                name = offset_file_name(self.file_start + self.file_size)
                os.close(_create_file(self.directory / name, self.file_size))
                self.files.append(name)


class _ConsumeQueue:
    """One ``consumequeue/<topic>/<queueId>`` (§5.1): units appended in dispatch order."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.file_start: int | None = None
        self.position = 0
        self.units = 0

    def append(self, units: npt.NDArray[np.void], first_queue_offset: int) -> None:
        data = units.tobytes()
        if self.file_start is None:
            # getLastMappedFile(expect) creates the file holding the first unit; fillPreBlank
            # puts placeholder units before it when the queue starts past offset 0.
            expect = first_queue_offset * CQ_STORE_UNIT_SIZE
            self.file_start = expect - expect % self.file_size
            self.directory.mkdir(parents=True, exist_ok=True)
            os.close(_create_file(self._path(self.file_start), self.file_size))
            blanks = (expect % self.file_size) // CQ_STORE_UNIT_SIZE
            data = PRE_BLANK_UNIT * blanks + data
            self.units += blanks
        self.units += len(units)
        view = memoryview(data)
        while view:
            if self.position == self.file_size:
                self.file_start += self.file_size
                self.position = 0
                os.close(_create_file(self._path(self.file_start), self.file_size))
            take = min(len(view), self.file_size - self.position)
            _write_at(self._path(self.file_start), self.position, bytes(view[:take]))
            self.position += take
            view = view[take:]

    def _path(self, start: int) -> Path:
        return self.directory / offset_file_name(start)


@dataclass(slots=True)
class _IndexFile:
    name: str
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int = 0
    index_count: int = 1  # the in-memory counter starts at 1; the file holds 0 until a put
    slots: npt.NDArray[np.int64] | None = None
    blocks: list[tuple[int, bytes]] = field(default_factory=list)


class _Index:
    """``IndexService.buildIndex`` over whole dispatch chunks (§7.3-7.5), vectorised.

    Every dispatched message calls ``getAndCreateLastIndexFile`` first, so a full file is
    replaced as soon as the next message is dispatched, keys or not; a file that fills in the
    middle of a message's keys is replaced by that same message (``putKey``'s retry).
    """

    def __init__(
        self, directory: Path, geometry: IndexGeometry, namer: IndexNamer, profile: Profile
    ) -> None:
        self.directory = directory
        self.geometry = geometry
        self.namer = namer
        self.profile = profile
        self.files: list[str] = []
        self.entries = 0
        self.checkpoint_timestamp = 0  # indexMsgTimestamp: end of the last full, flushed file
        self._current: _IndexFile | None = None
        self._last_owner = -1  # dispatch ordinal of the message that put the last key

    def add_chunk(
        self,
        first: int,
        store_timestamps: npt.NDArray[np.int64],
        phy_offsets: npt.NDArray[np.int64],
        keys: Sequence[str],
        owners: npt.NDArray[np.int64],
    ) -> None:
        """Index the dispatched messages ``first .. first + len(store_timestamps) - 1``;
        ``keys`` (full ``topic#key`` strings) belong to the messages ``owners``."""
        end = first + len(store_timestamps)
        hashes = index_key_hashes(keys)
        total = len(hashes)
        pos = 0
        index_num = self.geometry.index_num
        while True:
            current = self._current
            if current is None or current.index_count >= index_num:
                mid_message = pos < total and int(owners[pos]) == self._last_owner
                trigger = self._last_owner if mid_message else self._last_owner + 1
                if trigger >= end:
                    return  # the next message (not yet dispatched) will create the file
                current = self._roll(int(store_timestamps[trigger - first]))
            take = min(index_num - current.index_count, total - pos)
            if take:
                owner = owners[pos : pos + take] - first
                self._put(
                    current,
                    hashes[pos : pos + take],
                    phy_offsets[owner],
                    store_timestamps[owner],
                )
                pos += take
                self._last_owner = int(owners[pos - 1])
            if pos >= total and current.index_count < index_num:
                return

    def _roll(self, trigger_timestamp: int) -> _IndexFile:
        previous = self._current
        name = self.namer(trigger_timestamp, len(self.files))
        if self.files and name <= self.files[-1]:
            raise ValueError(f"index file name {name!r} does not sort after {self.files[-1]!r}")
        end_phy = previous.end_phy_offset if previous is not None else 0
        end_ts = previous.end_timestamp if previous is not None else 0
        if previous is not None:
            self._write(previous, shutdown=False)
            # IndexService.flush(previous) runs once the new file exists.
            if previous.end_timestamp > 0:
                self.checkpoint_timestamp = previous.end_timestamp
        # new IndexFile(..., endPhyOffset, endTimestamp) copies each value only if positive.
        current = _IndexFile(
            name,
            begin_timestamp=max(end_ts, 0),
            end_timestamp=max(end_ts, 0),
            begin_phy_offset=max(end_phy, 0),
            end_phy_offset=max(end_phy, 0),
        )
        self.files.append(name)
        self._current = current
        return current

    def _put(
        self,
        f: _IndexFile,
        hashes: npt.NDArray[np.int64],
        phy: npt.NDArray[np.int64],
        ts: npt.NDArray[np.int64],
    ) -> None:
        """``IndexFile.putKey`` for consecutive keys that all fit in ``f``."""
        count = len(hashes)
        if f.slots is None:
            f.slots = np.zeros(self.geometry.slot_num, dtype=np.int64)
        numbers = f.index_count + np.arange(count, dtype=np.int64)
        slots = hashes % self.geometry.slot_num
        order = np.argsort(slots, kind="stable")
        sorted_slots = slots[order]
        sorted_numbers = numbers[order]
        same = sorted_slots[1:] == sorted_slots[:-1]
        prev_sorted = f.slots[sorted_slots]  # earlier chunks: always below indexCount
        prev_sorted[1:] = np.where(same, sorted_numbers[:-1], prev_sorted[1:])
        prev = np.empty(count, dtype=np.int64)
        prev[order] = prev_sorted
        last_of_slot = np.append(~same, True)
        f.slots[sorted_slots[last_of_slot]] = sorted_numbers[last_of_slot]
        # timeDiff is computed before the first put sets beginTimestamp (spec 7.3 observation).
        begin = np.full(count, f.begin_timestamp, dtype=np.int64)
        if f.index_count <= 1:
            f.begin_timestamp = int(ts[0])
            f.begin_phy_offset = int(phy[0])
            begin[1:] = f.begin_timestamp
        diff = np.where(begin <= 0, 0, np.clip((ts - begin) // 1000, 0, _INT_MAX))
        entries = np.empty(count, dtype=_INDEX_ENTRY_DTYPE)
        entries["key_hash"] = hashes
        entries["phy_offset"] = phy
        entries["time_diff"] = diff
        entries["prev"] = prev
        f.blocks.append((f.index_count, entries.tobytes()))
        f.hash_slot_count += int(np.count_nonzero(prev == 0))
        f.index_count += count
        f.end_timestamp = int(ts[-1])
        f.end_phy_offset = int(phy[-1])
        self.entries += count

    def close(self, clean_shutdown: bool) -> None:
        if self._current is not None:
            self._write(self._current, shutdown=clean_shutdown)
            self._current = None

    def _write(self, f: _IndexFile, shutdown: bool) -> None:
        geometry = self.geometry
        fd = _create_file(self.directory / f.name, geometry.file_size)
        try:
            if f.blocks or (shutdown and self.profile is not Profile.V4_9):
                # Each field was written in place by putKey; 5.x IndexFile.shutdown() also
                # flushes the whole header, which stores indexCount 1 in a file without keys.
                header = IndexHeader(
                    f.begin_timestamp,
                    f.end_timestamp,
                    f.begin_phy_offset,
                    f.end_phy_offset,
                    f.hash_slot_count,
                    f.index_count,
                ).encode()
            else:
                # Only the constructor's copies of the previous file's end reached the buffer.
                header = struct.pack(
                    ">qqqq",
                    f.begin_timestamp,
                    f.end_timestamp,
                    f.begin_phy_offset,
                    f.end_phy_offset,
                )
            os.pwrite(fd, header, 0)
            if f.slots is not None:
                used = np.flatnonzero(f.slots)
                if used.size:
                    lo, hi = int(used[0]), int(used[-1]) + 1
                    table = f.slots[lo:hi].astype(">i4").tobytes()
                    os.pwrite(fd, table, geometry.slot_position(lo))
            for number, data in f.blocks:
                os.pwrite(fd, data, geometry.entry_position(number))
        finally:
            os.close(fd)
        f.slots = None
        f.blocks = []


# --- the writer -----------------------------------------------------------------------------------


class _Clock:
    """Deterministic store clock: ``start``, then ``step_ms`` later for each call."""

    def __init__(self, start_ms: int, step_ms: int) -> None:
        self._next = start_ms
        self._step = step_ms

    def __call__(self) -> int:
        now = self._next
        self._next += self._step
        return now


@dataclass(frozen=True, slots=True)
class _TopicInfo:
    version: int
    magic: int
    fixed_length: int  # record length with IPv4 hosts and empty body and properties
    tail: bytes  # TOPICLENGTH (i8 or i16) + topic bytes


def _strip_property(raw: bytes, name: bytes) -> bytes:
    """``MessageUtils.deleteProperty``: drop each ``name 0x01 value`` entry and its separator."""
    needle = name + b"\x01"
    out: list[bytes] = []
    i, n = 0, len(raw)
    while i < n:
        j = raw.find(b"\x02", i)
        stop = n if j < 0 else j + 1
        if not raw.startswith(needle, i):
            out.append(raw[i:stop])
        i = stop
    return b"".join(out)


class StoreWriter:
    """Write a new store directory message by message; use as a context manager.

    The output directory must be missing or empty: the writer never opens an existing store for
    writing. ``put`` appends a message the way the broker's append path does and returns where
    it went; ``close`` finishes every file. With ``crash`` the store is left as a killed broker
    leaves it: ``abort`` present, the pre-allocated next commitlog file, no shutdown flush of the
    index header; the checkpoint lags by ``flush_lag_ms`` (physicMsgTimestamp = store time of the
    last message whose time is at least that much before the last one) in either case.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        layout: StoreLayout | None = None,
        *,
        index_namer: IndexNamer | None = None,
        clock: Callable[[], int] | None = None,
        crash: bool = False,
        flush_lag_ms: int = 0,
        pid: int = DEFAULT_PID,
    ) -> None:
        self.root = Path(root)
        self.layout = layout or StoreLayout()
        self.crash = crash
        self.flush_lag_ms = flush_lag_ms
        self.pid = pid
        if self.root.exists() and (not self.root.is_dir() or any(self.root.iterdir())):
            raise FileExistsError(
                errno.EEXIST, "output exists and is not an empty directory", str(self.root)
            )
        layout = self.layout
        self._profile = layout.profile
        self._commitlog_dir = self.root / "commitlog"
        self._cq_dir = self.root / "consumequeue"
        self._index_dir = self.root / "index"
        for directory in (self._commitlog_dir, self._cq_dir, self._index_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self._log = _CommitLog(
            self._commitlog_dir, layout.commitlog_file_size, layout.commitlog_start_offset
        )
        self._index = _Index(
            self._index_dir, layout.index_geometry, index_namer or _UtcNamer(), layout.profile
        )
        self._clock = clock or _Clock(DEFAULT_CLOCK_START_MS, 1)
        self._delay_table = parse_delay_levels(layout.delay_levels)
        self._max_delay_level = max(self._delay_table, default=0)
        self._trailing = layout.profile.properties_trailing_separator
        self._v2_enabled = (
            layout.profile.accepts_v2_magic and layout.auto_message_version_on_topic_len
        )
        self._next_offsets: dict[tuple[str, int], int] = {}
        self._queues: dict[tuple[str, int], _ConsumeQueue] = {}
        self._queue_ids: dict[tuple[str, int], int] = {}
        self._topics: dict[str, _TopicInfo] = {}
        self._used_queues: set[tuple[str, int]] = set()
        self._multi_tag_topics: set[str] = set()
        # Encoded hosts by object identity (hashing the dataclass costs more than encoding it);
        # each entry keeps its host alive, so the id cannot be reused by another object.
        self._hosts: dict[int, tuple[HostAddress, bytes, bool]] = {}
        self._default_store_host = layout.store_host
        self._append_prop_crc = layout.append_prop_crc
        self._index_enabled = layout.message_index_enable
        self._tag_codes: dict[str, int] = {}
        self._store_timestamps = array("q")
        self._last_offset = -1
        self._dispatch_stopped = False
        self._closed = False
        self._summary: StoreSummary | None = None
        # Dispatch buffers (one entry per dispatched message, keys flattened).
        self._d_first = 0
        self._d_phy = array("q")
        self._d_size = array("q")
        self._d_tags = array("q")
        self._d_ts = array("q")
        self._d_queue = array("q")  # queue number, 0 when the message enters no consume queue
        self._d_qoff = array("q")
        self._d_keys: list[str] = []
        self._d_owner = array("q")
        self._dispatched = 0
        self._logics_timestamp = 0
        self._consumer_offsets: tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]] | None
        self._consumer_offsets = None
        self._delay_offsets: tuple[dict[int, int], dict[int, int]] | None = None
        self._topic_configs: dict[str, TopicConfig] = {}
        self._groups: list[str] = []

    # --- context manager --------------------------------------------------------------------------

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self._log.close(preallocate_next=False)
            self._closed = True

    # --- configuration ----------------------------------------------------------------------------

    def set_queue_offset(self, topic: str, queue_id: int, next_offset: int) -> None:
        """Start a queue at ``next_offset`` (as if older messages had expired): its first consume
        queue file then begins with pre-blank units."""
        key = (topic, queue_id)
        if key in self._queues or self._next_offsets.get(key, 0) != 0:
            raise ValueError(f"queue {topic}/{queue_id} already has messages")
        self._next_offsets[key] = next_offset

    def set_consumer_offsets(
        self,
        table: Mapping[str, Mapping[int, int]],
        previous: Mapping[str, Mapping[int, int]] | None = None,
    ) -> None:
        """``consumerOffset.json`` content (``"topic@group"`` -> queue -> next offset) and the
        previous generation kept in ``.bak`` (default: the same). Entries are written in the
        order given (a broker writes its ConcurrentHashMap order, see :func:`java_map_order`)."""
        current = {k: dict(v) for k, v in table.items()}
        older = current if previous is None else {k: dict(v) for k, v in previous.items()}
        for key in current:
            pair = split_topic_group(key)
            if pair is not None and pair[1] not in self._groups:
                self._groups.append(pair[1])
        self._consumer_offsets = (current, older)

    def set_delay_offsets(
        self, table: Mapping[int, int], previous: Mapping[int, int] | None = None
    ) -> None:
        """``delayOffset.json`` content (delay level -> next offset)."""
        current = dict(table)
        self._delay_offsets = (current, current if previous is None else dict(previous))

    def declare_topic(self, config: TopicConfig) -> None:
        """Write this config for the topic in ``topics.json`` instead of a derived one."""
        self._topic_configs[config.topic_name] = config

    @property
    def end_offset(self) -> int:
        """Physical offset where the next record would start (before any roll)."""
        return self._log.end

    @property
    def message_count(self) -> int:
        return len(self._store_timestamps)

    @property
    def last_offset(self) -> int:
        """Physical offset of the last record put (-1 before the first)."""
        return self._last_offset

    def next_queue_offsets(self) -> dict[tuple[str, int], int]:
        """The queue offset the next message of each (topic, queue) would get."""
        return dict(self._next_offsets)

    # --- the append path --------------------------------------------------------------------------

    def put(self, spec: MessageSpec) -> PutResult:
        """Append one message as the broker's append path does; returns where it went."""
        results: list[PutResult] = []
        self._append((spec,), results)
        return results[0]

    def put_many(self, specs: Iterable[MessageSpec]) -> int:
        """``put`` for each message, without building results (the fast path); returns how
        many were written."""
        return self._append(specs, None)

    def _append(self, specs: Iterable[MessageSpec], results: list[PutResult] | None) -> int:
        """The append path for a run of messages.

        One loop with the writer's state in local variables: this is the hot path of large
        stores, so per-message work is kept to what the record itself needs.
        """
        if self._closed:
            raise ValueError("the store writer is closed")
        log = self._log
        file_size = log.file_size
        next_offsets = self._next_offsets
        used_queues = self._used_queues
        topics = self._topics
        hosts = self._hosts
        heads = _HEADS
        crc32 = zlib.crc32
        i16_pack_into = _I16.pack_into
        stamps = self._store_timestamps
        default_store = self._default_store_host
        crc_tail = self._append_prop_crc
        index_enabled = self._index_enabled
        queue_ids = self._queue_ids
        tag_codes = self._tag_codes
        d_phy, d_size, d_ts = self._d_phy, self._d_size, self._d_ts
        d_queue, d_qoff, d_tags = self._d_queue, self._d_qoff, self._d_tags
        d_keys, d_owner = self._d_keys, self._d_owner
        count = 0
        for spec in specs:
            if spec.dispatch and self._dispatch_stopped:
                raise ValueError("dispatch stopped at an earlier message; the reput never skips")
            topic = spec.topic
            queue_id = spec.queue_id
            sys_flag = spec.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
            tran = sys_flag & TRANSACTION_TYPE_MASK
            enters_queue = tran in _QUEUE_TYPES
            raw = spec.properties
            if isinstance(raw, bytes):
                properties, tags, delay, uniq, keys = self._raw_properties(spec, raw)
            else:
                if raw and not (
                    spec.tags or spec.keys or spec.uniq_key or spec.delay_level or crc_tail
                ):
                    pairs: Mapping[str, str] = raw  # used as is; copied before any change
                else:
                    pairs = self._pairs(spec)
                delay = pairs.get("DELAY")
                if delay is not None and enters_queue:
                    pairs = dict(pairs)
                    topic, queue_id = self._rewrite_delay(pairs, topic, queue_id, delay)
                    delay = pairs["DELAY"]
                properties = self._encode_pairs(pairs)
                # The dispatcher reads the stored string back, which drops empty values.
                tags = pairs.get("TAGS") or None
                delay = delay or None
                uniq = pairs.get("UNIQ_KEY") or None
                keys = pairs.get("KEYS") or None

            info = topics.get(topic) or self._topic_info(topic)
            key = (topic, queue_id)
            used_queues.add(key)
            if sys_flag & MULTI_TAGS_FLAG:
                self._multi_tag_topics.add(topic)
            if enters_queue:
                queue_offset = next_offsets.get(key, 0)
                next_offsets[key] = queue_offset + 1
            else:
                queue_offset = 0
            store_ts = spec.store_timestamp
            if store_ts is None:
                store_ts = self._clock()
            born_ts = spec.born_timestamp
            if born_ts is None:
                born_ts = store_ts
            born = spec.born_host
            cached = hosts.get(id(born))
            born_host, born6 = cached[1:] if cached and cached[0] is born else self._host(born)
            store = spec.store_host or default_store
            cached = hosts.get(id(store))
            store_host, store6 = cached[1:] if cached and cached[0] is store else self._host(store)
            if born6:
                sys_flag |= BORNHOST_V6_FLAG
            if store6:
                sys_flag |= STOREHOSTADDRESS_V6_FLAG
            if crc_tail:
                if properties and not properties.endswith(b"\x02"):
                    properties += b"\x02"
                properties += _PROP_CRC_TAIL_HEAD
                props_length = len(properties) + 11  # 10 digits + 0x02 follow
            else:
                props_length = len(properties)
            if props_length > 32767:
                raise ValueError(f"properties of {props_length} bytes exceed 32767")
            body = spec.body
            body_length = len(body)
            length = info.fixed_length + body_length + props_length
            if born6:
                length += 12
            if store6:
                length += 12

            # Room in the file (else BLANK and roll) and in the staging buffer.
            blank_at = None
            if (
                log.position + length + END_FILE_MIN_BLANK_LENGTH > file_size
                or log.used + length > len(log.buffer)
                or log.fd is None
            ):
                blank_at = log.reserve(length)
            physical_offset = log.file_start + log.position
            view = log.view
            start = at = log.used
            head = heads[born6, store6]
            head.pack_into(
                view,
                at,
                length,
                info.magic,
                crc32(body) & _BODY_CRC_MASK,
                queue_id,
                spec.flag,
                queue_offset,
                physical_offset,
                sys_flag,
                born_ts,
                born_host,
                store_ts,
                store_host,
                spec.reconsume_times,
                spec.prepared_transaction_offset,
                body_length,
            )
            at += head.size
            view[at : at + body_length] = body
            at += body_length
            tail = info.tail
            view[at : at + len(tail)] = tail
            at += len(tail)
            i16_pack_into(view, at, props_length)
            at += 2
            view[at : at + len(properties)] = properties
            if crc_tail:
                # The CRC covers the finished record minus its last 20 bytes (§3.2).
                end = start + length
                crc = crc32(view[start : end - CRC32_RESERVED_LEN]) & _BODY_CRC_MASK
                view[end - 11 : end] = encode_prop_crc_digits(crc).encode("ascii") + b"\x02"
            log.used = start + length
            log.position += length
            log.data_bytes += length
            stamps.append(store_ts)
            self._last_offset = physical_offset
            count += 1

            if not spec.dispatch:
                self._dispatch_stopped = True
            else:
                # What CommitLogDispatcherBuildConsumeQueue / BuildIndex receive, buffered.
                ordinal = self._dispatched
                self._dispatched = ordinal + 1
                d_phy.append(physical_offset)
                d_size.append(length)
                d_ts.append(store_ts)
                if enters_queue:
                    d_queue.append(queue_ids.get(key) or self._queue_number(key))
                    d_qoff.append(queue_offset)
                    code = tag_codes.get(tags, 0) if tags else 0
                    if not code or delay is not None:
                        code = self._tags_code(topic, tags, delay, store_ts)
                    d_tags.append(code)
                    self._logics_timestamp = store_ts
                else:
                    d_queue.append(0)
                    d_qoff.append(0)
                    d_tags.append(0)
                if index_enabled and tran != TRANSACTION_ROLLBACK_TYPE:
                    before = len(d_keys)
                    if uniq is not None:
                        d_keys.append(f"{topic}#{uniq}")
                    if keys:
                        d_keys.extend([f"{topic}#{k}" for k in keys.split(" ") if k])
                    if len(d_keys) > before:
                        d_owner.extend([ordinal] * (len(d_keys) - before))
                if len(d_phy) >= _DISPATCH_CHUNK:
                    self._flush_dispatch()
                    d_phy, d_size, d_ts = self._d_phy, self._d_size, self._d_ts
                    d_queue, d_qoff, d_tags = self._d_queue, self._d_qoff, self._d_tags
                    d_keys, d_owner = self._d_keys, self._d_owner
            if results is not None:
                results.append(
                    PutResult(
                        physical_offset,
                        length,
                        topic,
                        queue_id,
                        queue_offset,
                        store_ts,
                        info.version,
                        blank_at,
                    )
                )
        return count

    def _raw_properties(
        self, spec: MessageSpec, raw: bytes
    ) -> tuple[bytes, str | None, str | None, str | None, str | None]:
        """Stored properties given verbatim, and what the dispatcher reads from them."""
        if spec.tags is not None or spec.keys is not None or spec.uniq_key is not None:
            raise ValueError("raw properties bytes exclude tags, keys and uniq_key")
        if spec.delay_level:
            raise ValueError("raw properties bytes are stored as given: no delay rewrite")
        if self._append_prop_crc:
            raw = _strip_property(raw, b"__CRC32#")
        parsed = props.parse_properties(raw.decode("utf-8", "replace"))
        return (
            raw,
            parsed.get(props.TAGS),
            parsed.get(props.DELAY),
            parsed.get(props.UNIQ_KEY),
            parsed.get(props.KEYS),
        )

    def _pairs(self, spec: MessageSpec) -> dict[str, str]:
        # Message(topic, tags, keys, ...) puts TAGS then KEYS; the producer adds UNIQ_KEY at send.
        pairs: dict[str, str] = {}
        if spec.tags:
            pairs[props.TAGS] = spec.tags
        keys = spec.keys
        if keys:
            pairs[props.KEYS] = keys if isinstance(keys, str) else props.KEY_SEPARATOR.join(keys)
        if spec.properties:
            assert not isinstance(spec.properties, bytes)
            pairs.update(spec.properties)
        if spec.uniq_key:
            pairs[props.UNIQ_KEY] = spec.uniq_key
        if spec.delay_level > 0:
            pairs[props.DELAY] = str(spec.delay_level)
        if self.layout.append_prop_crc:
            pairs.pop(props.CRC32, None)
        return pairs

    def _rewrite_delay(
        self, pairs: dict[str, str], topic: str, queue_id: int, delay: str
    ) -> tuple[str, int]:
        """The delay-level rewrite (4.9 ``CommitLog.putMessage``, 5.x ``HookUtils``)."""
        level = java_parse_int(delay)
        if level is None:
            raise ValueError(f"DELAY property {delay!r} is not an integer")
        if level <= 0:
            return topic, queue_id
        if level > self._max_delay_level:
            level = self._max_delay_level
            pairs[props.DELAY] = str(level)
        pairs[props.REAL_TOPIC] = topic
        pairs[props.REAL_QID] = str(queue_id)
        return SCHEDULE_TOPIC, level - 1

    def _encode_pairs(self, pairs: Mapping[str, str]) -> bytes:
        """``messageProperties2String`` of a ``HashMap`` holding ``pairs``."""
        if not pairs:
            return b""
        names = tuple(pairs)
        prefixes = _hashmap_prefixes(names)
        text = "\x02".join([prefix + pairs[name] for name, prefix in prefixes])
        count = len(names)
        if text.count("\x01") != count or text.count("\x02") != count - 1:
            raise ValueError("property names and values cannot contain 0x01 or 0x02")
        if self._trailing:
            text += "\x02"
        return text.encode("utf-8")

    def _topic_info(self, topic: str) -> _TopicInfo:
        encoded = topic.encode("utf-8")
        java_length = len(topic.encode("utf-16-le", "surrogatepass")) // 2
        if self._v2_enabled and java_length > 127:
            if len(encoded) > 32767:
                raise ValueError("topic longer than 32767 bytes")
            tail = _I16.pack(len(encoded)) + encoded
            info = _TopicInfo(
                2, MESSAGE_MAGIC_CODE_V2, calc_msg_length(0, 0, len(encoded), 0, 2), tail
            )
        else:
            if len(encoded) > 127:
                raise ValueError(f"topic of {len(encoded)} bytes needs a V2 record (5.x)")
            tail = bytes([len(encoded)]) + encoded
            info = _TopicInfo(
                1, MESSAGE_MAGIC_CODE, calc_msg_length(0, 0, len(encoded), 0, 1), tail
            )
        self._topics[topic] = info
        return info

    def _host(self, host: HostAddress) -> tuple[bytes, bool]:
        if len(self._hosts) >= 4096:
            self._hosts.clear()
        self._hosts[id(host)] = (host, host.encode(), host.is_v6)
        return host.encode(), host.is_v6

    # --- dispatch ---------------------------------------------------------------------------------

    def _tags_code(self, topic: str, tags: str | None, delay: str | None, store_ts: int) -> int:
        """tagsCode as ``checkMessageAndReturnSize`` computes it for the dispatcher (§5.2)."""
        code = 0
        if tags:
            code = self._tag_codes.get(tags, 0) or java_hash(tags)
            self._tag_codes[tags] = code
        if topic == SCHEDULE_TOPIC and delay is not None:
            level = java_parse_int(delay)
            if level is None:
                raise ValueError(f"DELAY property {delay!r} in {SCHEDULE_TOPIC} is not an integer")
            level = min(level, self._max_delay_level)
            if level > 0:
                code = store_ts + self._delay_table.get(level, 1000)
        return code

    def _queue_number(self, key: tuple[str, int]) -> int:
        """A new consume queue's number (from 1; 0 marks "no consume queue")."""
        number = self._queue_ids[key] = len(self._queue_ids) + 1
        topic, queue_id = key
        self._queues[key] = _ConsumeQueue(
            self._cq_dir / topic / str(queue_id), self.layout.cq_unit_file_size
        )
        return number

    def _flush_dispatch(self) -> None:
        count = len(self._d_phy)
        if not count:
            return
        phy = np.frombuffer(self._d_phy, dtype=np.int64)
        ts = np.frombuffer(self._d_ts, dtype=np.int64)
        queue = np.frombuffer(self._d_queue, dtype=np.int64)
        entering = np.flatnonzero(queue)
        if entering.size:
            units = np.empty(entering.size, dtype=CQ_UNIT_DTYPE)
            units["phy_offset"] = phy[entering]
            units["size"] = np.frombuffer(self._d_size, dtype=np.int64)[entering]
            units["tags_code"] = np.frombuffer(self._d_tags, dtype=np.int64)[entering]
            qoff = np.frombuffer(self._d_qoff, dtype=np.int64)[entering]
            queue_of = queue[entering]
            order = np.argsort(queue_of, kind="stable")
            bounds = np.flatnonzero(np.diff(queue_of[order])) + 1
            queues = list(self._queues.values())
            for group in np.split(order, bounds):
                queues[int(queue_of[group[0]]) - 1].append(units[group], int(qoff[group[0]]))
        if self.layout.message_index_enable:
            self._index.add_chunk(
                self._d_first, ts, phy, self._d_keys, np.frombuffer(self._d_owner, np.int64)
            )
        self._d_first += count
        self._d_phy = array("q")
        self._d_size = array("q")
        self._d_tags = array("q")
        self._d_ts = array("q")
        self._d_queue = array("q")
        self._d_qoff = array("q")
        self._d_keys = []
        self._d_owner = array("q")

    # --- shutdown ---------------------------------------------------------------------------------

    def close(self) -> StoreSummary:
        """Finish every file and write checkpoint, lock, abort and config (idempotent)."""
        if self._summary is not None:
            return self._summary
        if self._closed:
            raise ValueError("the store writer was abandoned after an error")
        self._flush_dispatch()
        self._closed = True
        crash = self.crash
        self._log.close(preallocate_next=crash)
        self._index.close(clean_shutdown=not crash)
        checkpoint = self._checkpoint()
        (self.root / CHECKPOINT_NAME).write_bytes(encode_checkpoint(checkpoint, self._profile))
        (self.root / "lock").write_bytes(LOCK_CONTENT)
        self._write_markers(crash)
        self._write_config()
        self._summary = StoreSummary(
            root=self.root,
            profile=self._profile,
            messages=len(self._store_timestamps),
            dispatched=self._dispatched,
            commitlog_files=tuple(self._log.files),
            commitlog_end=self._log.end,
            data_bytes=self._log.data_bytes,
            consume_queues={f"{t}/{q}": cq.units for (t, q), cq in self._queues.items()},
            index_files=tuple(self._index.files),
            index_entries=self._index.entries,
            checkpoint=checkpoint,
            crashed=crash,
        )
        return self._summary

    def _checkpoint(self) -> Checkpoint:
        stamps = np.frombuffer(self._store_timestamps, dtype=np.int64)
        physic = 0
        if stamps.size:
            late = np.flatnonzero(stamps > stamps[-1] - self.flush_lag_ms)
            flushed = int(late[0]) if late.size else stamps.size
            physic = int(stamps[flushed - 1]) if flushed else 0
        return Checkpoint(physic, self._logics_timestamp, self._index.checkpoint_timestamp)

    def _write_markers(self, crash: bool) -> None:
        if self._profile is Profile.V4_9:
            if crash:
                (self.root / "abort").write_bytes(b"")
            return
        # 5.x start() creates abort empty, then MixAll.string2File writes the PID, copying the
        # empty previous content to abort.bak; a clean shutdown deletes only abort.
        (self.root / "abort.bak").write_bytes(b"")
        if crash:
            (self.root / "abort").write_bytes(str(self.pid).encode("ascii"))
        else:
            compaction = self.root / "compaction"
            compaction.mkdir()
            (compaction / "position-checkpoint").write_text('{\n  "queueOffsetMap": {}\n}')

    def _data_version(self) -> DataVersion | None:
        if self._profile is Profile.V4_9:
            return None
        stamps = self._store_timestamps
        return DataVersion(counter=1, timestamp=stamps[-1] if stamps else 0, state_version=0)

    def _write_config(self) -> None:
        config = self.root / "config"
        config.mkdir()
        version = self._data_version()
        offsets = self._consumer_offsets or ({}, {})
        for name, table in zip(
            ("consumerOffset.json", "consumerOffset.json.bak"), offsets, strict=True
        ):
            text = encode_consumer_offsets(ConsumerOffsetTable(table, None, version))
            (config / name).write_text(text, encoding="utf-8")
        levels = {level: 0 for level in self._delay_table}
        delays = self._delay_offsets or (levels, levels)
        for name, delay_table in zip(
            ("delayOffset.json", "delayOffset.json.bak"), delays, strict=True
        ):
            # ConcurrentHashMap<Integer, Long>: small integer keys iterate in ascending order.
            ordered = dict(sorted(delay_table.items()))
            text = encode_delay_offsets(DelayOffsetTable(ordered, version))
            (config / name).write_text(text, encoding="utf-8")
        topics = TopicConfigTable(self._topic_table(), version)
        (config / "topics.json").write_text(encode_topics(topics), encoding="utf-8")
        groups = SubscriptionGroupTable(
            self._group_table(), None if version is None else {}, version
        )
        (config / "subscriptionGroup.json").write_text(
            encode_subscription_groups(groups), encoding="utf-8"
        )

    def _topic_table(self) -> dict[str, TopicConfig]:
        table = dict(self._topic_configs)
        attributes: dict[str, str] | None = None if self._profile is Profile.V4_9 else {}
        queue_counts: dict[str, int] = {}
        for topic, queue_id in sorted(self._used_queues):
            queue_counts[topic] = max(queue_counts.get(topic, 1), queue_id + 1)
        for topic, count in queue_counts.items():
            if topic in table:
                continue
            queues = max(count, _SYSTEM_TOPIC_QUEUES.get(topic, 1))
            table[topic] = TopicConfig(
                topic_name=topic,
                read_queue_nums=queues,
                write_queue_nums=queues,
                topic_filter_type="MULTI_TAG" if topic in self._multi_tag_topics else "SINGLE_TAG",
                attributes=attributes,
            )
        return {name: table[name] for name in java_map_order(table, 2048)}

    def _group_table(self) -> dict[str, SubscriptionGroupConfig]:
        groups = list(self._groups)
        for topic in sorted({topic for topic, _ in self._used_queues}):
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
                if group not in groups:
                    groups.append(group)
        v5 = self._profile is not Profile.V4_9
        return {
            name: SubscriptionGroupConfig(
                group_name=name,
                consume_message_orderly=False if v5 else None,
                consume_timeout_minute=15 if v5 else None,
                group_retry_policy={"type": "CUSTOMIZED"} if v5 else None,
                group_sys_flag=0 if v5 else None,
                attributes={} if v5 else None,
            )
            for name in java_map_order(groups, 2048)
        }
