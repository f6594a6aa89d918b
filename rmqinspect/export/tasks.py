"""One planned part exported: the task both engines run, in a worker process of the arrow
engine's pool or in a Spark task. It reads the part's batches with the table builders and writes
them with :class:`TableWriter`, so both engines write the same files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rmqinspect.analysis.recovery.keeps import RestartKeeps, predict_keeps
from rmqinspect.export.parquet import TableWriter
from rmqinspect.export.plan import FileGroup, Part, StoreRef
from rmqinspect.export.schema import Table
from rmqinspect.export.tables import file_crc32c, read_part
from rmqinspect.store.model import Store


@dataclass
class PartResult:
    rows: dict[Table, int] = field(default_factory=dict)
    hashes: list[tuple[str, int, int, int]] = field(default_factory=list)  # FileGroup parts


_OPEN: dict[StoreRef, Store] = {}  # per worker process: the tasks of one export share the store


def _store(ref: StoreRef) -> Store:
    if ref not in _OPEN:
        _OPEN[ref] = ref.open()
    return _OPEN[ref]


def predict_restart(ref: StoreRef) -> RestartKeeps:
    """The restart emulation, on a store of its own that is closed afterwards: the emulation
    maps the files it scans, and their pages should not stay resident in a worker that goes on
    to other parts."""
    with ref.open() as store:
        return predict_keeps(store, per_range=True)


def run_part(
    ref: StoreRef, out: str, part: Part, tables: tuple[Table, ...], keeps: RestartKeeps | None
) -> PartResult:
    """Export ``part`` of the store ``ref`` names under ``out``; ``keeps`` is the part's cut of
    the restart prediction (needed for ``messages`` rows of a commitlog range)."""
    store = _store(ref)
    if isinstance(part, FileGroup):
        return PartResult(hashes=list(file_crc32c(store, part)))
    writers: dict[Table, TableWriter] = {}
    try:
        for table, batch in read_part(store, part, tables, keeps):
            if table not in writers:
                writers[table] = TableWriter(Path(out) / table.value, table, part.number)
            writers[table].write(batch)
    finally:
        rows = {table: w.close() for table, w in writers.items()}
    return PartResult(rows=rows)
