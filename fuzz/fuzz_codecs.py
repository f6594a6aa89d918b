"""atheris harness for the codecs in ``rmqinspect/format``: one fuzz target per decoder.

    python fuzz/fuzz_codecs.py TARGET [CORPUS_DIR ...] [libFuzzer flags, e.g. -runs=100000]

TARGET is a name from ``tests/fuzz_targets.py`` (the same targets and invariants the bounded
hypothesis run in ``make test`` uses). A target raising anything is a crash: libFuzzer stops and
writes the input to ``crash-*``. ``fuzz/run_all.py`` (``make fuzz``) runs every target.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with atheris.instrument_imports(include=["rmqinspect"]):
    from tests.fuzz_targets import TARGETS


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} TARGET [libFuzzer args]; targets: {', '.join(TARGETS)}")
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
