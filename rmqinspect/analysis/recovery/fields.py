"""What the dispatch reads of each record, in one shape for both of its sources.

A run checked here (:class:`RunRecords`) reads its fields from the mapped columns, and the
topic ids, tagsCodes and index keys only when the dispatch asks for them. ``recover --jobs``'s
workers send back :class:`Fields`: the same values as numpy arrays for every record a range's
walk accepts, computed there (topic ids against the range's own topic table; tagsCodes and
index key hashes where the dispatch may ask for them, :class:`Wanted`), so this process
dispatches them without reading a record's bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np

from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import decode_text, enters_consume_queue, gather
from rmqinspect.format.javamath import wrap32
from rmqinspect.format.npbytes import I64, Buffer, Mask
from rmqinspect.format.scan import CheckedRun

Topics = tuple[I64, list[str]]  # each record's topic id, and the topics by id
_NONE: I64 = np.zeros(0, np.int64)
_I32 = np.iinfo(np.int32)


class DispatchRecords(Protocol):
    """Consecutive records of one commitlog file, as the dispatch reads them."""

    @property
    def positions(self) -> I64: ...
    @property
    def physical_offset_field(self) -> I64: ...
    @property
    def store_size(self) -> I64: ...
    @property
    def queue_id(self) -> I64: ...
    @property
    def queue_offset(self) -> I64: ...
    @property
    def store_timestamp(self) -> I64: ...
    @property
    def sys_flag(self) -> I64: ...

    def __len__(self) -> int: ...

    def topics(self) -> Topics:
        """Each record's topic id, and the decoded topics by id."""
        ...

    def enters_consume_queue(self) -> Mask: ...

    def tags_codes(self, rows: I64) -> I64:
        """The tagsCode the check gives each record of ``rows`` (ascending)."""
        ...

    def index_keys(self, rows: I64) -> tuple[I64, I64]:
        """The hashes of the index keys of the records ``rows`` (ascending), in ``buildIndex``
        order, and each key's record as its number among ``rows``."""
        ...

    def may_lack(self) -> I64 | None:
        """The records a queue may lack (rows, ascending), as far as known when they were
        read (:class:`Wanted`); None: any."""
        ...


def lacking_units(records: DispatchRecords, sel: Mask, end: Callable[[str, int], int]) -> I64:
    """The records of ``sel`` a queue lacks (their rows): consume-queue records whose phy +
    size pass their queue's maxPhysicOffset (``end(topic, queue id)``, -1 for a queue not
    there); ``putMessagePositionInfo`` skips the others."""
    rows = np.flatnonzero(sel & records.enters_consume_queue())
    if not len(rows):
        return rows
    tids, names = records.topics()
    keys = (tids[rows] << 32) | (records.queue_id[rows] & 0xFFFFFFFF)
    uniq, inverse = np.unique(keys, return_inverse=True)
    ends = [end(names[key >> 32], wrap32(key & 0xFFFFFFFF)) for key in uniq.tolist()]
    reach = records.physical_offset_field[rows] + records.store_size[rows]
    lacking: I64 = rows[reach > np.array(ends, np.int64)[inverse]]
    return lacking


def indexed_rows(records: DispatchRecords, sel: Mask, skip_below: int, creates_file: bool) -> I64:
    """The records of ``sel`` handed to ``buildIndex``: those from ``skip_below`` (the last
    index file's endPhyOffset) on, and the first one where it creates a file (which it does
    whatever the record's offset)."""
    need = sel & (records.physical_offset_field >= skip_below)
    if creates_file and sel.any():
        need[int(np.argmax(sel))] = True
    return np.flatnonzero(need)


@dataclass(frozen=True, slots=True)
class Wanted:
    """What the scan's dispatch (``Dispatcher.take_run``) can ask of the records it is handed,
    known when the scan starts: it dispatches only records above ``above``; a queue takes a
    unit only past its maxPhysicOffset, and the index a record only from its last file's
    endPhyOffset (``index_from``; None: no index), both of which only grow while the scan
    dispatches in offset order. So a record needs its tagsCode only where it passes its queue's
    end at the start (``queue_ends`` by topic and queue id; a queue not there: -1), and its
    index keys only from ``index_from`` on or as its run's first dispatched record."""

    above: int
    index_from: int | None
    queue_ends: dict[tuple[str, int], int]

    def rows(self, records: DispatchRecords, n: int) -> tuple[I64, I64]:
        """The rows of the first ``n`` records that may need their tagsCode, and those that
        may need their index keys."""
        phys = records.physical_offset_field
        sel = phys > self.above
        sel[n:] = False
        coded = lacking_units(records, sel, lambda t, q: self.queue_ends.get((t, q), -1))
        keyed = (
            _NONE if self.index_from is None else indexed_rows(records, sel, self.index_from, True)
        )
        return coded, keyed


class RunRecords:
    """The records of a run checked in this process, read from its columns."""

    def __init__(self, run: CheckedRun) -> None:
        self.run = run
        cols = run.columns
        self.positions = cols.positions
        self.physical_offset_field = cols.physical_offset_field
        self.store_size = cols.store_size
        self.queue_id = cols.queue_id
        self.queue_offset = cols.queue_offset
        self.store_timestamp = cols.store_timestamp
        self.sys_flag = cols.sys_flag
        self._topics: Topics | None = None

    def __len__(self) -> int:
        return len(self.run)

    def topics(self) -> Topics:
        if self._topics is None:
            tids, raw = self.run.columns.topic_ids()
            self._topics = tids, [decode_text(t) for t in raw]
        return self._topics

    def enters_consume_queue(self) -> Mask:
        return self.run.columns.enters_consume_queue()

    def tags_codes(self, rows: I64) -> I64:
        return self.run.tags_codes(rows, self.topics())

    def index_keys(self, rows: I64) -> tuple[I64, I64]:
        keys = self.run.columns.index_keys(rows, *self.topics())
        return keys.hashes, keys.owners

    def may_lack(self) -> I64 | None:
        return None


