"""The one commitlog record scanner: the broker's check over runs of records, and resync.

Pure functions over one whole commitlog file given as a buffer (its end is the Java buffer
limit) and the file's first physical offset; every position is a buffer position.

* :func:`check_run` gives, for a run of records (walked and gathered by
  :mod:`rmqinspect.format.columns`), the verdicts of
  :func:`~rmqinspect.format.commitlog.check_message` (the definition of truth): the fast path
  decides with numpy where the outcome is certain and asks ``check_message`` everywhere else.
* :func:`resync` finds the next record past damage by searching for magic codes;
  :func:`data_extent` measures the data before a zero tail.
* :func:`scan_file` strings these together: runs of records and, under
  :attr:`WalkPolicy.FORENSIC`, the damage skipped between them.
"""

from __future__ import annotations

import enum
import functools
import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.columns import (
    RUN_RECORDS,
    RecordColumns,
    WalkStop,
    gather,
    walk_columns,
)
from rmqinspect.format.crc import CRC_MASK
from rmqinspect.format.npbytes import I64, Buffer, Mask, first_false, windows
from rmqinspect.format.speedups import crc32_many, property_entries


class WalkPolicy(enum.Enum):
    """What a walk of the commitlog does at a record the broker's check rejects. Every walk
    names one: the two answer different questions and a default would pick for the caller."""

    BROKER = "broker"
    """Stop there, as recovery does: the run that met it (``failed``, its ``stop`` says why)
    is the walk's last event. For a question about what the broker reads, in order."""

    FORENSIC = "forensic"
    """Go on past it at the next record that names its own position in PHYSICALOFFSET (stale
    bytes of another file or generation are not its messages), and yield each range stepped
    over as :class:`Skipped`, so a caller can say what it did not read. For every question
    about which messages exist."""


# --- the broker's check, many records at a time -----------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class CheckedRun:
    """Consecutive records from ``start`` that ``check_message`` accepts as messages, and the
    verdict on what ended them: a BLANK or a failure at ``end``, or None when the run stopped at
    its record limit (the next run starts at ``end``)."""

    columns: RecordColumns
    start: int
    end: int
    stop: cl.CheckResult | None
    options: cl.CheckOptions

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def failed(self) -> bool:
        """The run ended at a record the check rejects (not a BLANK, not the record limit)."""
        return self.stop is not None and not self.stop.success

    def tags_code(self, i: int) -> int:
        """The tagsCode ``check_message`` gave record ``i`` (always computable: a record whose
        DELAY makes the check fail is not in the run)."""
        code = self.columns.tags_code(i, _delay_table(self.options.delay_levels))
        assert code is not None
        return code

    def tags_codes(self, rows: I64, topics: tuple[I64, Sequence[str]] | None = None) -> I64:
        """:meth:`tags_code` of each record of ``rows`` (ascending), vectorised (``topics`` as
        for :meth:`~rmqinspect.format.columns.RecordColumns.tags_codes`)."""
        codes, _ = self.columns.tags_codes(rows, _delay_table(self.options.delay_levels), topics)
        return codes


@functools.lru_cache(maxsize=16)
def _delay_table(levels: tuple[tuple[int, int], ...]) -> Mapping[int, int]:
    return dict(levels)


