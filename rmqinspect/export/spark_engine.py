"""``--engine spark``: each table is a DataFrame of the ``rocketmq-store`` source, written by
Spark's Parquet writer. Any master URL works (``local[*]`` by default); the same code runs under
``spark-submit`` (:mod:`rmqinspect.export.submit`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rmqinspect.errors import StoreError
from rmqinspect.export.schema import PARTITION_COLUMN, Table

MIN_JAVA = 17
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")  # errors only, on stderr
# Parquet as the arrow engine writes it: zstd, timestamps in ms, no _SUCCESS or .crc files.
WRITE_CONF = {
    "spark.sql.parquet.compression.codec": "zstd",
    # zstd level 1, as the arrow engine writes (parquet-mr defaults to 3).
    "spark.hadoop.parquet.compression.codec.zstd.level": "1",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    # A task writes its few topics' files side by side instead of sorting its rows first.
    "spark.sql.maxConcurrentOutputFileWriters": "64",
}
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
}

SUBMITTED = "PYSPARK_GATEWAY_PORT"  # set for a Python driver that spark-submit launched
Tick = Callable[[str, int, int], None]  # (table, tasks done, tasks in all)


class SparkUnavailable(StoreError):
    """Spark cannot run here (no suitable Java): the message says so in one sentence."""


class SparkJobFailed(StoreError):
    """The session or a job failed; the message is the first line of Spark's error."""


@contextmanager
def spark_errors() -> Iterator[None]:
    """Spark's and the JVM's exceptions as one-line :class:`SparkJobFailed` (the full error
    is chained for ``RMQINSPECT_DEBUG=1``)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JError) as err:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
        raise SparkJobFailed(f"the Spark job failed: {first or type(err).__name__}") from err


def java_major() -> int | None:
    """The major version of the Java Spark would launch (JAVA_HOME, else PATH), or None."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if not java or not Path(java).exists():
        return None
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def require_java() -> None:
    major = java_major()
    if major is None or major < MIN_JAVA:
        found = "no Java was found" if major is None else f"Java {major} was found"
        raise SparkUnavailable(
            f"the spark engine needs Java {MIN_JAVA} or newer and {found}; "
            "install it or use --engine arrow"
        )


@contextmanager
def spark_session(master: str, conf: Sequence[tuple[str, str]] = ()) -> Iterator[Any]:
    """A session on ``master`` whose Python workers run this interpreter (so they import
    rmqinspect), quiet on the console; stopped on exit."""
    from pyspark.sql import SparkSession

    if SUBMITTED in os.environ:
        # Started by spark-submit: its JVM, master and settings are already there.
        session = SparkSession.builder.appName("rmqinspect export").getOrCreate()
        apply_write_conf(session)
        try:
            yield session
        finally:
            session.stop()
        return
    require_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = SparkSession.builder.master(master).appName("rmqinspect export")
    given = dict(conf)
    java_options = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
    settings = {
        **(LOCAL_CONF if master.startswith("local") else {}),
        **WRITE_CONF,
        "spark.pyspark.python": sys.executable,
        **given,
        "spark.driver.extraJavaOptions": " ".join(
            o for o in (java_options, given.get("spark.driver.extraJavaOptions")) if o
        ),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        yield session
    finally:
        session.stop()


def apply_write_conf(spark: Any) -> None:
    """:data:`WRITE_CONF` on a session someone else built (SQL settings on the session, Hadoop
    ones on its context)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in WRITE_CONF.items():
        if key.startswith("spark.hadoop."):
            hadoop.set(key.removeprefix("spark.hadoop."), value)
        else:
            spark.conf.set(key, value)


def write_tables(
    spark: Any, store: str, out: Path, tables: Sequence[Table], options: dict[str, str], tick: Tick
) -> dict[Table, int]:
    """Write each table under ``out/<table>``; returns the rows written per table.

    The tables' jobs are submitted from threads, so one table's planning on the driver (the
    restart emulation for ``messages``) overlaps the other tables' tasks.
    """
    from rmqinspect.export import read_store

    def write(table: Table) -> int:
        spark.sparkContext.setJobGroup(table.value, f"rmqinspect export: {table.value}")
        df = read_store(spark, store, table=table.value, **options)
        writer = df.write.mode("error")
        column = PARTITION_COLUMN[table]
        if column is not None:
            writer = writer.partitionBy(column)
        writer.parquet(str(out / table.value))
        return parquet_rows(out / table.value)

    with _watch(spark, tables, tick), ThreadPoolExecutor(len(tables) or 1) as pool:
        rows = dict(zip(tables, pool.map(write, tables), strict=True))
    return rows


def parquet_rows(directory: Path) -> int:
    """Rows in a Parquet dataset, from the files' footers."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(directory.rglob("*.parquet")))


@contextmanager
def _watch(spark: Any, tables: Sequence[Table], tick: Tick) -> Iterator[None]:
    """Report each table's tasks (its job group's stages) to ``tick`` twice a second."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.5):
            for table in tables:
                done = total = 0
                for job in tracker.getJobIdsForGroup(table.value):
                    info = tracker.getJobInfo(job)
                    for stage in info.stageIds if info is not None else ():
                        stage_info = tracker.getStageInfo(stage)
                        if stage_info is not None:
                            done += stage_info.numCompletedTasks
                            total += stage_info.numTasks
                if total:
                    tick(table.value, done, total)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
