"""``recover`` on a crashed store against ``recover --assume-clean`` and ``cat``.

Usage: python benchmarks/recover.py [STORE] [--size-gib N]

Without STORE, a crashed store (abort file, lagging checkpoint, an undispatched last burst) of
about N GiB (default 1) of 1000-byte bodies is generated in a temporary directory. Both
commands run as children, page cache warm: wall and CPU seconds, GB/s of commitlog records, the
ratio to ``cat`` of the same files, the peak resident set (mapped store pages included) and the
peak anonymous memory.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import harness


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("store", nargs="?", type=Path)
    parser.add_argument("--size-gib", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        root: Path = args.store or Path(tmp) / "store"
        if args.store is None:
            harness.synth(root, args.size_gib, crash=True)
        files = harness.commitlog_files(root)
        size = harness.data_bytes(root)
        cat = harness.cat_seconds(files)
        base = [*harness.RMQ, "recover", str(root), "-F", "json"]
        runs = {
            "clean": harness.run([*base, "--assume-clean"], ok=(0, 1)),
            "crash": harness.run(base, ok=(0, 1)),
        }
        print(f"commitlog: {len(files)} files, {size / 1e9:.2f} GB of records")
        print(
            f"{'recover':<8}{'wall s':>8}{'cpu s':>8}{'GB/s':>7}{'GB/s cpu':>9}{'x cat':>7}", end=""
        )
        print(f"{'rss MiB':>9}{'anon MiB':>9}")
        print(f"{'cat':<8}{cat:>8.2f}{'':>8}{size / 1e9 / cat:>7.2f}{'':>9}{1.0:>7.1f}")
        for name, r in runs.items():
            print(
                f"{name:<8}{r.wall:>8.2f}{r.cpu:>8.2f}{size / 1e9 / r.wall:>7.2f}"
                f"{size / 1e9 / r.cpu:>9.2f}{r.wall / cat:>7.1f}"
                f"{harness.mib(r.max_rss):>9}{harness.mib(r.max_anon):>9}"
            )
        clean, crash = runs["clean"], runs["crash"]
        print(
            f"crash / clean: {crash.wall / clean.wall:.2f} wall, {crash.cpu / clean.cpu:.2f} cpu "
            "(target <= 2); clean target >= 1.5 GB/s per core"
        )


if __name__ == "__main__":
    main()
