"""The restart of a DLedger store (dledger-store-format.md §7-§8): ``DLedgerCommitLog.recover``
is DLedger's own recovery, the same after a clean shutdown or a crash, and after ``start()``
the reput walks entries.

1. :func:`recover_ledger`: ``DLedgerMmapFileStore.recover``: the start file chosen by the
   pre-check of first entries and index units, the header scan (no CRC, the record not looked
   at), the index compared and rewritten from the first unit that disagrees, truncation, and the
   committed index from the DLedger checkpoint, which makes RocketMQ's max offset after
   ``load()`` the committed position;
2. then ``truncateDirtyLogicFiles`` at the data end when the consume queues reach it (no
   dispatch during ``load()``);
3. :func:`ledger_reput`: ``start()``'s reput from the consume queues' end, with the DLedger-aware
   record check (entries' records at + 48, entry blanks, a record that fails without a size
   skips the rest of the read buffer), to the end entry's position, which the committed position
   reaches once the node is leader again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rmqinspect.analysis.recovery.dispatch import Dispatcher, read_length
from rmqinspect.analysis.recovery.report import (
    BadRecord,
    DLedgerReport,
    EntryInfo,
    FilePosition,
    LedgerState,
    LoadFailure,
    RecordInfo,
    ReputReport,
    StartCandidate,
    StartFile,
    TextFileReport,
)
from rmqinspect.analysis.recovery.state import BrokerState, CommitlogFile, Ledger
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.format.columns import RUN_RECORDS, gather
from rmqinspect.format.javamath import java_parse_long
from rmqinspect.format.npbytes import first_false
from rmqinspect.format.scan import CheckedRun, certain_mask
from rmqinspect.store.dledger import DLedgerStore, TextFile
from rmqinspect.store.files import FileQueue, MappedFiles

_FILES_BACK = 3  # recovery starts at the third data file from the end, or an earlier one
ASSUMPTION = (
    "after start() this node is elected leader again (a single-node group re-elects itself in "
    "the same term) and commits every entry it holds; in a larger group the leader's log "
    "decides what stays"
)


@dataclass
class LedgerRecovery:
    """How DLedger's recovery went, beyond the state it leaves (:class:`Ledger`)."""

    start_file: StartFile | None
    start_entry_index: int
    scanned_bytes: int
    end_reason: str
    first_bad: BadRecord | None
    last_entry: EntryInfo | None
    index_rebuilt_from: tuple[int, int] | None  # (entry index, position) of the first rewrite
    index_end: int
    index_files_deleted: list[str]
    index_files_after: list[FilePosition]
    committed_source: str


def _ledger(state: BrokerState) -> DLedgerStore:
    ledger = state.store.dledger
    assert ledger is not None
    return ledger


def recover_ledger(state: BrokerState) -> LedgerRecovery:
    """``DLedgerMmapFileStore.recover`` over the mapped data files; sets ``state.ledger`` and
    truncates ``state.commitlog`` (the data files) at the data end. A failure that throws out of
    ``load()`` is appended to ``state.failures``."""
    store = _ledger(state)
    if not state.commitlog:
        state.ledger = Ledger(0)
        deleted, after = _truncate_family(store.index, 0)
        return LedgerRecovery(None, -1, 0, "no_files", None, None, None, 0, deleted, after, "")
    start, first_index = _start_file(state, store)
    scan = _scan(state, store, start.index)
    ledger = Ledger(scan.end)
    if state.commitlog[-1].start - scan.end > state.commitlog_file_size:
        state.failures.append(
            LoadFailure(
                "dledger_exit",
                str(store.data.directory),
                f"the data ends at {scan.end}, more than a file before the last data file "
                f"{state.commitlog[-1].name}: DLedger refuses to truncate and calls System.exit",
            )
        )
    if scan.last is not None:
        ledger.end_index, ledger.end_term = scan.last.index, scan.last.term
        ledger.end_pos = scan.last.position + scan.last.size
        first = store.entry_at(state.store.maps, state.commitlog[0].start)
        ledger.begin_index = first.index if first is not None else -1
    state.ledger = ledger
    state.truncate_commitlog(scan.end)
    index_end = (ledger.end_index + 1) * dl.INDEX_UNIT_SIZE
    index_deleted, index_after = _truncate_family(store.index, index_end)
    source = _committed_index(state, store, scan)
    return LedgerRecovery(
        start,
        first_index,
        scan.scanned,
        scan.reason,
        scan.bad,
        scan.last,
        scan.rebuilt_from,
        index_end,
        index_deleted,
        index_after,
        source,
    )


