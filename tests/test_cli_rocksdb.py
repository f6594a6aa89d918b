"""RocksDB consume queues (``storeType=defaultRocksDB``, docs/rocksdb-consume-queue.md): the
commands that read queues answer from the database, fact by fact as the writer placed it, and
never write a byte into the store (RocksDB's LOCK, LOG and OPTIONS, and the binding's config
file, included); hostile databases and entries are one line or a warning, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rocksdict import Rdict

from rmqinspect.format.rocksdb_cq import (
    encode_offset_key,
    encode_offset_value,
    encode_unit_key,
    encode_unit_value,
)
from rmqinspect.store.layout import QueueId
from rmqinspect.synth.rocksdb import RocksPlaced, file_units, move_queues_to_rocksdb
from tests.cli_helpers import (
    SMALL_OPTS,
    build_store,
    delays_exit,
    orders,
    run,
    run_json,
    tree_state,
)

ORDERS = (QueueId("Orders", 0), QueueId("Orders", 1))


@pytest.fixture(scope="module")
def rocks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RocksPlaced]:
    store = build_store(
        tmp_path_factory.mktemp("rocks") / "s",
        orders(9),
        consumer_offsets={"Orders@GID_orders": {0: 1, 1: 4}},
    )
    return store, move_queues_to_rocksdb(store)


def _unchanged(store: Path, *args: str | Path, expect: int) -> dict[str, object]:
    """``rmqinspect ARGS --format json`` on ``store``, which must exit ``expect`` and leave every
    file (hash, size, mtime) and directory (listing, mtime) of the store as it was."""
    before = tree_state(store)
    out = run_json(*args, expect=expect)
    assert tree_state(store) == before, args
    assert not (store / "consumequeue" / "rocksdict-config.json").exists()
    assert isinstance(out, dict)
    return out


def test_consumequeue_lists_the_units_the_database_holds(rocks: tuple[Path, RocksPlaced]) -> None:
    store, placed = rocks
    for qid in ORDERS:
        units = placed.units[qid]
        out = _unchanged(store, "consumequeue", store, qid.topic, str(qid.queue_id), expect=0)
        queue = out["queue"]
        assert isinstance(queue, dict)
        assert (queue["min_offset"], queue["max_offset"]) == (min(units), max(units) + 1)
        assert queue["message_count"] == len(units)
        last = units[max(units)]
        assert queue["max_physic_offset"] == last[0] + last[1]
        listed = out["units"]
        assert isinstance(listed, list)
        assert [
            (u["queue_offset"], u["physical_offset"], u["size"], u["tags_code"]) for u in listed
        ] == [(q, u[0], u[1], u[2]) for q, u in sorted(units.items())]
        for u in listed:
            assert u["status"] == "found" and u["message"]["queue_offset"] == u["queue_offset"]
            assert u["message"]["store_timestamp"] == units[u["queue_offset"]][3]


def test_offsets_judge_committed_offsets_against_the_database(
    rocks: tuple[Path, RocksPlaced],
) -> None:
    store, placed = rocks
    before = tree_state(store)
    result = run("offsets", store, "--group", "GID_orders", "--format", "json")
    assert tree_state(store) == before
    assert result.exit_code == 0, result.stderr
    assert "not emulated" not in result.stderr  # the restart of the database is emulated
    rows = {(r["topic"], r["queue_id"]): r for r in json.loads(result.stdout)["offsets"]}
    committed = {0: 1, 1: 4}
    for qid in ORDERS:
        row = rows[(qid.topic, qid.queue_id)]
        high = max(placed.units[qid]) + 1
        assert (row["offset"], row["min_offset"], row["max_offset"]) == (
            committed[qid.queue_id],
            0,
            high,
        )
        assert row["lag"] == high - committed[qid.queue_id]
        # A clean shutdown: the restart keeps every unit, so the lag stays.
        assert row["lag_after_restart"] == row["lag"]


def test_groups_read_the_database_without_the_restart(rocks: tuple[Path, RocksPlaced]) -> None:
    store, placed = rocks
    out = _unchanged(store, "groups", store, "--group", "GID_orders", expect=0)
    (group,) = out["groups"]  # type: ignore[misc]
    committed = {0: 1, 1: 4}
    for q in group["queues"]:
        units = placed.units[QueueId(q["topic"], q["queue_id"])]
        offset, high = committed[q["queue_id"]], max(units) + 1
        assert (q["offset"], q["min_offset"], q["max_offset"]) == (offset, 0, high)
        assert q["lag"] == high - offset
        assert q["last_consumed_store_timestamp"] == units[offset - 1][3]
        assert q["next_pull"]["status"] == ("FOUND" if offset < high else "OFFSET_OVERFLOW_ONE")
        assert q["lag_after_restart"] is None


def test_lookup_by_queue_offset_and_time(rocks: tuple[Path, RocksPlaced]) -> None:
    store, placed = rocks
    for qid in ORDERS:
        for qoff, unit in placed.units[qid].items():
            out = _unchanged(
                store,
                "lookup",
                store,
                "--queue-offset",
                f"{qid}:{qoff}".replace("/", ":"),
                expect=0,
            )
            assert out["query"]["unit"] == {  # type: ignore[index]
                "physical_offset": unit[0],
                "size": unit[1],
                "tags_code": unit[2],
            }
            assert [m["physical_offset"] for m in out["messages"]] == [unit[0]]  # type: ignore[attr-defined]
    every = sorted(u[0] for units in placed.units.values() for u in units.values())
    out = _unchanged(store, "lookup", store, "--time", "..", "--topic", "Orders", expect=0)
    assert sorted(m["physical_offset"] for m in out["messages"]) == every  # type: ignore[attr-defined]
    missing = run("lookup", store, "--queue-offset", "Orders:0:4000", "--format", "json")
    assert missing.exit_code == 1 and "Traceback" not in missing.stderr


def test_info_lists_the_database_queues(rocks: tuple[Path, RocksPlaced]) -> None:
    store, placed = rocks
    out = _unchanged(store, "info", store, expect=0)
    (topic,) = out["topics"]  # type: ignore[misc]
    assert topic["topic"] == "Orders"
    assert topic["message_count"] == sum(len(u) for u in placed.units.values())
    assert [(q["queue_id"], q["min_offset"], q["max_offset"]) for q in topic["queues"]] == [
        (qid.queue_id, 0, max(placed.units[qid]) + 1) for qid in ORDERS
    ]


def test_verify_checks_the_database_units(rocks: tuple[Path, RocksPlaced]) -> None:
    """verify reads the rows as units: every one leads to its record, as in the file twin."""
    store, placed = rocks
    out = _unchanged(store, "verify", store, expect=0)
    summary = out["summary"]
    assert isinstance(summary, dict)
    assert summary["units_checked"] == sum(len(u) for u in placed.units.values())
    assert summary["consume_queues"] == len(placed.units)
    assert out["findings"] == []


def test_verify_finds_a_missing_row_and_rows_past_the_max(tmp_path: Path) -> None:
    """A key missing inside [min, max) is an invalid unit (``rangeQuery`` stops there) and its
    record has no unit; rows past the ``max`` entry are units truncation left."""
    store = build_store(tmp_path / "s", orders(9))
    qid = QueueId("Orders", 0)

    def damage(db: Rdict, offsets: Rdict) -> None:
        del db[encode_unit_key(qid.topic, qid.queue_id, 1)]
        last = max(placed_units)
        offsets[encode_offset_key(qid.topic, "max", qid.queue_id)] = encode_offset_value(
            placed_units[last - 1][0], last - 1
        )

    placed_units = file_units(store)[qid]  # before the move, which deletes the files
    move_queues_to_rocksdb(store, edit=damage)
    out = _unchanged(store, "verify", store, expect=1)
    found = {
        (f["check_id"], f["queue_offset"]): f
        for f in out["findings"]  # type: ignore[union-attr]
        if f["topic"] == "Orders" and f["queue_id"] == 0
    }
    invalid = found[("consumequeue.invalid_unit", 1)]
    assert invalid["file"] == "consumequeue"
    assert invalid["detail"] == "unit (0, 0, 0): not a valid unit inside the queue's range"
    missing = found[("consumequeue.missing_unit", 1)]
    assert missing["physical_offset"] == placed_units[1][0]
    last = max(placed_units)
    stale = found[("consumequeue.units_after_end", last)]
    assert stale["detail"].startswith(f"1 rows after the queue's max entry (offset {last - 1})")


def test_min_offset_is_getMinCqOffset_after_the_commitlog_head_went(tmp_path: Path) -> None:
    """No ``min`` entry, and the commitlog's first file deleted: ``getMinCqOffset`` searches
    for the first unit in the commitlog; the database in consumequeue_rocksdb/ (the separate
    store path) is read as well."""
    store = build_store(tmp_path / "s", orders(420, queues=1))
    placed = move_queues_to_rocksdb(store, directory="consumequeue_rocksdb", min_entries=False)
    first, *_ = sorted(os.listdir(store / "commitlog"))
    (store / "commitlog" / first).unlink()
    head = int(sorted(os.listdir(store / "commitlog"))[0])
    units = placed.units[QueueId("Orders", 0)]
    expected = min(q for q, u in units.items() if u[0] >= head)
    assert expected > 0
    out = _unchanged(store, "consumequeue", store, "Orders", "0", "--limit", "1", expect=0)
    assert (out["queue"]["min_offset"], out["queue"]["max_offset"]) == (  # type: ignore[index]
        expected,
        max(units) + 1,
    )
    assert "binary search" in out["queue"]["note"]  # type: ignore[index]


def _hostile(db: Rdict, offsets: Rdict) -> None:
    good = encode_unit_key("Orders", 0, 9)
    db[good + b"\x00"] = encode_unit_value(0, 1, 0, 0)  # a key one byte too long
    db[encode_unit_key("Orders", 0, 2)] = b"\x00" * 27  # a value that is not 28 bytes
    # a topic length that runs past the key
    db[(1000).to_bytes(4, "big") + b"\x01Orders\x01" + bytes(13)] = encode_unit_value(0, 1, 0, 0)
    offsets[b"\x00\x00\x00\x02\x01ab\x01max\x01"] = bytes(16)  # an offset key too short


def test_hostile_entries_are_warnings(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(9))
    placed = move_queues_to_rocksdb(store, edit=_hostile)
    result = run("consumequeue", store, "Orders", "0", "--format", "json")
    assert result.exit_code == 0, result.stderr
    listed = [u["queue_offset"] for u in json.loads(result.stdout)["units"]]
    # offset 2's value is 27 bytes: the broker cannot read it, and it is not listed
    assert listed == [q for q in sorted(placed.units[QueueId("Orders", 0)]) if q != 2]
    warnings = [line for line in result.stderr.splitlines() if line]
    assert all(line.startswith("rmqinspect: warning: ") for line in warnings)
    assert sum("value is 27 bytes, not 28" in w for w in warnings) == 1
    assert sum("topic length 1000 does not fit" in w for w in warnings) == 1
    assert sum("topic length 6 does not fit a key of 26 bytes" in w for w in warnings) == 1
    assert sum("offset family" in w and "shorter than" in w for w in warnings) == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda d: (d / "CURRENT").write_text("MANIFEST-000001\n"),  # names a missing MANIFEST
        lambda d: (
            (d / "CURRENT").write_bytes(b"\xff\x00garbage"),
            (d / "x.sst").write_bytes(b"?"),
        ),
        lambda d: (d / "000009.sst").write_bytes(bytes(64)),  # no CURRENT
    ],
    ids=["no-manifest", "garbage", "no-current"],
)
def test_a_directory_that_is_not_rocksdb_is_one_line(tmp_path: Path, make: object) -> None:
    store = build_store(tmp_path / "s", orders(4))
    assert callable(make)
    make(store / "consumequeue")
    before = tree_state(store)
    result = run("consumequeue", store, "Orders", "0")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert (
        "not a RocksDB database" in result.stderr and str(store / "consumequeue") in result.stderr
    )
    assert tree_state(store) == before
    # The restart reads the queues too: the same one line.
    recovered = run("recover", store, "--format", "json")
    assert (recovered.exit_code, recovered.stdout) == (2, "")
    assert recovered.stderr.count("\n") == 1 and "not a RocksDB database" in recovered.stderr
    assert tree_state(store) == before
    # Commands that do not read queues still answer.
    assert run("messages", store, "--format", "json").exit_code == 0


def test_units_past_the_max_entry_are_stale(tmp_path: Path) -> None:
    """``truncateDirty`` lowers a queue's ``max`` entry and leaves the units past it (the next
    dispatch overwrites them): they are past maxOffset, listed with --all."""
    store = build_store(tmp_path / "s", orders(9))
    qid = QueueId("Orders", 0)

    def lower_max(db: Rdict, offsets: Rdict) -> None:
        key = encode_offset_key(qid.topic, "max", qid.queue_id)
        offsets[key] = encode_offset_value(336, 1)

    placed = move_queues_to_rocksdb(store, edit=lower_max)
    units = placed.units[qid]
    out = _unchanged(store, "consumequeue", store, "Orders", "0", expect=0)
    assert (out["queue"]["min_offset"], out["queue"]["max_offset"]) == (0, 2)  # type: ignore[index]
    assert out["stale_units_after_end"] == len(units) - 2
    assert [u["queue_offset"] for u in out["units"]] == [0, 1]  # type: ignore[attr-defined]
    everything = _unchanged(store, "consumequeue", store, "Orders", "0", "--all", expect=0)
    assert [u["queue_offset"] for u in everything["units"]] == sorted(units)  # type: ignore[attr-defined]


def test_a_damaged_table_file_is_one_line(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(9))
    move_queues_to_rocksdb(store)
    for sst in (store / "consumequeue").glob("*.sst"):
        data = bytearray(sst.read_bytes())
        data[100:400] = bytes(b ^ 0x5A for b in data[100:400])
        sst.write_bytes(bytes(data))
    before = tree_state(store)
    result = run("consumequeue", store, "Orders", "0")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1 and "Corruption" in result.stderr
    assert "rmqinspect-rocksdb-" not in result.stderr  # the store's files are named, not links
    assert tree_state(store) == before
    # info says the rest of what it knows, the database among its problems
    problems = run_json("info", store, expect=0)["problems"]
    assert [(p["kind"], p["path"]) for p in problems] == [("rocksdb", str(store / "consumequeue"))]


def test_synth_rocksdb_answers_as_its_file_queue_twin(tmp_path: Path) -> None:
    """``synth --rocksdb`` and the same seed without it differ only in where the units are:
    every queue's bounds, units and the messages they lead to are the same."""
    common = ["--profile", "5.3", "--messages", "300", "--crash", "--fate", "--seed", "3", "-q"]
    common += ["--commitlog-file-size", "65536", "--cq-file-size", "1000", *SMALL_OPTS]
    files, rocks = tmp_path / "files", tmp_path / "rocks"
    assert run("synth", files, *common).exit_code == 0
    assert run("synth", rocks, *common, "--rocksdb").exit_code == 0
    assert (rocks / "consumequeue" / "CURRENT").is_file()
    assert not any(p.is_dir() for p in (rocks / "consumequeue").iterdir())

    def queues(store: Path) -> dict[tuple[str, int], tuple[int, int, int]]:
        topics = run_json("info", store, expect=0)["topics"]
        return {
            (q["topic"], q["queue_id"]): (q["min_offset"], q["max_offset"], q["max_physic_offset"])
            for t in topics
            for q in t["queues"]
        }

    bounds = queues(files)
    assert bounds == queues(rocks) and len(bounds) > 4
    for topic, queue_id in list(bounds)[:4]:
        args = ("consumequeue", topic, str(queue_id), "--format", "json")
        want = json.loads(run(args[0], files, *args[1:]).stdout)["units"]
        got = _unchanged(rocks, args[0], rocks, *args[1:-2], expect=0)["units"]
        assert got == want
    # Consumer groups with retry and DLQ chains (--fate): the same lag, backlog and next pulls.
    groups = run("groups", files, "--format", "json")
    before = tree_state(rocks)
    assert run("groups", rocks, "--format", "json").stdout == groups.stdout
    assert json.loads(groups.stdout)["groups"]
    # Delay levels: the same, but for what the restart's load would make of the queues.
    at_load = ("min_offset_at_load", "max_offset_at_load", "max_offset_after_dispatch")

    def levels(store: Path) -> list[dict[str, object]]:
        out = run("delays", store, "--format", "json")
        doc = json.loads(out.stdout)
        assert out.exit_code == delays_exit(doc), out.stderr
        return [{k: v for k, v in level.items() if k not in at_load} for level in doc["levels"]]

    assert levels(rocks) == levels(files) != []
    assert run("synth", tmp_path / "x", "--profile", "4.9", "--rocksdb").exit_code == 2
    assert tree_state(rocks) == before
