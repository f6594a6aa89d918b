"""Copies of one record against valid records: each command's time on a commitlog region filled
with copies of one record, as a ratio to the same command on valid records of the same size.

Usage: python benchmarks/stale_copies.py [--size-mib N] [--body-size N] [--commands a,b,..]

A store of about N MiB (default 32) of ``--body-size``-byte bodies (default 100, about 340-byte
records) is generated with ``rmqinspect synth`` in one commitlog file; a copy of it gets its
commitlog data replaced by copies of its first record (every copy a stale copy of a record its
queue serves: the queue offset and the PHYSICALOFFSET field agree with the first record, not with
the copy's place). Both are timed in the same run, best of ``--repeat`` (default 1), page cache
warm; the ratio stale / valid is what issue 26 asks to keep within about 2.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness

COMMANDS = ("messages", "verify", "recover", "export", "salvage")


def _synth(root: Path, size_mib: int, body: int) -> int:
    messages = size_mib * (1 << 20) // (body + 240)
    cmd = [*harness.RMQ, "synth", str(root), "--quiet", "--plain", "--seed", "1"]
    cmd += ["--messages", str(messages), "--body-size", str(body)]
    cmd += ["--commitlog-file-size", str((size_mib + 16) << 20)]
    subprocess.run(cmd, check=True)
    return messages


def _fill_with_copies(root: Path) -> int:
    """Replace the data of the (only) commitlog file by copies of its first record."""
    (path,) = sorted((root / "commitlog").iterdir())
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[:4], "big")
    end = 0
    while end + 4 <= len(data) and int.from_bytes(data[end : end + 4], "big") > 0:
        end += int.from_bytes(data[end : end + 4], "big")
    copies = end // size
    data[: copies * size] = data[:size] * copies
    data[copies * size : end] = bytes(end - copies * size)  # no torn record after the copies
    path.write_bytes(bytes(data))
    return copies


def _command(name: str, store: Path, out: Path) -> list[str]:
    """The command line of ``name`` on ``store`` (export and salvage write to a fresh ``out``)."""
    shutil.rmtree(out, ignore_errors=True)
    args = {
        "messages": [],
        "verify": ["-j", "1"],
        "recover": [],
        "export": [str(out), "--engine", "arrow"],
        "salvage": ["--out", str(out)],
    }[name]
    return [*harness.RMQ, name, str(store), *args, "-F", "json"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=32)
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--commands", default=",".join(COMMANDS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        valid, stale = Path(tmp) / "valid", Path(tmp) / "stale"
        t0 = time.perf_counter()
        messages = _synth(valid, args.size_mib, args.body_size)
        shutil.copytree(valid, stale)
        copies = _fill_with_copies(stale)
        took = time.perf_counter() - t0
        print(f"stores: {messages} valid records, {copies} copies of one record ({took:.1f} s)")
        print(f"{'command':<10}{'valid s':>9}{'stale s':>9}{'ratio':>7}")
        for name in args.commands.split(","):
            times = []
            for store in (valid, stale):
                runs = []
                for _ in range(args.repeat):
                    cmd = _command(name, store, Path(tmp) / "out")
                    runs.append(harness.run(cmd, ok=(0, 1)))  # 1: findings
                times.append(min(r.wall for r in runs))
            print(f"{name:<10}{times[0]:>9.2f}{times[1]:>9.2f}{times[1] / times[0]:>7.1f}")


if __name__ == "__main__":
    sys.exit(main())
