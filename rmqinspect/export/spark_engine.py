"""``--engine spark``: Spark jobs whose tasks are the parts the arrow engine runs, each task
reading its part and writing its Parquet files itself (:func:`run_part`), so the JVM moves no
rows and both engines write the same files. Any master URL works (``local[*]`` by default); OUT,
like STORE, must be at the same path on every executor. The same code runs under
``spark-submit`` (:mod:`rmqinspect.export.submit`).

Converting the source's Arrow batches into rows and writing them with Spark's DataFrame writer
made the JVM the bottleneck (a 2 GiB store: 51-56 s against the arrow engine's 8.6 s).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqinspect.analysis.ranges import Range
from rmqinspect.analysis.recovery.fields import Wanted
from rmqinspect.analysis.recovery.keeps import RestartKeeps
from rmqinspect.analysis.recovery.ranges import RangeCheck
from rmqinspect.errors import StoreError
from rmqinspect.export.class_archive import archive_options, archive_path, keep_at_exit
from rmqinspect.export.findings import spark_mapper, write_findings
from rmqinspect.export.plan import CommitlogChunk, CommitlogRange, Part, StoreRef
from rmqinspect.export.schema import Table
from rmqinspect.export.tasks import (
    CheckFile,
    EngineResult,
    Member,
    PartResult,
    Prechecked,
    check_files,
    check_restart_range,
    finish_tables,
    first_chunks,
    plan_file,
    plan_parts,
    plan_ranges,
    plan_restart_checks,
    predict_restart,
    range_keeps,
    run_part,
    sweep,
)
from rmqinspect.format.commitlog import CheckOptions

MIN_JAVA = 17
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")  # errors only, on stderr
# The driver JVM moves no rows: a JVM that compiles less and collects simply starts and runs the
# scheduling sooner (session start measured 8.4-10.7 s -> 7.4-9.5 s).
APP_NAME = "rmqinspect export"
QUICK_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# Its heap holds about 45 MB live (measured by class histogram during a 2 GiB export), but the
# serial collector's default start (a 64th of the machine's memory: 384 MB here) and young
# generation let the garbage of a longer export fill pages up to that: 313 / 382 / 488 MiB
# resident at 0.25 / 2 / 8 GiB. A small start and young generation, grown and shrunk with the
# live data, keep it near the live data (278 MiB at 2 GiB; 2.8 s of collection in a 100 s
# export). Spark refuses a maximum under 450 MB, so the maximum stays as configured.
SMALL_HEAP = (
    "-Xms32m",
    "-XX:MaxNewSize=32m",
    "-XX:MinHeapFreeRatio=20",
    "-XX:MaxHeapFreeRatio=50",
)
LOCAL_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}

INCUBATOR_WARNING = b"WARNING: Using incubator modules:"
DAEMON_MODULE = "rmqinspect.export.spark_daemon"
SUBMITTED = "PYSPARK_GATEWAY_PORT"  # set for a Python driver that spark-submit launched
Tick = Callable[[str, int, int], None]  # (job, tasks done, tasks in all)
JOB_GROUP = "export"
PY4J_CALL = "An error occurred while calling"


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
        # Py4J's first line names the Java call ("An error occurred while calling z:..."):
        # the Java exception under it says what went wrong.
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        said = [line for line in lines if not line.startswith(PY4J_CALL)]
        first = (said or lines or [""])[0].lstrip(": ")
        raise SparkJobFailed(f"the Spark job failed: {first or type(err).__name__}") from err


def java_version() -> str | None:
    """What ``java -version`` says of the Java Spark would launch (JAVA_HOME, else PATH)."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if not java or not Path(java).exists():
        return None
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stderr + proc.stdout


