"""``recover --jobs``: the recovery scan's record checks (``checkMessageAndReturnSize``, CRC
included) by byte ranges in worker processes, stitched in the broker's order.

The scan loop (§10.4) walks each file from position 0 and stops at the first BLANK or failure.
A range's walk starts at the first record boundary its resync finds from its cut (a record that
names its own position, :func:`~rmqinspect.format.scan.resync`) and goes on to the first
boundary at or past its end, or to a BLANK or failure. The walk of a file is the same from any
boundary it reaches, so where a range starts where the one before it stopped, its answer is the
whole walk's there; where it does not (the cut fell into damage, or a body holds bytes that
look like a record at their own position), the stitch checks it again here from where the one
before stopped. The scan then knows, per file, the records the broker's walk accepts and the
position it stops at. The workers also send back what the dispatch reads of each record
(:class:`~rmqinspect.analysis.recovery.fields.Fields`: topic ids, queue fields, tagsCodes, the
index keys' hashes), so this process dispatches them in order without reading their bytes: the
same answers, field for field, as the serial scan.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TypeVar

import numpy as np

from rmqinspect.analysis.ranges import (
    SPLIT_BYTES,
    Range,
    plan_ranges,
    pool_jobs,
    worker_pool,
    worker_settings,
)
from rmqinspect.analysis.recovery.fields import Fields, Wanted
from rmqinspect.format import commitlog as cl
from rmqinspect.format.scan import check_run, resync
from rmqinspect.store import mapguard
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store, StoreOptions


@dataclass(frozen=True, slots=True)
class RangeCheck:
    """A range's walk: its first record boundary (None: none found from its cut), where it
    ended (at a BLANK or failure: ``ended``; else at the first boundary at or past its end),
    and the records it accepted before that, run by run, with what their dispatch needs when
    asked for."""

    start: int | None
    stop: int
    ended: bool
    records: tuple[Fields, ...]


def check_range(
    store: Store,
    r: Range,
    opts: cl.CheckOptions,
    dispatch: bool,
    lean: bool = False,
    wanted: Wanted | None = None,
) -> RangeCheck:
    """The recovery walk of range ``r`` with the scan's record checks ``opts``; with
    ``dispatch``, its records' tagsCodes and index keys (``CommitLogDispatcherBuildIndex``'s)
    too, every record's or those ``wanted``; ``lean``: :meth:`Fields.of`'s."""
    f = store.commitlog.files[r.file]
    # Records start before the file's length: past it, nothing is the next range's.
    end = f.length + 1 if r.end is None else r.end
    buf = store.view(f)
    parts: list[Fields] = []
    try:
        start = r.begin
        if r.sync:
            found = resync(buf, r.begin - 1, min(len(buf), end), f.start, opts)
            if found is None:
                return RangeCheck(None, end, False, ())
            start = found
        pos = start
        while True:
            run = check_run(buf, pos, f.start, opts)
            inside = int(np.searchsorted(run.columns.positions, end))
            parts.append(Fields.of(run, inside, dispatch, lean, wanted))
            store.maps.release(f, pos, run.end)  # memory stays flat
            if inside < len(run):
                stop, ended = int(run.columns.positions[inside]), False
            elif run.stop is not None or run.end >= end:
                stop, ended = run.end, run.stop is not None
            else:
                pos = run.end
                continue
            return RangeCheck(start, stop, ended, tuple(parts))
    finally:
        buf.release()
        store.maps.release(f, 0, f.length)


class WalkEnds:
    """The scan loop's walk of each file, from the ranges' checks (in range order), asked for
    file by file in the scan's order."""

    def __init__(
        self,
        store: Store,
        ranges: list[Range],
        checks: Iterator[RangeCheck],
        opts: cl.CheckOptions,
        dispatch: bool,
        wanted: Wanted | None = None,
    ) -> None:
        self._store = store
        self._wanted = wanted
        self._ranges = iter(ranges)
        self._checks = checks
        self._opts = opts
        self._dispatch = dispatch
        self._file = {f.path: i for i, f in enumerate(store.commitlog.files)}
        self._pending: tuple[Range, RangeCheck] | None = None

    def walk(self, disk: StoreFile) -> Iterator[RangeCheck]:
        """The walk of ``disk`` from position 0: its ranges' checks in order, each starting
        where the one before stopped, the last one ``ended`` at the BLANK or failure the walk
        stops at."""
        index = self._file[disk.path]
        expected = 0
        ended = False
        while True:
            item = self._pending or self._next()
            self._pending = None
            if item is None:
                break
            r, check = item
            if r.file < index:
                continue  # a file the scan passed by (it only asks for later files)
            if r.file > index:
                self._pending = item
                break
            if ended:
                continue  # the walk stopped in an earlier range of this file
            if check.start != expected:
                again = replace(r, begin=expected, sync=False)
                check = check_range(
                    self._store, again, self._opts, self._dispatch, wanted=self._wanted
                )
            yield check
            ended = check.ended
            expected = check.stop
        assert ended, "a file's last range runs to a BLANK or failure"

    def _next(self) -> tuple[Range, RangeCheck] | None:
        r = next(self._ranges, None)
        return None if r is None else (r, next(self._checks))


