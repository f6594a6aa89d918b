"""Store directory → Parquet: the ``export`` command, its two engines and the Spark source.

Users who already have a Spark session read a store directly::

    from rmqinspect.export import read_store
    df = read_store(spark, "/data/rocketmq/store", table="messages")
"""

from __future__ import annotations

import os
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


def read_store(
    spark: Any, path: str | os.PathLike[str], table: str = "messages", **options: object
) -> Any:
    """The DataFrame of one table of the store at ``path`` (registers the ``rocketmq-store``
    source on ``spark``). ``options``: the source's options (see :mod:`.source`)."""
    from rmqinspect.export.source import SOURCE_NAME, StoreDataSource

    spark.dataSource.register(StoreDataSource)
    reader = spark.read.format(SOURCE_NAME).option("table", table)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(str(path))
