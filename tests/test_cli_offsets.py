"""``rmqinspect offsets``: committed offsets against queue bounds, lag, .bak."""

from __future__ import annotations

from pathlib import Path

from tests.cli_helpers import build_store, orders, run, run_json, run_jsonl
from tests.corpus import input_store


def test_lag_flags_and_bak(tmp_path: Path) -> None:
    store = build_store(
        tmp_path / "s",
        orders(10),
        consumer_offsets={"Orders@g1": {0: 3, 1: 9}, "Orders@g2": {0: 5}, "Gone@g1": {0: 4}},
        previous_offsets={"Orders@g1": {0: 2, 1: 9}, "Orders@g2": {0: 5, 1: 1}},
    )
    doc = run_json("offsets", store)
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
    }
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
    assert [r["group"] for r in run_jsonl("offsets", store, "--group", "g2")] == ["g2"]
    assert run_jsonl("offsets", store, "--topic", "Nope") == []
    (store / "config" / "consumerOffset.json").write_text("{", encoding="utf-8")
    result = run("offsets", store, "--format", "json")
    assert result.exit_code == 0
    assert "loads the .bak" in result.stderr
    table = run("offsets", store, "--format", "table")
    assert table.exit_code == 0 and "g1" in table.stdout


def test_real_broker_offsets_and_delay_levels(conformance_dir: Path) -> None:
    doc = run_json("offsets", input_store(conformance_dir, "cq_missing"))
    rows = {(r["group"], r["topic"], r["queue_id"]): r for r in doc["offsets"]}
    assert rows[("groupX", "TopicA", 2)]["status"] == "no_queue"
    assert rows[("groupX", "TopicA", 0)]["max_offset"] == 268
    delay = [r for r in doc["offsets"] if r["table"] == "delay"]
    assert [r["delay_level"] for r in delay] == list(range(1, 19))
    assert {r["queue_id"] for r in delay} == set(range(18))
    assert delay[17]["max_offset"] == 50
