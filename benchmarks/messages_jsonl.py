"""``messages --format jsonl`` throughput: messages per second and a ratio to ``cat``.

Usage: python benchmarks/messages_jsonl.py [STORE] [--size-gib N] [--body text|hex|base64|none]

Without STORE, a store of about N GiB (default 1) of 1000-byte bodies is generated in a
temporary directory. The command runs as a child writing to /dev/null, page cache warm; messages
per second are counted against its CPU time (one core) and its wall time.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import harness

from rmqinspect.format.scan import CheckedRun, WalkPolicy
from rmqinspect.store.model import Store


def _count(root: Path) -> int:
    with Store.open(root) as store:
        return sum(
            len(ev)
            for _, ev in store.scan(policy=WalkPolicy.FORENSIC)
            if isinstance(ev, CheckedRun)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("store", nargs="?", type=Path)
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--body", default="text")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        root: Path = args.store or Path(tmp) / "store"
        if args.store is None:
            harness.synth(root, args.size_gib)
        files = harness.commitlog_files(root)
        size = harness.data_bytes(root)
        messages = _count(root)
        cat = harness.cat_seconds(files)
        cmd = [*harness.RMQ, "messages", str(root), "-F", "jsonl", "--body", args.body]
        r = harness.run(cmd)
        print(f"commitlog: {size / 1e9:.2f} GB of records, {messages} messages")
        print(f"{'reader':<10}{'wall s':>8}{'cpu s':>8}{'msg/s cpu':>11}{'msg/s wall':>11}", end="")
        print(f"{'GB/s':>7}{'x cat':>8}{'rss MiB':>9}{'anon MiB':>9}")
        print(f"{'cat':<10}{cat:>8.2f}{'':>8}{'':>11}{'':>11}{size / 1e9 / cat:>7.2f}{1.0:>8.1f}")
        print(
            f"{'messages':<10}{r.wall:>8.2f}{r.cpu:>8.2f}{messages / r.cpu:>11.0f}"
            f"{messages / r.wall:>11.0f}{size / 1e9 / r.wall:>7.2f}{r.wall / cat:>8.1f}"
            f"{harness.mib(r.max_rss):>9}{harness.mib(r.max_anon):>9}"
        )
        print("target: >= 150000 messages/s on one core")


if __name__ == "__main__":
    main()
