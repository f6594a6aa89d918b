"""``rmqinspect groups``: consumer groups fact by fact on a real 4.9.8 broker's store, the resets
the real broker made when offsets were past the queues' end, and synth stores for the other
cases (retention, events, a crash, POP retry topics, hostile offset files)."""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from rmqinspect.export.schema import Table
from rmqinspect.synth.writer import MessageSpec, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT, build_store, orders, run, run_json
from tests.export_helpers import read_table

GROUPS = ("groupOK", "groupRetry")


def groups(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["group"]: g for g in doc["groups"]}


def queues(group: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(q["topic"], q["queue_id"]): q for q in group["queues"]}


def _disk(corpus: Path) -> list[dict[str, Any]]:
    raw = (corpus / "expected/consume_clean.disk.jsonl.gz").read_bytes()
    return [json.loads(line) for line in gzip.decompress(raw).splitlines()]


# --- the real broker's store ----------------------------------------------------------------------


def test_conformance_groups_fact_by_fact(conformance_consume_dir: Path) -> None:
    expected = json.loads((conformance_consume_dir / "expected/consume_clean.json").read_text())
    store = conformance_consume_dir / "stores/consume_clean"
    doc = run_json("groups", store, expect=0)
    got = groups(doc)
    assert sorted(got) == sorted(expected["backlogFromConsumerOffsetJson"]) == sorted(GROUPS)
    maxima = expected["queueMaxOffsetFromCommitLog"]
    stored = {
        (r["topic"], r["queueId"], r["queueOffset"]): r for r in _disk(conformance_consume_dir)
    }
    for group, topics in expected["backlogFromConsumerOffsetJson"].items():
        rows = queues(got[group])
        assert sorted(rows) == sorted((t, int(q)) for t, qs in topics.items() for q in qs)
        for topic, by_queue in topics.items():
            for qid, facts in by_queue.items():
                row = rows[(topic, int(qid))]
                assert row["offset"] == facts["committed"]
                assert row["max_offset"] == facts["maxOffset"] == maxima.get(f"{topic}/{qid}", 0)
                assert row["lag"] == facts["lag"] == 0
                assert row["min_offset"] == 0 and row["bak_offset"] is None
                assert row["kind"] == ("retry" if topic.startswith("%RETRY%") else "topic")
                # Caught up: the next pull finds nothing new and moves nothing.
                status = "OFFSET_OVERFLOW_ONE" if facts["maxOffset"] else "NO_MESSAGE_IN_QUEUE"
                assert row["next_pull"]["status"] == status and row["next_pull"]["moved"] is False
                # mqadmin's lastTimestamp: the store time of the message at committed - 1.
                last = stored.get((topic, int(qid), facts["committed"] - 1))
                want = None if last is None else last["storeTimestamp"]
                assert row["last_consumed_store_timestamp"] == want
                assert row["flagged"] is False
    assert queues(got["groupRetry"])[("%RETRY%groupRetry", 0)]["offset"] == 126
    assert queues(got["groupOK"])[("%RETRY%groupOK", 0)]["offset"] == 0
    retry = got["groupRetry"]
    dlq = expected["dlq"]
    assert retry["dlq_size"] == len(dlq) == maxima["%DLQ%groupRetry/0"] == 12
    assert retry["dlq_oldest_store_timestamp"] == min(r["storeTimestamp"] for r in dlq)
    assert doc["reference_timestamp"] == max(r["storeTimestamp"] for r in stored.values())
    assert retry["dlq_oldest_age_ms"] == doc["reference_timestamp"] - min(
        r["storeTimestamp"] for r in dlq
    )
    assert got["groupOK"]["dlq_size"] is None  # groupOK never dead-lettered
    subs = expected["configFiles"]["subscriptionGroup.json"]["parsed"]["subscriptionGroupTable"]
    for name in GROUPS:
        sub = got[name]["subscription"]
        assert sub["retry_max_times"] == subs[name]["retryMaxTimes"] == 16
        assert sub["consume_broadcast_enable"] is subs[name]["consumeBroadcastEnable"] is True
        assert sub["consume_enable"] is True
        assert (got[name]["lag"], got[name]["retry_backlog"]) == (0, 0)
        assert (got[name]["replayed"], got[name]["skipped"], got[name]["findings"]) == (0, 0, [])
    assert doc["broker_version"] == "4.9.8" and "profile 4.9" in doc["version_basis"]
    assert doc["moved_event_source"] is None and doc["problems"] == []


