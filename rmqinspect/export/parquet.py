"""Parquet files of one table from one task, for either engine: Hive directories for the
partition column, row groups of bounded size, and a bounded amount of buffered data however many
partition values a task meets.

A file is written under a temporary name of its own and renamed into place when closed: an
attempt that fails leaves no half-written file under a final name, and two attempts of one Spark
task (a retry, speculation) never write into the same file.
"""

from __future__ import annotations

import os
import re
import uuid
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rmqinspect.export.schema import PARTITION_COLUMN, Table, file_schema
from rmqinspect.store.fileio import release_freed_heap

if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
    # The C library's allocator hands a range task's freed batches back to the kernel, where
    # pyarrow's default (mimalloc) kept them: a 128 MiB range's peak RSS 331 -> 270 MB at the
    # same CPU time. ARROW_DEFAULT_MEMORY_POOL still chooses.
    pa.set_memory_pool(pa.system_memory_pool())

COMPRESSION = "zstd"
# A file whose first row group is smaller is written uncompressed: a zstd context for each of
# its columns cost a millisecond a file, most of the export of 20,000 one-message topics (one
# file per topic), and compressing a few hundred bytes saves nothing.
COMPRESS_FROM_BYTES = 64 << 10
ROW_GROUP_BYTES = 32 << 20  # buffered rows of one partition value become a row group
# Beyond this (the buffers of every batch a buffered slice keeps alive) the values holding the
# oldest such batch are written out early.
BUFFERED_BYTES = 64 << 20
# Free bytes the C heap may keep between row groups: what a range task frees there lands among
# pages glibc keeps, so its peak grew with the chance of a bad layout (anon 143-191 MiB per
# 128 MiB range), and with it the export's peak with the number of ranges.
HEAP_SLACK = 16 << 20
OPEN_FILES = 32  # files open at once per task; a value met again later starts a new file
# Columns with few distinct values; dictionary encoding only costs time on the others.
DICTIONARY_COLUMNS = (
    "version",
    "topic",
    "transaction",
    "born_host",
    "store_host",
    "tags",
    "compression",
    "restart_keeps",
    "tags_code_kind",
    "status",
    "file",
    "check_id",
    "severity",
)
# Columns whose min/max would prune nothing: bodies, maps and lists (their statistics cost about
# a seventh of the writing time), and checksums and ids that are random within any row group.
NO_STATISTICS = (
    "body",
    "body_stored",
    "properties",
    "keys",
    "msg_id",
    "uniq_key",
    "body_crc",
    "record_crc32c",
)


TMP_SUFFIX = ".tmp"
PART_FILE = re.compile(rf"part-\d{{5,}}-\d{{3,}}\.{COMPRESSION}\.parquet")


def part_file_name(number: int, sequence: int) -> str:
    return f"part-{number:05d}-{sequence:03d}.{COMPRESSION}.parquet"


def is_part_file(name: str) -> bool:
    return PART_FILE.fullmatch(name) is not None


