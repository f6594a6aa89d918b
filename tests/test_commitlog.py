"""The CommitLog record codec: vectors from the spec and the broker's edge cases."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rmqinspect.errors import DecodeError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import encode
from rmqinspect.format.host import HostAddress
from rmqinspect.format.javamath import java_parse_int
from rmqinspect.format.profile import Profile
from rmqinspect.format.properties import encode_properties, parse_properties

V4 = HostAddress(bytes([10, 1, 2, 3]), 10911)
V6 = HostAddress(bytes.fromhex("20010db8000000000000000000000010"), 10911)


def record(**overrides: object) -> bytes:
    fields: dict[str, object] = dict(
        topic="TopicA",
        queue_id=1,
        flag=0,
        queue_offset=7,
        physical_offset=0,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        born_host=V4,
        store_timestamp=1_700_000_000_123,
        store_host=V4,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=b"Hello RocketMQ",
        properties=encode_properties([("TAGS", "TagA"), ("KEYS", "k1 k2")], False).encode(),
    )
    fields.update(overrides)
    return encode.encode_message(**fields)  # type: ignore[arg-type]


def test_crc_vectors_from_spec() -> None:
    assert cl.body_crc(b"Hello RocketMQ") == 1774740973
    assert cl.body_crc(b"a") == 0x68B7BE43
    assert cl.body_crc(b"") == 0


def test_minimum_record_length() -> None:
    assert cl.calc_msg_length(0, 0, 0, 0) == 91
    assert cl.calc_msg_length(0x30, 0, 0, 0) == 91 + 24
    assert cl.calc_msg_length(0, 0, 0, 0, version=2) == 92
    assert cl.calc_msg_length(0, -5, 0, -1) == 91


def test_encode_then_check_and_decode() -> None:
    data = record()
    result = cl.check_message(data + bytes(16), 0)
    assert result.is_message and result.size == len(data) and result.reason is cl.CheckReason.OK
    assert result.tags_code == 2598919  # javaHash("TagA")
    rec = cl.decode_message(data, 0)
    assert (rec.topic, rec.queue_id, rec.queue_offset) == ("TopicA", 1, 7)
    assert rec.keys == ["k1", "k2"] and rec.tags == "TagA" and rec.body == b"Hello RocketMQ"
    assert rec.body_crc_ok and rec.version == "v1"
    assert rec.index_keys() == ["k1", "k2"]


def test_ipv6_hosts_set_sys_flag_and_shift_fields() -> None:
    data = record(born_host=V6, store_host=V6)
    rec = cl.decode_message(data, 0)
    assert rec.sys_flag & 0x30 == 0x30
    assert rec.born_host == V6 and rec.store_host == V6
    assert str(rec.store_host) == "[2001:db8::10]:10911"
    # STORETIMESTAMP sits at 48 + 20 with an IPv6 born host (the abnormal-recovery probe reads it)
    assert struct.unpack_from(">q", data, 68)[0] == rec.store_timestamp


@pytest.mark.parametrize("hosts", [0x00, 0x10, 0x20, 0x30])
def test_record_head_dtype_reads_the_encoded_record(hosts: int) -> None:
    data = record(
        born_host=V6 if hosts & 0x10 else V4,
        store_host=V6 if hosts & 0x20 else V4,
        properties=b"",
    )
    rec = cl.decode_message(data, 0)
    dtype = encode.record_head_dtype(rec.sys_flag)
    assert dtype.itemsize == cl.mid_fields_pos(rec.sys_flag) + cl.BODY_REL
    assert dtype.fields is not None
    assert dtype.fields["store_timestamp"][1] == cl.store_timestamp_pos(rec.sys_flag)
    head = np.frombuffer(data, dtype, 1)[0]
    for name in (*cl.FIXED_FIELDS[1:], *cl.MID_FIELDS, "store_timestamp"):
        assert int(head[name]) == getattr(rec, name), name
    assert int(head["store_size"]) == rec.store_size == len(data)
    assert bytes(head["born_host"]) == rec.born_host.encode()
    assert bytes(head["store_host"]) == rec.store_host.encode()


def test_v2_record_has_two_byte_topic_length() -> None:
    topic = "T" * 200
    data = record(topic=topic, version=2)
    assert struct.unpack_from(">i", data, 4)[0] == cl.MESSAGE_MAGIC_CODE_V2
    assert cl.decode_message(data, 0).topic == topic
    assert cl.check_message(data, 0, options=cl.CheckOptions(profile=Profile.V5_3)).is_message
    # 4.9 does not know the V2 magic at all.
    r = cl.check_message(data, 0, options=cl.CheckOptions(profile=Profile.V4_9))
    assert r.reason is cl.CheckReason.BAD_MAGIC and r.size == -1
    with pytest.raises(ValueError, match="V2"):
        record(topic=topic, version=1)


def test_blank_and_zeroes() -> None:
    blank = encode.encode_blank(100)
    r = cl.check_message(blank + bytes(92), 0)
    assert (r.size, r.success, r.reason) == (0, True, cl.CheckReason.BLANK)
    r = cl.check_message(bytes(64), 0)
    assert (r.size, r.success, r.reason) == (-1, False, cl.CheckReason.BAD_MAGIC)
    with pytest.raises(DecodeError, match="BLANK"):
        cl.decode_message(blank, 0)


def test_body_crc_mismatch_is_failure_only_when_checked() -> None:
    data = bytearray(record())
    body_at = 88  # IPv4/IPv4 BODY position
    data[body_at] ^= 0xFF
    r = cl.check_message(bytes(data), 0)
    assert (r.size, r.reason) == (-1, cl.CheckReason.BODY_CRC_MISMATCH)
    assert cl.check_message(bytes(data), 0, options=cl.CheckOptions(check_crc=False)).is_message
    # The reput reads without the body, so it never sees the CRC.
    assert cl.check_message(bytes(data), 0, options=cl.CheckOptions(read_body=False)).is_message
    assert cl.decode_message(bytes(data), 0).body_crc_ok is False


def test_total_size_mismatch_returns_total_size() -> None:
    data = bytearray(record())
    struct.pack_into(">i", data, 0, len(data) + 4)
    r = cl.check_message(bytes(data) + bytes(64), 0)
    assert (r.size, r.success, r.reason) == (
        len(data) + 4,
        False,
        cl.CheckReason.TOTAL_SIZE_MISMATCH,
    )


def test_record_running_past_file_end() -> None:
    data = record()
    r = cl.check_message(data[:-5], 0)
    assert (r.size, r.reason) == (-1, cl.CheckReason.PARSE_EXCEPTION)
    # 5.3.2+ notices it from TOTALSIZE before reading anything else.
    r = cl.check_message(data[:-5], 0, options=cl.CheckOptions(profile=Profile.V5_3))
    assert r.reason is cl.CheckReason.OUT_OF_BOUNDS
    with pytest.raises(DecodeError):
        cl.decode_message(data[:-5], 0)


@pytest.mark.parametrize("store_size", [-1, 0, 10, 2**31 - 1])
def test_hostile_total_size_never_raises(store_size: int) -> None:
    data = bytearray(record())
    struct.pack_into(">i", data, 0, store_size)
    for profile in Profile:
        r = cl.check_message(bytes(data), 0, options=cl.CheckOptions(profile=profile))
        assert not r.success
    with pytest.raises(DecodeError):
        cl.decode_message(bytes(data), 0)


def test_hostile_lengths_inside_record() -> None:
    data = bytearray(record())
    struct.pack_into(">i", data, 84, 10_000_000)  # BODYLENGTH far beyond the record
    r = cl.check_message(bytes(data), 0)
    assert r.reason is cl.CheckReason.PARSE_EXCEPTION
    data = bytearray(record())
    topic_len_at = 88 + len(b"Hello RocketMQ")
    data[topic_len_at] = 0x80  # i8 -128: Java throws on a negative length
    assert cl.check_message(bytes(data), 0).reason is cl.CheckReason.PARSE_EXCEPTION


def test_schedule_topic_tags_code_is_delivery_time() -> None:
    props = encode_properties([("TAGS", "TagA"), ("DELAY", "3")], False).encode()
    data = record(topic=cl.SCHEDULE_TOPIC, properties=props)
    r = cl.check_message(data, 0)
    assert r.tags_code == 1_700_000_000_123 + 10_000
    # Levels above the maximum are clamped to it.
    props = encode_properties([("DELAY", "99")], False).encode()
    r = cl.check_message(record(topic=cl.SCHEDULE_TOPIC, properties=props), 0)
    assert r.tags_code == 1_700_000_000_123 + 7_200_000
    # Without a delay table (4.9.8 during load) the tag hash stays.
    r = cl.check_message(data, 0, options=cl.CheckOptions(delay_levels=()))
    assert r.tags_code == 2598919
    bad = encode_properties([("DELAY", "x1")], False).encode()
    r = cl.check_message(record(topic=cl.SCHEDULE_TOPIC, properties=bad), 0)
    assert (r.size, r.reason) == (-1, cl.CheckReason.PARSE_EXCEPTION)


def test_property_crc_tail() -> None:
    props = encode_properties([("TAGS", "TagA")], True).encode()
    data = record(properties=props, append_prop_crc=True)
    tail = cl.read_prop_crc(data, 0, len(data))
    assert tail is not None and tail.match
    assert data.endswith(b"\x02") and b"__CRC32#\x01" in data
    opts = cl.CheckOptions(profile=Profile.V5_3, force_verify_prop_crc=True)
    assert cl.check_message(data, 0, options=opts).is_message
    corrupted = bytearray(data)
    corrupted[20] ^= 1  # QUEUEOFFSET is covered by the property CRC, not by the body CRC
    assert cl.check_message(bytes(corrupted), 0).is_message
    r = cl.check_message(bytes(corrupted), 0, options=opts)
    assert r.reason is cl.CheckReason.PROP_CRC_MISMATCH
    r = cl.check_message(record(), 0, options=opts)
    assert r.reason is cl.CheckReason.PROP_CRC_MISSING


def test_a_decoded_record_carries_its_property_crc() -> None:
    props = encode_properties([("TAGS", "TagA")], True).encode()
    data = record(properties=props, append_prop_crc=True)
    tail = cl.read_prop_crc(data, 0, len(data))
    assert tail is not None
    rec = cl.decode_message(data, 0)
    assert rec.prop_crc == cl.PropCrc(tail.raw, tail.stored, tail.computed)
    assert rec.prop_crc.match and rec.prop_crc.stored == cl.body_crc(data[:-20])
    corrupted = bytearray(data)
    corrupted[20] ^= 1
    bad = cl.decode_message(bytes(corrupted), 0).prop_crc
    assert bad is not None and (bad.stored, bad.match) == (tail.stored, False)
    assert cl.decode_message(record(), 0).prop_crc is None  # no __CRC32# property
    assert cl.decode_message(data, 0, with_body=False).prop_crc is None  # read with the body
    scanned = cl.check_message(data, 0, options=cl.CheckOptions(profile=Profile.V5_3))
    assert scanned.record is not None and scanned.record.prop_crc == rec.prop_crc


def test_prop_crc_digit_order() -> None:
    assert encode.encode_prop_crc_digits(1234567) == "7654321000"
    assert encode.encode_prop_crc_digits(0) == "0000000000"
    assert cl.decode_prop_crc_digits("7654321000") == 1234567
    assert cl.decode_prop_crc_digits("12x") is None


def test_dup_info_check() -> None:
    opts = cl.CheckOptions(profile=Profile.V5_3, check_dup_info=True)
    for value, ok in (("a_b", True), ("_b", True), ("a_", False), ("ab", False), ("a_b_c", False)):
        props = encode_properties([("DUP_INFO", value)], True).encode()
        r = cl.check_message(record(properties=props), 0, options=opts)
        assert r.is_message is ok, value
    assert cl.check_message(record(), 0, options=opts).reason is cl.CheckReason.DUP_INFO_INVALID


def test_java_parse_int() -> None:
    assert java_parse_int("17") == 17
    assert java_parse_int("+3") == 3
    assert java_parse_int("-2") == -2
    for bad in ("", "+", " 1", "1.0", "2147483648", "x"):
        assert java_parse_int(bad) is None


def test_properties_parser_matches_java_rules() -> None:
    assert parse_properties("a\x01b\x02c\x01d") == {"a": "b", "c": "d"}
    assert parse_properties("a\x01b\x02") == {"a": "b"}
    assert parse_properties("\x01b\x02a\x01\x02k\x01v") == {"k": "v"}  # empty name/value dropped
    assert parse_properties("a\x01b\x01c") == {"a": "b\x01c"}  # only the first 0x01 splits
    assert parse_properties("a\x011\x02a\x012") == {"a": "2"}  # last duplicate wins
    assert parse_properties("ab\x02c\x01d") == {"c": "d"}  # a pair without 0x01 is ignored


def test_transaction_types() -> None:
    rec = cl.decode_message(record(sys_flag=cl.TRANSACTION_PREPARED_TYPE), 0)
    assert rec.transaction_name == "prepared" and not rec.enters_consume_queue and rec.is_indexed
    rec = cl.decode_message(record(sys_flag=cl.TRANSACTION_ROLLBACK_TYPE), 0)
    assert not rec.is_indexed
    rec = cl.decode_message(record(sys_flag=cl.COMPRESSED_FLAG | 0x200), 0)
    assert rec.compression == "zstd"
