"""Commitlog checks: every file from its first byte, not only where recovery would look.

:func:`check_file` walks one file with the shared scanner (:func:`~rmqinspect.format.scan.
scan_file`, resynchronising past damage), so every record verdict is ``check_message``'s; on top
of each checked run it looks, with numpy, at what the broker never checks (PHYSICALOFFSET, the
5.x property CRC, compressed bodies, store times, room for the BLANK) and at the consume queues
that must serve the run's records (:mod:`.queues`). What needs the neighbouring files (a file
that ends without a BLANK while later files hold data, bytes after the last record of the log,
store times across files, the file list itself) is judged by :func:`.files.check_files` once every
file is done. A file is checked whole or in byte ranges (:func:`check_range`, planned by
:mod:`.ranges`), whose results :func:`merge_ranges` makes one walk's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.coverage import QueueCoverage
from rmqinspect.analysis.verify.dledger import (
    HEADER_CHECKS,
    EntryChecks,
    EntrySpan,
    blank_length,
    record_size_at,
)
from rmqinspect.analysis.verify.finding import Findings
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.format.columns import RecordColumns, decode_text, gather
from rmqinspect.format.compression import consumer_body
from rmqinspect.format.hexdump import hexdump_lines
from rmqinspect.format.npbytes import Buffer
from rmqinspect.format.scan import (
    CheckedRun,
    Skipped,
    WalkPolicy,
    data_extent,
    prop_crc_tails,
    prop_crcs,
)
from rmqinspect.store.files import StoreFile

_MESSAGE_MAGICS = (cl.MESSAGE_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE_V2)
_REASONS = {
    cl.CheckReason.BAD_MAGIC: "commitlog.magic",
    cl.CheckReason.BODY_CRC_MISMATCH: "commitlog.body_crc",
    cl.CheckReason.TOTAL_SIZE_MISMATCH: "commitlog.total_size",
    cl.CheckReason.PARSE_EXCEPTION: "commitlog.parse",
    cl.CheckReason.OUT_OF_BOUNDS: "commitlog.size_bounds",
    cl.CheckReason.PROP_CRC_MISSING: "commitlog.prop_crc",
    cl.CheckReason.PROP_CRC_MISMATCH: "commitlog.prop_crc",
    cl.CheckReason.DUP_INFO_INVALID: "commitlog.parse",
}
_HEXDUMP_BEFORE, _HEXDUMP_AFTER = 32, 96


# --- one record -------------------------------------------------------------------------------


def record_failures(
    buf: Buffer, pos: int, file_start: int, result: cl.CheckResult, ctx: Context
) -> list[str]:
    """Every check the record at ``pos`` fails, the broker's verdict (``result``) first: what
    ``check_message`` rejects it for, then what else is wrong with it (fields that do not add
    up, BODYCRC, the property CRC, a compressed body, PHYSICALOFFSET). Empty for an intact
    record."""
    failed: list[str] = []
    if not result.is_message:
        failed.append(_broker_check(buf, pos, result))
        if failed[0] in ("commitlog.magic", "commitlog.size_bounds"):
            return failed  # no record to look into
    cols = gather(buf, np.array([pos], np.int64), file_start)

    def add(check: str) -> None:
        if check not in failed:
            failed.append(check)

    if not cols.well_formed[0]:
        add("commitlog.total_size")
    else:
        if ctx.options.check_crc and cols.body_crcs()[0] != cols.body_crc[0]:
            add("commitlog.body_crc")
        if _checks_prop_crc(ctx):
            present, stored = prop_crc_tails(cols)
            if present[0] and prop_crcs(cols, np.array([0]))[0] != stored[0]:
                add("commitlog.prop_crc")
        if _compression_error(cols, 0) is not None:
            add("commitlog.body_compression")
    if int(cols.physical_offset_field[0]) != file_start + pos:
        add("commitlog.physical_offset")
    return failed


def _broker_check(buf: Buffer, pos: int, result: cl.CheckResult) -> str:
    """The check id a rejected record falls under: no magic, an impossible TOTALSIZE, else the
    check's own reason (fields that do not add up count as ``total_size`` whichever part the
    broker tripped on first)."""
    size = result.store_size
    if result.magic not in _MESSAGE_MAGICS:
        return "commitlog.magic"
    if size is None or size < cl.MIN_RECORD_SIZE or size > len(buf) - pos:
        return "commitlog.size_bounds"
    check = _REASONS[result.reason]
    if check == "commitlog.parse" and not gather(buf, np.array([pos], np.int64)).well_formed[0]:
        return "commitlog.total_size"
    return check


def _compression_error(cols: RecordColumns, i: int) -> str | None:
    """Why record ``i``'s body, compressed by its producer (sysFlag), does not decompress;
    None when it does or is not compressed. The broker never looks; its consumers do."""
    sys_flag = int(cols.sys_flag[i])
    if not sys_flag & cl.COMPRESSED_FLAG:
        return None
    return consumer_body(cols.body(i), sys_flag).error


def _checks_prop_crc(ctx: Context) -> bool:
    return ctx.options.check_crc and ctx.profile.supports_prop_crc


def run_failures(ctx: Context, cols: RecordColumns) -> list[tuple[int, str, str]]:
    """What the broker's check does not look at, over the records of one checked run: (row,
    check id, detail) for each record whose PHYSICALOFFSET names another place, whose
    compressed body does not decompress, whose ``__CRC32#`` differs from its CRC, or that lacks
    the ``__CRC32#`` a record next to it carries (damage destroyed the tail:
    enabledAppendPropCRC is a broker-wide setting, so only the one record where it was
    switched off is also flagged)."""
    out: list[tuple[int, str, str]] = []
    positions = cols.positions + cols.file_start
    for i in np.flatnonzero(cols.physical_offset_field != positions).tolist():
        out.append(
            (
                i,
                "commitlog.physical_offset",
                f"PHYSICALOFFSET says {int(cols.physical_offset_field[i])}: a copy of a record "
                "from elsewhere (stale bytes of an earlier generation or another file)",
            )
        )
    for i in np.flatnonzero(cols.sys_flag & cl.COMPRESSED_FLAG).tolist():
        error = _compression_error(cols, i)
        if error is not None:
            out.append((i, "commitlog.body_compression", f"the body does not decompress: {error}"))
    if _checks_prop_crc(ctx):
        present, stored = prop_crc_tails(cols)
        rows = np.flatnonzero(present)
        computed = prop_crcs(cols, rows)
        bad = computed != stored[rows]
        for i, c in zip(rows[bad].tolist(), computed[bad].tolist(), strict=True):
            detail = f"__CRC32# holds {int(stored[i])}, the record's CRC is {c}"
            out.append((i, "commitlog.prop_crc", detail))
        before = np.concatenate(([False], present[:-1]))
        after = np.concatenate((present[1:], [False]))
        for i in np.flatnonzero(~present & (before | after)).tolist():
            detail = "no __CRC32# tail, though the record next to it has one"
            out.append((i, "commitlog.prop_crc", detail))
    return sorted(out)


# --- one file ---------------------------------------------------------------------------------


@dataclass
class TopicCount:
    records: int = 0
    bytes: int = 0


@dataclass
class FileResult:
    """What checking one commitlog file found, for the store-wide checks and the summary."""

    file: str  # relative to the store
    start: int
    length: int
    findings: Findings = field(default_factory=Findings)
    records: int = 0
    bytes: int = 0
    topics: dict[str, TopicCount] = field(default_factory=dict)
    first_store_timestamp: int | None = None
    last_store_timestamp: int | None = None
    max_store_timestamp: int | None = None  # damaged records' readable headers included
    extent: int = 0  # bytes up to the last non-zero byte
    end: str = "empty"  # blank | zeros | damage | empty: how the walk of the file ended
    end_position: int = 0  # where: the BLANK, the first zero of the tail, or the bad bytes
    tail: tuple[int, int, str] | None = None  # unreadable bytes ending the data: (pos, len, why)
    tail_check: str = "commitlog.magic"  # what those bytes are when later files hold data
    damaged_bytes: int = 0
    intact_after_damage: int = 0
    coverage: QueueCoverage = field(default_factory=QueueCoverage)
    entries: EntrySpan | None = None  # a DLedger data file's first and last entries

    @property
    def physical_end(self) -> int:
        """End of the file's data in the commitlog stream."""
        return self.start + self.extent


