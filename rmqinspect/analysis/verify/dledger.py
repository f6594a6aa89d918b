"""DLedger checks (dledger-store-format.md §2-§7): entry headers, the index file against the data,
and the DLedger ``checkpoint``/``currterm``.

The data files are walked by :func:`.commitlog.check_file` through the store's one walk
(:meth:`~rmqinspect.store.model.Store.scan_file`); the records inside entries get the plain
records' checks there. :class:`EntryChecks` sees every entry that walk passes, in order, and
checks what DLedger's recovery checks across entries (index consecutive, term not falling) and
what nothing checks (the body size against the record, the entry's index unit). What needs every
file (continuity across files, units past the data end, the checkpoint) is
:func:`check_ledger`'s, once every file is done. Entry findings give the entry's position
(``physical_offset`` is its data-space position: RocketMQ's record offset is that + 48).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.finding import Findings, layout_check
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.format.npbytes import I64, Buffer
from rmqinspect.format.scan import data_extent
from rmqinspect.store.dledger import DLedgerStore
from rmqinspect.store.files import StoreFile

R = cl.CheckReason
# The header rules of DLedger's recovery (format.dledger.entry_verdict), by check id.
HEADER_CHECKS = {
    R.BAD_ENTRY_MAGIC: "dledger.entry_magic",
    R.POS_FIELD_MISMATCH: "dledger.entry_pos",
    R.BODY_SIZE_MISMATCH: "dledger.entry_size",
    R.SIZE_TOO_SMALL: "dledger.entry_size",
    R.BEYOND_FILE_END: "dledger.entry_size",
    R.END_OF_DATA: "dledger.entry_size",
    R.INDEX_NOT_CONSECUTIVE: "dledger.entry_index",
    R.TERM_DECREASED: "dledger.entry_term",
}
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class EntryMark:
    index: int
    term: int
    position: int  # data-space position


@dataclass
class EntrySpan:
    """The first and last entries one data file's walk passed (None: no entry)."""

    first: EntryMark | None = None
    last: EntryMark | None = None


def index_file_name(ledger: DLedgerStore, entry_index: int) -> str:
    """The index file that holds entry ``entry_index``'s unit (whether or not it exists)."""
    at = entry_index * dl.INDEX_UNIT_SIZE
    return f"{at - at % ledger.index.file_size:020d}"


def blank_length(buf: Buffer, at: int) -> int | None:
    """The remaining length a DLedger blank at ``at`` states (None: fewer than 8 bytes)."""
    return _I32.unpack_from(buf, at + 4)[0] if at + 8 <= len(buf) else None


