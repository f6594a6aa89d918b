"""``info`` on a DLedger store: the DLedger state as it is on disk, without emulating a restart.

Each data file's entry range comes from its first entry header; the last file is walked entry by
entry (DLedger's header rules with index and term continuity) to find where the data ends. The
committed index is what the DLedger checkpoint says, its position what that entry's index unit
says; ``recover`` tells what a restart makes of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.store.dledger import DLedgerStore
from rmqinspect.store.model import Store


@dataclass(frozen=True, slots=True)
class LedgerFile:
    """One data file: the entries it holds (from its first entry to the one before the next
    file's first; the last file walked), and where its data ends."""

    name: str
    start: int
    first_index: int | None  # None: the file does not start with an entry DLedger accepts
    last_index: int | None
    first_term: int | None
    last_term: int | None
    end: int | None  # data-space position after its last entry (the last file only)
    end_reason: str  # blank, end_of_data, a header reason, or "" (not walked)
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class LedgerSummary:
    home: str
    self_id: str
    data_file_size: int
    files: tuple[LedgerFile, ...]
    begin_index: int | None
    begin_term: int | None
    end_index: int | None
    end_term: int | None
    data_end: int  # where the last file's entries end (0 without data files)
    data_end_reason: str
    checkpoint_committed_index: int | None
    checkpoint_end_index: int | None
    committed_pos: int | None  # the committed entry's position + size, from its index unit
    checkpoint_lines: tuple[str, ...]
    checkpoint_bak: bool
    checkpoint_tmp: bool
    current_term: int | None
    vote_leader: str | None
    currterm_lines: tuple[str, ...]
    index_files: tuple[str, ...]
    last_record_offset: int | None  # physical offset of the last entry's record


def ledger_summary(store: Store) -> LedgerSummary | None:
    ledger = store.dledger
    if ledger is None:
        return None
    firsts = ledger.first_entries(store.maps)
    files: list[LedgerFile] = []
    for i, (f, v) in enumerate(firsts):
        h = v.header if v.ok else None
        nxt = firsts[i + 1][1] if i + 1 < len(firsts) else None
        last_index = last_term = None
        if nxt is not None and nxt.ok and nxt.header is not None and h is not None:
            last_index = nxt.header.index - 1
            unit = ledger.index_unit(store.maps, last_index)
            last_term = unit.term if unit is not None and unit.magic == dl.ENTRY_MAGIC else None
        files.append(
            LedgerFile(
                f.name,
                f.start,
                h.index if h is not None else None,
                last_index,
                h.term if h is not None else None,
                last_term,
                None,
                "",
                None if v.ok else f"{v.reason.value}: {v.detail}",
            )
        )
    data_end, reason, last_entry = 0, "no_files", None
    if files:
        files[-1], data_end, reason, last_entry = _walk_last(store, ledger, files[-1])
    first = next((f for f in files if f.first_index is not None), None)
    committed = ledger.checkpoint_value(dl.COMMITTED_INDEX_KEY)
    committed_pos = None
    if committed is not None and committed >= 0:
        unit = ledger.index_unit(store.maps, committed)
        if unit is not None and unit.magic == dl.ENTRY_MAGIC:
            committed_pos = unit.pos + unit.size
    return LedgerSummary(
        home=str(ledger.home),
        self_id=ledger.self_id,
        data_file_size=ledger.data.file_size,
        files=tuple(files),
        begin_index=first.first_index if first is not None else None,
        begin_term=first.first_term if first is not None else None,
        end_index=last_entry.index if last_entry is not None else None,
        end_term=last_entry.term if last_entry is not None else None,
        data_end=data_end,
        data_end_reason=reason,
        checkpoint_committed_index=committed,
        checkpoint_end_index=ledger.checkpoint_value(dl.END_INDEX_KEY),
        committed_pos=committed_pos,
        checkpoint_lines=tuple(ledger.checkpoint.lines),
        checkpoint_bak=ledger.checkpoint.bak is not None,
        checkpoint_tmp=ledger.checkpoint.tmp_present,
        current_term=ledger.current_term,
        vote_leader=ledger.vote_leader,
        currterm_lines=tuple(ledger.currterm.lines),
        index_files=tuple(f.name for f in ledger.index.files),
        last_record_offset=last_entry.message_position if last_entry is not None else None,
    )


def _walk_last(
    store: Store, ledger: DLedgerStore, f: LedgerFile
) -> tuple[LedgerFile, int, str, dl.EntryHeader | None]:
    """Walk the last data file from its start as recovery would: its entry range, where its
    data ends and why, and its last entry."""
    disk = ledger.data.files[-1]
    buf = store.view(disk)
    try:
        pos = 0
        previous: tuple[int, int] | None = None
        last: dl.EntryHeader | None = None
        while True:
            walk = dl.walk_entries(buf, pos, disk.start, previous=previous, continuity=True)
            if len(walk):
                last = dl.EntryHeader.decode(buf, int(walk.positions[-1]))
                previous = walk.last
            pos = walk.end
            if walk.stop is not None:
                break
        stop = walk.stop
        end = disk.start + (ledger.data.file_size if stop.reason is cl.CheckReason.BLANK else pos)
        reason = stop.reason.value
    finally:
        buf.release()
    walked = LedgerFile(
        f.name,
        f.start,
        f.first_index,
        last.index if last is not None else None,
        f.first_term,
        last.term if last is not None else None,
        end,
        reason,
        f.problem,
    )
    return walked, end, reason, last
