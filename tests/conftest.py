"""Shared test fixtures: the real-broker conformance corpora and the project's own fixtures."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from rmqinspect.store.model import StoreOptions

# make test is a gate: its property and fuzz tests draw the same examples on every run, so a red
# run is reproducible and a green one means something. HYPOTHESIS_PROFILE=explore draws new ones
# (and the long runs are make fuzz and make campaign).
settings.register_profile("gate", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "gate"))

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
CONFORMANCE = SHARED / "conformance"
CONFORMANCE5 = SHARED / "conformance5"
CONFORMANCE_DLEDGER = SHARED / "conformance-dledger"
CONFORMANCE_CONSUME = SHARED / "conformance-consume"
CONFORMANCE_TIMER = SHARED / "conformance-timer"
FIXTURES = ROOT / "fixtures"


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    """The RocketMQ 4.9.8 corpus; skipped where ``../shared/conformance`` is absent."""
    if not (CONFORMANCE / "expected").is_dir():
        pytest.skip(f"real-broker corpus not found at {CONFORMANCE} (dev workspace only)")
    return CONFORMANCE


@pytest.fixture(scope="session")
def conformance5_dir() -> Path:
    """The RocketMQ 5.3.3 corpus; skipped where ``../shared/conformance5`` is absent."""
    if not (CONFORMANCE5 / "expected").is_dir():
        pytest.skip(f"real-broker corpus not found at {CONFORMANCE5} (dev workspace only)")
    return CONFORMANCE5


@pytest.fixture(scope="session")
def conformance_dledger_dir() -> Path:
    """The RocketMQ 4.9.8 DLedger corpus; skipped where ``../shared/conformance-dledger`` is
    absent."""
    if not (CONFORMANCE_DLEDGER / "expected").is_dir():
        pytest.skip(f"real-broker corpus not found at {CONFORMANCE_DLEDGER} (dev workspace only)")
    return CONFORMANCE_DLEDGER


@pytest.fixture(scope="session")
def conformance_consume_dir() -> Path:
    """The RocketMQ 4.9.8 consumption corpus (retries, delays, DLQ); skipped where
    ``../shared/conformance-consume`` is absent."""
    if not (CONFORMANCE_CONSUME / "expected").is_dir():
        pytest.skip(f"real-broker corpus not found at {CONFORMANCE_CONSUME} (dev workspace only)")
    return CONFORMANCE_CONSUME


@pytest.fixture(scope="session")
def conformance_timer_dir() -> Path:
    """The RocketMQ 5.3.3 timer corpus (timerlog, timerwheel, timercheck); skipped where
    ``../shared/conformance-timer`` is absent."""
    if not (CONFORMANCE_TIMER / "expected").is_dir():
        pytest.skip(f"real-broker corpus not found at {CONFORMANCE_TIMER} (dev workspace only)")
    return CONFORMANCE_TIMER


def demo_args(name: str) -> list[str]:
    """The arguments ``make demo`` passes to ``rmqinspect NAME``, after the store."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(rf"rmqinspect {name} \$\(DEMO_STORE\)([^;\n]*)", makefile)
    assert match is not None, f"make demo lost its {name} step"
    return shlex.split(match.group(1))


@dataclass(frozen=True)
class DemoStore:
    root: Path
    synth: dict[str, Any]  # what its ``synth --json`` printed


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    """``make demo``'s store, made once by its synth step through the CLI (5000 messages with
    fates: seconds); the tests only read it."""
    from tests.cli_helpers import run

    root = tmp_path_factory.mktemp("demo") / "store"
    made = run("synth", root, *demo_args("synth"), "--json")
    assert made.exit_code == 0, made.stderr
    return DemoStore(root, json.loads(made.stdout))


@pytest.fixture
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as wide as they want (rich reads COLUMNS), so no cell wraps and a test can find
    a cell's text whole."""
    monkeypatch.setenv("COLUMNS", "400")


def restore_trimmed_store(corpus: Path, store: str, dest: Path) -> Path:
    """A copy of a trimmed corpus store (DLedger, timer) as the broker left it: each file of
    ``sizes/<store>.json`` gets its stored bytes at the offset ``sizes/<store>.offsets.json``
    names (0 unless listed: the corpus cut leading zeros too) and is extended with zeros
    (sparsely) to its true size. The shared folder is only read."""
    shutil.copytree(corpus / "stores" / store, dest)
    for path in [dest, *dest.rglob("*")]:  # the corpus is read-only; the copy is ours
        path.chmod(0o755 if path.is_dir() else 0o644)
    sizes = json.loads((corpus / "sizes" / f"{store}.json").read_text("utf-8"))
    offsets_file = corpus / "sizes" / f"{store}.offsets.json"
    offsets = json.loads(offsets_file.read_text("utf-8")) if offsets_file.exists() else {}
    for rel, size in sizes.items():
        path = dest / rel
        at = offsets.get(rel, 0)
        if at:
            stored = path.read_bytes()
            os.truncate(path, 0)
            with open(path, "r+b") as fh:
                fh.seek(at)
                fh.write(stored)
        os.truncate(path, size)
    return dest


def corpus_store_options(store: Path) -> StoreOptions:
    """What a corpus store's broker ran with that no file of the store holds (its
    ``messageDelayLevel``), from the scenario whose input it is; nothing else is given, so
    detection and inference are tested too."""
    for expected in (store.parent.parent / "expected").glob("*.json"):
        doc = json.loads(expected.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("inputStore") == f"stores/{store.name}":
            config = doc.get("brokerConfig", {}).get("messageStoreConfig", {})
            return StoreOptions(delay_levels=config.get("messageDelayLevel"))
    return StoreOptions()


@pytest.fixture(scope="session")
def dledger_clean_store(
    conformance_dledger_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The ``dledger_clean`` store, restored in a temporary copy (shared by the session: tests
    only read it)."""
    dest = tmp_path_factory.mktemp("dledger") / "dledger_clean"
    return restore_trimmed_store(conformance_dledger_dir, "dledger_clean", dest)
