"""A DLedger commitlog on disk, read-only: ``dledger-<selfId>/`` (dledger-store-format.md §1).

:class:`DLedgerStore` lists the data and index file families, reads ``checkpoint`` and
``currterm`` (and says which ``.bak``/``.tmp`` copies lie beside them), and maps between RocketMQ
physical offsets and entries: a record's physical offset is its entry's position + 48, and entry
``i`` is found through the index unit at ``i * 32``. The :class:`~rmqinspect.store.model.Store`
uses the data files as its commitlog.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqinspect.errors import StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.format.javamath import java_parse_long
from rmqinspect.store.files import (
    HOME_PREFIX,
    FileQueue,
    LayoutProblem,
    MappedFiles,
    StoreFile,
    list_family,
    read_small,
)

TEXT_FILE_LIMIT = 64 << 10  # checkpoint and currterm hold a few short properties


@dataclass(frozen=True, slots=True)
class TextFile:
    """``checkpoint`` or ``currterm``: the text properties DLedger reads, and the copies its
    ``string2File`` leaves beside it (``.bak`` the previous content, ``.tmp`` an interrupted
    write)."""

    path: Path
    raw: bytes | None  # None: missing
    bak: bytes | None
    tmp_present: bool

    @classmethod
    def read(cls, path: Path) -> TextFile:
        bak = path.with_name(path.name + ".bak")
        tmp = path.with_name(path.name + ".tmp")
        return cls(path, _text(path), _text(bak), tmp.exists())

    @property
    def pairs(self) -> dict[str, str] | None:
        """The properties (None when the file is missing)."""
        if self.raw is None:
            return None
        return dl.parse_properties_text(self.raw.decode("utf-8", "replace"))

    @property
    def lines(self) -> list[str]:
        """The non-comment lines, as written."""
        if self.raw is None:
            return []
        text = self.raw.decode("utf-8", "replace")
        return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


@dataclass
class DLedgerStore:
    """``dledger-<selfId>/``: entry data files (named by position, ``mappedFileSizeCommitLog``
    each), 32-byte-unit index files (named by byte offset, 160 MiB each), checkpoint, currterm."""

    home: Path
    self_id: str
    data: FileQueue
    index: FileQueue
    checkpoint: TextFile
    currterm: TextFile
    problems: list[LayoutProblem] = field(default_factory=list)

    @classmethod
    def open(cls, home: Path, data_file_size: int | None) -> DLedgerStore:
        data = list_family(
            home / "data", data_file_size, "DLedger data", cl.DEFAULT_COMMITLOG_FILE_SIZE
        )
        index = list_family(home / "index", dl.INDEX_FILE_SIZE, "DLedger index", dl.INDEX_FILE_SIZE)
        store = cls(
            home,
            home.name.removeprefix(HOME_PREFIX),
            data,
            index,
            TextFile.read(home / "checkpoint"),
            TextFile.read(home / "currterm"),
        )
        # DLedger exits (System.exit) on a file of the wrong size in either family.
        store.problems.extend(data.problems + index.problems)
        return store

    # --- checkpoint and currterm -----------------------------------------------------------------

    @property
    def current_term(self) -> int | None:
        return java_parse_long((self.currterm.pairs or {}).get(dl.CURRENT_TERM_KEY, "").strip())

    @property
    def vote_leader(self) -> str | None:
        value = (self.currterm.pairs or {}).get(dl.VOTE_LEADER_KEY, "").strip()
        return value or None

    def checkpoint_value(self, key: str) -> int | None:
        """An integer property of ``checkpoint`` (None: missing, empty or not a number)."""
        return java_parse_long((self.checkpoint.pairs or {}).get(key, "").strip())

    # --- entries ---------------------------------------------------------------------------------

    def entry_at(self, maps: MappedFiles, position: int) -> dl.EntryHeader | None:
        """The 48 header bytes at a data-space ``position`` (None outside the data files)."""
        f = self.data.find(position)
        if f is None:
            return None
        raw = maps.read_padded(f, position - f.start, dl.BODY_OFFSET)
        return dl.EntryHeader.decode(raw)

    def message_entry(self, maps: MappedFiles, physical_offset: int) -> dl.EntryHeader | None:
        """The entry holding the record at ``physical_offset``: the header 48 bytes before it,
        when that header names its own position (else None)."""
        at = physical_offset - dl.BODY_OFFSET
        if at < 0:
            return None
        h = self.entry_at(maps, at)
        return h if h is not None and h.pos == at and h.magic != dl.BLANK_MAGIC else None

    def index_units(self, maps: MappedFiles, first: int, count: int) -> np.ndarray:
        """Index units ``first .. first + count - 1`` as :data:`~rmqinspect.format.dledger.
        INDEX_DTYPE` rows; a unit outside the index files reads as zeros (magic 0)."""
        out = np.zeros(max(count, 0), dl.INDEX_DTYPE)
        at = first * dl.INDEX_UNIT_SIZE
        end = (first + count) * dl.INDEX_UNIT_SIZE
        while at < end:
            f = self.index.find(at)
            if f is None:
                at = self._next_index_file_start(at, end)
                continue
            stop = min(end, f.start + self.index.file_size)
            raw = maps.read_padded(f, at - f.start, stop - at)
            lo = (at - first * dl.INDEX_UNIT_SIZE) // dl.INDEX_UNIT_SIZE
            out[lo : lo + len(raw) // dl.INDEX_UNIT_SIZE] = np.frombuffer(raw, dl.INDEX_DTYPE)
            at = stop
        return out

    def _next_index_file_start(self, at: int, end: int) -> int:
        later = [f.start for f in self.index.files if f.start > at]
        return min([*later, end])

    def index_unit(self, maps: MappedFiles, entry_index: int) -> dl.IndexUnit | None:
        """The unit of entry ``entry_index``, or None outside the index files."""
        if entry_index < 0 or self.index.find(entry_index * dl.INDEX_UNIT_SIZE) is None:
            return None
        row = self.index_units(maps, entry_index, 1)[0]
        return dl.IndexUnit(*(int(row[name]) for name in dl.INDEX_FIELDS))

    def physical_offset_of(self, maps: MappedFiles, entry_index: int) -> int | None:
        """The physical offset of entry ``entry_index``'s record, through its index unit
        (None when the unit is missing or empty)."""
        unit = self.index_unit(maps, entry_index)
        if unit is None or unit.magic != dl.ENTRY_MAGIC:
            return None
        return unit.pos + dl.BODY_OFFSET

    def first_entries(self, maps: MappedFiles) -> list[tuple[StoreFile, dl.EntryVerdict]]:
        """Each data file's first entry as recovery's pre-check judges it."""
        out = []
        for f in self.data.files:
            head = maps.read_padded(f, 0, dl.BODY_OFFSET) if f.length else b""
            out.append((f, dl.first_entry_verdict(head, f.start)))
        return out


def _text(path: Path) -> bytes | None:
    """A small text file's bytes (a few properties: at most TEXT_FILE_LIMIT of them are read);
    None when it is missing or is not a regular file."""
    try:
        read = read_small(path, TEXT_FILE_LIMIT)
    except StoreError:
        return None
    return None if read is None else read.data
