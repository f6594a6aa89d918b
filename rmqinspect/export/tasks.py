"""One planned part exported: the task both engines run, in a worker process of the arrow
engine's pool or in a Spark task. It reads the part's batches with the table builders and writes
them with :class:`TableWriter`, so both engines write the same files. Also the planning both
engines share and, for engines whose tasks may run more than once, the sweep of what no
successful task wrote.
"""

from __future__ import annotations

import os
import pickle
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa

from rmqinspect.analysis.ranges import SPLIT_BYTES as RANGE_BYTES
from rmqinspect.analysis.ranges import Range
from rmqinspect.analysis.ranges import plan_ranges as plan_check_ranges
from rmqinspect.analysis.recovery import RecoverOptions
from rmqinspect.analysis.recovery.emulator import scan_plan
from rmqinspect.analysis.recovery.fields import Wanted
from rmqinspect.analysis.recovery.keeps import RestartKeeps, predict_keeps
from rmqinspect.analysis.recovery.ranges import RangeCheck, RangeChecker, check_range
from rmqinspect.analysis.recovery.state import RecordChecks
from rmqinspect.export.parquet import TMP_SUFFIX, TableWriter, is_part_file, write_empty
from rmqinspect.export.plan import (
    SPLIT_BYTES,
    CommitlogChunk,
    CommitlogRange,
    FileGroup,
    OffsetsPart,
    Part,
    StoreRef,
    commitlog_file,
    file_ranges,
    plan_chunks,
    plan_hashes,
    plan_index,
    plan_queues,
)
from rmqinspect.export.schema import BROKER_PARTITION, PARTITION_COLUMN, Table
from rmqinspect.export.tables import file_crc32c, read_part
from rmqinspect.export.timers import plan_timers
from rmqinspect.format.commitlog import CheckOptions
from rmqinspect.store import mapguard
from rmqinspect.store.model import Store
from rmqinspect.store.run_cache import RunCache


@dataclass
class PartResult:
    rows: dict[Table, int] = field(default_factory=dict)
    hashes: list[tuple[str, int, int, int]] = field(default_factory=list)  # FileGroup parts
    files: list[str] = field(default_factory=list)  # written, relative to OUT


@dataclass
class EngineResult:
    rows: dict[Table, int]
    hashes: list[tuple[str, int, int, int]]  # (path, size, mtime ns, crc32c) per source file

    @classmethod
    def of(cls, tables: Iterable[Table], results: Iterable[PartResult]) -> EngineResult:
        rows = {t: 0 for t in tables}
        hashes: list[tuple[str, int, int, int]] = []
        for result in results:
            for table, n in result.rows.items():
                rows[table] += n
            hashes += result.hashes
        return cls(rows, sorted(hashes))


@dataclass(frozen=True)
class Member:
    """One store of an export. In a fleet export (several stores) each store's rows go under
    ``broker=NAME`` in every table's directory (a Hive partition: readers see a ``broker``
    column); an export of one store keeps the tables' own layout (``broker`` None)."""

    store: Store
    broker: str | None = None

    @property
    def prefix(self) -> str:
        return "" if self.broker is None else f"{BROKER_PARTITION}={quote(self.broker, safe='')}"


# The emulation predict_keeps runs, as far as its record checks go.
PREDICTION = RecoverOptions(lost_limit=None)

# Per worker process: the stores one export's tasks share.
_OPEN: RunCache[StoreRef, Store] = RunCache(Store.close)


def plan_parts(store: Store, tables: Sequence[Table], hashes: bool = True) -> list[Part]:
    """The parts that need no restart prediction: consume-queue and index slices, the offsets
    part for the tables wanted, and (``hashes``) the groups of source files to fingerprint."""
    parts: list[Part] = []
    if Table.CONSUME_QUEUE in tables:
        parts += plan_queues(store)
    if Table.INDEX_ENTRIES in tables:
        parts += plan_index(store)
    if Table.CONSUMER_OFFSETS in tables or Table.GROUP_OFFSETS in tables:
        parts.append(OffsetsPart())  # one small task reads the config files for both
    if Table.TIMERS in tables:
        parts += plan_timers(store)
    if hashes:
        parts += plan_hashes(store.root)
    return parts


