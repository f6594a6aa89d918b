"""Shared test fixtures: the real-broker conformance corpora and the project's own fixtures."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings

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


@pytest.fixture
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as wide as they want (rich reads COLUMNS), so no cell wraps and a test can find
    a cell's text whole."""
    monkeypatch.setenv("COLUMNS", "400")


def restore_dledger_store(corpus: Path, scenario: str, dest: Path) -> Path:
    """A copy of a DLedger corpus store with its trimmed index files extended (sparsely, with
    zeros) to their true size, as ``sizes/<scenario>.json`` says; the shared folder is only
    read."""
    meta = json.loads((corpus / "expected" / f"{scenario}.json").read_text("utf-8"))
    shutil.copytree(corpus / meta["inputStore"], dest)
    for path in [dest, *dest.rglob("*")]:  # the corpus is read-only; the copy is ours
        path.chmod(0o755 if path.is_dir() else 0o644)
    for rel, size in json.loads((corpus / meta["inputStoreSizes"]).read_text("utf-8")).items():
        os.truncate(dest / rel, size)
    return dest


@pytest.fixture(scope="session")
def dledger_clean_store(
    conformance_dledger_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The ``dledger_clean`` store, restored in a temporary copy (shared by the session: tests
    only read it)."""
    dest = tmp_path_factory.mktemp("dledger") / "dledger_clean"
    return restore_dledger_store(conformance_dledger_dir, "dledger_clean", dest)
