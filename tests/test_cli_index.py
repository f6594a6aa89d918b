"""``rmqinspect index``: headers, geometry, occupancy and chain statistics, entries."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from tests.cli_helpers import SMALL_OPTS, build_store, orders, run, run_json, run_jsonl
from tests.corpus import expected, input_store


def test_headers_and_statistics(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(50))
    doc = run_json("index", store, expect=0)
    (f,) = doc["files"]
    # Each message puts its UNIQ_KEY and one key: 100 entries.
    assert f["header"]["entries"] == 100 and f["header"]["index_count"] == 101
    assert f["geometry"] == {"slots": 64, "entries": 400, "basis": "content"}
    stats = f["statistics"]
    assert stats["entries"] == 100 and stats["bad_slots"] == 0
    assert sum(int(n) * c for n, c in stats["chain_histogram"].items()) == 100
    given = run_json("index", store, *SMALL_OPTS, expect=0)
    assert given["files"][0]["geometry"]["basis"] == "given"


def test_entries_listing(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(5))
    rows = run_jsonl("index", store, "--entries", expect=0)
    assert [r["entry"] for r in rows] == list(range(1, 11))
    assert all(r["slot"] == r["key_hash"] % 64 for r in rows)
    assert len(run_jsonl("index", store, "--entries", "--limit", "3", expect=0)) == 3
    doc = run_json("index", store, "--entries", "--limit", "2", expect=0)
    assert len(doc["entries"]) == 2 and len(doc["files"]) == 1


def test_a_broken_chain_is_counted(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(20))
    (path,) = (store / "index").iterdir()
    data = bytearray(path.read_bytes())
    entry5 = 40 + 64 * 4 + 5 * 20
    struct.pack_into(">i", data, entry5 + 16, 9)  # prev points forward
    path.write_bytes(bytes(data))
    stats = run_json("index", store, expect=0)["files"][0]["statistics"]
    assert stats["broken_links"] == 1


def test_unknown_file_and_undecidable_geometry(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(2))
    assert run("index", store, "20990101000000000").exit_code == 2
    (path,) = (store / "index").iterdir()
    odd = store / "index" / "20990101000000000"
    odd.write_bytes(b"\0" * 1234)
    result = run("index", store, odd.name, "--format", "json")
    assert result.exit_code == 0
    assert "pass --index-slots and --index-entries" in result.stderr
    table = run("index", store, path.name, "--format", "table")
    assert table.exit_code == 0 and path.name in table.stdout


def test_real_broker_headers(conformance_dir: Path) -> None:
    store = input_store(conformance_dir, "clean")
    doc = run_json("index", store, expect=0)
    want = expected(conformance_dir, "clean")["before"]["indexFiles"]
    got = [
        (f["name"], f["header"]["index_count"], f["header"]["end_phy_offset"]) for f in doc["files"]
    ]
    assert got == [(w["name"], w["indexCount"], w["endPhyOffset"]) for w in want]
    assert all(f["statistics"]["broken_links"] == 0 for f in doc["files"])


def test_json_is_pretty_printed_like_every_other_command(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(5))
    plain = run("index", store, "--format", "json")
    assert plain.stdout == json.dumps(json.loads(plain.stdout), indent=2, ensure_ascii=False) + "\n"
    listed = run("index", store, "--entries", "--limit", "2", "--format", "json").stdout
    head, entries = listed.split('"entries": [\n')
    assert head.startswith('{\n  "files": [\n    {\n      "file": ')
    assert [json.loads(line.strip().rstrip(",")) for line in entries.splitlines()[:2]] == (
        json.loads(listed)["entries"]
    )
