"""``rmqinspect lookup`` on writer-built stores: every mode, collisions, missing or broken
indexes, the unindexed tail, usage errors and exit codes."""

from __future__ import annotations

import json
import shutil
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.analysis.lookup import KeyQuery, lookup_key
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec, StoreLayout, StoreWriter
from tests.cli_helpers import build_store, orders, run, run_json, run_jsonl

STORE_HOST = HostAddress(bytes([10, 0, 0, 7]), 10911)


def _layout() -> StoreLayout:
    from tests.cli_helpers import SMALL_LAYOUT

    return StoreLayout(
        profile=SMALL_LAYOUT.profile,
        commitlog_file_size=SMALL_LAYOUT.commitlog_file_size,
        cq_file_size=SMALL_LAYOUT.cq_file_size,
        index_slot_num=SMALL_LAYOUT.index_slot_num,
        index_num=SMALL_LAYOUT.index_num,
        store_host=STORE_HOST,
    )


def _store(tmp_path: Path, specs: list[MessageSpec] | None = None) -> Path:
    return build_store(tmp_path / "s", specs if specs is not None else orders(20), _layout())


def test_msg_id_finds_the_record_and_checks_the_host(tmp_path: Path) -> None:
    store = _store(tmp_path)
    target = run_jsonl("messages", store, expect=0)[7]
    doc = run_json("lookup", store, "--msg-id", target["msg_id"], expect=0)
    assert doc["found"] is True
    assert doc["messages"][0]["physical_offset"] == target["physical_offset"]
    assert doc["messages"][0]["via"] == "physical_offset"
    other = encode_offset_msg_id(
        HostAddress(bytes([10, 0, 0, 8]), 10911), target["physical_offset"]
    )
    result = run("lookup", store, "--msg-id", other, "--format", "json")
    assert result.exit_code == 1
    rejected = json.loads(result.stdout)["rejected"][0]
    assert "10.0.0.7:10911" in rejected["reason"] and "--uniq-key" in rejected["reason"]
    assert "nothing found" in result.stderr
    assert run("lookup", store, "--msg-id", "nothex").exit_code == 2


def test_phy_offset_and_queue_offset(tmp_path: Path) -> None:
    store = _store(tmp_path)
    target = run_jsonl("messages", store, expect=0)[4]
    by_phy = run_json("lookup", store, "--phy-offset", str(target["physical_offset"]), expect=0)
    assert by_phy["messages"][0]["uniq_key"] == target["uniq_key"]
    miss = run("lookup", store, "--phy-offset", str(target["physical_offset"] + 3))
    assert miss.exit_code == 1
    ref = f"{target['topic']}:{target['queue_id']}:{target['queue_offset']}"
    by_queue = run_json("lookup", store, "--queue-offset", ref, expect=0)
    assert by_queue["messages"][0]["physical_offset"] == target["physical_offset"]
    beyond = run("lookup", store, "--queue-offset", "Orders:0:999", "--format", "json")
    assert beyond.exit_code == 1 and "outside" in beyond.stderr
    assert run("lookup", store, "--queue-offset", "Orders:x:1").exit_code == 2


def test_key_and_uniq_key_via_the_index(tmp_path: Path) -> None:
    store = _store(tmp_path)
    doc = run_json("lookup", store, "--key", "ORDER-5", "--topic", "Orders", expect=0)
    (hit,) = doc["messages"]
    assert hit["keys"] == ["ORDER-5"] and hit["via"] == "index"
    assert doc["index"]["state"] == "ok" and doc["index"]["broker_offsets"] == [
        hit["physical_offset"]
    ]
    uniq = hit["uniq_key"]
    # Without --topic every known topic is tried.
    by_uniq = run_json("lookup", store, "--uniq-key", uniq, expect=0)
    assert [m["physical_offset"] for m in by_uniq["messages"]] == [hit["physical_offset"]]
    assert "Orders" in by_uniq["query"]["topics"]
    offset_id = hit["msg_id"]
    confused = run("lookup", store, "--uniq-key", offset_id, "--topic", "Orders")
    assert confused.exit_code == 1 and "try --msg-id" in confused.stderr
    wrong_topic = run("lookup", store, "--key", "ORDER-5", "--topic", "Other")
    assert wrong_topic.exit_code == 1 and "no such topic: 'Other'" in wrong_topic.stderr