@dataclass
class RangeResult:
    """What checking the records of one byte range of a commitlog file found, before it is
    stitched to the ranges before it (:func:`merge_ranges`)."""

    begin: int  # where the walk began
    start: int | None  # the record boundary the range's checks start at; None: none found
    part: FileResult
    stop: int | None = None  # the boundary the next range's records start at; None: the end
    # The run checks' consume-queue findings and coverage are kept apart: they only count
    # while no earlier range of the file met damage (the restart truncates there).
    queue_findings: Findings = field(default_factory=Findings)
    damage_at: int | None = None  # the range's first damage
    first_after: int | None = None  # its first record at its own position after that damage
    own: int = 0  # records at their own position (PHYSICALOFFSET), all of the range
    first_own: int | None = None
    first_timestamp_position: int | None = None  # where first_store_timestamp was read


def check_file(ctx: Context, f: StoreFile) -> FileResult:
    """Check one commitlog file from its first byte (see the module docstring)."""
    if not f.length:
        return FileResult(ctx.rel(f.path), f.start, f.length)
    return merge_ranges(ctx, f, [check_range(ctx, f, 0, None, None, sync=False)])


def check_range(
    ctx: Context, f: StoreFile, begin: int, end: int | None, extent: int | None, *, sync: bool
) -> RangeResult:
    """Check the records that start in ``[begin, end)`` of ``f`` (``end`` = the file's length:
    up to the end of the walk). With ``sync`` ``begin`` is any byte: the walk's resync finds
    the first record boundary at or after it, which :func:`merge_ranges`' caller compares with
    where the range before stopped; without, ``begin`` is a boundary of the whole file's walk.
    ``end`` None: the file's last range, to the end of its walk. ``extent``: the file's data
    extent when the caller knows it (else read here)."""
    part = FileResult(ctx.rel(f.path), f.start, f.length)
    out = RangeResult(begin, None if sync else begin, part)
    buf = ctx.store.view(f)
    try:
        part.extent = data_extent(buf, 0, ctx.store.maps.data_end(f)) if extent is None else extent
        # Records start before the file's length: past it, nothing is the next range's.
        _walk(ctx, f, buf, f.length + 1 if end is None else end, out)
        part.coverage.compact()
    finally:
        buf.release()
        # The walk dropped the pages it passed; this drops what the tail scan and the
        # findings' look-backs read, so no file stays resident after its unit.
        ctx.store.maps.release(f, 0, f.length)
    return out