# Checks ``ranges`` with ``opts`` (and what the dispatch wants of their records, None: nothing)
# elsewhere (the export's pool), results in order; None: not there (they are checked here).
RangeMapper = Callable[[list[Range], cl.CheckOptions, Wanted | None], Iterable[RangeCheck] | None]

_STORE: Store | None = None  # a worker process's own view of the store


def _open_in_worker(root: str, settings: StoreOptions) -> None:
    global _STORE
    _STORE = Store.open(root, settings)


T = TypeVar("T")
U = TypeVar("U")


@mapguard.checked
def _with_store(fn: Callable[[Store, T], U], item: T) -> U:
    assert _STORE is not None
    return fn(_STORE, item)


def _ahead(
    pool: ProcessPoolExecutor, fn: Callable[[T], U], items: Iterable[T], window: int
) -> Iterator[U]:
    """``fn`` of each item in the pool, results in order, at most ``window`` submitted ahead
    of the one consumed: what waits for this process stays bounded when it is the slower
    side (``Executor.map`` submits every item at once). Closed early (the scan stopped at a
    bad record), it cancels what has not started, so later work does not wait behind it."""
    pending: deque[Future[U]] = deque()
    todo = iter(items)
    try:
        for item in todo:
            pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                break
        while pending:
            result = pending.popleft().result()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append(pool.submit(fn, nxt))
            yield result
    finally:
        for future in pending:
            future.cancel()


class RangeChecker:
    """The recovery scan's record checks in ``jobs`` worker processes (1: in this process),
    each file cut every ``split_bytes`` (by default only for other processes to share: one
    process checks as it walks). Use as a context manager: the workers are forked on entry,
    before anything else (a progress bar's thread) runs, and each opens the store read-only
    itself."""

    def __init__(
        self,
        store: Store,
        jobs: int,
        split_bytes: int | None = None,
        mapper: RangeMapper | None = None,
    ) -> None:
        self.store = store
        self.jobs = 1 if mapper is not None else pool_jobs(store, jobs)
        parallel = self.jobs > 1 or mapper is not None
        self.split_bytes = split_bytes or (SPLIT_BYTES if parallel else None)
        self._pool: ProcessPoolExecutor | None = None
        self._mapper = mapper

    def __enter__(self) -> RangeChecker:
        if self.jobs > 1:
            self._pool = worker_pool(
                self.jobs, _open_in_worker, (str(self.store.root), worker_settings(self.store))
            )
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

    @property
    def cuts_ranges(self) -> bool:
        """Whether this checker cuts ranges for work of its own (:meth:`map`)."""
        return self.split_bytes is not None and self._mapper is None

    def map(self, fn: Callable[[Store, T], U], items: list[T]) -> Iterator[U] | None:
        """``fn(store, item)`` of each item (a module-level function: it runs in the workers,
        on their own view of the store), results in order; None where this checker cuts no
        ranges for itself (one process, or the export's checks)."""
        return self._each(fn, items) if self.cuts_ranges else None

    def _each(self, fn: Callable[[Store, T], U], items: list[T]) -> Iterator[U]:
        if self._pool is None:
            return (fn(self.store, item) for item in items)
        return _ahead(self._pool, functools.partial(_with_store, fn), items, 2 * self.jobs)

    def walk_ends(
        self, first: StoreFile, opts: cl.CheckOptions, wanted: Wanted | None
    ) -> WalkEnds | None:
        """The checks of every range from file ``first`` on (with ``wanted``: with what the
        dispatch reads), under way; None without ranges (the scan checks as it walks)."""
        dispatch = wanted is not None
        if self.split_bytes is None:
            return None
        files = self.store.commitlog.files
        start = next(i for i, f in enumerate(files) if f.path == first.path)
        ranges = plan_ranges(self.store, self.split_bytes, start)
        mapped = None if self._mapper is None else self._mapper(ranges, opts, wanted)
        checks: Iterator[RangeCheck]
        if mapped is not None:
            checks = iter(mapped)
        else:
            work = functools.partial(check_range, opts=opts, dispatch=dispatch, wanted=wanted)
            checks = self._each(work, ranges)
        return WalkEnds(self.store, ranges, checks, opts, dispatch, wanted)
