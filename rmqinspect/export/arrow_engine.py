"""``--engine arrow``: the planned parts run in a local process pool, each task writing its own
Parquet files with pyarrow; no JVM. The restart emulation runs as one of the tasks, alongside the
queue, index and hashing tasks; the commitlog ranges follow once it has answered. ``verify``
(the ``findings`` table) runs its work units in the same pool.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqinspect.analysis.recovery.keeps import RestartKeeps
from rmqinspect.export.findings import pool_mapper, write_findings
from rmqinspect.export.parquet import write_empty
from rmqinspect.export.plan import (
    CommitlogRange,
    OffsetsPart,
    Part,
    StoreRef,
    commitlog_file,
    plan_commitlog,
    plan_hashes,
    plan_index,
    plan_queues,
)
from rmqinspect.export.progress import FileTally, Reporter
from rmqinspect.export.schema import PARTITION_COLUMN, Table
from rmqinspect.export.tasks import PartResult, predict_restart, run_part
from rmqinspect.store.model import Store


@dataclass
class EngineResult:
    rows: dict[Table, int]
    hashes: list[tuple[str, int, int, int]]  # (path, size, mtime ns, crc32c) per source file


def run_arrow(
    store: Store, out: Path, tables: Sequence[Table], jobs: int | None, reporter: Reporter
) -> EngineResult:
    ref = StoreRef.of(store)
    wanted = tuple(tables)
    parts: list[Part] = []
    if Table.CONSUME_QUEUE in wanted:
        parts += plan_queues(store)
    if Table.INDEX_ENTRIES in wanted:
        parts += plan_index(store)
    if Table.CONSUMER_OFFSETS in wanted:
        parts.append(OffsetsPart())
    parts += plan_hashes(store.root)
    result = PartResult(rows={t: 0 for t in wanted})
    workers = jobs or os.cpu_count() or 1
    context = multiprocessing.get_context("spawn")  # no fork of a process with threads
    with ProcessPoolExecutor(workers, mp_context=context) as pool, ThreadPoolExecutor(1) as side:
        # The restart emulation and the parts that need no plan start first: the workers
        # start up and run them while this process plans the commitlog ranges.
        keeps: Future[RestartKeeps] | None = None
        if Table.MESSAGES in wanted:
            keeps = pool.submit(predict_restart, ref)
        running: dict[Future[PartResult], Part] = {
            pool.submit(run_part, ref, str(out), p, wanted, None): p for p in parts
        }
        findings: Future[int] | None = None
        if Table.FINDINGS in wanted:
            # verify runs its work units in the same pool, from a thread of its own.
            mapper = pool_mapper(pool, store, workers)
            findings = side.submit(write_findings, store, out, mapper)
        ranges: list[CommitlogRange] = []
        if Table.MESSAGES in wanted:
            ranges = plan_commitlog(store)
        tally = FileTally([*ranges, *parts])
        reporter.planned(tally.nbytes, tally.files)
        while running or keeps is not None:
            waiting: set[Future[Any]] = {*running, *([keeps] if keeps else [])}
            done, _ = wait(waiting, return_when=FIRST_COMPLETED)
            if keeps is not None and keeps in done:
                prediction = keeps.result()
                keeps = None
                for r in ranges:
                    f = commitlog_file(store, r.file)
                    own = prediction.within(f.start + r.begin, f.start + r.end)
                    running[pool.submit(run_part, ref, str(out), r, wanted, own)] = r
            for future in [f for f in running if f in done]:
                part = running.pop(future)
                finished = future.result()
                for table, n in finished.rows.items():
                    result.rows[table] += n
                result.hashes += finished.hashes
                reporter.advanced(part.nbytes, tally.finished(part))
        if findings is not None:
            result.rows[Table.FINDINGS] = findings.result()
    for table in wanted:
        if PARTITION_COLUMN[table] is None and not (out / table.value).exists():
            write_empty(out / table.value, table)
    result.hashes.sort()
    return EngineResult(result.rows, result.hashes)