def _offset_ahead(corpus: Path, root: Path) -> Path:
    """The corpus's offset_ahead scenario, made as its README says: consume_clean with
    TopicA@groupOK q0 75->1075, q1 75->80 and %RETRY%groupRetry@groupRetry q0 126->500, in
    consumerOffset.json and its .bak, the text edited in place."""
    store = root / "offset_ahead"
    shutil.copytree(corpus / "stores/consume_clean", store)
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        path = store / "config" / name
        text = path.read_text()
        edits = (
            ('"TopicA@groupOK":{0:75,1:75,', '"TopicA@groupOK":{0:1075,1:80,'),
            ('"%RETRY%groupRetry@groupRetry":{0:126', '"%RETRY%groupRetry@groupRetry":{0:500'),
        )
        for old, new in edits:
            assert text.count(old) == 1, (name, old)
            text = text.replace(old, new)
        path.write_text(text)
    return store


def test_offsets_past_the_max_reset_as_the_real_broker_did(
    conformance_consume_dir: Path, tmp_path: Path
) -> None:
    """The real 4.9.8 broker answered PULL_OFFSET_MOVED: 1075 -> 75, 80 -> 75, 500 -> 126."""
    store = _offset_ahead(conformance_consume_dir, tmp_path)
    doc = run_json("groups", store, "--broker-version", "4.9.8", expect=1)
    assert doc["version_basis"] == "--broker-version"
    got = groups(doc)
    moved = {
        (g, q["topic"], q["queue_id"]): (q["offset"], q["next_pull"])
        for g in GROUPS
        for q in got[g]["queues"]
        if q["next_pull"] and q["next_pull"]["moved"]
    }
    assert {k: (off, p["next_offset"]) for k, (off, p) in moved.items()} == {
        ("groupOK", "TopicA", 0): (1075, 75),
        ("groupOK", "TopicA", 1): (80, 75),
        ("groupRetry", "%RETRY%groupRetry", 0): (500, 126),
    }
    for _, p in moved.values():
        assert p == {**p, "status": "OFFSET_OVERFLOW_BADLY", "replayed": 0, "skipped": 0}
    assert queues(got["groupOK"])[("TopicA", 0)]["lag"] == -1000
    assert any("OFFSET_MOVED_EVENT record" in f for f in got["groupOK"]["findings"])
    # Before 4.9.4 the same offsets past a queue whose min is 0 go back to 0: a full replay.
    old = groups(run_json("groups", store, "--broker-version", "4.9.3", expect=1))
    for group, topic, queue_id in moved:
        p = queues(old[group])[(topic, queue_id)]["next_pull"]
        max_offset = queues(old[group])[(topic, queue_id)]["max_offset"]
        assert (p["status"], p["next_offset"], p["replayed"]) == (
            "OFFSET_OVERFLOW_BADLY",
            0,
            max_offset,
        )
    assert (old["groupOK"]["replayed"], old["groupRetry"]["replayed"]) == (150, 126)
    said = run("groups", store, "--broker-version", "4.9.3", "--format", "json").stderr
    assert "groupOK: the next pulls deliver 150 message(s) again and skip 0 (disk)" in said
    # 5.x resets to the max too, and stores no event record.
    five = groups(run_json("groups", store, "--broker-version", "5.3.3", expect=1))
    assert queues(five["groupOK"])[("TopicA", 0)]["next_pull"]["next_offset"] == 75
    assert any("only logs it" in f for f in five["groupOK"]["findings"])


# --- synth stores ---------------------------------------------------------------------------------


def test_offset_below_a_deleted_queue_head_is_too_small(tmp_path: Path) -> None:
    """Orders/0 starts at queue offset 5 (the commitlog's first file deleted by retention):
    committed 2 resets to 5 and the 3 messages between were never read."""
    layout = replace(SMALL_LAYOUT, commitlog_start_offset=SMALL_LAYOUT.commitlog_file_size)
    with StoreWriter(tmp_path / "s", layout) as w:
        w.set_queue_offset("Orders", 0, 5)
        for spec in orders(6, queues=1):
            w.put(spec)
        w.set_consumer_offsets({"Orders@g": {0: 2}})
    doc = run_json("groups", tmp_path / "s", expect=1)
    row = queues(groups(doc)["g"])[("Orders", 0)]
    assert (row["min_offset"], row["max_offset"], row["lag"]) == (5, 11, 9)
    assert row["next_pull"] == {
        "status": "OFFSET_TOO_SMALL",
        "next_offset": 5,
        "moved": True,
        "replayed": 0,
        "skipped": 3,
    }
    assert row["pending"] == 6 and row["last_consumed_store_timestamp"] is None
    assert groups(doc)["g"]["skipped"] == 3


