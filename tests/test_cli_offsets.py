"""``rmqinspect offsets``: committed offsets against queue bounds, lag, .bak."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import build_store, orders, run, run_json, run_jsonl
from tests.corpus import expected, input_store


def test_lag_flags_and_bak(tmp_path: Path) -> None:
    store = build_store(
        tmp_path / "s",
        orders(10),
        consumer_offsets={"Orders@g1": {0: 3, 1: 9}, "Orders@g2": {0: 5}, "Gone@g1": {0: 4}},
        previous_offsets={"Orders@g1": {0: 2, 1: 9}, "Orders@g2": {0: 5, 1: 1}},
    )
    doc = run_json("offsets", store, expect=0)
    rows = {(r["group"], r["topic"], r["queue_id"]): r for r in doc["offsets"]}
    # The whole row: every documented field, and no other.
    assert rows[("g1", "Orders", 0)] == {
        "table": "consumer",
        "group": "g1",
        "topic": "Orders",
        "queue_id": 0,
        "offset": 3,
        "bak_offset": 2,
        "bak_note": ".bak says 2",
        "min_offset": 0,
        "max_offset": 5,
        "lag": 2,
        "status": "ok",
        "delay_level": None,
        # A clean store: the restart rebuilds the queues as they are.
        "min_offset_after_start": 0,
        "max_offset_after_dispatch": 5,
        "lag_after_restart": 2,
        "status_after_restart": "ok",
    }
    assert doc["restart"] == {"broker_starts": True, "recovery_path": "normal", "refusal": None}
    assert rows[("g1", "Orders", 1)]["status"] == "above_max"
    assert rows[("g1", "Orders", 1)]["lag"] == -4
    assert rows[("g1", "Gone", 0)]["status"] == "no_queue"
    assert rows[("g2", "Orders", 1)]["bak_note"] == "only in .bak (offset 1)"
    (consumer,) = [f for f in doc["files"] if f["name"] == "consumerOffset.json"]
    assert consumer["source"] == "main" and consumer["bak_differs"] is True


def test_filters_and_bak_fallback(tmp_path: Path) -> None:
    store = build_store(
        tmp_path / "s", orders(4), consumer_offsets={"Orders@g1": {0: 1}, "Orders@g2": {0: 2}}
    )
    assert [r["group"] for r in run_jsonl("offsets", store, "--group", "g2", expect=0)] == ["g2"]
    assert run_jsonl("offsets", store, "--topic", "Nope", expect=1) == []
    (store / "config" / "consumerOffset.json").write_text("{", encoding="utf-8")
    result = run("offsets", store, "--format", "json")
    assert result.exit_code == 0
    assert "loads the .bak" in result.stderr
    table = run("offsets", store, "--format", "table")
    assert table.exit_code == 0 and "g1" in table.stdout


def test_real_broker_offsets_and_delay_levels(conformance_dir: Path) -> None:
    doc = run_json("offsets", input_store(conformance_dir, "cq_missing"), expect=0)
    rows = {(r["group"], r["topic"], r["queue_id"]): r for r in doc["offsets"]}
    assert rows[("groupX", "TopicA", 2)]["status"] == "no_queue"
    assert rows[("groupX", "TopicA", 0)]["max_offset"] == 268
    delay = [r for r in doc["offsets"] if r["table"] == "delay"]
    assert [r["delay_level"] for r in delay] == list(range(1, 19))
    assert {r["queue_id"] for r in delay} == set(range(18))
    assert delay[17]["max_offset"] == 50


def test_after_a_crash_the_lag_against_the_rebuilt_queues_is_shown(tmp_path: Path) -> None:
    specs = orders(20)
    for spec in specs[12:]:
        spec.dispatch = False  # stored, not dispatched when the broker died
    # The consumer had consumed all 10 messages of queue 0; only 6 are in its queue on disk.
    store = build_store(
        tmp_path / "s", specs, crash=True, consumer_offsets={"Orders@g": {0: 10, 1: 7}}
    )
    rows = {
        r["queue_id"]: r for r in run_json("offsets", store, "--group", "g", expect=0)["offsets"]
    }
    on_disk = [(r["max_offset"], r["lag"], r["status"]) for r in rows.values()]
    assert on_disk == [(6, -4, "above_max"), (6, -1, "above_max")]
    restarted = [
        (r["max_offset_after_dispatch"], r["lag_after_restart"], r["status_after_restart"])
        for r in rows.values()
    ]
    assert restarted == [(10, 0, "ok"), (10, 3, "ok")]


def test_real_crash_store_lags_as_the_restarted_broker_sees_it(
    conformance_dir: Path, wide_console: None
) -> None:
    meta = expected(conformance_dir, "crash")
    after_start = meta["summary"]["consumeQueues"]
    result = run("offsets", input_store(conformance_dir, "crash"), "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["restart"] == {"broker_starts": True, "recovery_path": "abnormal", "refusal": None}
    rows = {(r["topic"], r["queue_id"]): r for r in doc["offsets"] if r["table"] == "consumer"}
    # The example: TopicA/0 is 20 ahead of its queue on disk, 3 behind after restart.
    a0 = rows[("TopicA", 0)]
    assert (a0["offset"], a0["max_offset"], a0["lag"], a0["status"]) == (265, 245, -20, "above_max")
    assert (a0["max_offset_after_dispatch"], a0["lag_after_restart"]) == (268, 3)
    for (topic, queue_id), row in rows.items():
        broker = after_start[f"{topic}/{queue_id}"]
        assert row["min_offset_after_start"] == broker["minOffsetAfterStart"]
        assert row["max_offset_after_dispatch"] == broker["maxOffsetAfterStart"]
        assert row["lag_after_restart"] == broker["maxOffsetAfterStart"] - row["offset"]
        assert row["status_after_restart"] == "ok"
    table = run("offsets", input_store(conformance_dir, "crash"), "--format", "table")
    assert "after restart" in table.stdout and "on disk" in table.stdout


def test_a_group_that_does_not_exist_is_not_an_empty_success(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(4), consumer_offsets={"Orders@g1": {0: 1}})
    missing = run("offsets", store, "--group", "nosuch", "--format", "json")
    assert missing.exit_code == 1
    assert "no such group: 'nosuch' (groups with offsets: g1)" in missing.stderr
    assert json.loads(missing.stdout)["offsets"] == []
    assert json.loads(missing.stdout)["restart"] is None  # nothing to judge: not emulated
    assert run("offsets", store, "--group", "g1", "--format", "json").exit_code == 0


def test_a_broker_that_would_not_start_has_no_lag_after_restart(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(4), consumer_offsets={"Orders@g1": {0: 1}})
    (first,) = sorted((store / "commitlog").iterdir())[:1]
    with open(first, "r+b") as fh:
        fh.truncate(first.stat().st_size // 2)  # a wrong-size file: load() fails
    result = run("offsets", store, "--commitlog-file-size", "65536", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["restart"]["broker_starts"] is False
    assert "refuses to start" in doc["restart"]["refusal"]
    (row,) = doc["offsets"][:1]
    assert (row["lag_after_restart"], row["status_after_restart"]) == (None, None)
    assert "no lag after the restart: the broker refuses to start" in result.stderr


def test_report_rows_are_converted_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A report of 800,000 offsets spent most of its time converting rows for JSON: a call per
    field of each row, then a walk of the converted document again. One call per row now."""
    from rmqinspect.render import offsets, output

    groups = 50
    store = build_store(
        tmp_path / "s",
        orders(10),
        consumer_offsets={f"Orders@g{i}": {0: 3, 1: 4} for i in range(groups)},
    )
    calls = 0
    original = output.to_jsonable

    def counted(value: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(value)

    monkeypatch.setattr(output, "to_jsonable", counted)
    monkeypatch.setattr(offsets, "to_jsonable", counted)
    doc = run_json("offsets", store, expect=0)
    rows = len(doc["offsets"])
    assert rows >= 2 * groups
    assert all(r["status"] == r["status_after_restart"] == "ok" for r in doc["offsets"])
    assert calls <= rows + 10, calls  # the files and the restart view: a few calls each