def _start_file(state: BrokerState, store: DLedgerStore) -> tuple[StartFile, int]:
    """From the third file from the end back to file 0: the first whose first entry passes
    the pre-check and agrees with its index unit (else file 0)."""
    maps = state.store.maps
    firsts = dict((f.name, v) for f, v in store.first_entries(maps))
    candidates: list[StartCandidate] = []
    for i in range(max(0, len(state.commitlog) - _FILES_BACK), -1, -1):
        f = state.commitlog[i]
        v = firsts[f.name]
        why = _pre_check(state, store, v)
        if why is None:
            assert v.header is not None
            candidates.append(StartCandidate(f.name, None, True, f"entry {v.header.index}"))
            return (
                StartFile(
                    f.name,
                    f.start,
                    i,
                    "dledger_pre_check",
                    f"the third data file from the end, or the newest before it whose first "
                    f"entry (index {v.header.index}) passes the pre-check and matches its "
                    "index unit",
                    candidates,
                ),
                v.header.index,
            )
        candidates.append(StartCandidate(f.name, None, False, why))
    f = state.commitlog[0]
    return (
        StartFile(
            f.name,
            f.start,
            0,
            "first_file",
            "no data file's first entry passes the pre-check: recovery starts at file 0",
            candidates,
        ),
        -1,
    )


def _pre_check(state: BrokerState, store: DLedgerStore, v: dl.EntryVerdict) -> str | None:
    """Why a file's first entry fails the pre-check (None: it passes)."""
    if not v.ok or v.header is None:
        return f"{v.reason.value}: {v.detail}"
    h = v.header
    unit = store.index_unit(state.store.maps, h.index) if h.index >= 0 else None
    if unit is None:
        return f"no index unit for entry {h.index}"
    if unit != dl.IndexUnit.of(h):
        return f"index unit {unit} disagrees with the entry"
    return None


@dataclass
class _Scan:
    end: int
    reason: str
    bad: BadRecord | None
    last: EntryInfo | None
    rebuilt_from: tuple[int, int] | None
    scanned: int


def _scan(state: BrokerState, store: DLedgerStore, first_file: int) -> _Scan:
    """The recovery loop from position 0 of the start file: entries with continuity, the blank
    moving to the next file, any other stop ending the scan; index units compared until the
    first one that disagrees."""
    maps = state.store.maps
    idx = first_file
    f = state.commitlog[idx]
    pos = 0
    previous: tuple[int, int] | None = None
    last: EntryInfo | None = None
    rebuilt_from: tuple[int, int] | None = None
    scanned = 0
    while True:
        buf = state.store.view(f.disk)
        try:
            walk = dl.walk_entries(buf, pos, f.start, previous=previous, continuity=True)
        finally:
            buf.release()
        if len(walk):
            if rebuilt_from is None:
                rebuilt_from = _first_disagreement(store, maps, walk, f.start)
            k = len(walk) - 1
            last = EntryInfo(
                int(walk.index[k]),
                int(walk.term[k]),
                f.start + int(walk.positions[k]),
                int(walk.sizes[k]),
            )
            previous = walk.last
        scanned += walk.end - pos
        state.progress(walk.end - pos)
        pos = walk.end
        if walk.stop is None:
            continue
        if walk.stop.reason is cl.CheckReason.BLANK:
            if idx + 1 >= len(state.commitlog):
                size = state.commitlog_file_size
                scanned += size - pos
                return _Scan(
                    f.start + size, "blank_in_last_file", None, last, rebuilt_from, scanned
                )
            scanned += state.commitlog_file_size - pos
            idx += 1
            f = state.commitlog[idx]
            pos = 0
            continue
        stop = walk.stop
        end = f.start + pos
        bad = None
        if stop.reason is not cl.CheckReason.END_OF_DATA:
            magic = stop.header.magic if stop.header is not None else None
            entry_size = stop.header.size if stop.header is not None else None
            bad = BadRecord(
                end,
                state.store.relative(f.disk.path),
                pos,
                stop.reason.value,
                stop.detail,
                entry_size,
                None if magic is None else str(magic),
            )
        return _Scan(end, stop.reason.value, bad, last, rebuilt_from, scanned)


