"""verify throughput, as a ratio to one ``zlib.crc32`` pass over the same bytes in the same run.

Usage: python benchmarks/verify.py [STORE] [--size-mib N] [--file-size-mib N] [--profile]

Without STORE, a store of about N MiB (default 1024) of 1 KiB-body messages is generated with
``rmqinspect synth`` in a temporary directory, in commitlog files of ``--file-size-mib`` (default
256, so that ``--jobs 2`` has files to share: verify's work units are files). Timed over the
same files, page cache warm:

* ``zlib.crc32``: one pass over the record bytes (the baseline of the ratio);
* ``scan``: the shared scanner with the broker's record check, body CRC enforced;
* ``commitlog``: verify's commitlog part alone (every file, one core);
* ``verify -j1`` / ``verify -j2``: the whole command (commitlog, consume queues, index files,
  checkpoint, config) in one and in two processes.

Wall-clock and CPU seconds are both printed (CPU includes the worker processes): on a busy
machine the CPU ratio is the steadier one. ``--profile`` prints where ``verify -j1`` spends its
CPU time.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from rmqinspect.analysis.verify import VerifyOptions, verify_store
from rmqinspect.analysis.verify.commitlog import check_file
from rmqinspect.analysis.verify.context import Context
from rmqinspect.format import scan
from rmqinspect.store.model import Store


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (the --jobs workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _record_bytes(store: Store) -> int:
    return sum(
        int(ev.columns.store_size.sum())
        for _, ev in store.scan(policy=scan.WalkPolicy.FORENSIC)
        if isinstance(ev, scan.CheckedRun)
    )


def _crc(store: Store) -> None:
    """One CRC pass over each file's data (the preallocated zero tail left out)."""
    crc = 0
    for f in store.commitlog.files:
        buf = store.view(f)
        crc = zlib.crc32(buf[: scan.data_extent(buf, 0)], crc)
        buf.release()


def _scan(store: Store) -> None:
    for _ in store.scan(policy=scan.WalkPolicy.FORENSIC):
        pass


def _commitlog(store: Store) -> None:
    ctx = Context(store, VerifyOptions())
    for f in store.commitlog.files:
        check_file(ctx, f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", type=Path)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--file-size-mib", type=int, default=256)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        root: Path = args.store or Path(tmp) / "store"
        if args.store is None:
            body = 1024
            messages = args.size_mib * (1 << 20) // (body + 250)
            cmd = [sys.executable, "-m", "rmqinspect", "synth", str(root), "--quiet"]
            cmd += ["--messages", str(messages), "--body-size", str(body), "--seed", "1"]
            cmd += ["--commitlog-file-size", str(args.file_size_mib << 20)]
            t = _timed(lambda: subprocess.run(cmd, check=True))
            print(f"synth: {messages} messages in {t:.1f} s")
        with Store.open(root) as store:
            size = _record_bytes(store)  # also warms the page cache
            _crc(store)
            mib = size / 2**20
            print(f"commitlog: {len(store.commitlog.files)} files, {mib:.0f} MiB of records")
            base = _timed(lambda: _crc(store))
            c0 = _cpu()
            _crc(store)
            base_cpu = _cpu() - c0
            print(f"{'reader':<12}{'seconds':>9}{'MiB/s':>9}{'x zlib':>8}{'cpu s':>8}{'x zlib':>8}")
            rows: list[tuple[str, Callable[[], object]]] = [
                ("zlib.crc32", lambda: _crc(store)),
                ("scan", lambda: _scan(store)),
                ("commitlog", lambda: _commitlog(store)),
                ("verify -j1", lambda: verify_store(store, jobs=1)),
                ("verify -j2", lambda: verify_store(store, jobs=2)),
            ]
            for name, fn in rows:
                c0 = _cpu()
                t = _timed(fn)
                cpu = _cpu() - c0
                print(
                    f"{name:<12}{t:>9.2f}{mib / t:>9.0f}{t / base:>8.1f}"
                    f"{cpu:>8.2f}{cpu / base_cpu:>8.1f}"
                )
            if args.profile:
                profiler = cProfile.Profile(time.process_time)
                profiler.runcall(verify_store, store, jobs=1)
                pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
