"""Message identifiers: the broker's offsetMsgId and the client's UNIQ_KEY (spec section 4).

Both are upper-case hex of a big-endian byte layout. An IPv4 offsetMsgId and an IPv4 UNIQ_KEY
are both 32 characters long, so a bare string can only be interpreted, not classified; see
:func:`id_readings`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Literal

from rmqinspect.errors import DecodeError
from rmqinspect.format.host import HostAddress

if TYPE_CHECKING:
    from rmqinspect.format.commitlog import MessageRecord

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)

OFFSET_MSG_ID_V4_LEN = 32
OFFSET_MSG_ID_V6_LEN = 56
UNIQ_KEY_V4_LEN = 32
UNIQ_KEY_V6_LEN = 56

# The longest month (31 days): a UNIQ_KEY time offset beyond it cannot come from createUniqID.
MAX_MONTH_MS = 31 * 24 * 3600 * 1000


def _hex_bytes(text: str, what: str) -> bytes:
    """Hex text to bytes; the offset of a DecodeError is the character position."""
    if text.isascii() and text.isalnum():  # no whitespace, which fromhex would skip
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass  # a letter past f: found below, with its position
    for pos, ch in enumerate(text):
        if ch not in _HEX_DIGITS:
            raise DecodeError(f"{what}: non-hex character {ch!r}", pos)
    return bytes.fromhex(text)


# --- offsetMsgId ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetMsgId:
    """``MessageDecoder.decodeMessageId``: the store host and the record's PHYSICALOFFSET."""

    store_host: HostAddress
    physical_offset: int

    def encode(self) -> str:
        return encode_offset_msg_id(self.store_host, self.physical_offset)


def encode_offset_msg_id(store_host: HostAddress, physical_offset: int) -> str:
    """``MessageDecoder.createMessageId``: ip + i32 port + i64 offset, upper-case hex."""
    if len(store_host.ip) not in (4, 16):
        raise ValueError(f"store host address must be 4 or 16 bytes, got {len(store_host.ip)}")
    return (store_host.encode() + struct.pack(">q", physical_offset)).hex().upper()


def msg_id(record: MessageRecord) -> str:
    """The offsetMsgId as ``MessageDecoder.createMessageId`` builds it: store host + the record's
    own PHYSICALOFFSET field."""
    return encode_offset_msg_id(record.store_host, record.physical_offset_field)


def decode_offset_msg_id(text: str) -> OffsetMsgId:
    """Decode a 32 (IPv4) or 56 (IPv6) character offsetMsgId, in either case."""
    if len(text) not in (OFFSET_MSG_ID_V4_LEN, OFFSET_MSG_ID_V6_LEN):
        raise DecodeError(
            f"offsetMsgId must be {OFFSET_MSG_ID_V4_LEN} or {OFFSET_MSG_ID_V6_LEN} hex characters, "
            f"got {len(text)}",
            0,
        )
    raw = _hex_bytes(text, "offsetMsgId")
    ip_len = 4 if len(raw) == 16 else 16
    port, offset = struct.unpack_from(">iq", raw, ip_len)
    return OffsetMsgId(HostAddress(raw[:ip_len], port), offset)


# --- UNIQ_KEY ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UniqKey:
    """``MessageClientIDSetter.createUniqID`` fields (spec 4.2)."""

    ip: bytes  # 4 or 16 bytes: the producer's address (or a "fake IP" from its clock)
    pid: int  # u16: low 16 bits of the producer JVM's pid
    class_loader_hash: int  # i32
    time_offset_ms: int  # u32: ms since the start of the producer's month, producer time zone
    counter: int  # u16: per-JVM counter, wrapping

    @property
    def is_v6(self) -> bool:
        return len(self.ip) == 16

    @property
    def ip_text(self) -> str:
        return HostAddress(self.ip, 0).ip_text

    def encode(self) -> str:
        return encode_uniq_key(self)


def encode_uniq_key(uniq: UniqKey) -> str:
    """The 32 or 56 character upper-case hex string a producer puts in ``UNIQ_KEY``."""
    if len(uniq.ip) not in (4, 16):
        raise ValueError(f"UNIQ_KEY address must be 4 or 16 bytes, got {len(uniq.ip)}")
    if not 0 <= uniq.pid <= 0xFFFF or not 0 <= uniq.counter <= 0xFFFF:
        raise ValueError("UNIQ_KEY pid and counter are u16")
    if not -(2**31) <= uniq.class_loader_hash < 2**31:
        raise ValueError("UNIQ_KEY class loader hash is i32")
    if not 0 <= uniq.time_offset_ms <= 0xFFFFFFFF:
        raise ValueError("UNIQ_KEY time offset is u32")
    packed = struct.pack(
        ">HiIH", uniq.pid, uniq.class_loader_hash, uniq.time_offset_ms, uniq.counter
    )
    return (uniq.ip + packed).hex().upper()


