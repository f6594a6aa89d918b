"""``rmqinspect decode-id``: both readings of an ambiguous id."""

from __future__ import annotations

from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import UniqKey, encode_offset_msg_id, encode_uniq_key
from tests.cli_helpers import run, run_json


def test_offset_msg_id_reading() -> None:
    text = encode_offset_msg_id(HostAddress(bytes([10, 1, 2, 3]), 10911), 31022)
    doc = run_json("decode-id", text.lower(), expect=0)
    assert doc["ambiguous"] is True
    assert doc["offset_msg_id"]["store_host"] == "10.1.2.3:10911"
    assert doc["offset_msg_id"]["physical_offset"] == 31022
    assert doc["offset_msg_id"]["warnings"] == []
    assert doc["uniq_key"] is not None  # still shown: only context decides


def test_uniq_key_reading_with_reference_time() -> None:
    uniq = UniqKey(bytes([192, 168, 1, 9]), 4242, -7, 5 * 24 * 3600 * 1000 + 123, 17)
    text = encode_uniq_key(uniq)
    # 2024-03-06T00:00:00.123Z is 5 days and 123 ms after the start of March 2024 (UTC).
    doc = run_json("decode-id", text, "--reference", "2024-03-06T00:00:01Z", expect=0)
    u = doc["uniq_key"]
    assert (u["ip"], u["pid"], u["class_loader_hash"], u["counter"]) == (
        "192.168.1.9",
        4242,
        -7,
        17,
    )
    assert u["producer_time"] == "2024-03-06T00:00:00.123Z"
    assert "port" in doc["offset_msg_id"]["warnings"][0]
    v6 = encode_uniq_key(UniqKey(bytes(15) + b"\x01", 1, 2, 3, 4))
    assert len(v6) == 56 and run_json("decode-id", v6, expect=0)["uniq_key"]["ip"] == "::1"


def test_bad_ids_and_zones() -> None:
    result = run("decode-id", "XYZ")
    assert result.exit_code == 2 and "32 or 56" in result.stderr
    assert run("decode-id", "Z" * 32).exit_code == 2
    assert run("decode-id", "0" * 32, "--tz", "Mars/Olympus").exit_code == 2
    table = run("decode-id", "0A01020300002A9F000000000000792E", "--format", "table")
    assert table.exit_code == 0
    assert "As an offsetMsgId" in table.stdout and "As a UNIQ_KEY" in table.stdout
    assert "fit both" in table.stderr
    zoned = run_json(
        "decode-id", "0A01020300002A9F000000000000792E", "--tz", "Asia/Shanghai", expect=0
    )
    assert "Asia/Shanghai" in zoned["uniq_key"]["time_basis"]
