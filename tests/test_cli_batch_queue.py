"""BatchConsumeQueue (``batchconsumequeue/``, 5.x topics of queue.type BatchCQ): every command
that reads queues answers from it, fact by fact against what the writer placed
(tests/batch_helpers.py), and damaged queues are findings, never tracebacks or hangs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.format.batchcq import BCQ_STORE_UNIT_SIZE
from tests.batch_helpers import (
    T0,
    TOPIC,
    Batch,
    batch_store,
    patch_unit,
    queue_file,
    set_base,
    set_batch_size,
)
from tests.cli_helpers import run, run_json
from tests.export_helpers import snapshot


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Batch]]:
    root = tmp_path_factory.mktemp("bcq") / "store"
    return root, batch_store(root, consumer_offsets={0: 10, 1: 44})


def _queue(batches: list[Batch], queue_id: int) -> list[Batch]:
    return [b for b in batches if b.put.queue_id == queue_id]


def _holding(batches: list[Batch], queue_id: int, offset: int) -> Batch:
    return next(b for b in _queue(batches, queue_id) if b.base <= offset < b.base + b.count)


@pytest.mark.parametrize("queue_id", [0, 1])
def test_consumequeue_lists_each_unit_with_its_batch(
    placed: tuple[Path, list[Batch]], queue_id: int
) -> None:
    root, batches = placed
    mine = _queue(batches, queue_id)
    doc = run_json("consumequeue", root, TOPIC, str(queue_id), expect=0)
    end = mine[-1].base + mine[-1].count
    assert doc["queue"]["min_offset"] == 0
    assert doc["queue"]["max_offset"] == end == (29, 44)[queue_id]
    assert doc["queue"]["file_count"] == 2  # 15 units, 10 a file
    assert doc["stale_units_after_end"] == 0
    assert len(doc["units"]) == len(mine) == 15
    for unit, b in zip(doc["units"], mine, strict=True):
        assert unit["status"] == "found"
        assert unit["queue_offset"] == b.base
        assert unit["batch_size"] == b.count
        assert unit["physical_offset"] == b.put.physical_offset
        assert unit["size"] == b.put.size
        assert unit["tags_code_ok"] is True
        assert unit["detail"] is None
        message = unit["message"]
        assert message["keys"] == [b.keys]
        assert message["queue_offset"] == b.base
        assert message["properties"]["INNER_NUM"] == str(b.count)
        assert message["properties"]["INNER_BASE"] == str(b.base)
        assert message["sys_flag"] & 0xC0 == 0xC0  # NEED_UNWRAP | INNER_BATCH


def test_consumequeue_from_inside_a_batch_starts_at_the_unit_holding_it(
    placed: tuple[Path, list[Batch]],
) -> None:
    root, batches = placed
    doc = run_json("consumequeue", root, TOPIC, "1", "--from", "9", "--limit", "2", expect=0)
    first = _holding(batches, 1, 9)  # the batch of 4 at 8..11
    assert (first.base, first.count) == (8, 4)
    assert [(u["queue_offset"], u["batch_size"]) for u in doc["units"]] == [(8, 4), (12, 2)]


@pytest.mark.parametrize(("queue_id", "offset"), [(0, 0), (0, 3), (0, 28), (1, 9), (1, 43)])
def test_lookup_queue_offset_inside_a_batch(
    placed: tuple[Path, list[Batch]], queue_id: int, offset: int
) -> None:
    root, batches = placed
    b = _holding(batches, queue_id, offset)
    doc = run_json("lookup", root, "--queue-offset", f"{TOPIC}:{queue_id}:{offset}", expect=0)
    assert [m["physical_offset"] for m in doc["messages"]] == [b.put.physical_offset]
    assert doc["messages"][0]["keys"] == [b.keys]
    assert doc["query"]["unit"]["physical_offset"] == b.put.physical_offset
    if offset != b.base:
        assert doc["query"]["unit"]["msg_base_offset"] == b.base


def test_lookup_queue_offset_past_the_last_batch_finds_nothing(
    placed: tuple[Path, list[Batch]],
) -> None:
    root, _ = placed
    doc = run_json("lookup", root, "--queue-offset", f"{TOPIC}:0:29", expect=1)
    assert doc["messages"] == []
    assert "serves [0, 29)" in doc["rejected"][0]["reason"]


def test_lookup_time_walks_the_batch_units(placed: tuple[Path, list[Batch]]) -> None:
    root, batches = placed
    begin, end = T0 + 7_000, T0 + 16_000
    doc = run_json("lookup", root, "--time", f"{begin}..{end}", "--topic", TOPIC, expect=0)
    want = sorted(b.put.physical_offset for b in batches if begin <= b.store_timestamp <= end)
    assert sorted(m["physical_offset"] for m in doc["messages"]) == want
    assert len(want) == 10
    assert doc["warnings"] == []


def test_offsets_and_groups_count_messages_not_units(placed: tuple[Path, list[Batch]]) -> None:
    root, batches = placed
    doc = run_json("offsets", root, expect=0)
    rows = {o["queue_id"]: o for o in doc["offsets"] if o["topic"] == TOPIC}
    assert {q: (r["min_offset"], r["max_offset"], r["lag"]) for q, r in rows.items()} == {
        0: (0, 29, 19),
        1: (0, 44, 0),
    }
    groups = run_json("groups", root, expect=0)
    queues = {
        q["queue_id"]: q for g in groups["groups"] for q in g["queues"] if q["topic"] == TOPIC
    }
    # offset 10 of queue 0 lies in the batch at 9..11: the last consumed message is offset 9's
    assert queues[0]["last_consumed_store_timestamp"] == _holding(batches, 0, 9).store_timestamp
    assert queues[0]["next_pull"]["status"] == "FOUND"
    assert queues[0]["lag"] == 19


def test_info_and_verify_read_the_batch_queues(placed: tuple[Path, list[Batch]]) -> None:
    root, _ = placed
    info = run_json("info", root, expect=0)
    assert info["unsupported"] == []  # read by every command, the restart included
    (topic,) = [t for t in info["topics"] if t["topic"] == TOPIC]
    assert topic["message_count"] == 73  # messages, not the 30 units
    assert [(q["queue_id"], q["min_offset"], q["max_offset"]) for q in topic["queues"]] == [
        (0, 0, 29),
        (1, 0, 44),
    ]
    doc = run_json("verify", root, expect=0)
    assert doc["findings"] == []
    assert doc["summary"]["units_checked"] == 31  # 30 batch units and Plain's one


def test_the_batch_queues_are_only_read(tmp_path: Path) -> None:
    root = tmp_path / "s"
    batch_store(root, consumer_offsets={0: 3})
    before = snapshot(root)
    for args in (
        ("consumequeue", root, TOPIC, "0", "--all"),
        ("lookup", root, "--queue-offset", f"{TOPIC}:1:5"),
        ("offsets", root),
        ("groups", root),
        ("verify", root),
    ):
        assert run(*args, "--format", "json").exit_code == 0, args
    assert snapshot(root) == before


def _verify(root: Path, code: int) -> dict[str, list[dict[str, Any]]]:
    doc = run_json("verify", root, expect=code)
    out: dict[str, list[dict[str, Any]]] = {}
    for f in doc["findings"]:
        out.setdefault(f["check_id"], []).append(f)
    return out


def test_a_base_offset_going_backwards_is_a_finding(tmp_path: Path) -> None:
    root = tmp_path / "s"
    batches = batch_store(root)
    set_base(root, 0, 3, 0)  # the 4th unit of queue 0 (base 5) claims offset 0
    found = _verify(root, 1)
    backwards, skips = found["batchcq.base_offset"]
    assert backwards["file_position"] == 3 * BCQ_STORE_UNIT_SIZE
    assert backwards["queue_offset"] == 0
    assert "go backwards" in backwards["detail"]
    mine = _queue(batches, 0)
    # the unit after it skips (from 0 + 3 to 8)
    assert (skips["file_position"], skips["queue_offset"]) == (4 * BCQ_STORE_UNIT_SIZE, 8)
    assert skips["detail"].endswith("ends its batch at 3: queue offsets skip")
    # its record is at offset 5, and offsets 0 and 5 are no longer served as written
    (moved,) = found["consumequeue.queue_offset_mismatch"]
    assert moved["physical_offset"] == mine[3].put.physical_offset
    assert moved["detail"].endswith("the record's queue offset is 5")
    missing = found["consumequeue.missing_unit"]
    assert sorted(f["queue_offset"] for f in missing) == [0, 5]
    assert sorted(f["physical_offset"] for f in missing) == sorted(
        [mine[0].put.physical_offset, mine[3].put.physical_offset]
    )
    # every command still answers
    assert run("consumequeue", root, TOPIC, "0").exit_code == 0
    assert run("lookup", root, "--time", "..", "--topic", TOPIC).exit_code == 0


def test_batch_size_zero_ends_the_queue(tmp_path: Path) -> None:
    root = tmp_path / "s"
    batches = batch_store(root)
    set_batch_size(root, 0, 12, 0)  # recovery stops at the 13th unit (second file)
    mine = _queue(batches, 0)
    doc = run_json("consumequeue", root, TOPIC, "0", expect=0)
    assert doc["queue"]["max_offset"] == mine[11].base + mine[11].count
    assert doc["stale_units_after_end"] == 3
    found = _verify(root, 1)
    (stale,) = found["consumequeue.units_after_end"]
    assert stale["file"] == "batchconsumequeue/Batched/0/00000000000000000460"
    assert stale["file_position"] == 2 * BCQ_STORE_UNIT_SIZE
    # The records past the queue's end lie below the other queue's maxPhysicOffset: the
    # normal recovery does not dispatch them again, so the restart leaves them without a unit
    # (store/batch_restart.py), as recover says.
    (late,) = found["consumequeue.missing_unit"]
    assert (late["file"], late["queue_offset"]) == ("batchconsumequeue/Batched/0", mine[12].base)
    assert late["detail"].startswith("no unit for 3 records of Batched/0 from queue offset")
    assert late["detail"].endswith("and the restart does not rebuild it")
    restart = run_json("recover", root, expect=1)
    assert restart["unreachable_messages"] == 3
    assert sorted(m["physical_offset"] for m in restart["lost_messages"]["messages"]) == [
        b.put.physical_offset for b in mine[12:15]
    ]
    listed = run_json("consumequeue", root, TOPIC, "0", "--all", expect=0)
    assert [u["batch_size"] for u in listed["units"][12:]] == [0, mine[13].count, mine[14].count]


def test_a_torn_last_unit_is_a_finding(tmp_path: Path) -> None:
    root = tmp_path / "s"
    batch_store(root)
    path = queue_file(root, 1, 1)
    os.truncate(path, 5 * BCQ_STORE_UNIT_SIZE + 20)  # 5 units and 20 bytes of a 6th
    found = _verify(root, 1)
    # a file shorter than the others: the broker's load refuses it (MappedFileQueue.load)
    (short,) = found["consumequeue.file_size"]
    assert short["file"] == "batchconsumequeue/Batched/1/00000000000000000460"
    (torn,) = found["batchcq.torn_unit"]
    assert torn["file"] == "batchconsumequeue/Batched/1/00000000000000000460"
    assert torn["file_position"] == 5 * BCQ_STORE_UNIT_SIZE
    doc = run_json("consumequeue", root, TOPIC, "1", expect=0)
    assert doc["queue"]["max_offset"] == 44
    assert len(doc["units"]) == 15


def test_an_inner_num_the_unit_does_not_say_is_a_finding(tmp_path: Path) -> None:
    root = tmp_path / "s"
    batches = batch_store(root)
    last = _queue(batches, 1)[-1]
    set_batch_size(root, 1, 14, last.count + 1)  # the last unit: no unit after it to skip
    found = _verify(root, 1)
    (wrong,) = found["batchcq.batch_size"]
    assert wrong["physical_offset"] == last.put.physical_offset
    assert (
        wrong["detail"] == f"batchSize {last.count + 1} but the record's INNER_NUM is {last.count}"
    )
    listed = run_json("consumequeue", root, TOPIC, "1", expect=0)
    assert listed["units"][-1]["detail"] == wrong["detail"]
    assert listed["queue"]["max_offset"] == 45


def test_synth_batch_queue_writes_what_the_commands_read(tmp_path: Path) -> None:
    """``synth --batch-queue N``: N batches of 1-4 messages (batch i: queue i % 2, keys
    BATCH-i), before the workload, with topics.json's queue.type attribute."""
    root = tmp_path / "s"
    args = ["--profile", "5.3", "-n", "200", "--queues", "2", "--batch-queue", "40", "-q"]
    assert run("synth", root, *args, "--cq-file-size", "200").exit_code == 0
    topics = (root / "config" / "topics.json").read_text()
    assert '"queue.type":"BatchCQ"' in topics
    for queue_id in (0, 1):
        doc = run_json("consumequeue", root, "BatchTopic", str(queue_id), expect=0)
        batches = list(range(queue_id, 40, 2))
        sizes = [1 + i % 4 for i in batches]
        assert [u["batch_size"] for u in doc["units"]] == sizes
        assert [u["message"]["keys"] for u in doc["units"]] == [[f"BATCH-{i}"] for i in batches]
        assert [u["queue_offset"] for u in doc["units"]] == [sum(sizes[:k]) for k in range(20)]
        assert doc["queue"]["max_offset"] == sum(sizes) == (40, 60)[queue_id]
        assert doc["queue"]["file_count"] == 2  # 10 units a file
    verified = run_json("verify", root, expect=0)
    assert not [f for f in verified["findings"] if "BatchTopic" in f["file"]]
    refused = run("synth", tmp_path / "old", "--batch-queue", "1", "-q")
    assert refused.exit_code == 2 and not (tmp_path / "old").exists()