def merge_ranges(ctx: Context, f: StoreFile, ranges: list[RangeResult]) -> FileResult:
    """One file's result from its consecutive ranges (each starting where the one before
    stopped): what one walk of the whole file finds, field for field."""
    out = FileResult(ctx.rel(f.path), f.start, f.length)
    findings = out.findings
    damage_at: int | None = None
    first_after: int | None = None
    last_ts: int | None = None
    for r in ranges:
        p = r.part
        out.extent = p.extent
        first = p.first_store_timestamp
        if first is not None and r.first_timestamp_position is not None:
            # The range compared its first record with nothing: its predecessor is here.
            if last_ts is not None and first < last_ts:
                at = r.first_timestamp_position
                findings.add(
                    "commitlog.timestamp_backwards",
                    out.file,
                    f"STORETIMESTAMP {first} is {last_ts - first} ms before the record's "
                    "predecessor",
                    file_position=at,
                    physical_offset=f.start + at,
                )
            if out.first_store_timestamp is None:
                out.first_store_timestamp = first
        if p.last_store_timestamp is not None:
            last_ts = out.last_store_timestamp = p.last_store_timestamp
        findings.extend(p.findings)
        if damage_at is None:
            findings.extend(r.queue_findings)
            out.coverage.extend(p.coverage)
            if r.damage_at is not None:
                damage_at, first_after = r.damage_at, r.first_after
                out.intact_after_damage += p.intact_after_damage
        else:
            out.intact_after_damage += r.own
            if first_after is None:
                first_after = r.first_own
        out.records += p.records
        out.bytes += p.bytes
        for name, count in p.topics.items():
            t = out.topics.setdefault(name, TopicCount())
            t.records += count.records
            t.bytes += count.bytes
        if p.max_store_timestamp is not None:
            out.max_store_timestamp = max(p.max_store_timestamp, out.max_store_timestamp or 0)
        if p.end != "empty":
            out.end, out.end_position = p.end, p.end_position
        if p.tail is not None:
            out.tail, out.tail_check = p.tail, p.tail_check
        out.damaged_bytes += p.damaged_bytes
        if p.entries is not None:
            out.entries = p.entries
    if out.intact_after_damage and first_after is not None:
        findings.add(
            "commitlog.intact_after_damage",
            out.file,
            f"{out.intact_after_damage} intact records follow the bad record at file position "
            f"{damage_at}; the broker's restart discards them, salvage recovers them",
            file_position=first_after,
            physical_offset=f.start + first_after,
        )
    return out


