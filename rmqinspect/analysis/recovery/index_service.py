"""``IndexService`` during a restart: which index files ``load`` keeps (§10.10), and the index
entries the dispatch writes (§7.3-7.5) into kept or new files.

Without an output directory only headers are tracked; with one (``--apply-to``, and
``lookup --as-recovered``), every file that receives entries is built byte for byte and written
there through :mod:`rmqinspect.store.output` when the broker would roll past it, so at most two
are in memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rmqinspect.analysis.recovery.report import IndexFileInfo, IndexReport, OffsetRange
from rmqinspect.analysis.recovery.state import DispatchedRecord
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.checkpoint import Checkpoint
from rmqinspect.format.index import (
    DEFAULT_INDEX_NUM,
    DEFAULT_SLOT_NUM,
    INDEX_HEADER_SIZE,
    IndexFileBuilder,
    IndexGeometry,
    IndexHeader,
    index_keys,
)
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store
from rmqinspect.store.output import write_sparse


@dataclass
class _IdxFile:
    name: str | None  # None for a file the broker creates (named by its wall clock)
    header: IndexHeader
    builder: IndexFileBuilder | None = None
    continued: bool = False


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


class IndexService:
    """``IndexService`` after ``load``: the kept files and ``buildIndex``/``putKey``."""

    def __init__(
        self,
        store: Store,
        loaded: IndexLoad,
        out_dir: Path | None,
    ) -> None:
        self.store = store
        self.geometry = loaded.geometry
        self.files = [_IdxFile(name, loaded.headers[name]) for name in loaded.kept]
        self.out_dir = out_dir
        self._by_name = {f.name: f for f in store.index_files}
        self.created = 0
        self.entries = 0
        self.full_flushed_end_ts: int | None = None  # checkpoint indexMsgTimestamp updates
        self.indexed_min: int | None = None
        self.written: list[str] = []

    def skip_below(self) -> int:
        """``buildIndex`` skips records below this offset (the last file's endPhyOffset; a new
        file inherits it)."""
        return self.files[-1].header.end_phy_offset if self.files else 0

    def creates_file(self) -> bool:
        """The next ``buildIndex`` call creates a file (none yet, or the last one is full)."""
        return not self.files or self._full(self.files[-1])

    def _full(self, f: _IdxFile) -> bool:
        return f.header.loaded_index_count >= self.geometry.index_num

    def _last(self) -> _IdxFile:
        """``getAndCreateLastIndexFile``."""
        if self.files and not self._full(self.files[-1]):
            return self.files[-1]
        prev = self.files[-1] if self.files else None
        end_phy = prev.header.end_phy_offset if prev else 0
        end_ts = prev.header.end_timestamp if prev else 0
        header = IndexHeader(
            end_ts if end_ts > 0 else 0,
            end_ts if end_ts > 0 else 0,
            end_phy if end_phy > 0 else 0,
            end_phy if end_phy > 0 else 0,
            0,
            1,
        )
        f = _IdxFile(None, header)
        if self.out_dir is not None:
            builder = (
                IndexFileBuilder.new_rolled(prev.builder)
                if prev is not None and prev.builder is not None
                else IndexFileBuilder(self.geometry, max(end_phy, 0), max(end_ts, 0))
            )
            f.builder = builder
            f.name = self._new_name()
        if prev is not None:
            # The broker flushes the full file in the background; a full file moves the
            # checkpoint's indexMsgTimestamp.
            self.full_flushed_end_ts = prev.header.end_timestamp
            self._write_out(prev)
        self.files.append(f)
        self.created += 1
        return f

    def _new_name(self) -> str:
        """``yyyyMMddHHmmssSSS`` of now (local time, as the broker names it); when the clock is
        behind the existing names, the next number after the newest, so the load order holds."""
        ms = int(time.time() * 1000)
        name = datetime.fromtimestamp(ms / 1000).strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"
        newest = max((x.name for x in self.files if x.name is not None), default="")
        if name <= newest:
            name = f"{int(newest) + 1:017d}" if newest.isdigit() else newest + "1"
        return name

    def _builder(self, f: _IdxFile) -> IndexFileBuilder | None:
        if self.out_dir is None:
            return None
        if f.builder is None and f.name is not None:
            size = self.geometry.file_size
            data = self.store.maps.read_padded(self._by_name[f.name], 0, size)
            f.builder = IndexFileBuilder.from_bytes(data, self.geometry)
            f.continued = True
        return f.builder

    def _write_out(self, f: _IdxFile) -> None:
        if f.builder is None or self.out_dir is None or f.name is None:
            return
        f.builder.flush()
        write_sparse(self.out_dir / f.name, f.builder.buffer)
        self.written.append(f.name)
        f.builder = None

    def build(self, m: DispatchedRecord) -> None:
        """``IndexService.buildIndex`` for one dispatched record (§7.4)."""
        f = self._last()
        if m.phy < f.header.end_phy_offset:
            return
        if m.sys_flag & cl.TRANSACTION_TYPE_MASK == cl.TRANSACTION_ROLLBACK_TYPE:
            return
        p = m.props
        for key in index_keys(m.topic, p.get(props.UNIQ_KEY), p.get(props.KEYS)):
            while not self._put(f, key, m.phy, m.store_ts):
                f = self._last()
        if self.indexed_min is None:
            self.indexed_min = m.phy

    def _put(self, f: _IdxFile, key: str, phy: int, ts: int) -> bool:
        """``IndexFile.putKey`` on the header (and on the bytes, when materialising)."""
        if self._full(f):
            return False
        builder = self._builder(f)
        if builder is not None:
            builder.put_key(key, phy, ts)
        h = f.header
        count = h.loaded_index_count
        begin_phy, begin_ts = h.begin_phy_offset, h.begin_timestamp
        if count <= 1:
            begin_phy, begin_ts = phy, ts
        f.header = IndexHeader(begin_ts, ts, begin_phy, phy, h.hash_slot_count, count + 1)
        self.entries += 1
        return True

    def finish(self) -> None:
        """Write the builders still in memory (the broker flushes them at shutdown)."""
        for f in self.files:
            if f.builder is not None:
                self._write_out(f)


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
    if service.indexed_min is not None:
        cover = max(loaded.kept_end, service.indexed_min)
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
    stale: list[OffsetRange] = []
    for f in service.files:
        if f.name in headers and f.name not in deleted:
            h = headers[f.name]
            if h.loaded_index_count > 1 and h.end_phy_offset >= end:
                stale.append(
                    OffsetRange(
                        max(end, h.begin_phy_offset),
                        h.end_phy_offset,
                        f"kept {f.name} points past the recovered end",
                    )
                )
    new_files = [
        IndexFileInfo(
            f.name or f"<new {i + 1}>",
            f.header.begin_phy_offset,
            f.header.end_phy_offset,
            f.header.begin_timestamp,
            f.header.end_timestamp,
            f.header.index_count,
        )
        for i, f in enumerate(x for x in service.files if x.name not in headers)
    ]
    continued = sorted(
        {f.name for f in service.files if f.name in headers and f.header != headers[f.name]}
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
        files_created=service.created,
        files_continued=continued,
        entries_written=service.entries,
        new_files=new_files,
        unfindable_ranges=unfindable,
        stale_ranges=stale,
    )