class EntryChecks:
    """The entries of one data file as its walk passes them (runs and kept entries alike)."""

    def __init__(self, ctx: Context, f: StoreFile, buf: Buffer, file: str, findings: Findings):
        assert ctx.store.dledger is not None
        self.ctx, self.f, self.buf, self.file, self.findings = ctx, f, buf, file, findings
        self.ledger = ctx.store.dledger
        self.span = EntrySpan()
        self._after_damage = False  # the previous entry is unknown: only "index rises" holds

    def damage(self) -> None:
        """Headers DLedger rejects lie between the last entry and the next one."""
        self._after_damage = True

    def entries(self, positions: I64, record_sizes: I64) -> None:
        """Entries at file ``positions`` whose records' TOTALSIZEs are ``record_sizes``."""
        if not len(positions):
            return
        h = dl.headers(self.buf, positions)
        index = h["index"].astype(np.int64)
        term = h["term"].astype(np.int64)
        body = h["body_size"].astype(np.int64)
        where = positions + self.f.start
        for i in np.flatnonzero(body != record_sizes).tolist():
            self._add(
                "dledger.body_size",
                int(positions[i]),
                f"the entry's body size is {int(body[i])}, the record it holds says TOTALSIZE "
                f"{int(record_sizes[i])}",
            )
        prev = self.span.last
        before_index = np.concatenate(([prev.index if prev else -1], index[:-1]))
        before_term = np.concatenate(([prev.term if prev else term[0]], term[:-1]))
        expect = before_index + 1
        jump = index != expect
        if prev is None or self._after_damage:
            jump[0] = prev is not None and index[0] <= prev.index
        # One entry whose index field is off: the chain resumes after it, and only it is named.
        resumes = np.zeros(len(jump), bool)
        resumes[1:] = jump[:-1] & (index[1:] == before_index[:-1] + 2)
        jump &= ~resumes
        for i in np.flatnonzero(jump).tolist():
            self._add(
                "dledger.entry_index",
                int(positions[i]),
                f"entry index {int(index[i])} after {int(before_index[i])}: DLedger's recovery "
                "stops here and truncates the log",
            )
        for i in np.flatnonzero(term < before_term).tolist():
            self._add(
                "dledger.entry_term",
                int(positions[i]),
                f"term {int(term[i])} after {int(before_term[i])}: DLedger's recovery stops "
                "here and truncates the log",
            )
        keep = ~jump  # an index field that is off names no unit
        self._units(positions[keep], h[keep], index[keep], where[keep])
        self._after_damage = False
        if self.span.first is None:
            self.span.first = EntryMark(int(index[0]), int(term[0]), int(where[0]))
        self.span.last = EntryMark(int(index[-1]), int(term[-1]), int(where[-1]))

    def _units(self, positions: I64, h: np.ndarray, index: I64, where: I64) -> None:
        """Each entry's index unit (at index * 32) against its header."""
        valid = np.flatnonzero(index >= 0)
        if not len(valid):
            return
        # Consecutive indexes read their units in one go.
        rows = index[valid]
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        for seg in np.split(np.arange(len(valid)), breaks):
            k = valid[seg]
            units = self.ledger.index_units(self.ctx.store.maps, int(index[k[0]]), len(k))
            empty = units.view(np.uint8).reshape(len(k), -1).any(axis=1) == 0
            fields = {
                "magic": h["magic"][k],
                "pos": where[k],
                "size": h["size"][k],
                "index": index[k],
                "term": h["term"][k],
            }
            differs = {name: units[name] != fields[name] for name in dl.INDEX_FIELDS}
            bad = np.logical_or.reduce(list(differs.values())) & ~empty
            for j in np.flatnonzero(empty).tolist():
                self._unit(
                    "dledger.index_missing",
                    int(index[k[j]]),
                    int(where[k[j]]),
                    f"entry {int(index[k[j]])} at {int(where[k[j]])} has no index unit (zeros "
                    "or no index file): DLedger's recovery rewrites the index from here",
                )
            for j in np.flatnonzero(bad).tolist():
                which = ", ".join(
                    f"{name} {int(units[name][j])} (entry {int(fields[name][j])})"
                    for name in dl.INDEX_FIELDS
                    if differs[name][j]
                )
                self._unit(
                    "dledger.index_unit",
                    int(index[k[j]]),
                    int(where[k[j]]),
                    f"the index unit of entry {int(index[k[j]])} says {which}",
                )

    def _unit(self, check: str, entry_index: int, position: int, detail: str) -> None:
        name = index_file_name(self.ledger, entry_index)
        at = entry_index * dl.INDEX_UNIT_SIZE
        self.findings.add(
            check,
            self.ctx.rel(self.ledger.index.directory / name),
            detail,
            file_position=at % self.ledger.index.file_size,
            physical_offset=position,
        )

    def _add(self, check: str, pos: int, detail: str) -> None:
        self.findings.add(
            check, self.file, detail, file_position=pos, physical_offset=self.f.start + pos
        )


def record_size_at(buf: Buffer, record_at: int) -> int:
    """The TOTALSIZE of the record at ``record_at`` (-1 when it is not inside ``buf``)."""
    return _I32.unpack_from(buf, record_at)[0] if record_at + 4 <= len(buf) else -1


# --- the files together -----------------------------------------------------------------------


