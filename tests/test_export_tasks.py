"""The part task both engines run, under retries: file names that depend only on the part,
files renamed into place, and the driver's sweep of what no successful attempt reported."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rmqinspect.analysis.verify import verify_store
from rmqinspect.export import plan, tasks
from rmqinspect.export.parquet import TMP_SUFFIX, TableWriter, is_part_file, part_file_name
from rmqinspect.export.plan import StoreRef
from rmqinspect.export.schema import Table
from rmqinspect.export.tables import findings_batch, read_part
from rmqinspect.export.tasks import (
    PartResult,
    plan_parts,
    plan_ranges,
    predict_restart,
    range_keeps,
    run_part,
    sweep,
)
from rmqinspect.store.model import Store, StoreOptions
from tests.export_helpers import hostile_store

SMALL = StoreOptions(index_slot_num=64, index_num=400)
TABLES = (Table.MESSAGES, Table.CONSUME_QUEUE, Table.CONSUMER_OFFSETS)


def _files(root: Path) -> dict[str, bytes]:
    return {
        Path(d, n).relative_to(root).as_posix(): Path(d, n).read_bytes()
        for d, _, names in os.walk(root)
        for n in names
    }


def _run_all(store_root: Path, out: Path) -> list[PartResult]:
    with Store.open(store_root, SMALL) as store:
        ref = StoreRef.of(store)
        prediction = predict_restart(ref)
        results = [run_part(ref, str(out), p, TABLES, None) for p in plan_parts(store, TABLES)]
        for r in plan_ranges(store, TABLES):
            results.append(run_part(ref, str(out), r, TABLES, range_keeps(store, r, prediction)))
    return results


def test_a_second_attempt_writes_the_same_files_and_reports_them(tmp_path: Path) -> None:
    store = hostile_store(tmp_path / "store")
    first = _run_all(store, tmp_path / "a")
    second = _run_all(store, tmp_path / "b")
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    reported = sorted(f for r in first for f in r.files)
    assert sorted(a) == reported == sorted(f for r in second for f in r.files)
    assert a == b  # names and bytes depend only on the part
    assert all(is_part_file(Path(f).name) for f in a)  # no temporary file is left
    assert any(f.startswith("messages/topic_partition=") for f in a)
    assert any(f.startswith("consume_queue/") for f in a)
    # Run again into the same directory (a retried task): same files, nothing added.
    again = _run_all(store, tmp_path / "a")
    assert _files(tmp_path / "a") == a
    assert sorted(f for r in again for f in r.files) == reported


def test_an_unclosed_attempt_leaves_only_a_temporary_file(tmp_path: Path) -> None:
    store = hostile_store(tmp_path / "store")
    with Store.open(store, SMALL) as s:
        batch = findings_batch(verify_store(s).findings)
    assert batch.num_rows
    number = 3
    writer = TableWriter(tmp_path / "out" / "findings", Table.FINDINGS, number)
    writer.write(batch)
    writer._flush("")  # a row group is written, then the attempt dies before close()
    names = os.listdir(tmp_path / "out" / "findings")
    assert len(names) == 1 and names[0].endswith(TMP_SUFFIX) and names[0].startswith(".")
    writer.close()
    assert os.listdir(tmp_path / "out" / "findings") == [part_file_name(number, 1)]
    assert writer.files == [tmp_path / "out" / "findings" / part_file_name(number, 1)]
    assert pq.read_table(writer.files[0]).num_rows == batch.num_rows


def test_sweep_removes_what_no_successful_attempt_reported(tmp_path: Path) -> None:
    store = hostile_store(tmp_path / "store")
    out = tmp_path / "out"
    results = _run_all(store, out)
    kept = _files(out)
    # Leftovers of failed attempts: a part file in a directory no success wrote into, a part
    # file beside reported ones, a temporary file; and a file that is no part file.
    stray_dir = out / "messages" / "topic_partition=gone"
    stray_dir.mkdir(parents=True)
    (stray_dir / part_file_name(7, 1)).write_bytes(b"half")
    topic_dir = next(p for p in (out / "messages").iterdir() if p != stray_dir)
    (topic_dir / part_file_name(99, 2)).write_bytes(b"half")
    (out / "consumer_offsets" / f".{part_file_name(0, 1)}.0123{TMP_SUFFIX}").write_bytes(b"half")
    (out / "consumer_offsets" / "README").write_text("not ours")
    removed = sweep(out, TABLES, (f for r in results for f in r.files))
    assert removed == sorted(
        [
            f"consumer_offsets/.{part_file_name(0, 1)}.0123{TMP_SUFFIX}",
            f"messages/topic_partition=gone/{part_file_name(7, 1)}",
            f"{topic_dir.relative_to(out).as_posix()}/{part_file_name(99, 2)}",
        ]
    )
    assert not stray_dir.exists()
    assert _files(out) == {**kept, "consumer_offsets/README": b"not ours"}


def test_a_worker_reused_by_another_export_reopens_the_store(tmp_path: Path) -> None:
    """A Spark session's Python workers outlive an export; the store may change before the
    next one, so its tasks must not read through the previous export's open store."""
    store = hostile_store(tmp_path / "store")
    tables = (Table.CONSUMER_OFFSETS,)
    with Store.open(store, SMALL) as s:
        ref = StoreRef.of(s)
        (part,) = plan_parts(s, tables, hashes=False)
    run_part(ref, str(tmp_path / "a"), part, tables, None, "one")
    first = tasks._OPEN.values[ref]
    run_part(ref, str(tmp_path / "b"), part, tables, None, "one")
    assert tasks._OPEN.values[ref] is first  # one export's tasks share it
    run_part(ref, str(tmp_path / "c"), part, tables, None, "two")
    assert tasks._OPEN.values[ref] is not first


