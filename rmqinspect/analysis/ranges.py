"""Byte ranges of the commitlog files, the work units that ``verify`` and ``recover`` hand to
worker processes, and the store settings those workers open the store with.

A file larger than the split size is cut at arbitrary bytes, with no pass over its data first:
each range's walk finds its first record boundary from its cut, and the caller's stitch
compares it with where the range before stopped (:mod:`.verify.ranges`,
:mod:`.recovery.ranges`).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from rmqinspect.format.scan import data_extent
from rmqinspect.store.model import Store, StoreOptions

SPLIT_BYTES = 64 << 20  # bytes per range: a 1 GiB file keeps 16 cores busy


@dataclass(frozen=True, slots=True)
class Range:
    """Records starting in ``[begin, end)`` of the ``file``-th commitlog file (``end`` None: to
    the end of the file's walk); ``sync``: ``begin`` is a cut, not a record boundary."""

    file: int
    begin: int
    end: int | None
    extent: int | None  # the file's data extent, read once for all its ranges
    sync: bool

    def nbytes(self, length: int) -> int:
        return (length if self.end is None else self.end) - self.begin


def plan_ranges(store: Store, split_bytes: int | None, first: int = 0) -> list[Range]:
    """The commitlog files from the ``first``-th on: each whole (``split_bytes`` None, or a
    DLedger store, whose entry checks need the whole file), else cut every ``split_bytes`` up
    to the end of its data (cuts in the zero tail would find nothing but that tail). Work
    proportional to the number of files: the data extent is found from the end of each file."""
    ranges: list[Range] = []
    for i, f in enumerate(store.commitlog.files[first:], first):
        if split_bytes is None or store.dledger is not None or f.length <= split_bytes:
            ranges.append(Range(i, 0, None, None, False))
            continue
        buf = store.view(f)
        try:
            extent = data_extent(buf, 0, store.maps.data_end(f))
        finally:
            buf.release()
            store.maps.release(f, 0, f.length)
        cuts = list(range(split_bytes, extent, split_bytes))
        for begin, end in zip([0, *cuts], [*cuts, None], strict=True):
            ranges.append(Range(i, begin, end, extent, begin > 0))
    return ranges


def worker_settings(store: Store) -> StoreOptions:
    """The store options workers open the store with: the profile as detected here, so that
    every process judges records by the same rules, and the consume-queue file size inferred
    here (inferring it lists every queue directory: each worker did, with 100,000 queues)."""
    return dataclasses.replace(
        store.options, profile=store.profile.profile, cq_file_size=store.cq_file_size
    )


def pool_jobs(store: Store, jobs: int) -> int:
    """Worker processes for ``jobs``: none (1: this process) while a broker holds the store's
    lock. This process reads the commitlog's last file from the copy it took when first read;
    a worker opens the store itself and would copy the file at another moment, so records it
    finds there would not be the ones this process judges (a restart seemed to lose them)."""
    return 1 if store.maps.snapshot_paths else max(1, jobs)


def worker_pool(
    jobs: int, initializer: Callable[..., None], initargs: tuple[Any, ...]
) -> ProcessPoolExecutor:
    """``jobs`` worker processes, each opening the store with ``initializer(*initargs)``;
    forked where the platform can (the store's maps and tables are inherited, not rebuilt), and
    all started now, so that their start-up is not paid inside the first work unit."""
    fork = "fork" in multiprocessing.get_all_start_methods()
    pool = ProcessPoolExecutor(
        jobs,
        mp_context=multiprocessing.get_context("fork") if fork else None,
        initializer=initializer,
        initargs=initargs,
    )
    pool.submit(int).result()
    return pool
