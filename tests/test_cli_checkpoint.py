"""``rmqinspect checkpoint``: a store directory or a bare file."""

from __future__ import annotations

import struct
from pathlib import Path

from tests.cli_helpers import build_store, orders, run, run_json
from tests.corpus import expected, input_store


def test_store_and_file_give_the_same_answer(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(3))
    by_dir = run_json("checkpoint", store, expect=0)
    by_file = run_json("checkpoint", store / "checkpoint", expect=0)
    assert by_dir == by_file
    assert by_dir["physic_msg_timestamp"] > 0
    assert by_dir["physic_msg_time"].endswith("Z")
    low = min(by_dir["physic_msg_timestamp"], by_dir["logics_msg_timestamp"])
    assert by_dir["min_timestamp"] == low - 3000


def test_notes_and_errors(tmp_path: Path) -> None:
    cp = tmp_path / "checkpoint"
    cp.write_bytes(struct.pack(">qqq", 0, 5000, 0) + b"\0" * 100)
    doc = run_json("checkpoint", cp, expect=0)
    assert doc["file_size"] == 124
    assert any("4096" in n for n in doc["notes"])
    assert any("getMinTimestamp 0" in n for n in doc["notes"])
    short = tmp_path / "short"
    short.write_bytes(b"\0" * 10)
    result = run("checkpoint", short)
    assert result.exit_code == 2 and "short" in result.stderr
    assert run("checkpoint", tmp_path / "missing").exit_code == 2
    table = run("checkpoint", cp, "--format", "table")
    assert "logicsMsgTimestamp" in table.stdout and "(5000)" in table.stdout


def test_real_broker_checkpoint(conformance5_dir: Path) -> None:
    doc = run_json("checkpoint", input_store(conformance5_dir, "crash5"), expect=0)
    want = expected(conformance5_dir, "crash5")["before"]["checkpoint"]
    assert doc["physic_msg_timestamp"] == want["physicMsgTimestamp"]
    assert doc["logics_msg_timestamp"] == want["logicsMsgTimestamp"]
    assert doc["index_msg_timestamp"] == want["indexMsgTimestamp"]
