"""``make demo`` on a machine without Java (#24): every step of the Makefile's demo recipe, run
as make runs it (one shell per line, its own exit checks) on a PATH that has everything but
``java`` and without JAVA_HOME; the export's ``--engine auto`` falls back to the arrow engine
and says so in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JAVA_TOOLS = frozenset({"java", "javac", "jshell", "jar", "jlink", "keytool"})
FALLBACK = (
    "rmqinspect: warning: no Java was found (JAVA_HOME, PATH): the arrow engine writes the "
    "tables (the same rows); --engine spark needs Java 17 or newer"
)


def demo_recipe() -> list[str]:
    """The shell lines of the Makefile's ``demo`` target, comments left out."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("demo:"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        if not line.strip().startswith("#"):
            recipe.append(line.strip())
    return recipe


def _without_java(bin_dir: Path) -> str:
    """A PATH of one directory linking every program on this PATH except Java's."""
    bin_dir.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or not Path(d).is_dir():
            continue
        for program in Path(d).iterdir():
            link = bin_dir / program.name
            if program.name not in JAVA_TOOLS and not link.exists() and not link.is_symlink():
                link.symlink_to(program)
    return str(bin_dir)


def _shell_line(line: str) -> str:
    """A recipe line as make hands it to the shell, with this checkout's rmqinspect."""
    here = f"{sys.executable} -m rmqinspect"
    line = line.replace("$(VENV)/bin/rmqinspect", here).replace("$(DEMO_STORE)", ".demo/store")
    assert "$(" not in line, f"a make variable the test does not know: {line}"
    return line.replace("$$", "$")


@pytest.mark.skipif(sys.platform == "win32", reason="make demo is a POSIX shell recipe")
def test_make_demo_passes_without_java(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = _without_java(tmp_path / "bin")
    env["PYTHONPATH"] = str(ROOT)
    assert subprocess.run(["sh", "-c", "command -v java"], env=env).returncode != 0
    work = tmp_path / "clone"
    work.mkdir()
    recipe = demo_recipe()
    exports = [line for line in recipe if re.search(r"rmqinspect export\b", line)]
    assert len(exports) == 1, "make demo lost its export step"
    for line in recipe:
        done = subprocess.run(
            ["sh", "-c", _shell_line(line)], cwd=work, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, (line, done.stderr[-2000:])
        if line in exports:
            # One line says why the arrow engine runs; the export is complete.
            assert done.stderr.splitlines() == [FALLBACK], done.stderr
            manifest = json.loads((work / ".demo" / "export" / "_manifest.json").read_text())
            assert manifest["engine"] == "arrow"
            assert (work / ".demo" / "export" / "messages").is_dir()
    assert (work / ".demo" / "report.html").is_file()
