"""Encoding commitlog records as the broker's append path writes them (the writer's side of
:mod:`rmqinspect.format.commitlog`): the delay-level rewrite, record bytes, the 5.2+ property CRC
tail, BLANK records, and the structured record head bulk encoders fill."""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping, Sequence

import numpy as np

from rmqinspect.format import properties as props
from rmqinspect.format import timer
from rmqinspect.format.commitlog import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    CRC32_RESERVED_LEN,
    CRC_TAIL_PREFIX,
    FIXED_FIELDS,
    FIXED_HEAD,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MID_FIELDS,
    MID_FIELDS_STRUCT,
    SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    STORETIMESTAMP_SIZE,
    body_crc,
    born_host_size,
    calc_msg_length,
    store_host_size,
)
from rmqinspect.format.host import HostAddress
from rmqinspect.format.javamath import java_parse_int
from rmqinspect.format.trace_data import CONTENT_SPLITOR, FIELD_ORDER, FIELD_SPLITOR, TraceRecord

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_SEPARATOR = props.PROPERTY_SEPARATOR.encode()


@functools.cache
def record_head_dtype(sys_flag: int) -> np.dtype[np.void]:
    """The record from TOTALSIZE to BODYLENGTH as a numpy structured type (fields named as in
    FIXED_FIELDS and MID_FIELDS, hosts as raw bytes), for the host sizes ``sys_flag`` selects:
    bulk encoders fill one array of it per host layout."""
    head = [(n, ">" + c) for n, c in zip(FIXED_FIELDS, FIXED_HEAD.format[1:], strict=True)]
    mid = [(n, ">" + c) for n, c in zip(MID_FIELDS, MID_FIELDS_STRUCT.format[1:], strict=True)]
    hosts = [
        ("born_host", f"V{born_host_size(sys_flag)}"),
        ("store_timestamp", f">i{STORETIMESTAMP_SIZE}"),
        ("store_host", f"V{store_host_size(sys_flag)}"),
    ]
    return np.dtype(head + hosts + mid)


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


def encode_prop_crc_digits(crc: int) -> str:
    """Ten decimal digits, least significant first, as ``MessageDecoder.createCrc32`` writes."""
    return str(crc)[::-1].ljust(10, "0")


def reserve_prop_crc(properties: bytes) -> bytes:
    """``properties`` with room for the CRC tail (§3.2): a 0x02 unless they end with one, then
    ``__CRC32#`` 0x01, ten placeholder digits and 0x02 (CRC32_RESERVED_LEN bytes)."""
    if properties and not properties.endswith(_SEPARATOR):
        properties += _SEPARATOR
    return properties + CRC_TAIL_PREFIX + b"0" * 10 + _SEPARATOR


def fill_prop_crc(buf: bytearray | memoryview, pos: int, store_size: int) -> None:
    """Write the digits of the tail :func:`reserve_prop_crc` left in the record at ``pos``: the
    masked CRC32 of the record minus its tail, least significant digit first."""
    end = pos + store_size
    digits = encode_prop_crc_digits(body_crc(buf[pos : end - CRC32_RESERVED_LEN]))
    buf[end - 11 : end - 1] = digits.encode("ascii")


