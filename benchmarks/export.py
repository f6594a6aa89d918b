"""Export throughput of both engines, as MB/s of commitlog and as a ratio to ``cat``.

Usage: python benchmarks/export.py [STORE] [--size-gib N] [--engines arrow,spark]
                                   [--tables messages] [--rss-sizes 1,2,4,8] [--jobs 1,2,4]

The commitlog into Parquet is the ``messages`` table (the default); ``findings`` adds a whole
``verify`` of the store, and the other tables read the consume queues and index files.

Without STORE, a store of about N GiB (default 2) of 1000-byte bodies is generated with
``rmqinspect synth`` in a temporary directory. Each engine runs ``rmqinspect export`` as a child
process, page cache warm, and the resident memory of its whole process tree is sampled: the peak
of the sum over processes, the peak of the largest process, and the peak of the largest
process's anonymous memory (mapped store pages are page cache, not allocations).
``--rss-sizes`` instead exports stores of those sizes with the arrow engine to show whether its
memory stays flat. ``--jobs`` instead exports with the arrow engine at each worker count
(:func:`export_scaling`, which ``benchmarks/scaling.py`` calls too): wall time, speed-up over
the first count, and the time the driver takes before the first commitlog range starts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqinspect.export import arrow_engine
from rmqinspect.export.plan import CommitlogRange, plan_commitlog
from rmqinspect.export.progress import Reporter
from rmqinspect.export.schema import Table
from rmqinspect.export.tasks import Member, run_part
from rmqinspect.store.model import Store

BODY = 1000
RECORD = BODY + 250  # about what a synth record with its properties takes


@dataclass
class Run:
    seconds: float
    tree_rss: int  # bytes, peak of the sum over the process tree
    largest_rss: int  # bytes, peak of the largest process
    largest_anon: int  # bytes, peak anonymous memory of one process


def _status(pid: int) -> tuple[int, int]:
    rss = anon = 0
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, anon


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except OSError:
            pass
    return pids


def _timed_export(cmd: list[str]) -> Run:
    peak = [0, 0, 0]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            stats = [_status(p) for p in _tree(proc.pid)]
            peak[0] = max(peak[0], sum(r for r, _ in stats))
            peak[1] = max([peak[1], *(r for r, _ in stats)])
            peak[2] = max([peak[2], *(a for _, a in stats)])

    thread = threading.Thread(target=sample, daemon=True)
    t0 = time.perf_counter()
    thread.start()
    code = proc.wait()
    seconds = time.perf_counter() - t0
    done.set()
    thread.join()
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {code}")
    return Run(seconds, peak[0], peak[1], peak[2])


def _synth(root: Path, gib: float) -> None:
    messages = int(gib * (1 << 30)) // RECORD
    cmd = [sys.executable, "-m", "rmqinspect", "synth", str(root), "--quiet", "--seed", "1"]
    cmd += ["--messages", str(messages), "--body-size", str(BODY)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"synth: {messages} messages in {time.perf_counter() - t0:.1f} s", flush=True)


def _data_bytes(root: Path) -> tuple[list[Path], int]:
    with Store.open(root) as store:
        files = [f.path for f in store.commitlog.files]
        return files, sum(r.nbytes for r in plan_commitlog(store))


def _export(root: Path, out: Path, engine: str, tables: str) -> Run:
    cmd = [sys.executable, "-m", "rmqinspect", "export", str(root), str(out), "--overwrite"]
    return _timed_export([*cmd, "--engine", engine, "--tables", tables, "-F", "json"])


@dataclass
class Scaling:
    jobs: int
    seconds: float  # wall time of `rmqinspect export --engine arrow --tables messages -j JOBS`
    tree_rss: int  # bytes, peak of the sum over the process tree
    first_range: float  # seconds from the engine's start to the first range task submitted


class _Watched(ProcessPoolExecutor):
    """The arrow engine's pool, noting when the first commitlog range is submitted."""

    first: float | None = None

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        if _Watched.first is None and fn is run_part and isinstance(args[2], CommitlogRange):
            _Watched.first = time.perf_counter()
        return super().submit(fn, *args, **kwargs)


