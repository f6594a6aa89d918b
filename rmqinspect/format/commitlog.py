"""CommitLog records: decoding and the broker's own validity check.

Layout and rules: rocketmq-store-format.md §2 (record), §3 (CRCs), §10.3 (the check).
Two entry points read records:

* :func:`check_message` reproduces ``CommitLog.checkMessageAndReturnSize`` verdict for verdict,
  including the order in which it notices problems; recovery and dispatch emulation use it.
* :func:`decode_message` is lenient about checksums (it reports them) and strict about structure;
  the inspection commands use it.

The record's layout and sysFlag names (:mod:`rmqinspect.format.record_layout`) and the decoded
record with its property CRC (:mod:`rmqinspect.format.message_record`) have their own modules;
this one re-exports their names, so every reader takes them from here.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from rmqinspect.errors import DecodeError
from rmqinspect.format import properties as props
from rmqinspect.format.host import HostAddress
from rmqinspect.format.javahash import java_hash
from rmqinspect.format.javamath import java_parse_int, java_split, wrap64
from rmqinspect.format.message_record import CRC_TAIL_PREFIX as CRC_TAIL_PREFIX
from rmqinspect.format.message_record import MessageRecord as MessageRecord
from rmqinspect.format.message_record import PropCrc as PropCrc
from rmqinspect.format.message_record import decode_prop_crc_digits as decode_prop_crc_digits
from rmqinspect.format.message_record import prop_crc_computed as prop_crc_computed
from rmqinspect.format.message_record import read_prop_crc as read_prop_crc
from rmqinspect.format.message_record import record_prop_crc as record_prop_crc
from rmqinspect.format.profile import Profile
from rmqinspect.format.record_layout import BLANK_MAGIC_CODE as BLANK_MAGIC_CODE
from rmqinspect.format.record_layout import BODY_REL as BODY_REL
from rmqinspect.format.record_layout import BODYCRC_POS as BODYCRC_POS
from rmqinspect.format.record_layout import BODYLENGTH_REL as BODYLENGTH_REL
from rmqinspect.format.record_layout import BORNHOST_POS as BORNHOST_POS
from rmqinspect.format.record_layout import BORNHOST_V6_FLAG as BORNHOST_V6_FLAG
from rmqinspect.format.record_layout import BORNTIMESTAMP_POS as BORNTIMESTAMP_POS
from rmqinspect.format.record_layout import COMPRESSED_FLAG as COMPRESSED_FLAG
from rmqinspect.format.record_layout import COMPRESSION_TYPE_MASK as COMPRESSION_TYPE_MASK
from rmqinspect.format.record_layout import CRC32_RESERVED_LEN as CRC32_RESERVED_LEN
from rmqinspect.format.record_layout import (
    DEFAULT_COMMITLOG_FILE_SIZE as DEFAULT_COMMITLOG_FILE_SIZE,
)
from rmqinspect.format.record_layout import END_FILE_MIN_BLANK_LENGTH as END_FILE_MIN_BLANK_LENGTH
from rmqinspect.format.record_layout import FIXED_FIELDS as FIXED_FIELDS
from rmqinspect.format.record_layout import FIXED_HEAD as FIXED_HEAD
from rmqinspect.format.record_layout import FIXED_POS as FIXED_POS
from rmqinspect.format.record_layout import FLAG_POS as FLAG_POS
from rmqinspect.format.record_layout import INNER_BATCH_FLAG as INNER_BATCH_FLAG
from rmqinspect.format.record_layout import IPV4_HOST_SIZE as IPV4_HOST_SIZE
from rmqinspect.format.record_layout import IPV6_HOST_SIZE as IPV6_HOST_SIZE
from rmqinspect.format.record_layout import MAGIC_POS as MAGIC_POS
from rmqinspect.format.record_layout import MESSAGE_MAGIC_CODE as MESSAGE_MAGIC_CODE
from rmqinspect.format.record_layout import MESSAGE_MAGIC_CODE_V2 as MESSAGE_MAGIC_CODE_V2
from rmqinspect.format.record_layout import MID_FIELDS as MID_FIELDS
from rmqinspect.format.record_layout import MID_FIELDS_STRUCT as MID_FIELDS_STRUCT
from rmqinspect.format.record_layout import MID_POS as MID_POS
from rmqinspect.format.record_layout import MIN_RECORD_SIZE as MIN_RECORD_SIZE
from rmqinspect.format.record_layout import MULTI_TAGS_FLAG as MULTI_TAGS_FLAG
from rmqinspect.format.record_layout import NEED_UNWRAP_FLAG as NEED_UNWRAP_FLAG
from rmqinspect.format.record_layout import PHYSICALOFFSET_POS as PHYSICALOFFSET_POS
from rmqinspect.format.record_layout import PREPARED_REL as PREPARED_REL
from rmqinspect.format.record_layout import QUEUEID_POS as QUEUEID_POS
from rmqinspect.format.record_layout import QUEUEOFFSET_POS as QUEUEOFFSET_POS
from rmqinspect.format.record_layout import RECONSUMETIMES_REL as RECONSUMETIMES_REL
from rmqinspect.format.record_layout import STOREHOSTADDRESS_V6_FLAG as STOREHOSTADDRESS_V6_FLAG
from rmqinspect.format.record_layout import STORETIMESTAMP_SIZE as STORETIMESTAMP_SIZE
from rmqinspect.format.record_layout import SYSFLAG_POS as SYSFLAG_POS
from rmqinspect.format.record_layout import TOTALSIZE_POS as TOTALSIZE_POS
from rmqinspect.format.record_layout import TRANSACTION_COMMIT_TYPE as TRANSACTION_COMMIT_TYPE
from rmqinspect.format.record_layout import TRANSACTION_NOT_TYPE as TRANSACTION_NOT_TYPE
from rmqinspect.format.record_layout import TRANSACTION_PREPARED_TYPE as TRANSACTION_PREPARED_TYPE
from rmqinspect.format.record_layout import TRANSACTION_ROLLBACK_TYPE as TRANSACTION_ROLLBACK_TYPE
from rmqinspect.format.record_layout import TRANSACTION_TYPE_MASK as TRANSACTION_TYPE_MASK
from rmqinspect.format.record_layout import TRANSACTION_TYPES as TRANSACTION_TYPES
from rmqinspect.format.record_layout import body_crc as body_crc
from rmqinspect.format.record_layout import born_host_size as born_host_size
from rmqinspect.format.record_layout import calc_msg_length as calc_msg_length
from rmqinspect.format.record_layout import compression_name as compression_name
from rmqinspect.format.record_layout import magic_name as magic_name
from rmqinspect.format.record_layout import mid_fields_pos as mid_fields_pos
from rmqinspect.format.record_layout import store_host_size as store_host_size
from rmqinspect.format.record_layout import store_timestamp_pos as store_timestamp_pos
from rmqinspect.format.record_layout import topic_length_size as topic_length_size
from rmqinspect.format.record_layout import transaction_name as transaction_name

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PORT = struct.Struct(">i")


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
