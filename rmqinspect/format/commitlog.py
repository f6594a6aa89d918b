"""CommitLog records: decoding, the broker's own validity check, and encoding.

Layout and rules: rocketmq-store-format.md §2 (record), §3 (CRCs), §10.3 (the check).
Two entry points read records:

* :func:`check_message` reproduces ``CommitLog.checkMessageAndReturnSize`` verdict for verdict,
  including the order in which it notices problems; recovery and dispatch emulation use it.
* :func:`decode_message` is lenient about checksums (it reports them) and strict about structure;
  the inspection commands use it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from rmqinspect.errors import DecodeError
from rmqinspect.format import properties as props
from rmqinspect.format.crc import masked_crc32
from rmqinspect.format.host import HostAddress
from rmqinspect.format.javahash import java_hash
from rmqinspect.format.javamath import java_parse_int, java_split, wrap64
from rmqinspect.format.profile import Profile

if TYPE_CHECKING:
    from rmqinspect.format.dledger import EntryHeader

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7, topic length is an i8
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB, topic length is an i16 (5.1.0+)
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194, end-of-file filler
END_FILE_MIN_BLANK_LENGTH = 8
CRC32_RESERVED_LEN = 20  # "__CRC32#" + 0x01 + 10 digits + 0x02

# sysFlag bits (MessageSysFlag)
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DEFAULT_COMMITLOG_FILE_SIZE = 1 << 30  # mappedFileSizeCommitLog

# --- record layout (§2.2): every position below derives from these two field lists ------------
#
# A record is FIXED_HEAD, the born host, STORETIMESTAMP, the store host, MID_FIELDS, the body,
# the topic length (i8 in V1, i16 in V2), the topic, PROPERTIESLENGTH (i16) and the properties.
# Hosts are 4 (IPv4) or 16 (IPv6) address bytes plus an i32 port, chosen by sysFlag bits.
FIXED_HEAD = struct.Struct(">iiiiiqqiq")
FIXED_FIELDS = (
    "store_size",
    "magic",
    "body_crc",
    "queue_id",
    "flag",
    "queue_offset",
    "physical_offset_field",
    "sys_flag",
    "born_timestamp",
)
MID_FIELDS_STRUCT = struct.Struct(">iqi")  # RECONSUMETIMES PREPAREDTRANSACTIONOFFSET BODYLENGTH
MID_FIELDS = ("reconsume_times", "prepared_transaction_offset", "body_length")


def _positions(fmt: str, names: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    at = 0
    for name, code in zip(names, fmt.lstrip(">"), strict=True):
        out[name] = at
        at += struct.calcsize(">" + code)
    return out


FIXED_POS = _positions(FIXED_HEAD.format, FIXED_FIELDS)
TOTALSIZE_POS = FIXED_POS["store_size"]  # 0
MAGIC_POS = FIXED_POS["magic"]  # 4
BODYCRC_POS = FIXED_POS["body_crc"]  # 8
QUEUEID_POS = FIXED_POS["queue_id"]  # 12
FLAG_POS = FIXED_POS["flag"]  # 16
QUEUEOFFSET_POS = FIXED_POS["queue_offset"]  # 20
PHYSICALOFFSET_POS = FIXED_POS["physical_offset_field"]  # 28
SYSFLAG_POS = FIXED_POS["sys_flag"]  # 36
BORNTIMESTAMP_POS = FIXED_POS["born_timestamp"]  # 40
BORNHOST_POS = FIXED_HEAD.size  # 48
STORETIMESTAMP_SIZE = 8
# Relative to the end of the store host:
MID_POS = _positions(MID_FIELDS_STRUCT.format, MID_FIELDS)
RECONSUMETIMES_REL = MID_POS["reconsume_times"]  # 0
PREPARED_REL = MID_POS["prepared_transaction_offset"]  # 4
BODYLENGTH_REL = MID_POS["body_length"]  # 12
BODY_REL = MID_FIELDS_STRUCT.size  # 16
IPV4_HOST_SIZE = 8
IPV6_HOST_SIZE = 20


def born_host_size(sys_flag: int) -> int:
    return IPV6_HOST_SIZE if sys_flag & BORNHOST_V6_FLAG else IPV4_HOST_SIZE


def store_host_size(sys_flag: int) -> int:
    return IPV6_HOST_SIZE if sys_flag & STOREHOSTADDRESS_V6_FLAG else IPV4_HOST_SIZE


def store_timestamp_pos(sys_flag: int) -> int:
    """STORETIMESTAMP: 56 for an IPv4 born host, 68 for IPv6."""
    return BORNHOST_POS + born_host_size(sys_flag)


def mid_fields_pos(sys_flag: int) -> int:
    """Where RECONSUMETIMES starts (the end of the store host): 72 for IPv4/IPv4."""
    return store_timestamp_pos(sys_flag) + STORETIMESTAMP_SIZE + store_host_size(sys_flag)


def topic_length_size(magic: int) -> int:
    """The topic length is an i8 in V1 records and an i16 in V2 records."""
    return 2 if magic == MESSAGE_MAGIC_CODE_V2 else 1


# Fixed parts of ``calMsgLength``: everything but the hosts, body, topic and properties.
_FIXED_LENGTH = BORNHOST_POS + STORETIMESTAMP_SIZE + BODY_REL + 2  # 48 + 8 + 16 + PROPLEN(2)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PORT = struct.Struct(">i")

_TRANSACTION_NAMES = {
    TRANSACTION_NOT_TYPE: "not",
    TRANSACTION_PREPARED_TYPE: "prepared",
    TRANSACTION_COMMIT_TYPE: "commit",
    TRANSACTION_ROLLBACK_TYPE: "rollback",
}
TRANSACTION_TYPES = {name: code for code, name in _TRANSACTION_NAMES.items()}
"""The transaction type bits of ``sys_flag`` by name (``--tx-type``)."""
_COMPRESSION_NAMES = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}


def transaction_name(sys_flag: int) -> str:
    """not, prepared, commit or rollback: the transaction type bits of ``sys_flag``."""
    return _TRANSACTION_NAMES[sys_flag & TRANSACTION_TYPE_MASK]


def compression_name(sys_flag: int) -> str | None:
    """Body compression named by ``sys_flag``, or None when the body is stored as sent."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    kind = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    return _COMPRESSION_NAMES.get(kind, f"unknown({kind})")


