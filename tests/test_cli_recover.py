"""``rmqinspect recover`` through the real typer app: exit codes, JSON schema, --apply-to."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.format.profile import Profile
from rmqinspect.synth import damage
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import SMALL_LAYOUT, SMALL_OPTS, build_store, run

TOP_LEVEL_KEYS = {
    "schema_version",
    "timer",
    "store",
    "profile",
    "profile_reasons",
    "options",
    "broker_starts",
    "load_failures",
    "abort_present",
    "last_exit_ok",
    "last_exit_source",
    "recovery_path",
    "start_file",
    "max_phy_offset_of_consume_queue",
    "cq_truncation",
    "commitlog",
    "consume_queues",
    "index",
    "reput",
    "checkpoint",
    "lost_messages",
    "unreachable_messages",
    "queues_without_consume_queue",
    "warnings",
    "dledger",  # null unless the commitlog is DLedger's
    "loses_data",
    "verdict",
    "verdict_reason",
    "apply",
}

LOST_MESSAGE_FIELDS = [
    "topic",
    "queue_id",
    "queue_offset",
    "physical_offset",
    "store_size",
    "msg_id",
    "uniq_key",
    "keys",
    "tags",
    "store_timestamp",
    "store_time",
    "transaction",
    "file",
    "where",
]


def specs(n: int = 300, dispatched: int | None = None) -> list[MessageSpec]:
    return [
        MessageSpec(
            topic=("TopicA", "TopicB")[i % 2],
            queue_id=(i // 2) % 2,
            body=f"message {i} ".encode() * (5 + i % 30),
            tags="TagA" if i % 3 else None,
            keys=f"K{i}",
            uniq_key=f"{i:032X}",
            store_timestamp=1_790_000_000_000 + 10 * i,
            dispatch=dispatched is None or i < dispatched,
        )
        for i in range(n)
    ]


@pytest.fixture
def clean(tmp_path: Path) -> Path:
    return build_store(tmp_path / "clean", specs())


@pytest.fixture
def crashed(tmp_path: Path) -> Path:
    return build_store(tmp_path / "crash", specs(dispatched=280), crash=True)


def recover_json(*args: str | Path, code: int) -> dict[str, Any]:
    result = run("recover", *args, *SMALL_OPTS, "--format", "json")
    assert result.exit_code == code, result.stderr or result.stdout
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_clean_store_exits_0_with_the_documented_schema(clean: Path) -> None:
    doc = recover_json(clean, code=0)
    assert set(doc) == TOP_LEVEL_KEYS
    assert doc["schema_version"] == 1
    assert doc["recovery_path"] == "normal" and doc["broker_starts"] is True
    assert doc["loses_data"] is False and doc["apply"] is None
    assert doc["dledger"] is None and doc["timer"] is None  # no timer store
    assert doc["lost_messages"] == {
        "count": 0,
        "listed": 0,
        "truncated": False,
        "damaged_records": 0,
        "messages": [],
        "by_where": {},
        "damaged": [],
    }
    assert doc["commitlog"]["min_offset"] == 0
    queue = doc["consume_queues"][0]
    assert set(queue) >= {
        "topic",
        "queue_id",
        "min_offset_after_load",
        "max_offset_after_load",
        "max_offset_after_dispatch",
        "units_truncated",
        "files_deleted",
    }
    assert sum(q["max_offset_after_dispatch"] for q in doc["consume_queues"]) == 300


def test_torn_tail_exits_1_and_names_the_bad_record(clean: Path) -> None:
    d = damage.torn_tail(clean)
    doc = recover_json(clean, code=1)
    bad = doc["commitlog"]["first_bad_record"]
    assert bad["physical_offset"] == d.details["message_offset"] == doc["commitlog"]["max_offset"]
    assert bad["reason"] in ("body_crc_mismatch", "bad_magic")
    assert doc["loses_data"] is True
    # Without the CRC check the torn record still fails, on its zeroed fields: never passes.
    relaxed = recover_json(clean, "--no-check-crc", code=1)
    relaxed_bad = relaxed["commitlog"]["first_bad_record"]
    assert (relaxed_bad["physical_offset"], relaxed_bad["reason"]) == (
        bad["physical_offset"],
        "total_size_mismatch",
    )
    assert relaxed["commitlog"]["max_offset"] == doc["commitlog"]["max_offset"]
    assert relaxed["lost_messages"]["damaged_records"] == 1 and relaxed["loses_data"] is True


def test_flipped_byte_lists_lost_messages_with_limit(clean: Path) -> None:
    damage.flip_body_byte(clean)
    doc = recover_json(clean, "--lost-limit", "2", code=1)
    lost = doc["lost_messages"]
    assert lost["count"] > 2 and lost["listed"] == 2 and lost["truncated"] is True
    m = lost["messages"][0]
    assert list(m) == LOST_MESSAGE_FIELDS
    assert m["store_time"].endswith("Z")
    assert m["physical_offset"] > doc["commitlog"]["max_offset"]
    # jsonl: the listed lost messages, one per line, as they stand in the JSON report.
    lines = run("recover", clean, *SMALL_OPTS, "--lost-limit", "2", "--format", "jsonl")
    assert lines.exit_code == 1
    assert [json.loads(line) for line in lines.stdout.splitlines()] == lost["messages"]
    assert f"2 of {lost['count']} lost messages listed" in lines.stderr
    # --no-check-crc: the broker keeps the flipped record, nothing is lost.
    doc = recover_json(clean, "--no-check-crc", code=0)
    assert doc["lost_messages"]["count"] == 0


def test_crash_store_exits_0_and_assume_flags_override_abort(crashed: Path) -> None:
    doc = recover_json(crashed, code=0)
    assert doc["recovery_path"] == "abnormal" and doc["last_exit_source"] == "abort_file"
    assert doc["index"]["deleted_files"]
    forced = recover_json(crashed, "--assume-clean", code=0)
    assert forced["recovery_path"] == "normal" and forced["last_exit_source"] == "assume_clean"
    assert forced["index"]["deleted_files"] == []
    result = run("recover", crashed, "--assume-clean", "--assume-crash")
    assert result.exit_code == 2


def test_assume_crash_on_clean_store(clean: Path) -> None:
    doc = recover_json(clean, "--assume-crash", code=0)
    assert doc["recovery_path"] == "abnormal" and doc["last_exit_ok"] is False
    assert doc["abort_present"] is False


@pytest.mark.parametrize("profile", ["4.9", "5.1", "5.3"])
def test_profile_option(clean: Path, profile: str) -> None:
    doc = recover_json(clean, "--profile", profile, code=0)
    assert doc["profile"] == profile
    assert doc["profile_reasons"] == ["given explicitly"]


def test_message_index_safe_pulls_the_start_file_back(crashed: Path) -> None:
    plain = recover_json(crashed, code=0)
    safe = recover_json(crashed, "--message-index-safe", code=0)
    assert safe["options"]["message_index_safe"] is True
    assert safe["start_file"]["offset"] <= plain["start_file"]["offset"]


def test_unreadable_input_exits_2(tmp_path: Path) -> None:
    result = run("recover", tmp_path / "missing")
    assert result.exit_code == 2
    assert "rmqinspect: error:" in result.stderr
    (tmp_path / "empty").mkdir()
    assert run("recover", tmp_path / "empty").exit_code == 2


def test_broker_refusing_to_start_exits_1(clean: Path) -> None:
    victim = sorted((clean / "commitlog").iterdir())[0]
    with open(victim, "r+b") as fh:
        fh.truncate(1000)
    doc = recover_json(clean, code=1)
    assert doc["broker_starts"] is False
    assert doc["load_failures"][0]["kind"] == "wrong_size"
    assert doc["verdict"] == "refuses_to_start"
    assert doc["verdict_reason"].startswith("the broker refuses to start: ")
    assert doc["commitlog"]["max_offset"] is None and doc["commitlog"]["last_file"] is None
    table = run("recover", clean, *SMALL_OPTS, "--format", "table")
    assert "the broker refuses to start" in table.stdout
    assert "nothing is lost" not in table.stdout and "commitlog end" not in table.stdout
    lines = run("recover", clean, *SMALL_OPTS, "--format", "jsonl")
    assert (lines.exit_code, lines.stdout) == (1, "")
    assert "the broker refuses to start: " in lines.stderr
    result = run("recover", clean, *SMALL_OPTS, "--apply-to", clean.parent / "out")
    assert result.exit_code == 1
    assert "refuse to start" in result.stderr
    assert not (clean.parent / "out").exists()


def test_table_output(clean: Path, wide_console: None) -> None:
    damage.flip_body_byte(clean)
    result = run("recover", clean, *SMALL_OPTS, "--format", "table")
    assert result.exit_code == 1
    assert "Restart recovery" in result.stdout
    assert "Messages the restart destroys" in result.stdout
    # Flags read yes/no in a table, as the rest of it does (JSON keeps true/false).
    assert "True" not in result.stdout and "False" not in result.stdout
    assert re.search(r"last exit ok\s+│ (yes|no) \(", result.stdout)
    assert re.search(r"consume queues truncated to the end\s+│ (yes|no) ", result.stdout)


@pytest.mark.parametrize(
    ("kind", "code"),
    # Units past the commitlog end point at nothing: truncating them loses no message.
    [("crash", 0), ("torn", 1), ("flip", 1), ("cq_ahead", 0)],
)
def test_apply_to_round_trip(
    clean: Path, crashed: Path, tmp_path: Path, kind: str, code: int
) -> None:
    store = crashed if kind == "crash" else clean
    if kind == "torn":
        damage.torn_tail(store)
        damage.set_abort(store, present=True)
    elif kind == "flip":
        damage.flip_body_byte(store)
    elif kind == "cq_ahead":
        damage.cq_ahead_of_commitlog(store, "TopicA", 0)
    before = tree_digest(store)
    dest = tmp_path / "after"
    first = run("recover", store, *SMALL_OPTS, "--apply-to", dest, "--format", "json")
    assert first.exit_code == code, first.stderr
    doc = json.loads(first.stdout)
    assert doc["loses_data"] is bool(code)
    assert doc["apply"]["verification_noop"] is True, doc["apply"]["verification_differences"]
    assert tree_digest(store) == before  # STORE untouched
    assert not (dest / "abort").exists()
    # Recovering the written directory is a clean no-op.
    again = recover_json(dest, code=0)
    assert again["recovery_path"] == "normal"
    assert again["commitlog"]["max_offset"] == doc["commitlog"]["max_offset"]
    assert again["commitlog"]["deleted_files"] == []
    assert again["lost_messages"]["count"] == 0 and again["index"]["deleted_files"] == []
    assert {
        (q["topic"], q["queue_id"]): q["max_offset_after_dispatch"] for q in again["consume_queues"]
    } == {
        (q["topic"], q["queue_id"]): q["max_offset_after_dispatch"] for q in doc["consume_queues"]
    }
    assert all(
        q["units_truncated"] == q["units_written_at_load"] == q["units_written_after_start"] == 0
        for q in again["consume_queues"]
    )
    # Another command reads the same store the same way.
    info = run("info", dest, *SMALL_OPTS, "--format", "json")
    assert info.exit_code == 0, info.stderr
    inv = json.loads(info.stdout)
    assert inv["commitlog"]["max_offset"] == again["commitlog"]["max_offset"]
    assert inv["shutdown"]["clean"] is True
    queues = {(q["topic"], q["queue_id"]): q for t in inv["topics"] for q in t["queues"]}
    for q in again["consume_queues"]:
        got = queues[(q["topic"], q["queue_id"])]
        assert (got["min_offset"], got["max_offset"]) == (
            q["min_offset_after_start"],
            q["max_offset_after_dispatch"],
        )


def test_apply_to_refuses_bad_destinations(clean: Path, tmp_path: Path) -> None:
    before = tree_digest(clean)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("keep")
    result = run("recover", clean, *SMALL_OPTS, "--apply-to", busy)
    assert result.exit_code == 2 and "empty directory" in result.stderr
    assert (busy / "x").read_text() == "keep"
    inside = clean / "restored"
    result = run("recover", clean, *SMALL_OPTS, "--apply-to", inside)
    assert result.exit_code == 2 and "outside" in result.stderr
    assert not inside.exists()
    assert run("recover", clean, *SMALL_OPTS, "--apply-to", clean).exit_code == 2
    assert tree_digest(clean) == before


def test_apply_to_empty_existing_directory(clean: Path, tmp_path: Path) -> None:
    dest = tmp_path / "empty"
    dest.mkdir()
    result = run("recover", clean, *SMALL_OPTS, "--apply-to", dest, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert (dest / "commitlog").is_dir()
    assert json.loads(result.stdout)["apply"]["verification_noop"] is True


def _change_a_property(
    store: Path, physical_offset: int, size: int, old: bytes, new: bytes
) -> None:
    """Rewrite one property value of the record at ``physical_offset`` in place (same length):
    the body CRC still holds, the record's __CRC32# property does not."""
    (path,) = [p for p in (store / "commitlog").iterdir() if int(p.name) <= physical_offset][-1:]
    data = bytearray(path.read_bytes())
    start = physical_offset - int(path.name)
    at = data.index(old, start, start + size)
    data[at : at + len(old)] = new
    path.write_bytes(bytes(data))


