"""DLedger commitlog files (dledger-store-format.md): entry headers, index units, the
``checkpoint``/``currterm`` text files, DLedger's own header rules, and the walk over a data file.

Pure functions over one whole data file given as a buffer and the file's first position in the
DLedger data space. That space is RocketMQ's physical offset space: the record inside an entry
sits at the entry's position + :data:`BODY_OFFSET`, which is its PHYSICALOFFSET. Buffer positions
are positions in the file unless named otherwise. The record is an ordinary commitlog record: it
is gathered by :mod:`rmqinspect.format.columns` and judged by :mod:`rmqinspect.format.scan` and
``cl.check_message``, never decoded here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from rmqinspect.errors import DecodeError
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RUN_RECORDS, RecordColumns, gather, headers_plausible
from rmqinspect.format.javamap import java_map_order
from rmqinspect.format.npbytes import I64, Buffer, first_false, windows
from rmqinspect.format.scan import (
    CheckedRun,
    FileEvent,
    Skipped,
    WalkPolicy,
    certain_mask,
    data_extent,
)

ENTRY_MAGIC = 1  # DLedgerMmapFileStore.MAGIC_1 = CURRENT_MAGIC
BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE: the rest of the file is a blank
HEADER_SIZE = 44  # DLedgerEntry.HEADER_SIZE: an entry must be larger than this
BODY_OFFSET = 48  # DLedgerEntry.BODY_OFFSET: the header's length, where the body starts
MIN_BLANK_LEN = 8  # MmapFileList.MIN_BLANK_LEN: an entry leaves at least this much free
INDEX_UNIT_SIZE = 32
INDEX_FILE_SIZE = 32 * 5 * 1024 * 1024  # mappedFileSizeForEntryIndex; RocketMQ cannot change it

ENTRY_FIELDS = (
    "magic",
    "size",
    "index",
    "term",
    "pos",
    "channel",
    "chain_crc",
    "body_crc",
    "body_size",
)
ENTRY_HEAD = struct.Struct(">iiqqqiiii")
INDEX_FIELDS = ("magic", "pos", "size", "index", "term")  # not the entry header's order
INDEX_UNIT = struct.Struct(">iqiqq")
_CODES = {"i": ">i4", "q": ">i8"}
ENTRY_DTYPE = np.dtype(
    list(zip(ENTRY_FIELDS, (_CODES[c] for c in ENTRY_HEAD.format[1:]), strict=True))
)
INDEX_DTYPE = np.dtype(
    list(zip(INDEX_FIELDS, (_CODES[c] for c in INDEX_UNIT.format[1:]), strict=True))
)
_MAGIC_SIZE = struct.Struct(">ii")
_NONE_YET = (-1, -1)  # recovery's lastEntryIndex/lastEntryTerm before the first entry
_I32 = struct.Struct(">i")
R = cl.CheckReason


@dataclass(frozen=True, slots=True)
class EntryHeader:
    """The 48 bytes before an entry's body (``DLedgerEntryCoder.encode``)."""

    magic: int
    size: int  # the whole entry: header + body
    index: int
    term: int
    pos: int  # the entry's own position in the data space
    channel: int
    chain_crc: int  # never computed (always 0)
    body_crc: int  # never computed (always 0)
    body_size: int

    @classmethod
    def decode(cls, buf: Buffer, at: int = 0) -> EntryHeader:
        if at < 0 or at + BODY_OFFSET > len(buf):
            raise DecodeError("fewer than 48 bytes left for a DLedger entry header", at)
        return cls(*ENTRY_HEAD.unpack_from(buf, at))

    @property
    def message_position(self) -> int:
        """Where the body (the RocketMQ record) starts: its physical offset."""
        return self.pos + BODY_OFFSET


@dataclass(frozen=True, slots=True)
class IndexUnit:
    """One 32-byte unit of the index files, at ``index * 32`` (``encodeIndex``)."""

    magic: int
    pos: int
    size: int
    index: int
    term: int

    @classmethod
    def of(cls, entry: EntryHeader) -> IndexUnit:
        return cls(entry.magic, entry.pos, entry.size, entry.index, entry.term)


def encode_blank(remaining: int) -> bytes:
    """The head of the blank that closes a full data file: magic -1 and the remaining length.
    ``MmapFileList.preAppend`` writes zeros after it to the end of the file; a file created
    zeroed already holds them."""
    return _MAGIC_SIZE.pack(BLANK_MAGIC, remaining)