def body_crc(data: bytes | bytearray | memoryview) -> int:
    """``UtilAll.crc32``: zlib CRC-32 masked to 31 bits."""
    return masked_crc32(data)


def magic_name(magic: int) -> str:
    return f"0x{magic & 0xFFFFFFFF:08X}"


def calc_msg_length(
    sys_flag: int, body_length: int, topic_length: int, properties_length: int, version: int = 1
) -> int:
    """``calMsgLength``: the length a record must have given its variable parts."""
    return (
        _FIXED_LENGTH
        + born_host_size(sys_flag)
        + store_host_size(sys_flag)
        + max(body_length, 0)
        + (2 if version == 2 else 1)
        + topic_length
        + max(properties_length, 0)
    )


MIN_RECORD_SIZE = calc_msg_length(0, 0, 0, 0)  # 91: an empty V1 record with IPv4 hosts


def dispatch_tags_code(
    topic: str,
    tags: str | None,
    delay: str | None,
    store_timestamp: int,
    delay_levels: Mapping[int, int],
) -> int | None:
    """The tagsCode ``checkMessageAndReturnSize`` computes for dispatch (§5.2): the tag hash,
    or for a ``SCHEDULE_TOPIC_XXXX`` record with ``DELAY`` its delivery time
    (``computeDeliverTimestamp``, 1 s for a level missing from the table). None where a
    non-integer DELAY makes the broker's check fail. ``delay_levels`` is the parsed
    ``messageDelayLevel`` ({level: ms}); an empty table means levels are not loaded yet (4.9
    during ``load()``), so every level clamps to 0 and the tag hash stays."""
    code = java_hash(tags) if tags else 0
    if topic != SCHEDULE_TOPIC or delay is None:
        return code
    parses, millis = schedule_delay(delay, delay_levels)
    if not parses:
        return None
    return code if millis is None else wrap64(store_timestamp + millis)


