"""The ``findings`` table: what ``verify`` finds in the store, its work units run by the
engine's workers (a process pool, or Spark tasks), written as one Parquet file."""

from __future__ import annotations

import functools
import shutil
import uuid
from collections.abc import Iterable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from rmqinspect.analysis.ranges import worker_settings
from rmqinspect.analysis.verify import Verifier, VerifyOptions
from rmqinspect.analysis.verify.run import Mapper, Work, run_unit
from rmqinspect.export.parquet import TMP_SUFFIX, TableWriter
from rmqinspect.export.schema import Table
from rmqinspect.export.tables import findings_batch
from rmqinspect.export.tasks import PartResult
from rmqinspect.store.model import Store

OPTIONS = VerifyOptions()  # verify's defaults, as `rmqinspect verify` without options


def write_findings(store: Store, out: Path, mapper: Mapper, prefix: str = "") -> PartResult:
    """Verify ``store`` with ``mapper`` running the work units and write ``out/findings``
    (under ``prefix``, the store's directory in a fleet export; verify lists at most a
    thousand findings per check and file, and counts the rest: see ``verify``)."""
    directory = out / Table.FINDINGS.value / prefix
    # The index parts' keys go to files the workers write and this process reads: as results
    # they were collected all at once (91 MB at 8 GiB, in the Spark driver's JVM too).
    keys_dir = directory / f".keys.{uuid.uuid4().hex}{TMP_SUFFIX}"
    keys_dir.mkdir(parents=True)
    try:
        with Verifier(store, OPTIONS, mapper=mapper, keys_dir=keys_dir) as verifier:
            report = verifier.run()
    finally:
        shutil.rmtree(keys_dir, ignore_errors=True)
    writer = TableWriter(directory, Table.FINDINGS, 0)
    writer.write(findings_batch(report.findings))
    rows = writer.close()
    files = [p.relative_to(out).as_posix() for p in writer.files]
    return PartResult(rows={Table.FINDINGS: rows}, files=files)


def _unit(store: Store) -> functools.partial[Any]:
    run = uuid.uuid4().hex
    return functools.partial(run_unit, run, str(store.root), worker_settings(store), OPTIONS)


def pool_mapper(pool: Executor, store: Store, workers: int) -> Mapper:
    """Work units in ``pool``'s processes, each opening the store once."""
    unit = _unit(store)

    def run(work: Work[Any, Any], args: list[Any]) -> Iterable[Any]:
        # Chunks as Verifier's own pool takes them: few round trips, every worker busy.
        chunk = max(1, len(args) // (workers * 8))
        return pool.map(functools.partial(unit, work), args, chunksize=chunk)

    return run


def spark_mapper(sc: Any, store: Store) -> Mapper:
    """Work units as Spark jobs on the executors of the SparkContext ``sc``, each Python worker
    opening the store once per export."""
    unit = _unit(store)

    def run(work: Work[Any, Any], args: list[Any]) -> Iterable[Any]:
        if not args:
            return []
        # A few partitions per core: verify has one unit per consume-queue file, and a Spark
        # task per unit would cost more than the unit.
        slices = min(len(args), max(1, sc.defaultParallelism) * 8)
        results: list[Any] = (
            sc.parallelize(args, slices).map(functools.partial(unit, work)).collect()
        )
        return results

    return run
