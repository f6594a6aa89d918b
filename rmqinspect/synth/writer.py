"""A store writer that lays out a store directory byte for byte as a broker would.

:class:`StoreWriter` follows the broker's append path (rocketmq-store-format.md §2.10): the
delay-level rewrite, queue-offset assignment, the V2 magic for long topics, BLANK records and file
rolling (§2.3), the properties string of the profile, body and property CRCs (§3). It dispatches
what the reput service would (§10.11) to the consume queues (§5.1, including the pre-blank fill)
and to the index (§7.3-7.5, including rollover), and on :meth:`StoreWriter.close` writes the
checkpoint (§8), ``lock``, ``abort`` (§9) and the ``config/`` JSON files (§11).

Speed matters (a 1 GiB store must take seconds), so there is one append path and it works on
batches of messages in columns (:class:`MessageColumns`): lengths, placement and rolling, queue
offsets, record headers, tag codes and index key hashes are computed with numpy; only the
properties strings and the final concatenation of each record's parts are per-message Python.
``put`` and ``put_many`` turn :class:`MessageSpec` values into columns; generators call
``put_columns`` directly. Files are created at full size with ``ftruncate`` and only their data
is written, so zero tails cost no disk space.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import operator
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
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
    CRC32_RESERVED_LEN,
    DEFAULT_COMMITLOG_FILE_SIZE,
    DEFAULT_DELAY_LEVELS,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MULTI_TAGS_FLAG,
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    calc_msg_length,
    dispatch_tags_code,
    encode_prop_crc_digits,
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
from rmqinspect.format.crc import masked_crc32
from rmqinspect.format.host import HostAddress
from rmqinspect.format.index import (
    DEFAULT_INDEX_NUM,
    DEFAULT_SLOT_NUM,
    IndexGeometry,
    IndexHeader,
)
from rmqinspect.format.javahash import java_hash
from rmqinspect.format.javamath import INT_MAX, java_parse_int
from rmqinspect.format.profile import Profile

DEFAULT_STORE_HOST = HostAddress(bytes([10, 0, 0, 1]), 10911)
DEFAULT_BORN_HOST = HostAddress(bytes([10, 0, 0, 2]), 50001)
DEFAULT_CLOCK_START_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
DEFAULT_PID = 4242
CHECKPOINT_NAME = "checkpoint"
LOCK_CONTENT = b"lock"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"

_I16 = struct.Struct(">h")
_BLANK = struct.Struct(">ii")
_HEAD_DTYPES = {
    (born6, store6): np.dtype(
        [
            ("total", ">i4"),
            ("magic", ">i4"),
            ("body_crc", ">i4"),
            ("queue_id", ">i4"),
            ("flag", ">i4"),
            ("queue_offset", ">i8"),
            ("physical_offset", ">i8"),
            ("sys_flag", ">i4"),
            ("born_timestamp", ">i8"),
            ("born_host", f"V{20 if born6 else 8}"),
            ("store_timestamp", ">i8"),
            ("store_host", f"V{20 if store6 else 8}"),
            ("reconsume_times", ">i4"),
            ("prepared_offset", ">i8"),
            ("body_length", ">i4"),
        ]
    )
    for born6 in (False, True)
    for store6 in (False, True)
}
_CRC_TAIL_TEMPLATE = (props.CRC32 + props.NAME_VALUE_SEPARATOR).encode() + b"0" * 10 + b"\x02"
_INDEX_ENTRY_DTYPE = np.dtype(
    [("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")]
)
# Dispatch work is buffered and done with numpy in chunks of this many messages.
_DISPATCH_CHUNK = 1 << 15
# put_many() resolves messages and appends them in batches of this many.
_BATCH = 4096
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


@dataclass(slots=True)
class MessageColumns:
    """Messages in their stored form, one array per field: the bulk input of
    :meth:`StoreWriter.put_columns` (generators use it to avoid per-message objects).

    ``topics``, ``hosts`` and ``bodies`` are tables indexed by the per-message ``topic``,
    ``born_host``/``store_host`` and ``body`` arrays. ``properties`` are the stored properties
    bytes (without a 5.2+ CRC tail, which the writer appends). ``tags`` and ``delay`` (the
    ``TAGS`` and ``DELAY`` values) and ``keys`` (``UNIQ_KEY`` then the ``KEYS`` elements, owned by
    the messages ``key_owner``, in order) are what the dispatcher reads from those properties and
    must agree with them; :meth:`StoreWriter.put` derives all of them from one map.
    """

    topics: Sequence[str]
    topic: npt.NDArray[np.int64]
    queue_id: npt.NDArray[np.int64]
    properties: Sequence[bytes]
    tags: Sequence[str | None]
    delay: Sequence[str | None]
    keys: Sequence[str]
    key_owner: npt.NDArray[np.int64]
    bodies: Sequence[bytes]
    body: npt.NDArray[np.int64]
    hosts: Sequence[HostAddress]
    born_host: npt.NDArray[np.int64]
    store_host: npt.NDArray[np.int64]
    born_timestamp: npt.NDArray[np.int64]
    store_timestamp: npt.NDArray[np.int64]
    sys_flag: npt.NDArray[np.int64]  # transaction, compression, multi-tag bits; IPv6 bits derived
    flag: npt.NDArray[np.int64]
    reconsume_times: npt.NDArray[np.int64]
    prepared_offset: npt.NDArray[np.int64]
    dispatch: npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class PlacedColumns:
    """Where :meth:`StoreWriter.put_columns` stored each message."""

    physical_offset: npt.NDArray[np.int64]
    size: npt.NDArray[np.int64]
    queue_offset: npt.NDArray[np.int64]
    blank_offset: dict[int, int]  # message index -> BLANK that closed the file before it


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


def encode_properties_map(pairs: Mapping[str, str], trailing_separator: bool) -> bytes:
    """``messageProperties2String`` of a ``HashMap`` holding ``pairs`` (inserted in order):
    ``name 0x01 value 0x02`` in the map's iteration order, the last 0x02 kept only by the
    profiles that keep it."""
    if not pairs:
        return b""
    names = tuple(pairs)
    text = "\x02".join([prefix + pairs[name] for name, prefix in _hashmap_prefixes(names)])
    count = len(names)
    if text.count("\x01") != count or text.count("\x02") != count - 1:
        raise ValueError("property names and values cannot contain 0x01 or 0x02")
    if trailing_separator:
        text += "\x02"
    return text.encode("utf-8")


@functools.lru_cache(maxsize=4096)
def properties_template(
    names: tuple[str, ...], trailing_separator: bool
) -> tuple[str, Callable[[Sequence[str]], tuple[str, ...]]]:
    """For bulk generators: a ``%``-format string and a getter that turn the values of
    ``names`` (given in insertion order) into what :func:`encode_properties_map` writes.
    The values are not checked for separators, so only trusted ones may be used."""
    order = _hashmap_order(names)
    fmt = "\x02".join(names[i].replace("%", "%%") + "\x01%s" for i in order)
    getter = operator.itemgetter(*order)
    if len(order) == 1:
        only = order[0]
        return fmt + ("\x02" if trailing_separator else ""), lambda values: (values[only],)
    return fmt + ("\x02" if trailing_separator else ""), getter


def rewrite_delay(
    pairs: dict[str, str], topic: str, queue_id: int, delay: str, max_level: int
) -> tuple[str, int]:
    """The delay-level rewrite (4.9 ``CommitLog.putMessage``, 5.x ``HookUtils``) of a NOT or
    COMMIT message whose ``DELAY`` is ``delay``: clamp the level, record ``REAL_TOPIC`` and
    ``REAL_QID`` in ``pairs``, and return the schedule topic and queue (unchanged for level 0)."""
    level = java_parse_int(delay)
    if level is None:
        raise ValueError(f"DELAY property {delay!r} is not an integer")
    if level <= 0:
        return topic, queue_id
    if level > max_level:
        level = max_level
        pairs[props.DELAY] = str(level)
    pairs[props.REAL_TOPIC] = topic
    pairs[props.REAL_QID] = str(queue_id)
    return SCHEDULE_TOPIC, level - 1


# --- vectorised Java hashing ----------------------------------------------------------------------


def _hash_parts(strings: Sequence[str]) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]:
    """``String.hashCode`` (as uint32) and UTF-16 length of each string, vectorised.

    Strings are grouped by length, each group becomes a (count, length) array of code points,
    and Horner's rule runs over its columns in uint32, which wraps exactly like Java's int.
    Characters outside the BMP are two UTF-16 units in Java: such strings (rare) are hashed
    one by one.
    """
    count = len(strings)
    hashes = np.zeros(count, dtype=np.uint32)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=count)
    units = lengths.copy()
    if not count:
        return hashes, units
    order = np.argsort(lengths, kind="stable")
    bounds = np.flatnonzero(np.diff(lengths[order])) + 1
    thirty_one = np.uint32(31)
    for group in np.split(order, bounds):
        length = int(lengths[group[0]])
        if length == 0:
            continue
        rows = [strings[i] for i in group]
        codes = np.array(rows, dtype=f"<U{length}").view(np.uint32).reshape(len(rows), length)
        h = np.zeros(len(rows), dtype=np.uint32)
        for column in np.ascontiguousarray(codes.T):
            h *= thirty_one
            h += column
        for k in np.flatnonzero((codes > 0xFFFF).any(axis=1)):
            h[k] = java_hash(rows[k]) & 0xFFFFFFFF
            units[group[k]] = len(rows[k].encode("utf-16-le", "surrogatepass")) // 2
        hashes[group] = h
    return hashes, units


def _signed(hashes: npt.NDArray[np.uint32]) -> npt.NDArray[np.int64]:
    return hashes.view(np.int32).astype(np.int64)


def java_hashes(strings: Sequence[str]) -> npt.NDArray[np.int64]:
    """``String.hashCode`` of each string (signed), vectorised."""
    return _signed(_hash_parts(strings)[0])


def _key_hash(hashes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``abs(hashCode)`` with ``Integer.MIN_VALUE`` mapped to 0, as ``IndexFile`` stores it."""
    result = np.abs(hashes)
    result[result > INT_MAX] = 0
    return result