def plan_ranges(
    store: Store, tables: Sequence[Table], split_bytes: int = SPLIT_BYTES
) -> list[CommitlogChunk]:
    """The commitlog's parts, when ``messages`` or ``message_copies`` is wanted (``findings``
    come from verify): planned from the files' lengths, each task finds its own range."""
    if Table.MESSAGES in tables or Table.MESSAGE_COPIES in tables:
        return plan_chunks(store, split_bytes)
    return []


def first_chunks(chunks: Iterable[CommitlogChunk]) -> list[CommitlogChunk]:
    """Each file's first chunk: what :func:`plan_file` takes."""
    return [c for c in chunks if c.index == 0]


@mapguard.checked
def plan_file(ref: StoreRef, first: CommitlogChunk) -> list[CommitlogRange]:
    """The ranges of the file whose first chunk is ``first`` (:func:`file_ranges`), numbered
    as its chunks (a file has no more ranges than chunks): one walk of the file's headers, in
    a worker, so no walk of the store precedes the range tasks and the files are planned in
    parallel."""
    with ref.open() as store:
        f = commitlog_file(store, first.file)
        ranges = file_ranges(store, f, first.split_bytes, first.directory)
        return [replace(r, number=first.number + r.number) for r in ranges]


def range_keeps(
    store: Store, part: CommitlogRange | CommitlogChunk, prediction: RestartKeeps
) -> RestartKeeps:
    """The restart prediction cut to the physical offsets of ``part`` (of a chunk: its
    file's, as its own bounds are found by its task)."""
    start = commitlog_file(store, part.file).start
    if isinstance(part, CommitlogChunk):
        return prediction.within(start, start + part.length)
    return prediction.within(start + part.begin, start + part.end)


@mapguard.checked
def predict_restart(ref: StoreRef, checked: Prechecked | None = None) -> RestartKeeps:
    """The restart emulation, on a store of its own that is closed afterwards: the emulation
    maps the files it scans, and their pages should not stay resident in a worker that goes on
    to other parts. ``checked``: its record checks, done by other tasks (it then only stitches,
    dispatches and judges)."""
    with ref.open() as store, RangeChecker(store, 1, mapper=checked) as checker:
        return predict_keeps(store, per_range=True, checker=checker if checked else None)


def plan_restart_checks(store: Store) -> tuple[CheckOptions, list[Range], Wanted | None]:
    """The record checks of the restart emulation (``recover --jobs``'s), planned in the
    driver: its checks, the ranges from the file its scan starts at (none where no scan runs)
    and what its dispatch wants of their records (the workers of ``recover --jobs`` are told
    the same)."""
    plan = scan_plan(store, PREDICTION)
    opts = RecordChecks.of(store, PREDICTION).recover
    if plan is None:
        return opts, [], None
    return opts, plan_check_ranges(store, RANGE_BYTES, plan.start.index), plan.wanted


@dataclass(frozen=True)
class CheckFile:
    """A range's record checks, written to a file under OUT by the task that made them: as
    answers they went through the engine's driver (and a Spark driver's JVM, twice: collected,
    then sent with the emulation's task), 8 bytes a record of the scan."""

    path: str

    def load(self) -> RangeCheck:
        with open(self.path, "rb") as fh:
            check: RangeCheck = pickle.load(fh)
        return check


