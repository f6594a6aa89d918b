"""What the reput service does with the records the store writer appended (§10.11): consume
queue units (§5.1, with the pre-blank fill) and index entries (§7.3-7.5), buffered and handed
over with numpy a chunk of messages at a time."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rmqinspect.format.commitlog import SCHEDULE_TOPIC, dispatch_tags_code
from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE, CQ_UNIT_DTYPE, PRE_BLANK_UNIT
from rmqinspect.format.index_build import IndexBuilder, IndexFileBuilder, IndexNamer
from rmqinspect.format.javahash import index_key, java_hash, prefixed_key_hashes
from rmqinspect.format.names import offset_file_name
from rmqinspect.format.profile import Profile
from rmqinspect.store.layout import QueueId
from rmqinspect.synth.batchcq import BatchQueueFiles, bcq_file_size
from rmqinspect.synth.files import create_file, write_at, write_pieces
from rmqinspect.synth.layout import MessageColumns, StoreLayout

# Dispatch work is buffered and done with numpy in chunks of this many messages.
_DISPATCH_CHUNK = 1 << 15


def utc_index_name(timestamp_ms: int) -> str:
    """``UtilAll.timeMillisToHumanString`` (``yyyyMMddHHmmssSSS``) in UTC."""
    seconds, millis = divmod(timestamp_ms, 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y%m%d%H%M%S") + f"{millis:03d}"


class UtcNamer:
    """The default namer: the trigger's store time in UTC, moved 1 ms past the previous name
    when several files would be created within one millisecond (a broker would then reuse the
    same file name; a synthetic store keeps them apart)."""

    def __init__(self) -> None:
        self._last = -(2**63)

    def __call__(self, timestamp_ms: int, sequence: int) -> str:
        self._last = max(timestamp_ms, self._last + 1)
        return utc_index_name(self._last)


class ConsumeQueueFiles:
    """One ``consumequeue/<topic>/<queueId>`` (§5.1): units appended in dispatch order."""

    def __init__(self, root: Path, queue: QueueId, file_size: int) -> None:
        self.root = root
        self.queue = queue
        self.file_size = file_size
        self.file_start: int | None = None
        self.position = 0
        self.units = 0

    def append(self, units: npt.NDArray[np.void], first_queue_offset: int) -> None:
        data = units.tobytes()
        if self.file_start is None:
            # getLastMappedFile(expect) creates the file holding the first unit; fillPreBlank
            # puts placeholder units before it when the queue starts past offset 0.
            expect = first_queue_offset * CQ_STORE_UNIT_SIZE
            self.file_start = expect - expect % self.file_size
            # The path is built at the first unit: a queue the dispatch never reaches (an
            # undispatched tail's, whatever its topic) makes no directory.
            self.directory.mkdir(parents=True, exist_ok=True)
            os.close(create_file(self._path(self.file_start), self.file_size))
            blanks = (expect % self.file_size) // CQ_STORE_UNIT_SIZE
            data = PRE_BLANK_UNIT * blanks + data
            self.units += blanks
        self.units += len(units)
        view = memoryview(data)
        while view:
            if self.position == self.file_size:
                self.file_start += self.file_size
                self.position = 0
                os.close(create_file(self._path(self.file_start), self.file_size))
            take = min(len(view), self.file_size - self.position)
            write_at(self._path(self.file_start), self.position, bytes(view[:take]))
            self.position += take
            view = view[take:]

    def _path(self, start: int) -> Path:
        return self.directory / offset_file_name(start)

    @property
    def directory(self) -> Path:
        return self.root / self.queue.relative_dir


class Dispatcher:
    """The consume-queue and index dispatchers of a store being written.

    Consume queues are numbered from 1 in creation order (0 marks "no unit"); index files are
    written when the builder rolls past them and at :meth:`close`.
    """

    def __init__(
        self,
        root: Path,
        layout: StoreLayout,
        namer: IndexNamer,
        delay_table: Mapping[int, int],
    ) -> None:
        self.cq_dir = root / "consumequeue"
        self.index_dir = root / "index"
        self.cq_file_size = layout.cq_unit_file_size
        self.profile = layout.profile
        self.index_enabled = layout.message_index_enable
        self.delay_table = delay_table
        self.index = IndexBuilder(
            layout.index_geometry, namer, materialise=True, on_rolled=self._write_index
        )
        self.queues: dict[tuple[str, int], ConsumeQueueFiles | BatchQueueFiles] = {}
        self.batch_topics: set[str] = set()  # topics of queue.type BatchCQ
        self._queue_numbers: dict[tuple[str, int], int] = {}
        self._tag_codes: dict[str, int] = {}
        self.dispatched = 0
        self.logics_timestamp = 0  # store time of the last message given a consume queue unit
        # Requests waiting for the next chunk: (phy, size, store time, sysFlag, queue number,
        # queue offset, tagsCode) arrays, and (key hash, dispatch ordinal) arrays.
        self._pending: list[tuple[npt.NDArray[np.int64], ...]] = []
        self._pending_keys: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        self._pending_count = 0
        self._pending_first = 0

    def queue_number(self, key: tuple[str, int]) -> int:
        """The number of the consume queue of ``key``, created on first use."""
        number = self._queue_numbers.get(key)
        if number is None:
            number = self._queue_numbers[key] = len(self._queue_numbers) + 1
            topic, queue_id = key
            if topic in self.batch_topics:
                self.queues[key] = BatchQueueFiles(
                    self.cq_dir.parent, QueueId(topic, queue_id), bcq_file_size(self.cq_file_size)
                )
            else:
                self.queues[key] = ConsumeQueueFiles(
                    self.cq_dir.parent, QueueId(topic, queue_id), self.cq_file_size
                )
        return number

    def add(
        self,
        c: MessageColumns,
        dispatch: npt.NDArray[np.bool_],
        enters: npt.NDArray[np.bool_],
        sys_flag: npt.NDArray[np.int64],
        offsets: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        queue_offset: npt.NDArray[np.int64],
        queue_number: npt.NDArray[np.int64],
        batch_size: npt.NDArray[np.int64],
    ) -> None:
        """Buffer what the dispatchers receive for the dispatched messages of a batch
        (``batch_size``: the queue offsets each takes, ``INNER_NUM`` in a BatchCQ topic)."""
        rows = np.flatnonzero(dispatch)
        if not rows.size:
            return
        first = self.dispatched
        self.dispatched += rows.size
        store_ts = np.asarray(c.store_timestamp, dtype=np.int64)
        tags_code = self._tags_codes(c, rows, enters, store_ts)
        entering = rows[enters[rows]]
        if entering.size:
            self.logics_timestamp = int(store_ts[entering[-1]])
        self._pending.append(
            (
                offsets[rows],
                length[rows],
                store_ts[rows],
                sys_flag[rows],
                queue_number[rows],
                queue_offset[rows],
                tags_code,
                batch_size[rows],
            )
        )
        if self.index_enabled and len(c.keys):
            owner = np.asarray(c.key_owner, dtype=np.int64)
            kept = np.flatnonzero(dispatch[owner])
            prefixes = [index_key(topic, "") for topic in c.topics]
            hashes = prefixed_key_hashes(prefixes, np.asarray(c.topic)[owner], c.keys)[kept]
            ordinals = first + np.searchsorted(rows, owner[kept])
            self._pending_keys.append((hashes, ordinals))
        self._pending_count += rows.size
        if self._pending_count >= _DISPATCH_CHUNK:
            self.flush()

    def _tags_codes(
        self,
        c: MessageColumns,
        rows: npt.NDArray[np.int64],
        enters: npt.NDArray[np.bool_],
        store_ts: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.int64]:
        """tagsCode as ``checkMessageAndReturnSize`` computes it for the dispatcher (§5.2):
        the tag hash, or for a schedule-topic message with ``DELAY`` its delivery time."""
        cache = self._tag_codes
        for tags in set(c.tags):
            if tags and tags not in cache:
                cache[tags] = java_hash(tags)
        get = cache.get
        all_codes = np.fromiter(
            (get(tags, 0) if tags else 0 for tags in c.tags), dtype=np.int64, count=len(c.tags)
        )
        all_codes[~enters] = 0
        schedule = [n for n, t in enumerate(c.topics) if t == SCHEDULE_TOPIC]
        if schedule:
            delayed = np.flatnonzero((np.asarray(c.topic) == schedule[0]) & enters)
            for k in delayed.tolist():
                code = dispatch_tags_code(
                    SCHEDULE_TOPIC, c.tags[k], c.delay[k], int(store_ts[k]), self.delay_table
                )
                if code is None:
                    raise ValueError(f"DELAY {c.delay[k]!r} in {SCHEDULE_TOPIC} is not an integer")
                all_codes[k] = code
        return all_codes[rows]

    def flush(self) -> None:
        """Hand the buffered dispatch requests to the consume queues and the index."""
        if not self._pending:
            return
        phy, size, ts, sys_flag, queue, qoff, tags, batch = (
            np.concatenate(col) for col in zip(*self._pending, strict=True)
        )
        entering = np.flatnonzero(queue)
        if entering.size:
            units = np.empty(entering.size, dtype=CQ_UNIT_DTYPE)
            units["phy_offset"] = phy[entering]
            units["size"] = size[entering]
            units["tags_code"] = tags[entering]
            queue_of = queue[entering]
            order = np.argsort(queue_of, kind="stable")
            bounds = np.flatnonzero(np.diff(queue_of[order])) + 1
            queues = list(self.queues.values())
            for group in np.split(order, bounds):
                files = queues[int(queue_of[group[0]]) - 1]
                if isinstance(files, BatchQueueFiles):
                    rows = entering[group]
                    for k in rows.tolist():
                        files.append(
                            int(phy[k]),
                            int(size[k]),
                            int(tags[k]),
                            int(ts[k]),
                            int(qoff[k]),
                            int(batch[k]),
                        )
                    continue
                first = int(qoff[entering[group[0]]])
                files.append(units[group], first)
        if self.index_enabled:
            hashes = [h for h, _ in self._pending_keys]
            owners = [o for _, o in self._pending_keys]
            empty = np.zeros(0, dtype=np.int64)
            self.index.dispatch(
                phy,
                ts,
                sys_flag,
                np.concatenate(hashes) if hashes else empty,
                np.concatenate(owners) - self._pending_first if owners else empty,
            )
        self._pending_first += len(phy)
        self._pending = []
        self._pending_keys = []
        self._pending_count = 0

    def close(self, clean_shutdown: bool) -> None:
        """Write the last index file as the broker's shutdown (or a crash) leaves it."""
        self.flush()
        last = self.index.finish()
        if last is not None:
            # 5.x IndexFile.shutdown() flushes the whole header, which stores indexCount 1 in a
            # file without keys; 4.9 and a crash leave the header as the puts wrote it.
            if clean_shutdown and self.profile is not Profile.V4_9:
                last.flush()
            self._write_index(last)

    def _write_index(self, f: IndexFileBuilder) -> None:
        write_pieces(self.index_dir / f.name, f.geometry.file_size, f.writes())
