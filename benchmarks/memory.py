"""Peak memory of every command that walks the store, by store size, mapped pages included.

Usage: python benchmarks/memory.py [--sizes 1,8] [--commands verify,recover,...]

For each size (GiB), a crashed store of 1000-byte bodies is generated in a temporary directory
and removed afterwards; each command runs as a child (its output to /dev/null, an export or a
salvage into the temporary directory). Printed, as a table: the wall time, the peak resident set
of the program or of its largest worker process (the kernel's high-water mark: mapped store
pages count), the peak anonymous memory, and the ratio of the resident peak to the commitlog's
data. The target: no figure grows with the store, none above 400 MB. A last table gives, per
command, its peak at each size, whether it stays under 400 MB and whether it is flat (the peak
at the largest size at most ``FLAT_SLACK`` above the smallest's: what a store four or eight
times larger may add, page-table and allocator noise, not data). The export runs with the
arrow engine, and with the spark engine too where that one can run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import harness

from rmqinspect.export.run import DEFAULT_MASTER, Engine, chosen_engine

TARGET = 400 * 10**6
FLAT_SLACK = 32 << 20


def _probe(root: Path) -> tuple[str, str, str]:
    """(an offsetMsgId, a topic and one of its keys) of a record near the start of the store,
    for ``trace`` and ``lookup --scan``."""
    cmd = [*harness.RMQ, "messages", str(root), "-F", "jsonl", "-n", "200"]
    rows = [
        json.loads(line) for line in subprocess.run(cmd, capture_output=True).stdout.splitlines()
    ]
    msg_id = rows[0]["msg_id"]
    keyed = next(r for r in rows if r["keys"] and not r["topic"].startswith(("%", "RMQ_SYS")))
    return msg_id, keyed["topic"], keyed["keys"][0]


def commands(root: Path, out: Path) -> dict[str, list[str]]:
    msg_id, topic, key = _probe(root)
    store = str(root)
    return {
        "verify": ["verify", store, "-F", "json"],
        "salvage": ["salvage", store, "-o", str(out / "salvage"), "-F", "json"],
        "recover": ["recover", store, "-F", "json"],
        "messages": ["messages", store, "-F", "jsonl"],
        "export": ["export", store, str(out / "export"), "--engine", "arrow", "-F", "json"],
        **(
            {"export spark": ["export", store, str(out / "export"), "--engine", "spark"]}
            if chosen_engine(Engine.AUTO, DEFAULT_MASTER)[0] is Engine.SPARK
            else {}
        ),
        "lookup --scan": ["lookup", store, "--key", key, "--topic", topic, "--scan", "-F", "json"],
        "trace": ["trace", store, "--msg-id", msg_id, "-F", "json"],
        "groups": ["groups", store, "-F", "json"],
        "transactions": ["transactions", store, "-F", "json"],
        "timers": ["timers", store, "-F", "json"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1,8", help="GiB sizes, comma-separated")
    parser.add_argument("--commands", default="", help="only these (names as printed)")
    args = parser.parse_args()
    only = {c.strip() for c in args.commands.split(",") if c.strip()}
    print(f"{'GiB':>5}  {'command':<14}{'wall s':>8}{'rss MiB':>9}{'anon MiB':>10}  of data")
    over = []
    peaks: dict[str, dict[float, int]] = {}
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        for gib in (float(s) for s in args.sizes.split(",")):
            root = Path(tmp) / f"store{gib}"
            harness.synth(root, gib, crash=True)
            size = harness.data_bytes(root)
            for name, argv in commands(root, Path(tmp)).items():
                if only and name not in only:
                    continue
                out = Path(tmp) / "salvage", Path(tmp) / "export"
                for path in out:
                    shutil.rmtree(path, ignore_errors=True)
                r = harness.run([*harness.RMQ, *argv], ok=(0, 1))
                rss, anon = harness.mib(r.max_rss), harness.mib(r.max_anon)
                print(
                    f"{gib:>5.1f}  {name:<14}{r.wall:>8.1f}{rss:>9}{anon:>10}"
                    f"  {r.max_rss / size:.2f}",
                    flush=True,
                )
                peaks.setdefault(name, {})[gib] = r.max_rss
                if r.max_rss > TARGET:
                    over.append(f"{name} at {gib} GiB")
            shutil.rmtree(root)
    print("target: peak RSS (mapped pages included) <= 400 MB at every size")
    if over:
        print("over the target: " + ", ".join(over))
    summary(peaks)


def summary(peaks: dict[str, dict[float, int]]) -> None:
    """Per command: its peak RSS at each size, under the target or not, flat or not."""
    sizes = sorted({gib for by_size in peaks.values() for gib in by_size})
    head = "".join(f"{f'{gib:g} GiB':>10}" for gib in sizes)
    print(f"\n{'command':<14}{head}  <= 400 MB  flat")
    for name, by_size in peaks.items():
        cells = "".join(f"{harness.mib(by_size[g]) if g in by_size else '-':>10}" for g in sizes)
        measured = [by_size[g] for g in sizes if g in by_size]
        under = "yes" if max(measured) <= TARGET else "NO"
        flat = "yes" if measured[-1] - measured[0] <= FLAT_SLACK else "NO"
        print(f"{name:<14}{cells}  {under:>9}  {flat if len(measured) > 1 else '-'}")


if __name__ == "__main__":
    main()
