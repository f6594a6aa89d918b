"""``recover --jobs``: the recovery scan's record checks (``checkMessageAndReturnSize``, CRC
included) by byte ranges in worker processes, stitched in the broker's order.

The scan loop (§10.4) walks each file from position 0 and stops at the first BLANK or failure.
A range's walk starts at the first record boundary its resync finds from its cut (a record that
names its own position, :func:`~rmqinspect.format.scan.resync`) and goes on to the first
boundary at or past its end, or to a BLANK or failure. The walk of a file is the same from any
boundary it reaches, so where a range starts where the one before it stopped, its answer is the
whole walk's there; where it does not (the cut fell into damage, or a body holds bytes that
look like a record at their own position), the stitch checks it again here from where the one
before stopped. The scan then knows, per file, where the broker's walk stops, and walks up to
there without the CRC (every record before it passed the full check), dispatching as before:
the same answers, field for field, as the serial scan.
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from types import TracebackType

import numpy as np

from rmqinspect.analysis.ranges import SPLIT_BYTES, Range, plan_ranges, worker_settings
from rmqinspect.format import commitlog as cl
from rmqinspect.format.scan import check_run, resync
from rmqinspect.store import mapguard
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store, StoreOptions


@dataclass(frozen=True, slots=True)
class RangeCheck:
    """A range's walk: its first record boundary (None: none found from its cut) and where it
    ended: at a BLANK or failure (``ended``), else at the first boundary at or past its end."""

    start: int | None
    stop: int
    ended: bool


def check_range(store: Store, r: Range, opts: cl.CheckOptions) -> RangeCheck:
    """The recovery walk of range ``r`` with the scan's record checks ``opts``."""
    f = store.commitlog.files[r.file]
    # Records start before the file's length: past it, nothing is the next range's.
    end = f.length + 1 if r.end is None else r.end
    buf = store.view(f)
    try:
        start = r.begin
        if r.sync:
            found = resync(buf, r.begin - 1, min(len(buf), end), f.start, opts)
            if found is None:
                return RangeCheck(None, end, False)
            start = found
        pos = start
        while True:
            run = check_run(buf, pos, f.start, opts)
            store.maps.release(f, pos, run.end)  # memory stays flat
            inside = int(np.searchsorted(run.columns.positions, end))
            if inside < len(run):
                return RangeCheck(start, int(run.columns.positions[inside]), False)
            if run.stop is not None:
                return RangeCheck(start, run.end, True)
            if run.end >= end:
                return RangeCheck(start, run.end, False)
            pos = run.end
    finally:
        buf.release()
        store.maps.release(f, 0, f.length)


class WalkEnds:
    """Where the scan loop's walk of each file from position 0 stops, from the ranges' checks
    (in range order), asked for file by file in the scan's order."""

    def __init__(
        self, store: Store, ranges: list[Range], checks: Iterator[RangeCheck], opts: cl.CheckOptions
    ) -> None:
        self._store = store
        self._ranges = iter(ranges)
        self._checks = checks
        self._opts = opts
        self._file = {f.path: i for i, f in enumerate(store.commitlog.files)}
        self._pending: tuple[Range, RangeCheck] | None = None

    def stop(self, disk: StoreFile) -> int:
        """The position in ``disk`` of the BLANK or failure that ends the walk from 0."""
        index = self._file[disk.path]
        expected = 0
        ended: int | None = None
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
            if ended is not None:
                continue  # the walk stopped in an earlier range of this file
            if check.start != expected:
                check = check_range(self._store, replace(r, begin=expected, sync=False), self._opts)
            if check.ended:
                ended = check.stop
            expected = check.stop
        assert ended is not None, "a file's last range runs to a BLANK or failure"
        return ended

    def _next(self) -> tuple[Range, RangeCheck] | None:
        r = next(self._ranges, None)
        return None if r is None else (r, next(self._checks))


_STORE: Store | None = None  # a worker process's own view of the store


def _open_in_worker(root: str, settings: StoreOptions) -> None:
    global _STORE
    _STORE = Store.open(root, settings)


@mapguard.checked
def _in_worker(opts: cl.CheckOptions, r: Range) -> RangeCheck:
    assert _STORE is not None
    return check_range(_STORE, r, opts)


class RangeChecker:
    """The recovery scan's record checks in ``jobs`` worker processes (1: in this process),
    each file cut every ``split_bytes`` (by default only for other processes to share: one
    process checks as it walks). Use as a context manager: the workers are forked on entry,
    before anything else (a progress bar's thread) runs, and each opens the store read-only
    itself."""

    def __init__(self, store: Store, jobs: int, split_bytes: int | None = None) -> None:
        self.store = store
        self.jobs = max(1, jobs)
        self.split_bytes = split_bytes or (SPLIT_BYTES if self.jobs > 1 else None)
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> RangeChecker:
        if self.jobs > 1:
            fork = "fork" in multiprocessing.get_all_start_methods()
            self._pool = ProcessPoolExecutor(
                self.jobs,
                mp_context=multiprocessing.get_context("fork") if fork else None,
                initializer=_open_in_worker,
                initargs=(str(self.store.root), worker_settings(self.store)),
            )
            self._pool.submit(int).result()  # fork them all now
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

    def walk_ends(self, first: StoreFile, opts: cl.CheckOptions) -> WalkEnds | None:
        """The checks of every range from file ``first`` on, under way; None without ranges
        (the scan checks as it walks)."""
        if self.split_bytes is None:
            return None
        files = self.store.commitlog.files
        start = next(i for i, f in enumerate(files) if f.path == first.path)
        ranges = plan_ranges(self.store, self.split_bytes, start)
        checks: Iterator[RangeCheck]
        if self._pool is None:
            checks = (check_range(self.store, r, opts) for r in ranges)
        else:
            checks = self._pool.map(functools.partial(_in_worker, opts), ranges)
        return WalkEnds(self.store, ranges, checks, opts)
