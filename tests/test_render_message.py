"""The message renderer on records built directly: field names, time siblings, body encodings,
previews, escaping, and the streamed JSON, JSON Lines and table outputs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rmqinspect.analysis.messages import ScanEvent, SkippedRange
from rmqinspect.format import properties as props
from rmqinspect.format.commitlog import (
    MESSAGE_MAGIC_CODE,
    MessageRecord,
    body_crc,
    decode_message,
)
from rmqinspect.format.host import HostAddress
from rmqinspect.format.message_json import BodyFormat, encode_body, message_json
from rmqinspect.format.properties import encode_properties
from rmqinspect.render.message import (
    body_preview,
    message_detail_table,
    messages_table,
    render_message_stream,
)
from rmqinspect.render.output import TABLE_BATCH_ROWS, OutputFormat, print_table
from tests.render_helpers import decode_body
from tests.test_commitlog import record as encoded_record

pytestmark = pytest.mark.usefixtures("wide_console")

STORE_HOST = HostAddress(bytes([10, 0, 0, 7]), 10911)
BORN_HOST = HostAddress(bytes(15) + b"\x01", 40000)

MESSAGE_FIELDS = [
    "physical_offset",
    "store_size",
    "version",
    "topic",
    "queue_id",
    "queue_offset",
    "sys_flag",
    "transaction",
    "flag",
    "body_crc",
    "body_crc_ok",
    "prop_crc",
    "prop_crc_ok",
    "born_timestamp",
    "born_time",
    "born_host",
    "store_timestamp",
    "store_time",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "properties",
    "tags",
    "keys",
    "uniq_key",
    "msg_id",
    "body_length",
    "compression",
    "body_encoding",
    "body",
]


def record(
    position: int = 4096,
    *,
    body: bytes | None = b"hello",
    properties: dict[str, str] | None = None,
    topic: str = "TopicA",
    physical_offset: int | None = None,
) -> MessageRecord:
    return MessageRecord(
        position=position,
        store_size=200,
        magic=MESSAGE_MAGIC_CODE,
        body_crc=body_crc(body or b""),
        queue_id=3,
        flag=0,
        queue_offset=17,
        physical_offset_field=position if physical_offset is None else physical_offset,
        sys_flag=0,
        born_timestamp=1_714_557_599_999,
        born_host=BORN_HOST,
        store_timestamp=1_714_557_600_000,
        store_host=STORE_HOST,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body_length=0 if body is None else len(body),
        body=body,
        topic=topic,
        properties_raw=b"",
        properties=dict(
            properties
            if properties is not None
            else {props.TAGS: "TagA", props.KEYS: "K1 K2", props.UNIQ_KEY: "AB" * 16}
        ),
    )


def test_message_json_fields_in_order_with_time_siblings() -> None:
    doc = message_json(record())
    assert list(doc) == MESSAGE_FIELDS
    assert (doc["born_time"], doc["store_time"]) == (
        "2024-05-01T09:59:59.999Z",
        "2024-05-01T10:00:00.000Z",
    )
    assert doc["born_host"] == "[::1]:40000" and doc["store_host"] == "10.0.0.7:10911"
    assert doc["msg_id"] == "0A00000700002A9F0000000000001000"
    assert (doc["tags"], doc["keys"], doc["uniq_key"]) == ("TagA", ["K1", "K2"], "AB" * 16)
    assert doc["properties"] == {"KEYS": "K1 K2", "TAGS": "TagA", "UNIQ_KEY": "AB" * 16}
    assert list(doc["properties"]) == sorted(doc["properties"])
    assert (doc["body_encoding"], doc["body"], doc["body_crc_ok"]) == ("text", "hello", True)
    assert (doc["transaction"], doc["version"], doc["compression"]) == ("not", "v1", None)
    assert (doc["prop_crc"], doc["prop_crc_ok"]) == (None, None)  # no __CRC32# property


def test_the_property_crc_is_the_stored_value_and_whether_the_record_gives_it() -> None:
    # A 5.3 record written with enabledAppendPropCRC, then one property value changed.
    tail = encode_properties([(props.TAGS, "TagA"), (props.KEYS, "K1")], True).encode()
    data = bytearray(encoded_record(properties=tail, append_prop_crc=True))
    intact = decode_message(bytes(data), 0)
    assert intact.prop_crc is not None
    stored = intact.prop_crc.stored
    assert message_json(intact)["prop_crc"] == stored and message_json(intact)["prop_crc_ok"]
    at = bytes(data).index(b"TagA")
    data[at : at + 4] = b"TagB"
    changed = message_json(decode_message(bytes(data), 0))
    assert (changed["prop_crc"], changed["prop_crc_ok"], changed["body_crc_ok"]) == (
        stored,
        False,
        True,
    )
    assert changed["tags"] == "TagB"


def test_a_physical_offset_field_that_disagrees_is_shown() -> None:
    doc = message_json(record(physical_offset=99))
    assert list(doc) == [*MESSAGE_FIELDS, "physical_offset_field"]
    assert (doc["physical_offset"], doc["physical_offset_field"]) == (4096, 99)
    assert doc["msg_id"].endswith(f"{99:016X}")  # the id is built from the field


@pytest.mark.parametrize(
    ("body", "fmt", "encoding", "text"),
    [
        (b"caf\xc3\xa9 \x00\n", BodyFormat.TEXT, "text", "café \x00\n"),
        (b"\xff\xfe", BodyFormat.TEXT, "base64", "//4="),
        (b"\xff\xfe", BodyFormat.HEX, "hex", "fffe"),
        (b"ok", BodyFormat.BASE64, "base64", "b2s="),
        (b"ok", BodyFormat.NONE, "none", None),
        (None, BodyFormat.TEXT, "none", None),
    ],
)
def test_body_encodings_round_trip(
    body: bytes | None, fmt: BodyFormat, encoding: str, text: str | None
) -> None:
    assert encode_body(body, fmt) == (encoding, text)
    assert decode_body(encoding, text) == (None if fmt is BodyFormat.NONE else body)
    doc = message_json(record(body=body), fmt)
    assert (doc["body_encoding"], doc["body"]) == (encoding, text)
    if body is None:
        assert doc["body_crc_ok"] is None
    with pytest.raises(ValueError, match="unknown body_encoding"):
        decode_body("rot13", "x")


def test_body_preview_escapes_and_shortens() -> None:
    assert body_preview(None) == ""
    assert body_preview(b"plain") == "plain"
    assert body_preview(b"a\nb\x1b[31m") == "a\\nb\\x1b[31m"
    assert body_preview(b"x" * 60, 10) == "x" * 10 + "…"
    assert body_preview(b"\xff" * 3, 10) == "0xffffff"
    assert body_preview(b"\xff" * 30, 10) == "0x" + "ff" * 5 + "…"


def _table_text(table: Any, capsys: pytest.CaptureFixture[str]) -> str:
    print_table(table)
    return capsys.readouterr().out


def test_tables_show_keys_tags_and_bodies_literally(capsys: pytest.CaptureFixture[str]) -> None:
    rec = record(
        body=b"[/] body [b]",
        properties={props.TAGS: "[bold]tag", props.KEYS: "[order] a[/]b", "X": "[i]v"},
    )
    listing = _table_text(messages_table([rec], "Messages [x]"), capsys)
    for text in ("Messages [x]", "[bold]tag", "[order] a[/]b", "[/] body [b]", "TopicA"):
        assert text in listing, text
    detail = _table_text(message_detail_table(rec, "Found"), capsys)
    for text in ("property X", "[i]v", "[order] a[/]b", "0A000007000", "(v1)", "ok"):
        assert text in detail, text
    differs = _table_text(message_detail_table(record(physical_offset=5), "t"), capsys)
    assert "(differs!)" in differs


_SKIPPED = SkippedRange("00000000000000000000", 200, 200, 96, "bad_magic", "magic 0x0")


def _events() -> list[ScanEvent]:
    return [record(0), _SKIPPED, record(65536, body=b"\xff")]


def test_stream_as_json_array(capsys: pytest.CaptureFixture[str]) -> None:
    assert render_message_stream(_events(), OutputFormat.JSON, BodyFormat.TEXT, "M") == 2
    out, err = capsys.readouterr()
    docs = json.loads(out)
    assert [d.get("physical_offset") for d in docs] == [0, None, 65536]
    assert docs[2]["body_encoding"] == "base64"
    # The skipped range is an element of its own where it occurs, and a warning with the file,
    # the byte, the length and why.
    assert docs[1] == {
        "skipped": {
            "file": "00000000000000000000",
            "file_position": 200,
            "physical_offset": 200,
            "length": 96,
            "reason": "bad_magic",
            "detail": "magic 0x0",
        }
    }
    assert err == (
        "rmqinspect: warning: 00000000000000000000: byte 200: skipped 96 bytes "
        "(physical offset 200): bad_magic: magic 0x0\n"
    )
    assert render_message_stream([], OutputFormat.JSON, BodyFormat.TEXT, "M") == 0
    assert json.loads(capsys.readouterr().out) == []


def test_stream_as_jsonl(capsys: pytest.CaptureFixture[str]) -> None:
    assert render_message_stream(_events(), OutputFormat.JSONL, BodyFormat.HEX, "M") == 2
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d.get("body") for d in lines] == ["68656c6c6f", None, "ff"]
    assert lines[1]["skipped"]["length"] == 96
    assert render_message_stream([], OutputFormat.JSONL, BodyFormat.HEX, "M") == 0
    assert capsys.readouterr().out == ""


def test_stream_as_table_warns_about_skipped_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    assert render_message_stream(_events(), OutputFormat.TABLE, BodyFormat.TEXT, "M") == 2
    out, err = capsys.readouterr()
    assert "65536" in out and "skipped" not in out
    assert "byte 200: skipped 96 bytes" in err


def test_stream_as_tables_in_batches(capsys: pytest.CaptureFixture[str]) -> None:
    n = TABLE_BATCH_ROWS + 3
    records = [record(i * 200) for i in range(n)]
    assert render_message_stream(records, OutputFormat.TABLE, BodyFormat.TEXT, "All") == n
    out = capsys.readouterr().out
    assert out.count("All") == 1  # the title once, over the first batch
    assert out.count("phy offset") == 2  # a header per batch
    assert str((n - 1) * 200) in out
    assert render_message_stream([], OutputFormat.TABLE, BodyFormat.TEXT, "None here") == 0
    assert "None here" in capsys.readouterr().out  # an empty table still says what it is
