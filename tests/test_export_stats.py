"""The export's manifest carries ``stats``'s numbers for the store it exported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import SMALL_OPTS, run, run_json
from tests.conftest import FIXTURES

STORES = FIXTURES / "stores"


@pytest.mark.parametrize("name", ["clean49", "torn_tail49"])
def test_the_manifest_holds_the_stats_of_the_store(name: str, tmp_path: Path) -> None:
    store = STORES / name
    out = tmp_path / "out"
    args = ("--engine", "arrow", "-j", "1", "--tables", "messages")
    result = run("export", store, out, *args, *SMALL_OPTS, "-F", "json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "_manifest.json").read_text())
    stats = run_json("stats", store, *SMALL_OPTS, expect=0)
    assert manifest["stats"] == stats
    # The same records the messages table holds; a torn tail is a skipped range in both.
    assert stats["records"] == manifest["tables"]["messages"]["rows"] > 0
    assert (stats["skipped_ranges"] > 0) == (name == "torn_tail49")
