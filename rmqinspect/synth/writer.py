"""A store writer that lays out a store directory byte for byte as a broker would.

:class:`StoreWriter` follows the broker's append path (rocketmq-store-format.md §2.10): the
delay-level rewrite, queue-offset assignment, the V2 magic for long topics, BLANK records and file
rolling (§2.3), the properties string of the profile, body and property CRCs (§3). It dispatches
what the reput service would (§10.11) to the consume queues (§5.1, including the pre-blank fill)
and to the index (§7.3-7.5, including rollover), and on :meth:`StoreWriter.close` writes the
checkpoint (§8), ``lock``, ``abort`` (§9) and the ``config/`` JSON files (§11).

Speed matters (a 1 GiB store must take seconds), so there is one append path and it works on
batches of messages in columns (:class:`MessageColumns`): lengths, placement and rolling, queue
offsets, record headers, tag codes and index key hashes are computed with numpy; only the
properties strings and the final concatenation of each record's parts are per-message Python.
``put`` and ``put_many`` make columns of :class:`MessageSpec` values; generators ``put_columns``.

The parts: :mod:`.layout` (the model), :mod:`.records` (record bytes), :mod:`.commitlog`
(placement and file writes), :mod:`.dledger` (the same for a DLedger commitlog: entries, index
units, checkpoint, currterm), :mod:`.dispatch` (consume queues and index), :mod:`.metadata`
(checkpoint, markers, config), :mod:`.files` (file primitives).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from rmqinspect.format import properties as props
from rmqinspect.format.checkpoint import Checkpoint
from rmqinspect.format.commitlog import (
    BORNHOST_V6_FLAG,
    IPV4_HOST_SIZE,
    IPV6_HOST_SIZE,
    MULTI_TAGS_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    parse_delay_levels,
)
from rmqinspect.format.config import TopicConfig
from rmqinspect.format.encode import reserve_prop_crc, rewrite_delay
from rmqinspect.format.index_build import IndexNamer
from rmqinspect.format.profile import Profile
from rmqinspect.synth.batchcq import (
    BATCH_CQ_ATTRIBUTES,
    INNER_BATCH_SYS_FLAG,
    inner_batch_body,
    inner_num,
)
from rmqinspect.synth.commitlog import CommitLogFiles
from rmqinspect.synth.dispatch import Dispatcher, UtcNamer
from rmqinspect.synth.dledger import DLedgerFiles
from rmqinspect.synth.layout import (
    DEFAULT_STORE_HOST,
    LedgerSummary,
    MessageColumns,
    MessageSpec,
    PlacedColumns,
    PutResult,
    StoreLayout,
    StoreSummary,
    check_columns,
)
from rmqinspect.synth.metadata import ConfigTables, write_shutdown_files
from rmqinspect.synth.records import (
    UNUSED_TOPIC,
    RecordParts,
    Row,
    TopicInfo,
    columns,
    heads,
    topic_info,
)

__all__ = [
    "DEFAULT_CLOCK_START_MS",
    "DEFAULT_PID",
    "DEFAULT_STORE_HOST",
    "MessageColumns",
    "MessageSpec",
    "PlacedColumns",
    "PutResult",
    "StoreLayout",
    "StoreSummary",
    "StoreWriter",
]

DEFAULT_CLOCK_START_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
DEFAULT_PID = 4242
# put_many() resolves messages and appends them in batches of this many.
_BATCH = 4096
# DLedger persists its checkpoint every checkPointInterval: the .bak is one interval older.
_CHECKPOINT_INTERVAL_MS = 3000
# Transaction types that get a queue offset and a consume-queue unit (NOT and COMMIT).
_QUEUE_TYPES = frozenset((TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE))


class _Clock:
    """Deterministic store clock: ``start``, then ``step_ms`` later for each call."""

    def __init__(self, start_ms: int, step_ms: int) -> None:
        self._next = start_ms
        self._step = step_ms

    def __call__(self) -> int:
        now = self._next
        self._next += self._step
        return now


class StoreWriter:
    """Write a new store directory message by message; use as a context manager.

    The output directory must be missing or empty: the writer never opens an existing store for
    writing. ``put`` appends a message the way the broker's append path does and returns where
    it went; ``close`` finishes every file. With ``crash`` the store is left as a killed broker
    leaves it: ``abort`` present, the pre-allocated next commitlog file, no shutdown flush of the
    index header; the checkpoint lags by ``flush_lag_ms`` (physicMsgTimestamp = store time of the
    last message whose time is at least that much before the last one) in either case.

    With ``layout.enable_dledger_commitlog`` the commitlog is DLedger's (``dledger-<selfId>/``,
    no ``commitlog/``): there the store checkpoint's physicMsgTimestamp follows the consume-queue
    dispatch, and the DLedger checkpoint's committed index lags by ``flush_lag_ms`` instead.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        layout: StoreLayout | None = None,
        *,
        index_namer: IndexNamer | None = None,
        clock: Callable[[], int] | None = None,
        crash: bool = False,
        flush_lag_ms: int = 0,
        pid: int = DEFAULT_PID,
    ) -> None:
        self.root = Path(root)
        self.layout = layout or StoreLayout()
        self.crash = crash
        self.flush_lag_ms = flush_lag_ms
        self.pid = pid
        if self.root.exists() and (not self.root.is_dir() or any(self.root.iterdir())):
            raise FileExistsError(
                errno.EEXIST, "output exists and is not an empty directory", str(self.root)
            )
        layout = self.layout
        self._profile = layout.profile
        for directory in ("consumequeue", "index"):
            (self.root / directory).mkdir(parents=True, exist_ok=True)
        self._ledger: DLedgerFiles | None = None
        if layout.enable_dledger_commitlog:
            home = self.root / f"dledger-{layout.dledger_self_id}"
            self._ledger = DLedgerFiles(home, layout.commitlog_file_size)
            self._log: CommitLogFiles = self._ledger
        else:
            (self.root / "commitlog").mkdir()
            self._log = CommitLogFiles(
                self.root / "commitlog", layout.commitlog_file_size, layout.commitlog_start_offset
            )
        delay_table = parse_delay_levels(layout.delay_levels)
        self._max_level = max(delay_table, default=0)
        self._dispatcher = Dispatcher(self.root, layout, index_namer or UtcNamer(), delay_table)
        self._config = ConfigTables(layout.profile, delay_table)
        self._clock = clock or _Clock(DEFAULT_CLOCK_START_MS, 1)
        self._trailing = layout.profile.properties_trailing_separator
        self._v2_enabled = (
            layout.profile.accepts_v2_magic and layout.auto_message_version_on_topic_len
        )
        self._next_offsets: dict[tuple[str, int], int] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._default_store_host = layout.store_host
        self._append_prop_crc = layout.append_prop_crc
        self._stamps: list[npt.NDArray[np.int64]] = []  # store timestamps, for the checkpoint
        self._messages = 0
        self._last_offset = -1
        self._dispatch_stopped = False
        self._closed = False
        self._summary: StoreSummary | None = None

    # --- context manager --------------------------------------------------------------------------

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self._closed = True
            # The error in flight says more than a write that failed after it.
            with contextlib.suppress(Exception):
                self._log.close(preallocate_next=False)

    # --- configuration ----------------------------------------------------------------------------

    def set_queue_offset(self, topic: str, queue_id: int, next_offset: int) -> None:
        """Start a queue at ``next_offset`` (as if older messages had expired): its first consume
        queue file then begins with pre-blank units."""
        key = (topic, queue_id)
        if key in self._dispatcher.queues or self._next_offsets.get(key, 0) != 0:
            raise ValueError(f"queue {topic}/{queue_id} already has messages")
        self._next_offsets[key] = next_offset

    def set_consumer_offsets(
        self,
        table: Mapping[str, Mapping[int, int]],
        previous: Mapping[str, Mapping[int, int]] | None = None,
    ) -> None:
        """See :meth:`ConfigTables.set_consumer_offsets`."""
        self._config.set_consumer_offsets(table, previous)

    def set_delay_offsets(
        self, table: Mapping[int, int], previous: Mapping[int, int] | None = None
    ) -> None:
        """``delayOffset.json`` content (delay level -> next offset)."""
        self._config.set_delay_offsets(table, previous)

    def set_retry_max_times(self, table: Mapping[str, int]) -> None:
        """See :meth:`ConfigTables.set_retry_max_times`."""
        self._config.set_retry_max_times(table)

    def declare_topic(self, config: TopicConfig) -> None:
        """Write this config for the topic in ``topics.json`` instead of a derived one."""
        self._config.declare_topic(config)

    def declare_batch_topic(self, topic: str, queues: int = 1) -> None:
        """Make ``topic`` a BatchConsumeQueue topic (``queue.type=BatchCQ``, 5.x): its units
        go to ``batchconsumequeue/`` and a record takes ``INNER_NUM`` queue offsets."""
        if self._profile is Profile.V4_9:
            raise ValueError("BatchConsumeQueue topics need a 5.x profile")
        if any(t == topic for t, _ in self._dispatcher.queues):
            raise ValueError(f"topic {topic} already has messages")
        self._dispatcher.batch_topics.add(topic)
        self._config.declare_topic(
            TopicConfig(
                topic_name=topic,
                read_queue_nums=queues,
                write_queue_nums=queues,
                attributes=dict(BATCH_CQ_ATTRIBUTES),
            )
        )

    def put_inner_batch(
        self, topic: str, queue_id: int, bodies: list[bytes], **spec: Any
    ) -> PutResult:
        """Append a producer's batch to a BatchCQ topic as the broker stores it: one record
        with the messages in its body (``MessageDecoder.encodeMessages``), sysFlag
        ``NEED_UNWRAP | INNER_BATCH``, ``INNER_NUM`` = their count and ``INNER_BASE`` = the
        queue offset it gets. ``spec``: further :class:`MessageSpec` fields."""
        if topic not in self._dispatcher.batch_topics:
            raise ValueError(f"{topic} is not a BatchCQ topic (declare_batch_topic)")
        base = self._next_offsets.get((topic, queue_id), 0)
        extra = dict(spec.pop("properties", None) or {})
        extra[props.INNER_NUM] = str(len(bodies))
        extra[props.INNER_BASE] = str(base)
        return self.put(
            MessageSpec(
                topic,
                inner_batch_body(bodies),
                queue_id,
                properties=extra,
                sys_flag=INNER_BATCH_SYS_FLAG | spec.pop("sys_flag", 0),
                **spec,
            )
        )

    @property
    def end_offset(self) -> int:
        """Physical offset where the next record would start (before any roll)."""
        return self._log.end

    @property
    def message_count(self) -> int:
        return self._messages

    @property
    def last_offset(self) -> int:
        """Physical offset of the last record put (-1 before the first)."""
        return self._last_offset

    @property
    def last_store_timestamp(self) -> int:
        """The store time of the last message put (0 before the first)."""
        return int(self._stamps[-1][-1]) if self._stamps and len(self._stamps[-1]) else 0

    def next_queue_offsets(self) -> dict[tuple[str, int], int]:
        """The queue offset the next message of each (topic, queue) would get."""
        return dict(self._next_offsets)

    # --- the append path --------------------------------------------------------------------------

    def put(self, spec: MessageSpec) -> PutResult:
        """Append one message as the broker's append path does; returns where it went."""
        rows = [self._resolve(spec, self._dispatch_stopped)]
        placed = self.put_columns(columns(rows))
        topic, queue_id = rows[0].topic, rows[0].queue_id
        return PutResult(
            int(placed.physical_offset[0]),
            int(placed.size[0]),
            topic,
            queue_id,
            int(placed.queue_offset[0]),
            rows[0].store_timestamp,
            self._topics[topic].version,
            placed.blank_offset.get(0),
        )

    def put_many(self, specs: Iterable[MessageSpec]) -> int:
        """``put`` for each message, in batches (``last_offset`` moves once per batch);
        returns how many were written. A message that fails validation stops the call after
        every message before it was written."""
        count = 0
        rows: list[Row] = []
        stopped = self._dispatch_stopped
        try:
            for spec in specs:
                row = self._resolve(spec, stopped)
                stopped = stopped or not row.dispatch
                rows.append(row)
                if len(rows) == _BATCH:
                    count += len(self.put_columns(columns(rows)).size)
                    rows = []
        finally:
            if rows:
                count += len(self.put_columns(columns(rows)).size)
        return count

    def _resolve(self, spec: MessageSpec, dispatch_stopped: bool) -> Row:
        """A message in stored form: the delay rewrite, the properties string, and what the
        dispatcher will read from it."""
        if spec.dispatch and dispatch_stopped:
            raise ValueError("dispatch stopped at an earlier message; the reput never skips one")
        topic = spec.topic
        queue_id = spec.queue_id
        raw = spec.properties
        if isinstance(raw, bytes):
            properties, tags, delay, uniq, keys = self._raw_properties(spec, raw)
        else:
            if raw and not (
                spec.tags or spec.keys or spec.uniq_key or spec.delay_level or self._append_prop_crc
            ):
                pairs: Mapping[str, str] = raw  # used as is; copied before any change
            else:
                pairs = self._pairs(spec)
            delay = pairs.get(props.DELAY)
            if delay is not None and spec.sys_flag & TRANSACTION_TYPE_MASK in _QUEUE_TYPES:
                pairs = dict(pairs)
                topic, queue_id = rewrite_delay(pairs, topic, queue_id, delay, self._max_level)
                delay = pairs[props.DELAY]
            properties = props.encode_properties_map(pairs, self._trailing)
            # The dispatcher reads the stored string back, which drops empty values.
            tags = pairs.get(props.TAGS) or None
            delay = delay or None
            uniq = pairs.get(props.UNIQ_KEY) or None
            keys = pairs.get(props.KEYS) or None
        index_keys = props.index_key_values(uniq, keys)
        store_ts = self._clock() if spec.store_timestamp is None else spec.store_timestamp
        return Row(
            topic,
            queue_id,
            properties,
            tags,
            delay,
            index_keys,
            spec.body,
            spec.born_host,
            spec.store_host or self._default_store_host,
            store_ts if spec.born_timestamp is None else spec.born_timestamp,
            store_ts,
            spec.sys_flag,
            spec.flag,
            spec.reconsume_times,
            spec.prepared_transaction_offset,
            spec.dispatch,
        )

    def put_columns(self, c: MessageColumns) -> PlacedColumns:
        """Append a batch of messages given as columns (the append path, vectorised)."""
        if self._closed:
            raise ValueError("the store writer is closed")
        count = len(c.topic)
        check_columns(c, count)
        dispatch = np.asarray(c.dispatch, dtype=bool)
        stops = np.flatnonzero(~dispatch)
        if dispatch.any() and (
            self._dispatch_stopped or (stops.size and stops[0] < np.flatnonzero(dispatch)[-1])
        ):
            raise ValueError("dispatch stopped at an earlier message; the reput never skips one")
        topic = np.asarray(c.topic, dtype=np.int64)
        # Only topics in use are checked (a table entry may not fit this profile's records).
        used = set(np.unique(topic).tolist())
        infos = [self._topic(t) if n in used else UNUSED_TOPIC for n, t in enumerate(c.topics)]
        v6 = np.fromiter((h.is_v6 for h in c.hosts), dtype=bool, count=len(c.hosts))
        born6 = v6[c.born_host]
        store6 = v6[c.store_host]
        host_flags = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
        sys_flag = np.asarray(c.sys_flag, dtype=np.int64) & ~host_flags
        sys_flag |= born6 * BORNHOST_V6_FLAG | store6 * STOREHOSTADDRESS_V6_FLAG
        properties = list(c.properties)
        if self._append_prop_crc:
            properties = [reserve_prop_crc(p) for p in properties]
        props_length = np.fromiter(map(len, properties), dtype=np.int64, count=count)
        if (props_length > 32767).any():
            raise ValueError(f"properties of {int(props_length.max())} bytes exceed 32767")
        body_lengths = np.fromiter(map(len, c.bodies), dtype=np.int64, count=len(c.bodies))
        body_length = body_lengths[c.body]
        fixed = np.array([info.fixed_length for info in infos], dtype=np.int64)[topic]
        v6_extra = IPV6_HOST_SIZE - IPV4_HOST_SIZE
        length = fixed + v6_extra * born6 + v6_extra * store6 + body_length + props_length
        # place() checks that every record fits a file before any state changes.
        offsets, runs = self._log.place(length)
        tran = sys_flag & TRANSACTION_TYPE_MASK
        enters = (tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE)
        queue_offset, queue_number, batch_size = self._queue_offsets(c, enters, properties)
        parts = RecordParts(
            heads(c, infos, length, offsets, queue_offset, sys_flag, born6, store6, body_length),
            c.bodies,
            np.asarray(c.body).tolist(),
            [info.tail for info in infos],
            topic.tolist(),
            props_length.astype(">i2").tobytes(),
            properties,
            length.tolist(),
            self._append_prop_crc,
        )
        blanks: dict[int, int] = {}
        for run in runs:
            self._log.write(run, parts.join(run.first, run.end))
            if run.blank:
                blanks[run.end] = run.file_start + self._log.file_size - run.blank
        self._stamps.append(np.asarray(c.store_timestamp, dtype=np.int64))
        self._messages += count
        if count:
            self._last_offset = int(offsets[-1])
        if not dispatch.all():
            self._dispatch_stopped = True
        self._dispatcher.add(
            c, dispatch, enters, sys_flag, offsets, length, queue_offset, queue_number, batch_size
        )
        return PlacedColumns(offsets, length, queue_offset, blanks)

    def _queue_offsets(
        self, c: MessageColumns, enters: npt.NDArray[np.bool_], properties: list[bytes]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Queue offsets (NOT/COMMIT messages take the next one of their queue; PREPARED and
        ROLLBACK get 0), consume-queue numbers (0: no unit) and how many offsets each takes
        (``INNER_NUM`` in a BatchCQ topic, ``assignBatchQueueOffset``; else 1) for a batch."""
        count = len(c.topic)
        queue_offset = np.zeros(count, dtype=np.int64)
        batch_size = np.ones(count, dtype=np.int64)
        queue_number = np.zeros(count, dtype=np.int64)
        queue_id = np.asarray(c.queue_id, dtype=np.int64)
        combined = np.asarray(c.topic, dtype=np.int64) * (int(queue_id.max(initial=0)) + 1)
        combined += queue_id
        order = np.argsort(combined, kind="stable")
        bounds = np.flatnonzero(np.diff(combined[order])) + 1
        for rows in np.split(order, bounds):
            if not rows.size:
                continue
            key = (c.topics[int(c.topic[rows[0]])], int(queue_id[rows[0]]))
            self._config.used_queues.add(key)
            entering = rows[enters[rows]]
            if entering.size:
                base = self._next_offsets.get(key, 0)
                if key[0] in self._dispatcher.batch_topics:
                    sizes = np.array([inner_num(properties[r]) for r in entering.tolist()])
                    batch_size[entering] = sizes
                    starts = np.cumsum(sizes) - sizes
                    queue_offset[entering] = base + starts
                    self._next_offsets[key] = base + int(sizes.sum())
                else:
                    queue_offset[entering] = base + np.arange(entering.size)
                    self._next_offsets[key] = base + entering.size
                queue_number[entering] = self._dispatcher.queue_number(key)
        for t in np.unique(np.asarray(c.topic)[(np.asarray(c.sys_flag) & MULTI_TAGS_FLAG) != 0]):
            self._config.multi_tag_topics.add(c.topics[int(t)])
        return queue_offset, queue_number, batch_size

    def _raw_properties(
        self, spec: MessageSpec, raw: bytes
    ) -> tuple[bytes, str | None, str | None, str | None, str | None]:
        """Stored properties given verbatim, and what the dispatcher reads from them."""
        if spec.tags is not None or spec.keys is not None or spec.uniq_key is not None:
            raise ValueError("raw properties bytes exclude tags, keys and uniq_key")
        if spec.delay_level:
            raise ValueError("raw properties bytes are stored as given: no delay rewrite")
        if self._append_prop_crc:
            raw = props.delete_property(raw, props.CRC32)
        parsed = props.parse_properties(raw.decode("utf-8", "replace"))
        return (
            raw,
            parsed.get(props.TAGS),
            parsed.get(props.DELAY),
            parsed.get(props.UNIQ_KEY),
            parsed.get(props.KEYS),
        )

    def _pairs(self, spec: MessageSpec) -> dict[str, str]:
        # Message(topic, tags, keys, ...) puts TAGS then KEYS; the producer adds UNIQ_KEY at send.
        pairs: dict[str, str] = {}
        if spec.tags:
            pairs[props.TAGS] = spec.tags
        keys = spec.keys
        if keys:
            pairs[props.KEYS] = keys if isinstance(keys, str) else props.KEY_SEPARATOR.join(keys)
        if spec.properties:
            assert not isinstance(spec.properties, bytes)
            pairs.update(spec.properties)
        if spec.uniq_key:
            pairs[props.UNIQ_KEY] = spec.uniq_key
        if spec.delay_level > 0:
            pairs[props.DELAY] = str(spec.delay_level)
        if self.layout.append_prop_crc:
            pairs.pop(props.CRC32, None)
        return pairs

    def _topic(self, topic: str) -> TopicInfo:
        info = self._topics.get(topic)
        if info is None:
            info = self._topics[topic] = topic_info(topic, self._v2_enabled)
        return info

    # --- shutdown ---------------------------------------------------------------------------------

    def close(self) -> StoreSummary:
        """Finish every file and write checkpoint, lock, abort and config (idempotent)."""
        if self._summary is not None:
            return self._summary
        if self._closed:
            raise ValueError("the store writer was abandoned after an error")
        self._dispatcher.flush()
        self._closed = True
        crash = self.crash
        self._log.close(preallocate_next=crash)
        self._dispatcher.close(clean_shutdown=not crash)
        checkpoint = self._checkpoint()
        write_shutdown_files(self.root, self._profile, checkpoint, crash, self.pid)
        ledger: LedgerSummary | None = None
        if self._ledger is not None:
            flushed = self._flushed()
            earlier = (
                self._flushed(self.flush_lag_ms + _CHECKPOINT_INTERVAL_MS) if crash else flushed
            )
            self._ledger.write_state(flushed - 1, earlier - 1, self.layout.dledger_self_id)
            home = self._ledger.home.name
            ledger = LedgerSummary(home, self._ledger.next_index, self._ledger.term, flushed - 1)
        self._config.write(self.root / "config", self.last_store_timestamp)
        queues, index = self._dispatcher.queues, self._dispatcher.index
        self._summary = StoreSummary(
            root=self.root,
            profile=self._profile,
            messages=self._messages,
            dispatched=self._dispatcher.dispatched,
            commitlog_files=tuple(self._log.files),
            commitlog_end=self._log.end,
            data_bytes=self._log.data_bytes,
            consume_queues={f"{t}/{q}": cq.units for (t, q), cq in queues.items()},
            index_files=tuple(index.created),
            index_entries=index.entries,
            checkpoint=checkpoint,
            crashed=crash,
            dledger=ledger,
        )
        return self._summary

    def _flushed(self, lag_ms: int | None = None) -> int:
        """How many messages a flush ``lag_ms`` (default ``flush_lag_ms``) before the last
        store time had covered: those stored at least that long before the last one."""
        stamps = np.concatenate(self._stamps) if self._stamps else np.zeros(0, dtype=np.int64)
        if not stamps.size:
            return 0
        late = np.flatnonzero(
            stamps > stamps[-1] - (self.flush_lag_ms if lag_ms is None else lag_ms)
        )
        return int(late[0]) if late.size else stamps.size

    def _checkpoint(self) -> Checkpoint:
        logics = self._dispatcher.logics_timestamp
        if self._ledger is not None:
            # DLedger mode: the consume-queue dispatch sets physicMsgTimestamp too.
            physic = logics
        else:
            stamps = np.concatenate(self._stamps) if self._stamps else np.zeros(0, np.int64)
            flushed = self._flushed()
            physic = int(stamps[flushed - 1]) if flushed else 0
        index_ts = self._dispatcher.index.index_msg_timestamp or 0
        return Checkpoint(physic, logics, index_ts)
