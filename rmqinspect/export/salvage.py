"""What ``salvage`` writes into its output directory, beside the export's Parquet writers: the
same record columns (:data:`~rmqinspect.format.batch.RECORD_SCHEMA`) and body columns
(:func:`~rmqinspect.format.batch.consumer_bodies`), for one directory of salvaged records. It
sits above the presenters, as the export does, because ``messages.jsonl`` is the message object
written by the one encoder of ``messages -F jsonl`` (:func:`~rmqinspect.render.output.dumps`)
and ``report.json`` is the document ``salvage --format json`` prints.

:class:`SalvageWriter` receives the salvaged records (it is the analysis'
:class:`~rmqinspect.analysis.salvage.SalvageSink`) and writes ``messages.jsonl`` (the message
object of ``messages`` plus ``intact``, ``restart_keeps`` and ``failed``) and
``messages.parquet`` (:data:`~rmqinspect.format.batch.RECORD_SCHEMA` with ``body`` as its
consumer gets it, plus ``body_stored``, ``body_error`` and the same three columns: a directory
of part files, :data:`PART_ROW_GROUPS` row groups at most each), streaming: memory stays
bounded by one run of records (and :data:`~rmqinspect.format.batch.BODY_BUDGET` of decompressed
bodies) and one part's row-group metadata. ``report.json`` is
:func:`~rmqinspect.render.salvage.salvage_json`. Files are created through
:mod:`rmqinspect.store.output`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from rmqinspect.analysis.messages import MessageBatch
from rmqinspect.analysis.salvage import Failures, SalvageReport
from rmqinspect.export.parquet import NO_STATISTICS
from rmqinspect.format.batch import RECORD_SCHEMA, consumer_bodies, decode_batch
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.commitlog import MessageRecord
from rmqinspect.format.message_json import BodyFormat, message_json
from rmqinspect.format.npbytes import I64, Mask
from rmqinspect.render.message import message_json_block
from rmqinspect.render.output import JSONL_SEPARATOR, dumps, json_text
from rmqinspect.render.salvage import salvage_json
from rmqinspect.store.output import open_new

MESSAGES_JSONL = "messages.jsonl"
MESSAGES_PARQUET = "messages.parquet"  # a directory of part files, read as one table
# The Parquet writer keeps each row group's metadata until its file closes (some 0.8 KB per
# column chunk whatever its statistics: 24 KB a row group of these 31 columns, and 10 MiB at
# 8 GiB of 1 KiB messages in one file): a part is closed after this many.
PART_ROW_GROUPS = 64
REPORT_JSON = "report.json"
SALVAGE_FILES = (MESSAGES_JSONL, MESSAGES_PARQUET, REPORT_JSON)
_LINES = 2048  # message objects written at a time
SALVAGE_SCHEMA = (
    RECORD_SCHEMA.append(pa.field("body_stored", pa.binary()))
    .append(pa.field("body_error", pa.string()))
    .append(pa.field("intact", pa.bool_()))
    .append(pa.field("restart_keeps", pa.bool_()))
    .append(pa.field("failed", pa.list_(pa.string())))
)


class SalvageWriter:
    """Writes the salvaged records into ``out`` (already prepared, empty)."""

    def __init__(self, out: Path, body: BodyFormat = BodyFormat.TEXT) -> None:
        self.out = out
        self.body = body
        self._jsonl = open_new(out / MESSAGES_JSONL)
        self._parquet = PartFiles(out / MESSAGES_PARQUET, SALVAGE_SCHEMA)
        self._text = bytearray()  # every run's message text, in the same memory
        self._tails: dict[tuple[bool, bool, Failures], bytes] = {}

    def __enter__(self) -> SalvageWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._parquet.close()
        self._jsonl.close()

    def add_columns(
        self,
        cols: RecordColumns,
        rows: I64,
        intact: Mask,
        restart_keeps: Mask,
        failed: Sequence[Failures],
    ) -> None:
        chosen = cols.select(rows)
        # The message objects by the writer of ``messages -F jsonl`` (one C pass for the run),
        # each line then closed with salvage's three keys instead of its ``}``.
        tails = [
            self._tail(i, k, f)
            for i, k, f in zip(intact.tolist(), restart_keeps.tolist(), failed, strict=True)
        ]
        for a in range(0, len(rows), _LINES):  # a few MB of text at a time, not a run's
            batch = MessageBatch(cols, rows[a : a + _LINES], _as_read)
            with message_json_block(batch, self.body, JSONL_SEPARATOR, self._text) as block:
                lines = bytes(block).split(JSONL_SEPARATOR)[:-1]  # each line's end
            mine = tails[a : a + _LINES]
            self._jsonl.write(
                b"".join(line[:-1] + tail for line, tail in zip(lines, mine, strict=True))
            )
        batch = decode_batch(chosen)
        extra = [
            pa.array(intact, pa.bool_()),
            pa.array(restart_keeps, pa.bool_()),
            pa.array([list(f) for f in failed], pa.list_(pa.string())),
        ]
        body_at = RECORD_SCHEMA.get_field_index("body")
        for b in consumer_bodies(batch.column(body_at), chosen.sys_flag):
            columns = [c.slice(b.start, b.stop - b.start) for c in batch.columns]
            columns[body_at] = b.body
            rest = [c.slice(b.start, b.stop - b.start) for c in extra]
            self._parquet.write(
                pa.RecordBatch.from_arrays(
                    [*columns, b.body_stored, b.body_error, *rest], schema=SALVAGE_SCHEMA
                )
            )

    def add_partial(self, record: MessageRecord, restart_keeps: bool, failed: Failures) -> None:
        self._line(record, False, restart_keeps, failed)

    def _line(self, record: MessageRecord, intact: bool, keeps: bool, failed: Failures) -> None:
        doc = message_json(record, self.body)
        doc.update(intact=intact, restart_keeps=keeps, failed=list(failed))
        self._jsonl.write(dumps(doc) + JSONL_SEPARATOR)

    def _tail(self, intact: bool, keeps: bool, failed: Failures) -> bytes:
        """``,"intact":..,"restart_keeps":..,"failed":[..]}`` and the separator, as
        :meth:`_line` ends a message object."""
        key = (intact, keeps, failed)
        tail = self._tails.get(key)
        if tail is None:
            doc = {"intact": intact, "restart_keeps": keeps, "failed": list(failed)}
            tail = self._tails[key] = b"," + dumps(doc)[1:] + JSONL_SEPARATOR
        return tail

    def write_report(self, report: SalvageReport) -> None:
        with open_new(self.out / REPORT_JSON) as fh:
            fh.write((json_text(salvage_json(report, self.out, SALVAGE_FILES)) + "\n").encode())


class PartFiles:
    """Batches written into ``directory`` (new) as Parquet files ``part-000000.parquet``, ...,
    one row group a batch and :data:`PART_ROW_GROUPS` at most a file, so that the writer's
    metadata stays bounded; the names sort in the rows' order, which is the order pyarrow,
    Spark and DuckDB read a directory in. The first file is written even with no rows: a
    reader still finds the columns."""

    def __init__(self, directory: Path, schema: pa.Schema) -> None:
        directory.mkdir()
        self.directory = directory
        self.schema = schema
        self.parts = 0
        self._groups = 0  # row groups in the open part
        self._file, self._writer = self._open()

    def write(self, batch: pa.RecordBatch) -> None:
        if self._groups == PART_ROW_GROUPS:
            self.close()
            self._file, self._writer = self._open()
        # One row group for the batch, whatever its length (pyarrow's default cuts at 1 Mi rows).
        self._writer.write_batch(batch, row_group_size=max(batch.num_rows, 1))
        self._groups += 1

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._file.close()

    def _open(self) -> tuple[BinaryIO, pq.ParquetWriter]:
        fh = open_new(self.directory / f"part-{self.parts:06d}.parquet")
        self.parts += 1
        self._groups = 0
        try:
            # Statistics as the export keeps them: none where min/max would prune nothing
            # (bodies, properties, ids), which are also the largest in each row group's metadata.
            stats = [c for c in self.schema.names if c not in NO_STATISTICS]
            return fh, pq.ParquetWriter(fh, self.schema, write_statistics=stats)
        except BaseException:
            fh.close()
            raise


def _as_read(record: MessageRecord) -> MessageRecord:
    return record  # salvage lists the record as its bytes are (no DLedger entry added)
