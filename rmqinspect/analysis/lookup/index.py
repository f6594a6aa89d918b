"""The index files a lookup queries: as on disk, or as a restart would leave them, and the
broker's ``queryMessage`` over them."""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rmqinspect.analysis import Progress
from rmqinspect.analysis.indexes import open_index_files
from rmqinspect.analysis.lookup.result import QUERY_ROUNDS, IndexReport
from rmqinspect.analysis.recovery import RecoverOptions, run_recovery
from rmqinspect.errors import StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format.index import (
    MAX_MSGS_NUM_BATCH,
    IndexGeometry,
    IndexHeader,
    chain_problem,
    query_offsets,
)
from rmqinspect.format.index_build import IndexFileBuilder
from rmqinspect.format.javahash import index_key
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store

# --- opened index files ---------------------------------------------------------------------------


class OpenIndex:
    """Usable index files with read-only views; the geometry is the broker's one configuration.

    A ``restart`` (see :func:`restarted_index`) replaces the store's own ``index/`` listing with
    the post-restart set: the kept files on disk and the ones the restart builds, in memory."""

    def __init__(self, store: Store, restart: RestartedIndex | None = None) -> None:
        self.store = store
        self.infos = open_index_files(store, None if restart is None else restart.files)
        built = [] if restart is None else restart.built
        self.report_base = IndexReport(files_total=len(self.infos) + len(built))
        self._stack = contextlib.ExitStack()
        self.files: list[tuple[str, IndexHeader, memoryview]] = []
        self.geometry: IndexGeometry | None = None
        for b in built:
            self.geometry = b.geometry
            self.files.append((b.name, b.header, b.view))
        for info in self.infos:
            if not info.usable:
                self.report_base.unusable.append(info.error or f"{info.file.path}: unusable")
                continue
            assert info.geometry is not None and info.header is not None
            if self.geometry is None:
                self.geometry = info.geometry
            elif info.geometry != self.geometry:
                self.report_base.unusable.append(
                    f"{info.file.path}: geometry {info.geometry.slot_num}/"
                    f"{info.geometry.index_num} differs from the other files'"
                )
                continue
            view = store.view(info.file)
            self._stack.callback(view.release)
            self.files.append((str(info.file.path), info.header, view))
        self.files.sort(key=lambda f: Path(f[0]).name)  # the broker loads them by name
        self.report_base.files_used = len(self.files)
        non_empty = [h for _, h, _ in self.files if h.entry_count > 0]
        if non_empty:
            self.report_base.covered_from = min(h.begin_phy_offset for h in non_empty)
            self.report_base.covered_to = max(h.end_phy_offset for h in non_empty)

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> OpenIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def new_report(self) -> IndexReport:
        b = self.report_base
        return IndexReport(
            files_total=b.files_total,
            files_used=b.files_used,
            unusable=list(b.unusable),
            covered_from=b.covered_from,
            covered_to=b.covered_to,
        )

    def query_offset(
        self, full_key: str, max_num: int, begin: int, end: int, batch: int = MAX_MSGS_NUM_BATCH
    ) -> list[int]:
        """``IndexService.queryOffset`` over the usable files (load order = name order);
        ``batch`` is the broker's cap on ``max_num`` (maxMsgsNumBatch)."""
        if self.geometry is None:
            return []
        pairs = [(h, v) for _, h, v in self.files]
        return query_offsets(pairs, self.geometry, full_key, max_num, begin, end, batch)

    def holds_more(self, full_key: str, max_num: int, begin: int, end: int) -> bool:
        """Whether the index holds more hits for the key than a query of ``max_num`` returns
        (the broker stops collecting there)."""
        cap = min(max_num, MAX_MSGS_NUM_BATCH)
        return len(self.query_offset(full_key, cap + 1, begin, end, cap + 1)) > cap

    def chain_problems(self, full_key: str) -> list[str]:
        """Corrupt links met walking this key's bucket in each file (slot + chain only)."""
        if self.geometry is None:
            return []
        slot = self.geometry.slot_of(full_key)
        out = []
        for path, header, view in self.files:
            problem = chain_problem(view, self.geometry, header, slot)
            if problem is not None:
                out.append(f"{path}: {problem.describe()}")
        return out


