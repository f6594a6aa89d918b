"""The restart of a store whose consume queues RocksDB holds (docs/rocksdb-consume-queue.md §5),
against its twin: ``synth --rocksdb`` and the same seed without it hold the same units, so where
the broker's rules agree (the normal recovery path) the restart must cut, keep and rebuild the
same messages; where they differ (the abnormal path's start file) the RocksDB rule is checked
fact by fact. Nothing is written into the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.cli_helpers import SMALL_OPTS, run, run_json, tree_state

COMMON = ["--profile", "5.3", "--messages", "300", "--crash", "--seed", "3", "-q"]
COMMON += ["--commitlog-file-size", "65536", "--cq-file-size", "1000", *SMALL_OPTS]
# Per queue, what differs by layout alone: a database has no files.
_FILE_FIELDS = ("files_before", "files_deleted", "files_created")


def _twins(root: Path, *extra: str) -> tuple[Path, Path]:
    files, rocks = root / "files", root / "rocks"
    assert run("synth", files, *COMMON, *extra).exit_code == 0
    assert run("synth", rocks, *COMMON, *extra, "--rocksdb").exit_code == 0
    assert (rocks / "consumequeue" / "CURRENT").is_file()
    return files, rocks


def _recover(store: Path, *args: str) -> dict[str, Any]:
    result = run("recover", store, *args, "--format", "json")
    doc = json.loads(result.stdout)
    assert result.exit_code == (1 if doc["loses_data"] or not doc["broker_starts"] else 0)
    assert isinstance(doc, dict)
    return doc


def _queues(doc: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {
        (q["topic"], q["queue_id"]): {k: v for k, v in q.items() if k not in _FILE_FIELDS}
        for q in doc["consume_queues"]
    }


@pytest.mark.parametrize("damage", ["cq-ahead", "missing-cq", "torn-tail"])
def test_normal_restart_cuts_and_rebuilds_as_the_file_twin(tmp_path: Path, damage: str) -> None:
    """``recoverNormally`` starts where the file twin's does (the checkpoint is the furthest
    unit's end, as the file queues' maxPhysicOffset), so the commitlog's end, the truncation of
    the units past it, the re-dispatch and the loss are the twin's, queue by queue."""
    files, rocks = _twins(tmp_path, "--damage", damage)
    before = tree_state(rocks)
    want, got = _recover(files, "--assume-clean"), _recover(rocks, "--assume-clean")
    assert tree_state(rocks) == before
    assert got["max_phy_offset_of_consume_queue"] == want["max_phy_offset_of_consume_queue"]
    for key in ("start_file", "commitlog", "cq_truncation", "reput", "broker_starts"):
        assert got[key] == want[key], key
    assert got["lost_messages"] == want["lost_messages"]
    assert got["unreachable_messages"] == want["unreachable_messages"]
    assert _queues(got) == _queues(want)
    assert all(q["files_before"] == 0 for q in got["consume_queues"])
    if damage != "torn-tail":  # the units the damage took are lost: the oracle is not empty
        assert want["unreachable_messages"] > 0


def test_crash_restart_starts_at_the_file_the_checkpoint_covers(tmp_path: Path) -> None:
    """``isMappedFileMatchedRecover`` of a RocksDB store: the newest file whose first record's
    physical offset is at most the database's checkpoint (not the checkpoint file's store
    timestamps); the records before it are not dispatched again, so whatever the damage took
    from the queues there stays lost, beyond what the file twin loses."""
    files, rocks = _twins(tmp_path, "--damage", "cq-ahead")
    want, got = _recover(files), _recover(rocks)
    checkpoint = got["max_phy_offset_of_consume_queue"]
    assert checkpoint == want["max_phy_offset_of_consume_queue"] > 0
    names = got["commitlog"]["files_before"]
    covered = [n for n in names if int(n) <= checkpoint]  # each file starts with a record
    start = got["start_file"]
    assert (start["rule"], start["name"], start["offset"]) == (
        "rocksdb_cq_max_phy_offset",
        covered[-1],
        int(covered[-1]),
    )
    assert [(c["name"], c["matched"]) for c in start["candidates"]] == [
        *((n, False) for n in reversed(names) if int(n) > checkpoint),
        (covered[-1], True),
    ]
    # The file twin's timestamp rule reaches further back, where the dispatch rebuilds more.
    assert want["start_file"]["rule"] in ("checkpoint_timestamp", "first_file")
    assert want["start_file"]["offset"] < start["offset"]
    assert got["commitlog"]["end_reason"] == want["commitlog"]["end_reason"]
    lost = {m["physical_offset"] for m in got["lost_messages"]["messages"]}
    twin_lost = {m["physical_offset"] for m in want["lost_messages"]["messages"]}
    assert twin_lost < lost
    assert all(phy < start["offset"] for phy in lost - twin_lost)


def test_restart_readers_answer_as_for_the_file_twin(tmp_path: Path) -> None:
    """A crash the restart loses nothing to: groups --after-restart, trace, lookup
    --as-recovered and the export's restart_keeps and consume_queue rows are the twin's."""
    files, rocks = _twins(tmp_path, "--fate")  # consumer groups with retry and DLQ chains
    before = tree_state(rocks)

    def answer(store: Path, *args: str) -> tuple[int, str]:
        result = run(*args[:1], store, *args[1:], "--format", "json")
        assert result.stdout and "does not support" not in result.stderr, args
        return result.exit_code, result.stdout.replace(str(store), "STORE")

    first = run_json("messages", files, "--limit", "1", expect=0)[0]
    for args in (
        ("groups", "--after-restart"),
        ("trace", "--msg-id", first["msg_id"]),
        ("lookup", "--key", first["keys"][0], "--topic", first["topic"], "--as-recovered"),
    ):
        assert answer(rocks, *args) == answer(files, *args), args
    tables: dict[Path, dict[str, list[Any]]] = {}
    for store in (files, rocks):
        out = tmp_path / f"{store.name}.out"
        exported = run("export", store, out, "--engine", "arrow")
        assert exported.exit_code == 0, exported.stderr
        messages = pq.read_table(out / "messages").to_pydict()
        units = pq.read_table(out / "consume_queue").to_pydict()
        tables[store] = {
            "keeps": sorted(
                zip(messages["physical_offset"], messages["restart_keeps"], strict=True)
            ),
            "units": sorted(
                zip(
                    units["topic"],
                    units["queue_id"],
                    units["queue_offset"],
                    units["status"],
                    strict=True,
                )
            ),
        }
    assert tables[rocks] == tables[files]
    assert tables[rocks]["units"] and all(keep for _, keep in tables[rocks]["keeps"])
    assert tree_state(rocks) == before


def test_recover_out_refuses_a_database_it_would_have_to_write(tmp_path: Path) -> None:
    _, rocks = _twins(tmp_path)
    before = tree_state(rocks)
    dest = tmp_path / "after"
    result = run("recover", rocks, "--out", dest, "--format", "json")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        f"rmqinspect: error: {rocks / 'consumequeue'}: --out: the restart of RocksDB consume "
        "queues rewrites the database's rows"
    )
    assert not dest.exists() and tree_state(rocks) == before