def _event(group: str, queue_id: int, request: int, new: int) -> bytes:
    return (
        f'{{"consumerGroup":"{group}","messageQueue":{{"brokerName":"broker-a",'
        f'"queueId":{queue_id},"topic":"Orders"}},"offsetNew":{new},"offsetRequest":{request}}}'
    ).encode()


def test_offset_moved_events_are_listed_per_group(tmp_path: Path) -> None:
    specs = [
        *orders(4),
        MessageSpec(topic="OFFSET_MOVED_EVENT", body=_event("g", 1, 80, 2)),
        MessageSpec(topic="OFFSET_MOVED_EVENT", body=_event("other", 0, 9, 0)),
    ]
    store = build_store(tmp_path / "s", specs, consumer_offsets={"Orders@g": {0: 2, 1: 2}})
    doc = run_json("groups", store, expect=0)  # history, not a finding
    assert doc["moved_event_source"] == "its consume queue on disk"
    (event,) = groups(doc)["g"]["moved_events"]
    assert event["queue_offset"] == 0 and event["problem"] is None
    assert event["event"] == {
        "consumer_group": "g",
        "topic": "Orders",
        "queue_id": 1,
        "broker_name": "broker-a",
        "offset_request": 80,
        "offset_new": 2,
    }
    assert event["store_timestamp"] > 0 and event["store_time"].endswith("Z")
    # A group named only by an event record is listed with it: its history is the evidence.
    (other,) = groups(doc)["other"]["moved_events"]
    assert (other["event"]["offset_request"], other["event"]["offset_new"]) == (9, 0)
    assert groups(doc)["other"]["queues"] == []


def test_a_malformed_event_body_is_a_finding(tmp_path: Path) -> None:
    specs = [
        *orders(2),
        MessageSpec(topic="OFFSET_MOVED_EVENT", body=b'{"consumerGroup":"g","offsetNew":"x"}'),
        MessageSpec(topic="OFFSET_MOVED_EVENT", body=b"\xff not json"),
    ]
    store = build_store(tmp_path / "s", specs, consumer_offsets={"Orders@g": {0: 1}})
    result = run("groups", store, "--format", "json")
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert len(doc["problems"]) == 2
    assert "queue offset 0" in doc["problems"][0] and "messageQueue: missing" in doc["problems"][0]
    assert "not an OffsetMovedEvent" in doc["problems"][1]
    assert "Traceback" not in result.stderr


def test_after_restart_judges_the_rebuilt_queues(tmp_path: Path) -> None:
    """A crash left 4 of queue 0's 10 messages undispatched: committed 10 is past the max on
    disk (6), a reset, but caught up with the queue the restart rebuilds (10)."""
    specs = orders(20)
    for spec in specs[12:]:
        spec.dispatch = False
    store = build_store(
        tmp_path / "s", specs, crash=True, consumer_offsets={"Orders@g": {0: 10, 1: 7}}
    )
    disk = queues(groups(run_json("groups", store, "--broker-version", "4.9.3", expect=1))["g"])
    assert disk[("Orders", 0)]["next_pull"]["status"] == "OFFSET_OVERFLOW_BADLY"
    assert disk[("Orders", 0)]["next_pull"]["next_offset"] == 0  # before 4.9.4, min 0
    doc = run_json("groups", store, "--broker-version", "4.9.3", "--after-restart", expect=0)
    assert doc["view"] == "after restart"
    assert doc["restart"] == {"broker_starts": True, "recovery_path": "abnormal", "refusal": None}
    after = queues(groups(doc)["g"])
    q0, q1 = after[("Orders", 0)], after[("Orders", 1)]
    assert (q0["max_offset"], q0["max_offset_after_restart"], q0["lag_after_restart"]) == (6, 10, 0)
    assert q0["next_pull_after_restart"]["status"] == "OFFSET_OVERFLOW_ONE"
    assert (q1["next_pull_after_restart"]["status"], q1["pending"]) == ("FOUND", 3)
    assert groups(doc)["g"]["lag"] == 3 and groups(doc)["g"]["replayed"] == 0


