"""The records of a commitlog byte range as Arrow batches: the export's one record reader.

It reads with the store's one walk (:meth:`rmqinspect.store.model.Store.scan_file`: bare
records, or a DLedger store's entries) exactly as ``messages`` does: the broker's check without
CRC, resynchronising past damage at the next record that names its own position (the next entry
DLedger accepts). In a DLedger store positions are the records' (entry + 48). So a range that
starts at a record boundary the scan reaches gives the same records as the scan of the whole
file, and the rows equal what ``messages`` lists.
A damaged range is a run of its own (``damage_at``), so a reader knows where the scan had to
resynchronise. Pages are released behind the walk, so memory stays flat however large the files
are.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rmqinspect.format import dledger as dl
from rmqinspect.format.batch import decode_batch
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.npbytes import windows
from rmqinspect.format.scan import Skipped, WalkPolicy
from rmqinspect.format.speedups import crc32c_many
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store


@dataclass(frozen=True, slots=True)
class RecordRun:
    """Consecutive records of the scan, and the problems met among them."""

    positions: npt.NDArray[np.int64]  # file positions of the rows (decoded: grouped by topic)
    records: pa.RecordBatch | None  # RECORD_SCHEMA rows; None when only walking
    record_crc32c: npt.NDArray[np.int64] | None  # CRC32C of each record's bytes
    entries: npt.NDArray[np.void] | None  # a DLedger store's entry header of each decoded row
    end: int  # file position after the run
    columns: RecordColumns | None = None  # the run's records in file order (None: damage)
    topic_ids: tuple[npt.NDArray[np.int64], list[bytes]] | None = None  # of ``columns``
    damage_at: int | None = None  # a damaged range (no records): where the scan met it

    def rows(self, start: int, stop: int) -> RecordRun:
        """The decoded rows ``[start, stop)`` alone (without the file-order ``columns``)."""
        assert self.records is not None and self.record_crc32c is not None
        return RecordRun(
            self.positions[start:stop],
            self.records.slice(start, stop - start),
            self.record_crc32c[start:stop],
            None if self.entries is None else self.entries[start:stop],
            self.end,
        )


def record_runs(
    store: Store, file: StoreFile, begin: int, end: int, *, decode: bool = True
) -> Iterator[RecordRun]:
    """The records starting in file positions ``[begin, end)`` of one commitlog file
    (``begin`` is a record boundary of the scan, or 0), in runs, and each damaged range met as
    a run of its own. Without ``decode`` the rows are not decoded (planning: only the record
    boundaries matter)."""
    lenient = store.check_options(check_crc=False, read_body=True)
    buf = store.view(file)
    released = reached = begin
    try:
        for event in store.scan_file(file, buf, begin, lenient, policy=WalkPolicy.FORENSIC):
            reached = max(reached, event.end)
            if isinstance(event, Skipped):
                if event.record_position >= end:
                    return
                yield RecordRun(_NONE, None, None, None, event.end, damage_at=event.record_position)
                continue
            cols = event.columns
            inside = int(np.searchsorted(cols.positions, end))
            if inside < len(cols):
                cols = cols.select(slice(0, inside))
            if len(cols):
                yield _run(cols, decode, event.end, store.dledger is not None)
            if inside < len(event.columns) or event.end >= end:
                return
            store.maps.release(file, released, event.end)
            released = event.end
    finally:
        buf.release()
        # The last run's walk reads past ``end``: its pages go too, or every range would leave
        # a run's worth of the next range mapped in this process.
        store.maps.release(file, released, max(end, reached))


_NONE = np.zeros(0, np.int64)


def _run(cols: RecordColumns, decode: bool, end: int, ledger: bool) -> RecordRun:
    if not decode:
        return RecordRun(cols.positions, None, None, None, end, cols, None)
    # Rows grouped by topic (in order within a topic): the Parquet writer then slices a batch
    # per topic partition instead of copying it (bodies included) into that order.
    topics = cols.topic_ids()
    order = np.argsort(topics[0], kind="stable")
    walked, cols = cols, cols.select(order)
    batch = decode_batch(cols, walked.body_crcs()[order])  # CRCs read in file order
    entries = None
    if ledger:  # each record is the body of the entry whose header ends where it starts
        data = np.frombuffer(cols.buf, np.uint8)
        at = cols.positions - dl.BODY_OFFSET
        entries = windows(data, at, dl.ENTRY_DTYPE.itemsize).view(dl.ENTRY_DTYPE).reshape(-1)
    fingerprints = _crc32c(walked)[order]  # read in file order, like the body CRCs
    return RecordRun(cols.positions, batch, fingerprints, entries, end, walked, topics)


def _crc32c(cols: RecordColumns) -> npt.NDArray[np.int64]:
    return crc32c_many(cols.buf, cols.positions, cols.store_size)
