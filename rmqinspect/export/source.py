"""The Spark 4 Python Data Source ``rocketmq-store``: a store directory read as a DataFrame.

``spark.read.format("rocketmq-store").option("table", "messages").load(STORE)``; a fleet:
``.option("stores", '["a=/data/a/store", "/data/b/store"]').load()`` (a JSON list of STORE or
NAME=STORE), one DataFrame of every store's rows with a ``broker`` column (NAME, else the store
host address in the records, as the export names them). The driver plans the partitions (the
parts the arrow engine runs: commitlog chunks planned from file lengths, each task finding its
range's record boundaries by walking its file's headers up to it; queue and index slices) and,
for ``messages``, runs each store's restart emulation; executors reopen the store from the
pickled :class:`StoreRef` and yield the table builders' Arrow batches, cast to the Arrow
types Spark expects (timestamps in microseconds).

Options: ``table`` (default ``messages``), the store settings ``profile``,
``commitlog_file_size``, ``cq_file_size``, ``index_slots``, ``index_entries``, and
``split_bytes`` (commitlog bytes per partition).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from rmqinspect.analysis.recovery.keeps import RestartKeeps, predict_keeps
from rmqinspect.analysis.verify import Finding, verify_store
from rmqinspect.export.findings import OPTIONS as FINDINGS_OPTIONS
from rmqinspect.export.fleet import fleet_members, split_pair
from rmqinspect.export.plan import (
    SPLIT_BYTES,
    CommitlogChunk,
    OffsetsPart,
    Part,
    StoreRef,
)
from rmqinspect.export.schema import BROKER_PARTITION, SCHEMAS, Table
from rmqinspect.export.tables import findings_batch, read_part
from rmqinspect.export.tasks import Member, plan_parts, plan_ranges, range_keeps
from rmqinspect.format.profile import Profile
from rmqinspect.store.model import Store, StoreOptions

SOURCE_NAME = "rocketmq-store"  # no built-in or common JVM source uses it
STORES_OPTION = "stores"  # a fleet: a JSON list of STORE or NAME=STORE


def spark_schema(table: str, fleet: bool = False) -> StructType:
    """The table's columns; in a fleet, then ``broker``."""
    schema = SCHEMAS[Table(table)]
    if fleet:
        schema = schema.append(pa.field(BROKER_PARTITION, pa.string(), nullable=False))
    return from_arrow_schema(schema)


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
        broker: str | None = None,
    ):
        super().__init__(part.number)
        self.broker = broker  # in a fleet, the store's name (its rows' ``broker``)
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
        return spark_schema(self._table(), STORES_OPTION in self.options)

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
        if STORES_OPTION in self.options:
            paths = [str(p) for p in json.loads(self.options[STORES_OPTION])]
        elif self.options.get("path"):
            paths = [str(self.options["path"])]
        else:
            raise ValueError("give the store directory: .load(STORE)")
        fleet = STORES_OPTION in self.options
        out: list[InputPartition] = []
        with ExitStack() as stack:
            opened = []
            for text in paths:
                name, path = split_pair(text) if fleet else (None, Path(text))
                st = stack.enter_context(Store.open(path, store_options(self.options)))
                st.read_rocksdb_queues()
                opened.append((name, st))
            members = fleet_members(opened) if fleet else [Member(opened[0][1])]
            for m in members:
                out += self._store_partitions(m)
        # Spark needs at least one partition; an empty part yields no rows.
        return out or [
            StorePartition(StoreRef.of(members[0].store), self.table, OffsetsPart(), None)
        ]

    def _store_partitions(self, member: Member) -> list[InputPartition]:
        store, broker = member.store, member.broker
        ref = StoreRef.of(store)
        if self.table == Table.FINDINGS:
            # verify's cross-checks need the whole store: it runs here, in worker processes.
            report = verify_store(store, FINDINGS_OPTIONS, os.cpu_count() or 1)
            return [StorePartition(ref, self.table, OffsetsPart(), None, report.findings, broker)]
        keeps = predict_keeps(store, per_range=True) if self.table == Table.MESSAGES else None
        parts = _plan(store, self.table, int(self.options.get("split_bytes", SPLIT_BYTES)))
        out: list[InputPartition] = []
        for part in parts:
            own = keeps
            if keeps is not None and isinstance(part, CommitlogChunk):
                own = range_keeps(store, part, keeps)
            out.append(StorePartition(ref, self.table, part, own, None, broker))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StorePartition)
        fleet = partition.broker is not None
        target = to_arrow_schema(spark_schema(partition.table, fleet), timezone="UTC")
        with partition.ref.open() as store:
            for batch in _batches(store, partition):
                columns = batch.columns
                if fleet:
                    columns = [*columns, pa.array([partition.broker] * batch.num_rows, pa.string())]
                yield pa.RecordBatch.from_arrays(
                    [c.cast(f.type) for c, f in zip(columns, target, strict=True)],
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
