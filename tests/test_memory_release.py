"""Walks drop the pages they have read: after ``verify``, ``salvage`` or a forensic scan of the
commitlog, no page of a commitlog file stays resident in the process, though the files stay
mapped (the store keeps its maps open). Mapped pages count in a process's RSS: a command that
kept them would grow with the store (benchmarks/memory.py measures the commands themselves)."""

from __future__ import annotations

import os
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path
from unittest.mock import patch

import pyarrow as pa
import pytest

from rmqinspect.analysis.salvage import salvage
from rmqinspect.analysis.transactions import TransactionsReport, transactions_report
from rmqinspect.analysis.verify import VerifyOptions, verify_store
from rmqinspect.export import parquet
from rmqinspect.export.plan import StoreRef, plan_index
from rmqinspect.export.schema import Table
from rmqinspect.export.tables import index_entry_batches
from rmqinspect.export.tasks import plan_ranges, predict_restart, range_keeps, run_part
from rmqinspect.format import columns
from rmqinspect.format import properties as props
from rmqinspect.format.fate import HALF_TOPIC
from rmqinspect.format.scan import WalkPolicy
from rmqinspect.render.output import OutputFormat
from rmqinspect.render.transactions import render_transactions
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import SMALL_LAYOUT, build_store

SMAPS = Path("/proc/self/smaps")


def _commitlog_maps(store: Store) -> tuple[int, int]:
    """(maps of the store's commitlog files in this process, their resident KiB)."""
    return _maps({str(f.path) for f in store.commitlog.files})


def _maps(paths: set[str]) -> tuple[int, int]:
    """(maps of files ``paths`` in this process, their resident KiB)."""
    maps = resident = 0
    current = False
    for line in SMAPS.read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and ":" not in fields[0]:  # a mapping's header line
            current = len(fields) >= 6 and fields[5] in paths
            maps += current
        elif current and fields[0] == "Rss:":
            resident += int(fields[1])
    return maps, resident


class _Sink:
    def __init__(self) -> None:
        self.rows = 0

    def add_columns(self, cols, rows, intact, restart_keeps, failed) -> None:  # type: ignore[no-untyped-def]
        self.rows += len(rows)

    def add_partial(self, record, restart_keeps, failed) -> None:  # type: ignore[no-untyped-def]
        self.rows += 1


@pytest.fixture(scope="module")
def store_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SMAPS.exists():
        pytest.skip("no /proc/self/smaps here: a process's mapped pages cannot be counted")
    root = tmp_path_factory.mktemp("release") / "store"
    # 1 KiB bodies over 64 KiB files: several files, each with runs ending mid-page.
    specs = [
        MessageSpec(topic="TopicA", queue_id=i % 2, body=bytes([65 + i % 26]) * 1000, keys=f"K{i}")
        for i in range(200)
    ]
    return build_store(root, specs)


def test_verify_leaves_no_commitlog_page_resident(store_root: Path) -> None:
    with Store.open(store_root) as store:
        assert len(store.commitlog.files) >= 3
        report = verify_store(store, VerifyOptions(), jobs=1)
        assert report.summary.records == 200
        maps, resident = _commitlog_maps(store)
        assert maps == len(store.commitlog.files)  # mapped, and read: the check can fail
        assert resident == 0


def test_verify_leaves_no_queue_or_index_page_resident(store_root: Path) -> None:
    """Every unit and index entry is read (by the commitlog's coverage and by the file
    checks): none of those pages stays either."""
    with Store.open(store_root) as store:
        verify_store(store, VerifyOptions(), jobs=1)
        paths = {str(p) for p in (store_root / "consumequeue").rglob("0000*")}
        paths |= {str(p) for p in (store_root / "index").iterdir()}
        maps, resident = _maps(paths)
        assert maps >= 1  # mapped (the index file; small queue files are copies), and read
        assert resident == 0


def test_salvage_leaves_no_commitlog_page_resident(store_root: Path) -> None:
    with Store.open(store_root) as store:
        sink = _Sink()
        salvage(store, sink)
        assert sink.rows == 200
        maps, resident = _commitlog_maps(store)
        assert maps >= 1
        assert resident == 0


