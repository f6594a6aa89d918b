"""The records of a commitlog byte range as Arrow batches: the export's one record reader.

Every call to the columnar decoder (:func:`walk_records`, :func:`decode_batch`) and to the
broker's record check is inside :func:`record_runs`, so the export moves to another scanner in
one place. The range is read with ``pread`` in windows, so memory stays flat however large the
files are.

Which records are rows: those the columnar decoder accepts along the TOTALSIZE chain. A record
whose TOTALSIZE and magic are sound but whose fields are not is rejected and the walk goes on to
the next record of the chain (``messages`` gives up the file there); the chain itself ends at a
BLANK, a bad magic or an impossible TOTALSIZE.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import crc32c
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.batch import BatchDecodeError, Walk, decode_batch, walk_records
from rmqinspect.store.files import StoreFile, read_range
from rmqinspect.store.model import Store

WINDOW_BYTES = 16 << 20  # bytes read per pread; doubled for a record longer than that
BATCH_RECORDS = 8192  # records per Arrow batch
DECODE_REJECTED = "decode_rejected"  # the columnar decoder refused a record the check accepts


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record the broker's check (CRC on) fails, or the bytes where the chain stops."""

    position: int  # in the file
    reason: str  # a CheckReason value, or DECODE_REJECTED
    detail: str
    record: cl.MessageRecord | None  # what could be read of it


@dataclass(frozen=True, slots=True)
class RecordRun:
    """Consecutive records of the chain, and the problems met among them."""

    positions: npt.NDArray[np.int64]  # file positions of the rows
    records: pa.RecordBatch | None  # RECORD_SCHEMA rows; None when only walking
    record_crc32c: npt.NDArray[np.int64] | None  # CRC32C of each record's bytes
    rejected: tuple[Rejected, ...]
    end: int  # file position after the run
    stopped: bool  # the chain ends at ``end``


def record_runs(
    store: Store,
    file: StoreFile,
    begin: int,
    end: int,
    *,
    decode: bool = True,
    ends_chain: bool = True,
) -> Iterator[RecordRun]:
    """The records of file positions ``[begin, end)`` of one commitlog file (``begin`` is a
    record boundary), in runs of at most :data:`BATCH_RECORDS`.

    ``ends_chain``: the chain stops at ``end`` (the file's last range), so the bytes there are
    judged too. Without ``decode`` only the record boundaries are found (for planning).
    """
    profile = store.profile.profile
    strict = cl.CheckOptions(profile=profile)  # the broker's check, CRC on

    def judge(position: int, ends_data: bool = False) -> Rejected | None:
        return _rejected(store.check_at(file.start + position, strict), position, ends_data)

    window, pos = WINDOW_BYTES, begin
    while True:
        wanted = min(window, end - pos)
        buf = read_range(file, pos, wanted) if wanted > 0 else b""
        at = 0
        while True:
            walk = walk_records(
                buf, at, max_records=BATCH_RECORDS, accept_v2=profile.accepts_v2_magic
            )
            at = walk.end
            rest = walk
            if not decode and len(rest.positions):
                yield RecordRun(pos + rest.positions, None, None, (), pos + at, False)
            while decode and len(rest.positions):
                bad = None
                try:
                    batch, taken = decode_batch(buf, rest, file.start + pos), len(rest.positions)
                except BatchDecodeError as err:
                    taken = int(np.searchsorted(rest.positions, err.position))
                    batch = decode_batch(buf, _head(rest, taken), file.start + pos)
                    bad = judge(pos + err.position) or Rejected(
                        pos + err.position, DECODE_REJECTED, str(err), None
                    )
                found = [judge(phy - file.start) for phy in _suspects(batch)]
                yield RecordRun(
                    pos + rest.positions[:taken],
                    batch,
                    _crc32c(buf, _head(rest, taken)),
                    tuple(r for r in (*found, bad) if r is not None),
                    pos + at,
                    False,
                )
                rest = _tail(rest, taken + (bad is not None))
            if walk.stop != "limit":
                break
        if walk.stop == "bad_size" and len(buf) == wanted and pos + wanted < end:
            # The window cut a record; the chain goes on. Widen it for a record longer than it.
            window = window * 2 if at == 0 else WINDOW_BYTES
            pos += at
            continue
        stop_at = pos + at
        if stop_at < end or ends_chain:
            judged = judge(stop_at, ends_data=True) if decode and stop_at < file.length else None
            yield RecordRun(_NONE, None, None, () if judged is None else (judged,), stop_at, True)
        return


_NONE = np.zeros(0, np.int64)


def _head(walk: Walk, n: int) -> Walk:
    return Walk(walk.positions[:n], walk.sizes[:n], walk.end, walk.stop)


def _tail(walk: Walk, n: int) -> Walk:
    return Walk(walk.positions[n:], walk.sizes[n:], walk.end, walk.stop)


def _suspects(batch: pa.RecordBatch) -> list[int]:
    """Physical offsets of rows the broker's check fails although they decode: a body CRC
    mismatch, or a ``SCHEDULE_TOPIC_XXXX`` record whose DELAY is not an integer (dispatch
    cannot compute its tagsCode)."""
    offsets = batch.column("physical_offset")
    found: list[int] = offsets.filter(pc.invert(batch.column("body_crc_ok"))).to_pylist()
    schedule = pc.equal(batch.column("topic"), cl.SCHEDULE_TOPIC)
    if pc.any(schedule).as_py():
        rows = batch.filter(schedule)
        maps = props.properties_column(rows.column("properties"))
        tags = pc.map_lookup(maps, props.TAGS, "first").to_pylist()
        delays = pc.map_lookup(maps, props.DELAY, "first").to_pylist()
        times = rows.column("store_timestamp").to_pylist()
        for phy, tag, delay, at in zip(
            rows.column("physical_offset").to_pylist(), tags, delays, times, strict=True
        ):
            if cl.dispatch_tags_code(cl.SCHEDULE_TOPIC, tag, delay, at, {}) is None:
                found.append(phy)
    return found


def _rejected(result: cl.CheckResult, position: int, ends_data: bool) -> Rejected | None:
    """The problem in a check verdict; none for a record or a BLANK, nor (where the chain
    ends) for the zeros after the last record of a file."""
    if result.success:
        return None
    if ends_data and result.magic == 0 and not result.total_size:
        return None
    return Rejected(position, result.reason.value, result.detail, result.record)


def _crc32c(buf: bytes, walk: Walk) -> npt.NDArray[np.int64]:
    view = memoryview(buf)
    sizes = walk.sizes.tolist()
    return np.fromiter(
        (
            crc32c.crc32c(view[p : p + n])
            for p, n in zip(walk.positions.tolist(), sizes, strict=True)
        ),
        np.int64,
        len(sizes),
    )
