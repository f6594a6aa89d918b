"""The project's own files keep their promises: packaging metadata and ``make demo``."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from rmqinspect.cli.app import app

ROOT = Path(__file__).resolve().parent.parent


def test_license_is_an_spdx_string_the_build_backend_accepts() -> None:
    # A TOML-table license makes setuptools print a deprecation warning on every install; the
    # SPDX string needs setuptools 77 or newer.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0"
    backend = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    assert backend == ["setuptools>=77"]


def _demo_command(name: str) -> list[str]:
    """The arguments ``make demo`` passes to ``rmqinspect NAME``, after the store."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(rf"rmqinspect {name} \$\(DEMO_STORE\)([^;\n]*)", makefile)
    assert match is not None, f"make demo lost its {name} step"
    return shlex.split(match.group(1))


def test_make_demo_shows_a_restart_that_loses_named_messages(
    tmp_path: Path, wide_console: None
) -> None:
    store = tmp_path / "store"
    made = CliRunner().invoke(app, ["synth", str(store), *_demo_command("synth"), "--quiet"])
    assert made.exit_code == 0, made.stderr
    args = ["recover", str(store), *_demo_command("recover"), "--format", "table"]
    table = CliRunner().invoke(app, args)
    # The Makefile requires exit 1: the restart discards data, and the table lists it by id.
    assert table.exit_code == 1, table.stderr
    listed = re.search(r"Messages the restart destroys \((\d+) of (\d+) listed\)", table.stdout)
    assert listed is not None and int(listed.group(1)) > 0
    assert re.search(r"TopicA/\d+ +│ +\d+ +│ +\d+ +│ +[0-9A-F]{32} ", table.stdout)
    assert "nothing is lost" not in table.stdout
