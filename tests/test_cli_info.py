"""``rmqinspect info`` on writer-built stores and on the real-broker corpora."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import build_store, orders, run, run_json
from tests.corpus import expected, input_store, scenarios


def test_info_reports_queues_offsets_and_shutdown(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(30))
    doc = run_json("info", store, expect=0)
    assert doc["shutdown"] == {"clean": True, "abort_file": False, "abort_content": None}
    assert doc["profile"]["version"] == "4.9"
    topics = {t["topic"]: t for t in doc["topics"]}
    assert topics["Orders"]["message_count"] == 30
    assert [
        (q["queue_id"], q["min_offset"], q["max_offset"]) for q in topics["Orders"]["queues"]
    ] == [
        (0, 0, 15),
        (1, 0, 15),
    ]
    commitlog = next(f for f in doc["families"] if f["name"] == "commitlog")
    assert commitlog["file_size"] == 64 * 1024
    assert doc["commitlog"]["min_offset"] == 0
    assert doc["commitlog"]["max_offset"] > 0


def test_info_says_crashed_and_lists_the_timer_store_as_read(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(3), crash=True)
    (store / "timerwheel").write_bytes(b"\0" * 16)
    (store / "compaction" / "compactionLog" / "T" / "0").mkdir(parents=True)
    (store / "compaction" / "compactionLog" / "T" / "0" / f"{0:020d}").write_bytes(b"x")
    doc = run_json("info", store, expect=0)
    assert doc["shutdown"]["clean"] is False
    # The timer store is read (timers, verify, recover, trace, export): a family, not a
    # layout the tool does not read; the compaction store is one.
    assert [u["kind"] for u in doc["unsupported"]] == ["compaction"]
    wheel = [f for f in doc["families"] if f["name"] == "timerwheel"]
    assert [(f["file_count"], f["bytes"]) for f in wheel] == [(1, 16)]
    table = run("info", store, "--format", "table")
    assert table.exit_code == 0
    assert "CRASHED" in table.stdout
    assert "timerwheel" in table.stdout and "compaction" in table.stdout


def test_info_reports_gaps_in_commitlog_names(tmp_path: Path) -> None:
    specs = [MessageSpec(topic="Big", body=b"x" * 20000) for _ in range(12)]
    store = build_store(tmp_path / "s", specs)
    files = sorted((store / "commitlog").iterdir())
    assert len(files) >= 3
    files[1].unlink()
    doc = run_json("info", store, expect=0)
    commitlog = next(f for f in doc["families"] if f["name"] == "commitlog")
    assert commitlog["gaps"] == [[int(files[1].name), int(files[2].name)]]
    assert any(p["kind"] == "gap" for p in doc["problems"])


def test_info_falls_back_to_bak_when_the_config_file_is_torn(tmp_path: Path) -> None:
    store = build_store(
        tmp_path / "s",
        orders(4),
        consumer_offsets={"Orders@g1": {0: 2, 1: 1}},
        previous_offsets={"Orders@g1": {0: 1, 1: 1}},
    )
    main = store / "config" / "consumerOffset.json"
    main.write_bytes(main.read_bytes()[:20])
    doc = run_json("info", store, expect=0)
    cfg = {c["name"]: c for c in doc["config_files"]}["consumerOffset.json"]
    assert (cfg["source"], cfg["main_state"], cfg["bak_state"]) == ("bak", "invalid", "ok")
    assert "consumerOffset.json" in cfg["main_error"]


def test_info_on_a_missing_directory_is_one_line_exit_2(tmp_path: Path) -> None:
    result = run("info", tmp_path / "nope")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "nope" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("corpus", ["conformance", "conformance5"])
def test_info_agrees_with_the_real_broker(corpus: str, request: pytest.FixtureRequest) -> None:
    """Queue bounds before load and the checkpoint equal what the broker read from disk."""
    base: Path = request.getfixturevalue(f"{corpus}_dir")
    for scenario in scenarios(base):
        if scenario == "scenarios":
            continue
        meta = expected(base, scenario)
        result = run("info", input_store(base, scenario), "--format", "json")
        assert result.exit_code == 0, (scenario, result.stderr)
        doc = json.loads(result.stdout)
        assert doc["shutdown"]["abort_file"] == meta["before"]["abortFilePresent"], scenario
        raw = meta["before"]["consumeQueuesRaw"]
        queues = {f"{q['topic']}/{q['queue_id']}": q for t in doc["topics"] for q in t["queues"]}
        assert set(queues) == set(raw), scenario
        for name, info in raw.items():
            assert queues[name]["max_offset"] == info["endUnitIndex"], (scenario, name)
            assert queues[name]["max_physic_offset"] == info["maxPhysicOffsetOfUnits"]
        cp = meta["before"]["checkpoint"]
        if cp.get("physicMsgTimestamp") is not None:
            assert doc["checkpoint"]["physic_msg_timestamp"] == cp["physicMsgTimestamp"]
            assert doc["checkpoint"]["index_msg_timestamp"] == cp["indexMsgTimestamp"]
        assert len(doc["index_files"]) == len(meta["before"]["indexFiles"]), scenario
