"""``rmqinspect consumequeue``: units, what they point to, and why some point nowhere."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.analysis.units import UnitView
from rmqinspect.synth.writer import MessageSpec, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT, build_store, orders, run, run_json, run_jsonl


def test_units_resolve_to_their_messages(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(10))
    doc = run_json("consumequeue", store, "Orders", "0", "--body", "text", expect=0)
    assert (doc["queue"]["min_offset"], doc["queue"]["max_offset"]) == (0, 5)
    units = doc["units"]
    assert [u["queue_offset"] for u in units] == list(range(5))
    assert all(u["status"] == "found" and u["tags_code_ok"] for u in units)
    assert [u["message"]["body"] for u in units] == [f"order {i}" for i in range(0, 10, 2)]
    page = run_jsonl("consumequeue", store, "Orders", "1", "--from", "2", "--limit", "2", expect=0)
    assert [u["queue_offset"] for u in page] == [2, 3]
    assert page[0]["message"]["body"] is None  # --body none is the default here


def test_pre_blank_units_and_min_offset(tmp_path: Path) -> None:
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        w.set_queue_offset("Late", 0, 7)
        for i in range(3):
            w.put(MessageSpec(topic="Late", body=f"x{i}".encode()))
    units = run_jsonl("consumequeue", tmp_path / "s", "Late", "0", expect=0)
    assert [u["status"] for u in units] == ["pre_blank"] * 7 + ["found"] * 3
    assert units[7]["message"]["queue_offset"] == 7


def test_units_pointing_nowhere_say_why(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(6, queues=1))
    cq = store / "consumequeue" / "Orders" / "0" / "00000000000000000000"
    data = bytearray(cq.read_bytes())
    phy, size, tags = struct.unpack_from(">qiq", data, 20)
    struct.pack_into(">qiq", data, 20, phy + 1, size, tags)  # not a record boundary
    struct.pack_into(">qiq", data, 40, 10**12, size, tags)  # past the commitlog
    phy3, size3, tags3 = struct.unpack_from(">qiq", data, 60)
    struct.pack_into(">qiq", data, 60, phy3, size3 + 4, tags3)  # wrong size
    struct.pack_into(">qiq", data, 80, phy3, size3, 12345)  # right record, wrong tagsCode
    cq.write_bytes(bytes(data))
    result = run("consumequeue", store, "Orders", "0", "--format", "jsonl")
    assert result.exit_code == 0
    assert "do not lead to their message" in result.stderr
    units = [json.loads(line) for line in result.stdout.splitlines()]
    assert [u["status"] for u in units] == [
        "found",
        "no_record",
        "beyond_commitlog",
        "size_mismatch",
        "other_queue",
        "found",
    ]
    assert units[4]["tags_code_ok"] is False


def test_stale_units_after_the_end_are_counted_and_listed_with_all(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(5, queues=1))
    cq = store / "consumequeue" / "Orders" / "0" / "00000000000000000000"
    data = bytearray(cq.read_bytes())
    data[40:60] = b"\0" * 20  # the queue now ends at unit 2; units 3-4 stay on disk
    cq.write_bytes(bytes(data))
    result = run("consumequeue", store, "Orders", "0", "--format", "jsonl")
    assert result.stdout.count("\n") == 2
    assert "2 non-zero units lie after maxOffset 2" in result.stderr
    everything = run_jsonl("consumequeue", store, "Orders", "0", "--all", expect=0)
    assert [u["status"] for u in everything[:5]] == [
        "found",
        "found",
        "invalid",
        "found",
        "found",
    ]


def test_unknown_queue_is_a_usage_error(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(2))
    result = run("consumequeue", store, "Orders", "7")
    assert result.exit_code == 2
    assert "no consume queue Orders/7" in result.stderr
    # A topic the store does not know is "not found", as in messages, offsets and lookup.
    result = run("consumequeue", store, "Nope", "0")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("rmqinspect: no such topic: 'Nope'")
    table = run("consumequeue", store, "Orders", "0", "--format", "table")
    assert table.exit_code == 0 and "Consume queue Orders/0" in table.stdout


def test_a_run_of_zero_units_is_one_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Units that are all zeros (zeroed units, or files of zeros: preallocated, sparse,
    300,000 units each) are one row that says how many: a broker range over many such files
    listed each unit, billions of rows. Zeros past a file's data are not even read."""
    from rmqinspect.analysis import queue_listing, units

    resolved = 0
    original = units.resolve_unit

    def counted(*args: Any, **kwargs: Any) -> UnitView:
        nonlocal resolved
        resolved += 1
        assert resolved <= 100, "a row per unit"
        return original(*args, **kwargs)

    monkeypatch.setattr(queue_listing, "resolve_unit", counted)
    layout = replace(SMALL_LAYOUT, cq_file_size=6_000_000)
    store = build_store(tmp_path / "s", orders(12, queues=1), layout)
    directory = store / "consumequeue" / "Orders" / "0"
    cq = directory / "00000000000000000000"
    with open(cq, "r+b") as fh:
        fh.seek(40)
        fh.write(bytes(60))  # units 2, 3 and 4
    rows = run_jsonl("consumequeue", store, "Orders", "0", "--all", expect=0)
    assert [(u["queue_offset"], u["status"], u["repeat"]) for u in rows] == [
        (0, "found", 1),
        (1, "found", 1),
        (2, "invalid", 3),
        *[(i, "found", 1) for i in range(5, 12)],
    ]
    # Sparse files of zeros before the queue's own: the broker trusts every file but the last
    # three, so its range covers their units, 6 million of them.
    cq.rename(directory / f"{22 * 6_000_000:020d}")
    for i in range(22):
        with open(directory / f"{i * 6_000_000:020d}", "wb") as empty:
            empty.truncate(6_000_000)
    resolved = 0
    doc = run_json("consumequeue", store, "Orders", "0", expect=0)
    assert doc["queue"]["max_offset"] == 20 * 300_000
    assert [(u["queue_offset"], u["status"], u["repeat"]) for u in doc["units"]] == [
        (0, "invalid", 20 * 300_000)
    ]
