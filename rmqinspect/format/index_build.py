"""``IndexService.buildIndex`` over chunks of dispatched records (spec §7.4-7.5), vectorised.

:class:`IndexBuilder` is the one index write path: the store writer, and the recovery emulator
for both its report and ``--apply-to``, feed it the records the reput service dispatches, in
dispatch order, and it rolls files exactly as ``getAndCreateLastIndexFile`` does. It is pure:
files live in memory as :class:`~rmqinspect.format.index.IndexFileBuilder` values and are handed
to the caller when the broker would stop writing them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from rmqinspect.format.commitlog import TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from rmqinspect.format.index import IndexFileBuilder, IndexGeometry, IndexHeader
from rmqinspect.format.javamath import INT_MAX

# Keys per IndexFileBuilder.put: beyond this the sort by slot leaves the CPU caches.
_PUT_BATCH = 1 << 16

IndexNamer = Callable[[int, int], str]
"""Names a new index file from the store timestamp of the record whose dispatch created it and
the file's sequence number among the files the builder created (0 for the first)."""

IndexSink = Callable[[IndexFileBuilder], None]
"""Receives each file the builder rolls past, already flushed; the builder then drops it."""


class IndexBuilder:
    """``buildIndex`` and ``getAndCreateLastIndexFile`` over chunks of records, vectorised.

    Per record :meth:`dispatch` takes the PHYSICALOFFSET field, the store timestamp, the sysFlag
    and the index key hashes (``UNIQ_KEY`` first, then each non-empty ``KEYS`` element, of the
    string ``topic#key``). As the broker does, every record first gets the last file (a full
    one is replaced even by a record that then puts nothing), a record whose offset is below
    that file's endPhyOffset is skipped, ROLLBACK records put nothing (PREPARED ones do), and a
    file that fills in the middle of a record's keys is replaced by that record.

    Modes: with ``materialise`` every file keeps its bytes (see
    :meth:`IndexFileBuilder.writes`); without it only headers and slot tables are kept, which is
    enough for exact headers and counts. Either way at most the current file is held: a rolled
    file is flushed (``IndexService.flush``) and passed to ``on_rolled``, then dropped.
    ``last_file`` continues a file kept from before (``IndexFileBuilder.from_bytes``).
    """

    def __init__(
        self,
        geometry: IndexGeometry,
        namer: IndexNamer,
        *,
        materialise: bool = False,
        last_file: IndexFileBuilder | None = None,
        on_rolled: IndexSink | None = None,
    ) -> None:
        if geometry.index_num < 2:
            raise ValueError("an index file needs maxIndexNum >= 2 to hold any entry")
        if last_file is not None and (
            last_file.geometry != geometry or last_file.materialise != materialise
        ):
            raise ValueError("the continued file must share the builder's geometry and mode")
        self.geometry = geometry
        self.namer = namer
        self.materialise = materialise
        self.on_rolled = on_rolled
        self.created: list[str] = []  # names of the files this builder created, in order
        self.entries = 0  # keys put
        # The checkpoint's indexMsgTimestamp after the flushes of full files (None: unchanged).
        self.index_msg_timestamp: int | None = None
        # PHYSICALOFFSET of the first record that passed the skip and ROLLBACK tests.
        self.first_indexed_offset: int | None = None
        self._current = last_file
        self._rolled: list[tuple[str, IndexHeader]] = []
        self._finished = False

    # --- state the caller reads ---------------------------------------------------------------

    @property
    def current(self) -> IndexFileBuilder | None:
        """The last file (None before the first dispatch when nothing was continued)."""
        return self._current

    @property
    def creates_file(self) -> bool:
        """Whether the next dispatched record creates a file (none yet, or the last is full)."""
        return self._current is None or self._current.is_full

    @property
    def end_phy_offset(self) -> int:
        """The endPhyOffset the next record is compared with: records below it are skipped."""
        current = self._current
        if current is None:
            return 0
        return max(current.end_phy_offset, 0) if current.is_full else current.end_phy_offset

    def headers(self) -> list[tuple[str, IndexHeader]]:
        """Name and in-memory header of every file the builder held, oldest first."""
        current = [] if self._current is None else [(self._current.name, self._current.header)]
        return self._rolled + current

    # --- dispatch -----------------------------------------------------------------------------

    def dispatch(
        self,
        physical_offset: npt.NDArray[np.int64],
        store_timestamp: npt.NDArray[np.int64],
        sys_flag: npt.NDArray[np.int64],
        key_hash: npt.NDArray[np.int64],
        key_owner: npt.NDArray[np.int64],
    ) -> None:
        """Index a chunk of dispatched records, in dispatch order. ``key_hash`` holds index key
        hashes (``index_key_hash``) of the records ``key_owner`` (positions in the chunk,
        non-decreasing), each record's keys in put order."""
        if self._finished:
            raise ValueError("the index builder has handed over its last file")
        phy = np.asarray(physical_offset, dtype=np.int64)
        timestamps = np.asarray(store_timestamp, dtype=np.int64)
        flags = np.asarray(sys_flag, dtype=np.int64)
        hashes = np.asarray(key_hash, dtype=np.int64)
        owners = np.asarray(key_owner, dtype=np.int64)
        count = len(phy)
        if len(timestamps) != count or len(flags) != count or len(owners) != len(hashes):
            raise ValueError("record and key columns differ in length")
        if len(owners) and (owners[0] < 0 or owners[-1] >= count or (np.diff(owners) < 0).any()):
            raise ValueError("key owners must be record positions in non-decreasing order")
        if len(hashes) and (hashes.min() < 0 or hashes.max() > INT_MAX):
            raise ValueError("index key hashes lie in 0..Integer.MAX_VALUE")
        if not count:
            return
        indexed = (flags & TRANSACTION_TYPE_MASK) != TRANSACTION_ROLLBACK_TYPE
        # Where offsets never decrease and are not negative, the records a run skips are a
        # prefix of it (each put, and each new file, only raises endPhyOffset to an offset not
        # above the next one). Anywhere else every record is a run of its own.
        negative = phy < 0
        cuts = np.flatnonzero((phy[1:] < phy[:-1]) | negative[1:] | negative[:-1]) + 1
        bounds = [0, *cuts.tolist(), count]
        key_bounds = np.searchsorted(owners, bounds).tolist()
        for n in range(len(bounds) - 1):
            first, end = bounds[n], bounds[n + 1]
            keys = slice(key_bounds[n], key_bounds[n + 1])
            self._run(
                phy[first:end],
                timestamps[first:end],
                indexed[first:end],
                hashes[keys],
                owners[keys] - first,
            )

    def _run(
        self,
        phy: npt.NDArray[np.int64],
        timestamps: npt.NDArray[np.int64],
        indexed: npt.NDArray[np.bool_],
        hashes: npt.NDArray[np.int64],
        owners: npt.NDArray[np.int64],
    ) -> None:
        """Records whose skips form a prefix (see :meth:`dispatch`)."""
        current = self._current
        if current is None or current.is_full:
            current = self._roll(int(timestamps[0]))
        first = int(np.searchsorted(phy, current.end_phy_offset, side="left"))
        passed = np.flatnonzero(indexed[first:])
        if passed.size and self.first_indexed_offset is None:
            self.first_indexed_offset = int(phy[first + passed[0]])
        keep = (owners >= first) & indexed[owners]
        hashes, owners = hashes[keep], owners[keep]
        total = len(hashes)
        pos = 0
        filler = -1  # the record that put the last key
        while pos < total:
            room = current.room
            if not room:
                # putKey refused: the same record retries in a new file if the key is its own,
                # otherwise the next record's getAndCreateLastIndexFile replaced the file.
                trigger = filler if int(owners[pos]) == filler else filler + 1
                current = self._roll(int(timestamps[trigger]))
                continue
            take = min(room, total - pos, _PUT_BATCH)
            rows = owners[pos : pos + take]
            current.put(hashes[pos : pos + take], phy[rows], timestamps[rows])
            pos += take
            filler = int(owners[pos - 1])
        self.entries += total
        if current.is_full and 0 <= filler < len(phy) - 1:
            self._roll(int(timestamps[filler + 1]))

    def _roll(self, trigger_timestamp: int) -> IndexFileBuilder:
        """``getAndCreateLastIndexFile`` when there is no file or the last one is full."""
        previous = self._current
        name = self.namer(trigger_timestamp, len(self.created))
        if previous is not None and name <= previous.name:
            raise ValueError(f"index file name {name!r} does not sort after {previous.name!r}")
        if previous is None:
            current = IndexFileBuilder(self.geometry, name=name, materialise=self.materialise)
        else:
            current = IndexFileBuilder.new_rolled(previous, name)
        self.created.append(name)
        self._current = current
        if previous is not None:
            # IndexService.flush(previous) runs once the new file exists; only a full file
            # with a positive end moves the checkpoint.
            previous.flush()
            if previous.header.end_timestamp > 0:
                self.index_msg_timestamp = previous.header.end_timestamp
            self._rolled.append((previous.name, previous.header))
            if self.on_rolled is not None:
                self.on_rolled(previous)
        return current

    def finish(self) -> IndexFileBuilder | None:
        """Hand over the last file as it stands (the caller flushes it if its shutdown does);
        the builder takes no more records."""
        self._finished = True
        current, self._current = self._current, None
        if current is not None:
            self._rolled.append((current.name, current.header))
        return current