def first_range_seconds(store: Path, jobs: int) -> float:
    """How long the arrow engine's driver takes, from its start, to submit the first commitlog
    range (the serial part of the export: the restart emulation and the ranges' planning)."""
    _Watched.first = None
    saved = arrow_engine.ProcessPoolExecutor
    arrow_engine.ProcessPoolExecutor = _Watched  # type: ignore[misc]
    try:
        with tempfile.TemporaryDirectory(prefix="rmqbench-out-") as out, Store.open(store) as s:
            t0 = time.perf_counter()
            arrow_engine.run_arrow([Member(s)], Path(out), (Table.MESSAGES,), jobs, Reporter())
    finally:
        arrow_engine.ProcessPoolExecutor = saved  # type: ignore[misc]
    assert _Watched.first is not None
    return _Watched.first - t0


def export_scaling(store: Path, jobs: Sequence[int]) -> list[Scaling]:
    """The arrow export of ``messages`` at each worker count in ``jobs``, page cache warm."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        for j in jobs:
            cmd = [sys.executable, "-m", "rmqinspect", "export", str(store), str(Path(tmp) / "o")]
            cmd += ["--overwrite", "--engine", "arrow", "--tables", "messages", "-F", "json"]
            run = _timed_export([*cmd, "--jobs", str(j)])
            rows.append(Scaling(j, run.seconds, run.tree_rss, first_range_seconds(store, j)))
    return rows


def print_scaling(rows: Sequence[Scaling], size: int) -> None:
    print(
        f"{'-j':>4}{'seconds':>9}{'MB/s':>8}{'speed-up':>10}{'first range s':>15}{'tree MiB':>10}"
    )
    for r in rows:
        print(
            f"{r.jobs:>4}{r.seconds:>9.2f}{size / 1e6 / r.seconds:>8.0f}"
            f"{rows[0].seconds / r.seconds:>10.2f}{r.first_range:>15.2f}{_mib(r.tree_rss):>10}",
            flush=True,
        )


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("store", nargs="?", type=Path)
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--engines", default="arrow,spark")
    parser.add_argument("--tables", default="messages")
    parser.add_argument("--rss-sizes", default="", help="GiB sizes, comma-separated")
    parser.add_argument("--jobs", default="", help="arrow worker counts, comma-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        if args.jobs:
            root = args.store or Path(tmp) / "store"
            if args.store is None:
                _synth(root, args.size_gib)
            _, size = _data_bytes(root)
            print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
            print_scaling(export_scaling(root, [int(j) for j in args.jobs.split(",")]), size)
            return
        if args.rss_sizes:
            print(f"{'GiB':>6}{'seconds':>10}{'MB/s':>8}{'tree MiB':>10}{'max MiB':>9}{'anon':>7}")
            for gib in (float(s) for s in args.rss_sizes.split(",")):
                root = Path(tmp) / f"store{gib}"
                _synth(root, gib)
                _, size = _data_bytes(root)
                run = _export(root, Path(tmp) / "out", "arrow", args.tables)
                print(
                    f"{gib:>6.1f}{run.seconds:>10.1f}{size / 1e6 / run.seconds:>8.0f}"
                    f"{_mib(run.tree_rss):>10}{_mib(run.largest_rss):>9}"
                    f"{_mib(run.largest_anon):>7}",
                    flush=True,
                )
                subprocess.run(["rm", "-rf", str(root)], check=True)
            return
        root: Path = args.store or Path(tmp) / "store"
        if args.store is None:
            _synth(root, args.size_gib)
        files, size = _data_bytes(root)
        subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
        t0 = time.perf_counter()
        subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
        base = time.perf_counter() - t0
        print(
            f"commitlog: {len(files)} files, {size / 1e6:.0f} MB of records; tables {args.tables}"
        )
        print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
        header = f"{'reader':<8}{'seconds':>9}{'MB/s':>8}{'x cat':>8}"
        print(f"{header}{'tree MiB':>10}{'max MiB':>9}{'anon MiB':>10}")
        print(f"{'cat':<8}{base:>9.2f}{size / 1e6 / base:>8.0f}{1.0:>8.1f}")
        runs: dict[str, Run] = {}
        for engine in args.engines.split(","):
            run = runs[engine] = _export(root, Path(tmp) / f"out-{engine}", engine, args.tables)
            print(
                f"{engine:<8}{run.seconds:>9.2f}{size / 1e6 / run.seconds:>8.0f}"
                f"{run.seconds / base:>8.1f}{_mib(run.tree_rss):>10}{_mib(run.largest_rss):>9}"
                f"{_mib(run.largest_anon):>10}",
                flush=True,
            )
        if {"arrow", "spark"} <= runs.keys():
            print(f"spark / arrow wall time: {runs['spark'].seconds / runs['arrow'].seconds:.2f}")


if __name__ == "__main__":
    main()