def check_run(
    buf: Buffer,
    pos: int,
    file_start: int = 0,
    options: cl.CheckOptions | None = None,
    *,
    max_records: int = RUN_RECORDS,
) -> CheckedRun:
    """The records from ``pos`` that ``cl.check_message(buf, p, file_start, options)`` accepts
    as messages, in order, up to ``max_records``, and the exact verdict that ended them.

    Runs of well-formed records are judged with numpy (lengths, CRCs, the schedule topic's
    DELAY, DUP_INFO, the property CRC); a record the fast path is not certain about is handed
    to ``check_message``, whose verdict stands.
    """
    opts = options or cl.CheckOptions()
    accept_v2 = opts.profile.accepts_v2_magic
    parts: list[RecordColumns] = []
    taken = 0
    at = pos
    stop: cl.CheckResult | None = None
    # The body CRCs certain_mask compares are taken in the same pass as the walk.
    with_crc = opts.check_crc and opts.read_body and not opts.force_verify_prop_crc
    while taken < max_records:
        w, cols, crcs = walk_columns(
            buf,
            at,
            accept_v2=accept_v2,
            max_records=max_records - taken,
            file_start=file_start,
            with_crc=with_crc,
        )
        k = _certain(cols, opts, crcs)
        if k:
            parts.append(cols.select(slice(0, k)) if k < len(cols) else cols)
            taken += k
        if k == len(cols) and w.stop is WalkStop.LIMIT:
            at = w.end
            continue
        at = int(w.positions[k]) if k < len(cols) else w.end
        result = cl.check_message(buf, at, file_start, opts)
        if not result.is_message:
            stop = result
            break
        parts.append(gather(buf, np.array([at], np.int64), file_start))
        taken += 1
        at += result.size
    return CheckedRun(RecordColumns.concat(parts, buf, file_start), pos, at, stop, opts)


_SCHEDULE = np.frombuffer(cl.SCHEDULE_TOPIC.encode(), np.uint8)
_CRC_TAIL = (props.CRC32 + props.NAME_VALUE_SEPARATOR).encode()
_DIGITS = cl.CRC32_RESERVED_LEN - len(_CRC_TAIL) - 1  # ten digits, then 0x02
_SEPARATOR = ord(props.PROPERTY_SEPARATOR)


def _certain(cols: RecordColumns, opts: cl.CheckOptions, crcs: I64 | None = None) -> int:
    """How many leading records of ``cols`` ``check_message`` certainly accepts."""
    return first_false(certain_mask(cols, opts, crcs))


def certain_mask(cols: RecordColumns, opts: cl.CheckOptions, crcs: I64 | None = None) -> Mask:
    """Which records of ``cols`` ``check_message`` certainly accepts, each with
    ``(TOTALSIZE, true)``: well formed (so the 5.3 bounds checks and every scratch-buffer fit
    pass too), and passing each check ``opts`` enables. False also where unsure: then
    ``check_message`` decides. ``crcs``: :meth:`RecordColumns.body_crcs`, when the caller
    took them already."""
    ok = cols.well_formed.copy()
    if opts.check_dup_info:
        for i in np.flatnonzero(ok).tolist():
            ok[i] = cl.dup_info_valid(cols.properties(i))
    _schedule_ok(cols, ok)
    if opts.check_crc and opts.force_verify_prop_crc:
        _prop_crc_ok(cols, ok)
    elif opts.check_crc and opts.read_body and ok.any():
        rows = np.flatnonzero(ok)
        if crcs is None:
            chosen = cols.select(rows)
            ok[rows] = chosen.body_crcs() == chosen.body_crc
        else:
            ok[rows] = crcs[rows] == cols.body_crc[rows]
    return ok


def _schedule_ok(cols: RecordColumns, ok: Mask) -> None:
    """Clear ``ok`` for schedule-topic records whose DELAY makes the check fail (or may)."""
    data = np.frombuffer(cols.buf, np.uint8)
    n = len(_SCHEDULE)
    cand = np.flatnonzero(ok & (cols.topic_length == n) & (cols.properties_length > 0))
    if not len(cand):
        return
    rows = windows(data, cols.topic_at[cand], n)
    schedule = cand[(rows == _SCHEDULE).all(axis=1)]
    starts = cols.properties_at[schedule]
    entries = property_entries(cols.buf, starts, cols.properties_length[schedule])
    if entries is not None:
        # The properties as the check parses them: the DELAY entry left (the later one of
        # two) must hold a number Integer.parseInt certainly takes.
        entry_rows, name_at, name_len, value_at, value_len = entries
        named = windows(data, name_at, len(_DELAY_NAME)) == _DELAY_NAME
        delay = np.flatnonzero((name_len == len(_DELAY_NAME)) & named.all(axis=1))
        sure = _sure_ints(data, value_at[delay], value_len[delay])
        ok[schedule[entry_rows[delay[~sure]]]] = False
        return
    ends = (starts + cols.properties_length[schedule]).tolist()
    buf = cols.buf
    for i, a, b in zip(schedule.tolist(), starts.tolist(), ends, strict=True):
        if not _delay_parses(bytes(buf[a:b])):
            ok[i] = False


