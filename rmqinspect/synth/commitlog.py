"""Commitlog files of the store writer: where records go, BLANK records and rolling (§2.3),
and the writes themselves, done on a background thread."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rmqinspect.format.commitlog import END_FILE_MIN_BLANK_LENGTH
from rmqinspect.format.encode import encode_blank
from rmqinspect.synth.files import create_file, offset_file_name


@dataclass(frozen=True, slots=True)
class Run:
    """Records ``first .. end - 1`` of a batch, stored contiguously from ``position`` of the file
    at ``file_start``; ``blank`` > 0 means a BLANK of that TOTALSIZE follows them."""

    file_start: int
    position: int
    first: int
    end: int
    blank: int


class CommitLogFiles:
    """Commitlog files: the write position, BLANK records and rolling (§2.3)."""

    def __init__(self, directory: Path, file_size: int, start: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.file_start = start
        self.position = 0  # write position inside the current file
        self.files: list[str] = []
        self.data_bytes = 0
        self._named_start = -1  # the last file a write was submitted for
        self._io = BackgroundIo()
        self._fd: int | None = None  # owned by the I/O thread
        self._fd_start = -1

    @property
    def end(self) -> int:
        return self.file_start + self.position

    def place(self, lengths: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], list[Run]]:
        """Physical offsets for records of ``lengths``: each goes where the last one ended,
        unless ``msgLen + 8`` exceeds what is left of the file, which a BLANK then closes."""
        if (lengths + END_FILE_MIN_BLANK_LENGTH > self.file_size).any():
            big = int(lengths.max())
            raise ValueError(f"a {big}-byte record cannot fit a {self.file_size}-byte file")
        count = len(lengths)
        offsets = np.empty(count, dtype=np.int64)
        runs: list[Run] = []
        first = 0
        smallest = max(int(lengths.min()), 1) if count else 1
        while first < count:
            room = self.file_size - self.position - END_FILE_MIN_BLANK_LENGTH
            window = lengths[first : first + room // smallest + 1]
            ends = np.cumsum(window)
            end = first + int(np.searchsorted(ends, room, side="right"))
            if end > first:
                offsets[first:end] = self.file_start + self.position + ends[: end - first]
                offsets[first:end] -= lengths[first:end]
            blank = (
                self.file_size - self.position - int(ends[end - first - 1] if end > first else 0)
            )
            runs.append(
                Run(self.file_start, self.position, first, end, blank if end < count else 0)
            )
            self.position = self.file_size - blank
            if end < count:
                self.file_start += self.file_size
                self.position = 0
            first = end
        return offsets, runs

    def write(self, run: Run, data: bytes) -> None:
        """The bytes of ``run`` (and its BLANK), creating the run's file on first use. The
        write itself happens on the I/O thread."""
        if run.file_start != self._named_start:
            self._named_start = run.file_start
            self.files.append(offset_file_name(run.file_start))
        self.data_bytes += len(data) + (END_FILE_MIN_BLANK_LENGTH if run.blank else 0)
        self._io.submit(lambda: self._write_now(run, data))

    def _write_now(self, run: Run, data: bytes) -> None:
        if self._fd_start != run.file_start:
            self._close_file()
            name = offset_file_name(run.file_start)
            self._fd = create_file(self.directory / name, self.file_size)
            self._fd_start = run.file_start
        assert self._fd is not None
        if data:
            os.pwrite(self._fd, data, run.position)
        if run.blank:
            blank_at = self.file_size - run.blank
            os.pwrite(self._fd, self.blank(run.blank), blank_at)

    def blank(self, remaining: int) -> bytes:
        """What closes a full file at the last ``remaining`` bytes (the rest stays zero)."""
        return encode_blank(remaining)

    def _close_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self, preallocate_next: bool) -> None:
        """Finish the writes; with ``preallocate_next`` leave the all-zero next file that
        ``AllocateMappedFileService`` had already created (a crash keeps it)."""
        if self._named_start >= 0 and preallocate_next:
            name = offset_file_name(self._named_start + self.file_size)
            self.files.append(name)
            self._io.submit(lambda: os.close(create_file(self.directory / name, self.file_size)))
        self._io.submit(self._close_file)
        self._io.drain()


class BackgroundIo:
    """File writes on one background thread, in submission order: ``pwrite`` releases the GIL,
    so the kernel's copying overlaps with encoding the next batch. A failed write is raised by
    a later ``submit`` or by ``drain``."""

    def __init__(self, depth: int = 4) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="synth-io")
        self._pending: deque[Future[None]] = deque()
        self._depth = depth

    def submit(self, task: Callable[[], None]) -> None:
        self._pending.append(self._pool.submit(task))
        while self._pending and (len(self._pending) > self._depth or self._pending[0].done()):
            self._pending.popleft().result()

    def drain(self) -> None:
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
