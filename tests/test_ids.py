"""offsetMsgId and UNIQ_KEY codecs, the UNIQ_KEY time rules, and every id in the real corpora."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqinspect.errors import DecodeError
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import (
    MAX_MONTH_MS,
    OffsetMsgId,
    UniqKey,
    decode_offset_msg_id,
    decode_uniq_key,
    encode_offset_msg_id,
    encode_uniq_key,
    id_readings,
    nearly_time_ms,
    producer_time_ms,
    uniq_time_offset_ms,
)

SHANGHAI = ZoneInfo("Asia/Shanghai")
BERLIN = ZoneInfo("Europe/Berlin")


def _ms(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, tz: Any = UTC
) -> int:
    return int(datetime(year, month, day, hour, minute, second, tzinfo=tz).timestamp() * 1000)


# --- offsetMsgId ------------------------------------------------------------------------------


def test_offset_msg_id_ipv4_vector() -> None:
    text = "0A01020300002A9F000000000000551E"  # from the 4.9.8 corpus
    mid = decode_offset_msg_id(text)
    assert mid == OffsetMsgId(HostAddress(bytes([10, 1, 2, 3]), 10911), 21790)
    assert str(mid.store_host) == "10.1.2.3:10911"
    assert mid.encode() == text
    assert decode_offset_msg_id(text.lower()) == mid


def test_offset_msg_id_ipv6_vector() -> None:
    text = "20010DB800000000000000000000001000002A9F0000000000004AF9"
    mid = decode_offset_msg_id(text)
    assert mid.store_host.is_v6
    assert str(mid.store_host) == "[2001:db8::10]:10911"
    assert mid.physical_offset == 0x4AF9
    assert encode_offset_msg_id(mid.store_host, mid.physical_offset) == text


def test_offset_msg_id_signed_fields() -> None:
    host = HostAddress(bytes(4), -1)
    text = encode_offset_msg_id(host, -2)
    assert text == "00000000" + "F" * 8 + "F" * 15 + "E"
    assert decode_offset_msg_id(text) == OffsetMsgId(host, -2)


@pytest.mark.parametrize("text", ["", "0A0102", "0A01020300002A9F000000000000551", "0" * 57])
def test_offset_msg_id_bad_length(text: str) -> None:
    with pytest.raises(DecodeError):
        decode_offset_msg_id(text)


def test_offset_msg_id_non_hex_reports_position() -> None:
    with pytest.raises(DecodeError) as err:
        decode_offset_msg_id("0A0102030000zA9F000000000000551E")
    assert err.value.offset == 12
    with pytest.raises(DecodeError):
        decode_offset_msg_id("0A01020300002A9F00000000000055 E")


def test_encode_offset_msg_id_rejects_bad_address() -> None:
    with pytest.raises(ValueError):
        encode_offset_msg_id(HostAddress(bytes(5), 1), 0)


@given(
    st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16)),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
)
def test_hypothesis_offset_msg_id_round_trip(ip: bytes, port: int, offset: int) -> None:
    text = encode_offset_msg_id(HostAddress(ip, port), offset)
    assert len(text) == (32 if len(ip) == 4 else 56)
    assert text == text.upper()
    assert decode_offset_msg_id(text) == OffsetMsgId(HostAddress(ip, port), offset)
    assert decode_offset_msg_id(text.lower()).encode() == text


# --- UNIQ_KEY ---------------------------------------------------------------------------------


def test_uniq_key_ipv4_vector() -> None:
    text = "C00002022F9B5FFD2B27683B60360000"
    uniq = decode_uniq_key(text)
    assert uniq == UniqKey(bytes([192, 0, 2, 2]), 0x2F9B, 0x5FFD2B27, 0x683B6036, 0)
    assert uniq.ip_text == "192.0.2.2" and not uniq.is_v6
    assert encode_uniq_key(uniq) == text == uniq.encode()


def test_uniq_key_ipv6_vector_and_unsigned_fields() -> None:
    text = "FD00000000000000000000000000000210922B276830683B60CE0001"
    uniq = decode_uniq_key(text.lower())
    assert uniq.is_v6 and uniq.ip_text == "fd00::2"
    assert (uniq.pid, uniq.class_loader_hash, uniq.counter) == (0x1092, 0x2B276830, 1)
    assert uniq.time_offset_ms == 0x683B60CE
    wrapped = decode_uniq_key("7F000001FFFF80000000FFFFFFFFFFFF")
    assert wrapped.pid == 0xFFFF and wrapped.counter == 0xFFFF
    assert wrapped.class_loader_hash == -(2**31)
    assert wrapped.time_offset_ms == 2**32 - 1


@pytest.mark.parametrize("text", ["C00002022F9B5FFD2B27683B603600", "X" * 32, "0" * 40])
def test_uniq_key_rejects(text: str) -> None:
    with pytest.raises(DecodeError):
        decode_uniq_key(text)


@pytest.mark.parametrize(
    "uniq",
    [
        UniqKey(bytes(3), 0, 0, 0, 0),
        UniqKey(bytes(4), 0x10000, 0, 0, 0),
        UniqKey(bytes(4), 0, 2**31, 0, 0),
        UniqKey(bytes(4), 0, 0, -1, 0),
        UniqKey(bytes(4), 0, 0, 0, -1),
    ],
)
def test_encode_uniq_key_rejects_out_of_range(uniq: UniqKey) -> None:
    with pytest.raises(ValueError):
        encode_uniq_key(uniq)


@given(
    st.builds(
        UniqKey,
        st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16)),
        st.integers(0, 0xFFFF),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(0, 2**32 - 1),
        st.integers(0, 0xFFFF),
    )
)
def test_hypothesis_uniq_key_round_trip(uniq: UniqKey) -> None:
    text = encode_uniq_key(uniq)
    assert len(text) == (56 if uniq.is_v6 else 32)
    assert decode_uniq_key(text) == uniq
    assert decode_uniq_key(text.lower()) == uniq


# --- UNIQ_KEY time ----------------------------------------------------------------------------


def _uniq(offset_ms: int) -> UniqKey:
    return UniqKey(bytes(4), 1, 2, offset_ms, 3)


def test_uniq_time_offset_is_ms_since_local_month_start() -> None:
    now = _ms(2026, 11, 21, 5, 45, 21)
    assert uniq_time_offset_ms(now, UTC) == now - _ms(2026, 11, 1)
    # 00:30 on the 1st in Shanghai is still the previous month in UTC.
    now = _ms(2026, 3, 1, 0, 30, tz=SHANGHAI)
    assert uniq_time_offset_ms(now, SHANGHAI) == 30 * 60 * 1000
    assert uniq_time_offset_ms(now, UTC) == now - _ms(2026, 2, 1)


def test_producer_time_same_month() -> None:
    created = _ms(2026, 11, 21, 5, 45, 21) + 123
    uniq = _uniq(uniq_time_offset_ms(created, UTC))
    assert producer_time_ms(uniq, created, UTC) == created
    assert producer_time_ms(uniq, created + 5_000, UTC) == created


def test_producer_time_reference_slightly_before_id() -> None:
    # The corpus harness stamped ids up to 0.5 s after BORNTIMESTAMP.
    created = _ms(2026, 11, 21, 5, 45, 21)
    uniq = _uniq(uniq_time_offset_ms(created, UTC))
    assert producer_time_ms(uniq, created - 499, UTC) == created
    # Java's rule reads "not in the past" as "previous month".
    assert nearly_time_ms(uniq, created - 499, UTC) == created - (31 * 86_400_000)


def test_producer_time_across_month_boundary() -> None:
    created = _ms(2026, 10, 31, 23, 59, 59) + 900  # last second of October
    uniq = _uniq(uniq_time_offset_ms(created, UTC))
    born = _ms(2026, 11, 1, 0, 0, 1)  # born (reference) already in November
    assert producer_time_ms(uniq, born, UTC) == created
    # February 28 days: the previous month reading must use February's own start.
    created = _ms(2026, 2, 28, 23, 59, 58)
    uniq = _uniq(uniq_time_offset_ms(created, UTC))
    assert producer_time_ms(uniq, _ms(2026, 3, 1, 0, 0, 3), UTC) == created
    # Id stamped just after midnight, BORNTIMESTAMP just before: the next month's reading.
    created = _ms(2026, 12, 1, 0, 0, 0) + 200
    uniq = _uniq(uniq_time_offset_ms(created, UTC))
    assert producer_time_ms(uniq, created - 300, UTC) == created


def test_producer_time_depends_on_time_zone() -> None:
    created = _ms(2026, 3, 1, 0, 30, tz=SHANGHAI)
    uniq = _uniq(uniq_time_offset_ms(created, SHANGHAI))
    assert producer_time_ms(uniq, created + 10, SHANGHAI) == created
    # Read with the wrong zone the month start moves by 8 h and so does the answer.
    assert producer_time_ms(uniq, created + 10, UTC) != created


def test_producer_time_dst_month() -> None:
    created = _ms(2026, 4, 15, 12, 0, tz=BERLIN)  # CEST; the month started in CEST too
    uniq = _uniq(uniq_time_offset_ms(created, BERLIN))
    assert producer_time_ms(uniq, created, BERLIN) == created
    assert uniq.time_offset_ms == created - _ms(2026, 4, 1, tz=BERLIN)


def test_nearly_time_java_rule() -> None:
    now = _ms(2026, 11, 21, 6, 0, 0)
    month = _ms(2026, 11, 1)
    assert nearly_time_ms(_uniq(1000), now, UTC) == month + 1000
    # month start + span >= now: previous month (October has 31 days).
    assert nearly_time_ms(_uniq(now - month), now, UTC) == _ms(2026, 10, 1) + (now - month)
    assert nearly_time_ms(_uniq(now - month - 1), now, UTC) == now - 1


def test_time_out_of_range() -> None:
    with pytest.raises(DecodeError):
        producer_time_ms(_uniq(0), 2**62, UTC)
    with pytest.raises(DecodeError):
        nearly_time_ms(_uniq(0), -(2**62), UTC)


@given(
    st.integers(_ms(1990, 1, 1), _ms(2090, 1, 1)),
    st.integers(-499, 60_000),
    st.sampled_from([UTC, SHANGHAI, BERLIN, ZoneInfo("America/Sao_Paulo")]),
)
def test_hypothesis_producer_time_inverts_creation(created: int, lag: int, tz: Any) -> None:
    uniq = _uniq(uniq_time_offset_ms(created, tz))
    assert 0 <= uniq.time_offset_ms <= MAX_MONTH_MS
    assert producer_time_ms(uniq, created + lag, tz) == created


# --- readings of a bare string ----------------------------------------------------------------


def test_id_readings_32() -> None:
    readings = id_readings(" 0A01020300002A9F000000000000551E\n")
    assert [r.kind for r in readings] == ["offsetMsgId", "uniqKey"]
    assert not any(r.is_v6 for r in readings)
    mid, uniq = readings[0].value, readings[1].value
    assert isinstance(mid, OffsetMsgId) and mid.physical_offset == 21790
    assert isinstance(uniq, UniqKey) and uniq.ip_text == "10.1.2.3"
    assert readings[0].warnings == ()
    # As a UNIQ_KEY, the time field (0x00000000) is fine; the offset reading has no warnings.
    assert readings[1].warnings == ()


def test_id_readings_56_and_warnings() -> None:
    readings = id_readings("FD00000000000000000000000000000210922B276830683B60CE0001")
    assert [r.kind for r in readings] == ["offsetMsgId", "uniqKey"]
    assert all(r.is_v6 for r in readings)
    # As an offsetMsgId the "port" is 0x10922B27, which no TCP port can be.
    assert any("port" in w for w in readings[0].warnings)
    assert readings[1].warnings == ()
    uniq_like = id_readings("C00002022F9B5FFDFFFFFFFF60360000")
    assert any("month" in w for w in uniq_like[1].warnings)
    negative = id_readings("0A01020300002A9F800000000000551E")
    assert any("negative" in w for w in negative[0].warnings)


@pytest.mark.parametrize("text", ["", "abc", "0" * 31, "G" * 32, "0" * 64])
def test_id_readings_rejects(text: str) -> None:
    with pytest.raises(DecodeError):
        id_readings(text)


# --- the real corpora -------------------------------------------------------------------------


def _messages(root: Path) -> Iterator[dict[str, Any]]:
    for path in sorted((root / "expected").glob("*.messages.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                message = json.loads(line)
                if message.get("retrievable"):
                    yield message


def _check_corpus(root: Path) -> tuple[int, int]:
    msg_ids = uniq_keys = 0
    for message in _messages(root):
        mid = decode_offset_msg_id(message["msgId"])
        host = message["storeHost"]
        assert mid.store_host.ip.hex() == host["addrHex"]
        assert mid.store_host.port == host["port"]
        assert mid.store_host.is_v6 == host["v6"]
        assert mid.physical_offset == message["commitLogOffset"]
        assert mid.encode() == message["msgId"]
        msg_ids += 1
        origin = message["properties"].get("ORIGIN_MESSAGE_ID")
        if origin:
            assert decode_offset_msg_id(origin).encode() == origin
        text = message.get("uniqKey")
        if not text:
            continue
        uniq = decode_uniq_key(text)
        assert encode_uniq_key(uniq) == text
        assert uniq.is_v6 == (len(text) == 56)
        born = message["bornTimestamp"]
        # The harness ran in UTC and stamped the id within 0.5 s of BORNTIMESTAMP.
        assert abs(producer_time_ms(uniq, born, UTC) - born) < 1000
        kinds = [r.kind for r in id_readings(text)]
        assert kinds == ["offsetMsgId", "uniqKey"]
        uniq_keys += 1
    return msg_ids, uniq_keys


def test_conformance_ids_498(conformance_dir: Path) -> None:
    msg_ids, uniq_keys = _check_corpus(conformance_dir)
    assert (msg_ids, uniq_keys) == (9404, 8420)


def test_conformance_ids_533(conformance5_dir: Path) -> None:
    msg_ids, uniq_keys = _check_corpus(conformance5_dir)
    assert (msg_ids, uniq_keys) == (7855, 7075)