def _pow31(exponents: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """31**e mod 2**32 for each exponent, by squaring over the exponents' bits."""
    result = np.ones(len(exponents), dtype=np.uint64)
    base = np.full(len(exponents), 31, dtype=np.uint64)
    e = exponents.astype(np.uint64)
    mask = np.uint64(0xFFFFFFFF)
    while e.any():
        odd = (e & np.uint64(1)).astype(bool)
        result[odd] = (result[odd] * base[odd]) & mask
        base = (base * base) & mask
        e >>= np.uint64(1)
    return result


def prefixed_key_hashes(
    prefixes: Sequence[str], prefix_of: npt.NDArray[np.int64], keys: Sequence[str]
) -> npt.NDArray[np.int64]:
    """Index key hashes of ``prefixes[prefix_of[i]] + keys[i]`` without building the strings:
    ``h(p + k) = h(p) * 31**len(k) + h(k)`` modulo 2**32 (lengths in UTF-16 units)."""
    key_hashes, key_units = _hash_parts(keys)
    prefix_hashes = _hash_parts(prefixes)[0].astype(np.uint64)[prefix_of]
    combined = (prefix_hashes * _pow31(key_units) + key_hashes) & np.uint64(0xFFFFFFFF)
    return _key_hash(_signed(combined.astype(np.uint32)))


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


@dataclass(frozen=True, slots=True)
class _Run:
    """Records ``first .. end - 1`` of a batch, stored contiguously from ``position`` of the file
    at ``file_start``; ``blank`` > 0 means a BLANK of that TOTALSIZE follows them."""

    file_start: int
    position: int
    first: int
    end: int
    blank: int


class _CommitLog:
    """Commitlog files: the write position, BLANK records and rolling (§2.3)."""

    def __init__(self, directory: Path, file_size: int, start: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.file_start = start
        self.position = 0  # write position inside the current file
        self.files: list[str] = []
        self.data_bytes = 0
        self._named_start = -1  # the last file a write was submitted for
        self._io = _Io()
        self._fd: int | None = None  # owned by the I/O thread
        self._fd_start = -1

    @property
    def end(self) -> int:
        return self.file_start + self.position

    def place(self, lengths: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], list[_Run]]:
        """Physical offsets for records of ``lengths``: each goes where the last one ended,
        unless ``msgLen + 8`` exceeds what is left of the file, which a BLANK then closes."""
        if (lengths + END_FILE_MIN_BLANK_LENGTH > self.file_size).any():
            big = int(lengths.max())
            raise ValueError(f"a {big}-byte record cannot fit a {self.file_size}-byte file")
        count = len(lengths)
        offsets = np.empty(count, dtype=np.int64)
        runs: list[_Run] = []
        first = 0
        smallest = max(int(lengths.min()), 1) if count else 1
        while first < count:
            room = self.file_size - self.position - END_FILE_MIN_BLANK_LENGTH
            window = lengths[first : first + room // smallest + 1]
            ends = np.cumsum(window)
            end = first + int(np.searchsorted(ends, room, side="right"))
            if end > first:
                offsets[first:end] = self.file_start + self.position + ends[: end - first]
                offsets[first:end] -= lengths[first:end]
            blank = (
                self.file_size - self.position - int(ends[end - first - 1] if end > first else 0)
            )
            runs.append(
                _Run(self.file_start, self.position, first, end, blank if end < count else 0)
            )
            self.position = self.file_size - blank
            if end < count:
                self.file_start += self.file_size
                self.position = 0
            first = end
        return offsets, runs

    def write(self, run: _Run, data: bytes) -> None:
        """The bytes of ``run`` (and its BLANK), creating the run's file on first use. The
        write itself happens on the I/O thread."""
        if run.file_start != self._named_start:
            self._named_start = run.file_start
            self.files.append(offset_file_name(run.file_start))
        self.data_bytes += len(data) + (END_FILE_MIN_BLANK_LENGTH if run.blank else 0)
        self._io.submit(lambda: self._write_now(run, data))

    def _write_now(self, run: _Run, data: bytes) -> None:
        if self._fd_start != run.file_start:
            self._close_file()
            name = offset_file_name(run.file_start)
            self._fd = _create_file(self.directory / name, self.file_size)
            self._fd_start = run.file_start
        assert self._fd is not None
        if data:
            os.pwrite(self._fd, data, run.position)
        if run.blank:
            blank_at = self.file_size - run.blank
            os.pwrite(self._fd, _BLANK.pack(run.blank, BLANK_MAGIC_CODE), blank_at)

    def _close_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self, preallocate_next: bool) -> None:
        """Finish the writes; with ``preallocate_next`` leave the all-zero next file that
        ``AllocateMappedFileService`` had already created (a crash keeps it)."""
        if self._named_start >= 0 and preallocate_next:
            name = offset_file_name(self._named_start + self.file_size)
            self.files.append(name)
            self._io.submit(lambda: os.close(_create_file(self.directory / name, self.file_size)))
        self._io.submit(self._close_file)
        self._io.drain()


class _Io:
    """File writes on one background thread, in submission order: ``pwrite`` releases the GIL,
    so the kernel's copying overlaps with encoding the next batch. A failed write is raised by
    a later ``submit`` or by ``drain``."""

    def __init__(self, depth: int = 4) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="synth-io")
        self._pending: deque[Future[None]] = deque()
        self._depth = depth

    def submit(self, task: Callable[[], None]) -> None:
        self._pending.append(self._pool.submit(task))
        while self._pending and (len(self._pending) > self._depth or self._pending[0].done()):
            self._pending.popleft().result()

    def drain(self) -> None:
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)


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
    slots: npt.NDArray[np.int32] | None = None
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
        hashes: npt.NDArray[np.int64],
        owners: npt.NDArray[np.int64],
    ) -> None:
        """Index the dispatched messages ``first .. first + len(store_timestamps) - 1``; the
        key hashes ``hashes`` belong to the messages ``owners`` (dispatch ordinals)."""
        end = first + len(store_timestamps)
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
            f.slots = np.zeros(self.geometry.slot_num, dtype=np.int32)
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
        diff = np.where(begin <= 0, 0, np.clip((ts - begin) // 1000, 0, INT_MAX))
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


_UNUSED_TOPIC = _TopicInfo(1, MESSAGE_MAGIC_CODE, 0, b"")


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


class _Row(NamedTuple):
    """One message resolved into its stored form (see :meth:`StoreWriter._resolve`)."""

    topic: str
    queue_id: int
    properties: bytes
    tags: str | None
    delay: str | None
    keys: list[str]
    body: bytes
    born_host: HostAddress
    store_host: HostAddress
    born_timestamp: int
    store_timestamp: int
    sys_flag: int
    flag: int
    reconsume_times: int
    prepared_offset: int
    dispatch: bool


def _columns(rows: Sequence[_Row]) -> MessageColumns:
    """Rows to columns; topics and hosts become tables, each row keeps its own body."""
    topics: dict[str, int] = {}
    hosts: dict[HostAddress, int] = {}
    key_owner: list[int] = []
    keys: list[str] = []
    for n, row in enumerate(rows):
        topics.setdefault(row.topic, len(topics))
        hosts.setdefault(row.born_host, len(hosts))
        hosts.setdefault(row.store_host, len(hosts))
        keys += row.keys
        key_owner += [n] * len(row.keys)

    def ints(values: Iterable[int]) -> npt.NDArray[np.int64]:
        return np.fromiter(values, dtype=np.int64, count=len(rows))

    return MessageColumns(
        topics=list(topics),
        topic=ints(topics[r.topic] for r in rows),
        queue_id=ints(r.queue_id for r in rows),
        properties=[r.properties for r in rows],
        tags=[r.tags for r in rows],
        delay=[r.delay for r in rows],
        keys=keys,
        key_owner=np.array(key_owner, dtype=np.int64),
        bodies=[r.body for r in rows],
        body=np.arange(len(rows), dtype=np.int64),
        hosts=list(hosts),
        born_host=ints(hosts[r.born_host] for r in rows),
        store_host=ints(hosts[r.store_host] for r in rows),
        born_timestamp=ints(r.born_timestamp for r in rows),
        store_timestamp=ints(r.store_timestamp for r in rows),
        sys_flag=ints(r.sys_flag for r in rows),
        flag=ints(r.flag for r in rows),
        reconsume_times=ints(r.reconsume_times for r in rows),
        prepared_offset=ints(r.prepared_offset for r in rows),
        dispatch=np.fromiter((r.dispatch for r in rows), dtype=bool, count=len(rows)),
    )


def _check_columns(c: MessageColumns, count: int) -> None:
    per_message = (
        "queue_id",
        "properties",
        "tags",
        "delay",
        "body",
        "born_host",
        "store_host",
        "born_timestamp",
        "store_timestamp",
        "sys_flag",
        "flag",
        "reconsume_times",
        "prepared_offset",
        "dispatch",
    )
    for name in per_message:
        if len(getattr(c, name)) != count:
            raise ValueError(f"column {name} has {len(getattr(c, name))} values for {count}")
    owner = np.asarray(c.key_owner)
    if len(owner) != len(c.keys):
        raise ValueError(f"{len(c.keys)} keys but {len(owner)} key owners")
    if len(owner) and (owner.min() < 0 or owner.max() >= count or (np.diff(owner) < 0).any()):
        raise ValueError("key owners must be message indexes in non-decreasing order")


def _heads(
    c: MessageColumns,
    infos: Sequence[_TopicInfo],
    length: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
    queue_offset: npt.NDArray[np.int64],
    sys_flag: npt.NDArray[np.int64],
    born6: npt.NDArray[np.bool_],
    store6: npt.NDArray[np.bool_],
    body_length: npt.NDArray[np.int64],
) -> list[bytes]:
    """Each record's fixed part, TOTALSIZE to BODYLENGTH (§2.2), built a host layout at a time."""
    heads = [b""] * len(length)
    topic = np.asarray(c.topic, dtype=np.int64)
    magic = np.array([info.magic for info in infos], dtype=np.int64)[topic]
    body_crc = np.fromiter(map(masked_crc32, c.bodies), dtype=np.int64, count=len(c.bodies))[c.body]
    encoded = [h.encode() for h in c.hosts]
    host_fields = {
        size: np.frombuffer(
            b"".join(e if len(e) == size else bytes(size) for e in encoded), dtype=f"V{size}"
        )
        for size in (8, 20)
    }
    for (b6, s6), dtype in _HEAD_DTYPES.items():
        rows = np.flatnonzero((born6 == b6) & (store6 == s6))
        if not rows.size:
            continue
        arr = np.empty(rows.size, dtype=dtype)
        arr["total"] = length[rows]
        arr["magic"] = magic[rows]
        arr["body_crc"] = body_crc[rows]
        arr["queue_id"] = np.asarray(c.queue_id)[rows]
        arr["flag"] = np.asarray(c.flag)[rows]
        arr["queue_offset"] = queue_offset[rows]
        arr["physical_offset"] = offsets[rows]
        arr["sys_flag"] = sys_flag[rows]
        arr["born_timestamp"] = np.asarray(c.born_timestamp)[rows]
        arr["born_host"] = host_fields[20 if b6 else 8][np.asarray(c.born_host)[rows]]
        arr["store_timestamp"] = np.asarray(c.store_timestamp)[rows]
        arr["store_host"] = host_fields[20 if s6 else 8][np.asarray(c.store_host)[rows]]
        arr["reconsume_times"] = np.asarray(c.reconsume_times)[rows]
        arr["prepared_offset"] = np.asarray(c.prepared_offset)[rows]
        arr["body_length"] = body_length[rows]
        blob = arr.tobytes()
        size = dtype.itemsize
        for r, k in enumerate(rows.tolist()):
            heads[k] = blob[r * size : (r + 1) * size]
    return heads


def _fill_prop_crcs(data: bytearray, lengths: Sequence[int]) -> bytearray:
    """Write each record's ``__CRC32#`` digits: the masked CRC32 of the record minus its last
    20 bytes, least significant digit first (§3.2)."""
    view = memoryview(data)
    start = 0
    for length in lengths:
        end = start + length
        crc = masked_crc32(view[start : end - CRC32_RESERVED_LEN])
        view[end - 11 : end - 1] = encode_prop_crc_digits(crc).encode("ascii")
        start = end
    return data


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
        self._default_store_host = layout.store_host
        self._append_prop_crc = layout.append_prop_crc
        self._index_enabled = layout.message_index_enable
        self._tag_codes: dict[str, int] = {}
        self._stamps: list[npt.NDArray[np.int64]] = []  # store timestamps, for the checkpoint
        self._messages = 0
        self._last_offset = -1
        self._dispatch_stopped = False
        self._closed = False
        self._summary: StoreSummary | None = None
        # Dispatch requests waiting for the next chunk: (phy, size, store time, queue number,
        # queue offset, tagsCode) arrays, and (key hash, dispatch ordinal) arrays.
        self._pending: list[tuple[npt.NDArray[np.int64], ...]] = []
        self._pending_keys: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        self._pending_count = 0
        self._pending_first = 0
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
            self._closed = True
            # The error in flight says more than a write that failed after it.
            with contextlib.suppress(Exception):
                self._log.close(preallocate_next=False)

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
        return self._messages

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
        rows = [self._resolve(spec, self._dispatch_stopped)]
        placed = self.put_columns(_columns(rows))
        topic, queue_id = rows[0].topic, rows[0].queue_id
        return PutResult(
            int(placed.physical_offset[0]),
            int(placed.size[0]),
            topic,
            queue_id,
            int(placed.queue_offset[0]),
            rows[0].store_timestamp,
            self._topics[topic].version,
            placed.blank_offset.get(0),
        )

    def put_many(self, specs: Iterable[MessageSpec]) -> int:
        """``put`` for each message, in batches (``last_offset`` moves once per batch);
        returns how many were written. A message that fails validation stops the call after
        every message before it was written."""
        count = 0
        rows: list[_Row] = []
        stopped = self._dispatch_stopped
        try:
            for spec in specs:
                row = self._resolve(spec, stopped)
                stopped = stopped or not row.dispatch
                rows.append(row)
                if len(rows) == _BATCH:
                    count += len(self.put_columns(_columns(rows)).size)
                    rows = []
        finally:
            if rows:
                count += len(self.put_columns(_columns(rows)).size)
        return count

    def _resolve(self, spec: MessageSpec, dispatch_stopped: bool) -> _Row:
        """A message in stored form: the delay rewrite, the properties string, and what the
        dispatcher will read from it."""
        if spec.dispatch and dispatch_stopped:
            raise ValueError("dispatch stopped at an earlier message; the reput never skips one")
        topic = spec.topic
        queue_id = spec.queue_id
        raw = spec.properties
        if isinstance(raw, bytes):
            properties, tags, delay, uniq, keys = self._raw_properties(spec, raw)
        else:
            if raw and not (
                spec.tags or spec.keys or spec.uniq_key or spec.delay_level or self._append_prop_crc
            ):
                pairs: Mapping[str, str] = raw  # used as is; copied before any change
            else:
                pairs = self._pairs(spec)
            delay = pairs.get(props.DELAY)
            if delay is not None and spec.sys_flag & TRANSACTION_TYPE_MASK in _QUEUE_TYPES:
                pairs = dict(pairs)
                topic, queue_id = self._rewrite_delay(pairs, topic, queue_id, delay)
                delay = pairs[props.DELAY]
            properties = self._encode_pairs(pairs)
            # The dispatcher reads the stored string back, which drops empty values.
            tags = pairs.get(props.TAGS) or None
            delay = delay or None
            uniq = pairs.get(props.UNIQ_KEY) or None
            keys = pairs.get(props.KEYS) or None
        index_keys = [] if uniq is None else [uniq]
        if keys:
            index_keys += [k for k in keys.split(props.KEY_SEPARATOR) if k]
        store_ts = self._clock() if spec.store_timestamp is None else spec.store_timestamp
        return _Row(
            topic,
            queue_id,
            properties,
            tags,
            delay,
            index_keys,
            spec.body,
            spec.born_host,
            spec.store_host or self._default_store_host,
            store_ts if spec.born_timestamp is None else spec.born_timestamp,
            store_ts,
            spec.sys_flag,
            spec.flag,
            spec.reconsume_times,
            spec.prepared_transaction_offset,
            spec.dispatch,
        )

    def put_columns(self, c: MessageColumns) -> PlacedColumns:
        """Append a batch of messages given as columns (the append path, vectorised)."""
        if self._closed:
            raise ValueError("the store writer is closed")
        count = len(c.topic)
        _check_columns(c, count)
        dispatch = np.asarray(c.dispatch, dtype=bool)
        stops = np.flatnonzero(~dispatch)
        if dispatch.any() and (
            self._dispatch_stopped or (stops.size and stops[0] < np.flatnonzero(dispatch)[-1])
        ):
            raise ValueError("dispatch stopped at an earlier message; the reput never skips one")
        topic = np.asarray(c.topic, dtype=np.int64)
        # Only topics in use are checked (a table entry may not fit this profile's records).
        used = set(np.unique(topic).tolist())
        infos = [
            self._topics.get(t) or self._topic_info(t) if n in used else _UNUSED_TOPIC
            for n, t in enumerate(c.topics)
        ]
        v6 = np.fromiter((h.is_v6 for h in c.hosts), dtype=bool, count=len(c.hosts))
        born6 = v6[c.born_host]
        store6 = v6[c.store_host]
        sys_flag = (
            (np.asarray(c.sys_flag, dtype=np.int64) & ~0x30) | (born6 * 0x10) | (store6 * 0x20)
        )
        properties = list(c.properties)
        if self._append_prop_crc:
            # Room for the tail (§3.2), after a 0x02 unless the properties end with one.
            properties = [
                (p + b"\x02" if p and p[-1] != 2 else p) + _CRC_TAIL_TEMPLATE for p in properties
            ]
        props_length = np.fromiter(map(len, properties), dtype=np.int64, count=count)
        if (props_length > 32767).any():
            raise ValueError(f"properties of {int(props_length.max())} bytes exceed 32767")
        body_lengths = np.fromiter(map(len, c.bodies), dtype=np.int64, count=len(c.bodies))
        body_length = body_lengths[c.body]
        fixed = np.array([info.fixed_length for info in infos], dtype=np.int64)[topic]
        length = fixed + 12 * born6 + 12 * store6 + body_length + props_length
        # place() checks that every record fits a file before any state changes.
        offsets, runs = self._log.place(length)
        tran = sys_flag & TRANSACTION_TYPE_MASK
        enters = (tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE)
        queue_offset, queue_number = self._queue_offsets(c, enters)
        heads = _heads(
            c, infos, length, offsets, queue_offset, sys_flag, born6, store6, body_length
        )
        log = self._log
        bodies = c.bodies
        tails = [info.tail for info in infos]
        body_of = np.asarray(c.body).tolist()
        topic_of = topic.tolist()
        lengths = length.tolist()
        props_heads = props_length.astype(">i2").tobytes()
        blanks: dict[int, int] = {}
        for run in runs:
            parts: list[bytes] = []
            extend = parts.extend
            for k in range(run.first, run.end):
                extend(
                    (
                        heads[k],
                        bodies[body_of[k]],
                        tails[topic_of[k]],
                        props_heads[2 * k : 2 * k + 2],
                        properties[k],
                    )
                )
            data = b"".join(parts)
            if self._append_prop_crc:
                data = bytes(_fill_prop_crcs(bytearray(data), lengths[run.first : run.end]))
            log.write(run, data)
            if run.blank:
                blanks[run.end] = run.file_start + self._log.file_size - run.blank
        self._stamps.append(np.asarray(c.store_timestamp, dtype=np.int64))
        self._messages += count
        if count:
            self._last_offset = int(offsets[-1])
        self._dispatch(c, dispatch, enters, tran, offsets, length, queue_offset, queue_number)
        return PlacedColumns(offsets, length, queue_offset, blanks)

    def _queue_offsets(
        self, c: MessageColumns, enters: npt.NDArray[np.bool_]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Queue offsets (NOT/COMMIT messages take the next one of their queue; PREPARED and
        ROLLBACK get 0) and consume-queue numbers (0: no unit) for a batch."""
        count = len(c.topic)
        queue_offset = np.zeros(count, dtype=np.int64)
        queue_number = np.zeros(count, dtype=np.int64)
        queue_id = np.asarray(c.queue_id, dtype=np.int64)
        combined = np.asarray(c.topic, dtype=np.int64) * (int(queue_id.max(initial=0)) + 1)
        combined += queue_id
        order = np.argsort(combined, kind="stable")
        bounds = np.flatnonzero(np.diff(combined[order])) + 1
        for rows in np.split(order, bounds):
            if not rows.size:
                continue
            key = (c.topics[int(c.topic[rows[0]])], int(queue_id[rows[0]]))
            self._used_queues.add(key)
            entering = rows[enters[rows]]
            if entering.size:
                base = self._next_offsets.get(key, 0)
                queue_offset[entering] = base + np.arange(entering.size)
                self._next_offsets[key] = base + entering.size
                number = self._queue_ids.get(key) or self._queue_number(key)
                queue_number[entering] = number
        for t in np.unique(np.asarray(c.topic)[(np.asarray(c.sys_flag) & MULTI_TAGS_FLAG) != 0]):
            self._multi_tag_topics.add(c.topics[int(t)])
        return queue_offset, queue_number

    def _dispatch(
        self,
        c: MessageColumns,
        dispatch: npt.NDArray[np.bool_],
        enters: npt.NDArray[np.bool_],
        tran: npt.NDArray[np.int64],
        offsets: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        queue_offset: npt.NDArray[np.int64],
        queue_number: npt.NDArray[np.int64],
    ) -> None:
        """Buffer what the dispatchers receive for the dispatched messages of a batch."""
        if not dispatch.all():
            self._dispatch_stopped = True
        rows = np.flatnonzero(dispatch)
        if not rows.size:
            return
        first = self._dispatched
        self._dispatched += rows.size
        store_ts = np.asarray(c.store_timestamp, dtype=np.int64)
        tags_code = self._tags_codes(c, rows, enters, store_ts)
        entering = rows[enters[rows]]
        if entering.size:
            self._logics_timestamp = int(store_ts[entering[-1]])
        self._pending.append(
            (
                offsets[rows],
                length[rows],
                store_ts[rows],
                queue_number[rows],
                queue_offset[rows],
                tags_code,
            )
        )
        if self._index_enabled and len(c.keys):
            owner = np.asarray(c.key_owner, dtype=np.int64)
            keep = dispatch[owner] & (tran[owner] != TRANSACTION_ROLLBACK_TYPE)
            kept = np.flatnonzero(keep)
            prefixes = [f"{t}#" for t in c.topics]
            hashes = prefixed_key_hashes(prefixes, np.asarray(c.topic)[owner], c.keys)[kept]
            ordinals = first + np.searchsorted(rows, owner[kept])
            self._pending_keys.append((hashes, ordinals))
        self._pending_count += rows.size
        if self._pending_count >= _DISPATCH_CHUNK:
            self._flush_dispatch()

    def _tags_codes(
        self,
        c: MessageColumns,
        rows: npt.NDArray[np.int64],
        enters: npt.NDArray[np.bool_],
        store_ts: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.int64]:
        """tagsCode as ``checkMessageAndReturnSize`` computes it for the dispatcher (§5.2):
        the tag hash, or for a schedule-topic message with ``DELAY`` its delivery time."""
        cache = self._tag_codes
        for tags in set(c.tags):
            if tags and tags not in cache:
                cache[tags] = java_hash(tags)
        get = cache.get
        all_codes = np.fromiter(
            (get(tags, 0) if tags else 0 for tags in c.tags), dtype=np.int64, count=len(c.tags)
        )
        all_codes[~enters] = 0
        schedule = [n for n, t in enumerate(c.topics) if t == SCHEDULE_TOPIC]
        if schedule:
            delayed = np.flatnonzero((np.asarray(c.topic) == schedule[0]) & enters)
            for k in delayed.tolist():
                code = dispatch_tags_code(
                    SCHEDULE_TOPIC, c.tags[k], c.delay[k], int(store_ts[k]), self._delay_table
                )
                if code is None:
                    raise ValueError(f"DELAY {c.delay[k]!r} in {SCHEDULE_TOPIC} is not an integer")
                all_codes[k] = code
        codes = all_codes[rows]
        return codes

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
        return rewrite_delay(pairs, topic, queue_id, delay, self._max_delay_level)

    def _encode_pairs(self, pairs: Mapping[str, str]) -> bytes:
        return encode_properties_map(pairs, self._trailing)

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

    # --- dispatch ---------------------------------------------------------------------------------

    def _queue_number(self, key: tuple[str, int]) -> int:
        """A new consume queue's number (from 1; 0 marks "no consume queue")."""
        number = self._queue_ids[key] = len(self._queue_ids) + 1
        topic, queue_id = key
        self._queues[key] = _ConsumeQueue(
            self._cq_dir / topic / str(queue_id), self.layout.cq_unit_file_size
        )
        return number

    def _flush_dispatch(self) -> None:
        """Hand the buffered dispatch requests to the consume queues and the index."""
        if not self._pending:
            return
        phy, size, ts, queue, qoff, tags = (
            np.concatenate(col) for col in zip(*self._pending, strict=True)
        )
        entering = np.flatnonzero(queue)
        if entering.size:
            units = np.empty(entering.size, dtype=CQ_UNIT_DTYPE)
            units["phy_offset"] = phy[entering]
            units["size"] = size[entering]
            units["tags_code"] = tags[entering]
            queue_of = queue[entering]
            order = np.argsort(queue_of, kind="stable")
            bounds = np.flatnonzero(np.diff(queue_of[order])) + 1
            queues = list(self._queues.values())
            for group in np.split(order, bounds):
                first = int(qoff[entering[group[0]]])
                queues[int(queue_of[group[0]]) - 1].append(units[group], first)
        if self._index_enabled:
            hashes = [h for h, _ in self._pending_keys]
            owners = [o for _, o in self._pending_keys]
            self._index.add_chunk(
                self._pending_first,
                ts,
                phy,
                np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.int64),
                np.concatenate(owners) if owners else np.zeros(0, dtype=np.int64),
            )
        self._pending_first += len(phy)
        self._pending = []
        self._pending_keys = []
        self._pending_count = 0

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
            messages=self._messages,
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
        stamps = np.concatenate(self._stamps) if self._stamps else np.zeros(0, dtype=np.int64)
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
        last = int(self._stamps[-1][-1]) if self._stamps and len(self._stamps[-1]) else 0
        return DataVersion(counter=1, timestamp=last, state_version=0)

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