@pytest.mark.parametrize("seed", range(4))
def test_any_unit_bytes_are_findings_never_tracebacks(tmp_path: Path, seed: int) -> None:
    """Random units (bases, sizes and batch sizes of any sign and size) in the middle of a
    queue: every command answers (exit 0 or 1) in bounded time."""
    import random

    root = tmp_path / "s"
    batch_store(root)
    rng = random.Random(seed)
    path = queue_file(root, 0, 0)
    data = bytearray(path.read_bytes())
    for unit in rng.sample(range(10), 4):
        at = unit * BCQ_STORE_UNIT_SIZE
        data[at : at + BCQ_STORE_UNIT_SIZE] = rng.randbytes(BCQ_STORE_UNIT_SIZE)
    path.write_bytes(bytes(data))
    for args in (
        ("consumequeue", root, TOPIC, "0", "--all"),
        ("lookup", root, "--queue-offset", f"{TOPIC}:0:{rng.randrange(30)}"),
        ("lookup", root, "--time", "..", "--topic", TOPIC),
        ("offsets", root),
        ("verify", root),
    ):
        result = run(*args, "--format", "json")
        assert "unexpected" not in result.stderr, (args, result.stderr)
        assert result.exit_code == _exit_its_json_implies(args[0], result.stdout), args


