"""Shared test fixtures: the real-broker conformance corpora and the project's own fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

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
