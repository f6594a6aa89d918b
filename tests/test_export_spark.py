"""The spark engine: identical tables to the arrow engine, the ``read_store`` API, and a real
standalone master and worker on loopback. Skipped where Java 17+ is missing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from rmqinspect.export import Engine, ExportOptions, Table, export_store, read_store
from rmqinspect.export.parquet import TMP_SUFFIX, part_file_name
from rmqinspect.export.schema import SCHEMAS, TOPIC_PARTITION
from rmqinspect.export.spark_engine import (
    MIN_JAVA,
    java_major,
    run_spark,
    spark_session,
    stop_context,
)
from rmqinspect.export.tasks import Member
from rmqinspect.format import dledger as dl
from rmqinspect.format.compression import Codec
from rmqinspect.format.profile import Profile
from rmqinspect.store.model import Store, StoreOptions
from tests.cli_helpers import SMALL_OPTS, run_jsonl
from tests.conftest import FIXTURES, ROOT
from tests.export_helpers import broker_rows, hostile_store, read_table, snapshot, sorted_rows
from tests.test_compressed_bodies import (
    STORE_OPTIONS,
    Case,
    check_exported_bodies,
    listed,
    write_store,
)

pytestmark = pytest.mark.skipif(
    (java_major() or 0) < MIN_JAVA, reason=f"the spark engine needs Java {MIN_JAVA}+"
)

SMALL = StoreOptions(index_slot_num=64, index_num=400)
# Tests run short jobs: a JVM that compiles less starts and finishes them sooner.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
LOOPBACK = "127.0.0.1"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    conf = [("spark.driver.extraJavaOptions", QUICK_JVM), ("spark.sql.shuffle.partitions", "2")]
    with spark_session("local[2]", conf) as session:
        yield session


def test_stop_leaves_the_accumulator_server_to_a_background_thread() -> None:
    # Its shutdown waits for a handler that polls once a second; nothing waits for it. (Which
    # thread shuts it down needs the attribute; the real context's test covers the rest.)
    class Server:
        def __init__(self) -> None:
            self.down = threading.Event()
            self.thread: threading.Thread | None = None

        def shutdown(self) -> None:
            self.thread = threading.current_thread()
            self.down.set()

    class Context:
        def __init__(self) -> None:
            self._accumulatorServer: Server | None = Server()
            self.stopped_with: list[Server | None] = []

        def stop(self) -> None:  # pyspark's stop shuts down the server it still holds
            self.stopped_with.append(self._accumulatorServer)

    sc = Context()
    server = sc._accumulatorServer
    assert server is not None
    stop_context(sc)
    assert sc.stopped_with == [None]
    assert server.down.wait(10) and server.thread is not threading.main_thread()


# A real context, in a child of its own (one context per process, and the module's session is
# in use): its accumulator server, found by its thread rather than pyspark's private attribute,
# is shut down once the context is left, and the context is stopped (a second one starts).
REAL_STOP = """
import threading
from rmqinspect.export.spark_engine import spark_context
with spark_context("local[1]") as sc:
    assert sc.parallelize([1, 2], 1).sum() == 3
    (serving,) = [t for t in threading.enumerate() if t.name.endswith("(serve_forever)")]
serving.join(30)
assert not serving.is_alive(), "the accumulator server still serves"
with spark_context("local[1]") as again:
    assert again.parallelize([4], 1).sum() == 4