def _exit_its_json_implies(command: str, stdout: str) -> int:
    """The exit code a command's JSON implies: lookup 1 when it found nothing, verify 1 on an
    error finding; consumequeue and offsets list what they read (0)."""
    doc = json.loads(stdout)
    if command == "lookup":
        return 0 if doc["found"] else 1
    if command == "verify":
        return 1 if doc["summary"]["findings_by_severity"]["error"] else 0
    return 0


def test_a_tags_code_dispatch_would_not_write_is_a_finding(tmp_path: Path) -> None:
    root = tmp_path / "s"
    batches = batch_store(root)
    patch_unit(root, 1, 2, 12, (7).to_bytes(8, "big"))  # the third unit's tagsCode
    (wrong,) = _verify(root, 1)["consumequeue.tags_code"]
    b = _queue(batches, 1)[2]
    assert (wrong["file_position"], wrong["physical_offset"]) == (92, b.put.physical_offset)
    assert wrong["detail"].startswith("unit tagsCode 7: dispatch computes ")
    listed = run_json("consumequeue", root, TOPIC, "1", "--limit", "3", expect=0)
    assert listed["units"][2]["tags_code_ok"] is False


@pytest.mark.parametrize("base", [2**62, -5, 2**63 - 1])
def test_a_hostile_base_costs_the_restart_nothing(tmp_path: Path, base: int) -> None:
    """The restart holds a unit at its msgBaseOffset (store/batch_restart.py): a base no slot
    can hold, or one far out, costs nothing and is no traceback."""
    root = tmp_path / "s"
    batch_store(root)
    set_base(root, 1, 3, base)
    result = run("recover", root, "--format", "json")
    assert "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert result.exit_code == (1 if doc["loses_data"] or not doc["broker_starts"] else 0)
    assert doc["broker_starts"]
    (q,) = [q for q in doc["consume_queues"] if (q["topic"], q["queue_id"]) == (TOPIC, 1)]
    assert (
        q["max_offset_after_load"]
        == run_json("consumequeue", root, TOPIC, "1", expect=0)["queue"]["max_offset"]
    )


def test_synth_refuses_batch_queue_files_in_a_rocksdb_store(tmp_path: Path) -> None:
    """A RocksDB store keeps its queues as rows: synth's BatchConsumeQueue files would sit
    beside them as a second, conflicting answer (moved as 20-byte units they read as garbage)."""
    out = tmp_path / "s"
    result = run("synth", out, "--profile", "5.3", "--rocksdb", "--batch-queue", "3", "-q")
    assert result.exit_code == 2 and "--rocksdb cannot add --batch-queue" in result.stderr
    assert not out.exists()
