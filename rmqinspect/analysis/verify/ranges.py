"""verify's commitlog work units: byte ranges of the files (:mod:`rmqinspect.analysis.ranges`),
checked apart and stitched in order.

Each range's walk begins at its cut and checks from the first record boundary the walk's resync
finds there (:func:`.commitlog.check_range` with ``sync``). The walk of a file is the same from
any boundary it reaches, so a range whose first boundary is where the range before it stopped
checks exactly the records a walk of the whole file checks there. Where it is not (the cut fell
into damage, or a record inside a body resembles one at its own position), the stitch checks
that range again from where the one before stopped, in this process: the same findings, field
for field, in every case, and the serial work is one range at most per such cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from rmqinspect.analysis.ranges import Range
from rmqinspect.analysis.verify.commitlog import (
    FileResult,
    RangeResult,
    check_range,
    merge_ranges,
)
from rmqinspect.analysis.verify.context import Context


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