def _first_disagreement(
    store: DLedgerStore, maps: MappedFiles, walk: dl.EntryWalk, file_start: int
) -> tuple[int, int] | None:
    """The index and position of the first entry of ``walk`` whose index unit disagrees with
    it (or is missing)."""
    units = store.index_units(maps, int(walk.index[0]), len(walk))
    ok = (units["magic"] == dl.ENTRY_MAGIC) & (units["pos"] == file_start + walk.positions)
    ok &= (units["size"] == walk.sizes) & (units["index"] == walk.index)
    ok &= units["term"] == walk.term
    k = first_false(ok)
    return (int(walk.index[k]), file_start + int(walk.positions[k])) if k < len(walk) else None


def _truncate_family(family: FileQueue, end: int) -> tuple[list[str], list[FilePosition]]:
    """``MmapFileList.truncateOffset(end)``: files wholly past ``end`` are deleted, the one
    holding it is cut there, earlier ones stay full."""
    deleted: list[str] = []
    kept: list[FilePosition] = []
    size = family.file_size
    for f in family.files:
        if f.start + size > end:
            if end >= f.start:
                kept.append(FilePosition(f.name, end - f.start))
            else:
                deleted.append(f.name)
            continue
        kept.append(FilePosition(f.name, size))
    return deleted, kept


def _committed_index(state: BrokerState, store: DLedgerStore, scan: _Scan) -> str:
    """``loadCheckPoint`` and ``updateCommittedIndex``: the committed index and position after
    ``load()``; returns how they were found."""
    ledger = state.ledger
    assert ledger is not None
    text = dl.committed_index_text(store.checkpoint.pairs)
    if text is None:
        return "the DLedger checkpoint has no committedIndex: none is committed until the election"
    value = java_parse_long(text)
    if value is None:
        state.failures.append(
            LoadFailure(
                "exception",
                str(store.checkpoint.path),
                f"committedIndex {text!r} is not a number: recovery throws, load() fails",
            )
        )
        return "unreadable"
    if value == -1 or ledger.end_index == -1:
        return f"checkpoint committedIndex {value} with ledger end {ledger.end_index}: no change"
    if value < -1 or value < ledger.begin_index:
        return f"checkpoint committedIndex {value} is below the ledger begin: skipped"
    committed = min(value, ledger.end_index)
    pos, size = _entry_pos_size(state, store, committed, scan)
    ledger.committed_index, ledger.committed_pos = committed, pos + size
    clamp = f", clamped to the ledger end {ledger.end_index}" if committed != value else ""
    return f"checkpoint committedIndex {value}{clamp}; its index unit gives the position"


def _entry_pos_size(
    state: BrokerState, store: DLedgerStore, index: int, scan: _Scan
) -> tuple[int, int]:
    """``getEntryPosAndSize`` after recovery: the unit on disk, or the one recovery rewrote
    (the entry as scanned) from the first disagreement on."""
    if scan.rebuilt_from is None or index < scan.rebuilt_from[0]:
        unit = store.index_unit(state.store.maps, index)
        if unit is not None:
            return unit.pos, unit.size
    found = _entry_by_index(state, index)
    return (found.position, found.size) if found is not None else (-1, 0)