def test_hash_collisions_are_rejected_with_the_reason(tmp_path: Path) -> None:
    # "Aa" and "BB" have the same Java hash, so "T#Aa" and "T#BB" share every index slot.
    specs = [
        MessageSpec(topic="T", keys="Aa", body=b"a"),
        MessageSpec(topic="T", keys="BB", body=b"b"),
    ]
    store = _store(tmp_path, specs)
    doc = run_json("lookup", store, "--key", "Aa", "--topic", "T", expect=0)
    assert [m["body"] for m in doc["messages"]] == ["a"]
    assert len(doc["index"]["broker_offsets"]) == 2
    (rej,) = doc["rejected"]
    assert "hash collision" in rej["reason"] and rej["message"]["keys"] == ["BB"]


def test_missing_index_says_so_and_scan_finds_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    shutil.rmtree(store / "index")
    result = run("lookup", store, "--key", "ORDER-3", "--topic", "Orders", "--format", "json")
    assert result.exit_code == 1
    assert "no index files" in result.stderr and "--scan" in result.stderr
    assert json.loads(result.stdout)["suggest_scan"] is True
    scanned = run_json("lookup", store, "--key", "ORDER-3", "--topic", "Orders", "--scan", expect=0)
    assert [m["keys"] for m in scanned["messages"]] == [["ORDER-3"]]
    assert scanned["scanned"] is True and scanned["messages"][0]["via"] == "scan"


def test_broken_index_chain_is_reported_and_does_not_hang(tmp_path: Path) -> None:
    store = _store(tmp_path)
    (path,) = (store / "index").iterdir()
    data = bytearray(path.read_bytes())
    for n in range(1, 41):  # every entry points to itself: a cycle in every bucket
        struct.pack_into(">i", data, 40 + 64 * 4 + n * 20 + 16, n)
    path.write_bytes(bytes(data))
    result = run("lookup", store, "--key", "ORDER-1", "--topic", "Orders", "--format", "json")
    doc = json.loads(result.stdout)
    assert doc["index"]["state"] == "damaged"
    assert "corrupt hash chain" in result.stderr and "self loop" in result.stderr


def test_unindexed_tail_is_scanned(tmp_path: Path) -> None:
    specs = orders(10)
    for spec in specs[6:]:
        spec.dispatch = False  # the reput service had not reached these (a crash)
    store = build_store(tmp_path / "s", specs, _layout(), crash=True)
    doc = run_json("lookup", store, "--key", "ORDER-8", "--topic", "Orders", expect=0)
    (hit,) = doc["messages"]
    assert hit["via"] == "tail_scan" and doc["tail_scanned"] is not None
    assert doc["index"]["broker_offsets"] == []
    by_queue = run_json("lookup", store, "--queue-offset", "Orders:0:4", expect=0)
    assert by_queue["messages"][0]["keys"] == ["ORDER-8"]
    assert by_queue["messages"][0]["via"] == "tail_scan"


def test_time_range(tmp_path: Path) -> None:
    specs = [
        MessageSpec(topic="T", queue_id=i % 3, body=f"{i}".encode(), store_timestamp=1_000_000 + i)
        for i in range(30)
    ]
    store = _store(tmp_path, specs)
    doc = run_json("lookup", store, "--time", "1000010..1000014", "--topic", "T", expect=0)
    assert [m["body"] for m in doc["messages"]] == ["10", "11", "12", "13", "14"]
    scanned = run_json(
        "lookup", store, "--time", "1000010..1000014", "--topic", "T", "--scan", expect=0
    )
    assert [m["body"] for m in scanned["messages"]] == ["10", "11", "12", "13", "14"]
    limited = run_json("lookup", store, "--time", "..", "--topic", "T", "--limit", "4", expect=0)
    assert len(limited["messages"]) == 4 and limited["truncated"] is True
    none = run("lookup", store, "--time", "1..2", "--topic", "T")
    assert none.exit_code == 1


