"""The project's own files keep their promises: packaging metadata and ``make demo``."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from rmqinspect.cli.app import app
from tests.conftest import DemoStore, demo_args

ROOT = Path(__file__).resolve().parent.parent


def test_license_is_an_spdx_string_the_build_backend_accepts() -> None:
    # A TOML-table license makes setuptools print a deprecation warning on every install; the
    # SPDX string needs setuptools 77 or newer.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0"
    backend = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    assert backend == ["setuptools>=77"]


def test_make_demo_shows_a_restart_that_loses_named_messages(
    demo_store: DemoStore, wide_console: None
) -> None:
    args = ["recover", str(demo_store.root), *demo_args("recover"), "--format", "table"]
    table = CliRunner().invoke(app, args)
    # The Makefile requires exit 1: the restart discards data, and the table lists it by id.
    assert table.exit_code == 1, table.stderr
    listed = re.search(r"Messages the restart destroys \((\d+) of (\d+) listed\)", table.stdout)
    assert listed is not None and int(listed.group(1)) > 0
    assert re.search(r"TopicA/\d+ +│ +\d+ +│ +\d+ +│ +[0-9A-F]{32} ", table.stdout)
    assert "nothing is lost" not in table.stdout


def test_make_demo_writes_the_report_the_readme_shows(
    tmp_path: Path, demo_store: DemoStore
) -> None:
    """make demo's report step exits 1 (the restart loses data) with the verdict the README
    quotes, and the README's screenshot of that page is in the repository."""
    args = demo_args("report")
    assert args[:2] == ["--out", ".demo/report.html"]
    out = tmp_path / "report.html"
    result = CliRunner().invoke(
        app, ["report", str(demo_store.root), "--out", str(out), *args[2:], "-F", "json"]
    )
    assert result.exit_code == 1, result.stderr
    verdict = json.loads(result.stdout)["verdict"]
    assert out.read_text(encoding="utf-8").count(verdict) == 1
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### `rmqinspect report STORE") :]
    quoted = re.search(r"verdict in one sentence \(`([^`]*)`", section)
    assert quoted is not None and " ".join(quoted.group(1).split()) == verdict
    assert "![The report of the demo store](docs/report-demo.png)" in section
    assert (ROOT / "docs" / "report-demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
