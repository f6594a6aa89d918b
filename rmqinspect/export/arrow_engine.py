"""``--engine arrow``: the planned parts run in a local process pool, each task writing its own
Parquet files with pyarrow; no JVM. The restart emulation and the planning of the commitlog
ranges run as the first tasks, alongside the queue, index and hashing tasks; the ranges follow
once both have answered. ``verify`` (the ``findings`` table) runs its work units in the same pool.
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

from rmqinspect.analysis.recovery.keeps import RestartKeeps
from rmqinspect.errors import LiveStoreWarning
from rmqinspect.export.findings import pool_mapper, write_findings
from rmqinspect.export.plan import Part, StoreRef
from rmqinspect.export.progress import FileTally, Reporter
from rmqinspect.export.schema import Table
from rmqinspect.export.tasks import (
    EngineResult,
    PartResult,
    finish_tables,
    plan_parts,
    plan_ranges_of,
    predict_restart,
    range_keeps,
    run_part,
)
from rmqinspect.render.output import warn
from rmqinspect.store.model import Store


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
    store: Store, out: Path, tables: Sequence[Table], jobs: int | None, reporter: Reporter
) -> EngineResult:
    ref = StoreRef.of(store)
    wanted = tuple(tables)
    parts = plan_parts(store, wanted)
    finished: list[PartResult] = []
    workers = jobs or os.cpu_count() or 1
    context = _worker_context()
    # Futures report themselves here when done: the loop takes them one by one, so each costs
    # the same however many are running (waiting on the whole set each time was quadratic in
    # the parts: 100,000 queues made minutes of it).
    done: queue.SimpleQueue[Future[Any]] = queue.SimpleQueue()
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker)
    with pool, ThreadPoolExecutor(1) as side:
        running: dict[Future[PartResult], Part] = {}

        def start(part: Part, own: RestartKeeps | None) -> None:
            future = pool.submit(run_part, ref, str(out), part, wanted, own)
            running[future] = part
            future.add_done_callback(done.put)

        # The restart emulation, the planning of the commitlog ranges and the parts that need
        # no plan go first, in that order: the ranges wait for the first two.
        keeps: Future[RestartKeeps] | None = None
        if Table.MESSAGES in wanted:
            keeps = pool.submit(predict_restart, ref)
            keeps.add_done_callback(done.put)
        planned = pool.submit(plan_ranges_of, ref, wanted)
        for p in parts:
            start(p, None)
        findings: Future[PartResult] | None = None
        if Table.FINDINGS in wanted:
            # verify runs its work units in the same pool, from a thread of its own.
            mapper = pool_mapper(pool, store, workers)
            findings = side.submit(write_findings, store, out, mapper)
        ranges = planned.result()
        tally = FileTally([*ranges, *parts])
        reporter.planned(tally.nbytes, tally.files)
        if keeps is None:  # message_copies alone: its rows need no restart prediction
            for r in ranges:
                start(r, None)
        while running or keeps is not None:
            future = done.get()
            if future is keeps:
                prediction = keeps.result()
                keeps = None
                for r in ranges:
                    start(r, range_keeps(store, r, prediction))
                continue
            part = running.pop(future)
            finished.append(future.result())
            reporter.advanced(part.nbytes, tally.finished(part))
        if findings is not None:
            finished.append(findings.result())
    finish_tables(out, wanted)
    return EngineResult.of(wanted, finished)
