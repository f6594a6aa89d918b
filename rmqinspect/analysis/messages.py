"""``messages``: stream the commitlog in physical order with filters, reporting where it breaks.

The walk reads every record the way dispatch does (CRC not enforced: a mismatch is shown on the
message, not hidden) and, unlike recovery, resumes at the next file after a bad record, so
everything readable is listed. Stops are yielded as events so the caller can warn about them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rmqinspect.format import commitlog as cl
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import ScanItem, Store

Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class MessageFilter:
    topic: str | None = None
    queue_id: int | None = None
    from_offset: int | None = None  # physical, inclusive (a record boundary)
    to_offset: int | None = None  # physical, exclusive
    since: int | None = None  # store time, ms, inclusive
    until: int | None = None  # store time, ms, inclusive
    limit: int | None = None

    def accepts(self, r: cl.MessageRecord) -> bool:
        if self.topic is not None and r.topic != self.topic:
            return False
        if self.queue_id is not None and r.queue_id != self.queue_id:
            return False
        if self.since is not None and r.store_timestamp < self.since:
            return False
        return self.until is None or r.store_timestamp <= self.until


@dataclass(frozen=True, slots=True)
class ScanStop:
    """Where a file's records stop being readable; ``end_of_data`` is the normal zero tail."""

    file: str
    position: int
    reason: str
    detail: str
    end_of_data: bool


ScanEvent = cl.MessageRecord | ScanStop


def stream_messages(
    store: Store, flt: MessageFilter, progress: Progress | None = None
) -> Iterator[ScanEvent]:
    """Matching messages in commitlog order, interleaved with the stops met on the way."""
    clq = store.commitlog
    if not clq.files:
        return
    opts = cl.CheckOptions(profile=store.profile.profile, check_crc=False, read_body=True)
    start = _start(store, flt.from_offset, opts)
    files = _files_in_time_range(store, flt.since, flt.until)
    emitted = 0
    last = start if start is not None else clq.files[0].start
    for item in store.scan(start, opts, files=files):
        if flt.to_offset is not None and item.position >= flt.to_offset:
            return
        if progress is not None and item.position > last:
            progress(item.position - last)
            last = item.position
        rec = item.result.record
        if item.result.is_message and rec is not None:
            if flt.from_offset is not None and rec.position < flt.from_offset:
                continue
            if flt.accepts(rec):
                yield rec
                emitted += 1
                if flt.limit is not None and emitted >= flt.limit:
                    return
        elif not item.result.is_blank:
            yield _stop(store, item)


def _files_in_time_range(store: Store, since: int | None, until: int | None) -> list[StoreFile]:
    """Skip whole files by their first record's store time. Store times rise across the
    commitlog (taken under the put lock), so a file is before ``since`` when the next file
    already starts at or before it, and after ``until`` when it starts later."""
    files = store.commitlog.files
    if since is None and until is None:
        return files
    opts = cl.CheckOptions(profile=store.profile.profile, check_crc=False, read_body=False)
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
    buf = store.view(f)
    try:
        res = cl.check_message(buf, 0, f.start, opts)
    finally:
        buf.release()
    return res.record.store_timestamp if res.is_message and res.record is not None else None


def _start(store: Store, from_offset: int | None, opts: cl.CheckOptions) -> int | None:
    """The scan start for ``--from``: the offset itself when a record starts there, else the
    start of its file (records before ``from_offset`` are then skipped)."""
    if from_offset is None:
        return None
    f = store.commitlog.find(from_offset)
    if f is None:
        return from_offset  # before, between or after the files: scan skips what it must
    if store.check_at(from_offset, opts).is_message:
        return from_offset
    return f.start


def _stop(store: Store, item: ScanItem) -> ScanStop:
    res = item.result
    zero = res.magic == 0 and (res.total_size or 0) == 0
    return ScanStop(
        file=str(item.file.path),
        position=item.position,
        reason=res.reason.value,
        detail=res.detail,
        end_of_data=zero,
    )
