"""Speed-up with cores: ``verify``, ``recover`` and the arrow export at -j1, -j2, -j4 ... up to
the machine's cores, beside ``cat`` and one core's read + CRC of the same files in the same run.

Usage: python benchmarks/scaling.py [STORE] [--files N] [--file-size-mib M] [--jobs 1,2,4]

Without STORE, a store of N commitlog files (default: twice the cores, at least 4) of M MiB
(default 64) of 1 KiB-body messages is generated with ``rmqinspect synth`` in a temporary
directory. Each command runs as a child, page cache warm, output to /dev/null; its wall time,
throughput over the commitlog's data and speed-up over its own -j1 are printed. A command
without ``--jobs`` (``recover`` before it had one) gets one row. The export rows come from
``export_scaling(store, jobs)`` in ``benchmarks/export.py`` when that exists; else they are
skipped with a line saying so. Needs numpy, pyarrow, rich and typer; no pyspark, no Java.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness

CHUNK = 8 << 20


def _jobs(cores: int) -> list[int]:
    out = [1]
    while out[-1] * 2 <= cores:
        out.append(out[-1] * 2)
    if out[-1] != cores:
        out.append(cores)
    return out


def _read_crc(files: list[Path]) -> float:
    """One core: read every file and ``zlib.crc32`` it, the best of two."""
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        for path in files:
            crc = 0
            with open(path, "rb", buffering=0) as fh:
                while chunk := fh.read(CHUNK):
                    crc = zlib.crc32(chunk, crc)
        best = min(best, time.perf_counter() - t0)
    return best


def _has_jobs(command: str) -> bool:
    out = subprocess.run(
        [*harness.RMQ, command, "--help"], capture_output=True, text=True, env=_env()
    )
    return "--jobs" in out.stdout


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200"}


def _export() -> Callable[[Path, list[int]], list[Any]] | None:
    """``export_scaling`` of benchmarks/export.py, imported only when asked for: that module
    may need what this script must not (pyspark)."""
    try:
        from export import export_scaling
    except ImportError:
        return None
    return export_scaling


def _synth(root: Path, files: int, file_mib: int) -> None:
    messages = files * (file_mib << 20) // harness.RECORD
    cmd = [*harness.RMQ, "synth", str(root), "--quiet", "--messages", str(messages)]
    cmd += ["--body-size", str(harness.BODY), "--seed", "1", "--plain"]
    cmd += ["--commitlog-file-size", str(file_mib << 20)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"synth: {messages} messages in {time.perf_counter() - t0:.1f} s")


def main() -> None:
    cores = os.cpu_count() or 1
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("store", nargs="?", type=Path)
    parser.add_argument("--files", type=int, default=max(4, 2 * cores))
    parser.add_argument("--file-size-mib", type=int, default=64)
    parser.add_argument("--jobs", default="", help="comma-separated (default 1, 2, 4 .. cores)")
    args = parser.parse_args()
    jobs = [int(j) for j in args.jobs.split(",") if j] or _jobs(cores)
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        root: Path = args.store or Path(tmp) / "store"
        if args.store is None:
            _synth(root, args.files, args.file_size_mib)
        files = harness.commitlog_files(root)
        size = harness.data_bytes(root)
        gb = size / 1e9
        cat = harness.cat_seconds(files)
        crc = _read_crc(files)
        print(f"{cores} cores; {len(files)} commitlog files, {gb:.2f} GB of data")
        print(f"{'command':<32}{'wall s':>8}{'GB/s':>7}{'speed-up':>10}{'cpu s':>8}")
        print(f"{'cat':<32}{cat:>8.2f}{gb / cat:>7.2f}")
        print(f"{'read + zlib.crc32, one core':<32}{crc:>8.2f}{gb / crc:>7.2f}")
        for command in ("verify", "recover"):
            argv = [*harness.RMQ, command, str(root), "-F", "json"]
            levels = jobs if _has_jobs(command) else [0]
            base = None
            for j in levels:
                r = harness.run([*argv, *(["-j", str(j)] if j else [])], ok=(0, 1))
                base = base or r.wall
                name = f"{command} -j{j}" if j else f"{command} (no --jobs: one core)"
                print(
                    f"{name:<32}{r.wall:>8.2f}{gb / r.wall:>7.2f}"
                    f"{base / r.wall:>9.1f}x{r.cpu:>8.2f}",
                    flush=True,
                )
        export = _export()
        if export is None:
            print("export: benchmarks/export.py has no export_scaling(store, jobs): rows skipped")
        else:
            base = None
            for row in export(root, jobs):  # a Scaling per -j: wall time, time to first range
                base = base or row.seconds
                name = f"export --engine arrow -j{row.jobs}"
                print(
                    f"{name:<32}{row.seconds:>8.2f}{gb / row.seconds:>7.2f}"
                    f"{base / row.seconds:>9.1f}x  first range {row.first_range:.2f} s",
                    flush=True,
                )


if __name__ == "__main__":
    sys.exit(main())
