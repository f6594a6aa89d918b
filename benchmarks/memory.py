"""Peak memory of ``recover`` and ``messages`` by store size, mapped store pages included.

Usage: python benchmarks/memory.py [--sizes 1,8]

For each size (GiB), a crashed store of 1000-byte bodies is generated in a temporary directory
and removed afterwards; ``recover -F json`` and ``messages -F jsonl`` run as children. Printed:
the peak resident set (the kernel's high-water mark: mapped pages count), the peak anonymous
memory, and the ratio of the resident peak to the commitlog's data.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import harness


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1,8", help="GiB sizes, comma-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        for gib in (float(s) for s in args.sizes.split(",")):
            root = Path(tmp) / f"store{gib}"
            harness.synth(root, gib, crash=True)
            size = harness.data_bytes(root)
            for name, cmd in (
                ("recover", [*harness.RMQ, "recover", str(root), "-F", "json"]),
                ("messages", [*harness.RMQ, "messages", str(root), "-F", "jsonl"]),
            ):
                r = harness.run(cmd, ok=(0, 1))
                rss, anon = harness.mib(r.max_rss), harness.mib(r.max_anon)
                print(
                    f"{gib:>5.1f} GiB {name:<9} {r.wall:>7.1f} s  rss {rss:>5} MiB"
                    f"  anon {anon:>4} MiB  ({r.max_rss / size:.2f} of the data)",
                    flush=True,
                )
            shutil.rmtree(root)
    print("target: peak RSS (mapped pages included) <= 400 MB at 1 and 8 GiB")


if __name__ == "__main__":
    main()