def _entry_by_index(state: BrokerState, index: int) -> EntryInfo | None:
    """The kept entry ``index``, found by walking the data files (rare: the unit was rewritten
    or is missing)."""
    for f in state.commitlog:
        buf = state.store.view(f.disk)
        try:
            pos = 0
            while pos < f.wrote:
                walk = dl.walk_entries(buf[: f.wrote], pos, f.start)
                hit = np.flatnonzero(walk.index == index)
                if len(hit):
                    k = int(hit[0])
                    return EntryInfo(
                        index,
                        int(walk.term[k]),
                        f.start + int(walk.positions[k]),
                        int(walk.sizes[k]),
                    )
                if walk.stop is not None or walk.end == pos:
                    break
                pos = walk.end
        finally:
            buf.release()
    return None


def last_record(state: BrokerState, entry: EntryInfo | None) -> RecordInfo | None:
    """The record of the last kept entry, when it reads as one (DLedger kept it either way)."""
    if entry is None:
        return None
    f = state.find_commitlog(entry.position)
    if f is None:
        return None
    buf = state.store.view(f.disk)
    try:
        at = entry.position + dl.BODY_OFFSET - f.start
        r = cl.check_message(buf, at, f.start, state.checks.reput)
    finally:
        buf.release()
    rec = r.record
    if not r.is_message or rec is None:
        return None
    return RecordInfo(
        rec.position,
        rec.store_size,
        state.store.relative(f.disk.path),
        rec.topic,
        rec.queue_id,
        rec.queue_offset,
        rec.store_timestamp,
    )


# --- the reput after start() -------------------------------------------------------------------


def ledger_reput(state: BrokerState, dispatcher: Dispatcher, start: int) -> ReputReport:
    """``ReputMessageService.doReput`` over DLedger data, called until caught up: every
    ``getData`` reads from the reput offset to the file's write position, cut at the committed
    position (after the election, the last entry's end).

    Entries whose record the check certainly accepts and whose size is the record's + 48 are
    dispatched a run at a time; anywhere else ``DLedgerCommitLog.checkMessageAndReturnSize``
    decides, one position at a time, with the reput's rules: a blank rolls to the next file, a
    failure with a size skips that many bytes, one without skips the rest of the buffer.
    """
    ledger = state.ledger
    assert ledger is not None
    end = ledger.end_pos
    opts = state.checks.reput
    reput_at = max(start, state.commitlog_min_offset)
    dispatched = skipped = 0
    stop_at: int | None = None
    stop_reason: str | None = None
    while reput_at < end:
        f = state.find_commitlog(reput_at)
        pos = reput_at - f.start if f is not None else -1
        if f is None or not 0 <= pos < min(f.wrote, end - f.start):
            break  # getData returns null: nothing more is ever read
        limit = min(f.wrote, end - f.start) - pos
        buf = state.store.view(f.disk)
        region = buf[: f.wrote]
        try:
            read, bpos = 0, pos
            while read < limit:
                taken, size = _dispatch_run(state, dispatcher, region, f, bpos, pos + limit)
                dispatched += taken
                reput_at, read, bpos = reput_at + size, read + size, bpos + size
                if read >= limit:
                    break
                c = dl.dispatch_check(region, bpos, f.start, opts)
                r = c.result
                size = c.buffer_size if c.buffer_size != -1 else r.size
                if r.success and size > 0:
                    if r.size > 0:
                        one = gather(region, np.array([c.record_at], np.int64), f.start)
                        run = CheckedRun(one, c.record_at, c.record_at + r.size, None, opts)
                        dispatcher.dispatch_rows(run, np.arange(1, dtype=np.int64), "start")
                        dispatched += 1
                    reput_at, read, bpos = reput_at + size, read + size, bpos + size
                elif r.success:  # the entry blank: the next file
                    reput_at = f.start + state.commitlog_file_size
                    break
                elif size > 0:
                    skipped += 1
                    reput_at += size  # the Java buffer moved by the fields' length instead
                    bpos = c.record_at + read_length(r)
                else:
                    if stop_at is None:
                        stop_at, stop_reason = reput_at, r.reason.value
                    reput_at += limit - read  # DLedger mode skips the rest of the buffer
                    break
        finally:
            region.release()
            buf.release()
    rule = "max consume-queue maxPhysicOffset, at least the commitlog min offset (4.9)"
    return ReputReport(start, end, rule, dispatched, skipped, stop_at, stop_reason)


