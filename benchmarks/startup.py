"""Start-up: ``lookup STORE --msg-id ID`` against ``python -c pass``.

Usage: python benchmarks/startup.py [--runs N]

A small store is generated in a temporary directory; each command runs N times (default 10)
and the fastest wall time and the
smallest CPU time (user + system) count: on a busy machine the CPU time is the steadier figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import harness

from rmqinspect.format import ids
from rmqinspect.synth.workload import WorkloadConfig, write_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        root = Path(tmp) / "store"
        write_workload(root, WorkloadConfig(messages=2000, seed=1))
        from rmqinspect.store.model import Store

        with Store.open(root) as store:
            rec = store.read_message(store.commitlog.min_offset)
            msg_id = ids.msg_id(rec)
        rmq = [sys.executable, "-m", "rmqinspect"]
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "rmqinspect --version": [*rmq, "--version"],
            "lookup --msg-id (json)": [*rmq, "lookup", str(root), "--msg-id", msg_id, "-F", "json"],
            "lookup --msg-id (table)": [
                *rmq,
                "lookup",
                str(root),
                "--msg-id",
                msg_id,
                "-F",
                "table",
            ],
        }
        runs = {name: [harness.run(cmd) for _ in range(args.runs)] for name, cmd in cases.items()}
        wall = {name: min(r.wall for r in rs) for name, rs in runs.items()}
        cpu = {name: min(r.cpu for r in rs) for name, rs in runs.items()}
        base, base_cpu = wall["python -c pass"], cpu["python -c pass"]
        print(
            f"{'command':<26}{'best wall s':>12}{'x python':>10}{'best cpu s':>12}{'x python':>10}"
        )
        for name in runs:
            print(
                f"{name:<26}{wall[name]:>12.3f}{wall[name] / base:>10.1f}"
                f"{cpu[name]:>12.3f}{cpu[name] / base_cpu:>10.1f}"
            )
        print("target: lookup --msg-id within 8x python -c pass")


if __name__ == "__main__":
    main()