@mapguard.checked
def check_restart_range(
    ref: StoreRef, opts: CheckOptions, r: Range, wanted: Wanted | None, into: str | None = None
) -> RangeCheck | CheckFile:
    """One range of the restart emulation's record checks, a task of the export's pool: lean
    (positions, and index keys where ``wanted``), as every range's answer is held until the
    emulation runs. ``into``: a directory under OUT to write it to (a :class:`CheckFile`)."""
    store = _OPEN.get("", ref, ref.open)
    check = check_range(store, r, opts, wanted is not None, lean=True, wanted=wanted)
    if into is None:
        return check
    # A name of its own: a fleet's stores share the directory, and a retried task writes anew.
    path = Path(into, f"{r.file}-{r.begin}-{uuid.uuid4().hex}.check")
    with open(path, "xb") as fh:
        pickle.dump(check, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return CheckFile(str(path))


@contextmanager
def check_files(out: Path) -> Iterator[str]:
    """A directory under ``out`` for the restart's record checks (:class:`CheckFile`), removed
    with what is in it on exit."""
    into = out / f".restart-checks.{uuid.uuid4().hex}{TMP_SUFFIX}"
    into.mkdir(parents=True)
    try:
        yield str(into)
    finally:
        shutil.rmtree(into, ignore_errors=True)


@dataclass(frozen=True)
class Prechecked:
    """The record checks of :func:`plan_restart_checks`' ranges, for the emulation's scan."""

    opts: CheckOptions
    ranges: list[Range]
    checks: list[RangeCheck | CheckFile]
    wanted: Wanted | None

    def __call__(
        self, ranges: list[Range], opts: CheckOptions, wanted: Wanted | None
    ) -> list[RangeCheck] | None:
        """The checks of ``ranges``; None when the emulation wants others (the store changed
        since the driver planned them: it checks them itself)."""
        planned = (self.ranges, self.opts, self.wanted)
        if (ranges, opts, wanted) != planned:
            return None
        return [c.load() if isinstance(c, CheckFile) else c for c in self.checks]


@mapguard.checked
def run_part(
    ref: StoreRef,
    out: str,
    part: Part,
    tables: tuple[Table, ...],
    keeps: RestartKeeps | None,
    export: str = "",
    prefix: str = "",
) -> PartResult:
    """Export ``part`` of the store ``ref`` names under ``out``; ``keeps`` is the part's cut of
    the restart prediction (needed for ``messages`` rows of a commitlog range); ``export``
    tells one export's tasks from another's in a worker that outlives an export; ``prefix``:
    the store's directory in each table's (:attr:`Member.prefix`). The files' names depend
    only on the part, so a second attempt rewrites the same files."""
    store = _OPEN.get(export, ref, ref.open)
    if isinstance(part, FileGroup):
        return PartResult(hashes=list(file_crc32c(store, part)))
    writers: dict[Table, TableWriter] = {}
    since = mapguard.mark()
    try:
        for table, batch in read_part(store, part, tables, keeps):
            if table not in writers:
                root = Path(out) / table.value / prefix
                writers[table] = TableWriter(root, table, part.number)
            writers[table].write(batch)
        mapguard.check(since)  # a part read from a file that shrank is not written
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    rows = {table: w.close() for table, w in writers.items()}
    # What the part's batches freed goes back to the kernel before the worker's next part.
    pa.default_memory_pool().release_unused()
    files = [p.relative_to(out).as_posix() for w in writers.values() for p in w.files]
    return PartResult(rows=rows, files=files)


def finish_tables(out: Path, tables: Iterable[Table], prefix: str = "") -> None:
    """An empty unpartitioned table still gets a file with its schema (in a fleet export, each
    store's directory of it: ``prefix``)."""
    for table in tables:
        root = out / table.value / prefix
        if PARTITION_COLUMN[table] is None and not any(root.glob("*.parquet")):
            write_empty(root, table)


def sweep(out: Path, tables: Iterable[Table], reported: Iterable[str]) -> list[str]:
    """Remove from the tables' directories every part file no successful task reported (left
    by a failed attempt) and every temporary file, then the directories left empty. Returns
    the paths removed, relative to ``out``."""
    keep = set(reported)
    removed: list[str] = []
    for table in tables:
        root = out / table.value
        for directory, _, names in os.walk(root, topdown=False):  # children first
            for name in names:
                path = Path(directory, name)
                relative = path.relative_to(out).as_posix()
                stray = is_part_file(name) and relative not in keep
                if stray or name.endswith(TMP_SUFFIX):
                    path.unlink()
                    removed.append(relative)
            if Path(directory) != root and not any(Path(directory).iterdir()):
                Path(directory).rmdir()
    return sorted(removed)