_DELAY_NAME = np.frombuffer(props.DELAY.encode(), np.uint8)
_SURE_DIGITS = 9  # Integer.parseInt takes any sign and up to nine digits


def _sure_ints(data: npt.NDArray[np.uint8], at: I64, length: I64) -> Mask:
    """Which texts ``data[at:at + length]`` match ``[+-]?[0-9]{1,9}`` (:data:`_SURE_INT`);
    False also for a text too near the buffer's end to be read as a window (unsure)."""
    text = windows(data, at, _SURE_DIGITS + 1)
    inside = np.arange(_SURE_DIGITS + 1) < length[:, None]
    digit = (text >= ord("0")) & (text <= ord("9"))
    signed = (text[:, 0] == ord("+")) | (text[:, 0] == ord("-"))
    first = digit[:, 0] | (signed & (length >= 2))
    rest = (digit | ~inside)[:, 1:].all(axis=1)
    readable = at + _SURE_DIGITS + 1 <= len(data)
    sure: Mask = readable & (length >= 1) & (length - signed <= _SURE_DIGITS) & first & rest
    return sure


_DELAY_ENTRY = (props.DELAY + props.NAME_VALUE_SEPARATOR).encode()
_SURE_INT = re.compile(rb"[+-]?[0-9]{1,9}\Z")  # Integer.parseInt takes it whatever the digits


def _delay_parses(raw: bytes) -> bool:
    """Whether the properties ``raw`` certainly have no DELAY or an integer one (the only way a
    schedule record passes the check). False also where unsure (several DELAY entries, an
    unusual number): ``check_message`` then decides."""
    at = raw.find(_DELAY_ENTRY)
    if at < 0:
        return True
    if raw.find(_DELAY_ENTRY, at + 1) >= 0:
        return False
    if at > 0 and raw[at - 1] != _SEPARATOR:
        return True  # inside another entry: there is no DELAY property
    end = raw.find(_SEPARATOR, at)
    value = raw[at + len(_DELAY_ENTRY) : end if end >= 0 else len(raw)]
    return _SURE_INT.match(value) is not None


def _prop_crc_ok(cols: RecordColumns, ok: Mask) -> None:
    """Clear ``ok`` for records whose properties do not end in the canonical ``__CRC32#`` entry
    (preceded by a separator or alone) holding the CRC of the record without its 20-byte tail.
    Anything else may still pass ``check_message`` (it parses the properties): it decides."""
    rows = np.flatnonzero(ok)
    if not len(rows):
        return
    sub = cols.select(rows)
    present, stored = prop_crc_tails(sub)
    checked = np.flatnonzero(present)
    good = present.copy()
    good[checked] = stored[checked] == prop_crcs(sub, checked)
    ok[rows] = good