def encode_message(
    *,
    topic: str,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: HostAddress,
    store_timestamp: int,
    store_host: HostAddress,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    properties: bytes,
    version: int = 1,
    append_prop_crc: bool = False,
) -> bytes:
    """Encode one record as the broker's append callback lays it out.

    The IPv6 sysFlag bits are set from the host types (the broker derives them the same way).
    With ``append_prop_crc`` (5.2+ ``enabledAppendPropCRC``) the 20-byte CRC tail is reserved at
    the end of the properties and filled in over the finished record.
    """
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    if born_host.is_v6:
        sys_flag |= BORNHOST_V6_FLAG
    if store_host.is_v6:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    topic_bytes = topic.encode("utf-8")
    props_bytes = reserve_prop_crc(properties) if append_prop_crc else properties
    if version == 1 and len(topic_bytes) > 127:
        raise ValueError(f"topic of {len(topic_bytes)} bytes needs a V2 record")
    if len(props_bytes) > 32767:
        raise ValueError(f"properties of {len(props_bytes)} bytes exceed 32767")
    total = calc_msg_length(sys_flag, len(body), len(topic_bytes), len(props_bytes), version)
    magic = MESSAGE_MAGIC_CODE_V2 if version == 2 else MESSAGE_MAGIC_CODE
    out = bytearray(total)
    FIXED_HEAD.pack_into(
        out,
        0,
        total,
        magic,
        body_crc(body),
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
    )
    at = FIXED_HEAD.size
    for part in (born_host.encode(), _I64.pack(store_timestamp), store_host.encode()):
        out[at : at + len(part)] = part
        at += len(part)
    MID_FIELDS_STRUCT.pack_into(out, at, reconsume_times, prepared_transaction_offset, len(body))
    at += MID_FIELDS_STRUCT.size
    out[at : at + len(body)] = body
    at += len(body)
    if version == 2:
        _I16.pack_into(out, at, len(topic_bytes))
        at += 2
    else:
        _I8.pack_into(out, at, len(topic_bytes))
        at += 1
    out[at : at + len(topic_bytes)] = topic_bytes
    at += len(topic_bytes)
    _I16.pack_into(out, at, len(props_bytes))
    at += 2
    out[at : at + len(props_bytes)] = props_bytes
    if append_prop_crc:
        fill_prop_crc(out, 0, total)
    return bytes(out)


def encode_blank(remaining: int) -> bytes:
    """The 8 bytes a full file ends with: TOTALSIZE = all remaining space, then the BLANK magic."""
    return struct.pack(">ii", remaining, BLANK_MAGIC_CODE)


def _trace_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # Java's String.valueOf(boolean)
    return "null" if value is None else str(value)  # StringBuilder.append(null)


def encode_trace_data(records: list[TraceRecord]) -> bytes:
    """``encoderFromContextBean`` for each record (the 4.9.8 field lists), concatenated as
    ``AsyncTraceDispatcher`` packs them. Values must not contain the separators."""
    out = []
    for r in records:
        values = [
            r.trace_type,
            *(_trace_text(getattr(r, name)) for name in FIELD_ORDER[r.trace_type]),
        ]
        if any(CONTENT_SPLITOR in v or FIELD_SPLITOR in v for v in values):
            raise ValueError("trace fields cannot contain 0x01 or 0x02")
        out.append(CONTENT_SPLITOR.join(values) + FIELD_SPLITOR)
    return "".join(out).encode("utf-8")


def encode_timer_units(units: Sequence[Mapping[str, int]]) -> bytes:
    """Timerlog units as ``TimerMessageStore.doEnqueue`` writes them (fields named as in
    :data:`~rmqinspect.format.timer.UNIT_DTYPE`; size 52 and reserved 0 unless given)."""
    out = np.zeros(len(units), timer.UNIT_DTYPE)
    out["size"] = timer.UNIT_SIZE
    for i, unit in enumerate(units):
        for name, value in unit.items():
            out[name][i] = value
    return out.tobytes()


def encode_timer_blank(remaining: int) -> bytes:
    """``TimerLog.append``'s end-of-file record: the remaining size, a 0 long, the blank magic."""
    return struct.pack(">iqi", remaining, 0, timer.BLANK_MAGIC_CODE)


def encode_timer_slot(
    time_ms: int,
    first_pos: int,
    last_pos: int,
    num: int,
    magic: int = 0,
    precision_ms: int = timer.DEFAULT_PRECISION_MS,
) -> bytes:
    """One wheel slot as ``TimerWheel.putSlot`` writes it (the time stored over the precision)."""
    return struct.pack(">qqqii", time_ms // precision_ms, first_pos, last_pos, num, magic)


def encode_timercheck(cp: timer.TimerCheckpoint) -> bytes:
    """``TimerCheckpoint.encode``: seven longs (56 bytes)."""
    return struct.pack(
        ">7q",
        cp.last_read_time_ms,
        cp.last_timer_log_flush_pos,
        cp.last_timer_queue_offset,
        cp.master_timer_queue_offset,
        cp.state_version,
        cp.timestamp,
        cp.counter,
    )
