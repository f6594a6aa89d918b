"""The Spark 4 Python Data Source ``rocketmq-store``: a store directory read as a DataFrame.

``spark.read.format("rocketmq-store").option("table", "messages").load(STORE)``. The driver
plans the partitions (the same parts the arrow engine runs: commitlog ranges at record
boundaries, queue and index slices) and, for ``messages``, runs the restart emulation once;
executors reopen the store from the pickled :class:`StoreRef` and yield the table builders'
Arrow batches, cast to the Arrow types Spark expects (timestamps in microseconds).

Options: ``table`` (default ``messages``), the store settings ``profile``,
``commitlog_file_size``, ``cq_file_size``, ``index_slots``, ``index_entries``, and
``split_bytes`` (commitlog bytes per partition).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from rmqinspect.analysis.recovery.keeps import RestartKeeps, predict_keeps
from rmqinspect.analysis.verify import Finding, verify_store
from rmqinspect.export.findings import OPTIONS as FINDINGS_OPTIONS
from rmqinspect.export.plan import (
    SPLIT_BYTES,
    CommitlogChunk,
    OffsetsPart,
    Part,
    StoreRef,
)
from rmqinspect.export.schema import SCHEMAS, Table
from rmqinspect.export.tables import findings_batch, read_part
from rmqinspect.export.tasks import plan_parts, plan_ranges, range_keeps
from rmqinspect.format.profile import Profile
from rmqinspect.store.model import Store, StoreOptions

SOURCE_NAME = "rocketmq-store"  # no built-in or common JVM source uses it


def spark_schema(table: str) -> StructType:
    return from_arrow_schema(SCHEMAS[Table(table)])


class StorePartition(InputPartition):
    """One planned part, with what its task needs to reopen the store (``findings``: verify's,
    found while planning)."""

    def __init__(
        self,
        ref: StoreRef,
        table: str,
        part: Part,
        keeps: RestartKeeps | None,
        findings: list[Finding] | None = None,
    ):
        super().__init__(part.number)
        self.ref = ref
        self.table = table
        self.part = part
        self.keeps = keeps
        self.findings = findings


class StoreDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return spark_schema(self._table())

    def reader(self, schema: StructType) -> StoreReader:
        return StoreReader(dict(self.options), self._table())

    def _table(self) -> str:
        table = str(self.options.get("table", Table.MESSAGES.value))
        if table not in {t.value for t in Table}:
            names = ", ".join(t.value for t in Table)
            raise ValueError(f"unknown table {table!r}; tables: {names}")
        return table


class StoreReader(DataSourceReader):
    def __init__(self, options: dict[str, Any], table: str) -> None:
        self.options = options
        self.table = table

    def partitions(self) -> Sequence[InputPartition]:
        path = self.options.get("path")
        if not path:
            raise ValueError("give the store directory: .load(STORE)")
        with Store.open(path, store_options(self.options)) as store:
            ref = StoreRef.of(store)
            if self.table == Table.FINDINGS:
                # verify's cross-checks need the whole store: it runs here, in worker processes.
                report = verify_store(store, FINDINGS_OPTIONS, os.cpu_count() or 1)
                return [StorePartition(ref, self.table, OffsetsPart(), None, report.findings)]
            keeps = predict_keeps(store, per_range=True) if self.table == Table.MESSAGES else None
            parts = _plan(store, self.table, int(self.options.get("split_bytes", SPLIT_BYTES)))
            out = []
            for part in parts:
                own = keeps
                if keeps is not None and isinstance(part, CommitlogChunk):
                    own = range_keeps(store, part, keeps)
                out.append(StorePartition(ref, self.table, part, own))
        # Spark needs at least one partition; an empty part yields no rows.
        return out or [StorePartition(ref, self.table, OffsetsPart(), None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StorePartition)
        target = to_arrow_schema(spark_schema(partition.table), timezone="UTC")
        with partition.ref.open() as store:
            for batch in _batches(store, partition):
                yield pa.RecordBatch.from_arrays(
                    [c.cast(f.type) for c, f in zip(batch.columns, target, strict=True)],
                    schema=target,
                )


def _batches(store: Store, partition: StorePartition) -> Iterator[pa.RecordBatch]:
    if partition.findings is not None:
        yield findings_batch(partition.findings)
        return
    for _, batch in read_part(store, partition.part, [Table(partition.table)], partition.keeps):
        yield batch


def _plan(store: Store, table: str, split_bytes: int) -> list[Part]:
    """The parts the engines plan, for one table."""
    wanted = (Table(table),)
    return [*plan_parts(store, wanted, hashes=False), *plan_ranges(store, wanted, split_bytes)]


def store_options(options: dict[str, Any]) -> StoreOptions:
    """The store settings among the source's options (strings, as Spark passes them)."""

    def number(name: str) -> int | None:
        value = options.get(name)
        return None if value in (None, "") else int(value)

    profile = options.get("profile")
    return StoreOptions(
        commitlog_file_size=number("commitlog_file_size"),
        cq_file_size=number("cq_file_size"),
        index_slot_num=number("index_slots"),
        index_num=number("index_entries"),
        profile=None if profile in (None, "", "auto") else Profile(profile),
    )