# --- DLedger's header rules ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryVerdict:
    """DLedger's view of the bytes at one position: ``reason`` is OK for an entry it keeps,
    BLANK for the end-of-file blank, else why its recovery stops there."""

    reason: cl.CheckReason
    detail: str = ""
    header: EntryHeader | None = None

    @property
    def ok(self) -> bool:
        return self.reason is R.OK


def entry_verdict(
    buf: Buffer, at: int, file_start: int, previous: tuple[int, int] | None = None
) -> EntryVerdict:
    """``DLedgerMmapFileStore.recover``'s checks on the entry at ``at``, in its order; with
    ``previous`` (the last kept entry's index and term, or :data:`_NONE_YET` before the first)
    also the index and term continuity."""
    if at + 4 > len(buf):
        return EntryVerdict(R.BEYOND_FILE_END, "no magic: the file ends")
    magic = _I32.unpack_from(buf, at)[0]
    if magic == BLANK_MAGIC:
        return EntryVerdict(R.BLANK)
    if at + BODY_OFFSET > len(buf):
        return EntryVerdict(R.BEYOND_FILE_END, "the header runs past the end of the file")
    h = EntryHeader.decode(buf, at)
    where = file_start + at
    if h.size == 0:
        return EntryVerdict(R.END_OF_DATA, "entry size 0: no data was written here", h)
    if h.pos != where:
        return EntryVerdict(R.POS_FIELD_MISMATCH, f"pos field {h.pos}, entry at {where}", h)
    if h.body_size + BODY_OFFSET != h.size:
        return EntryVerdict(
            R.BODY_SIZE_MISMATCH, f"size {h.size} != body size {h.body_size} + 48", h
        )
    if not 0 <= at + h.size <= len(buf):
        return EntryVerdict(R.BEYOND_FILE_END, f"a {h.size}-byte entry runs past the file", h)
    if h.magic != ENTRY_MAGIC:
        return EntryVerdict(R.BAD_ENTRY_MAGIC, f"entry magic {h.magic}", h)
    if previous is not None and previous[0] != -1 and h.index != previous[0] + 1:
        return EntryVerdict(R.INDEX_NOT_CONSECUTIVE, f"index {h.index} after {previous[0]}", h)
    if previous is not None and h.term < previous[1]:
        return EntryVerdict(R.TERM_DECREASED, f"term {h.term} after {previous[1]}", h)
    if h.size <= HEADER_SIZE:
        return EntryVerdict(R.SIZE_TOO_SMALL, f"entry size {h.size} <= 44", h)
    return EntryVerdict(R.OK, "", h)


def first_entry_verdict(buf: Buffer, file_start: int) -> EntryVerdict:
    """The pre-check of a data file's first entry that chooses where recovery starts (the index
    unit comparison is the caller's): magic not -1 and at least 1, size > 44, pos = the file
    start, body size + 48 = size. A magic above 1 passes here (``MAGIC_1 <= CURRENT_MAGIC`` is
    constant), though the scan then stops on it."""
    if len(buf) < BODY_OFFSET:
        return EntryVerdict(R.BEYOND_FILE_END, "the file is shorter than an entry header")
    h = EntryHeader.decode(buf, 0)
    if h.magic == BLANK_MAGIC or h.magic < ENTRY_MAGIC:
        return EntryVerdict(R.BAD_ENTRY_MAGIC, f"entry magic {h.magic}", h)
    if h.size <= HEADER_SIZE:
        return EntryVerdict(R.SIZE_TOO_SMALL, f"entry size {h.size} <= 44", h)
    if h.pos != file_start:
        return EntryVerdict(R.POS_FIELD_MISMATCH, f"pos field {h.pos}, file at {file_start}", h)
    if h.body_size + BODY_OFFSET != h.size:
        return EntryVerdict(
            R.BODY_SIZE_MISMATCH, f"size {h.size} != body size {h.body_size} + 48", h
        )
    return EntryVerdict(R.OK, "", h)


# --- walking entries -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class EntryWalk:
    """Entries from a position that pass DLedger's header rules, and what ended them: a
    verdict at ``end`` (BLANK, or why recovery stops there), or None at the entry limit."""

    positions: I64  # buffer positions of the entries
    sizes: I64
    index: I64
    term: I64
    end: int  # buffer position after the last entry
    stop: EntryVerdict | None

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def last(self) -> tuple[int, int] | None:
        """(index, term) of the last entry, for the continuity of the next walk."""
        return (int(self.index[-1]), int(self.term[-1])) if len(self) else None


def headers(buf: Buffer, positions: I64) -> np.ndarray:
    """The entry headers at ``positions`` (each with 48 bytes inside ``buf``) as
    :data:`ENTRY_DTYPE` rows."""
    data = np.frombuffer(buf, np.uint8)
    rows: np.ndarray = windows(data, positions, BODY_OFFSET).view(ENTRY_DTYPE).reshape(-1)
    return rows


