"""The README's examples are real: its "verify recovery in CI" script runs and passes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def _ci_script(heading: str = "#### Verify recovery in CI") -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match is not None, f"README lost its example under {heading!r}"
    return match.group(1)


@pytest.mark.parametrize(
    "heading",
    [
        "#### Verify recovery in CI",
        "#### Predict a DLedger restart",
        "#### Investigate duplicate consumption after a crash",
        "#### Find timer messages a lost commitlog tail stranded",
    ],
)
def test_verify_recovery_in_ci_example(tmp_path: Path, heading: str) -> None:
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed; the README example uses it")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        ["bash", "-c", _ci_script(heading)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_quick_start_names_exactly_the_two_make_targets() -> None:
    text = README.read_text(encoding="utf-8")
    quick = text[text.index("## Quick start") : text.index("## Commands")]
    assert re.findall(r"^make (\w+)", quick, re.M) == ["demo", "test"]