@dataclass(frozen=True, slots=True, eq=False)
class Fields:
    """Records' dispatch fields as arrays, small to send between processes: the topics by id
    (``topic_names``), and with ``dispatch`` each record's tagsCode and its index keys' hashes
    (record ``i``'s are ``hashes[key_bounds[i]:key_bounds[i + 1]]``). ``lean``: only the
    positions and index keys; the rest is read from the file where they are dispatched
    (:meth:`read`)."""

    positions: I64
    physical_offset_field: I64
    store_size: I64
    queue_id: I64
    queue_offset: I64
    store_timestamp: I64
    sys_flag: I64
    topic_ids: I64
    topic_names: list[str]
    codes: I64
    key_bounds: I64
    hashes: I64
    lean: bool = False
    coded: I64 | None = None  # the records a queue may lack, their tagsCodes computed (None: any)

    def __len__(self) -> int:
        return len(self.positions)

    @staticmethod
    def of(
        run: CheckedRun, n: int, dispatch: bool, lean: bool = False, wanted: Wanted | None = None
    ) -> Fields:
        """The first ``n`` records of ``run``; with ``dispatch``, their tagsCodes and index
        keys too (only where ``wanted`` says the dispatch may ask for them: 0 and no keys
        elsewhere); ``lean``: their positions and index keys only (for checks that wait long
        before their dispatch, as the export's do: they stay small)."""
        records = RunRecords(run)
        rows = np.arange(n, dtype=np.int64)
        coded, keyed = (rows, rows) if wanted is None else wanted.rows(records, n)
        bounds, hashes, codes = _NONE, _NONE, _NONE
        if dispatch:
            hashes, owners = records.index_keys(keyed) if len(keyed) else (_NONE, _NONE)
            bounds = np.searchsorted(keyed[owners], np.arange(n + 1, dtype=np.int64))
            if not lean:
                codes = np.zeros(n, np.int64)
                if len(coded):
                    codes[coded] = records.tags_codes(coded)
        cols = run.columns
        if lean:
            e = _NONE
            may = None if wanted is None else coded
            return Fields(cols.positions[:n], e, e, e, e, e, e, e, [], e, bounds, hashes, True, may)
        tids, names = records.topics()
        return Fields(
            cols.positions[:n],
            cols.physical_offset_field[:n],
            cols.store_size[:n],
            cols.queue_id[:n],
            cols.queue_offset[:n],
            cols.store_timestamp[:n],
            cols.sys_flag[:n],
            tids[:n],
            names,
            codes,
            bounds,
            hashes,
            coded=None if wanted is None else coded,
        )

    def __reduce__(self) -> tuple[Callable[..., Fields], tuple[Any, ...]]:
        # Sent between processes with the arrays whose values fit in 32 bits (positions in a
        # file, sizes, queue ids, flags, topic ids, key hashes, ...) as int32: half the bytes.
        return _received, tuple(_narrow(getattr(self, f.name)) for f in fields(self))

    def read(self, buf: Buffer, file_start: int, opts: cl.CheckOptions) -> DispatchRecords:
        """These records as the dispatch reads them: themselves, or (lean) their fields read
        from ``buf`` (the file's view), with the index keys sent."""
        if not self.lean or not len(self):
            return self
        cols = gather(buf, self.positions, file_start)
        run = CheckedRun(cols, int(cols.positions[0]), cols.end, None, opts)
        return _Keyed(run, self)

    @staticmethod
    def none() -> Fields:
        n = _NONE
        return Fields(n, n, n, n, n, n, n, n, [], n, n, n)

    def topics(self) -> Topics:
        return self.topic_ids, self.topic_names

    def enters_consume_queue(self) -> Mask:
        return enters_consume_queue(self.sys_flag)

    def tags_codes(self, rows: I64) -> I64:
        return self.codes[rows]

    def may_lack(self) -> I64 | None:
        return self.coded

    def index_keys(self, rows: I64) -> tuple[I64, I64]:
        lo = self.key_bounds[rows]
        counts = self.key_bounds[rows + 1] - lo
        owners = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
        firsts = np.cumsum(counts) - counts
        at = np.repeat(lo - firsts, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        return self.hashes[at], owners


def _narrow(value: Any) -> Any:
    """``value`` as int32 where it is an int64 array whose values all fit."""
    wide = isinstance(value, np.ndarray) and value.dtype == np.int64 and len(value)
    if wide and _I32.min <= int(value.min()) and int(value.max()) <= _I32.max:
        return value.astype(np.int32)
    return value


def _received(*values: Any) -> Fields:
    """:class:`Fields` from the values :func:`_narrow` sent, widened again (the dispatch
    shifts and adds them as int64)."""
    wide: list[Any] = [
        v.astype(np.int64) if isinstance(v, np.ndarray) and v.dtype == np.int32 else v
        for v in values
    ]
    return Fields(*wide)


class _Keyed(RunRecords):
    """Records read from the file, with their index keys found elsewhere."""

    def __init__(self, run: CheckedRun, keys: Fields) -> None:
        super().__init__(run)
        self._keys = keys

    def index_keys(self, rows: I64) -> tuple[I64, I64]:
        return self._keys.index_keys(rows)

    def may_lack(self) -> I64 | None:
        return self._keys.may_lack()