def walk_entries(
    buf: Buffer,
    pos: int = 0,
    file_start: int = 0,
    *,
    previous: tuple[int, int] | None = None,
    continuity: bool = False,
    max_entries: int = RUN_RECORDS,
) -> EntryWalk:
    """Follow entry sizes from ``pos`` through entries DLedger keeps, for at most
    ``max_entries``. With ``continuity`` each index must follow the one before (the first one
    ``previous``, when given) and terms must not fall, as in recovery; without, each entry is
    judged alone (the inspection commands list what every entry holds).

    The loop reads only the sizes, the sequential part; the rules are then checked for the
    whole chain with numpy, and the chain is cut at the first entry that fails them.
    """
    limit = len(buf)
    unpack = _MAGIC_SIZE.unpack_from
    starts: list[int] = []
    append = starts.append
    at = pos
    try:
        for _ in range(max_entries):
            magic, size = unpack(buf, at)
            if magic == BLANK_MAGIC or size <= HEADER_SIZE or at + size > limit:
                break
            append(at)
            at += size
    except struct.error:
        pass  # fewer than 8 bytes left: the chain ran off the buffer
    p = np.array(starts, np.int64)
    h = headers(buf, p)
    sizes = h["size"].astype(np.int64)
    index = h["index"].astype(np.int64)
    term = h["term"].astype(np.int64)
    ok = (h["pos"] == file_start + p) & (h["body_size"].astype(np.int64) + BODY_OFFSET == sizes)
    ok &= h["magic"] == ENTRY_MAGIC
    before = previous or _NONE_YET
    if continuity and len(p):
        ok[1:] &= (index[1:] == index[:-1] + 1) & (term[1:] >= term[:-1])
        ok[0] &= bool(before[0] == -1 or index[0] == before[0] + 1) and bool(term[0] >= before[1])
    k = first_false(ok)
    if k == len(p) and len(p) == max_entries:
        return EntryWalk(p, sizes, index, term, at, None)
    end = starts[k] if k < len(p) else at
    if k:
        before = (int(index[k - 1]), int(term[k - 1]))
    stop = entry_verdict(buf, end, file_start, before if continuity else None)
    return EntryWalk(p[:k], sizes[:k], index[:k], term[:k], end, stop)


def resync_entry(buf: Buffer, pos: int, stop: int, file_start: int) -> int | None:
    """The next position in ``(pos, stop)`` holding an entry DLedger's header rules accept on
    its own (its pos field names its position), or the file's closing blank (one whose length
    is exactly the rest of the file); None when there is none. Candidates are found with numpy
    by their magic and pos field, a chunk at a time."""
    data = np.frombuffer(buf, np.uint8)
    step = 1 << 22
    lo = pos + 1
    while lo < stop:
        hi = min(stop, lo + step)
        window = data[lo : min(hi + 3, len(data))]
        if len(window) < 4:
            return None
        first, second, third, fourth = window[:-3], window[1:-2], window[2:-1], window[3:]
        one = (first == 0) & (second == 0) & (third == 0) & (fourth == ENTRY_MAGIC)
        blank = (first == 0xFF) & (second == 0xFF) & (third == 0xFF) & (fourth == 0xFF)
        cand = lo + np.flatnonzero(one | blank)
        cand = cand[cand < hi]
        if len(cand):
            fits_header = cand + BODY_OFFSET <= len(data)
            pos_field = np.where(
                fits_header,
                windows(data, cand + 24, 8).view(">i8").reshape(-1),
                -1,
            )
            named = (pos_field == file_start + cand) | blank[cand - lo]
            for c in cand[named].tolist():
                v = entry_verdict(buf, c, file_start)
                if v.ok:
                    return int(c)
                closing = v.reason is R.BLANK and c + 8 <= len(buf)
                if closing and _MAGIC_SIZE.unpack_from(buf, c)[1] == len(buf) - c:
                    return int(c)
        lo = hi
    return None


def entry_boundary(buf: Buffer, pos: int, file_start: int) -> int:
    """Where a walk meant to start at ``pos`` begins: the entry whose record is at ``pos``, or
    the entry at ``pos``, or the next entry found after it (else the end of the buffer)."""
    if pos <= 0:
        return 0
    if pos >= BODY_OFFSET and entry_verdict(buf, pos - BODY_OFFSET, file_start).ok:
        return pos - BODY_OFFSET
    if entry_verdict(buf, pos, file_start).reason in (R.OK, R.BLANK, R.END_OF_DATA):
        return pos
    nxt = resync_entry(buf, pos, len(buf), file_start)
    return nxt if nxt is not None else len(buf)


