"""``read_store`` on a session the user built: it names this interpreter for the source's
Python workers unless the user chose one, and registers the source once per session (Spark
warns when a registration replaces another). Fakes stand in for the session: what is checked
is what read_store hands pyspark."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from rmqinspect.export import read_store
from rmqinspect.export.source import SOURCE_NAME, StoreDataSource


class FakeContext:
    def __init__(self, conf: dict[str, str]) -> None:
        self.pythonExec = "python3"  # pyspark's default without PYSPARK_PYTHON
        self._conf = conf

    def getConf(self) -> FakeContext:  # pyspark's name
        return self

    def get(self, key: str) -> str | None:
        return self._conf.get(key)


class FakeReader:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def format(self, name: str) -> FakeReader:
        self.calls.append(("format", name))
        return self

    def option(self, key: str, value: str) -> FakeReader:
        self.calls.append(("option", key, value))
        return self

    def load(self, path: str) -> tuple[tuple[str, ...], ...]:
        return (*self.calls, ("load", path))


class FakeSession:
    def __init__(self, conf: dict[str, str] | None = None) -> None:
        self.sparkContext = FakeContext(conf or {})
        self.registered: list[tuple[type, str]] = []
        outer = self

        class Sources:
            def register(self, source: type) -> None:
                # The interpreter the source's workers get is the context's at this moment.
                outer.registered.append((source, outer.sparkContext.pythonExec))

        self.dataSource = Sources()

    @property
    def read(self) -> FakeReader:
        return FakeReader()


def test_the_workers_run_this_interpreter_and_the_source_is_registered_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    spark = FakeSession()
    first = read_store(spark, "/s", table="index", split_bytes=4096)
    assert first == (
        ("format", SOURCE_NAME),
        ("option", "table", "index"),
        ("option", "split_bytes", "4096"),
        ("load", "/s"),
    )
    read_store(spark, "/s")
    assert spark.registered == [(StoreDataSource, sys.executable)]
    other = FakeSession()
    read_store(other, "/s")
    assert other.registered == [(StoreDataSource, sys.executable)]  # each session once


def test_an_interpreter_the_user_chose_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    spark: Any = FakeSession()
    spark.sparkContext.pythonExec = "/opt/py/bin/python"
    read_store(spark, "/s")
    assert spark.registered == [(StoreDataSource, "/opt/py/bin/python")]
    monkeypatch.delenv("PYSPARK_PYTHON")
    conf = FakeSession({"spark.pyspark.python": "/venv/bin/python"})
    read_store(conf, "/s")
    assert conf.registered == [(StoreDataSource, "/venv/bin/python")]
