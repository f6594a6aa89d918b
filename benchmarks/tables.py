"""Tables against JSON for the same rows: ``messages``, ``verify``, ``recover``, ``groups`` and
``offsets`` as a table and as JSON, in the same run, and the ratio (target: a table at least a
third as fast).

Usage: python benchmarks/tables.py [STORE] [--messages N] [--columns C] [--commands a,b]

Without STORE, a crashed store of N messages (default 5000) with consumer fates and a zeroed
region is generated in a temporary directory (what ``make demo`` writes). Each command runs as a
child writing to /dev/null with ``COLUMNS`` set (table output, as on a terminal that wide); the
best of three wall times is taken.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

import harness

# Each command and the exit codes that are a result, not a failure.
COMMANDS = {
    "messages": (0,),
    "verify": (0, 1),
    "recover": (0, 1),
    "groups": (0, 1),
    "offsets": (0, 1),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("store", nargs="?", type=Path)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--columns", type=int, default=200)
    parser.add_argument(
        "--commands", default=",".join(COMMANDS), help="comma-separated, of: " + ", ".join(COMMANDS)
    )
    args = parser.parse_args()
    os.environ["COLUMNS"] = str(args.columns)
    with tempfile.TemporaryDirectory(prefix="rmqbench-") as tmp:
        root: Path = args.store or Path(tmp) / "store"
        if args.store is None:
            synth = ["synth", str(root), "--messages", str(args.messages), "--seed", "7"]
            damage = ["--crash", "--fate", "--damage", "zero-region"]
            subprocess.run([*harness.RMQ, *synth, *damage], check=True, capture_output=True)
        print(f"store: {root}, COLUMNS={args.columns}")
        print(f"{'command':<10}{'json s':>8}{'table s':>9}{'table/json speed':>18}")
        for command in args.commands.split(","):
            ok = COMMANDS[command]
            base = [*harness.RMQ, command, str(root)]
            as_json = harness.best_of(3, [*base, "-F", "json"], ok=ok).wall
            as_table = harness.best_of(3, [*base, "-F", "table"], ok=ok).wall
            print(f"{command:<10}{as_json:>8.2f}{as_table:>9.2f}{as_json / as_table:>18.2f}")
        print("target: table/json speed >= 0.33")


if __name__ == "__main__":
    main()