def test_usage_errors_and_output_formats(tmp_path: Path) -> None:
    store = _store(tmp_path)
    both = run("lookup", store, "--key", "a", "--uniq-key", "b", "--topic", "Orders")
    assert both.exit_code == 2 and "exactly one" in both.stderr
    assert run("lookup", store).exit_code == 2
    assert run("lookup", store, "--key", "a").exit_code == 2
    assert run("lookup", store, "--time", "5", "--topic", "T").exit_code == 2
    assert run("lookup", store, "--phy-offset", "0", "--as-recovered").exit_code == 2
    lines = run_jsonl("lookup", store, "--key", "ORDER-2", "--topic", "Orders", expect=0)
    assert len(lines) == 1 and lines[0]["keys"] == ["ORDER-2"]
    table = run("lookup", store, "--key", "ORDER-2", "--topic", "Orders", "--format", "table")
    assert table.exit_code == 0 and "ORDER-2" in table.stdout
    recovered = run_json(
        "lookup", store, "--key", "ORDER-2", "--topic", "Orders", "--as-recovered", expect=0
    )
    assert [m["keys"] for m in recovered["messages"]] == [["ORDER-2"]]


def test_full_size_index_lookup_touches_only_slot_and_chain(tmp_path: Path) -> None:
    """Default geometry: 420,000,040-byte index file and a 1 GiB commitlog (sparse on disk)."""
    with StoreWriter(tmp_path / "big", StoreLayout()) as w:
        for spec in orders(50):
            w.put(spec)
    (index_file,) = (tmp_path / "big" / "index").iterdir()
    assert index_file.stat().st_size == 420_000_040
    with Store.open(tmp_path / "big") as store:
        rss_before = _rss_file_kib()
        tracemalloc.start()
        result = lookup_key(store, KeyQuery("ORDER-17", ("Orders",), False, 64))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss_growth = _rss_file_kib() - rss_before
    assert [h.record.keys for h in result.hits] == [["ORDER-17"]]
    assert peak < 8 << 20  # nothing close to a copy of the file
    if rss_before >= 0:
        assert rss_growth < 16 << 10  # file pages mapped in: a few, not 400 MiB