def test_retry_queues_without_a_committed_offset_are_read_again(tmp_path: Path) -> None:
    """The corpus's consume_crash: no %RETRY% entry persisted, and the restarted group read its
    retry queue from 0. POP retry topics (5.x KeyBuilder: _ and +) are the group's too."""
    specs = [
        *orders(4),
        *[MessageSpec(topic="%RETRY%g", body=b"again", reconsume_times=1) for _ in range(3)],
        MessageSpec(topic="%RETRY%g_Orders", body=b"pop"),
        MessageSpec(topic="%RETRY%g+Orders", body=b"pop v2"),
        MessageSpec(topic="%RETRY%lonely", body=b"x"),
    ]
    store = build_store(tmp_path / "s", specs, consumer_offsets={"Orders@g": {0: 2, 1: 2}})
    doc = run_json("groups", store, expect=1)
    got = groups(doc)
    assert sorted(got) == ["g", "lonely"]  # a group named only by its retry queue
    rows = queues(got["g"])
    assert {k: r["kind"] for k, r in rows.items()} == {
        ("Orders", 0): "topic",
        ("Orders", 1): "topic",
        ("%RETRY%g", 0): "retry",
        ("%RETRY%g+Orders", 0): "pop_retry",
        ("%RETRY%g_Orders", 0): "pop_retry",
    }
    retry = rows[("%RETRY%g", 0)]
    assert (retry["offset"], retry["pending"], retry["flagged"]) == (None, 3, True)
    assert retry["next_pull"]["status"] == "FOUND" and retry["next_pull"]["next_offset"] == 0
    assert got["g"]["retry_backlog"] == 5 and got["g"]["replayed"] == 5
    assert any("retry queue starts at 0" in f for f in got["g"]["findings"])


def test_a_topic_queue_without_an_offset_is_left_to_consume_from_where(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(6, queues=3), consumer_offsets={"Orders@g": {0: 2}})
    rows = queues(groups(run_json("groups", store, expect=0))["g"])
    q2 = rows[("Orders", 2)]
    assert (q2["offset"], q2["next_pull"], q2["flagged"]) == (None, None, False)
    assert "ConsumeFromWhere" in q2["notes"][0]


def test_no_consumer_offsets_is_one_line(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(4))
    result = run("groups", store, "--format", "table")
    assert (result.exit_code, result.stdout) == (
        0,
        "no consumer groups: no consumer offsets, retry or DLQ queues\n",
    )
    assert run_json("groups", store, expect=0)["groups"] == []


def test_an_unknown_group_exits_1_with_one_line(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(4), consumer_offsets={"Orders@g": {0: 1}})
    result = run("groups", store, "--group", "../../etc", "--format", "json")
    assert result.exit_code == 1
    assert "no such group: '../../etc' (groups: g)" in result.stderr
    assert json.loads(result.stdout)["groups"] == []
    assert run("groups", store, "--group", "g", "--format", "json").exit_code == 0


def test_bad_broker_version_is_a_usage_error(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(2))
    result = run("groups", store, "--broker-version", "four")
    assert result.exit_code == 2 and "--broker-version" in result.stderr
    assert "Traceback" not in result.stderr


def _hostile(tmp_path: Path, text: str, bak: str | None = None) -> Path:
    store = build_store(tmp_path / "s", orders(4), consumer_offsets={"Orders@g": {0: 1, 1: 2}})
    (store / "config/consumerOffset.json").write_text(text)
    if bak is not None:
        (store / "config/consumerOffset.json.bak").write_text(bak)
    return store


def test_non_numeric_offset_falls_back_to_the_bak(tmp_path: Path) -> None:
    store = _hostile(tmp_path, '{"offsetTable":{"Orders@g":{0:"one",1:2}}}')
    result = run("groups", store, "--format", "json")
    assert result.exit_code == 1, result.stderr  # the main file's error is a finding
    doc = json.loads(result.stdout)
    assert queues(groups(doc)["g"])[("Orders", 0)]["offset"] == 1  # the .bak the writer left
    assert "loads the .bak" in result.stderr and "Traceback" not in result.stderr


