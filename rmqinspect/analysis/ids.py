"""``decode-id``: what a message id string says, under every reading that fits its length.

A 32-hex string is both a valid IPv4 offsetMsgId and a valid IPv4 UNIQ_KEY (56 likewise for
IPv6); only context tells them apart, so both readings are returned with what makes either one
implausible. A UNIQ_KEY stores time since the start of the producer's month, so the producer
time needs a reference instant (the message's born time if known; otherwise now) and a zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import tzinfo

from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format.ids import (
    OffsetMsgId,
    UniqKey,
    id_readings,
    nearly_time_ms,
    producer_time_ms,
)


@dataclass(frozen=True, slots=True)
class OffsetMsgIdReading:
    store_host: str
    store_ip: str
    store_port: int
    physical_offset: int
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UniqKeyReading:
    ip: str
    pid: int
    class_loader_hash: int
    time_offset_ms: int
    counter: int
    producer_timestamp: int | None
    time_basis: str  # how producer_timestamp was derived
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IdDecoding:
    text: str
    ambiguous: bool
    offset_msg_id: OffsetMsgIdReading | None
    uniq_key: UniqKeyReading | None


def decode_id(text: str, reference_ms: int | None, now_ms: int, tz: tzinfo) -> IdDecoding:
    """Both readings of ``text``; ``reference_ms`` (e.g. the born time) dates the UNIQ_KEY."""
    try:
        readings = id_readings(text)
    except DecodeError as err:
        raise StoreError(f"cannot decode {text.strip()!r}: {err.message}") from None
    mid: OffsetMsgIdReading | None = None
    uniq: UniqKeyReading | None = None
    for r in readings:
        if isinstance(r.value, OffsetMsgId):
            host = r.value.store_host
            mid = OffsetMsgIdReading(
                str(host), host.ip_text, host.port, r.value.physical_offset, r.warnings
            )
        elif isinstance(r.value, UniqKey):
            uniq = _uniq_reading(r.value, r.warnings, reference_ms, now_ms, tz)
    return IdDecoding(text.strip().upper(), mid is not None and uniq is not None, mid, uniq)


def _uniq_reading(
    u: UniqKey, warnings: tuple[str, ...], reference_ms: int | None, now_ms: int, tz: tzinfo
) -> UniqKeyReading:
    try:
        if reference_ms is not None:
            when: int | None = producer_time_ms(u, reference_ms, tz)
            basis = f"month of the reference time {reference_ms}, zone {tz}"
        else:
            when = nearly_time_ms(u, now_ms, tz)
            basis = f"getNearlyTimeFromID at now, zone {tz} (give --reference for old ids)"
    except DecodeError as err:
        when, basis = None, err.message
    return UniqKeyReading(
        u.ip_text, u.pid, u.class_loader_hash, u.time_offset_ms, u.counter, when, basis, warnings
    )
