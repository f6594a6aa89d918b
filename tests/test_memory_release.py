"""Walks drop the pages they have read: after ``verify``, ``salvage`` or a forensic scan of the
commitlog, no page of a commitlog file stays resident in the process, though the files stay
mapped (the store keeps its maps open). Mapped pages count in a process's RSS: a command that
kept them would grow with the store (benchmarks/memory.py measures the commands themselves)."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rmqinspect.analysis import delivered
from rmqinspect.analysis import salvage as salvage_module
from rmqinspect.analysis.delivered import consumed_by_groups
from rmqinspect.analysis.queues import iter_unit_chunks, queue_bounds
from rmqinspect.analysis.salvage import salvage
from rmqinspect.analysis.transactions import TransactionsReport, transactions_report
from rmqinspect.analysis.verify import VerifyOptions, verify_store
from rmqinspect.analysis.verify.collisions import KeySpill, shared_hashes
from rmqinspect.analysis.verify.finding import Finding, Severity
from rmqinspect.analysis.verify.indexes import _CHUNK, _slot_of
from rmqinspect.export import parquet
from rmqinspect.export.plan import StoreRef, plan_index
from rmqinspect.export.schema import Table
from rmqinspect.export.tables import findings_batch, index_entry_batches
from rmqinspect.export.tasks import plan_ranges, predict_restart, range_keeps, run_part
from rmqinspect.format import columns
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.format.consumequeue import CQ_UNIT_DTYPE
from rmqinspect.format.fate import HALF_TOPIC
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.format.index import ENTRY_DTYPE, INDEX_ENTRY_SIZE, IndexGeometry
from rmqinspect.format.npbytes import distinct
from rmqinspect.format.scan import WalkPolicy
from rmqinspect.render.output import OutputFormat
from rmqinspect.render.transactions import render_transactions
from rmqinspect.store import ordered_reads
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT, build_store, read_from_disk

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


def _queue_of_units(tmp_path: Path, n: int) -> tuple[Path, Path]:
    """A store whose queue TopicA/0 is one file of ``n`` valid units (as the writer lays them
    out, 2 MB for 100,000), read from disk; the store's root and the file."""
    layout = replace(SMALL_LAYOUT, commitlog_file_size=1 << 20, cq_file_size=n * 20)
    root = build_store(tmp_path / "store", [MessageSpec(topic="TopicA", body=b"x")], layout)
    units = np.zeros(n, CQ_UNIT_DTYPE)
    units["phy_offset"], units["size"] = np.arange(n) * 100, 100
    path = root / "consumequeue" / "TopicA" / "0" / f"{0:020d}"
    path.write_bytes(units.tobytes())
    read_from_disk(path)
    return root, path


def test_queue_bounds_leave_no_queue_page_resident(tmp_path: Path) -> None:
    """``groups``, ``offsets`` and the restart read each queue whole (its pre-blank count,
    ``recover``, ``correctMinOffset``): its pages went with it to the end of the command,
    2.3 MB per queue of a 2 GB store."""
    if not SMAPS.exists():
        pytest.skip("no /proc/self/smaps here: a process's mapped pages cannot be counted")
    n = 100_000
    root, path = _queue_of_units(tmp_path, n)
    with Store.open(root) as store:
        bounds = queue_bounds(store, QueueId("TopicA", 0))
        assert (bounds.min_offset, bounds.max_offset) == (0, n)
        maps, resident = _maps({str(path)})
        assert maps == 1  # mapped, and read: the check can fail
        # Of its 1953 KiB: the pages a chunk's ends share, and those the kernel maps around a
        # later read of one unit (fault-around, a folio).
        assert resident <= 512


def test_unit_chunks_leave_no_queue_page_resident(tmp_path: Path) -> None:
    """The export's consume_queue table and ``consumequeue`` read a queue's units a chunk at
    a time: each chunk's pages stayed mapped to the end of the part, every queue file read
    (144 MB of an 8 GiB store's in one export worker)."""
    if not SMAPS.exists():
        pytest.skip("no /proc/self/smaps here: a process's mapped pages cannot be counted")
    n = 100_000
    root, path = _queue_of_units(tmp_path, n)
    with Store.open(root) as store:
        chunks = list(iter_unit_chunks(store, "TopicA", 0, 0, None, chunk=7_001))
        assert sum(len(c.units) for c in chunks) == n and len(chunks) == 15
        maps, resident = _maps({str(path)})
        assert maps == 1  # mapped, and read: the check can fail
        # Of its 1953 KiB: what the kernel maps around the last read (fault-around, a folio).
        assert resident <= 512