def _dispatch_run(
    state: BrokerState,
    dispatcher: Dispatcher,
    region: memoryview,
    f: CommitlogFile,
    bpos: int,
    read_end: int,
) -> tuple[int, int]:
    """Dispatch the entries from ``bpos`` the reput certainly takes whole (their record passes
    and fills the entry, and they start before ``read_end``); returns how many, and bytes."""
    walk = dl.walk_entries(region, bpos, f.start, max_entries=RUN_RECORDS)
    if not len(walk):
        return 0, 0
    cols = gather(region, walk.positions + dl.BODY_OFFSET, f.start)
    ok = certain_mask(cols, state.checks.reput) & (cols.store_size + dl.BODY_OFFSET == walk.sizes)
    ok &= walk.positions < read_end
    k = first_false(ok)
    if not k:
        return 0, 0
    run = CheckedRun(
        cols.select(slice(0, k)),
        bpos,
        int(walk.positions[k - 1] + walk.sizes[k - 1]),
        None,
        state.checks.reput,
    )
    dispatcher.dispatch_rows(run, np.arange(k, dtype=np.int64), "start")
    return k, int(walk.sizes[:k].sum())


# --- the report section ------------------------------------------------------------------------


def _text_report(t: TextFile) -> TextFileReport:
    return TextFileReport(
        t.raw is not None, t.lines, dict(t.pairs or {}), t.bak is not None, t.tmp_present
    )


def ledger_report(
    state: BrokerState,
    recovery: LedgerRecovery,
    data_files_before: list[str],
    kept_damage: list[BadRecord] | None,
) -> DLedgerReport:
    store = _ledger(state)
    ledger = state.ledger
    assert ledger is not None
    first = state.commitlog[0].start if state.commitlog else 0
    term = store.current_term
    rebuilt = recovery.index_rebuilt_from
    load = LedgerState(
        "CANDIDATE",
        None,
        term,
        ledger.begin_index,
        ledger.end_index,
        ledger.end_term,
        ledger.committed_index,
        ledger.committed_pos,
        ledger.max_offset(ledger.committed_pos, first),
    )
    started = LedgerState(
        "LEADER",
        store.self_id,
        term,
        ledger.begin_index,
        ledger.end_index,
        ledger.end_term,
        ledger.end_index,
        ledger.end_pos,
        ledger.max_offset(ledger.end_pos, first),
    )
    return DLedgerReport(
        home=str(store.home),
        self_id=store.self_id,
        data_file_size=state.commitlog_file_size,
        data_files_before=data_files_before,
        index_files_before=[f.name for f in store.index.files],
        start_entry_index=recovery.start_entry_index,
        scanned_bytes=recovery.scanned_bytes,
        end_reason=recovery.end_reason,
        first_bad_entry=recovery.first_bad,
        last_entry=recovery.last_entry,
        data_end=ledger.data_end,
        index_end=recovery.index_end,
        index_rebuilt_from=rebuilt[0] if rebuilt is not None else None,
        index_rebuilt_position=rebuilt[1] if rebuilt is not None else None,
        index_units_rewritten=0 if rebuilt is None else ledger.end_index - rebuilt[0] + 1,
        data_files_deleted=list(state.commitlog_deleted),
        index_files_deleted=recovery.index_files_deleted,
        data_files_after=[FilePosition(f.name, f.wrote) for f in state.commitlog],
        index_files_after=recovery.index_files_after,
        checkpoint=_text_report(store.checkpoint),
        currterm=_text_report(store.currterm),
        committed_index_source=recovery.committed_source,
        after_load=load,
        after_start=started,
        undispatched_at_load=max(started.max_offset - load.max_offset, 0),
        kept_damage=kept_damage,
        assumption=ASSUMPTION,
        checkpoint_after_shutdown={
            "committed_index": ledger.end_index,
            "end_index": ledger.end_index,
        },
    )
