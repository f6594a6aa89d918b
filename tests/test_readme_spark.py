"""The README's spark-submit recipe runs as written, with the virtualenv not activated (no
``spark-submit`` or venv ``python3`` on PATH), on a local master, and its console is quiet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmqinspect.export.spark_engine import MIN_JAVA, java_major
from tests.cli_helpers import build_store, orders
from tests.test_readme import _ci_script

pytestmark = pytest.mark.skipif(
    (java_major() or 0) < MIN_JAVA, reason=f"spark-submit needs Java {MIN_JAVA}+"
)


def test_the_spark_submit_recipe_runs_without_the_venv_on_path(tmp_path: Path) -> None:
    venv = Path(sys.executable).parent.parent
    if not (venv / "bin" / "spark-submit").exists():
        pytest.skip("this interpreter is not a virtualenv with pyspark's spark-submit")
    store = build_store(tmp_path / "store", orders(20))
    out = tmp_path / "export"
    script = _ci_script("#### Submit the export to a cluster")
    for old, new in (
        ("/opt/rmqinspect/.venv", str(venv)),
        ("spark://head:7077", "local[1]"),
        ("/shared/rocketmq/store", str(store)),
        ("/shared/export", str(out)),
    ):
        assert old in script, old
        script = script.replace(old, new)
    path = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if Path(p).resolve() != venv / "bin"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_"))}
    proc = subprocess.run(
        ["bash", "-c", script],
        env={**env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["tables"]["messages"]["rows"] == 20
    # Quiet: no Spark INFO/WARN lines on the console.
    noisy = [line for line in proc.stderr.splitlines() if " INFO " in line or " WARN " in line]
    assert noisy == []
