"""The DLedger commitlog of the store writer (dledger-store-format.md §1-§6): ``dledger-<selfId>/``
with its entry data files, index files, ``checkpoint`` and ``currterm``.

Every record the append path builds is wrapped in an entry, as ``appendAsLeader`` does: a
48-byte header (magic 1, size, index, term, its own position, no CRCs) before the record, whose
PHYSICALOFFSET is the entry's position + 48. Placement is the plain commitlog's rule applied to
entries (an entry fits only if 8 bytes stay free, else a blank closes the file); the blank is
magic -1 and the remaining length. Each entry also gets its 32-byte index unit.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rmqinspect.format import dledger as dl
from rmqinspect.format.commitlog import END_FILE_MIN_BLANK_LENGTH
from rmqinspect.synth.commitlog import CommitLogFiles, Run
from rmqinspect.synth.files import create_file, offset_file_name

# The commitlog's placement applies to entries because both keep the same room for a blank.
assert dl.MIN_BLANK_LEN == END_FILE_MIN_BLANK_LENGTH


class DLedgerFiles(CommitLogFiles):
    """The data and index files of one DLedger node: the commitlog files' placement and
    background writes, for entries instead of bare records."""

    def __init__(self, home: Path, file_size: int, term: int = 0) -> None:
        (home / "data").mkdir(parents=True)
        (home / "index").mkdir()
        super().__init__(home / "data", file_size, 0)
        self.home = home
        self.term = term
        self.next_index = 0  # the index the next entry gets (ledgerEndIndex + 1)
        self._sizes = np.zeros(0, np.int64)  # record sizes of the batch being written
        self._positions = np.zeros(0, np.int64)  # its entries' positions
        self._first_index = 0  # its first entry's index
        self._index = IndexFiles(home / "index")

    def place(self, lengths: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], list[Run]]:
        """Entry positions for records of ``lengths`` (the commitlog rule on entry sizes);
        returns the records' physical offsets (entry + 48) and the runs to write."""
        positions, runs = super().place(lengths + dl.BODY_OFFSET)
        self._sizes = np.asarray(lengths, np.int64)
        self._positions = positions
        self._first_index = self.next_index
        self.next_index += len(lengths)
        heads = self._headers(0, len(lengths))
        units = np.zeros(len(heads), dl.INDEX_DTYPE)
        for name in dl.INDEX_FIELDS:
            units[name] = heads[name]
        self._index.put(self._first_index, units)
        return positions + dl.BODY_OFFSET, runs

    def _headers(self, first: int, end: int) -> np.ndarray:
        count = end - first
        heads = np.zeros(count, dl.ENTRY_DTYPE)
        sizes = self._sizes[first:end]
        heads["magic"] = dl.ENTRY_MAGIC
        heads["size"] = sizes + dl.BODY_OFFSET
        heads["index"] = self._first_index + np.arange(first, end)
        heads["term"] = self.term
        heads["pos"] = self._positions[first:end]
        heads["body_size"] = sizes
        return heads

    def write(self, run: Run, data: bytes) -> None:
        """``data`` holds the records of ``run`` one after another; each gets its header."""
        blob = self._headers(run.first, run.end).tobytes()
        ends = np.cumsum(self._sizes[run.first : run.end]).tolist()
        parts: list[bytes] = []
        start = 0
        for k, end in enumerate(ends):
            parts.append(blob[k * dl.BODY_OFFSET : (k + 1) * dl.BODY_OFFSET])
            parts.append(data[start:end])
            start = end
        super().write(run, b"".join(parts))

    def blank(self, remaining: int) -> bytes:
        return dl.encode_blank(remaining)

    def close(self, preallocate_next: bool) -> None:
        """DLedger creates data files when an entry needs one: nothing is pre-allocated."""
        super().close(preallocate_next=False)
        self._index.close()

    def write_state(
        self, committed_index: int, previous_committed: int, vote_leader: str | None
    ) -> None:
        """``checkpoint`` (with ``.bak``, the previous content ``string2File`` kept) and
        ``currterm``. ``persistCheckPoint`` writes endIndex and committedIndex of the moment,
        which on a single leader are the same entry."""
        (self.home / "checkpoint").write_bytes(
            dl.encode_checkpoint(committed_index, committed_index)
        )
        (self.home / "checkpoint.bak").write_bytes(
            dl.encode_checkpoint(previous_committed, previous_committed)
        )
        (self.home / "currterm").write_bytes(dl.encode_currterm(self.term, vote_leader))


class IndexFiles:
    """``index/``: unit ``i`` at byte ``i * 32`` of the index space, in 160 MiB files (sparse)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None
        self._start = -1

    def put(self, first_index: int, units: np.ndarray) -> None:
        """Write the units (:data:`~rmqinspect.format.dledger.INDEX_DTYPE` rows) of entries
        ``first_index ..``."""
        data = units.tobytes()
        at = first_index * dl.INDEX_UNIT_SIZE
        view = memoryview(data)
        while view:
            start = at - at % dl.INDEX_FILE_SIZE
            if start != self._start:
                self.close()
                self._fd = create_file(self.directory / offset_file_name(start), dl.INDEX_FILE_SIZE)
                self._start = start
            take = min(len(view), start + dl.INDEX_FILE_SIZE - at)
            assert self._fd is not None
            os.pwrite(self._fd, view[:take], at - start)
            view = view[take:]
            at += take

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