def java_major() -> int | None:
    """The major version of the Java Spark would launch, or None."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', java_version() or "")
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


# How long a standalone master gets to accept a connection before the export gives up on it.
MASTER_PROBE_SECONDS = 5.0
STANDALONE = "spark://"


def require_master(master: str) -> None:
    """A standalone master URL (``spark://host:port``, several comma-separated for HA) one of
    whose hosts accepts a connection; else SparkUnavailable in one sentence. Spark's own client
    keeps trying an unreachable master for a minute (StandaloneAppClient: 3 registration
    attempts 20 s apart) and then fails the first job with the name of a Py4J call."""
    if not master.startswith(STANDALONE):
        return
    tried = []
    for address in master.removeprefix(STANDALONE).split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SparkUnavailable(f"--master {master}: {address!r} is not host:port")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), MASTER_PROBE_SECONDS):
                return
        except OSError as err:
            tried.append(f"{address}: {err.strerror or err}")
    raise SparkUnavailable(
        f"cannot reach the Spark master {master} ({'; '.join(tried)}): start it, or give "
        "another --master"
    )


def _spark_jars() -> Path:
    import pyspark

    home = os.environ.get("SPARK_HOME")
    return Path(home) / "jars" if home else Path(pyspark.__file__).parent / "jars"


@contextmanager
def spark_context(master: str, conf: Sequence[tuple[str, str]] = ()) -> Iterator[Any]:
    """A SparkContext on ``master`` whose Python workers run this interpreter (so they import
    rmqinspect), quiet on the console; stopped on exit. The export needs no SQL: a bare
    context starts in 1.8-2.2 s where a session took 3.8-4.1 s, and its JVM spends 1.5-1.7 s
    of CPU instead of 3.8-4.3 s (measured here, on two cores the export's workers need)."""
    from pyspark import SparkConf, SparkContext

    if SUBMITTED in os.environ:
        # Started by spark-submit: its JVM, master and settings are already there.
        sc = SparkContext.getOrCreate(SparkConf().setAppName(APP_NAME))
        try:
            yield sc
        finally:
            stop_context(sc)
        return
    require_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    given = dict(conf)
    user_options = given.get("spark.driver.extraJavaOptions", "")
    java_options = [f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}", *QUICK_JVM, *SMALL_HEAP]
    archive, temporary = None, None
    starting = SparkContext._gateway is None  # a JVM starts now: it can map or write the archive
    if starting:
        jars = _spark_jars()
        archive = archive_path(java_version() or "", jars)
        sharing, temporary = archive_options(archive, user_options, jars)
        java_options += sharing
    settings = {
        **(LOCAL_CONF if master.startswith("local") else {}),
        # rmqinspect shows its own progress; Spark's bars would write over it on stderr.
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
        "spark.python.daemon.module": DAEMON_MODULE,
        **given,
        "spark.driver.extraJavaOptions": " ".join([*java_options, user_options]).strip(),
    }
    spark_conf = SparkConf().setMaster(master).setAppName(APP_NAME)
    for key, value in settings.items():
        spark_conf = spark_conf.set(key, value)
    if starting:
        gateway = _launch_gateway(spark_conf)
        sc = SparkContext(conf=spark_conf, gateway=gateway)
        if archive is not None and temporary is not None:
            keep_at_exit(lambda: gateway.proc, temporary, archive)
    else:
        sc = SparkContext.getOrCreate(spark_conf)
    try:
        yield sc
    finally:
        stop_context(sc)


def _launch_gateway(spark_conf: Any) -> Any:
    """pyspark's gateway JVM, its standard error passed on by a thread that drops the JVM's
    warning about the incubator module Spark's launcher always adds (the JVM has no switch for
    it): an export's console shows only what rmqinspect prints. The thread reads from before
    the JVM starts, so a JVM that writes much while starting never blocks on a full pipe."""
    from pyspark.java_gateway import launch_gateway

    read_end, write_end = os.pipe()
    threading.Thread(target=_pass_on, args=(read_end,), daemon=True).start()
    try:
        return launch_gateway(spark_conf, popen_kwargs={"stderr": write_end})  # type: ignore[no-untyped-call]
    finally:
        os.close(write_end)  # the JVM holds its own copy


def _pass_on(read_end: int) -> None:
    """Copy the JVM's lines to this process's standard error (the descriptor the JVM would
    have inherited) until the JVM closes its end; a line that cannot be written is dropped,
    never left to fill the pipe."""
    with open(read_end, "rb") as lines:
        for line in lines:
            if not line.startswith(INCUBATOR_WARNING):
                with suppress(OSError):
                    os.write(2, line)


def stop_context(sc: Any) -> None:
    """``sc.stop()``, without waiting for pyspark's accumulator server: its handler looks at
    its connection once a second, so its shutdown took 0.9 s of every export after the output
    was complete. The server is shut down in the background instead, and ends within a second
    (or with this process)."""
    server = getattr(sc, "_accumulatorServer", None)
    sc._accumulatorServer = None
    sc.stop()
    if server is not None:
        threading.Thread(target=server.shutdown, daemon=True).start()


@contextmanager
def spark_session(master: str, conf: Sequence[tuple[str, str]] = ()) -> Iterator[Any]:
    """A SparkSession over :func:`spark_context` (for :func:`rmqinspect.export.read_store`);
    stopped on exit."""
    from pyspark.sql import SparkSession

    with spark_context(master, conf):
        yield SparkSession.builder.getOrCreate()


Item = tuple[int, Part, RestartKeeps | None]  # a store, its part, its cut of the prediction
Prepared = tuple[int, RestartKeeps | list[CommitlogRange]]  # a store's prediction, or a plan
# What a preparing task answers: also one range of an emulation's record checks.
Answer = tuple[int, RestartKeeps | RangeCheck | CheckFile | list[CommitlogRange]]
# What a preparing task is asked (see _Prepare).
Ask = tuple[
    int, CommitlogChunk | tuple[CheckOptions, Range, Wanted | None, str] | Prechecked | None
]


def run_spark(
    members: Sequence[Member],
    out: Path,
    tables: Sequence[Table],
    master: str,
    conf: Sequence[tuple[str, str]],
    tick: Tick,
    session: Any = None,
) -> tuple[list[EngineResult], str]:
    """Export the stores of ``members`` into ``out`` with Spark tasks that each run
    :func:`run_part` (the arrow engine's task) on one planned part of one store; returns a
    result per store and the master the jobs ran on.

    Without ``session`` (a SparkSession or SparkContext to use) a context is started on
    ``master`` (and stopped at the end) in the background while this process plans the parts
    (from file lengths and queue bounds: it reads no commitlog). As in the arrow engine, the
    parts that need no restart prediction run first, in a job of their own as soon as the
    context is up (it also starts the Python workers). Every store's restart emulation's record
    checks (by byte ranges, from the file its scan starts at; where no scan runs, the emulation)
    and the planning of every commitlog file (a walk of its headers) are the tasks of another
    job, so the executors do both; the emulations given their checks (they stitch and dispatch)
    follow in a job of their own, and every store's commitlog ranges in the last.
    """
    refs = [StoreRef.of(m.store) for m in members]
    wanted = tuple(tables)
    task = _ExportTask(tuple(refs), tuple(m.prefix for m in members), str(out), wanted)
    # The pool's exit waits for a start or a job still running when something fails.
    with spark_errors(), ExitStack() as stack, ThreadPoolExecutor(4) as background:
        started = None
        if session is None:
            started = background.submit(stack.enter_context, spark_context(master, conf))

        def spark() -> Any:
            """The SparkContext, once it is up."""
            given = getattr(session, "sparkContext", session)
            return given if started is None else started.result()

        firsts = [
            (i, c)
            for i, m in enumerate(members)
            for c in first_chunks(plan_ranges(m.store, wanted))
        ]
        asks: list[Ask] = list(firsts)
        checking: dict[int, tuple[CheckOptions, list[Range], Wanted | None]] = {}
        into = stack.enter_context(check_files(out))
        if Table.MESSAGES in wanted:
            # Each store's emulation: its record checks are tasks of the preparing job (the
            # emulation follows in a job of its own), or where no scan runs the emulation.
            emulations: list[Ask] = []
            for i, m in enumerate(members):
                opts, ranges, keys = plan_restart_checks(m.store)
                if ranges:
                    checking[i] = (opts, ranges, keys)
                    emulations += [(i, (opts, r, keys, into)) for r in ranges]
                else:
                    emulations.append((i, None))
            asks = emulations + asks
        prepared = background.submit(lambda: _prepare(spark(), tuple(refs), asks, checking))
        side: list[Item] = [
            (i, p, None) for i, m in enumerate(members) for p in plan_parts(m.store, wanted)
        ]
        side_job = background.submit(lambda: _run_job(spark(), task, side))

        def verify(m: Member) -> PartResult:
            return write_findings(m.store, out, spark_mapper(spark(), m.store), m.prefix)

        findings: list[tuple[int, Future[PartResult]]] = []
        if Table.FINDINGS in wanted:  # verify, its work units as jobs of their own
            findings = [(i, background.submit(verify, m)) for i, m in enumerate(members)]
        predictions: dict[int, RestartKeeps] = {}
        planned: list[tuple[int, CommitlogRange]] = []
        for i, answer in prepared.result():
            if isinstance(answer, RestartKeeps):
                predictions[i] = answer
            else:
                planned += [(i, r) for r in answer]
        items: list[Item] = [
            (i, r, range_keeps(members[i].store, r, predictions[i]) if predictions else None)
            for i, r in planned
        ]
        with _watch(spark(), tick):
            results = _run_job(spark(), task, items) + side_job.result()
            for i, f in findings:
                results.append((i, f.result()))
        master_url = str(spark().master)
    sweep(out, wanted, (f for _, r in results for f in r.files))
    for m in members:
        finish_tables(out, wanted, m.prefix)
    per_store: list[list[PartResult]] = [[] for _ in members]
    for i, r in results:
        per_store[i].append(r)
    return [EngineResult.of(wanted, rs) for rs in per_store], master_url


@dataclass(frozen=True)
class _Prepare:
    """What a task of the preparing job runs: a store's restart emulation (no chunk; given its
    checks: a :class:`Prechecked`), one range of its record checks, or the planning of one
    commitlog file (its first chunk)."""

    refs: tuple[StoreRef, ...]

    def __call__(self, ask: Ask) -> Answer:
        i, what = ask
        if what is None or isinstance(what, Prechecked):
            return i, predict_restart(self.refs[i], what)
        if isinstance(what, tuple):
            return i, check_restart_range(self.refs[i], *what)
        return i, plan_file(self.refs[i], what)


def _prepare(
    sc: Any,
    refs: tuple[StoreRef, ...],
    asks: Sequence[Ask],
    checking: dict[int, tuple[CheckOptions, list[Range], Wanted | None]],
) -> list[Prepared]:
    """One job, a task per ask: the emulations (or their record checks) first, the longest
    tasks; then a job of the emulations given their checks (``checking``: each store's)."""
    checks: dict[int, list[RangeCheck | CheckFile]] = {i: [] for i in checking}
    prepared: list[Prepared] = []

    def take(answers: list[Answer]) -> None:
        for i, answer in answers:
            if isinstance(answer, RangeCheck | CheckFile):
                checks[i].append(answer)  # in its store's ranges' order, as asked
            else:
                prepared.append((i, answer))

    take(_collect(sc, _Prepare(refs), asks))
    emulations: list[Ask] = [
        (i, Prechecked(opts, ranges, checks[i], keys))
        for i, (opts, ranges, keys) in checking.items()
    ]
    take(_collect(sc, _Prepare(refs), emulations))
    return prepared


def _collect(sc: Any, fn: _Prepare, asks: Sequence[Ask]) -> list[Answer]:
    """A job, a task per ask; the answers in the asks' order."""
    if not asks:
        return []
    sc.setJobGroup(JOB_GROUP, "rmqinspect export")
    try:
        answers: list[Answer] = sc.parallelize(asks, len(asks)).map(fn).collect()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    return answers


@dataclass(frozen=True)
class _ExportTask:
    """The function a Spark task runs on its one part (pickled with what it needs)."""

    refs: tuple[StoreRef, ...]
    prefixes: tuple[str, ...]  # each store's directory in the tables' (Member.prefix)
    out: str
    tables: tuple[Table, ...]
    # unique per export: the session's Python workers outlive it
    export: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __call__(self, item: Item) -> tuple[int, PartResult]:
        i, part, keeps = item
        result = run_part(
            self.refs[i], self.out, part, self.tables, keeps, self.export, self.prefixes[i]
        )
        return i, result


def _run_job(sc: Any, task: _ExportTask, items: Sequence[Item]) -> list[tuple[int, PartResult]]:
    """One Spark job, one task per item, the largest parts first (so the job does not end
    waiting on one long task), in the export's job group (for :func:`_watch`)."""
    if not items:
        return []
    ordered = sorted(items, key=lambda item: -item[1].nbytes)
    sc.setJobGroup(JOB_GROUP, "rmqinspect export")
    try:
        # As many partitions as items: parallelize slices them one item per partition.
        results: list[tuple[int, PartResult]] = (
            sc.parallelize(ordered, len(ordered)).map(task).collect()
        )
    finally:
        # A caller's session runs its later jobs outside this group.
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    return results


@contextmanager
def _watch(sc: Any, tick: Tick) -> Iterator[None]:
    """Report the tasks of the export's jobs, done and in all, to ``tick`` twice a second."""
    tracker = sc.statusTracker()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.5):
            done = total = 0
            for job in tracker.getJobIdsForGroup(JOB_GROUP):
                info = tracker.getJobInfo(job)
                for stage in info.stageIds if info is not None else ():
                    stage_info = tracker.getStageInfo(stage)
                    if stage_info is not None:
                        done += stage_info.numCompletedTasks
                        total += stage_info.numTasks
            if total:
                tick(JOB_GROUP, done, total)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