def prop_crc_tails(cols: RecordColumns) -> tuple[Mask, I64]:
    """Which records end in the canonical ``__CRC32#`` property (§3.2: ``__CRC32#`` 0x01, ten
    digits, 0x02, preceded by a separator or alone), and the value each stores (0 where none;
    the digits are written least significant first)."""
    data = np.frombuffer(cols.buf, np.uint8)
    p, ends = cols.positions, cols.ends
    tail_at = ends - cl.CRC32_RESERVED_LEN
    plen = cols.properties_length
    ok = cols.well_formed & (plen >= cl.CRC32_RESERVED_LEN)
    tail = windows(data, np.where(ok, tail_at, p), cl.CRC32_RESERVED_LEN)
    ok &= (tail[:, : len(_CRC_TAIL)] == np.frombuffer(_CRC_TAIL, np.uint8)).all(axis=1)
    digits = tail[:, len(_CRC_TAIL) : len(_CRC_TAIL) + _DIGITS].astype(np.int64) - ord("0")
    ok &= ((digits >= 0) & (digits <= 9)).all(axis=1) & (tail[:, -1] == _SEPARATOR)
    before = data[np.maximum(tail_at - 1, 0)]
    ok &= (plen == cl.CRC32_RESERVED_LEN) | (before == _SEPARATOR)
    stored: I64 = np.where(ok, digits @ (10 ** np.arange(_DIGITS, dtype=np.int64)), 0)
    return ok, stored


def prop_crcs(cols: RecordColumns, rows: I64) -> I64:
    """The masked CRC-32 of each record of ``rows`` without its 20-byte CRC tail (what the
    ``__CRC32#`` property must hold), over the run in one call."""
    starts = cols.positions[rows]
    stops = cols.ends[rows] - cl.CRC32_RESERVED_LEN
    out: I64 = crc32_many(cols.buf, starts, stops - starts) & CRC_MASK
    return out


# --- past damage ---------------------------------------------------------------------------------


def _magic_pattern(*magics: int) -> re.Pattern[bytes]:
    return re.compile(b"|".join(re.escape(struct.pack(">i", m)) for m in magics))


_MAGICS_V1 = _magic_pattern(cl.MESSAGE_MAGIC_CODE, cl.BLANK_MAGIC_CODE)
_MAGICS_V2 = _magic_pattern(cl.MESSAGE_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE_V2, cl.BLANK_MAGIC_CODE)


def resync(
    buf: Buffer,
    pos: int,
    stop: int,
    file_start: int = 0,
    options: cl.CheckOptions | None = None,
) -> int | None:
    """The next position in ``(pos, stop)`` (its header before ``stop``) that holds a record
    ``check_message`` accepts as a message and that names its own position in its
    PHYSICALOFFSET field (which rules out stale bytes of another file, or of an earlier
    generation of this one), or the file's closing BLANK (one whose TOTALSIZE is exactly the
    rest of the file); None when there is none.

    Candidates are found by searching for the magic codes, not by stepping through positions.
    """
    opts = options or cl.CheckOptions()
    pattern = _MAGICS_V2 if opts.profile.accepts_v2_magic else _MAGICS_V1
    search_at = pos + 1 + cl.MAGIC_POS
    while True:
        m = pattern.search(buf, search_at, stop)
        if m is None:
            return None
        cand = m.start() - cl.MAGIC_POS
        r = cl.check_message(buf, cand, file_start, opts)
        if r.is_blank and r.store_size == len(buf) - cand:
            return cand
        if (
            r.is_message
            and r.record is not None
            and r.record.physical_offset_field == file_start + cand
        ):
            return cand
        search_at = m.start() + 1


_EXTENT_STEP = 1 << 22


def data_extent(buf: Buffer, begin: int, data_end: int | None = None) -> int:
    """Bytes from ``begin`` to the last non-zero byte of ``buf`` (inclusive), found by scanning
    back in chunks from the end, or from ``data_end`` when the caller knows only zeros lie past
    it (the holes of a sparse file, which the scan would otherwise page through)."""
    end = len(buf) if data_end is None else max(0, min(len(buf), data_end))
    while end > begin:
        lo = max(begin, end - _EXTENT_STEP)
        chunk = np.frombuffer(buf, np.uint8, end - lo, lo)
        if chunk.any():
            return end - int(np.argmax(chunk[::-1] != 0)) - begin
        end = lo
    return 0