# --- the records inside entries ----------------------------------------------------------------


def check_messages(
    buf: Buffer, walk: EntryWalk, file_start: int, options: cl.CheckOptions
) -> tuple[RecordColumns, np.ndarray, dict[int, cl.CheckResult]]:
    """The records of ``walk``'s entries as columns (at entry position + 48), which of them
    ``check_message`` accepts, and its verdict on each one it rejects (by entry number)."""
    cols = gather(buf, walk.positions + BODY_OFFSET, file_start)
    # An entry's size says nothing of the record it holds: its header is checked as a walk does.
    sure = headers_plausible(buf, cols.positions, cols.store_size, options.profile.accepts_v2_magic)
    rows = np.flatnonzero(sure)
    ok = np.zeros(len(cols), np.bool_)
    ok[rows] = certain_mask(cols.select(rows), options)
    failed: dict[int, cl.CheckResult] = {}
    for i in np.flatnonzero(~ok).tolist():
        r = cl.check_message(buf, int(cols.positions[i]), file_start, options)
        if r.is_message:
            ok[i] = True
        else:
            failed[i] = r
    return cols, ok, failed


@dataclass(frozen=True, slots=True)
class DispatchCheck:
    """``DLedgerCommitLog.checkMessageAndReturnSize`` at an entry: the record check's verdict
    and the buffer size the reput advances by (-1: none known)."""

    result: cl.CheckResult
    buffer_size: int
    record_at: int  # where the record was checked (the entry + 48, or the position itself)


def dispatch_check(
    buf: Buffer, pos: int, file_start: int, options: cl.CheckOptions
) -> DispatchCheck:
    """The DLedger-aware record check at ``pos``: a plain record or blank of the old commitlog
    when the second int is a RocketMQ magic (an entry's second int is its size), the entry
    blank, else the record at ``pos + 48``, whose size + 48 the reput advances by."""
    if pos + 8 > len(buf):
        return DispatchCheck(
            cl.CheckResult(-1, False, R.PARSE_EXCEPTION, detail="no header"), -1, pos
        )
    magic, second = _MAGIC_SIZE.unpack_from(buf, pos)
    old = (cl.BLANK_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE)
    if second in old or (second == cl.MESSAGE_MAGIC_CODE_V2 and options.profile.accepts_v2_magic):
        r = cl.check_message(buf, pos, file_start, options)
        return DispatchCheck(r, -1, pos)
    if magic == BLANK_MAGIC:
        return DispatchCheck(cl.CheckResult(0, True, R.BLANK, magic=magic), -1, pos)
    at = pos + BODY_OFFSET
    r = cl.check_message(buf, at, file_start, options)
    size = r.size + BODY_OFFSET if r.success or r.size > 0 else -1
    return DispatchCheck(r, size, at)


def _stop_result(v: EntryVerdict) -> cl.CheckResult:
    if v.reason is R.BLANK:
        return cl.CheckResult(0, True, R.BLANK, magic=BLANK_MAGIC)
    magic = v.header.magic if v.header is not None else None
    return cl.CheckResult(-1, False, v.reason, magic=magic, detail=v.detail)


def _events(
    buf: Buffer, walk: EntryWalk, file_start: int, options: cl.CheckOptions
) -> Iterator[FileEvent]:
    """Runs of entries whose records pass the check, and each entry whose record does not (a
    :class:`Skipped` over the whole entry: DLedger keeps and serves it). The last run carries
    the walk's stop."""
    stop = None if walk.stop is None else _stop_result(walk.stop)
    if not len(walk):
        if stop is not None:
            empty = gather(buf, np.zeros(0, np.int64), file_start)
            yield CheckedRun(empty, walk.end, walk.end, stop, options)
        return
    cols, ok, failed = check_messages(buf, walk, file_start, options)
    ends = walk.positions + walk.sizes
    i, n = 0, len(walk)
    while i < n:
        j = i + first_false(ok[i:])
        if j > i:
            run_stop = failed.get(j) if j < n else stop
            run_end = int(ends[j - 1]) if j > i else int(walk.positions[i])
            yield CheckedRun(
                cols.select(slice(i, j)), int(walk.positions[i]), run_end, run_stop, options
            )
        if j < n:
            yield Skipped(int(walk.positions[j]), int(ends[j]), failed[j], BODY_OFFSET)
            if j + 1 == n and stop is not None:
                yield CheckedRun(
                    cols.select(slice(n, n)), int(ends[j]), int(ends[j]), stop, options
                )
        i = j + 1