def _rss_file_kib() -> int:
    """Resident file-backed pages of this process (Linux), -1 where unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("RssFile:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def test_reversed_ranges_are_usage_errors(tmp_path: Path) -> None:
    store = _store(tmp_path)
    cases = {
        "--since/--until": ["--since", "2024-05-01T10:05", "--until", "2024-05-01T10:00"],
        "--time": ["--time", "2024-05-01T10:05..2024-05-01T10:00"],  # the old spelling
        "--key --since/--until": ["--key", "ORDER-2", "--since", "9", "--until", "1"],
        "--key --begin/--end": ["--key", "ORDER-2", "--begin", "9", "--end", "1"],
    }
    for what, args in cases.items():
        result = run("lookup", store, *args, "--topic", "Orders")
        said = "--time" if what == "--time" else "--since/--until"
        assert result.exit_code == 2, what
        assert result.stdout == "" and f"{said}: the start" in result.stderr, what
    # An empty window the right way round is a question with no answer: exit 1.
    assert run("lookup", store, "--time", "5..5", "--topic", "Orders").exit_code == 1


def test_time_range_reaches_past_the_consume_queues(tmp_path: Path) -> None:
    specs = [
        MessageSpec(topic="T", queue_id=i % 2, body=f"{i}".encode(), store_timestamp=1_000_000 + i)
        for i in range(12)
    ]
    for spec in specs[8:]:
        spec.dispatch = False  # stored, not yet in the consume queues (a crash)
    store = build_store(tmp_path / "s", specs, _layout(), crash=True)
    doc = run_json("lookup", store, "--time", "1000006..1000010", "--topic", "T", expect=0)
    assert [(m["body"], m["via"]) for m in doc["messages"]] == [
        ("6", "consume_queue"),
        ("7", "consume_queue"),
        ("8", "tail_scan"),
        ("9", "tail_scan"),
        ("10", "tail_scan"),
    ]
    assert doc["tail_scanned"] is not None and doc["suggest_scan"] is False
    limited = run_json(
        "lookup", store, "--time", "1000006..", "--topic", "T", "--limit", "3", expect=0
    )
    assert [m["body"] for m in limited["messages"]] == ["6", "7", "8"] and limited["truncated"]
    # A topic only the tail holds has no consume queue at all.
    late = [*specs, MessageSpec(topic="New", body=b"n", store_timestamp=1_000_020, dispatch=False)]
    store = build_store(tmp_path / "late", late, _layout(), crash=True)
    new = run_json("lookup", store, "--time", "..", "--topic", "New", expect=0)
    assert [(m["body"], m["via"]) for m in new["messages"]] == [("n", "tail_scan")]


def test_max_num_is_honoured_and_a_cut_answer_says_so(tmp_path: Path) -> None:
    def hot(n: int, dispatched: int) -> list[MessageSpec]:
        return [
            MessageSpec(
                topic="Orders",
                body=f"{i}".encode(),
                keys="HOT",
                store_timestamp=1_000_000 + i,
                dispatch=i < dispatched,
            )
            for i in range(n)
        ]

    # 44 match: the index holds 41 of them, the commitlog tail 3 more (a crash).
    store = build_store(tmp_path / "a", hot(44, 41), _layout(), crash=True)
    args = ("lookup", store, "--key", "HOT", "--topic", "Orders", "--max-num", "32")
    doc = run_json(*args, expect=0)
    # The 32 newest, as the broker answers once it has indexed the tail.
    assert [m["body"] for m in doc["messages"]] == [str(i) for i in range(12, 44)]
    assert [m["via"] for m in doc["messages"]][-4:] == ["index", *["tail_scan"] * 3]
    assert doc["truncated"] is True
    assert "more than 32 messages match" in run(*args, "--format", "json").stderr
    # The index alone holding more than asked for is a cut answer too.
    clean = build_store(tmp_path / "b", hot(40, 40), _layout())
    cut = run_json(
        "lookup", clean, "--key", "HOT", "--topic", "Orders", "--max-num", "32", expect=0
    )
    assert len(cut["messages"]) == 32 and cut["truncated"] is True
    # Exactly as many as asked for: nothing is cut.
    exact = build_store(tmp_path / "c", hot(32, 32), _layout())
    whole = run_json(
        "lookup", exact, "--key", "HOT", "--topic", "Orders", "--max-num", "32", expect=0
    )
    assert len(whole["messages"]) == 32 and whole["truncated"] is False
    assert whole["warnings"] == []


def test_time_lookup_passes_a_queue_range_of_zeros_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker range over preallocated files of zeros (it trusts all but the last three
    files): the search and the walk resolved each zero unit, minutes for a million of them.
    A run of zeros is one gap now, walked in the commitlog once."""
    from dataclasses import replace

    from rmqinspect.analysis import units
    from rmqinspect.analysis.lookup import direct
    from tests.cli_helpers import SMALL_LAYOUT

    resolved = 0
    original = units.resolve_unit

    def counted(*args: Any, **kwargs: Any) -> units.UnitView:
        nonlocal resolved
        resolved += 1
        assert resolved <= 100, "a unit resolved one at a time"
        return original(*args, **kwargs)

    monkeypatch.setattr(direct, "resolve_unit", counted)
    store = build_store(
        tmp_path / "s", orders(8, queues=1), replace(SMALL_LAYOUT, cq_file_size=6_000_000)
    )
    directory = store / "consumequeue" / "Orders" / "0"
    (directory / f"{0:020d}").rename(directory / f"{22 * 6_000_000:020d}")
    for i in range(22):
        with open(directory / f"{i * 6_000_000:020d}", "wb") as empty:
            empty.truncate(6_000_000)
    result = run("lookup", store, "--time", "0..9999999999999", "-t", "Orders", "-F", "json")
    assert result.exit_code == 0, result.stderr
    assert "queue offsets 0..5999999 do not lead to a message" in result.stderr
    assert len(json.loads(result.stdout)["messages"]) == 8  # found by the walk of the gap