def check_ledger(ctx: Context, spans: list[tuple[str, EntrySpan]], findings: Findings) -> None:
    """What needs every data file: index and term continuity from file to file, the index
    family's layout, units past the last entry, and the checkpoint and currterm."""
    ledger = ctx.store.dledger
    assert ledger is not None
    for p in ledger.index.problems:
        findings.add(layout_check("dledger", p.kind), ctx.rel(p.path), p.message)
    prev: EntryMark | None = None
    for file, span in spans:
        if span.first is None or span.last is None:
            continue
        first = span.first
        at = first.position - ctx.store.commitlog_file(first.position).start
        if prev is not None and first.index != prev.index + 1:
            findings.add(
                "dledger.entry_index",
                file,
                f"the file's first entry has index {first.index}, the previous file's last "
                f"{prev.index}",
                file_position=at,
                physical_offset=first.position,
            )
        if prev is not None and first.term < prev.term:
            findings.add(
                "dledger.entry_term",
                file,
                f"the file's first entry has term {first.term}, the previous file's last "
                f"{prev.term}",
                file_position=at,
                physical_offset=first.position,
            )
        prev = span.last
    last_index = prev.index if prev is not None else -1
    _units_past_end(ctx, ledger, last_index, findings)
    _checkpoint(ctx, ledger, prev, findings)


def _units_past_end(
    ctx: Context, ledger: DLedgerStore, last_index: int, findings: Findings
) -> None:
    """Non-zero units after the last entry's: stale units DLedger's truncation left (it moves
    the write position and keeps the bytes); the next appends overwrite them."""
    begin = (last_index + 1) * dl.INDEX_UNIT_SIZE
    for f in ledger.index.files:
        if f.start + f.length <= begin or not f.length:
            continue
        pos = max(begin - f.start, 0)
        buf = ctx.store.view(f)
        try:
            extent = data_extent(buf, pos)
            if not extent:
                continue
            first = _first_nonzero(buf, pos, pos + extent)
        finally:
            buf.release()
        unit = first - first % dl.INDEX_UNIT_SIZE
        findings.add(
            "dledger.index_past_end",
            ctx.rel(f.path),
            f"non-zero index units from entry {(f.start + unit) // dl.INDEX_UNIT_SIZE} on, "
            f"past the last entry in the data ({last_index})",
            file_position=unit,
        )


def _first_nonzero(buf: Buffer, lo: int, hi: int) -> int:
    step = 1 << 22
    while lo < hi:
        chunk = np.frombuffer(buf, np.uint8, min(step, hi - lo), lo)
        nz = np.flatnonzero(chunk)
        if len(nz):
            return lo + int(nz[0])
        lo += step
    return hi


def _checkpoint(
    ctx: Context, ledger: DLedgerStore, last: EntryMark | None, findings: Findings
) -> None:
    """committedIndex and endIndex readable and not beyond the data; currTerm not below the
    term of an entry. A checkpoint behind the data is a killed broker's (it is written every
    3 s): the node commits the rest once elected."""
    cp = ledger.checkpoint
    file = ctx.rel(cp.path)
    if cp.raw is None:
        if last is not None:
            also = "; checkpoint.bak is there" if cp.bak is not None else ""
            findings.add(
                "dledger.checkpoint_missing",
                file,
                "no DLedger checkpoint: committedIndex is -1 after load, so the broker's max "
                f"physical offset stays at the first data file until the node is elected{also}",
            )
    else:
        committed_text = dl.committed_index_text(cp.pairs)
        committed = ledger.checkpoint_value(dl.COMMITTED_INDEX_KEY)
        end = ledger.checkpoint_value(dl.END_INDEX_KEY)
        if committed_text is not None and committed is None:
            findings.add(
                "dledger.checkpoint",
                file,
                f"committedIndex {committed_text!r} is not a number (DLedger cannot load it)",
            )
        last_index = last.index if last is not None else -1
        if committed is not None and end is not None and committed > end:
            findings.add(
                "dledger.checkpoint", file, f"committedIndex {committed} is beyond endIndex {end}"
            )
        if committed is not None and committed > last_index:
            findings.add(
                "dledger.checkpoint",
                file,
                f"committedIndex {committed} is beyond the last entry in the data "
                f"({last_index}): committed entries are gone",
            )
    term = ledger.current_term
    text = (ledger.currterm.pairs or {}).get(dl.CURRENT_TERM_KEY)
    tfile = ctx.rel(ledger.currterm.path)
    if text is not None and text.strip() and term is None:
        findings.add(
            "dledger.currterm",
            tfile,
            f"currTerm {text.strip()!r} is not a number (DLedger cannot load it)",
        )
    elif last is not None and last.term > (term or 0):
        findings.add(
            "dledger.currterm",
            tfile,
            f"currTerm {term or 0} is below the term of the last entry ({last.term})",
        )