def _walk(ctx: Context, f: StoreFile, buf: memoryview, end: int, rr: RangeResult) -> None:
    """The events of the walk from ``rr.begin`` whose records start before ``end``."""
    out = rr.part
    last_ts: int | None = None
    entries = EntryChecks(ctx, f, buf, out.file, out.findings) if ctx.store.dledger else None
    if entries is not None:
        out.entries = entries.span
    events = ctx.store.scan_file(f, buf, rr.begin, ctx.check, policy=WalkPolicy.FORENSIC)
    for event in ctx.store.releasing(f, events, rr.begin):
        if rr.start is None:  # looking for the first record boundary from ``begin``
            if isinstance(event, Skipped):
                if event.end >= out.extent:
                    # No record from ``begin`` on: the walk ends, and what ended it is at
                    # the boundary before ``begin``, checked by the stitch from there.
                    return
                rr.start = event.end
                if event.end >= end:
                    rr.stop = event.end
                    return
                continue
            if not len(event.columns) and event.failed:
                continue  # no record at ``begin``: the Skipped after it says where one is
            rr.start = event.start
        if event.start >= end:
            rr.stop = event.start
            return
        if isinstance(event, Skipped):
            if entries is not None and event.frame:
                # DLedger keeps the entry: its record is bad, the log goes on.
                at = event.record_position
                entries.entries(
                    np.array([event.start], np.int64), np.array([record_size_at(buf, at)], np.int64)
                )
                _skipped(ctx, f, buf, event, out)
                continue
            if entries is not None:
                entries.damage()
            _skipped(ctx, f, buf, event, out)
            if rr.damage_at is None:
                rr.damage_at = event.start
            continue
        cols = event.columns
        inside = int(np.searchsorted(cols.positions, end))
        if inside < len(cols):
            cols = cols.select(slice(0, inside))  # the rest are the next range's
        if entries is not None:
            entries.entries(cols.positions - dl.BODY_OFFSET, cols.store_size)
        if len(cols):
            last_ts = _run(ctx, f, buf, cols, rr, last_ts)
        _room_for_blank(f, buf, cols, out)
        if inside < len(event.columns) or event.end >= end:
            # Whatever ended the run (a BLANK, damage) is at or past ``end``: the next range's.
            rr.stop = (
                int(event.columns.positions[inside]) if inside < len(event.columns) else event.end
            )
            return
        _run_end(ctx, buf, event, out)