def test_scan_leaves_no_commitlog_page_resident(store_root: Path) -> None:
    with Store.open(store_root) as store:
        records = 0
        for _, event in store.scan(None, policy=WalkPolicy.FORENSIC):
            records += len(getattr(event, "columns", ()))
        assert records == 200
        maps, resident = _commitlog_maps(store)
        assert maps >= 1
        assert resident == 0


def test_index_entry_export_leaves_no_index_page_resident(store_root: Path) -> None:
    """The export's index_entries parts read every entry (a full index file is 400 MB)."""
    with Store.open(store_root) as store:
        rows = sum(b.num_rows for p in plan_index(store) for b in index_entry_batches(store, p))
        assert rows >= 200  # a key and a UNIQ_KEY per message
        maps, resident = _maps({str(p) for p in (store_root / "index").iterdir()})
        assert maps >= 1
        assert resident == 0


def _messages_peak(root: Path, out: Path) -> int:
    """The most Arrow memory allocated after any batch the export's messages parts write,
    above what was allocated before (the parts of the store, one after another)."""
    peak = base = pa.total_allocated_bytes()
    write = parquet.TableWriter.write

    def sampled(self: parquet.TableWriter, batch: pa.RecordBatch) -> None:
        nonlocal peak
        write(self, batch)
        peak = max(peak, pa.total_allocated_bytes())

    with patch.object(parquet.TableWriter, "write", sampled), Store.open(root) as store:
        ref = StoreRef.of(store)
        prediction = predict_restart(ref)
        for chunk in plan_ranges(store, (Table.MESSAGES,)):
            keeps = range_keeps(store, chunk, prediction)
            assert run_part(ref, str(out), chunk, (Table.MESSAGES,), keeps).rows
    return peak - base


def test_export_holds_no_more_arrow_memory_for_a_larger_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commitlog range's batches (every topic's rows of one run) are buffered by topic until
    a row group's worth: what the writer holds stays under its budget however many runs the
    range has. Scaled down: 64-record runs of about 70 KB, a 256 KiB budget; a store ten times
    larger (one range each) holds no more at its peak (both held 480 KB, twice the budget,
    before the writer counted the batches its slices keep alive)."""
    monkeypatch.setattr(columns, "RUN_RECORDS", 64)
    monkeypatch.setattr(parquet, "BUFFERED_BYTES", 256 << 10)
    layout = replace(SMALL_LAYOUT, commitlog_file_size=8 << 20)
    peaks = []
    for n in (400, 4000):
        specs = [
            MessageSpec(topic=f"Topic{i % 3}", queue_id=i % 2, body=bytes([65 + i % 26]) * 1000)
            for i in range(n)
        ]
        root = build_store(tmp_path / f"store{n}", specs, layout)
        peaks.append(_messages_peak(root, tmp_path / f"out{n}"))
    small, large = peaks
    # At most the budget and the run being cut. Counting only the slices buffered (a run's
    # batch stays whole while any topic's slice of it is buffered) held twice the budget.
    assert large <= parquet.BUFFERED_BYTES + 70_000
    assert large <= small * 1.25


def _render_peak(report: TransactionsReport, fmt: OutputFormat) -> int:
    """Python's peak allocation while ``report`` is written to /dev/null as ``fmt``."""
    with open(os.devnull, "w") as null, patch.object(sys, "stdout", null):
        tracemalloc.start()
        try:
            render_transactions(report, fmt)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()


@pytest.mark.parametrize("fmt", [OutputFormat.JSON, OutputFormat.JSONL])
def test_transactions_output_does_not_grow_with_the_transactions(
    tmp_path: Path, fmt: OutputFormat
) -> None:
    """The JSON document is written as its transactions are turned into JSON, one at a time:
    built whole, it took four times what the report holds (160 MB for 34,000 transactions)."""
    peaks = []
    for n in (100, 1000):
        p = {props.REAL_TOPIC: "TopicTx", props.REAL_QID: "0", props.PGROUP: "PID_TX"}
        specs = [
            MessageSpec(topic=HALF_TOPIC, uniq_key=f"U{i:08d}", properties=p, body=b"tx")
            for i in range(n)
        ]
        with Store.open(build_store(tmp_path / f"store{n}", specs)) as store:
            report = transactions_report(store)
        assert len(report.transactions) == n
        peaks.append(_render_peak(report, fmt))
    small, large = peaks
    assert large < small * 2  # the whole document grew ten times