print("stopped")
"""


def test_a_real_context_is_stopped_and_its_accumulator_server_shut_down() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", REAL_STOP],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (0, "stopped\n"), proc.stderr


def test_the_driver_heap_starts_small_and_has_a_small_young_generation(spark: Any) -> None:
    # The driver moves no rows: its heap is kept near its live data, not grown by garbage to
    # the collector's default start (a 64th of the machine's memory) and young generation
    # (a third of the 1 GB maximum).
    jvm = spark.sparkContext._jvm
    management = jvm.java.lang.management.ManagementFactory
    pools = {p.getName(): p.getUsage().getMax() for p in management.getMemoryPoolMXBeans()}
    assert 0 < pools["Eden Space"] <= 32 << 20
    arguments = list(management.getRuntimeMXBean().getInputArguments())
    assert "-Xms32m" in arguments and "-XX:MaxHeapFreeRatio=50" in arguments


def test_workers_import_the_installed_pyspark(spark: Any) -> None:
    # Not Spark's pyspark.zip, whose modules the daemon would compile at every start.
    where = spark.sparkContext.parallelize([0], 1).map(lambda _: pyspark.__file__).collect()
    assert where == [pyspark.__file__] and ".zip" not in where[0]


def test_both_engines_write_identical_tables(spark: Any, tmp_path: Path) -> None:
    store = hostile_store(tmp_path / "store")
    before = snapshot(store)
    arrow = export_store(
        store, tmp_path / "arrow", ExportOptions(engine=Engine.ARROW, jobs=2, store=SMALL)
    )
    done = export_store(
        store, tmp_path / "spark", ExportOptions(engine=Engine.SPARK, store=SMALL), spark=spark
    )
    assert snapshot(store) == before
    assert done["tables"] == arrow["tables"]
    assert done["source_files"] == arrow["source_files"]
    assert done["engine"] == "spark" and done["master"] == "local[2]"  # the session's own
    for table in Table:
        a = read_table(tmp_path / "arrow", table)
        s = read_table(tmp_path / "spark", table)
        assert s.schema.equals(a.schema), table
        assert sorted_rows(s).equals(sorted_rows(a)), table
    assert read_table(tmp_path / "spark", Table.FINDINGS).num_rows == 1  # the damaged body
    spark_dirs = sorted(p.name for p in (tmp_path / "spark" / "messages").iterdir())
    arrow_dirs = sorted(p.name for p in (tmp_path / "arrow" / "messages").iterdir())
    assert spark_dirs == arrow_dirs  # Spark's own path escaping leaves the values alone
    assert not [p for p in (tmp_path / "spark").rglob("*") if p.name.startswith((".", "_S"))]


def test_read_store_of_several_stores_has_a_broker_column(spark: Any) -> None:
    one, two = FIXTURES / "stores" / "clean53", FIXTURES / "stores" / "crash53"
    df = read_store(spark, f"a={one}", f"b={two}", table="messages")
    assert df.columns == [*SCHEMAS[Table.MESSAGES].names, "broker"]
    rows = df.select("broker", "physical_offset").collect()
    for name, path in (("a", one), ("b", two)):
        alone = read_store(spark, path, table="messages").select("physical_offset").collect()
        assert sorted(r.physical_offset for r in rows if r.broker == name) == sorted(
            r.physical_offset for r in alone
        )
        assert alone


def test_read_store_returns_the_dataframe(spark: Any) -> None:
    store = FIXTURES / "stores" / "clean53"
    df = read_store(spark, store, table="messages")
    assert df.columns == SCHEMAS[Table.MESSAGES].names
    rows = df.select("physical_offset", "topic").collect()
    listed = [
        m for m in run_jsonl("messages", store, "--body", "none", expect=0) if "skipped" not in m
    ]
    assert sorted((r.physical_offset, r.topic) for r in rows) == sorted(
        (m["physical_offset"], m["topic"]) for m in listed
    )
    with pytest.raises(Exception, match="unknown table"):
        read_store(spark, store, table="nope").count()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the Spark master exited"
        with socket.socket() as s:
            if s.connect_ex((LOOPBACK, port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"nothing listens on {LOOPBACK}:{port}")


def test_export_on_a_standalone_master_and_worker(tmp_path: Path) -> None:
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = dict(os.environ, SPARK_LOCAL_IP=LOOPBACK, SPARK_NO_DAEMONIZE="1")
    env["SPARK_DAEMON_JAVA_OPTS"] = QUICK_JVM
    port = _free_port()
    master_url = f"spark://{LOOPBACK}:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(tmp_path / "master.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [str(spark_class), "org.apache.spark.deploy.master.Master", "--host",
                     LOOPBACK, "--port", str(port), "--webui-port", str(_free_port())],
                    env=env, stdout=log, stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
        _wait_for_port(port, procs[0])
        with open(tmp_path / "worker.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [str(spark_class), "org.apache.spark.deploy.worker.Worker", master_url,
                     "--host", LOOPBACK, "--cores", "2", "--memory", "1g", "--webui-port",
                     str(_free_port()), "--work-dir", str(tmp_path / "work")],
                    env=env, stdout=log, stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
        store = FIXTURES / "stores" / "crash53"
        out = tmp_path / "out"
        cmd = [sys.executable, "-m", "rmqinspect", "export", str(store), str(out), "-F", "json"]
        cmd += ["--master", master_url, "--tables", "messages", *SMALL_OPTS]
        for key, value in (
            ("spark.driver.host", LOOPBACK),
            ("spark.driver.bindAddress", LOOPBACK),
            ("spark.driver.extraJavaOptions", QUICK_JVM),
            ("spark.executor.extraJavaOptions", QUICK_JVM),
            ("spark.executor.memory", "512m"),
        ):
            cmd += ["--conf", f"{key}={value}"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stderr == ""  # nor Spark's console notices, nor the JVM's warnings
        manifest = json.loads(done.stdout)
        assert manifest["master"] == master_url
        listed = [
            m
            for m in run_jsonl("messages", store, "--body", "none", expect=0)
            if "skipped" not in m
        ]
        assert manifest["tables"]["messages"]["rows"] == len(listed) > 0
        assert read_table(out, Table.MESSAGES).num_rows == len(listed)
        assert "app-" in (tmp_path / "master.log").read_text(errors="replace")  # ran there
        # A fleet in one job on the same cluster: each broker's rows are its store's own.
        fleet = {"a": store, "b": FIXTURES / "stores" / "clean49"}
        assert cmd[4:6] == [str(store), str(out)]
        cmd[4:6] = [*(f"{name}={path}" for name, path in fleet.items()), "-o", str(tmp_path / "f")]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        manifest = json.loads(done.stdout)
        assert [s["broker"] for s in manifest["stores"]] == ["a", "b"]
        for name, path in fleet.items():
            single = tmp_path / f"single-{name}"
            options = ExportOptions((Table.MESSAGES,), Engine.ARROW, jobs=1, store=SMALL)
            export_store(path, single, options)
            want = sorted_rows(read_table(single, Table.MESSAGES))
            got = sorted_rows(broker_rows(tmp_path / "f", Table.MESSAGES, name))
            assert got.equals(want) and want.num_rows > 0, name
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_both_engines_export_a_dledger_store(spark: Any, tmp_path: Path) -> None:
    """A writer-built DLedger store with a torn entry DLedger keeps: both engines give the same
    tables; rows are the records inside entries, named by their data file and position."""
    from rmqinspect.synth import damage
    from tests.test_dledger import write

    store = tmp_path / "store"
    puts = write(store, 300)
    damage.torn_tail(store)
    arrow = export_store(
        store, tmp_path / "arrow", ExportOptions(engine=Engine.ARROW, jobs=2, store=SMALL)
    )
    done = export_store(
        store, tmp_path / "spark", ExportOptions(engine=Engine.SPARK, store=SMALL), spark=spark
    )
    assert done["tables"] == arrow["tables"]
    for table in Table:
        a = read_table(tmp_path / "arrow", table)
        s = read_table(tmp_path / "spark", table)
        assert s.schema.equals(a.schema), table
        assert sorted_rows(s).equals(sorted_rows(a)), table
    messages = sorted_rows(read_table(tmp_path / "arrow", Table.MESSAGES))
    assert sorted(messages.column("physical_offset").to_pylist()) == [
        p.physical_offset for p in puts[:-1]
    ]
    size = 64 * 1024
    rows = zip(
        messages.column("physical_offset").to_pylist(),
        messages.column("file").to_pylist(),
        messages.column("file_position").to_pylist(),
        strict=True,
    )
    for phy, source, pos in rows:
        assert (source, pos) == (f"dledger-n0/data/{phy - phy % size:020d}", phy % size)
    assert all(messages.column("restart_keeps").to_pylist())
    # Each row names its entry's Raft index and term, as the entry header before it says.
    for row in messages.select(
        ["file", "file_position", "dledger_index", "dledger_term"]
    ).to_pylist():
        data = (store / row["file"]).read_bytes()
        entry = dl.EntryHeader.decode(data, row["file_position"] - dl.BODY_OFFSET)
        assert (row["dledger_index"], row["dledger_term"]) == (entry.index, entry.term)
    indexes = messages.column("dledger_index").to_pylist()
    assert sorted(indexes) == list(range(len(puts) - 1))  # the torn last entry is a finding
    (finding,) = read_table(tmp_path / "arrow", Table.FINDINGS).to_pylist()
    assert finding["physical_offset"] == puts[-1].physical_offset


def test_spark_tasks_write_the_arrow_engines_files_and_leftovers_are_swept(
    spark: Any, tmp_path: Path
) -> None:
    """The tasks run the arrow engine's part task, so the files are the same, byte for byte;
    files that failed attempts left (part files no success reported, temporary files) go."""
    store = hostile_store(tmp_path / "store")
    export_store(store, tmp_path / "arrow", ExportOptions(engine=Engine.ARROW, jobs=2, store=SMALL))
    out = tmp_path / "spark"
    stray = out / "messages" / f"{TOPIC_PARTITION}=gone" / part_file_name(3, 1)
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"half")
    (out / "findings").mkdir()
    (out / "findings" / f".{part_file_name(0, 1)}.dead{TMP_SUFFIX}").write_bytes(b"half")
    ticks: list[tuple[str, int, int]] = []
    with Store.open(store, SMALL) as s:
        (result,), master = run_spark(
            [Member(s)], out, tuple(Table), "unused", (), lambda *a: ticks.append(a), spark
        )
    assert master == "local[2]"
    arrow = _files(tmp_path / "arrow")
    del arrow["_manifest.json"]
    assert _files(out) == arrow
    manifest = json.loads((tmp_path / "arrow" / "_manifest.json").read_text())
    assert {t.value: n for t, n in result.rows.items()} == {
        t: info["rows"] for t, info in manifest["tables"].items()
    }
    assert all(0 <= done <= total for _, done, total in ticks)


def _files(root: Path) -> dict[str, bytes]:
    return {
        Path(d, n).relative_to(root).as_posix(): Path(d, n).read_bytes()
        for d, _, names in os.walk(root)
        for n in names
    }


@pytest.mark.parametrize(
    "case",
    [
        (Profile.V4_9, Codec.ZLIB),
        (Profile.V5_3, Codec.ZLIB),
        (Profile.V5_3, Codec.ZSTD),
        (Profile.V5_3, Codec.LZ4),
    ],
    ids=lambda c: f"{c[0]}-{c[1]}",
)
def test_both_engines_write_decompressed_bodies(
    spark: Any, tmp_path: Path, case: tuple[Profile, Codec]
) -> None:
    store = write_store(tmp_path / "store", Case(*case))
    arrow = ExportOptions(
        engine=Engine.ARROW, jobs=2, store=STORE_OPTIONS, tables=(Table.MESSAGES,)
    )
    export_store(store, tmp_path / "arrow", arrow)
    spark_options = ExportOptions(
        engine=Engine.SPARK, store=STORE_OPTIONS, tables=(Table.MESSAGES,)
    )
    export_store(store, tmp_path / "spark", spark_options, spark=spark)
    check_exported_bodies(tmp_path / "spark", listed(store))
    a = read_table(tmp_path / "arrow", Table.MESSAGES)
    s = read_table(tmp_path / "spark", Table.MESSAGES)
    assert s.schema.equals(a.schema) and sorted_rows(s).equals(sorted_rows(a))


def test_the_data_source_reads_the_timers_table(spark: Any, tmp_path: Path) -> None:
    """The Spark DataSource's timers batches match the declared schema (``read`` builds each
    batch with it) and hold the arrow engine's rows (tests/test_export_timers.py checks those
    against the writer)."""
    from tests.test_export_timers import timers_store

    store, placed = timers_store(tmp_path / "store")
    wanted = (Table.TIMERS,)
    export_store(store, tmp_path / "arrow", ExportOptions(wanted, engine=Engine.ARROW, jobs=1))
    a = read_table(tmp_path / "arrow", Table.TIMERS)
    assert a.schema.equals(SCHEMAS[Table.TIMERS])
    df = read_store(spark, store, table="timers")
    assert df.columns == SCHEMAS[Table.TIMERS].names
    names = ["timerlog_offset", "physical_offset", "state", "uniq_key", "roll_times"]
    rows = sorted(tuple(r) for r in df.select(*names).collect())
    assert rows == sorted(zip(*(a.column(n).to_pylist() for n in names), strict=True))
    assert sorted(r[1] for r in rows) == sorted(placed)