def schedule_delay(delay: str, delay_levels: Mapping[int, int]) -> tuple[bool, int | None]:
    """What a ``SCHEDULE_TOPIC_XXXX`` record's DELAY value does to its tagsCode (see
    :func:`dispatch_tags_code`): whether it parses as an integer, and the milliseconds added
    to the store time (None where the clamped level is not positive and the tag hash stays)."""
    level = java_parse_int(delay)
    if level is None:
        return False, None
    level = min(level, max(delay_levels, default=0))
    if level <= 0:
        return True, None
    return True, delay_levels.get(level, 1000)


def dup_info_valid(properties: Mapping[str, str]) -> bool:
    """The ``checkDupInfo`` rule: a ``DUP_INFO`` property that splits on "_" into two parts."""
    dup = properties.get(props.DUP_INFO)
    return dup is not None and len(java_split(dup, "_")) == 2


def parse_delay_levels(spec: str = DEFAULT_DELAY_LEVELS) -> dict[int, int]:
    """``messageDelayLevel`` → {level: delay ms}; level = position + 1."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    table: dict[int, int] = {}
    for i, item in enumerate(spec.split(" ")):
        digits = item[:-1]
        if not item or item[-1] not in units or not (digits.isascii() and digits.isdigit()):
            raise DecodeError(f"bad messageDelayLevel element {item!r}")
        table[i + 1] = int(digits) * units[item[-1]]
    return table


@dataclass(slots=True)
class MessageRecord:
    """One decoded CommitLog message, named after RocketMQ's fields."""

    position: int  # where the record starts in the commitlog stream (file start + position)
    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset_field: int  # PHYSICALOFFSET as stored; ``position`` is where it is
    sys_flag: int
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    body_length: int
    body: bytes | None  # None when decoded without the body
    topic: str
    properties_raw: bytes
    properties: dict[str, str] = field(default_factory=dict)
    prop_crc: PropCrc | None = None  # 5.2+ __CRC32# property; read with the body
    entry: EntryHeader | None = None  # the DLedger entry holding the record, in a DLedger store

    @property
    def version(self) -> str:
        return "v2" if self.magic == MESSAGE_MAGIC_CODE_V2 else "v1"

    @property
    def tags(self) -> str | None:
        return self.properties.get(props.TAGS)

    @property
    def keys(self) -> list[str]:
        return props.split_keys(self.properties.get(props.KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(props.UNIQ_KEY)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_TYPE_MASK

    @property
    def transaction_name(self) -> str:
        return transaction_name(self.sys_flag)

    @property
    def compression(self) -> str | None:
        return compression_name(self.sys_flag)

    @property
    def body_crc_ok(self) -> bool | None:
        """Whether BODYCRC matches the body; None when the body was not read."""
        if self.body is None:
            return None
        return body_crc(self.body) == self.body_crc

    @property
    def end(self) -> int:
        return self.position + self.store_size

    @property
    def enters_consume_queue(self) -> bool:
        """NOT and COMMIT messages are dispatched to a consume queue; PREPARED/ROLLBACK are not."""
        return self.transaction_type in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)

    @property
    def is_indexed(self) -> bool:
        """Every type but ROLLBACK reaches the index (PREPARED included)."""
        return self.transaction_type != TRANSACTION_ROLLBACK_TYPE

    def index_keys(self) -> list[str]:
        """The keys ``IndexService.buildIndex`` puts for this record, in order."""
        return props.index_key_values(self.uniq_key, self.properties.get(props.KEYS))


class CheckReason(StrEnum):
    """Why ``checkMessageAndReturnSize`` gave its verdict (the broker itself only logs it)."""

    OK = "ok"
    BLANK = "blank"
    BAD_MAGIC = "bad_magic"
    BODY_CRC_MISMATCH = "body_crc_mismatch"
    TOTAL_SIZE_MISMATCH = "total_size_mismatch"
    PARSE_EXCEPTION = "parse_exception"
    OUT_OF_BOUNDS = "out_of_bounds"
    PROP_CRC_MISSING = "prop_crc_missing"
    PROP_CRC_MISMATCH = "prop_crc_mismatch"
    DUP_INFO_INVALID = "dup_info_invalid"
    # A DLedger entry header that ends DLedger's own walk (dledger-store-format.md §7); the
    # message inside is not looked at. See rmqinspect.format.dledger.
    END_OF_DATA = "end_of_data"
    POS_FIELD_MISMATCH = "pos_field_mismatch"
    BODY_SIZE_MISMATCH = "body_size_mismatch"
    BAD_ENTRY_MAGIC = "bad_entry_magic"
    INDEX_NOT_CONSECUTIVE = "index_not_consecutive"
    TERM_DECREASED = "term_decreased"
    SIZE_TOO_SMALL = "size_too_small"
    BEYOND_FILE_END = "beyond_file_end"


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """The broker configuration that changes ``checkMessageAndReturnSize``."""

    profile: Profile = Profile.V4_9
    check_crc: bool = True
    read_body: bool = True
    force_verify_prop_crc: bool = False
    check_dup_info: bool = False
    delay_levels: tuple[tuple[int, int], ...] = tuple(parse_delay_levels().items())

    @property
    def max_delay_level(self) -> int:
        return max((level for level, _ in self.delay_levels), default=0)


@dataclass(slots=True)
class CheckResult:
    """The broker's ``(msgSize, success)`` pair plus what rmqinspect learnt on the way.

    ``size`` is what the broker returns: the record size when valid, 0 for BLANK, -1 for a
    failure, and TOTALSIZE (with ``success`` false) when the recomputed length disagrees;
    ``fields_length`` is then that recomputed length (``calMsgLength``), which is how far the
    Java buffer has moved over the record.
    """

    size: int
    success: bool
    reason: CheckReason
    store_size: int | None = None
    magic: int | None = None
    record: MessageRecord | None = None
    tags_code: int = 0
    detail: str = ""
    fields_length: int | None = None

    @property
    def is_message(self) -> bool:
        return self.success and self.size > 0

    @property
    def is_blank(self) -> bool:
        return self.success and self.size == 0


class _Stop(Exception):
    """Internal: the Java code would have thrown here (caught as a failed parse)."""


class _Reader:
    """Bounds-checked sequential reads over ``buf[pos:limit]``, mirroring a Java ByteBuffer."""

    __slots__ = ("buf", "limit", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int, limit: int) -> None:
        self.buf = buf
        self.pos = pos
        self.limit = limit

    def take(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.limit:
            raise _Stop(f"{what} ({n} bytes) runs past the end of the file")
        start = self.pos
        self.pos += n
        return start


def _decode_host(buf: bytes | memoryview, start: int, v6: bool) -> HostAddress:
    n = IPV6_HOST_SIZE - 4 if v6 else IPV4_HOST_SIZE - 4
    return HostAddress(bytes(buf[start : start + n]), _PORT.unpack_from(buf, start + n)[0])


def check_message(
    buf: bytes | memoryview, pos: int, file_start: int = 0, options: CheckOptions | None = None
) -> CheckResult:
    """Reproduce ``CommitLog.checkMessageAndReturnSize`` on the record at ``buf[pos:]``.

    ``buf`` is one whole commitlog file (its end is the Java buffer limit) and ``file_start`` its
    first physical offset. The outcome and its order of checks follow §10.3 for the profile.
    """
    opts = options or CheckOptions()
    limit = len(buf)
    remaining = limit - pos
    if opts.profile.has_bounds_checks and remaining <= 4:
        return CheckResult(-1, False, CheckReason.OUT_OF_BOUNDS, detail="4 bytes or fewer left")
    if remaining < 4:
        return CheckResult(-1, False, CheckReason.PARSE_EXCEPTION, detail="no TOTALSIZE")
    store_size = _I32.unpack_from(buf, pos)[0]
    if opts.profile.has_bounds_checks and remaining - 4 < store_size - 4:
        return CheckResult(
            -1,
            False,
            CheckReason.OUT_OF_BOUNDS,
            store_size,
            detail=f"TOTALSIZE {store_size} exceeds the {remaining} bytes left in the file",
        )
    if remaining < 8:
        return CheckResult(-1, False, CheckReason.PARSE_EXCEPTION, store_size, detail="no magic")
    magic = _I32.unpack_from(buf, pos + 4)[0]
    if magic == BLANK_MAGIC_CODE:
        return CheckResult(0, True, CheckReason.BLANK, store_size, magic)
    if magic != MESSAGE_MAGIC_CODE and not (
        magic == MESSAGE_MAGIC_CODE_V2 and opts.profile.accepts_v2_magic
    ):
        return CheckResult(
            -1,
            False,
            CheckReason.BAD_MAGIC,
            store_size,
            magic,
            detail=f"magic code {magic_name(magic)}",
        )
    parsed = _parse(buf, pos, limit, file_start, store_size, magic, opts.read_body)
    rec = parsed.record
    if parsed.body_stop is not None:
        return _failed(store_size, magic, CheckReason.PARSE_EXCEPTION, parsed.body_stop)
    if (
        opts.check_crc
        and opts.read_body
        and not opts.force_verify_prop_crc
        and rec.body is not None
        and rec.body_length > 0
    ):
        computed = body_crc(rec.body)
        if computed != rec.body_crc:
            return _failed(
                store_size,
                magic,
                CheckReason.BODY_CRC_MISMATCH,
                f"body CRC is {computed}, BODYCRC field says {rec.body_crc}",
                rec,
            )
    if parsed.tail_stop is not None:
        return _failed(store_size, magic, CheckReason.PARSE_EXCEPTION, parsed.tail_stop, rec)

    tags_code = 0
    if parsed.properties_length > 0:
        p = rec.properties
        code = dispatch_tags_code(
            rec.topic,
            p.get(props.TAGS),
            p.get(props.DELAY),
            rec.store_timestamp,
            dict(opts.delay_levels),
        )
        if code is None:
            return _failed(
                store_size,
                magic,
                CheckReason.PARSE_EXCEPTION,
                f"DELAY property {p[props.DELAY]!r} is not an integer",
                rec,
            )
        tags_code = code
    if opts.check_dup_info and not dup_info_valid(rec.properties):
        dup = rec.properties.get(props.DUP_INFO)
        return _failed(store_size, magic, CheckReason.DUP_INFO_INVALID, f"DUP_INFO {dup!r}", rec)
    if opts.check_crc and opts.force_verify_prop_crc:
        crc = rec.prop_crc or record_prop_crc(buf, pos, store_size, rec.properties)
        if crc is None:
            return _failed(
                store_size, magic, CheckReason.PROP_CRC_MISSING, "no __CRC32# property", rec
            )
        if not crc.match:
            return _failed(
                store_size,
                magic,
                CheckReason.PROP_CRC_MISMATCH,
                f"__CRC32# {crc.raw!r}, computed {crc.computed}",
                rec,
            )
    mismatch = parsed.length_mismatch(store_size)
    if mismatch is not None:
        return CheckResult(
            store_size,
            False,
            CheckReason.TOTAL_SIZE_MISMATCH,
            store_size,
            magic,
            rec,
            tags_code,
            mismatch,
            parsed.expected_length,
        )
    return CheckResult(store_size, True, CheckReason.OK, store_size, magic, rec, tags_code)


def _failed(
    store_size: int,
    magic: int,
    reason: CheckReason,
    detail: str,
    record: MessageRecord | None = None,
) -> CheckResult:
    return CheckResult(-1, False, reason, store_size, magic, record, 0, detail)


@dataclass(slots=True)
class _Parsed:
    record: MessageRecord
    topic_length: int = 0
    properties_length: int = 0
    body_stop: str | None = None  # Java threw before or while reading the body
    tail_stop: str | None = None  # Java threw after the body (topic or properties)

    @property
    def expected_length(self) -> int:
        """``calMsgLength`` of the parts read: what TOTALSIZE must be."""
        rec = self.record
        return calc_msg_length(
            rec.sys_flag,
            rec.body_length,
            self.topic_length,
            self.properties_length,
            topic_length_size(rec.magic),
        )

    def length_mismatch(self, store_size: int) -> str | None:
        """Why ``store_size`` is not the length the fields add up to, or None when it is: the
        one home of the rule (:func:`~rmqinspect.format.columns.gather` is its vectorised
        form)."""
        expected = self.expected_length
        if expected == store_size:
            return None
        return f"TOTALSIZE {store_size} but the fields add up to {expected}"


def _parse(
    buf: bytes | memoryview,
    pos: int,
    limit: int,
    file_start: int,
    store_size: int,
    magic: int,
    read_body: bool,
) -> _Parsed:
    """Read the record's fields the way the Java code does, remembering where it would throw.

    The Java code copies host, body, topic and properties through a scratch array of TOTALSIZE
    bytes, so each of those parts (not their sum) must fit in TOTALSIZE as well as in the file.
    """
    rec = MessageRecord(
        position=file_start + pos,
        store_size=store_size,
        magic=magic,
        body_crc=0,
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset_field=0,
        sys_flag=0,
        born_timestamp=0,
        born_host=HostAddress(b"\0\0\0\0", 0),
        store_timestamp=0,
        store_host=HostAddress(b"\0\0\0\0", 0),
        reconsume_times=0,
        prepared_transaction_offset=0,
        body_length=0,
        body=None,
        topic="",
        properties_raw=b"",
    )
    parsed = _Parsed(rec)
    r = _Reader(buf, pos, limit)
    try:
        if store_size < 0:
            raise _Stop(f"negative TOTALSIZE {store_size}")
        start = r.take(FIXED_HEAD.size, "fixed header")
        (
            _,
            _,
            rec.body_crc,
            rec.queue_id,
            rec.flag,
            rec.queue_offset,
            rec.physical_offset_field,
            rec.sys_flag,
            rec.born_timestamp,
        ) = FIXED_HEAD.unpack_from(buf, start)
        born_len = born_host_size(rec.sys_flag)
        _fits_scratch(born_len, store_size, "born host")
        rec.born_host = _decode_host(buf, r.take(born_len, "born host"), born_len == IPV6_HOST_SIZE)
        rec.store_timestamp = _I64.unpack_from(buf, r.take(8, "store timestamp"))[0]
        store_len = store_host_size(rec.sys_flag)
        _fits_scratch(store_len, store_size, "store host")
        rec.store_host = _decode_host(
            buf, r.take(store_len, "store host"), store_len == IPV6_HOST_SIZE
        )
        (rec.reconsume_times, rec.prepared_transaction_offset, rec.body_length) = (
            MID_FIELDS_STRUCT.unpack_from(
                buf, r.take(MID_FIELDS_STRUCT.size, "reconsume/prepared/body length")
            )
        )
        if rec.body_length > 0:
            if read_body:
                _fits_scratch(rec.body_length, store_size, "body")
                at = r.take(rec.body_length, "body")
                rec.body = bytes(buf[at : at + rec.body_length])
            else:
                r.take(rec.body_length, "body")
        elif read_body:
            rec.body = b""
    except _Stop as stop:
        parsed.body_stop = str(stop)
        return parsed
    try:
        if magic == MESSAGE_MAGIC_CODE_V2:
            topic_length = _I16.unpack_from(buf, r.take(2, "topic length"))[0]
        else:
            topic_length = _I8.unpack_from(buf, r.take(1, "topic length"))[0]
        parsed.topic_length = topic_length
        _fits_scratch(topic_length, store_size, "topic")
        at = r.take(topic_length, "topic")
        rec.topic = bytes(buf[at : at + topic_length]).decode("utf-8", "replace")
        properties_length = _I16.unpack_from(buf, r.take(2, "properties length"))[0]
        parsed.properties_length = properties_length
        if properties_length > 0:
            _fits_scratch(properties_length, store_size, "properties")
            at = r.take(properties_length, "properties")
            rec.properties_raw = bytes(buf[at : at + properties_length])
            rec.properties = props.parse_properties(rec.properties_raw.decode("utf-8", "replace"))
            if read_body:
                rec.prop_crc = record_prop_crc(buf, pos, store_size, rec.properties)
    except _Stop as stop:
        parsed.tail_stop = str(stop)
    return parsed


def _fits_scratch(n: int, store_size: int, what: str) -> None:
    if n < 0 or n > store_size:
        raise _Stop(f"{what} length {n} does not fit the TOTALSIZE {store_size} scratch buffer")


def magic_problem(magic: int, accept_v2: bool = True) -> str | None:
    """Why a header with this MAGICCODE is no message record (None for a message's magic):
    what :func:`decode_message` raises before it reads further."""
    if magic == BLANK_MAGIC_CODE:
        return "BLANK end-of-file record, not a message"
    if magic != MESSAGE_MAGIC_CODE and not (accept_v2 and magic == MESSAGE_MAGIC_CODE_V2):
        return f"not a message record: magic code {magic_name(magic)}"
    return None


def decode_message(
    buf: bytes | memoryview,
    pos: int,
    file_start: int = 0,
    *,
    with_body: bool = True,
    accept_v2: bool = True,
) -> MessageRecord:
    """Decode the message record at ``buf[pos:]`` without judging its checksums.

    Raises :class:`DecodeError` (offset relative to ``buf``) when the bytes are not a complete,
    self-consistent message record: a BLANK, a wrong magic, a part running past the end of the
    buffer, or a TOTALSIZE that disagrees with the fields.
    """
    if len(buf) - pos < 8:
        raise DecodeError("truncated record: fewer than 8 bytes left", pos)
    store_size, magic = struct.unpack_from(">ii", buf, pos)
    problem = magic_problem(magic, accept_v2)
    if problem is not None:
        raise DecodeError(problem, pos if magic == BLANK_MAGIC_CODE else pos + 4)
    parsed = _parse(buf, pos, len(buf), file_start, store_size, magic, with_body)
    stop = parsed.body_stop or parsed.tail_stop
    if stop is not None:
        raise DecodeError(f"corrupt record: {stop}", pos)
    mismatch = parsed.length_mismatch(store_size)
    if mismatch is not None:
        raise DecodeError(mismatch, pos)
    return parsed.record


# --- 5.2+ whole-record property CRC (§3.2) ---------------------------------------------------


def decode_prop_crc_digits(text: str) -> int | None:
    """The broker reads the digits from the last to the first (``'0'..'9'`` only: a digit
    ``str.isdigit`` knows beyond those, such as ``²``, is no digit to it)."""
    if not text or len(text) > CRC32_RESERVED_LEN or not (text.isascii() and text.isdigit()):
        return None
    return int(text[::-1])


def prop_crc_computed(buf: bytes | memoryview, pos: int, store_size: int) -> int | None:
    """Masked CRC32 over the record minus its 20-byte CRC tail; None if it does not fit."""
    if store_size < CRC32_RESERVED_LEN or pos + store_size > len(buf):
        return None
    return body_crc(buf[pos : pos + store_size - CRC32_RESERVED_LEN])


@dataclass(frozen=True, slots=True)
class PropCrc:
    """A record's ``__CRC32#`` property: its digits, the value they give (None when they are
    not digits) and the CRC the record's bytes give (None when the record does not fit)."""

    raw: str
    stored: int | None
    computed: int | None

    @property
    def match(self) -> bool:
        return self.stored is not None and self.stored == self.computed


def record_prop_crc(
    buf: bytes | memoryview, pos: int, store_size: int, properties: Mapping[str, str]
) -> PropCrc | None:
    """The property CRC as ``forceVerifyPropCRC`` checks it: the ``__CRC32#`` property's digits
    against the CRC of the record minus its 20-byte tail; None without the property."""
    raw = properties.get(props.CRC32)
    if raw is None:
        return None
    return PropCrc(raw, decode_prop_crc_digits(raw), prop_crc_computed(buf, pos, store_size))


CRC_TAIL_PREFIX = (props.CRC32 + props.NAME_VALUE_SEPARATOR).encode()


def read_prop_crc(buf: bytes | memoryview, pos: int, store_size: int) -> PropCrc | None:
    """Return the property CRC of the record at ``pos`` when its last 20 bytes hold one."""
    if store_size < CRC32_RESERVED_LEN or pos + store_size > len(buf):
        return None
    tail = bytes(buf[pos + store_size - CRC32_RESERVED_LEN : pos + store_size])
    if not tail.startswith(CRC_TAIL_PREFIX) or tail[-1:] != b"\x02":
        return None
    raw = tail[len(CRC_TAIL_PREFIX) : -1].decode("ascii", "replace")
    computed = body_crc(buf[pos : pos + store_size - CRC32_RESERVED_LEN])
    return PropCrc(raw, decode_prop_crc_digits(raw), computed)