def test_index_slot_lookups_keep_one_window_resident(tmp_path: Path) -> None:
    """The slot and link checks look up entries all over the index file; each lookup reads
    them a window at a time and drops it, so at most a window's pages (plus the pages the
    windows share) stay: all of the file's entries stayed (400 MB for a full file)."""
    if not SMAPS.exists():
        pytest.skip("no /proc/self/smaps here: a process's mapped pages cannot be counted")
    geometry = IndexGeometry(101, 8 * _CHUNK)
    n = 8 * _CHUNK
    entries = np.zeros(n, ENTRY_DTYPE)
    entries["key_hash"] = np.random.default_rng(5).integers(-(2**31), 2**31, n)
    path = tmp_path / "index"
    path.write_bytes(bytes(geometry.entries_base + INDEX_ENTRY_SIZE) + entries.tobytes())
    rows = np.random.default_rng(6).integers(0, n, _CHUNK)  # a chunk, all over the file
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:

        def drop(a: int, b: int) -> None:
            first, last = -(-a // mmap.PAGESIZE) * mmap.PAGESIZE, b // mmap.PAGESIZE * mmap.PAGESIZE
            m.madvise(mmap.MADV_DONTNEED, first, max(0, min(last, len(m)) - first))

        def lookup() -> list[int]:  # the views of the map end with it: the map can close
            mapped = np.frombuffer(m, ENTRY_DTYPE, n, geometry.entry_position(1))
            slots: list[int] = _slot_of(mapped, geometry, drop)(rows).tolist()
            return slots

        slots = lookup()
        _, resident = _maps({str(path)})
    hashes = entries["key_hash"][rows].astype(np.int64)
    assert slots == np.where(hashes >= 0, hashes % 101, -1).tolist()
    # Of the 10 MiB of entries read, only the pages two windows share may stay, and those the
    # kernel maps around a window's first fault (fault-around: 64 KiB of cached pages).
    assert resident <= 8 * 64


def _sent_back_store(root: Path, n: int) -> Path:
    """``n`` messages of topic T that group ``g`` consumed, failed and sent back (the send-back
    names the copy by ORIGIN_MESSAGE_ID), then failed again from ``%RETRY%g``."""
    layout = replace(SMALL_LAYOUT, commitlog_file_size=8 << 20)
    host = HostAddress(bytes([127, 0, 0, 1]), 10911)
    with StoreWriter(root, layout) as w:
        for i in range(n):
            key = f"7F00000100002A9F0000{i:012d}"
            first = w.put(MessageSpec(topic="T", uniq_key=key))
            origin = {props.ORIGIN_MESSAGE_ID: encode_offset_msg_id(host, first.physical_offset)}
            back = MessageSpec(
                topic="%RETRY%g", uniq_key=key, delay_level=3, reconsume_times=1, properties=origin
            )
            w.put(back)
            w.put(MessageSpec(topic="%RETRY%g", uniq_key=key, reconsume_times=1))
            w.put(replace(back, reconsume_times=2))
    return root


def test_groups_proof_does_not_grow_with_the_retry_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``groups`` matches a group's send-backs with its retry copies and origins: held in this
    process, even as 16-byte digests, they took about 115 bytes a message sent back (206 KB
    more for the 1,800 more here); in the scratch database Python's peak stays the same."""
    monkeypatch.setattr(columns, "RUN_RECORDS", 64)  # a walk's own arrays stay small
    monkeypatch.setattr(delivered, "_BATCH", 64)
    peaks = []
    # The small store twice: the first call also caches what every call needs (1 MB).
    for n in (600, 600, 2400):
        root = tmp_path / f"store{n}"
        if not root.exists():
            _sent_back_store(root, n)
        with Store.open(root) as store:
            tracemalloc.start()
            try:
                proof = consumed_by_groups(store, {"g"})
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            # Each copy of T and of %RETRY%g is proven, and only those.
            for qid in (QueueId("T", 0), QueueId("%RETRY%g", 0)):
                assert proof.count("g", qid, 0, n) == n
                assert proof.count("g", qid, 1, n + 5) == n - 1
                assert proof.count("other", qid, 0, n) == 0
            assert proof.count("g", QueueId("T", 1), 0, n) == 0
            # The origins' records were read, and their pages dropped (the walk's too).
            assert _commitlog_maps(store)[1] == 0
        peaks.append(peak)
    _, small, large = peaks
    assert large - small < 48 << 10  # bytes; held in this process it took 200 KiB more


def test_delays_deliveries_do_not_grow_with_the_schedule_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``delays`` matches each schedule unit with its delivery in the real topic: held in this
    process, in lists per link, they took about 750 bytes a delivered unit (1.3 MB more for the
    1,800 more here); in the scratch database Python's peak stays the same."""
    monkeypatch.setattr(columns, "RUN_RECORDS", 64)
    monkeypatch.setattr(delivered, "_BATCH", 64)
    layout = replace(SMALL_LAYOUT, commitlog_file_size=8 << 20)
    peaks = []
    for n in (600, 600, 2400):  # the first call also caches what every call needs
        root = tmp_path / f"store{n}"
        if not root.exists():
            with StoreWriter(root, layout) as w:
                for i in range(n):
                    key = f"7F00000100002A9F0000{i:012d}"
                    w.put(MessageSpec(topic="T", uniq_key=key, delay_level=3))
                    p = {props.REAL_TOPIC: "T", props.REAL_QID: "0", props.UNIQ_KEY: key}
                    raw = props.encode_properties_map(p, trailing_separator=True)
                    w.put(MessageSpec(topic="T", properties=raw))  # its delivery
        with Store.open(root) as store:
            tracemalloc.start()
            try:
                units = delivered.delivered_units(store, None)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            level3 = QueueId(SCHEDULE_TOPIC, 2)
            assert units.offsets(delivered.BY_SCHEDULE, level3, 0, n).tolist() == list(range(n))
        peaks.append(peak)
    _, small, large = peaks
    assert large - small < 48 << 10  # bytes


def test_ordered_reads_keep_a_window_of_pages_resident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records read one by one across the commitlog (the origins groups proves, a retry queue's
    first copies) leave only the window behind the last read resident, and nothing once done:
    before, every page they touched stayed (2.3 GB for a 2 GiB --fate store)."""
    monkeypatch.setattr(ordered_reads, "WINDOW", 64 << 10)
    root = _sent_back_store(tmp_path / "s", 1200)
    with Store.open(root) as store:
        f = store.commitlog.files[0]
        positions = range(f.start, f.start + 1_000_000, 4_000)  # records or not: both read
        reads = ordered_reads.OrderedReads(store)
        most = 0
        for position in positions:
            reads.record(position)
            most = max(most, _commitlog_maps(store)[1])
        assert most <= 64 + 4 * 64  # KiB: the window, and what faulting around a read maps
        reads.close()
        assert _commitlog_maps(store)[1] == 0


def test_salvage_leaves_no_commitlog_page_resident(store_root: Path) -> None:
    with Store.open(store_root) as store:
        sink = _Sink()
        salvage(store, sink)
        assert sink.rows == 200
        maps, resident = _commitlog_maps(store)
        assert maps >= 1
        assert resident == 0


_HEAP_CODE = """
import ctypes
from rmqinspect.store.fileio import release_freed_heap
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def anon():
    line = next(x for x in open("/proc/self/status") if x.startswith("RssAnon:"))
    return int(line.split()[1])
blocks = [libc.malloc(64 << 10) for _ in range(1600)]  # below the mmap threshold: the heap
for b in blocks:
    ctypes.memset(b, 1, 64 << 10)
for b in blocks[:-1]:  # the last keeps the heap's top in use: free() trims nothing
    libc.free(b)
before = anon()
release_freed_heap(past=200 << 20)  # 100 MiB free: fewer than that, so nothing is asked
kept = anon()
release_freed_heap(past=50 << 20)
print(before, kept, anon())
"""


def test_freed_heap_goes_back_to_the_kernel() -> None:
    """100 MiB of the C heap freed below a block still in use stay resident until glibc is
    asked for them (what salvage's runs freed between the Parquet writer's metadata), and are
    asked for only past the free bytes given (the export's writer allows some between row
    groups: each release costs the faults of taking the pages again)."""
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc/self/status here: a process's resident memory cannot be read")
    out = subprocess.run([sys.executable, "-c", _HEAP_CODE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    before, kept, after = map(int, out.stdout.split())
    assert abs(before - kept) < 8 << 10  # KiB
    assert kept - after > 80 << 10


def test_the_export_writer_hands_the_heap_back_after_each_row_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A range task's peak grew with the chance of a bad heap layout (anon 143-191 MiB per
    128 MiB range, 134-160 with this), so the export's peak with the number of ranges."""
    asked: list[int] = []
    monkeypatch.setattr(parquet, "release_freed_heap", asked.append)
    writer = parquet.TableWriter(tmp_path / "t", Table.FINDINGS, 0)
    finding = Finding("index.geometry", Severity.ERROR, "index/x", "no usable header")
    writer.write(findings_batch([finding] * 3))
    assert asked == []  # buffered: no row group written yet
    assert writer.close() == 3
    assert asked == [parquet.HEAP_SLACK]  # after the one row group


def test_salvage_hands_the_heap_back_after_each_run(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crashed synth store's salvage held a heap of 77 MiB for 28 in use at 8 GB (54 for 20
    at 2 GB): the pages its runs free go back to the kernel after each run."""
    released = []
    sink = _Sink()
    monkeypatch.setattr(salvage_module, "release_freed_heap", lambda: released.append(sink.rows))
    with Store.open(store_root) as store:
        salvage(store, sink)
    assert sink.rows == 200
    # Once after each run of records, each of which the sink was given first.
    assert len(released) >= 4 and released[-1] == 200
    assert released == sorted(set(released))


_PARTS_CODE = """
import sys
from pathlib import Path
import numpy as np
from rmqinspect.export.salvage import SalvageWriter
from rmqinspect.format.columns import gather
from rmqinspect.store.fileio import release_freed_heap
from rmqinspect.store.model import Store
def anon():
    line = next(x for x in open("/proc/self/status") if x.startswith("RssAnon:"))
    return int(line.split()[1])
n = int(sys.argv[3])
one, yes = np.zeros(1, np.int64), np.ones(1, bool)
seen = []
with Store.open(Path(sys.argv[1])) as store, SalvageWriter(Path(sys.argv[2])) as writer:
    f = store.commitlog.files[0]
    cols = gather(store.view(f), one, f.start)
    for count in (n, 3 * n):  # row groups: n, then 4n in all
        for _ in range(count):
            writer.add_columns(cols, one, yes, yes, [()])
        release_freed_heap()
        seen.append(anon())
print(*seen)
"""


def test_salvage_parquet_metadata_stays_bounded(store_root: Path, tmp_path: Path) -> None:
    """The Parquet writer keeps each row group's metadata until its file closes (some 25 KB a
    row group of salvage's 31 columns): in one file, 384 more row groups of one record each
    held some 9.5 MiB more. Parts of a bounded number of row groups hold the same whatever
    the count."""
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc/self/status here: a process's resident memory cannot be read")
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-c", _PARTS_CODE, str(store_root), str(out), "128"]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    at_n, at_4n = map(int, done.stdout.split())
    assert at_4n - at_n < 4 << 10  # KiB: at most one part's metadata, and allocator noise
    assert pq.read_table(out / "messages.parquet").num_rows == 4 * 128


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
    # Built whole, the document for 900 more transactions took some 4 MB more. The margin is
    # for what other threads allocate meanwhile (tracemalloc counts them: pytest-xdist's
    # channel thread added 18 KB to a 17 KB peak once).
    assert large - small < 256 * 1024


@pytest.mark.parametrize(("chosen", "backend"), [(None, "system"), ("mimalloc", "mimalloc")])
def test_commands_allocate_arrow_memory_with_the_c_library(
    chosen: str | None, backend: str
) -> None:
    """Every command's Arrow memory (the Parquet writer's and the compute kernels' included)
    comes from the C library's allocator, which hands freed batches back: with mimalloc,
    pyarrow's default, salvage's peak RSS grew with the store (206 MiB for a 2 GB store, 172
    for 0.25 GB; 179 with the C library's). ARROW_DEFAULT_MEMORY_POOL still chooses."""
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if chosen is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    code = (
        "import rmqinspect.cli.app, pyarrow as pa, pyarrow.compute as pc;"
        "print(pa.default_memory_pool().backend_name,"
        " pc.sum(pa.array(range(10**6))).as_py())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [backend, str(sum(range(10**6)))]


def test_transactions_hold_one_string_per_topic_and_group(tmp_path: Path) -> None:
    """Every transaction's topic and producer group were strings of their own (4 MB of a 2 GB
    store's 34,000 transactions): the few distinct ones are shared."""
    p = {props.REAL_TOPIC: "TopicTx", props.REAL_QID: "0", props.PGROUP: "PID_TX"}
    specs = [
        MessageSpec(topic=HALF_TOPIC, uniq_key=f"U{i:08d}", properties=p, body=b"tx")
        for i in range(50)
    ]
    with Store.open(build_store(tmp_path / "store", specs)) as store:
        txs = transactions_report(store).transactions
    assert [(t.real_topic, t.producer_group) for t in txs] == [("TopicTx", "PID_TX")] * 50
    assert len({id(t.real_topic) for t in txs}) == len({id(t.producer_group) for t in txs}) == 1


def test_index_key_collisions_are_found_a_range_of_hashes_at_a_time() -> None:
    """verify's hash collision check held every part's key fingerprints of an index file until
    the end (27 MB of a 2 GB store's file; 160 MB of a full one): they wait in a temporary file
    and are compared a range of hashes at a time, with the same answer, shared hashes in the
    first and last ranges and across parts included."""
    rng = np.random.default_rng(9)
    hashes = rng.integers(-(2**31), 2**31, 400_000)
    hashes[:4] = [-(2**31), -(2**31), 2**31 - 1, 2**31 - 1]  # the ranges' ends, shared
    prints = rng.integers(0, 2**32, 400_000)
    prints[400_000 - 8 :] = prints[:8]  # the same key again in the last part: no collision
    hashes[400_000 - 8 :] = hashes[:8]
    keys = (hashes << 32) | prints
    parts = [distinct(keys[a : a + 50_000]) for a in range(0, len(keys), 50_000)]
    expected = shared_hashes(np.unique(keys))
    spill = KeySpill()
    try:
        for part in parts:
            spill.add([part])
        tracemalloc.start()
        try:
            got = spill.shared_hashes()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        spill.close()
    assert got.tolist() == expected.tolist()
    assert {-(2**31), 2**31 - 1} <= set(got.tolist()) and len(got) > 10
    assert peak < keys.nbytes / 8  # a range's keys (1/64 of them) and its pieces, not all


def _transactions_peak(root: Path) -> tuple[int, int]:
    """(Python's peak allocation while the report is made and its transactions and findings are
    read twice, the transactions) for the store at ``root``."""
    with Store.open(root) as store:
        tracemalloc.start()
        try:
            report = transactions_report(store)
            for _ in range(2):
                read = sum(len(t.halves) + len(t.commit_positions) for t in report.transactions)
                assert read == 2 * len(report.transactions)
                assert sum(1 for _ in report.findings) == 2 * len(report.transactions)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return peak, len(report.transactions)


def test_transactions_report_does_not_grow_with_the_transactions(tmp_path: Path) -> None:
    """Every half, link, transaction and finding is a row of the scratch database: making the
    report and reading it does not grow with the transactions. Kept in memory as columns of
    numbers, a UNIQ_KEY map and the findings' sort keys, it took some 300 bytes a transaction
    (a 2 GB crashed synth store's peak RSS 16 MiB over a 0.25 GB one's, 44 more at 8 GB)."""
    p = {props.REAL_TOPIC: "TopicTx", props.REAL_QID: "0", props.PGROUP: "PID_TX"}
    peaks = []
    for n in (400, 1600):
        with StoreWriter(tmp_path / f"store{n}", SMALL_LAYOUT) as w:
            for i in range(n):
                half = w.put(
                    MessageSpec(topic=HALF_TOPIC, uniq_key=f"U{i:08d}", properties=p, body=b"t")
                ).physical_offset
                w.put(
                    MessageSpec(
                        topic="TopicTx",
                        queue_id=1,  # not the half's REAL_QID: commit_elsewhere
                        uniq_key=f"U{i:08d}",
                        properties=p,
                        body=b"t",
                        sys_flag=cl.TRANSACTION_COMMIT_TYPE,
                        prepared_transaction_offset=half,
                    )
                )
        peaks.append(_transactions_peak(tmp_path / f"store{n}"))  # + commit_without_op each
    (small, n_small), (large, n_large) = peaks
    assert (n_small, n_large) == (400, 1600)
    # 1,200 more transactions took 320 KB more in memory; the margin is for what other threads
    # allocate meanwhile (tracemalloc counts them).
    assert large - small < 128 * 1024
