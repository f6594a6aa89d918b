"""Store writer throughput: generate a store of about N bytes and compare with ``cat``.

Usage: python benchmarks/synth_throughput.py [--size-mib N] [--body-size B] [--profile P]
       [--keep DIR]

The workload is ``rmqinspect synth``'s (default mix, 1000-byte bodies, default broker sizes:
1 GiB commitlog files, default index geometry). Reported: wall seconds of the whole generation
(commitlog, consume queues, index, checkpoint, config), MiB/s of commitlog data, and the ratio
to ``cat``-ing the produced commitlog to /dev/null with a warm page cache.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from rmqinspect.format.profile import Profile
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import StoreLayout

RECORD_OVERHEAD = 230  # header, topic and properties of a workload message, roughly


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--body-size", type=int, default=1000)
    parser.add_argument("--profile", type=Profile, default=Profile.V4_9)
    parser.add_argument("--keep", type=Path, help="write here (must not exist) and keep it")
    args = parser.parse_args()
    messages = args.size_mib * (1 << 20) // (args.body_size + RECORD_OVERHEAD)
    with tempfile.TemporaryDirectory(prefix="rmqsynth-") as tmp:
        root: Path = args.keep or Path(tmp) / "store"
        config = WorkloadConfig(messages=messages, body_size=args.body_size, seed=1)
        started = time.perf_counter()
        summary = write_workload(root, config, StoreLayout(profile=args.profile))
        seconds = time.perf_counter() - started
        files = [str(root / "commitlog" / name) for name in summary.commitlog_files]
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm
        cat_started = time.perf_counter()
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
        cat_seconds = time.perf_counter() - cat_started
        mib = summary.data_bytes / 2**20
        print(f"messages   {summary.messages}")
        print(f"commitlog  {mib:.0f} MiB of records in {len(files)} files")
        print(f"index      {len(summary.index_files)} files, {summary.index_entries} entries")
        rate = mib / seconds
        print(f"synth      {seconds:.2f} s  {rate:.0f} MiB/s  {rate / 1024:.3f} GiB/s")
        print(f"cat        {cat_seconds:.2f} s  {mib / cat_seconds:.0f} MiB/s")
        print(f"ratio      synth / cat = {seconds / cat_seconds:.1f}")


if __name__ == "__main__":
    main()