def decode_uniq_key(text: str) -> UniqKey:
    """Decode a 32 (IPv4 prefix) or 56 (IPv6 prefix) character UNIQ_KEY, in either case."""
    if len(text) not in (UNIQ_KEY_V4_LEN, UNIQ_KEY_V6_LEN):
        raise DecodeError(
            f"UNIQ_KEY must be {UNIQ_KEY_V4_LEN} or {UNIQ_KEY_V6_LEN} hex characters, "
            f"got {len(text)}",
            0,
        )
    raw = _hex_bytes(text, "UNIQ_KEY")
    ip_len = 4 if len(raw) == 16 else 16
    pid, loader, time_offset, counter = struct.unpack_from(">HiIH", raw, ip_len)
    return UniqKey(raw[:ip_len], pid, loader, time_offset, counter)


def _to_datetime(ms: int, tz: tzinfo) -> datetime:
    try:
        return (_EPOCH + timedelta(milliseconds=ms)).astimezone(tz)
    except (OverflowError, ValueError) as exc:
        raise DecodeError(f"timestamp {ms} ms is outside the supported date range") from exc


def _to_ms(dt: datetime) -> int:
    return (dt - _EPOCH) // _ONE_MS


def _month_start(dt: datetime, months_back: int = 0) -> datetime:
    """Day 1, 00:00:00.000 local time, like ``Calendar.set(DAY_OF_MONTH, 1)`` and friends."""
    month_index = dt.year * 12 + (dt.month - 1) - months_back
    year, month0 = divmod(month_index, 12)
    try:
        return datetime(year, month0 + 1, 1, tzinfo=dt.tzinfo)
    except ValueError as exc:
        raise DecodeError(f"month start {year}-{month0 + 1} is outside the date range") from exc


def uniq_time_offset_ms(now_ms: int, tz: tzinfo) -> int:
    """The time field ``createUniqID`` writes at ``now_ms`` for a producer in ``tz``."""
    return now_ms - _to_ms(_month_start(_to_datetime(now_ms, tz)))


def producer_time_ms(uniq: UniqKey, reference_ms: int, tz: tzinfo) -> int:
    """When the producer created ``uniq``, judged against a reference time (offline rule, 4.2).

    The reference is normally the record's BORNTIMESTAMP. The id's offset is applied to the
    start of the reference's month in ``tz`` and of the months either side, and the reading
    nearest the reference wins (the earlier one on a tie). That is the spec's "previous month
    if it overshoots", made symmetric: ids can be stamped slightly *after* BORNTIMESTAMP (by up
    to 0.5 s in the real corpus), so "overshoot" cannot mean "later than the reference", and a
    reference just before midnight on the last day may belong to an id from the next month.
    Exact whenever the id was created within two weeks of the reference.
    """
    month = _month_start(_to_datetime(reference_ms, tz))
    readings = [_to_ms(_month_start(month, back)) + uniq.time_offset_ms for back in (1, 0, -1)]
    return min(readings, key=lambda ms: abs(ms - reference_ms))


def nearly_time_ms(uniq: UniqKey, now_ms: int, tz: tzinfo) -> int:
    """``MessageClientIDSetter.getNearlyTimeFromID`` evaluated at ``now_ms`` in ``tz``."""
    month = _month_start(_to_datetime(now_ms, tz))
    if _to_ms(month) + uniq.time_offset_ms >= now_ms:
        month = _month_start(month, 1)
    return _to_ms(month) + uniq.time_offset_ms


# --- interpretation of a bare id string ------------------------------------------------------

IdKind = Literal["offsetMsgId", "uniqKey"]


@dataclass(frozen=True, slots=True)
class IdReading:
    """One way to read an id string; ``warnings`` say what makes the reading implausible."""

    kind: IdKind
    value: OffsetMsgId | UniqKey
    warnings: tuple[str, ...] = ()

    @property
    def is_v6(self) -> bool:
        if isinstance(self.value, OffsetMsgId):
            return self.value.store_host.is_v6
        return self.value.is_v6


def _offset_msg_id_warnings(mid: OffsetMsgId) -> tuple[str, ...]:
    warnings = []
    if not 0 <= mid.store_host.port <= 0xFFFF:
        warnings.append(f"port {mid.store_host.port} is not a TCP port")
    if mid.physical_offset < 0:
        warnings.append(f"physical offset {mid.physical_offset} is negative")
    return tuple(warnings)


def _uniq_key_warnings(uniq: UniqKey) -> tuple[str, ...]:
    if uniq.time_offset_ms > MAX_MONTH_MS:
        return (f"time offset {uniq.time_offset_ms} ms is longer than a month",)
    return ()


def id_readings(text: str) -> list[IdReading]:
    """Every plausible interpretation of ``text``: 32 hex characters read as an IPv4
    offsetMsgId and as an IPv4 UNIQ_KEY, 56 as the IPv6 forms of both."""
    text = text.strip()
    if len(text) not in (OFFSET_MSG_ID_V4_LEN, OFFSET_MSG_ID_V6_LEN):
        raise DecodeError(
            f"a message id has {OFFSET_MSG_ID_V4_LEN} or {OFFSET_MSG_ID_V6_LEN} hex characters, "
            f"got {len(text)}",
            0,
        )
    mid = decode_offset_msg_id(text)
    uniq = decode_uniq_key(text)
    return [
        IdReading("offsetMsgId", mid, _offset_msg_id_warnings(mid)),
        IdReading("uniqKey", uniq, _uniq_key_warnings(uniq)),
    ]
