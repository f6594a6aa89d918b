"""The restart of a store with BatchConsumeQueues (docs/batch-consume-queue.md §4): units past
the recovered end are truncated (``truncateDirtyLogicFiles``), and the reput writes one unit
per inner-batch record with the batch size its ``INNER_NUM`` gives, at its ``INNER_BASE``;
checked unit by unit against what ``synth --batch-queue`` placed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from rmqinspect.export.plan import QueueRange, QueueSlice
from rmqinspect.export.tables import consume_queue_batches
from rmqinspect.store.model import Store
from tests.cli_helpers import SMALL_OPTS, run, run_json, tree_state

SYNTH = ["--profile", "5.3", "--messages", "200", "--crash", "--seed", "1", "-q"]
SYNTH += ["--commitlog-file-size", "65536", "--cq-file-size", "1000", "--batch-queue", "30"]
BCQ_UNIT = 46


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, list[Any]]]:
    """The store and, per BatchTopic queue, its units as written: (base, phy, size, batch)."""
    store = tmp_path_factory.mktemp("bcq") / "s"
    assert run("synth", store, *SYNTH, *SMALL_OPTS).exit_code == 0
    units: dict[int, list[Any]] = {}
    for qdir in sorted((store / "batchconsumequeue" / "BatchTopic").iterdir()):
        out = run_json("consumequeue", store, "BatchTopic", qdir.name, expect=0)
        units[int(qdir.name)] = [
            (u["queue_offset"], u["physical_offset"], u["size"], u["batch_size"])
            for u in out["units"]
        ]
        assert all(u["status"] == "found" for u in out["units"])
    assert all(len(u) > 2 for u in units.values())
    return store, units


def _recover(store: Path) -> dict[str, Any]:
    before = tree_state(store)
    result = run("recover", store, "--format", "json")
    assert tree_state(store) == before
    doc = json.loads(result.stdout)
    assert result.exit_code == (1 if doc["loses_data"] else 0), result.stderr
    assert isinstance(doc, dict)
    return doc


def _queue(doc: dict[str, Any], queue_id: int) -> dict[str, Any]:
    (q,) = (
        q for q in doc["consume_queues"] if (q["topic"], q["queue_id"]) == ("BatchTopic", queue_id)
    )
    assert isinstance(q, dict)
    return q


def test_reput_rebuilds_inner_batches_a_cut_queue_lost(
    placed: tuple[Path, dict[int, list[Any]]], tmp_path: Path
) -> None:
    """The queue of the largest batches cut to its first unit: the crash's recovery dispatches
    its batch records again, one unit each at its INNER_BASE with its INNER_NUM, back to the
    queue's end as written."""
    source, units = placed
    queue_id = max(units, key=lambda k: max(u[3] for u in units[k]))
    assert max(u[3] for u in units[queue_id]) > 1
    store = tmp_path / "s"
    shutil.copytree(source, store, symlinks=True)
    (data,) = (store / "batchconsumequeue" / "BatchTopic" / str(queue_id)).iterdir()
    with data.open("r+b") as f:
        f.truncate(BCQ_UNIT)
    doc = _recover(store)
    q = _queue(doc, queue_id)
    first, last = units[queue_id][0], units[queue_id][-1]
    assert q["max_offset_on_disk"] == first[0] + first[3]
    assert q["units_written_at_load"] == len(units[queue_id]) - 1  # by the recovery's dispatch
    assert q["max_offset_after_load"] == q["max_offset_after_dispatch"] == last[0] + last[3]
    assert q["unreachable_after_start"] == 0
    assert doc["lost_messages"]["count"] == 0 and doc["broker_starts"]
    assert "BatchConsumeQueue" not in " ".join(doc["warnings"])


