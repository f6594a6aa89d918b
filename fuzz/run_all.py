"""Run every codec fuzz target under atheris and print the figures: inputs tried, seconds,
crashes, hangs and peak RSS per target (``make fuzz``; ``FUZZ_RUNS`` inputs each, 100,000 by
default).

    python fuzz/run_all.py [--runs N] [--targets NAME ...] [--out DIR]

Each target starts from real bytes (``seeds`` in ``tests/fuzz_targets.py``) and runs in its own
process with libFuzzer's limits: ``-timeout`` seconds for one input (a hang), ``-rss_limit_mb``.
Crash inputs are kept under ``--out`` (default ``fuzz/artifacts``) for a regression test.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.fuzz_targets import TARGETS, seeds  # noqa: E402

RSS_LIMIT_MB = 2048
INPUT_TIMEOUT_S = 10
# Commitlog buffers are walked record by record against the broker's check: 8 KiB holds dozens
# of records, enough for every path, and keeps 100,000 inputs within the hour.
MAX_LEN = {
    "commitlog_check": 8192,
    "commitlog_scan": 8192,
    "record_columns": 8192,
    "dledger_scan": 8192,
}


def run(target: str, runs: int, out: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"corpus-{target}-") as corpus:
        for i, seed in enumerate(seeds(target)):
            Path(corpus, f"seed-{i}").write_bytes(seed)
        argv = [
            sys.executable,
            str(HERE / "fuzz_codecs.py"),
            target,
            corpus,
            f"-runs={runs}",
            f"-rss_limit_mb={RSS_LIMIT_MB}",
            f"-timeout={INPUT_TIMEOUT_S}",
            f"-max_len={MAX_LEN.get(target, 65536)}",
            f"-artifact_prefix={out}/{target}-",
            "-print_final_stats=1",
        ]
        with tempfile.TemporaryFile() as log:
            started = time.monotonic()
            proc = subprocess.Popen(argv, stdout=log, stderr=log, cwd=HERE.parent)
            _, status, usage = os.wait4(proc.pid, 0)
            seconds = time.monotonic() - started
            log.seek(0)
            text = log.read().decode("utf-8", "replace")
    done = re.search(r"Done (\d+) runs", text)
    executed = re.search(r"stat::number_of_executed_units:\s*(\d+)", text)
    return {
        "target": target,
        "runs": int(done.group(1)) if done else int(executed.group(1)) if executed else 0,
        "seconds": seconds,
        "crashes": int("Uncaught Python exception" in text or "deadly signal" in text),
        "hangs": int("ERROR: libFuzzer: timeout" in text),
        "oom": int("out-of-memory" in text),
        "peak_rss_mb": usage.ru_maxrss // 1024,
        "exit": os.waitstatus_to_exitcode(status),
        "tail": text.strip().splitlines()[-3:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=int(os.environ.get("FUZZ_RUNS", 100_000)))
    parser.add_argument("--targets", nargs="*", default=sorted(TARGETS))
    parser.add_argument("--out", type=Path, default=HERE / "artifacts")
    ns = parser.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    print(
        f"{'target':20} {'inputs':>9} {'seconds':>8} {'crashes':>7} {'hangs':>5} {'oom':>3} "
        f"{'peak RSS':>9}"
    )
    failed = 0
    for target in ns.targets:
        r = run(target, ns.runs, ns.out)
        bad = r["crashes"] or r["hangs"] or r["oom"] or r["exit"] != 0
        failed += bool(bad)
        print(
            f"{target:20} {r['runs']:>9} {r['seconds']:>8.0f} {r['crashes']:>7} {r['hangs']:>5} "
            f"{r['oom']:>3} {r['peak_rss_mb']:>6} MiB",
            flush=True,
        )
        if bad:
            for line in r["tail"]:  # type: ignore[attr-defined]
                print(f"    {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
