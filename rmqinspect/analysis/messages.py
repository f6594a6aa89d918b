"""``messages``: stream the commitlog in physical order with filters, reporting what it skips.

The walk reads every record the way dispatch does (CRC not enforced: a mismatch is shown on the
message, not hidden) and, unlike recovery, resynchronises past a bad record at the next record
of the same file (one whose PHYSICALOFFSET names its own position: stale bytes of another file
are not its messages), so everything readable is listed. Each skipped byte range is yielded as
an event so the caller can report it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis import Progress
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format import scan
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.npbytes import spans_equal, split_spans
from rmqinspect.format.properties_text import PropertiesText
from rmqinspect.format.scan import Skipped, WalkPolicy
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store


@dataclass(frozen=True, slots=True)
class MessageFilter:
    topic: str | None = None
    queue_id: int | None = None
    from_offset: int | None = None  # physical, inclusive (inside a record: the next record)
    to_offset: int | None = None  # physical, exclusive
    since: int | None = None  # store time, ms, inclusive
    until: int | None = None  # store time, ms, inclusive
    limit: int | None = None
    tag: str | None = None  # the TAGS property
    key: str | None = None  # one of the KEYS property's space-separated keys
    uniq_key: str | None = None  # the UNIQ_KEY property
    properties: tuple[tuple[str, str], ...] = ()  # each property name has this value
    transaction: str | None = None  # not|prepared|commit|rollback (``cl.TRANSACTION_TYPES``)
    sys_flag: int | None = None  # every one of these sysFlag bits is set

    @property
    def selects(self) -> bool:
        """Whether any filter (the limit aside) narrows the walk: an empty answer is then
        "nothing found"."""
        return any(
            v is not None
            for v in (
                self.topic,
                self.queue_id,
                self.from_offset,
                self.to_offset,
                self.since,
                self.until,
                self.tag,
                self.key,
                self.uniq_key,
                self.transaction,
                self.sys_flag,
            )
        ) or bool(self.properties)

    def mask(self, cols: RecordColumns) -> npt.NDArray[np.bool_]:
        """Which records of ``cols`` pass every filter (the limit aside)."""
        keep = np.ones(len(cols), np.bool_)
        if self.transaction is not None:
            tt = cols.sys_flag & cl.TRANSACTION_TYPE_MASK
            keep &= tt == cl.TRANSACTION_TYPES[self.transaction]
        if self.sys_flag is not None:
            keep &= (cols.sys_flag & self.sys_flag) == self.sys_flag
        if self.topic is not None:
            keep &= cols.topic_mask([self.topic])
        if self.queue_id is not None:
            keep &= cols.queue_id == self.queue_id
        if self.since is not None:
            keep &= cols.store_timestamp >= self.since
        if self.until is not None:
            keep &= cols.store_timestamp <= self.until
        positions = cols.positions + cols.file_start
        if self.from_offset is not None:
            keep &= positions >= self.from_offset
        if self.to_offset is not None:
            keep &= positions < self.to_offset
        wanted = self._property_values()
        if (wanted or self.key is not None) and keep.any():
            keep[keep] = self._properties_match(cols, np.flatnonzero(keep), wanted)
        return keep

    def _property_values(self) -> list[tuple[str, str]]:
        named = ((props.TAGS, self.tag), (props.UNIQ_KEY, self.uniq_key))
        return [(n, v) for n, v in named if v is not None] + list(self.properties)

    def _properties_match(
        self, cols: RecordColumns, rows: npt.NDArray[np.int64], wanted: list[tuple[str, str]]
    ) -> npt.NDArray[np.bool_]:
        """Which records of ``rows`` hold every wanted property value and the key: values are
        found for all rows at once (:class:`PropertiesText`) and compared as UTF-8 bytes."""
        text = PropertiesText(cols, rows)
        data = np.frombuffer(cols.buf, np.uint8)
        ok = np.ones(len(rows), np.bool_)
        for name, value in wanted:
            at, length = text.spans(name)
            ok &= spans_equal(data, at, length, value.encode("utf-8"))
        if self.key is not None:
            # KEYS holds the producer's keys joined by single spaces (the index splits it so).
            at, length = text.spans(props.KEYS)
            present = np.flatnonzero(at >= 0)
            part_at, part_len, owner = split_spans(
                data, at[present], length[present], ord(props.KEY_SEPARATOR)
            )
            hits = spans_equal(data, part_at, part_len, self.key.encode("utf-8"))
            has_key = np.zeros(len(rows), np.bool_)
            has_key[present[owner[hits]]] = True
            ok &= has_key
        return ok


def property_filter(text: str) -> tuple[str, str]:
    """``--property NAME=VALUE`` as (name, value); ValueError for what no record can hold."""
    name, eq, value = text.partition("=")
    if not eq:
        raise ValueError(f"--property {text!r} is not NAME=VALUE")
    check_filter_value(name, "--property name")
    check_filter_value(value, "--property value")
    return name, value


def check_filter_value(value: str, what: str) -> None:
    """Refuse a value no property can hold: empty (an empty value is no property,
    ``MessageDecoder.string2messageProperties``) or holding a separator byte."""
    if not value:
        raise ValueError(f"empty {what}: an empty property value is no property")
    if props.NAME_VALUE_SEPARATOR in value or props.PROPERTY_SEPARATOR in value:
        raise ValueError(f"{what} {value!r} holds a property separator (\\x01 or \\x02)")


def check_key(key: str) -> None:
    """Refuse a ``--key`` no record can hold: KEYS is split on spaces, so no key has one."""
    check_filter_value(key, "--key")
    if props.KEY_SEPARATOR in key:
        raise ValueError(f"--key {key!r}: a key holds no space (KEYS is split on spaces)")


@dataclass(frozen=True, slots=True)
class SkippedRange:
    """Bytes of a commitlog file that hold no readable record, from the first unreadable byte
    to the next record found (or the end of the file's data); ``reason`` and ``detail`` are the
    broker's check at its start."""

    file: str  # relative to the store
    file_position: int  # where the range starts in the file
    physical_offset: int
    length: int
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """The matching messages of one run of the scan: the records ``rows`` (ascending) of
    ``columns``, which read the file's map (use them before asking for the next event)."""

    columns: RecordColumns
    rows: npt.NDArray[np.int64]
    with_entry: Callable[[cl.MessageRecord], cl.MessageRecord]  # Store.with_entry

    def __len__(self) -> int:
        return len(self.rows)

    def record(self, i: int) -> cl.MessageRecord:
        """Record ``i`` of the columns (a row of ``rows``), as the store reads it."""
        return self.with_entry(self.columns.record(i))

    def records(self) -> Iterator[cl.MessageRecord]:
        for i in self.rows.tolist():
            yield self.record(i)


ScanEvent = MessageBatch | cl.MessageRecord | SkippedRange
"""What a message stream holds: the scan yields batches; a single message is one too."""


def one_by_one(events: Iterable[ScanEvent]) -> Iterator[cl.MessageRecord | SkippedRange]:
    """A message stream with each batch as its records, for callers that take one at a time."""
    for ev in events:
        if isinstance(ev, MessageBatch):
            yield from ev.records()
        else:
            yield ev


def stream_messages(
    store: Store, flt: MessageFilter, progress: Progress | None = None
) -> Iterator[ScanEvent]:
    """Matching messages in commitlog order, a run at a time, interleaved with the byte ranges
    skipped on the way (whatever the filters: damage may hide matching messages)."""
    clq = store.commitlog
    if not clq.files:
        return
    opts = store.check_options(check_crc=False, read_body=True)
    start = _start(store, flt.from_offset, opts)
    files = _files_in_time_range(store, flt.since, flt.until)
    emitted = 0
    last = start if start is not None else clq.files[0].start
    for f, event in store.scan(start, opts, policy=WalkPolicy.FORENSIC, files=files):
        if isinstance(event, Skipped):
            skipped = skipped_range(store, f, event)
            if flt.to_offset is not None and skipped.physical_offset >= flt.to_offset:
                return
            yield skipped
            continue
        cols = event.columns
        rows = np.flatnonzero(flt.mask(cols))
        if flt.limit is not None:
            rows = rows[: flt.limit - emitted]
        if len(rows):
            yield MessageBatch(cols, rows, store.with_entry)
            emitted += len(rows)
            if flt.limit is not None and emitted >= flt.limit:
                return
        end = f.start + event.end
        if flt.to_offset is not None and end >= flt.to_offset:
            return
        if progress is not None and end > last:
            progress(end - last)
            last = end


def _files_in_time_range(store: Store, since: int | None, until: int | None) -> list[StoreFile]:
    """Skip whole files by their first record's store time. Store times rise across the
    commitlog (taken under the put lock), so a file is before ``since`` when the next file
    already starts at or before it, and after ``until`` when it starts later."""
    files = store.commitlog.files
    if since is None and until is None:
        return files
    opts = store.check_options(check_crc=False, read_body=False)
    firsts = [_first_time(store, f, opts) for f in files]
    keep = []
    for i, (f, first) in enumerate(zip(files, firsts, strict=True)):
        nxt = next((t for t in firsts[i + 1 :] if t is not None), None)
        if since is not None and nxt is not None and nxt <= since:
            continue
        if until is not None and first is not None and first > until:
            break
        keep.append(f)
    return keep


def _first_time(store: Store, f: StoreFile, opts: cl.CheckOptions) -> int | None:
    found = store.first_records(f, opts)
    return found[0].store_timestamp if found else None


def _start(store: Store, from_offset: int | None, opts: cl.CheckOptions) -> int | None:
    """The scan start for ``--from``: the offset itself when a record starts there, else the
    next record of its file that :func:`scan.resync` finds (else the next file)."""
    if from_offset is None:
        return None
    f = store.commitlog.find(from_offset)
    if f is None or store.dledger is not None:
        # Before, between or after the files the scan skips what it must; in a DLedger store
        # it starts at the entry whose record is at the offset, or the next one.
        return from_offset
    if store.check_at(from_offset, opts).is_message:
        return from_offset
    buf = store.view(f)
    try:
        pos = from_offset - f.start
        extent = scan.data_extent(buf, pos, store.maps.data_end(f))
        nxt = scan.resync(buf, pos, pos + extent, f.start, opts)
    finally:
        buf.release()
    return f.start + (nxt if nxt is not None else store.commitlog.file_size)


def skipped_range(store: Store, f: StoreFile, event: Skipped) -> SkippedRange:
    """The walk's :class:`Skipped` event of file ``f`` as a reported range. Its reason is the
    one verify, recover and salvage give the same bytes: the broker's whole check, CRCs
    included. The walk checks without them, and their order matters: a torn BODYLEN fails the
    body CRC before the sizes are compared (CommitLog.checkMessageAndReturnSize)."""
    result = event.result
    if store.dledger is None:  # a DLedger walk's reasons are its entries' (dledger.py)
        full = store.check_at(
            f.start + event.start, store.check_options(check_crc=True, read_body=True)
        )
        if full.reason is not cl.CheckReason.OK:
            result = full
    return SkippedRange(
        file=store.relative(f.path),
        file_position=event.start,
        physical_offset=f.start + event.start,
        length=event.length,
        reason=result.reason.value,
        detail=result.detail,
    )


@dataclass
class ForensicWalk:
    """One forensic walk of the whole commitlog without bodies, as the whole-store analyses
    (``trace``, ``transactions``, ``pop``) make it: the runs of records, and beside them the
    damaged ranges stepped over and the newest store time seen."""

    skipped: list[SkippedRange] = field(default_factory=list)
    newest: int | None = None

    def runs(self, store: Store, progress: Progress | None) -> Iterator[RecordColumns]:
        opts = store.check_options(check_crc=False, read_body=False)
        last = max(store.commitlog.min_offset, 0)
        for f, event in store.scan(None, opts, policy=WalkPolicy.FORENSIC):
            if isinstance(event, Skipped):
                self.skipped.append(skipped_range(store, f, event))
            else:
                cols = event.columns
                if len(cols):
                    newest = int(cols.store_timestamp.max())
                    self.newest = newest if self.newest is None else max(self.newest, newest)
                yield cols
            end = f.start + event.end
            if progress is not None and end > last:
                progress(end - last)
                last = end
