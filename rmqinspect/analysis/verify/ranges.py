"""verify's commitlog work units: byte ranges of the files, checked apart and stitched in order.

A file larger than the split size is cut at arbitrary bytes, with no pass over its data first:
each range's walk begins at its cut and checks from the first record boundary the walk's resync
finds there (:func:`.commitlog.check_range` with ``sync``). The walk of a file is the same from
any boundary it reaches, so a range whose first boundary is where the range before it stopped
checks exactly the records a walk of the whole file checks there. Where it is not (the cut fell
into damage, or a record inside a body resembles one at its own position), the stitch checks
that range again from where the one before stopped, in this process: the same findings, field
for field, in every case, and the serial work is one range at most per such cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from rmqinspect.analysis.verify.commitlog import (
    FileResult,
    RangeResult,
    check_range,
    merge_ranges,
)
from rmqinspect.analysis.verify.context import Context
from rmqinspect.format.scan import data_extent
from rmqinspect.store.model import Store

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


def plan_ranges(store: Store, split_bytes: int | None) -> list[Range]:
    """Each commitlog file whole (``split_bytes`` None, or a DLedger store, whose entry checks
    need the whole file), else cut every ``split_bytes`` up to the end of its data (cuts in the
    zero tail would find nothing but that tail). Work proportional to the number of files: the
    data extent is found from the end of each file."""
    ranges: list[Range] = []
    for i, f in enumerate(store.commitlog.files):
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


def check_unit(ctx: Context, r: Range) -> RangeResult:
    f = ctx.store.commitlog.files[r.file]
    if not f.length:
        return RangeResult(0, 0, FileResult(ctx.rel(f.path), f.start, f.length))
    return check_range(ctx, f, r.begin, r.end, r.extent, sync=r.sync)


def stitch(
    ctx: Context,
    ranges: list[Range],
    results: Iterable[RangeResult],
    advance: Callable[[int], None],
) -> Iterator[FileResult]:
    """Each file's result, in file order, from its ranges' results (in range order)."""
    files = ctx.store.commitlog.files
    parts: list[RangeResult] = []
    expected: int | None = 0  # where the walk of the file goes on: None when it has ended
    for k, (r, rr) in enumerate(zip(ranges, results, strict=True)):
        f = files[r.file]
        if rr.start != expected:
            rr = _again(ctx, r, expected)
        parts.append(rr)
        expected = rr.stop
        advance(r.nbytes(f.length))
        if k + 1 == len(ranges) or ranges[k + 1].file != r.file:
            yield merge_ranges(ctx, f, parts)
            parts, expected = [], 0


def _again(ctx: Context, r: Range, start: int | None) -> RangeResult:
    """Range ``r`` checked from ``start``, where the range before it stopped (None: the file's
    walk ended before it, so it holds nothing)."""
    f = ctx.store.commitlog.files[r.file]
    if start is None:
        empty = RangeResult(r.begin, None, FileResult(ctx.rel(f.path), f.start, f.length))
        empty.part.extent = r.extent or 0
        return empty
    return check_range(ctx, f, start, r.end, r.extent, sync=False)
