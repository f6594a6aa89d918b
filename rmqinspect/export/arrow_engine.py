"""``--engine arrow``: the planned parts run in a local process pool, each task writing its own
Parquet files with pyarrow; no JVM. The restart emulation runs as the first task, alongside the
queue, index and hashing tasks; the commitlog ranges (planned from the files' lengths, each task
finding its own bounds) follow once it has answered. ``verify`` (the ``findings`` table) runs
its work units in the same pool.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import warnings
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rmqinspect.analysis.ranges import Range
from rmqinspect.analysis.recovery.fields import Wanted
from rmqinspect.analysis.recovery.keeps import RestartKeeps
from rmqinspect.analysis.recovery.ranges import RangeCheck
from rmqinspect.errors import LiveStoreWarning
from rmqinspect.export.findings import pool_mapper, write_findings
from rmqinspect.export.plan import CommitlogRange, Part, StoreRef
from rmqinspect.export.progress import FileTally, Reporter
from rmqinspect.export.schema import Table
from rmqinspect.export.tasks import (
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
)
from rmqinspect.format.commitlog import CheckOptions
from rmqinspect.render.output import warn

_Checks = list[Future[RangeCheck]]  # a store's restart checks, under way


def _worker_context() -> multiprocessing.context.BaseContext:
    """Workers forked from a server process that imported their modules once (rather than
    spawned, each importing them: 0.5 s of CPU apiece), and never forked from this process,
    which may run threads (a progress bar's)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["rmqinspect.export.tasks"])
    return context


def _init_worker() -> None:
    """A worker's warnings as the command's own: one ``rmqinspect: warning:`` line each, not
    Python's two-line form with a file name. A LiveStoreWarning is left to the command's
    process: its store is open across every worker's reads and says so once when it closes,
    where each worker closing its own would repeat the sentence (or print it raw)."""
    warnings.filterwarnings("ignore", category=LiveStoreWarning)
    warnings.showwarning = _show_warning


def _show_warning(message: Warning | str, *args: object, **kwargs: object) -> None:
    warn(str(message))


def run_arrow(
    members: Sequence[Member],
    out: Path,
    tables: Sequence[Table],
    jobs: int | None,
    reporter: Reporter,
) -> list[EngineResult]:
    """Every store's parts in one pool; a result per store, in ``members``' order."""
    wanted = tuple(tables)
    refs = [StoreRef.of(m.store) for m in members]
    workers = jobs or os.cpu_count() or 1
    context = _worker_context()
    # Futures report themselves here when done: the loop takes them one by one, so each costs
    # the same however many are running (waiting on the whole set each time was quadratic in
    # the parts: 100,000 queues made minutes of it).
    done: queue.SimpleQueue[Future[Any]] = queue.SimpleQueue()
    finished: list[list[PartResult]] = [[] for _ in members]
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker)
    with pool, ThreadPoolExecutor(1) as side, check_files(out) as into:
        running: dict[Future[PartResult], tuple[int, Part]] = {}

        def start(i: int, part: Part, own: RestartKeeps | None) -> None:
            m = members[i]
            future = pool.submit(run_part, refs[i], str(out), part, wanted, own, "", m.prefix)
            running[future] = (i, part)
            future.add_done_callback(done.put)

        def submit(fn: Any, *args: Any) -> Future[Any]:
            future = pool.submit(fn, *args)
            future.add_done_callback(done.put)
            return future

        # The driver plans from file lengths and queue bounds only. The restart emulations'
        # record checks (from the file each scan starts at; in a DLedger store the emulation
        # itself) and the planning of each commitlog file (a walk of its headers) go first,
        # then the parts that need neither. A store's emulation starts once its checks are
        # in, and a file's ranges once its plan and its store's prediction are both in.
        chunks = [plan_ranges(m.store, wanted) for m in members]
        keeps: dict[Future[RestartKeeps], int] = {}
        checking: dict[Future[RangeCheck], int] = {}
        checks: dict[int, tuple[CheckOptions, list[Range], Wanted | None, _Checks]] = {}
        if Table.MESSAGES in wanted:
            for i, ref in enumerate(refs):
                # One worker gains nothing from the checks apart: they read every record once
                # more (a third more CPU than the emulation checking as it walks).
                planned = plan_restart_checks(members[i].store) if workers > 1 else None
                if planned is None or not planned[1]:
                    keeps[submit(predict_restart, ref)] = i
                    continue
                opts, ranges, keys = planned
                futures = [submit(check_restart_range, ref, opts, r, keys, into) for r in ranges]
                checks[i] = (opts, ranges, keys, futures)
                checking.update(dict.fromkeys(futures, i))
        predictions: dict[int, RestartKeeps | None] = {
            i: None for i in range(len(members)) if Table.MESSAGES not in wanted
        }
        plans = {
            submit(plan_file, refs[i], c): (i, c)
            for i, cs in enumerate(chunks)
            for c in first_chunks(cs)
        }
        waiting: dict[int, list[CommitlogRange]] = {i: [] for i in range(len(members))}
        parts = [plan_parts(m.store, wanted) for m in members]
        # A pool runs its tasks in the order they came: the parts of a store whose emulation
        # waits for its checks come after the emulation, not before it.
        held: dict[int, list[Part]] = {}
        for i, ps in enumerate(parts):
            if i in checks:
                held[i] = ps
                continue
            for p in ps:
                start(i, p, None)
        findings: list[Future[PartResult]] = []
        if Table.FINDINGS in wanted:
            # verify runs its work units in the same pool, from a thread of its own.
            for m in members:
                mapper = pool_mapper(pool, m.store, workers)
                findings.append(side.submit(write_findings, m.store, out, mapper, m.prefix))
        # A tally per store: two brokers' stores hold files of the same names.
        tallies = [FileTally([*cs, *ps]) for cs, ps in zip(chunks, parts, strict=True)]
        reporter.planned(sum(t.nbytes for t in tallies), sum(t.files for t in tallies))

        def release(i: int) -> None:
            """Start store ``i``'s planned ranges, once its prediction is in."""
            if i in predictions:
                prediction = predictions[i]
                for r in waiting[i]:
                    own = (
                        None if prediction is None else range_keeps(members[i].store, r, prediction)
                    )
                    start(i, r, own)
                waiting[i] = []

        while running or keeps or plans or checking:
            future = done.get()
            if future in checking:
                i = checking.pop(future)
                opts, ranges, keys, futures = checks[i]
                if not any(f in checking for f in futures):  # its last check reported in
                    del checks[i]
                    checked = Prechecked(opts, ranges, [f.result() for f in futures], keys)
                    keeps[submit(predict_restart, refs[i], checked)] = i
                    for p in held.pop(i):
                        start(i, p, None)
                continue
            if future in keeps:
                i = keeps.pop(future)
                predictions[i] = future.result()
                release(i)
                continue
            if future in plans:
                i, first = plans.pop(future)
                ranges = future.result()
                tallies[i].expect(first.source, len(ranges))
                waiting[i] += ranges
                release(i)
                continue
            i, part = running.pop(future)
            finished[i].append(future.result())
            reporter.advanced(part.nbytes, tallies[i].finished(part))
        for i, f in enumerate(findings):
            finished[i].append(f.result())
    for m in members:
        finish_tables(out, wanted, m.prefix)
    return [EngineResult.of(wanted, results) for results in finished]
