"""The checkpoint, decode-id and offsets renderers on analysis dataclasses built directly."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC

import pytest

from rmqinspect.analysis.checkpoint import CheckpointReport
from rmqinspect.analysis.ids import IdDecoding, OffsetMsgIdReading, UniqKeyReading, decode_id
from rmqinspect.analysis.offsets import (
    FileUse,
    OffsetRow,
    OffsetsReport,
    OffsetStatus,
    RestartView,
)
from rmqinspect.format.checkpoint import Checkpoint
from rmqinspect.render.checkpoint import checkpoint_json, render_checkpoint
from rmqinspect.render.ids import id_json, render_id
from rmqinspect.render.offsets import offsets_json, render_offsets
from rmqinspect.render.output import OutputFormat
from tests.render_helpers import assert_time_siblings, printed_json, printed_jsonl

pytestmark = pytest.mark.usefixtures("wide_console")

CHECKPOINT = CheckpointReport(
    path="/s/checkpoint",
    checkpoint=Checkpoint(1_714_557_600_000, 1_714_557_601_000, 0, 77, 88),
    min_timestamp=1_714_557_597_000,
    min_timestamp_index=0,
    notes=("indexMsgTimestamp 0: ...",),
)


def test_checkpoint_json_names_every_field_with_its_time() -> None:
    doc = checkpoint_json(CHECKPOINT)
    assert list(doc) == [
        "path",
        "file_size",
        "physic_msg_timestamp",
        "physic_msg_time",
        "logics_msg_timestamp",
        "logics_msg_time",
        "index_msg_timestamp",
        "index_msg_time",
        "master_flushed_offset",
        "confirm_phy_offset",
        "min_timestamp",
        "min_time",
        "min_index_timestamp",
        "min_index_time",
        "notes",
    ]
    assert assert_time_siblings(doc) == 5
    assert (doc["physic_msg_time"], doc["index_msg_time"]) == (
        "2024-05-01T10:00:00.000Z",
        "1970-01-01T00:00:00.000Z",
    )
    assert (doc["master_flushed_offset"], doc["confirm_phy_offset"]) == (77, 88)


def test_checkpoint_in_every_format(capsys: pytest.CaptureFixture[str]) -> None:
    render_checkpoint(CHECKPOINT, OutputFormat.JSON)
    assert printed_json(capsys) == checkpoint_json(CHECKPOINT)
    render_checkpoint(CHECKPOINT, OutputFormat.JSONL)
    assert printed_jsonl(capsys) == [checkpoint_json(CHECKPOINT)]
    render_checkpoint(CHECKPOINT, OutputFormat.TABLE)
    out = capsys.readouterr().out
    assert "2024-05-01T10:00:00.000Z (1714557600000)" in out
    assert "0 (unset)" in out and "indexMsgTimestamp 0" in out


UNIQ = UniqKeyReading(
    ip="10.1.2.3",
    pid=4242,
    class_loader_hash=-7,
    time_offset_ms=123,
    counter=17,
    producer_timestamp=1_709_251_200_123,
    time_basis="month of the reference time",
    warnings=(),
)
MID = OffsetMsgIdReading("10.1.2.3:10911", "10.1.2.3", 10911, 31022, ("port looks odd",))


def test_id_json_both_readings() -> None:
    doc = id_json(IdDecoding("ABC", True, MID, UNIQ))
    assert list(doc) == ["id", "ambiguous", "offset_msg_id", "uniq_key"]
    assert doc["offset_msg_id"] == {
        "store_host": "10.1.2.3:10911",
        "store_ip": "10.1.2.3",
        "store_port": 10911,
        "physical_offset": 31022,
        "warnings": ["port looks odd"],
    }
    assert list(doc["uniq_key"]) == [
        "ip",
        "pid",
        "class_loader_hash",
        "time_offset_ms",
        "counter",
        "producer_timestamp",
        "producer_time",
        "time_basis",
        "warnings",
    ]
    assert doc["uniq_key"]["producer_time"] == "2024-03-01T00:00:00.123Z"
    assert assert_time_siblings(doc) == 1
    undated = id_json(IdDecoding("ABC", False, None, replace(UNIQ, producer_timestamp=None)))
    assert undated["offset_msg_id"] is None
    assert (undated["uniq_key"]["producer_timestamp"], undated["uniq_key"]["producer_time"]) == (
        None,
        None,
    )


def test_id_in_every_format(capsys: pytest.CaptureFixture[str]) -> None:
    decoding = decode_id("0A01020300002A9F000000000000792E", 1_714_557_600_000, 0, UTC)
    render_id(decoding, OutputFormat.JSON)
    captured = capsys.readouterr()
    assert "fit both" in captured.err  # the ambiguity is said on stderr in every format
    assert json.loads(captured.out) == id_json(decoding)
    render_id(decoding, OutputFormat.JSONL)
    assert printed_jsonl(capsys) == [id_json(decoding)]
    render_id(decoding, OutputFormat.TABLE)
    out = capsys.readouterr().out
    # A title wider than its table wraps: look for its parts.
    assert "As an offsetMsgId:" in out and "0A01020300002A9F000000000000792E" in out
    assert "As a UNIQ_KEY" in out and "10.1.2.3:10911" in out and "31022" in out


ROWS = (
    OffsetRow("consumer", "g[1]", "Orders", 0, 3, 2, ".bak says 2", 0, 5, 2, OffsetStatus.OK),
    OffsetRow(
        "consumer",
        "g2",
        "Orders",
        1,
        9,
        None,
        None,
        0,
        5,
        -4,
        OffsetStatus.ABOVE_MAX,
        None,
        0,
        10,
        1,
        OffsetStatus.OK,
    ),
    OffsetRow("delay", None, "SCHEDULE_TOPIC_XXXX", 2, 1, None, None, 0, 1, 0, OffsetStatus.OK, 3),
)
FILES = (
    FileUse("consumerOffset.json", "bak", "invalid", "ok", True, True, ("torn at byte 20",)),
    FileUse("delayOffset.json", "none", "missing", "missing", False, False, ()),
)
OFFSETS = OffsetsReport(FILES, ROWS, RestartView(True, "abnormal", None), ("g[1]", "g2"))


def test_offsets_json_rows_and_files() -> None:
    doc = offsets_json(OFFSETS)
    assert list(doc) == ["files", "restart", "offsets"]
    assert doc["restart"] == {"broker_starts": True, "recovery_path": "abnormal", "refusal": None}
    assert doc["files"][0] == {
        "name": "consumerOffset.json",
        "source": "bak",
        "main_state": "invalid",
        "bak_state": "ok",
        "bak_differs": True,
        "broker_starts": True,
        "errors": ["torn at byte 20"],
    }
    assert doc["offsets"][1] == {
        "table": "consumer",
        "group": "g2",
        "topic": "Orders",
        "queue_id": 1,
        "offset": 9,
        "bak_offset": None,
        "bak_note": None,
        "min_offset": 0,
        "max_offset": 5,
        "lag": -4,
        "status": "above_max",
        "delay_level": None,
        "min_offset_after_start": 0,
        "max_offset_after_dispatch": 10,
        "lag_after_restart": 1,
        "status_after_restart": "ok",
    }
    assert doc["offsets"][2]["delay_level"] == 3


def test_offsets_in_every_format(capsys: pytest.CaptureFixture[str]) -> None:
    render_offsets(OFFSETS, OutputFormat.JSON)
    captured = capsys.readouterr()
    assert json.loads(captured.out) == offsets_json(OFFSETS)
    assert captured.err.splitlines() == [
        "rmqinspect: warning: consumerOffset.json: the main file is invalid; the broker loads "
        "the .bak",
        "rmqinspect: warning: consumerOffset.json: .bak (the previous generation) differs from "
        "the main file",
        "rmqinspect: warning: torn at byte 20",
        "rmqinspect: warning: delayOffset.json: neither file loads; the broker starts with an "
        "empty table",
        "rmqinspect: warning: delayOffset.json: the .bak cannot be decoded: the broker refuses "
        "to start",
        "rmqinspect: warning: 1 offset(s) outside their queue's [min, max] or without a queue",
    ]
    render_offsets(OFFSETS, OutputFormat.JSONL)
    assert printed_jsonl(capsys) == offsets_json(OFFSETS)["offsets"]
    render_offsets(OFFSETS, OutputFormat.TABLE)
    out = capsys.readouterr().out
    assert "g[1]" in out and "above_max" in out and "(delay level 3)" in out
