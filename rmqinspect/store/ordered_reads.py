"""Records read one by one at ascending physical offsets, their pages dropped once passed.

Each read faults in the pages around a record (the kernel maps 64 KiB of cached pages around a
fault), and a mapped page stays in this process's RSS until it is released: reads spread over
the commitlog (the records a store's send-backs name, the first copies of a retry queue) would
keep most of it resident. Read in order, what lies behind can be dropped as the reads go on.
"""

from __future__ import annotations

from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format.message_record import MessageRecord
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store

WINDOW = 4 << 20
"""Bytes of a commitlog file read behind the current record before they are released."""
_AROUND = 64 << 10  # a fault maps the aligned block around it: pages before the record too


class OrderedReads:
    """Reads at ascending physical offsets (a lower one is read, but its pages are not
    released again until the reads leave its file); :meth:`close` drops the rest."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._file: StoreFile | None = None
        self._low = 0  # where this file's pages may still be mapped

    def record(self, position: int) -> MessageRecord | None:
        """The record at ``position`` without its body; None where none can be read."""
        try:
            f = self._store.commitlog_file(position)
        except StoreError:
            return None
        if self._file is not None and self._file.path != f.path:
            self.close()
        elif position - f.start - self._low > WINDOW:
            self._store.maps.release(f, max(self._low - _AROUND, 0), position - f.start)
            self._low = position - f.start
        self._file = f
        try:
            return self._store.read_message(position, with_body=False)
        except (DecodeError, StoreError):
            return None

    def close(self) -> None:
        if self._file is not None:
            self._store.maps.release(self._file, max(self._low - _AROUND, 0), self._file.length)
        self._file, self._low = None, 0