def test_truncation_drops_units_past_the_recovered_end(
    placed: tuple[Path, dict[int, list[Any]]], tmp_path: Path
) -> None:
    """The record of queue 3's last unit zeroed: the commitlog's recovery ends there, and the
    queue's units from it on go; its end is the unit before's base + batch size."""
    source, units = placed
    store = tmp_path / "s"
    shutil.copytree(source, store, symlinks=True)
    before_last, last = units[3][-2], units[3][-1]
    size = 65536
    path = store / "commitlog" / f"{last[1] - last[1] % size:020d}"
    with path.open("r+b") as f:
        f.seek(last[1] % size)
        f.write(bytes(8))  # TOTALSIZE and MAGICCODE
    doc = _recover(store)
    assert doc["commitlog"]["max_offset"] == last[1]
    assert doc["cq_truncation"]
    q = _queue(doc, 3)
    end = before_last[0] + before_last[3]
    assert q["units_truncated"] == 1
    assert q["max_offset_after_load"] == q["max_offset_after_dispatch"] == end
    assert q["max_physic_offset_after_load"] == before_last[1] + before_last[2]
    for queue_id, placed_units in units.items():  # every queue keeps its units below the end
        kept = [u for u in placed_units if u[1] < last[1]]
        want = kept[-1][0] + kept[-1][3] if kept else 0
        assert _queue(doc, queue_id)["max_offset_after_dispatch"] == want, queue_id


def test_recover_out_refuses_the_units_it_would_have_to_write(
    placed: tuple[Path, dict[int, list[Any]]], tmp_path: Path
) -> None:
    store, _ = placed
    before = tree_state(store)
    dest = tmp_path / "after"
    result = run("recover", store, "--out", dest, "--format", "json")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        f"rmqinspect: error: {store / 'batchconsumequeue'}: --out: the restart of a "
        "BatchConsumeQueue rewrites its 46-byte units"
    )
    assert not dest.exists() and tree_state(store) == before


def test_export_writes_each_unit_once_at_its_base(
    placed: tuple[Path, dict[int, list[Any]]], tmp_path: Path
) -> None:
    """The consume_queue table holds every unit as written, once, at its msgBaseOffset (a slice
    boundary inside a batch does not repeat it), and the restart keeps every record."""
    store, units = placed
    before = tree_state(store)
    out = tmp_path / "out"
    exported = run("export", store, out, "--engine", "arrow")
    assert exported.exit_code == 0, exported.stderr
    assert tree_state(store) == before
    rows = pq.read_table(out / "consume_queue").to_pydict()
    got: dict[int, list[Any]] = {}
    for topic, queue_id, base, phy, size, status in zip(
        rows["topic"],
        rows["queue_id"],
        rows["queue_offset"],
        rows["physical_offset"],
        rows["size"],
        rows["status"],
        strict=True,
    ):
        if topic == "BatchTopic":
            assert status == "found"
            got.setdefault(queue_id, []).append((base, phy, size))
    assert {q: sorted(u) for q, u in got.items()} == {
        q: [(u[0], u[1], u[2]) for u in placed_units] for q, placed_units in units.items()
    }
    messages = pq.read_table(out / "messages").to_pydict()
    batch = [
        k
        for t, k in zip(messages["topic"], messages["restart_keeps"], strict=True)
        if t == "BatchTopic"
    ]
    assert len(batch) == sum(len(u) for u in units.values()) and all(batch)


def test_a_slice_starting_inside_a_batch_leaves_its_unit_to_the_slice_before(
    placed: tuple[Path, dict[int, list[Any]]],
) -> None:
    store, units = placed
    queue_id = max(units, key=lambda k: max(u[3] for u in units[k]))
    straddling = next(u for u in units[queue_id] if u[3] > 1)
    start = straddling[0] + 1  # inside its batch
    stop = units[queue_id][-1][0] + 1
    with Store.open(store) as st:
        part = QueueSlice(0, (QueueRange("BatchTopic", queue_id, start, stop),))
        bases = [b for batch in consume_queue_batches(st, part) for b in batch["queue_offset"]]
    assert [b.as_py() for b in bases] == [u[0] for u in units[queue_id] if u[0] >= start]
    assert straddling[0] not in [b.as_py() for b in bases]
