"""The project's own files keep their promises: packaging metadata and ``make demo``."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_license_is_an_spdx_string_the_build_backend_accepts() -> None:
    # A TOML-table license makes setuptools print a deprecation warning on every install; the
    # SPDX string needs setuptools 77 or newer.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0"
    backend = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    assert backend == ["setuptools>=77"]