@dataclass(frozen=True, slots=True)
class Skipped:
    """Bytes ``[start, end)`` of a file that hold no readable record: ``result`` is the check's
    verdict at ``record_position``; ``end`` is the next record found, or the end of the file's
    data. ``frame`` is 48 for a DLedger entry whose header DLedger accepts (it keeps and serves
    the entry) but whose record fails the check: the record is at ``start + 48``; else 0."""

    start: int
    end: int
    result: cl.CheckResult
    frame: int = 0

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def record_position(self) -> int:
        """Where the record the check judged starts."""
        return self.start + self.frame


def damaged_headers(
    buf: Buffer, skipped: Skipped, file_start: int = 0, options: cl.CheckOptions | None = None
) -> list[int]:
    """Where message records start inside a skipped range, though the check rejects them: the
    range's first position and those TOTALSIZE leads to from it while each header has a
    message magic and a size that fits, then any other message header (found by its magic)
    that names its own position in PHYSICALOFFSET. These are records that decode partly."""
    opts = options or cl.CheckOptions()
    accept_v2 = opts.profile.accepts_v2_magic
    found: list[int] = []
    pos = skipped.start
    while pos < skipped.end and pos + 8 <= len(buf):
        size, magic = struct.unpack_from(">ii", buf, pos)
        is_message = magic == cl.MESSAGE_MAGIC_CODE or (
            accept_v2 and magic == cl.MESSAGE_MAGIC_CODE_V2
        )
        if not is_message or not cl.MIN_RECORD_SIZE <= size <= len(buf) - pos:
            break
        found.append(pos)
        pos += size
    pattern = _MAGICS_V2 if accept_v2 else _MAGICS_V1
    stop = min(len(buf), skipped.end + cl.MAGIC_POS + 4)  # a magic of a header before end
    for m in pattern.finditer(buf, skipped.start + 1 + cl.MAGIC_POS, stop):
        at = m.start() - cl.MAGIC_POS
        if at >= skipped.end or at in found or at + cl.PHYSICALOFFSET_POS + 8 > len(buf):
            continue
        size, magic = struct.unpack_from(">ii", buf, at)
        (physical_offset,) = struct.unpack_from(">q", buf, at + cl.PHYSICALOFFSET_POS)
        if magic != cl.BLANK_MAGIC_CODE and physical_offset == file_start + at:
            found.append(at)
    return sorted(found)


FileEvent = CheckedRun | Skipped


def scan_file(
    buf: Buffer,
    file_start: int = 0,
    pos: int = 0,
    options: cl.CheckOptions | None = None,
    *,
    policy: WalkPolicy,
    max_records: int = RUN_RECORDS,
    data_end: int | None = None,
) -> Iterator[FileEvent]:
    """Every run of checked records of one file from ``pos``, and the damage between them.

    Each run is yielded (the last one also when it holds no record, for its ``stop``). A BLANK
    ends the file; so does a failure followed only by zeros (the end of the data). Any other
    failure ends the walk under :attr:`WalkPolicy.BROKER`; under :attr:`WalkPolicy.FORENSIC`
    it is yielded as :class:`Skipped` up to the next record :func:`resync` finds, else up to
    the end of the data, where the file ends: runs, skipped ranges, the BLANK and the zero
    tail then cover the file. ``data_end`` bounds the search for the end of the data (see
    :func:`data_extent`).
    """
    opts = options or cl.CheckOptions()
    extent_end: int | None = None
    while True:
        run = check_run(buf, pos, file_start, opts, max_records=max_records)
        if len(run) or run.stop is not None:
            yield run
        pos = run.end
        if run.stop is None:
            continue
        if run.stop.success or policy is WalkPolicy.BROKER:
            return
        if extent_end is None:
            extent_end = pos + data_extent(buf, pos, data_end)
        if pos >= extent_end:
            return
        nxt = resync(buf, pos, extent_end, file_start, opts)
        if nxt is None:
            yield Skipped(pos, extent_end, run.stop)
            return
        yield Skipped(pos, nxt, run.stop)
        pos = nxt