def scan_data_file(
    buf: Buffer,
    file_start: int = 0,
    pos: int = 0,
    options: cl.CheckOptions | None = None,
    *,
    policy: WalkPolicy,
    max_records: int = RUN_RECORDS,
    data_end: int | None = None,
) -> Iterator[FileEvent]:
    """Every run of entries of one data file from the entry boundary ``pos`` whose records pass
    the check, each entry whose record fails it, and the damage between entries: what
    :func:`~rmqinspect.format.scan.scan_file` yields for a plain file, with ``start``/``end``
    at entry boundaries and the columns at the records.

    Entries are judged alone (no index or term continuity: listing them is not recovery). A
    blank ends the file; so does the end of the data (size 0, then zeros). Under
    :attr:`WalkPolicy.BROKER` the first record the check rejects, or header DLedger rejects,
    ends the walk (its run is the last event). Under :attr:`WalkPolicy.FORENSIC` an entry
    whose record fails is :class:`Skipped` (DLedger keeps and serves it), and any other header
    DLedger rejects is :class:`Skipped` up to the next entry :func:`resync_entry` finds, else
    up to the end of the data (``data_end`` bounds that search, as in
    :func:`~rmqinspect.format.scan.data_extent`).
    """
    opts = options or cl.CheckOptions()
    extent_end: int | None = None
    while True:
        walk = walk_entries(buf, pos, file_start, max_entries=max_records)
        for event in _events(buf, walk, file_start, opts):
            yield event
            if policy is WalkPolicy.BROKER and isinstance(event, CheckedRun) and event.failed:
                return
        pos = walk.end
        if walk.stop is None:
            continue
        if walk.stop.reason is R.BLANK:
            return
        if extent_end is None:
            extent_end = pos + data_extent(buf, pos, data_end)
        if pos >= extent_end:
            return
        nxt = resync_entry(buf, pos, extent_end, file_start)
        yield Skipped(pos, nxt if nxt is not None else extent_end, _stop_result(walk.stop))
        if nxt is None:
            return
        pos = nxt


# --- checkpoint and currterm -------------------------------------------------------------------

COMMITTED_INDEX_KEY = "committedIndex"
END_INDEX_KEY = "endIndex"
CURRENT_TERM_KEY = "currTerm"
VOTE_LEADER_KEY = "voteLeader"
_PROPERTIES_TABLE = 16  # java.util.Properties: a ConcurrentHashMap(8), so 16 slots


def parse_properties_text(text: str) -> dict[str, str]:
    """``Properties.load`` for the simple files DLedger writes: a key ends at the first ``=``,
    ``:`` or blank; ``#``/``!`` lines are comments; a later key wins (no escapes are used)."""
    out: dict[str, str] = {}
    blanks = " \t\f"
    for raw in text.splitlines():
        line = raw.lstrip(blanks)
        if not line or line[0] in "#!":
            continue
        cut = next((n for n, ch in enumerate(line) if ch in "=:" + blanks), len(line))
        rest = line[cut:]
        if rest[:1] in tuple(blanks):
            rest = rest.lstrip(blanks)
            if rest[:1] in ("=", ":"):
                rest = rest[1:]
        elif rest[:1] in ("=", ":"):
            rest = rest[1:]
        out[line[:cut]] = rest.lstrip(blanks)
    return out


def encode_properties_text(pairs: Mapping[str, object]) -> bytes:
    """``IOUtils.properties2String``: ``key=value\\n`` per entry in the Properties map's order."""
    order = java_map_order(pairs, _PROPERTIES_TABLE)
    return "".join(f"{k}={pairs[k]}\n" for k in order).encode("utf-8")


def encode_checkpoint(committed_index: int, end_index: int) -> bytes:
    """``persistCheckPoint``'s content."""
    return encode_properties_text({END_INDEX_KEY: end_index, COMMITTED_INDEX_KEY: committed_index})


def encode_currterm(term: int, vote_leader: str | None) -> bytes:
    """``MemberState.persistTerm``'s content (an empty vote is written as an empty value)."""
    return encode_properties_text({CURRENT_TERM_KEY: term, VOTE_LEADER_KEY: vote_leader or ""})


def committed_index_text(pairs: Mapping[str, str] | None) -> str | None:
    """The committedIndex text recovery reads (trimmed); None where it returns without one."""
    if pairs is None or COMMITTED_INDEX_KEY not in pairs:
        return None
    text = pairs[COMMITTED_INDEX_KEY].strip()
    return text or None
