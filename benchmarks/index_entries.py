"""``index --entries --limit N`` on a small and a large store against ``python -c pass``.

Usage: python benchmarks/index_entries.py [--size-gib N] [--limit N]

Two stores are generated in a temporary directory, one of 2000 messages and one of about N GiB
(default 1, some 860,000 index entries). Reading the header and N entries should cost the same
on both; the statistics over every entry (``index`` without ``--entries``) are shown beside.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import harness

from rmqinspect.synth.workload import WorkloadConfig, write_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--limit", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        write_workload(small, WorkloadConfig(messages=2000, seed=1))
        harness.synth(large, args.size_gib)
        base = harness.python_pass_seconds()
        print(f"{'store':<8}{'command':<34}{'best wall s':>12}{'x python':>10}")
        print(f"{'':<8}{'python -c pass':<34}{base:>12.3f}{1.0:>10.1f}")
        for name, root in (("small", small), ("large", large)):
            rmq = [sys.executable, "-m", "rmqinspect", "index", str(root), "-F", "jsonl"]
            for label, cmd in (
                (
                    f"index --entries --limit {args.limit}",
                    [*rmq, "--entries", "--limit", str(args.limit)],
                ),
                ("index (statistics)", rmq),
            ):
                r = harness.best_of(3, cmd)
                print(f"{name:<8}{label:<34}{r.wall:>12.3f}{r.wall / base:>10.1f}")
        print("target: --entries --limit N reads the header and N entries (same on both stores)")


if __name__ == "__main__":
    main()