class TableWriter:
    """Writes the batches one task produces for ``table`` under ``root`` (the table's
    directory), naming files after the task's part ``number``."""

    def __init__(self, root: Path, table: Table, number: int) -> None:
        self.root = root
        self.number = number
        self.column = PARTITION_COLUMN[table]
        self.schema = file_schema(table)
        self.rows = 0
        # partition value -> its slices, each with the number of the batch it was cut from
        self._buffers: dict[str, list[tuple[pa.RecordBatch, int]]] = {}
        self._sizes: dict[str, int] = {}  # partition value -> its slices' bytes
        # A slice keeps its whole batch alive (bodies included): what is buffered is counted by
        # the batches still held, each as all its buffers, with the values holding slices of it.
        self._written = 0
        # batch number -> (bytes, the values holding slices of it, in the order they were cut)
        self._held: dict[int, tuple[int, dict[str, None]]] = {}
        self._held_bytes = 0
        # partition value -> (open file, its temporary name, its final name)
        self._files: OrderedDict[str, tuple[ParquetFile, Path, Path]] = OrderedDict()
        self._sequence = 0
        self.files: list[Path] = []  # closed, under their final names

    def write(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        if not batch.num_rows:
            return
        if self.column is None:
            self._hold(batch)
            self._buffer("", batch)
            self._bound()
            return
        keys = batch.column(self.column)
        rest = batch.drop_columns([self.column])
        encoded = pc.dictionary_encode(keys)
        codes = encoded.indices.to_numpy()
        counts = np.bincount(codes, minlength=len(encoded.dictionary))
        grouped = rest
        if (codes[1:] < codes[:-1]).any():  # rows not grouped yet: copy them into groups
            grouped = rest.take(pa.array(np.argsort(codes, kind="stable")))
        self._hold(grouped)
        start = 0
        for value, count in zip(encoded.dictionary.to_pylist(), counts.tolist(), strict=True):
            if count:
                self._buffer(value, grouped.slice(start, count))
            start += count
        self._bound()

    def close(self) -> int:
        """Write what is buffered, close every file; returns the rows written."""
        for value in list(self._buffers):
            self._flush(value)
        while self._files:
            self._close(*self._files.popitem(last=False)[1])
        return self.rows

    def abort(self) -> None:
        """Drop what is buffered and the files still open (an attempt that failed part way):
        under their final names they would be partial. Files already closed are complete and
        the same as another attempt writes."""
        self._buffers.clear()
        self._sizes.clear()
        self._held.clear()
        self._held_bytes = 0
        while self._files:
            f, temporary, _ = self._files.popitem(last=False)[1]
            f.close()
            temporary.unlink(missing_ok=True)

    def _hold(self, batch: pa.RecordBatch) -> None:
        """``batch`` is the next one slices are buffered from."""
        self._written += 1
        size = batch.get_total_buffer_size()
        self._held[self._written] = (size, {})
        self._held_bytes += size

    def _buffer(self, value: str, piece: pa.RecordBatch) -> None:
        self._buffers.setdefault(value, []).append((piece, self._written))
        self._held[self._written][1][value] = None
        self._sizes[value] = self._sizes.get(value, 0) + piece.nbytes

    def _bound(self) -> None:
        """Once a batch is cut: write out each value with a row group's worth, then the values
        that hold the oldest batches until what is held fits ``BUFFERED_BYTES`` (writing only
        the largest value would free no batch whose other slices stay buffered: the batch of
        one commitlog run holds every topic's rows)."""
        for value in [v for v, n in self._sizes.items() if n >= ROW_GROUP_BYTES]:
            self._flush(value)
        while self._held_bytes > BUFFERED_BYTES:
            _, values = next(iter(self._held.values()))
            for value in list(values):
                self._flush(value)

    def _flush(self, value: str) -> None:
        pieces = self._buffers.pop(value, [])
        self._sizes.pop(value, None)
        for _, number in pieces:
            held = self._held.get(number)
            if held is not None:
                held[1].pop(value, None)
                if not held[1]:
                    del self._held[number]
                    self._held_bytes -= held[0]
        batches = [piece for piece, _ in pieces]
        if batches:
            table = pa.Table.from_batches(batches, self.schema)
            self._file(value, compress=table.nbytes >= COMPRESS_FROM_BYTES).write_table(table)
            del table, batches, pieces
            release_freed_heap(HEAP_SLACK)

    def _file(self, value: str, *, compress: bool) -> ParquetFile:
        """The open file of ``value``, or a new one (compressed or not: ``compress``)."""
        if value in self._files:
            self._files.move_to_end(value)
            return self._files[value][0]
        while len(self._files) >= OPEN_FILES:
            self._close(*self._files.popitem(last=False)[1])
        directory = self.root if self.column is None else self.root / f"{self.column}={value}"
        directory.mkdir(parents=True, exist_ok=True)
        self._sequence += 1
        path = directory / part_file_name(self.number, self._sequence)
        temporary = temporary_name(path)
        f = ParquetFile(temporary, self.schema, COMPRESSION if compress else "none")
        self._files[value] = (f, temporary, path)
        return f

    def _close(self, f: ParquetFile, temporary: Path, path: Path) -> None:
        f.close()
        os.replace(temporary, path)
        self.files.append(path)


def temporary_name(path: Path) -> Path:
    """Where ``path`` is written before its rename, a name no other attempt uses."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}{TMP_SUFFIX}")


class ParquetFile:
    """A Parquet file being written, opened by the bytes of its name: pyarrow takes a path only
    as UTF-8 text, and OUT may be named by any bytes. Closing it closes the file too (a writer
    leaves a file it was given open)."""

    def __init__(self, path: Path, schema: pa.Schema, compression: str = COMPRESSION) -> None:
        names = set(schema.names)
        self._file = pa.OSFile(os.fsencode(path), "w")
        try:
            self._writer = pq.ParquetWriter(
                self._file,
                schema,
                compression=compression,
                use_dictionary=[c for c in DICTIONARY_COLUMNS if c in names],
                write_statistics=[c for c in schema.names if c not in NO_STATISTICS],
            )
        except BaseException:
            self._file.close()
            raise

    def write_table(self, table: pa.Table) -> None:
        self._writer.write_table(table)

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._file.close()


def write_empty(root: Path, table: Table) -> None:
    """One file with the schema and no rows, so readers of an empty table still find its
    columns (Spark writes the same for an empty unpartitioned table)."""
    root.mkdir(parents=True, exist_ok=True)
    ParquetFile(root / part_file_name(0, 0), file_schema(table)).close()