def test_force_verify_prop_crc_cuts_at_a_changed_property(tmp_path: Path) -> None:
    layout = dataclasses.replace(SMALL_LAYOUT, profile=Profile.V5_3, append_prop_crc=True)
    store = build_store(tmp_path / "s", specs(60), layout)
    listed = json.loads(run("messages", store, "--format", "json").stdout)
    victim = next(m for m in listed[40:] if m["tags"] == "TagA")
    _change_a_property(store, victim["physical_offset"], victim["store_size"], b"TagA", b"TagX")
    after = json.loads(run("messages", store, "--format", "json").stdout)
    changed = [m for m in after if m["prop_crc_ok"] is False]
    assert [m["physical_offset"] for m in changed] == [victim["physical_offset"]]
    assert changed[0]["body_crc_ok"] is True and changed[0]["tags"] == "TagX"
    assert changed[0]["prop_crc"] == victim["prop_crc"] is not None
    assert all(m["prop_crc_ok"] is True for m in after if m is not changed[0])
    # Without the switch the broker checks body CRCs only: nothing is cut.
    plain = recover_json(store, code=0)
    assert plain["options"]["force_verify_prop_crc"] is False
    assert plain["options"]["check_crc_on_recover"] is True
    end = after[-1]["physical_offset"] + after[-1]["store_size"]
    assert plain["commitlog"]["max_offset"] == end and plain["lost_messages"]["count"] == 0
    # With it, recovery stops at the record whose property changed: that record is damaged
    # (with why), every intact one after it is lost.
    forced = recover_json(store, "--force-verify-prop-crc", code=1)
    assert forced["options"]["force_verify_prop_crc"] is True
    assert forced["commitlog"]["max_offset"] == victim["physical_offset"]
    bad = forced["commitlog"]["first_bad_record"]
    assert bad["reason"] == "prop_crc_mismatch"
    later = [
        m["physical_offset"] for m in after if m["physical_offset"] > victim["physical_offset"]
    ]
    lost = forced["lost_messages"]
    assert sorted(m["physical_offset"] for m in lost["messages"]) == later
    assert {m["where"] for m in lost["messages"]} == {"past_end"}
    assert lost["damaged_records"] == 1 and lost["damaged"] == [bad]


