"""The restart of a store with BatchConsumeQueues (docs/batch-consume-queue.md §4): units past
the recovered end are truncated (``truncateDirtyLogicFiles``), and the reput writes one unit
per inner-batch record with the batch size its ``INNER_NUM`` gives, at its ``INNER_BASE``;
checked unit by unit against what ``synth --batch-queue`` placed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

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
