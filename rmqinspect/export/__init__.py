"""Store directory → Parquet: the ``export`` command, its two engines and the Spark source.

Users who already have a Spark session read a store directly::

    from rmqinspect.export import read_store
    df = read_store(spark, "/data/rocketmq/store", table="messages")
    fleet = read_store(spark, "a=/data/a/store", "b=/data/b/store")  # with a broker column
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from typing import Any

from rmqinspect.export.progress import Reporter
from rmqinspect.export.run import Engine, ExportOptions, export_store
from rmqinspect.export.schema import SCHEMAS, Table

__all__ = [
    "SCHEMAS",
    "Engine",
    "ExportOptions",
    "Reporter",
    "Table",
    "export_store",
    "read_store",
]


# The sessions read_store registered the source on: registering it again makes Spark warn that
# it replaced a data source.
_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()


def read_store(
    spark: Any, *paths: str | os.PathLike[str], table: str = "messages", **options: object
) -> Any:
    """The DataFrame of one table of the store at ``paths`` (registers the ``rocketmq-store``
    source on ``spark``, once); several paths (STORE or NAME=STORE) make one DataFrame of a
    fleet, with a ``broker`` column. ``options``: the source's options (see :mod:`.source`).

    The source's Python workers must import rmqinspect: where neither ``PYSPARK_PYTHON`` nor
    ``spark.pyspark.python`` names their interpreter, pyspark starts ``python3`` from PATH
    (outside a virtualenv not activated), so this interpreter is named instead."""
    from rmqinspect.export.source import SOURCE_NAME, STORES_OPTION, StoreDataSource

    if not paths:
        raise TypeError("read_store() needs a store path")
    if spark not in _REGISTERED:
        _name_worker_python(spark.sparkContext)
        spark.dataSource.register(StoreDataSource)
        _REGISTERED.add(spark)
    reader = spark.read.format(SOURCE_NAME).option("table", table)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    if len(paths) > 1:
        return reader.option(STORES_OPTION, json.dumps([os.fspath(p) for p in paths])).load()
    return reader.load(os.fspath(paths[0]))


def _name_worker_python(sc: Any) -> None:
    """Point the workers of ``sc`` at this interpreter unless the user chose one: a registered
    source keeps the context's ``pythonExec`` (read from ``PYSPARK_PYTHON`` when the context
    started, else ``python3``; ``spark.pyspark.python`` reaches it only through spark-submit)."""
    if "PYSPARK_PYTHON" in os.environ:
        return
    sc.pythonExec = sc.getConf().get("spark.pyspark.python") or sys.executable
