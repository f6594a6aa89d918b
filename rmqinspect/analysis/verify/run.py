"""One ``verify`` run: the checks in order, each file a work unit, optionally in worker
processes (``--jobs``), and the findings merged in file order whatever the number of workers.

1. every commitlog file (records, and the consume-queue units their records need; in a DLedger
   store every data file: entries, their index units, and the records inside them), in byte
   ranges when there are workers (:mod:`.ranges`), stitched into one result per file;
2. what needs all commitlog files at once (:func:`.files.check_files`; in a DLedger
   store also :func:`.dledger.check_ledger`: entries across files, the index, the checkpoint);
3. every consume-queue file and every index file, against the commitlog's data end from 1,
   and meanwhile, in this process, the restart prediction for records without units
   (:func:`.queues.classify_lagging`, only when there are such records), the checkpoint,
   config files, offsets, unsupported layouts and the timer store.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from rmqinspect.analysis.ranges import (
    SPLIT_BYTES,
    plan_ranges,
    pool_jobs,
    worker_pool,
    worker_settings,
)
from rmqinspect.analysis.recovery import RecoverOptions, RecoveryReport, run_recovery
from rmqinspect.analysis.verify.batch_queues import check_batch_queue
from rmqinspect.analysis.verify.collisions import KeySpill, write_keys
from rmqinspect.analysis.verify.commitlog import FileResult
from rmqinspect.analysis.verify.context import Context, VerifyOptions
from rmqinspect.analysis.verify.dledger import EntrySpan, check_ledger
from rmqinspect.analysis.verify.files import check_files
from rmqinspect.analysis.verify.finding import CHECKS, Finding, Findings, Severity
from rmqinspect.analysis.verify.indexes import (
    IndexPart,
    check_index_part,
    finish_index_file,
    index_parts,
)
from rmqinspect.analysis.verify.metadata import (
    check_checkpoint,
    check_config,
    check_offsets,
    check_unsupported,
)
from rmqinspect.analysis.verify.queues import (
    QueueCoverage,
    check_queue_file,
    check_queue_layout,
    check_rocksdb_queue,
    classify_lagging,
)
from rmqinspect.analysis.verify.ranges import check_unit, stitch
from rmqinspect.analysis.verify.summary import Coverage, Summary, summarize
from rmqinspect.analysis.verify.timer import check_timer
from rmqinspect.format.npbytes import I64
from rmqinspect.store import mapguard
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.store.run_cache import RunCache

Progress = Callable[[int], None]
T = TypeVar("T")
A = TypeVar("A")
Work = Callable[[Context, A], T]  # a work unit: module level, so that it pickles
# Runs ``work`` over ``args`` elsewhere (the export's process pool, a Spark job), results in
# order; the workers call :func:`run_unit`.
Mapper = Callable[[Work[Any, Any], list[Any]], Iterable[Any]]

# The restart verify predicts where queues lag: every lost message listed, as ``report``'s
# (which takes this one over rather than emulating it again).
RESTART_OPTIONS = RecoverOptions(lost_limit=None)
_FAMILIES = list(dict.fromkeys(check.split(".")[0] for check in CHECKS))


@dataclass(frozen=True, slots=True)
class VerifyReport:
    findings: list[Finding]  # in family, file and position order
    summary: Summary

    def failing(self, threshold: Severity) -> int:
        """Findings (listed or not) at ``threshold`` or worse."""
        return sum(
            n
            for check, n in self.summary.findings_by_check.items()
            if CHECKS[check].severity.rank >= threshold.rank
        )


# --- work units ---------------------------------------------------------------------------------


_BATCH, _ROCKSDB = -1, -2  # a queue's work unit that is no file index


def _queue_unit(
    ctx: Context, arg: tuple[str, int, int, int, tuple[I64, I64] | None]
) -> tuple[Findings, int]:
    topic, queue_id, index, data_end, proven = arg
    findings = Findings()
    if index == _BATCH:  # checked whole (its units are found by their bases)
        return findings, check_batch_queue(ctx, QueueId(topic, queue_id), data_end, findings)
    if index == _ROCKSDB:  # no files: the database's rows
        return findings, check_rocksdb_queue(ctx, QueueId(topic, queue_id), data_end, findings)
    f = ctx.store.consume_queue_files(topic, queue_id).files[index]
    units = check_queue_file(ctx, QueueId(topic, queue_id), f, data_end, findings, proven)
    return findings, units


def _index_unit(ctx: Context, arg: tuple[int, int, int, int, str | None]) -> IndexPart:
    index, first, stop, data_end, keys_dir = arg
    part = check_index_part(ctx, index, first, stop, data_end)
    if keys_dir is not None:
        path = Path(keys_dir, f"{index}-{first}.keys")
        part.keys_file = str(path), write_keys(part.fingerprints, path)
    return part


_CONTEXT: Context | None = None  # a worker process's own view of the store
# A process another engine runs: the contexts of the run it works for.
_OPENED: RunCache[tuple[str, StoreOptions, VerifyOptions], Context] = RunCache(
    lambda context: context.store.close()
)


def _open_in_worker(
    root: str,
    store_options: StoreOptions,
    options: VerifyOptions,
    queue_dirs: dict[QueueId, Path],
) -> None:
    global _CONTEXT
    _CONTEXT = Context(Store.open(root, store_options, queue_dirs=queue_dirs), options)


@mapguard.checked
def _in_worker(work: Callable[[Context, A], T], arg: A) -> T:
    assert _CONTEXT is not None
    return work(_CONTEXT, arg)


@mapguard.checked
def run_unit(
    run: str,
    root: str,
    store_options: StoreOptions,
    options: VerifyOptions,
    work: Work[A, T],
    arg: A,
) -> T:
    """One work unit in a process another engine runs (see :class:`Verifier`'s ``mapper``):
    the store is opened once per ``run`` (an id of the caller's choosing) and process. A
    process that outlives a run (a Spark session's Python workers) reopens it for the next: the
    store may have changed."""
    context = _OPENED.get(
        run,
        (root, store_options, options),
        lambda: Context(Store.open(root, store_options), options),
    )
    return work(context, arg)


# --- the run ------------------------------------------------------------------------------------


class Verifier:
    """Verify one store, with ``jobs`` worker processes (1: in this process).

    Use as a context manager: with more than one job the workers are forked on entry, before
    anything else (a progress bar's thread) runs, and each opens the store read-only itself.
    """

    def __init__(
        self,
        store: Store,
        options: VerifyOptions | None = None,
        jobs: int = 1,
        mapper: Mapper | None = None,
        split_bytes: int | None = None,
        keys_dir: Path | None = None,
    ) -> None:
        self.store = store
        self.options = options or VerifyOptions()
        self.jobs = 1 if mapper is not None else pool_jobs(store, jobs)
        # Commitlog files are cut into ranges of ``split_bytes`` (by default only for other
        # processes to share: one process walks them whole).
        parallel = self.jobs > 1 or mapper is not None
        self.split_bytes = split_bytes or (SPLIT_BYTES if parallel else None)
        self.ctx = Context(store, self.options)
        self._pool: ProcessPoolExecutor | None = None
        self._mapper = mapper
        # Where the index parts write their keys (a directory outside the store that the
        # mapper's workers and this process both see), when their results must stay small.
        self._keys_dir = keys_dir
        # The restart predicted by the last run (where queues lag the commitlog), for a caller
        # that wants the same emulation (``report``) instead of running it again.
        self.restart: RecoveryReport | None = None

    def __enter__(self) -> Verifier:
        if self.jobs > 1:
            settings = worker_settings(self.store)
            # The queue directories as found here: each worker listed every topic again.
            initargs = (str(self.store.root), settings, self.options, self.store.queue_dirs)
            self._pool = worker_pool(self.jobs, _open_in_worker, initargs)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def _map(self, work: Callable[[Context, A], T], args: list[A]) -> Iterator[T]:
        """``work`` over ``args``, results in order."""
        if self._mapper is not None:
            return iter(self._mapper(work, args))
        if self._pool is None:
            return (work(self.ctx, a) for a in args)
        chunk = max(1, len(args) // (self.jobs * 8))
        return self._pool.map(functools.partial(_in_worker, work), args, chunksize=chunk)

    def _as_done(self, work: Callable[[Context, A], T], args: list[A]) -> Iterator[tuple[int, T]]:
        """``work`` over ``args``, each result with its argument's number, in the order the
        workers finish them (in order without workers)."""
        if self._pool is None:
            return enumerate(self._map(work, args))
        numbers = {self._pool.submit(_in_worker, work, a): i for i, a in enumerate(args)}
        # as_completed drops each future it hands over, and so its result once taken.
        return ((numbers.pop(f), f.result()) for f in as_completed(list(numbers)))

    def run(self, progress: Progress | None = None) -> VerifyReport:
        advance = progress or (lambda _n: None)
        ctx, store = self.ctx, self.store
        findings = Findings()
        ranges = plan_ranges(store, self.split_bytes)
        results: list[FileResult] = []
        for r in stitch(ctx, ranges, self._map(check_unit, ranges), advance):
            results.append(r)
            findings.extend(r.findings)
        check_files(ctx, results, store.commitlog.problems, findings)
        if store.dledger is not None:
            spans = [(r.file, r.entries or EntrySpan()) for r in results]
            check_ledger(ctx, spans, findings)
        data_end = max(
            (r.physical_end for r in results if r.extent),
            default=max(store.commitlog.min_offset, 0),
        )
        coverage = QueueCoverage()
        for r in results:
            coverage.extend(r.coverage)
        # The walk read the unit of each record: units it found leading to their record are
        # not read again from the queue side (their records lie all over the log).
        ctx.proven = {
            qid: coverage.proven_runs(qid)
            for qid in store.queue_dirs
            if qid not in store.batch_dirs
        }
        queue_args: list[tuple[str, int, int, int, tuple[I64, I64] | None]] = [
            (qid.topic, qid.queue_id, i, data_end, runs)
            for qid, runs in ctx.proven.items()
            for i in range(len(store.consume_queue_files(qid.topic, qid.queue_id).files))
        ]
        queue_args += [
            (qid.topic, qid.queue_id, _BATCH, data_end, None) for qid in store.batch_dirs
        ]
        queue_args += [
            (qid.topic, qid.queue_id, _ROCKSDB, data_end, None)
            for qid in store.queue_dirs
            if store.rocksdb_queue(qid)
        ]
        keys_dir = None if self._keys_dir is None else str(self._keys_dir)
        index_args = [(k, a, b, data_end, keys_dir) for k, a, b in index_parts(ctx)]
        # Workers check the queue and index files while this process predicts the restart and
        # makes the store-wide checks: the restart emulation of a crashed store took as long as
        # the queue files with 100,000 queues, and the workers only waited for it. Their
        # findings are merged below, in the same order as ever.
        queue_parts = self._map(_queue_unit, queue_args)
        index_results = _IndexParts(index_args, self._as_done(_index_unit, index_args))
        if self._pool is not None:  # results arrive meanwhile: their keys go to disk as they do
            index_results.start()
        restart = None
        self.restart = None
        if coverage.lagging:
            restart = run_recovery(store, RESTART_OPTIONS).report
            classify_lagging(ctx, coverage, restart, findings)
            self.restart = restart
        check_queue_layout(ctx, findings)
        max_ts = max(
            (r.max_store_timestamp for r in results if r.max_store_timestamp is not None),
            default=None,
        )
        check_checkpoint(ctx, data_end, max_ts, findings)
        check_config(ctx, findings)
        check_offsets(ctx, restart, findings)
        check_unsupported(ctx, findings)
        check_timer(ctx, findings)
        units = _merge(queue_parts, findings)
        entries = 0
        with index_results:
            for file_parts in index_results.by_file().values():
                for part in file_parts:
                    findings.extend(part.findings)
                    entries += part.entries
            for k, file_parts in index_results.by_file().items():
                finish_index_file(ctx, k, file_parts, index_results.keys[k], findings)
        summary = summarize(
            str(store.root),
            ctx.profile.value,
            self.options.check_crc,
            results,
            data_end,
            Coverage(
                len(store.queue_dirs), units, len(ctx.index_files), entries, restart is not None
            ),
            findings,
        )
        return VerifyReport(sorted(findings.listed, key=_order), summary)


class _IndexParts:
    """The index parts' results, each part's key fingerprints moved to its file's
    :class:`KeySpill` as it is taken: held until the end, they grew with the store (the
    workers' results wait while this process emulates the restart). With workers they are
    taken by a thread of their own meanwhile (:meth:`start`); it touches no store. They are
    taken as they are done: in order, a file's first part (its slots and chains, the longest)
    held every later part's keys until it was done (91 MB at 8 GiB)."""

    def __init__(
        self,
        args: list[tuple[int, int, int, int, str | None]],
        results: Iterable[tuple[int, IndexPart]],
    ):
        self._args, self._results = args, results
        self.keys: dict[int, KeySpill] = {}
        self._parts: dict[int, dict[int, IndexPart]] = {}  # file -> part's number -> part
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._take_all, daemon=True)
        self._thread.start()

    def _take_all(self) -> None:
        try:
            for i, part in self._results:
                k = self._args[i][0]
                spill = self.keys.get(k) or self.keys.setdefault(k, KeySpill())
                if part.keys_file is not None:
                    spill.add_file(Path(part.keys_file[0]), part.keys_file[1])
                else:
                    spill.add(part.fingerprints)
                self._parts.setdefault(k, {})[i] = part
        except BaseException as err:  # raised again where the results are read
            self._error = err

    def by_file(self) -> dict[int, list[IndexPart]]:
        """Every file's parts, in order (taken here when no thread took them)."""
        if self._thread is None:
            self._thread = threading.current_thread()
            self._take_all()
        elif self._thread is not threading.current_thread():
            self._thread.join()
            self._thread = threading.current_thread()
        if self._error is not None:
            raise self._error
        return {k: [ps[i] for i in sorted(ps)] for k, ps in sorted(self._parts.items())}

    def __enter__(self) -> _IndexParts:
        return self

    def __exit__(self, *exc: object) -> None:
        for spill in self.keys.values():
            spill.close()


def _merge(parts: Iterable[tuple[Findings, int]], findings: Findings) -> int:
    total = 0
    for part, n in parts:
        findings.extend(part)
        total += n
    return total


def _order(f: Finding) -> tuple[Any, ...]:
    family = _FAMILIES.index(f.check.split(".")[0])
    return (family, f.file, f.file_position if f.file_position is not None else -1)


def verify_store(
    store: Store,
    options: VerifyOptions | None = None,
    jobs: int = 1,
    progress: Progress | None = None,
) -> VerifyReport:
    """Every check of ``verify`` over ``store`` (see the module docstring)."""
    with Verifier(store, options, jobs) as verifier:
        return verifier.run(progress)