def test_negative_huge_and_path_like_entries(tmp_path: Path) -> None:
    huge = (1 << 63) - 1
    text = '{"offsetTable":{"Orders@g":{0:-5,1:' + str(huge) + '},"../../x@../../y":{0:3}}}'
    store = _hostile(tmp_path, text, bak=text)
    result = run("groups", store, "--format", "json")
    assert result.exit_code == 1, result.stderr
    got = groups(json.loads(result.stdout))
    rows = queues(got["g"])
    assert rows[("Orders", 0)]["next_pull"] is None
    assert "negative" in rows[("Orders", 0)]["notes"][0]
    assert rows[("Orders", 1)]["next_pull"]["status"] == "OFFSET_OVERFLOW_BADLY"
    assert rows[("Orders", 1)]["next_pull"]["next_offset"] == 2
    # A group and topic that look like paths are names only: no queue, an empty one to getMessage.
    odd = queues(got["../../y"])[("../../x", 0)]
    assert (odd["max_offset"], odd["next_pull"]["status"]) == (0, "NO_MESSAGE_IN_QUEUE")
    assert odd["next_pull"]["next_offset"] == 0 and odd["next_pull"]["moved"] is True
    assert "Traceback" not in result.stderr


def test_malformed_subscription_groups_are_a_finding(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(2), consumer_offsets={"Orders@g": {0: 1}})
    for name in ("subscriptionGroup.json", "subscriptionGroup.json.bak"):
        (store / "config" / name).write_text(
            '{"subscriptionGroupTable":{"g":{"retryMaxTimes":"x"}}}'
        )
    result = run("groups", store, "--format", "json")
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert groups(doc)["g"]["subscription"] is None
    assert any("retryMaxTimes" in p for p in doc["problems"])
    assert "Traceback" not in result.stderr


def test_table_names_the_reset(tmp_path: Path, wide_console: None) -> None:
    store = build_store(tmp_path / "s", orders(4), consumer_offsets={"Orders@g": {0: 9}})
    result = run("groups", store, "--format", "table", "--broker-version", "4.9.3")
    assert result.exit_code == 1
    assert "OFFSET_OVERFLOW_BADLY -> 0" in result.stdout
    assert "g (disk)" in result.stdout


# --- export ---------------------------------------------------------------------------------------


def test_group_offsets_export_has_the_commands_rows(tmp_path: Path) -> None:
    """The crash store above, exported: one row per queue of ``groups --after-restart``, the
    next pull on disk and after the restart, for the profile's release (4.9.8)."""
    specs = [MessageSpec(topic="%RETRY%g", body=b"again", reconsume_times=1), *orders(20)]
    for spec in specs[13:]:
        spec.dispatch = False
    store = build_store(
        tmp_path / "s", specs, crash=True, consumer_offsets={"Orders@g": {0: 10, 1: 7}}
    )
    result = run(
        "export", store, tmp_path / "out", "--engine", "arrow", "--tables", "group_offsets"
    )
    assert result.exit_code == 0, result.stderr
    table = read_table(tmp_path / "out", Table.GROUP_OFFSETS)
    got = {(r["group"], r["topic"], r["queue_id"]): r for r in table.to_pylist()}
    doc = run_json("groups", store, "--after-restart", expect=1)
    want = {(q["group"], q["topic"], q["queue_id"]): q for q in groups(doc)["g"]["queues"]}
    assert (
        sorted(got)
        == sorted(want)
        == [("g", "%RETRY%g", 0), ("g", "Orders", 0), ("g", "Orders", 1)]
    )
    for key, q in want.items():
        row = got[key]
        for name in ("kind", "offset", "bak_offset", "min_offset", "max_offset", "lag"):
            assert row[name] == q[name], (key, name)
        for suffix, pull in (
            ("", q["next_pull"]),
            ("_after_restart", q["next_pull_after_restart"]),
        ):
            assert row[f"next_pull_status{suffix}"] == pull["status"]
            for name in ("next_offset", "moved", "replayed", "skipped"):
                assert row[f"{name}{suffix}"] == pull[name], (key, name, suffix)
        for name in ("min_offset_after_restart", "max_offset_after_restart", "lag_after_restart"):
            assert row[name] == q[name], (key, name)
        stamp = row["last_consumed_store_timestamp"]
        millis = None if stamp is None else int(stamp.timestamp() * 1000)
        assert millis == q["last_consumed_store_timestamp"]
        assert row["broker_version"] == "4.9.8"
    q0 = got[("g", "Orders", 0)]
    assert (q0["next_pull_status"], q0["next_offset"], q0["moved"]) == (
        "OFFSET_OVERFLOW_BADLY",
        6,
        True,
    )
    assert q0["next_pull_status_after_restart"] == "OFFSET_OVERFLOW_ONE"
    assert got[("g", "%RETRY%g", 0)]["offset"] is None
