"""CRC-32 implementations, as a ratio to ``zlib.crc32`` over the same bytes in the same run.

Usage: python benchmarks/crc.py [--mib N]

One process, one core, random bytes in memory (N MiB, default 256). Two shapes:

* one buffer of N MiB (one call);
* the buffer cut into slices of 100, 1000 and 4000 bytes (the bodies of a scan): one Python
  call per slice for the single-buffer functions, one call for all of them for
  ``speedups.crc32_many``.

Rows: ``zlib.crc32`` (the reference, and rmqinspect's fallback without the C extension),
``crc.crc32`` (rmqinspect's CRC-32: the extension's PCLMULQDQ folding when built),
``crc32_many`` (the scanner's), and ``isal`` (ISA-L's ``crc32``, when the ``isal`` package is
installed: rmqinspect used it before the extension had a CRC of its own). Best of 3; smaller
time ratios are faster.
"""

from __future__ import annotations

import argparse
import time
import zlib
from collections.abc import Callable
from functools import partial

import numpy as np

from rmqinspect.format import crc, speedups


def _best(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


Crc = Callable[[bytes | memoryview], int]


def _each(fn: Crc, view: memoryview, at: list[int], size: int) -> None:
    for s in at:
        fn(view[s : s + size])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args()
    buf = np.random.default_rng(1).integers(0, 256, args.mib << 20, np.uint8).tobytes()
    view = memoryview(buf)
    singles: dict[str, Crc] = {
        "zlib.crc32": zlib.crc32,
        "crc.crc32": crc.crc32,
    }
    try:
        from isal import isal_zlib

        singles["isal"] = isal_zlib.crc32
    except ImportError:
        print("isal is not installed: its rows are left out")
    print(f"extension built: {speedups.compiled()}")
    print(f"{'shape':<14}{'function':<14}{'MiB/s':>9}{'x zlib':>8}")
    base = 0.0
    for name, fn in singles.items():  # zlib first: the reference
        t = _best(partial(fn, buf))
        base = base or t
        print(f"{'one buffer':<14}{name:<14}{args.mib / t:>9.0f}{t / base:>8.2f}")
    for size in (100, 1000, 4000):
        starts = np.arange(len(buf) // size, dtype=np.int64) * size
        lengths = np.full(len(starts), size, np.int64)
        at = starts.tolist()
        mib = len(at) * size / 2**20
        shape = f"{size} B slices"
        base = 0.0
        for name, fn in singles.items():
            t = _best(partial(_each, fn, view, at, size))
            base = base or t
            print(f"{shape:<14}{name:<14}{mib / t:>9.0f}{t / base:>8.2f}")
        t = _best(partial(speedups.crc32_many, buf, starts, lengths))
        print(f"{shape:<14}{'crc32_many':<14}{mib / t:>9.0f}{t / base:>8.2f}")


if __name__ == "__main__":
    main()
