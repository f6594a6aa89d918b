"""``messages``: stream the commitlog in physical order with filters, reporting where it breaks.

The walk reads every record the way dispatch does (CRC not enforced: a mismatch is shown on the
message, not hidden) and, unlike recovery, resumes at the next file after a bad record, so
everything readable is listed. Stops are yielded as events so the caller can warn about them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.format import commitlog as cl
from rmqinspect.format.scan import RecordColumns, Skipped
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store

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

    def mask(self, cols: RecordColumns) -> npt.NDArray[np.bool_]:
        """Which records of ``cols`` pass every filter (the limit aside)."""
        keep = np.ones(len(cols), np.bool_)
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
        return keep


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
    for f, event in store.scan(start, opts, files=files):
        if isinstance(event, Skipped):
            continue  # the failed run before it reports the stop
        cols = event.columns
        for i in np.flatnonzero(flt.mask(cols)).tolist():
            yield cols.record(i)
            emitted += 1
            if flt.limit is not None and emitted >= flt.limit:
                return
        end = f.start + event.end
        if flt.to_offset is not None and end >= flt.to_offset:
            return
        if progress is not None and end > last:
            progress(end - last)
            last = end
        if event.failed:
            yield _stop(f, end, event.stop)


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


def _stop(f: StoreFile, position: int, res: cl.CheckResult | None) -> ScanStop:
    assert res is not None
    zero = res.magic == 0 and (res.total_size or 0) == 0
    return ScanStop(
        file=str(f.path),
        position=position,
        reason=res.reason.value,
        detail=res.detail,
        end_of_data=zero,
    )
