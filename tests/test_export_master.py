"""An unreachable standalone master is one sentence, before OUT is touched (Spark's own client
retries it for a minute, then names a Py4J call); a Spark error's line says the Java exception,
not the Py4J call that carried it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from py4j.protocol import Py4JError

from rmqinspect.export.spark_engine import MIN_JAVA, SparkJobFailed, java_major, spark_errors
from tests.cli_helpers import build_store, orders, run


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.skipif((java_major() or 0) < MIN_JAVA, reason=f"needs Java {MIN_JAVA}+")
@pytest.mark.parametrize("extra", [(), ("--tables", "messages")])
def test_an_unreachable_master_is_one_sentence(tmp_path: Path, extra: tuple[str, ...]) -> None:
    store = build_store(tmp_path / "s", orders(3))
    master = f"spark://127.0.0.1:{closed_port()}"
    result = run("export", store, tmp_path / "out", "--engine", "spark", "--master", master, *extra)
    assert result.exit_code == 2
    assert result.stderr == (
        f"rmqinspect: error: cannot reach the Spark master {master} "
        f"({master.removeprefix('spark://')}: Connection refused): start it, or give another "
        "--master\n"
    )
    assert not (tmp_path / "out").exists()  # refused before OUT was made


def test_a_master_that_is_no_host_and_port(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(1))
    result = run("export", store, tmp_path / "out", "--engine", "arrow", "--master", "spark://x")
    assert result.exit_code == 0  # the arrow engine has no master to reach
    if (java_major() or 0) >= MIN_JAVA:
        bad = run("export", store, tmp_path / "o2", "--engine", "spark", "--master", "spark://x")
        assert bad.exit_code == 2
        assert bad.stderr == "rmqinspect: error: --master spark://x: 'x' is not host:port\n"


def test_a_spark_error_says_the_java_exception() -> None:
    text = (
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.readRDDFromFile.\n"
        ": java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.\n"
        "\tat org.apache.spark.SparkContext.assertNotStopped(SparkContext.scala:120)\n"
    )
    with pytest.raises(SparkJobFailed) as caught, spark_errors():
        raise Py4JError(text)
    assert caught.value.message == (
        "the Spark job failed: java.lang.IllegalStateException: Cannot call methods on a "
        "stopped SparkContext."
    )
