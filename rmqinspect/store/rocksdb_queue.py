"""RocksDB consume queues (``storeType=defaultRocksDB``; docs/rocksdb-consume-queue.md) read
without writing a byte into the store.

The database is opened read-only through a private temporary directory (outside the store)
that holds symbolic links to the store's own RocksDB files (copies of the small ones). The
binding writes a ``rocksdict-config.json`` next to any database it opens and RocksDB its info
``LOG``; both land in the private directory, which goes when the store is closed. ``LOCK`` and
``LOG*`` are never linked, so nothing can reach them.

Queues are found from the keys (a skip over each queue's first and last unit key) and from the
``offset`` family's ``max``/``min`` entries; units are read by key ranges, a run of consecutive
offsets at a time, so no offset or count read from the database decides an allocation.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format.rocksdb_cq import (
    CHECKPOINT_TOPIC,
    OFFSET_FAMILY,
    ROCKS_UNIT_DTYPE,
    ROCKS_UNIT_SIZE,
    decode_checkpoint_value,
    decode_offset_key,
    decode_offset_value,
    decode_unit_key,
    encode_unit_key,
    unit_key_prefix,
)
from rmqinspect.store.files import LayoutProblem
from rmqinspect.store.layout import QueueId

_NOT_LINKED = ("LOCK", "rocksdict-config.json")
_LAST_KEY_SUFFIX = b"\xff" * 8  # past every offset of a queue's key prefix
PROBLEM_LIMIT = 20  # malformed entries reported one by one; the rest are counted


@dataclass(frozen=True, slots=True)
class RocksQueue:
    """One queue's keys: its first and last unit key and its ``offset`` family entries,
    (commitlog offset, consume queue offset) each."""

    qid: QueueId
    first_key: int | None = None
    last_key: int | None = None
    max_entry: tuple[int, int] | None = None
    min_entry: tuple[int, int] | None = None


@dataclass
class RocksConsumeQueues:
    """The opened database: its queues, the dispatch checkpoint and what was malformed."""

    directory: Path
    queues: dict[QueueId, RocksQueue]
    checkpoint: int | None  # CHECKPOINT_TOPIC's max: end of the furthest record dispatched
    problems: list[LayoutProblem] = field(default_factory=list)
    _db: Any = None
    _private: Path | None = None
    _shadow: Path | None = None
    _malformed: int = 0
    _seen: set[tuple[str, bytes]] = field(default_factory=set)

    @classmethod
    def open(cls, directory: Path) -> RocksConsumeQueues:
        """StoreError (one line naming ``directory``) when it is not a RocksDB database."""
        from rocksdict import AccessType, Options, Rdict

        private = Path(tempfile.mkdtemp(prefix="rmqinspect-rocksdb-"))
        try:
            shadow = private / "db"
            shadow.mkdir()
            try:
                entries = list(os.scandir(directory))
                for entry in entries:
                    if (
                        entry.is_file(follow_symlinks=False)
                        and entry.name not in _NOT_LINKED
                        and not entry.name.startswith("LOG")
                    ):
                        _place(entry, shadow / entry.name)
            except OSError as err:
                raise StoreError(
                    f"cannot read the RocksDB database: {err.strerror or err}", str(directory)
                ) from None
            if not (shadow / "CURRENT").exists():
                raise StoreError("not a RocksDB database: no CURRENT file", str(directory))
            options = Options(raw_mode=True)
            options.set_db_log_dir(str(private / "log"))
            options.set_max_open_files(256)
            try:
                families = Rdict.list_cf(str(shadow), Options(raw_mode=True))
                db = Rdict(
                    str(shadow),
                    options,
                    column_families={n: Options(raw_mode=True) for n in families if n != "default"},
                    access_type=AccessType.read_only(False),
                )
            except Exception as err:  # the binding raises plain Exceptions
                raise StoreError(
                    f"not a RocksDB database RocketMQ can open: {_said(err, shadow, directory)}",
                    str(directory),
                ) from None
        except BaseException:
            shutil.rmtree(private, ignore_errors=True)
            raise
        out = cls(directory, {}, None, _db=db, _private=private, _shadow=shadow)
        try:
            out._load(families)
        except BaseException:
            out.close()
            raise
        return out

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None

    # --- what the database holds ----------------------------------------------------------

    def _bad(self, family: str, key: bytes, why: str) -> None:
        if (family, key) in self._seen:
            return  # the load's walk and a later read meet the same entry
        self._seen.add((family, key))
        self._malformed += 1
        if self._malformed <= PROBLEM_LIMIT:
            self.problems.append(
                LayoutProblem(
                    "rocksdb_entry",
                    str(self.directory),
                    f"{family} family key {key[:64].hex()}: {why}; skipped",
                )
            )

    def _load(self, families: list[str]) -> None:
        found: dict[QueueId, dict[str, Any]] = {}
        it = self._db.iter()
        it.seek_to_first()
        while it.valid():
            key = bytes(it.key())
            try:
                uk = decode_unit_key(key)
            except DecodeError as err:
                self._bad("default", key, err.message)
                it.next()
                continue
            prefix = unit_key_prefix(uk.topic, uk.queue_id)
            qid = QueueId(uk.topic, uk.queue_id)
            entry = found.setdefault(qid, {})
            entry["first_key"] = uk.queue_offset
            entry["last_key"] = self._last_key(it, prefix, uk.queue_offset)
            # on to the next queue: past this prefix's last possible key
            it.seek(prefix + _LAST_KEY_SUFFIX)
            if it.valid() and bytes(it.key()) == prefix + _LAST_KEY_SUFFIX:
                it.next()
        self._status(it)
        del it
        if OFFSET_FAMILY not in families:
            self.problems.append(
                LayoutProblem(
                    "rocksdb_entry",
                    str(self.directory),
                    "no offset column family: every queue reads as empty to the broker",
                )
            )
        else:
            self._load_offsets(found)
        self.queues = {
            qid: RocksQueue(qid, **found[qid])
            for qid in sorted(found, key=lambda q: (q.topic, q.queue_id))
        }
        if self._malformed > PROBLEM_LIMIT:
            self.problems.append(
                LayoutProblem(
                    "rocksdb_entry",
                    str(self.directory),
                    f"{self._malformed - PROBLEM_LIMIT} more malformed entries skipped",
                )
            )

    @staticmethod
    def _last_key(it: Any, prefix: bytes, first: int) -> int:
        """The highest offset of a queue's unit keys (malformed keys among them passed over:
        the forward walk reports them)."""
        it.seek_for_prev(prefix + _LAST_KEY_SUFFIX)
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(prefix):
                break
            try:
                return decode_unit_key(key).queue_offset
            except DecodeError:
                it.prev()
        return first

    def _load_offsets(self, found: dict[QueueId, dict[str, Any]]) -> None:
        it = self._db.get_column_family(OFFSET_FAMILY).iter()
        it.seek_to_first()
        while it.valid():
            key, value = bytes(it.key()), bytes(it.value())
            it.next()
            try:
                ok = decode_offset_key(key)
                if ok.topic == CHECKPOINT_TOPIC and ok.kind == "max":
                    self.checkpoint = decode_checkpoint_value(value)
                    continue
                pair = decode_offset_value(value)
            except DecodeError as err:
                self._bad(OFFSET_FAMILY, key, err.message)
                continue
            found.setdefault(QueueId(ok.topic, ok.queue_id), {})[f"{ok.kind}_entry"] = pair
        self._status(it)

    def _status(self, it: Any) -> None:
        """A walk that ended early because RocksDB met damage (a block checksum) is a
        StoreError, not a short answer."""
        try:
            it.status()
        except Exception as err:  # the binding raises plain Exceptions
            raise StoreError(
                f"the RocksDB database is damaged: {_said(err, self._shadow, self.directory)}",
                str(self.directory),
            ) from None

    # --- units ------------------------------------------------------------------------------

    def unit(self, qid: QueueId, queue_offset: int) -> npt.NDArray[np.void] | None:
        """The unit (one ``ROCKS_UNIT_DTYPE`` row) at ``queue_offset``; None when there is no
        key or its value is not 28 bytes (``getCQInKV``: the broker cannot read it)."""
        value = self._db.get(encode_unit_key(qid.topic, qid.queue_id, queue_offset))
        if value is None or len(value) != ROCKS_UNIT_SIZE:
            return None
        return np.frombuffer(bytes(value), ROCKS_UNIT_DTYPE, 1)

    def runs(
        self, qid: QueueId, start: int, stop: int, chunk: int
    ) -> Iterator[tuple[int, npt.NDArray[np.void]]]:
        """Units of ``[start, stop)`` as (first queue offset, ``ROCKS_UNIT_DTYPE`` rows) runs
        of consecutive offsets, at most ``chunk`` each: a missing key or a value that is not
        28 bytes ends a run (the broker's ``rangeQuery`` stops there too)."""
        prefix = unit_key_prefix(qid.topic, qid.queue_id)
        it = self._db.iter()
        it.seek(encode_unit_key(qid.topic, qid.queue_id, max(start, 0)))
        first = -1
        values: list[bytes] = []
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(prefix):
                break
            value = bytes(it.value())
            it.next()
            try:
                offset = decode_unit_key(key).queue_offset
            except DecodeError as err:
                self._bad("default", key, err.message)
                continue
            if offset >= stop:
                break
            if len(value) != ROCKS_UNIT_SIZE:
                self._bad("default", key, f"value is {len(value)} bytes, not {ROCKS_UNIT_SIZE}")
                continue
            if values and (offset != first + len(values) or len(values) >= chunk):
                yield first, _rows(values)
                values = []
            if not values:
                first = offset
            values.append(value)
        self._status(it)
        if values:
            yield first, _rows(values)


_COPIED = ("CURRENT", "IDENTITY", "OPTIONS")  # small files RocksDB opens by name
_COPY_LIMIT = 1 << 20


def _place(entry: os.DirEntry[str], where: Path) -> None:
    """Put one of the store's RocksDB files in the private directory: the small files RocksDB
    opens by name are copied (so that not even a write through a link could reach the
    store), the rest (tables, the WAL, the MANIFEST) linked."""
    if entry.name.startswith(_COPIED) and entry.stat(follow_symlinks=False).st_size <= _COPY_LIMIT:
        shutil.copyfile(entry.path, where, follow_symlinks=False)
    else:
        os.symlink(os.path.abspath(entry.path), where)


def _said(err: Exception, shadow: Path | None, directory: Path) -> str:
    """The first line of the binding's error, naming the store's files, not the private
    links to them."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    return first.replace(str(shadow), str(directory)) if shadow is not None else first


def _rows(values: list[bytes]) -> npt.NDArray[np.void]:
    return np.frombuffer(b"".join(values), ROCKS_UNIT_DTYPE).copy()


# --- the broker's reads of the offset family ----------------------------------------------------


def max_offset_in_queue(q: RocksQueue) -> int:
    """``getMaxOffsetInQueue``: the ``max`` entry's consume queue offset + 1, 0 without one."""
    return q.max_entry[1] + 1 if q.max_entry is not None else 0


def min_offset_in_queue(db: RocksConsumeQueues, q: RocksQueue, min_phy: int) -> tuple[int, str]:
    """``RocksDBConsumeQueueOffsetTable.getMinCqOffset(commitLog.minOffset)`` as the first call
    after a start answers it (nothing in the broker's heap yet), and a note when the ``min``
    entry is not the answer."""
    if q.min_entry is not None and q.min_entry[0] >= min_phy:
        return q.min_entry[1], ""
    old = q.min_entry[1] if q.min_entry is not None else 0
    # correctMinCqOffset
    if q.max_entry is None:
        return 0, "no max entry: getMinCqOffset answers 0"
    max_phy, max_cq = q.max_entry
    if max_phy < min_phy:
        return max_cq + 1, "the max entry lies below the commitlog's first file: min = max"
    found = _binary_search_min(db, q.qid, old, max_cq, min_phy)
    why = "no min entry" if q.min_entry is None else "the min entry lies below the commitlog"
    if found is None:
        return old, f"{why}, and no unit of [{old}, {max_cq}] reaches the commitlog"
    return found, f"{why}: getMinCqOffset's binary search finds the first unit in the commitlog"


def _binary_search_min(
    db: RocksConsumeQueues, qid: QueueId, low: int, high: int, target: int
) -> int | None:
    """``RocksDBConsumeQueueTable.binarySearchInCQ(..., min=true)``: the lowest offset whose
    unit's commitlog offset is at least ``target`` (a missing key moves the search up)."""
    result = None
    while high >= low:
        mid = low + ((high - low) >> 1)
        unit = db.unit(qid, mid)
        if unit is None:
            low = mid + 1
            continue
        phy = int(unit["phy_offset"][0])
        if phy == target:
            return mid
        if phy > target:
            high = mid - 1
            result = mid
        else:
            low = mid + 1
    return result