def _run(
    ctx: Context,
    f: StoreFile,
    buf: memoryview,
    cols: RecordColumns,
    rr: RangeResult,
    last_ts: int | None,
) -> int | None:
    """The checks the broker does not make, over the records of one checked run; returns the
    store time of its last record that sits where its PHYSICALOFFSET says."""
    out = rr.part
    findings = out.findings
    out.records += len(cols)
    out.bytes += int(cols.store_size.sum())
    tids, topics = cols.topic_ids()
    names = [decode_text(t) for t in topics]
    counts = np.bincount(tids, minlength=len(topics))
    sizes = np.bincount(tids, weights=cols.store_size, minlength=len(topics))
    for name, n, b in zip(names, counts.tolist(), sizes.tolist(), strict=True):
        t = out.topics.setdefault(name, TopicCount())
        t.records += n
        t.bytes += int(b)
    positions = cols.positions + f.start
    own = cols.physical_offset_field == positions
    at = np.flatnonzero(own)
    if len(at):
        rr.own += len(at)
        if rr.first_own is None:
            rr.first_own = int(cols.positions[at[0]])
        if rr.damage_at is not None:
            out.intact_after_damage += len(at)
            if rr.first_after is None:
                rr.first_after = int(cols.positions[at[0]])
    for i, check, detail in run_failures(ctx, cols):
        _bad_record(ctx, findings, out.file, buf, int(cols.positions[i]), f.start, check, detail)
    ts = cols.store_timestamp[own]
    if len(ts):
        if out.first_store_timestamp is None:
            out.first_store_timestamp = int(ts[0])
            rr.first_timestamp_position = int(cols.positions[at[0]])
        out.last_store_timestamp = int(ts[-1])
        top = int(ts.max())
        out.max_store_timestamp = max(top, out.max_store_timestamp or top)
        before = np.concatenate(([last_ts if last_ts is not None else ts[0]], ts[:-1]))
        for k in np.flatnonzero(ts < before).tolist():
            i = int(at[k])
            findings.add(
                "commitlog.timestamp_backwards",
                out.file,
                f"STORETIMESTAMP {int(ts[k])} is {int(before[k] - ts[k])} ms before the "
                "record's predecessor",
                file_position=int(cols.positions[i]),
                physical_offset=int(positions[i]),
            )
        last_ts = int(ts[-1])
    if rr.damage_at is None:
        rows = np.flatnonzero(own & cols.enters_consume_queue())
        out.coverage.add_run(ctx, cols, rows, tids, names, rr.queue_findings, out.file)
    return last_ts


def _room_for_blank(f: StoreFile, buf: memoryview, cols: RecordColumns, out: FileResult) -> None:
    """A record leaves room for a BLANK (8 bytes) before the end of the file."""
    room = len(buf) - cl.END_FILE_MIN_BLANK_LENGTH
    if len(cols) and cols.end > room:
        at = int(cols.positions[-1])
        out.findings.add(
            "commitlog.blank",
            out.file,
            f"the record ends {len(buf) - cols.end} bytes before the end of the file: the "
            f"broker keeps {cl.END_FILE_MIN_BLANK_LENGTH} bytes for a BLANK",
            file_position=at,
            physical_offset=f.start + at,
        )


def _run_end(ctx: Context, buf: memoryview, run: CheckedRun, out: FileResult) -> None:
    """What ended a run: a BLANK, whose TOTALSIZE is the rest of the file, or the zeros after
    the data."""
    stop = run.stop
    if stop is None:
        return
    if stop.is_blank:
        out.end, out.end_position = "blank", run.end
        # A DLedger blank is magic -1 then the remaining length; a plain one TOTALSIZE first.
        size = blank_length(buf, run.end) if ctx.store.dledger else stop.store_size
        if size != len(buf) - run.end:
            _bad_record(
                ctx,
                out.findings,
                out.file,
                buf,
                run.end,
                out.start,
                "commitlog.blank",
                f"BLANK length {size}, but {len(buf) - run.end} bytes are left in the file",
            )
    elif run.end >= out.extent:
        out.end, out.end_position = "zeros", run.end


