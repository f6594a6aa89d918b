"""Commitlog scan throughput, as a ratio to reading the same bytes with ``cat``.

Usage: python benchmarks/scan_commitlog.py [STORE] [--size-mib N]

Without STORE, a store of about N MiB (default 1024) is generated with ``rmqinspect synth`` in a
temporary directory. Three readers are timed over the same files, page cache warm:

* ``cat``: the baseline (``cat files > /dev/null``);
* ``batch``: the scanner's walk and columns, then :func:`decode_batch` into Arrow (the
  export/listing path, CRCs computed for ``body_crc_ok`` but not enforced);
* ``check``: :meth:`Store.scan` with the broker's record check, body CRC enforced (the
  recovery and verify path).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rmqinspect.format import columns, scan
from rmqinspect.format.batch import BatchDecodeError, decode_batch
from rmqinspect.store.model import Store


def _timed(fn: Callable[[], int]) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = fn()
    return time.perf_counter() - t0, n


def _cat(files: list[Path]) -> int:
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
    return 0


def _batch(store: Store) -> int:
    records = 0
    for f in store.commitlog.files:
        buf = store.view(f)
        pos = 0
        while True:
            walk = columns.walk(buf, pos)
            try:
                records += decode_batch(columns.gather(buf, walk, f.start)).num_rows
            except BatchDecodeError:
                break
            if walk.stop is not columns.WalkStop.LIMIT:
                break
            pos = walk.end
        buf.release()
    return records


def _runs(store: Store) -> list[tuple[int, int]]:
    """(records, bytes) of every checked run."""
    return [
        (len(ev), int(ev.columns.store_size.sum()))
        for _, ev in store.scan(policy=scan.WalkPolicy.FORENSIC)
        if isinstance(ev, scan.CheckedRun)
    ]


def _check(store: Store) -> int:
    return sum(n for n, _ in _runs(store))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", type=Path)
    parser.add_argument("--size-mib", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        root: Path = args.store or Path(tmp) / "store"
        if args.store is None:
            body = 1000
            messages = args.size_mib * (1 << 20) // (body + 250)
            cmd = [sys.executable, "-m", "rmqinspect", "synth", str(root), "--quiet"]
            cmd += ["--messages", str(messages), "--body-size", str(body), "--seed", "1"]
            t, _ = _timed(lambda: subprocess.run(cmd, check=True).returncode)
            print(f"synth: {messages} messages in {t:.1f} s")
        with Store.open(root) as store:
            files = [f.path for f in store.commitlog.files]
            # Files are preallocated: count the bytes records occupy, not the sparse tails.
            size = sum(b for _, b in _runs(store))
            _cat(files)  # warm the page cache so every reader sees the same conditions
            base, _ = _timed(lambda: _cat(files))
            print(f"commitlog: {len(files)} files, {size / 2**20:.0f} MiB of records")
            print(f"{'reader':<8}{'seconds':>10}{'MiB/s':>10}{'records':>12}{'x cat':>8}")
            print(f"{'cat':<8}{base:>10.2f}{size / 2**20 / base:>10.0f}{'':>12}{1.0:>8.1f}")
            for name, fn in (("batch", _batch), ("check", _check)):
                t, n = _timed(lambda fn=fn: fn(store))  # type: ignore[misc]
                print(f"{name:<8}{t:>10.2f}{size / 2**20 / t:>10.0f}{n:>12}{t / base:>8.1f}")


if __name__ == "__main__":
    main()