def test_an_attempt_that_fails_part_way_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a final name a partial file could replace the complete one a concurrent attempt
    (speculation) wrote: a failing attempt removes the files it still had open."""
    store = hostile_store(tmp_path / "store")
    with Store.open(store, SMALL) as s:
        ref = StoreRef.of(s)
        part = plan_ranges(s, TABLES)[0]
        prediction = predict_restart(ref)
        keeps = range_keeps(s, part, prediction)
    real = read_part

    def failing(*args: object) -> Iterator[tuple[Table, pa.RecordBatch]]:
        yield from itertools.islice(real(*args), 2)  # type: ignore[arg-type]
        raise OSError("the executor's disk went away")

    monkeypatch.setattr(tasks, "read_part", failing)
    with pytest.raises(OSError, match="disk went away"):
        run_part(ref, str(tmp_path / "out"), part, TABLES, keeps, "failing")
    assert _files(tmp_path / "out") == {}


def test_small_queues_share_a_part_and_a_file(tmp_path: Path) -> None:
    """20,000 one-message topics made 20,000 parts, each a task and a Parquet file of one
    row: small queues are planned whole, many to a part; a big queue keeps slices of its
    own."""
    from rmqinspect.export.plan import QueueRange, plan_queues
    from rmqinspect.synth.writer import MessageSpec, StoreWriter

    topics = 40
    with StoreWriter(tmp_path / "store") as w:
        w.put_many(MessageSpec(topic=f"T{i:02d}", body=b"x") for i in range(topics))
        w.put_many(MessageSpec(topic="Big", body=b"y") for _ in range(30))
    with Store.open(tmp_path / "store") as store:
        small = [QueueRange(f"T{i:02d}", 0, 0, 1) for i in range(topics)]
        assert plan_queues(store, slice_units=20, group_queues=16) == [
            plan.QueueSlice(0, (QueueRange("Big", 0, 0, 20),)),
            plan.QueueSlice(1, (QueueRange("Big", 0, 20, 30),)),
            plan.QueueSlice(2, tuple(small[:16])),
            plan.QueueSlice(3, tuple(small[16:32])),
            plan.QueueSlice(4, tuple(small[32:])),
        ]
        parts = plan_queues(store)
        assert len(parts) == 1 and parts[0].nbytes == (topics + 30) * 20
        ref = StoreRef.of(store)
        result = run_part(ref, str(tmp_path / "out"), parts[0], (Table.CONSUME_QUEUE,), None)
    assert result.rows == {Table.CONSUME_QUEUE: topics + 30}
    assert len(result.files) == 1
    rows = pq.read_table(tmp_path / "out" / result.files[0]).to_pylist()
    assert sorted((r["topic"], r["queue_offset"]) for r in rows) == sorted(
        [("Big", i) for i in range(30)] + [(f"T{i:02d}", 0) for i in range(topics)]
    )


def test_small_files_are_not_compressed(tmp_path: Path) -> None:
    """A zstd context for each column cost a millisecond a file: with one file per topic,
    most of an export of 20,000 one-message topics. A file that starts with a small row group
    is stored uncompressed; a large one is zstd-compressed."""
    from rmqinspect.export.parquet import COMPRESS_FROM_BYTES

    rows = COMPRESS_FROM_BYTES // 8  # int64: the large table is just over the threshold
    schema = pa.schema([("n", pa.int64())])
    codecs = {}
    for name, n in (("small", 10), ("large", rows + 1)):
        writer = TableWriter(tmp_path / name, Table.CONSUMER_OFFSETS, 0)
        writer.schema = schema
        writer.write(pa.RecordBatch.from_arrays([pa.array(range(n), pa.int64())], schema=schema))
        writer.close()
        (path,) = writer.files
        codecs[name] = pq.ParquetFile(path).metadata.row_group(0).column(0).compression
    assert codecs == {"small": "UNCOMPRESSED", "large": "ZSTD"}