def test_force_verify_prop_crc_needs_a_broker_that_has_it(clean: Path) -> None:
    result = run("recover", clean, "--force-verify-prop-crc")
    assert result.exit_code == 2
    assert "a 4.9 broker has no forceVerifyPropCRC" in result.stderr


def test_force_verify_prop_crc_on_the_real_5_3_store_written_with_it(
    conformance5_dir: Path, tmp_path: Path
) -> None:
    # clean5_propcrc: every record's property CRC is right, so the switch changes nothing (the
    # real 5.3.3 recovery kept the end at 1,284,176). A copy with one property value changed in
    # the last file is cut there.
    original = conformance5_dir / "stores" / "clean5_propcrc"
    intact = recover_json(original, "--force-verify-prop-crc", code=0)
    assert intact["commitlog"]["max_offset"] == 1_284_176
    store = tmp_path / "store"
    shutil.copytree(original, store)
    rows = json.loads(run("messages", store, "--from", "1100000", "--format", "json").stdout)
    victim = next(m for m in rows if m["tags"] == "TagA")
    _change_a_property(store, victim["physical_offset"], victim["store_size"], b"TagA", b"TagX")
    assert recover_json(store, code=0)["commitlog"]["max_offset"] == 1_284_176
    forced = recover_json(store, "--force-verify-prop-crc", code=1)
    assert forced["commitlog"]["max_offset"] == victim["physical_offset"]
    assert forced["commitlog"]["first_bad_record"]["reason"] == "prop_crc_mismatch"
