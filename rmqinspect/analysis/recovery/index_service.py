"""``IndexService`` during a restart: which index files ``load`` keeps (§10.10), and the index
entries the dispatch writes (§7.3-7.5) into kept or new files.

Without a sink only headers are tracked; with one (``--apply-to`` writes the files elsewhere,
``lookup --as-recovered`` queries them in memory), every file that receives entries is built
byte for byte by the one index builder and handed over when the broker would stop writing it,
so at most one is held here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from rmqinspect.analysis.recovery.fields import DispatchRecords
from rmqinspect.analysis.recovery.report import IndexFileInfo, IndexReport, OffsetRange
from rmqinspect.format.checkpoint import Checkpoint
from rmqinspect.format.index import (
    DEFAULT_INDEX_NUM,
    DEFAULT_SLOT_NUM,
    INDEX_HEADER_SIZE,
    IndexGeometry,
    IndexHeader,
)
from rmqinspect.format.index_build import IndexBuilder, IndexFileBuilder
from rmqinspect.format.npbytes import I64
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store


@dataclass(frozen=True, slots=True)
class IndexLoad:
    """``IndexService.load(lastExitOK)``: the geometry, the files kept and deleted."""

    geometry: IndexGeometry
    geometry_source: str
    headers: dict[str, IndexHeader]  # every index file on disk, by name
    kept: list[str]
    deleted: list[str]

    @property
    def kept_end(self) -> int:
        """endPhyOffset of the last kept file (0 without one)."""
        return self.headers[self.kept[-1]].end_phy_offset if self.kept else 0


def load_index(
    store: Store, last_exit_ok: bool, checkpoint: Checkpoint, warnings: list[str]
) -> IndexLoad:
    """After a crash every file whose endTimestamp is past the checkpoint's
    indexMsgTimestamp is deleted (§10.10)."""
    geometry, source = index_geometry(store, warnings)
    headers = {f.name: _header(store, f) for f in store.index_files}
    kept: list[str] = []
    deleted: list[str] = []
    for f in store.index_files:
        header = headers[f.name]
        if not last_exit_ok and header.end_timestamp > checkpoint.index_msg_timestamp:
            deleted.append(f.name)
        else:
            kept.append(f.name)
    return IndexLoad(geometry, source, headers, kept, deleted)


def index_geometry(store: Store, warnings: list[str]) -> tuple[IndexGeometry, str]:
    """maxHashSlotNum/maxIndexNum: given, else inferred from the file size (the defaults or
    their ratio), else from full files' indexCount, else the defaults with a warning."""
    slots, entries = store.options.index_slot_num, store.options.index_num
    if slots is not None and entries is not None:
        return IndexGeometry(slots, entries), "options"
    sizes = [f.length for f in store.index_files]
    size = max(set(sizes), key=sizes.count) if sizes else None
    if size is not None:
        try:
            return IndexGeometry.infer(size, slots, entries), "file size"
        except ValueError:
            pass  # not the defaults nor the default ratio: try the full files below
        # A rolled (full) file stores indexCount == maxIndexNum: the geometry follows.
        counts = {_header(store, f).index_count for f in store.index_files[:-1]}
        if len(counts) == 1:
            num = counts.pop()
            rest = size - INDEX_HEADER_SIZE - 20 * num
            if num >= 2 and rest > 0 and rest % 4 == 0:
                return IndexGeometry(rest // 4, num), "full files' indexCount"
        warnings.append(
            f"index geometry of {size}-byte files could not be inferred; pass --index-slots "
            "and --index-entries (rollover predictions use the defaults)"
        )
    return IndexGeometry(slots or DEFAULT_SLOT_NUM, entries or DEFAULT_INDEX_NUM), "defaults"


def _header(store: Store, f: StoreFile) -> IndexHeader:
    return IndexHeader.decode(store.maps.read_padded(f, 0, INDEX_HEADER_SIZE))


IndexSink = Callable[[IndexFileBuilder], None]
"""Receives each index file the restart writes (new or continued), with its bytes."""


class IndexService:
    """``IndexService`` after ``load``: the kept files, and ``buildIndex`` for the dispatched
    records through the one index builder (:class:`IndexBuilder`), a chunk at a time.

    Without a ``sink`` only headers are tracked; with one, every file that receives entries is
    built byte for byte and handed to the sink when the broker would stop writing it."""

    def __init__(self, store: Store, loaded: IndexLoad, sink: IndexSink | None) -> None:
        self.store = store
        self.loaded = loaded
        self.geometry = loaded.geometry
        self.sink = sink
        self.written: list[str] = []
        self._builder: IndexBuilder | None = None
        last = loaded.kept[-1] if loaded.kept else None
        self._last_kept = last
        self._last_kept_header = loaded.headers[last] if last is not None else None

    # state the dispatcher reads ---------------------------------------------------------------

    def skip_below(self) -> int:
        """``buildIndex`` skips records below this offset (the last file's endPhyOffset; a new
        file inherits it)."""
        if self._builder is not None:
            return self._builder.end_phy_offset
        h = self._last_kept_header
        return h.end_phy_offset if h is not None else 0

    def creates_file(self) -> bool:
        """The next ``buildIndex`` call creates a file (none yet, or the last one is full)."""
        if self._builder is not None:
            return self._builder.creates_file
        h = self._last_kept_header
        return h is None or h.loaded_index_count >= self.geometry.index_num

    # dispatch ---------------------------------------------------------------------------------

    def add_run(self, records: DispatchRecords, rows: I64) -> None:
        """``IndexService.buildIndex`` for the records ``rows`` (ascending) of a run, in
        dispatch order, with one vectorised builder call: keys are found with one search per
        property name over the run (or by ``recover --jobs``' workers), hashed with numpy."""
        if not len(rows):
            return
        hashes, owners = records.index_keys(rows)
        self._get_builder().dispatch(
            records.physical_offset_field[rows],
            records.store_timestamp[rows],
            records.sys_flag[rows],
            hashes,
            owners,
        )

    def _get_builder(self) -> IndexBuilder:
        if self._builder is None:
            continued = None
            if self._last_kept is not None:
                disk = next(f for f in self.store.index_files if f.name == self._last_kept)
                # Without a sink only the header and slot table are continued: the entries
                # (hundreds of MB) are read only to write the file out.
                whole = (
                    self.geometry.file_size if self.sink is not None else self.geometry.entries_base
                )
                size = min(disk.length, whole)
                data = self.store.maps.read_padded(disk, 0, size)
                continued = IndexFileBuilder.from_bytes(
                    data, self.geometry, name=disk.name, materialise=self.sink is not None
                )
            self._builder = IndexBuilder(
                self.geometry,
                self._new_name,
                materialise=self.sink is not None,
                last_file=continued,
                on_rolled=self._hand_over,
            )
        return self._builder

    def _new_name(self, _trigger_timestamp: int, _sequence: int) -> str:
        """``yyyyMMddHHmmssSSS`` of now (local time, as the broker names it); when the clock is
        behind the existing names, the next number after the newest, so the load order holds."""
        ms = int(time.time() * 1000)
        name = datetime.fromtimestamp(ms / 1000).strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"
        existing = [*self.loaded.headers, *(self._builder.created if self._builder else [])]
        newest = max(existing, default="")
        if name <= newest:
            name = f"{int(newest) + 1:017d}" if newest.isdigit() else newest + "1"
        return name

    def _hand_over(self, f: IndexFileBuilder) -> None:
        """A file the restart wrote: every new file, and the kept last file if it got keys."""
        kept = self._last_kept_header
        untouched = (
            f.name == self._last_kept
            and kept is not None
            and (f.header.loaded_index_count == kept.loaded_index_count)
        )
        if self.sink is not None and not untouched:
            self.sink(f)
            self.written.append(f.name)

    def finish(self) -> None:
        """The shutdown after the restart flushes the last file."""
        if self._builder is not None:
            last = self._builder.finish()
            if last is not None:
                last.flush()
                self._hand_over(last)

    # what the report needs --------------------------------------------------------------------

    @property
    def created(self) -> list[str]:
        return list(self._builder.created) if self._builder is not None else []

    @property
    def entries(self) -> int:
        return self._builder.entries if self._builder is not None else 0

    @property
    def index_msg_timestamp(self) -> int | None:
        """The checkpoint's indexMsgTimestamp after full files were flushed (None: unchanged)."""
        return self._builder.index_msg_timestamp if self._builder is not None else None

    @property
    def first_indexed_offset(self) -> int | None:
        return self._builder.first_indexed_offset if self._builder is not None else None

    def headers_after(self) -> list[tuple[str, IndexHeader]]:
        """Every index file after the restart, in load order, with its header."""
        touched = dict(self._builder.headers()) if self._builder is not None else {}
        kept = [(name, touched.pop(name, self.loaded.headers[name])) for name in self.loaded.kept]
        return kept + list(touched.items())


def index_report(
    loaded: IndexLoad,
    service: IndexService,
    end: int,
    last_exit_ok: bool,
    checkpoint: Checkpoint,
) -> IndexReport:
    """The index section: files deleted and created, and the offset ranges a key lookup can no
    longer find (deleted entries nothing rebuilds) or finds past the end (kept stale entries)."""
    headers = loaded.headers
    deleted = loaded.deleted
    cover: int | None = None
    if service.first_indexed_offset is not None:
        cover = max(loaded.kept_end, service.first_indexed_offset)
    unfindable: list[OffsetRange] = []
    for name in deleted:
        h = headers[name]
        if h.loaded_index_count <= 1:
            continue
        first, last = h.begin_phy_offset, min(h.end_phy_offset, end - 1)
        if cover is not None:
            last = min(last, cover - 1)
        if first <= last:
            unfindable.append(OffsetRange(first, last, f"entries of deleted {name}"))
    after = service.headers_after()
    stale: list[OffsetRange] = []
    for name in loaded.kept:
        h = headers[name]
        if h.loaded_index_count > 1 and h.end_phy_offset >= end:
            stale.append(
                OffsetRange(
                    max(end, h.begin_phy_offset),
                    h.end_phy_offset,
                    f"kept {name} points past the recovered end",
                )
            )
    new_files = [
        IndexFileInfo(
            name,
            h.begin_phy_offset,
            h.end_phy_offset,
            h.begin_timestamp,
            h.end_timestamp,
            h.index_count,
        )
        for name, h in after
        if name not in headers
    ]
    continued = sorted(
        name
        for name, h in after
        if name in headers and h.loaded_index_count != headers[name].loaded_index_count
    )
    reason = (
        "clean shutdown: index files are kept"
        if last_exit_ok
        else f"crash: files whose endTimestamp > checkpoint indexMsgTimestamp "
        f"{checkpoint.index_msg_timestamp} are deleted"
    )
    geometry = loaded.geometry
    return IndexReport(
        geometry={"slots": geometry.slot_num, "entries": geometry.index_num},
        geometry_source=loaded.geometry_source,
        files_before=list(headers),
        deleted_files=deleted,
        deleted_reason=reason,
        files_created=len(service.created),
        files_continued=continued,
        entries_written=service.entries,
        new_files=new_files,
        unfindable_ranges=unfindable,
        stale_ranges=stale,
    )
