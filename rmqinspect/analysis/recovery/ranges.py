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
position it stops at; it reads those records' fields without checking them again and dispatches
them in order as before, the index keys' hashes also computed by the workers (the hashing was
most of the dispatch): the same answers, field for field, as the serial scan.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from types import TracebackType

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis.ranges import SPLIT_BYTES, Range, plan_ranges, worker_pool, worker_settings
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RecordColumns, decode_text
from rmqinspect.format.npbytes import I64
from rmqinspect.format.scan import check_run, resync
from rmqinspect.store import mapguard
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store, StoreOptions

I32 = npt.NDArray[np.int32]
_NONE: I32 = np.zeros(0, np.int32)


@dataclass(frozen=True, slots=True)
class Keys:
    """Index keys of records, by the records' file positions (ascending): each key's hash and
    the number of its record among ``positions`` (non-decreasing), in ``buildIndex`` order."""

    positions: I32
    hashes: I32
    owners: I32

    @staticmethod
    def concat(parts: list[Keys]) -> Keys:
        bases = np.cumsum([0, *(len(k.positions) for k in parts)])
        return Keys(
            np.concatenate([_NONE, *(k.positions for k in parts)]),
            np.concatenate([_NONE, *(k.hashes for k in parts)]),
            np.concatenate(
                [
                    _NONE,
                    *(
                        (k.owners + b).astype(np.int32)
                        for k, b in zip(parts, bases[:-1], strict=True)
                    ),
                ]
            ),
        )

    def of(self, positions: I64) -> tuple[I64, I64]:
        """The hashes and owners (numbers among ``positions``) of the keys of the records at
        ``positions`` (ascending, each one of :attr:`positions`)."""
        records = np.searchsorted(self.positions, positions)
        lo = np.searchsorted(self.owners, records, side="left")
        counts = np.searchsorted(self.owners, records, side="right") - lo
        owners = np.repeat(np.arange(len(positions), dtype=np.int64), counts)
        firsts = np.cumsum(counts) - counts
        at = np.repeat(lo - firsts, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        return self.hashes[at].astype(np.int64), owners


@dataclass(frozen=True, slots=True)
class RangeCheck:
    """A range's walk: its first record boundary (None: none found from its cut), where it
    ended (at a BLANK or failure: ``ended``; else at the first boundary at or past its end),
    and the records it accepted before that, with their index keys when asked for."""

    start: int | None
    stop: int
    ended: bool
    records: Keys


def check_range(store: Store, r: Range, opts: cl.CheckOptions, keys: bool) -> RangeCheck:
    """The recovery walk of range ``r`` with the scan's record checks ``opts``; with ``keys``,
    the index keys of its records (``CommitLogDispatcherBuildIndex``'s, every record's)."""
    f = store.commitlog.files[r.file]
    # Records start before the file's length: past it, nothing is the next range's.
    end = f.length + 1 if r.end is None else r.end
    buf = store.view(f)
    parts: list[Keys] = []
    try:
        start = r.begin
        if r.sync:
            found = resync(buf, r.begin - 1, min(len(buf), end), f.start, opts)
            if found is None:
                return RangeCheck(None, end, False, Keys(_NONE, _NONE, _NONE))
            start = found
        pos = start
        while True:
            run = check_run(buf, pos, f.start, opts)
            inside = int(np.searchsorted(run.columns.positions, end))
            parts.append(_keys(run.columns, inside, keys))
            store.maps.release(f, pos, run.end)  # memory stays flat
            if inside < len(run):
                stop, ended = int(run.columns.positions[inside]), False
            elif run.stop is not None or run.end >= end:
                stop, ended = run.end, run.stop is not None
            else:
                pos = run.end
                continue
            return RangeCheck(start, stop, ended, Keys.concat(parts))
    finally:
        buf.release()
        store.maps.release(f, 0, f.length)


def _keys(cols: RecordColumns, n: int, keys: bool) -> Keys:
    """The positions of the first ``n`` records and (``keys``) their index keys, as 32-bit
    numbers (a position in a mapped file, a hash in 0..Integer.MAX_VALUE): what waits for the
    stitch stays small."""
    positions = cols.positions[:n].astype(np.int32)
    if not keys or not n:
        return Keys(positions, _NONE, _NONE)
    tids, topics = cols.topic_ids()
    found = cols.index_keys(np.arange(n, dtype=np.int64), tids, [decode_text(t) for t in topics])
    return Keys(positions, found.hashes.astype(np.int32), found.owners.astype(np.int32))


@dataclass(frozen=True, slots=True)
class FileWalk:
    """The scan loop's walk of a file from position 0: the records it accepts (and their index
    keys) and the position of the BLANK or failure it stops at."""

    records: Keys
    stop: int


class WalkEnds:
    """The scan loop's walk of each file, from the ranges' checks (in range order), asked for
    file by file in the scan's order."""

    def __init__(
        self,
        store: Store,
        ranges: list[Range],
        checks: Iterator[RangeCheck],
        opts: cl.CheckOptions,
        keys: bool,
    ) -> None:
        self._store = store
        self._ranges = iter(ranges)
        self._checks = checks
        self._opts = opts
        self._keys = keys
        self._file = {f.path: i for i, f in enumerate(store.commitlog.files)}
        self._pending: tuple[Range, RangeCheck] | None = None

    def walk(self, disk: StoreFile) -> FileWalk:
        """The walk of ``disk`` from position 0."""
        index = self._file[disk.path]
        expected = 0
        ended: int | None = None
        parts: list[Keys] = []
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
                again = replace(r, begin=expected, sync=False)
                check = check_range(self._store, again, self._opts, self._keys)
            parts.append(check.records)
            if check.ended:
                ended = check.stop
            expected = check.stop
        assert ended is not None, "a file's last range runs to a BLANK or failure"
        return FileWalk(Keys.concat(parts), ended)

    def _next(self) -> tuple[Range, RangeCheck] | None:
        r = next(self._ranges, None)
        return None if r is None else (r, next(self._checks))


# Checks ``ranges`` with ``opts`` (and ``keys``) elsewhere (the export's pool), results in
# order; None: not there (they are checked here).
RangeMapper = Callable[[list[Range], cl.CheckOptions, bool], Iterable[RangeCheck] | None]

_STORE: Store | None = None  # a worker process's own view of the store


def _open_in_worker(root: str, settings: StoreOptions) -> None:
    global _STORE
    _STORE = Store.open(root, settings)


@mapguard.checked
def _in_worker(opts: cl.CheckOptions, keys: bool, r: Range) -> RangeCheck:
    assert _STORE is not None
    return check_range(_STORE, r, opts, keys)


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
        self.jobs = 1 if mapper is not None else max(1, jobs)
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

    def walk_ends(self, first: StoreFile, opts: cl.CheckOptions, keys: bool) -> WalkEnds | None:
        """The checks of every range from file ``first`` on (``keys``: with the records' index
        keys), under way; None without ranges (the scan checks as it walks)."""
        if self.split_bytes is None:
            return None
        files = self.store.commitlog.files
        start = next(i for i, f in enumerate(files) if f.path == first.path)
        ranges = plan_ranges(self.store, self.split_bytes, start)
        mapped = None if self._mapper is None else self._mapper(ranges, opts, keys)
        checks: Iterator[RangeCheck]
        if mapped is not None:
            checks = iter(mapped)
        elif self._pool is None:
            checks = (check_range(self.store, r, opts, keys) for r in ranges)
        else:
            checks = self._pool.map(functools.partial(_in_worker, opts, keys), ranges)
        return WalkEnds(self.store, ranges, checks, opts, keys)