# --- the broker's queryMessage -------------------------------------------------------------------


def broker_query(
    store: Store,
    index: OpenIndex,
    topic: str,
    key: str,
    max_num: int,
    begin: int,
    end: int,
    readable_end: int,
    report: IndexReport,
) -> list[int]:
    """``DefaultMessageStore.queryMessage``: up to three rounds, each narrowing ``end`` to the
    store time of the oldest hit; offsets the commitlog cannot serve are dropped."""
    full_key = index_key(topic, key)
    report.keys_queried.append(full_key)
    last_query_time = end
    returned: list[int] = []
    for round_no in range(QUERY_ROUNDS):
        offsets = sorted(index.query_offset(full_key, max_num, begin, last_query_time))
        if round_no == 0:
            report.index_offsets.extend(offsets)
        if not offsets:
            break
        report.rounds = max(report.rounds, round_no + 1)
        for m, offset in enumerate(offsets):
            record = _look_message(store, offset, readable_end)
            if record is None:
                continue  # lookMessageByOffset/getData give nothing; the broker skips it
            if m == 0:
                last_query_time = record.store_timestamp
            returned.append(offset)
        if returned or last_query_time < begin:
            break
    report.broker_offsets.extend(returned)
    report.chain_problems.extend(index.chain_problems(full_key))
    return returned


def _look_message(store: Store, offset: int, readable_end: int) -> cl.MessageRecord | None:
    if offset < 0 or offset >= readable_end or store.commitlog.find(offset) is None:
        return None
    try:
        return store.read_message(offset)
    except StoreError:
        return None


@dataclass(frozen=True, slots=True)
class BuiltIndexFile:
    """An index file the restart writes, held in memory (zero pages are not allocated)."""

    name: str
    header: IndexHeader
    geometry: IndexGeometry
    view: memoryview


@dataclass(frozen=True, slots=True)
class RestartedIndex:
    """The index and commitlog end a broker restarting on this store would query."""

    end: int  # the recovered commitlog end E: queryMessage serves nothing at or past it
    files: list[StoreFile]  # the on-disk files the restart keeps untouched
    built: list[BuiltIndexFile]  # the files it writes (new, or kept and continued)
    notes: tuple[str, ...]


@contextlib.contextmanager
def restarted_index(store: Store, progress: Progress | None = None) -> Iterator[RestartedIndex]:
    """Emulate the restart (``analysis.recovery``), keep the index files it writes in memory,
    and yield the post-restart view; the store itself is only read."""
    images: list[mmap.mmap] = []
    built: list[BuiltIndexFile] = []

    def keep(f: IndexFileBuilder) -> None:
        image = mmap.mmap(-1, f.geometry.file_size)  # anonymous: untouched pages cost nothing
        images.append(image)
        for position, data in f.writes():
            image[position : position + len(data)] = data
        built.append(BuiltIndexFile(f.name, f.header, f.geometry, memoryview(image).toreadonly()))

    try:
        outcome = run_recovery(
            store, RecoverOptions(lost_limit=0, find_lost=False), progress, index_sink=keep
        )
        report = outcome.report
        end = report.end_after_start
        if end is None:
            raise StoreError(f"--as-recovered: {report.verdict_reason}", str(store.root))
        replaced = set(outcome.index_deleted) | set(outcome.index_written)
        files = [f for f in store.index_files if f.name not in replaced]
        notes = [f"as after a restart: the commitlog ends at {end}"]
        if outcome.index_deleted:
            notes.append("index files the restart deletes: " + ", ".join(outcome.index_deleted))
        yield RestartedIndex(end, files, built, tuple(notes))
    finally:
        for b in built:
            b.view.release()
        for image in images:
            image.close()