def _skipped(ctx: Context, f: StoreFile, buf: memoryview, event: Skipped, out: FileResult) -> None:
    """Bytes no record could be read from. A record header there (a message magic) is a bad
    record wherever it is. Bytes without one are a hole when records follow in the file; the
    last such stretch of a file is judged with its neighbours (:func:`.files.check_files`): stale
    bytes after the log's last record, or a hole when later files hold data. In a DLedger
    store an entry header DLedger rejects is judged by DLedger's rule it breaks, and an entry
    it keeps around a bad record is that record's failure (the broker serves it)."""
    out.damaged_bytes += event.length
    r = event.result
    if ctx.store.dledger is not None and not event.frame:
        _bad_entry(ctx, f, buf, event, out)
        return
    if r.record is not None and r.magic in _MESSAGE_MAGICS:
        ts = r.record.store_timestamp
        out.max_store_timestamp = max(ts, out.max_store_timestamp or ts)
    at = event.record_position
    checks = record_failures(buf, at, f.start, r, ctx)
    what = f"{r.reason.value}: {r.detail}" if r.detail else r.reason.value
    others = f"; also fails {', '.join(checks[1:])}" if len(checks) > 1 else ""
    if event.frame:
        kept = (
            f"{what}{others}; DLedger checks no CRC and keeps the entry at {f.start + event.start}"
            ": the broker serves this record as it is"
        )
        _bad_record(ctx, out.findings, out.file, buf, at, f.start, checks[0], kept)
        return
    last = event.end >= out.extent
    if checks[0] == "commitlog.magic" and last:
        out.end, out.end_position = "damage", event.start
        out.tail = (event.start, event.length, r.detail or r.reason.value)
        return
    if last:
        out.end, out.end_position = "damage", event.start
    follows = (
        f"; the next intact record starts {event.length} bytes on"
        if not last
        else "; nothing readable follows in the file"
    )
    _bad_record(
        ctx,
        out.findings,
        out.file,
        buf,
        event.start,
        f.start,
        checks[0],
        f"{what}{others}{follows}",
    )


def _bad_entry(
    ctx: Context, f: StoreFile, buf: memoryview, event: Skipped, out: FileResult
) -> None:
    """A DLedger entry header DLedger's recovery rejects (it stops there and truncates). No
    entry magic or no size at the end of the data is judged with the neighbouring files, as
    bytes without a record header are in a plain commitlog."""
    r = event.result
    check = HEADER_CHECKS.get(r.reason, "dledger.entry_magic")
    last = event.end >= out.extent
    if last:
        out.end, out.end_position = "damage", event.start
        if r.reason in (cl.CheckReason.BAD_ENTRY_MAGIC, cl.CheckReason.END_OF_DATA):
            out.tail = (event.start, event.length, r.detail or r.reason.value)
            out.tail_check = check
            return
    follows = (
        f"; the next entry starts {event.length} bytes on"
        if not last
        else "; no entry follows in the file"
    )
    _bad_record(
        ctx,
        out.findings,
        out.file,
        buf,
        event.start,
        f.start,
        check,
        f"{r.detail or r.reason.value}: DLedger's recovery stops here and truncates the log"
        f"{follows}",
    )


def _bad_record(
    ctx: Context,
    findings: Findings,
    file: str,
    buf: memoryview,
    pos: int,
    file_start: int,
    check: str,
    detail: str,
) -> None:
    dump = (
        hexdump_lines(buf, pos - _HEXDUMP_BEFORE, pos + _HEXDUMP_AFTER)
        if ctx.options.hexdump
        else ()
    )
    findings.add(
        check,
        file,
        detail,
        file_position=pos,
        physical_offset=file_start + pos,
        hexdump=dump,
    )
