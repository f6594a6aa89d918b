"""The table builders: each turns one planned part into Arrow batches of its table's schema.

Both engines call these and nothing else to produce rows, which is what makes their tables
identical. ``findings`` are ``verify``'s, turned into rows by :func:`findings_batch`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rmqinspect.analysis.copies import copy_rows, known_groups
from rmqinspect.analysis.groups import groups_report
from rmqinspect.analysis.indexes import entry_blocks, open_index_files
from rmqinspect.analysis.offsets import offsets_report, parse_broker_version
from rmqinspect.analysis.queues import UnitChunk, iter_unit_chunks
from rmqinspect.analysis.recovery.keeps import RangeJudge, RestartKeeps
from rmqinspect.analysis.units import STATUSES, resolve_units
from rmqinspect.analysis.verify import Finding
from rmqinspect.export.plan import (
    CommitlogChunk,
    CommitlogRange,
    FileGroup,
    IndexSlice,
    OffsetsPart,
    Part,
    QueueRange,
    QueueSlice,
    commitlog_file,
    resolve_chunk,
)
from rmqinspect.export.records import RecordRun, record_runs
from rmqinspect.export.schema import (
    CONSUME_QUEUE,
    CONSUMER_OFFSETS,
    FINDINGS,
    GROUP_OFFSETS,
    INDEX_ENTRIES,
    MESSAGE_COPIES,
    MESSAGES,
    MS_UTC,
    Table,
)
from rmqinspect.export.timers import TimersPart, timers_batches
from rmqinspect.export.topics import partition_column
from rmqinspect.format import batch
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.batch import host_text_column, offset_msg_id_column
from rmqinspect.format.batchcq import BCQ_STORE_UNIT_SIZE, bcq_as_file_units
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.consumequeue import TAGS_CODE_KINDS, tags_code_kinds
from rmqinspect.format.times import MAX_ISO_MS, MIN_ISO_MS
from rmqinspect.render.values import encodable
from rmqinspect.store.batch_queue import BatchChunk
from rmqinspect.store.files import content_crc32c
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store


def read_part(
    store: Store, part: Part, tables: Sequence[Table], keeps: RestartKeeps | None = None
) -> Iterator[tuple[Table, pa.RecordBatch]]:
    """Batches of ``tables`` from one part (tables the part does not feed yield nothing).
    ``keeps`` is needed for ``messages``."""
    if isinstance(part, CommitlogChunk):
        found = resolve_chunk(store, part)
        if found is not None:
            yield from _commitlog(store, found, tables, keeps)
    elif isinstance(part, CommitlogRange):
        yield from _commitlog(store, part, tables, keeps)
    elif isinstance(part, QueueSlice) and Table.CONSUME_QUEUE in tables:
        yield from ((Table.CONSUME_QUEUE, b) for b in consume_queue_batches(store, part))
    elif isinstance(part, IndexSlice) and Table.INDEX_ENTRIES in tables:
        yield from ((Table.INDEX_ENTRIES, b) for b in index_entry_batches(store, part))
    elif isinstance(part, TimersPart) and Table.TIMERS in tables:
        yield from ((Table.TIMERS, b) for b in timers_batches(store))
    elif isinstance(part, OffsetsPart):
        if Table.CONSUMER_OFFSETS in tables:
            yield Table.CONSUMER_OFFSETS, consumer_offsets_batch(store)
        if Table.GROUP_OFFSETS in tables:
            yield Table.GROUP_OFFSETS, group_offsets_batch(store)


# --- messages -----------------------------------------------------------------------------------


def _commitlog(
    store: Store, part: CommitlogRange, tables: Sequence[Table], keeps: RestartKeeps | None
) -> Iterator[tuple[Table, pa.RecordBatch]]:
    messages, copies = Table.MESSAGES in tables, Table.MESSAGE_COPIES in tables
    if not (messages or copies):
        return
    if messages and keeps is None:
        raise ValueError("the messages table needs the restart prediction")
    groups = known_groups(store) if copies else ()
    f = commitlog_file(store, part.file)
    source = part.source
    judge = None
    if keeps is not None and keeps.serving is not None:
        # The emulation left the no_queue_unit losses to the ranges: judged on this walk.
        judge = RangeJudge(keeps, store, f.name, part.walk_from, part.begin, part.end)
    try:
        for run in record_runs(store, f, part.begin, part.end, decode=messages):
            if copies and run.columns is not None and len(run.columns):
                yield Table.MESSAGE_COPIES, message_copies_batch(run.columns, f.start, groups)
            if judge is not None:
                if run.columns is not None:
                    judge.run(run.columns, run.topic_ids)
                elif run.damage_at is not None:
                    judge.damage(run.damage_at)
            if keeps is not None and run.records is not None and run.records.num_rows:
                unserved = None if judge is None else judge.unserved
                for b in messages_batches(run, source, f.start, keeps, unserved):
                    yield Table.MESSAGES, b
    finally:
        if judge is not None:
            judge.close()


def messages_batches(
    run: RecordRun,
    source_file: str,
    file_start: int,
    keeps: RestartKeeps,
    unserved: npt.NDArray[np.int64] | None = None,
) -> Iterator[pa.RecordBatch]:
    """A run's records as ``messages`` rows (the JSON message object with Arrow types), in
    one batch, or in several where the decompressed bodies would not fit one
    (:func:`batch.consumer_bodies`); ``unserved``: the range's judged no_queue_unit losses
    (see :class:`RestartKeeps`)."""
    assert run.records is not None
    stored = run.records.column("body")
    sys_flag = run.records.column("sys_flag").to_numpy().astype(np.int64)
    for bodies in batch.consumer_bodies(stored, sys_flag):
        whole = bodies.start == 0 and bodies.stop == len(stored)
        part = run if whole else run.rows(bodies.start, bodies.stop)
        yield messages_batch(part, source_file, file_start, keeps, bodies, unserved)


def messages_batch(
    run: RecordRun,
    source_file: str,
    file_start: int,
    keeps: RestartKeeps,
    bodies: batch.BodyColumns,
    unserved: npt.NDArray[np.int64] | None = None,
) -> pa.RecordBatch:
    """The ``messages`` rows of a run whose body columns are ``bodies``."""
    r = run.records
    assert r is not None and run.record_crc32c is not None
    n = r.num_rows
    phy = r.column("physical_offset")
    phy_np = phy.to_numpy()
    field = r.column("physical_offset_field")
    sys_flag = r.column("sys_flag").to_numpy()
    flags, flag_index = np.unique(sys_flag, return_inverse=True)
    index = pa.array(flag_index.astype(np.int32))
    maps = batch.properties_column(r.column("properties"))
    columns = {
        "physical_offset": phy,
        "store_size": r.column("store_size"),
        "version": pa.array(["v1", "v2"]).take(pc.subtract(r.column("version"), 1)),
        "topic": r.column("topic"),
        "queue_id": r.column("queue_id"),
        "queue_offset": r.column("queue_offset"),
        "sys_flag": r.column("sys_flag"),
        "transaction": pa.array([cl.transaction_name(int(f)) for f in flags]).take(index),
        "flag": r.column("flag"),
        "body_crc": r.column("body_crc"),
        "body_crc_ok": r.column("body_crc_ok"),
        "born_timestamp": _timestamps(r.column("born_timestamp")),
        "born_host": host_text_column(r.column("born_host"), r.column("born_port")),
        "store_timestamp": _timestamps(r.column("store_timestamp")),
        "store_host": host_text_column(r.column("store_host"), r.column("store_port")),
        "reconsume_times": r.column("reconsume_times"),
        "prepared_transaction_offset": r.column("prepared_transaction_offset"),
        "properties": maps,
        "tags": batch.map_values(maps, props.TAGS),
        "keys": batch.keys_column(batch.map_values(maps, props.KEYS)),
        "uniq_key": batch.map_values(maps, props.UNIQ_KEY),
        "msg_id": offset_msg_id_column(
            r.column("store_host"),
            r.column("store_port").to_numpy().astype(np.int64),
            field.to_numpy(),
        ),
        "body_length": pc.binary_length(r.column("body")),
        "compression": pa.array([cl.compression_name(int(f)) for f in flags], pa.string()).take(
            index
        ),
        "body": bodies.body,
        "body_stored": bodies.body_stored,
        "body_error": bodies.body_error,
        "physical_offset_field": pc.if_else(
            pc.equal(field, phy), pa.scalar(None, pa.int64()), field
        ),
        "file": pa.repeat(pa.scalar(source_file), n),
        "file_position": pa.array(phy_np - file_start),
        "restart_keeps": _restart_keeps(keeps, source_file.rpartition("/")[2], phy_np, unserved),
        "record_crc32c": pa.array(run.record_crc32c),
        "dledger_index": _entry_field(run, "index"),
        "dledger_term": _entry_field(run, "term"),
        "topic_partition": partition_column(r.column("topic")),
    }
    return pa.RecordBatch.from_arrays(
        [_as(columns[f.name], f.type) for f in MESSAGES], schema=MESSAGES
    )


def _as(column: pa.Array, type_: pa.DataType) -> pa.Array:
    """``column`` as ``type_`` (a cast costs tens of microseconds even when it changes nothing)."""
    return column if column.type == type_ else column.cast(type_)


def _restart_keeps(
    keeps: RestartKeeps,
    file_name: str,
    physical_offsets: npt.NDArray[np.int64],
    unserved: npt.NDArray[np.int64] | None,
) -> pa.Array:
    """The ``restart_keeps`` column: null when the broker would refuse to start (there is no
    post-restart store)."""
    if not keeps.broker_starts:
        return pa.nulls(len(physical_offsets), pa.bool_())
    return pa.array(keeps.keeps(file_name, physical_offsets, unserved))


def _entry_field(run: RecordRun, name: str) -> pa.Array:
    """A field of each row's DLedger entry header (null in a plain store)."""
    if run.entries is None:
        return pa.nulls(len(run.positions), pa.int64())
    return pa.array(run.entries[name].astype(np.int64))


def _timestamps(ms: pa.Array) -> pa.Array:
    """Epoch ms as ``timestamp[ms, UTC]``; null outside years 1..9999, like ``*_time`` in JSON
    (a corrupt value has no date, and Spark could not hold it)."""
    valid = pc.and_(pc.greater_equal(ms, MIN_ISO_MS), pc.less_equal(ms, MAX_ISO_MS))
    return pc.if_else(valid, ms, pa.scalar(None, pa.int64())).cast(MS_UTC)


def _text(value: str | None) -> str | None:
    """A name for an Arrow string column, which holds UTF-8 only (see ``encodable``)."""
    return None if value is None else encodable(value)


def findings_batch(findings: Sequence[Finding]) -> pa.RecordBatch:
    """``verify``'s findings as ``findings`` rows (the hex dumps stay in ``verify -F json``)."""
    return pa.RecordBatch.from_pydict(
        {
            "check_id": [f.check for f in findings],
            "severity": [f.severity.value for f in findings],
            "file": [encodable(f.file) for f in findings],
            "file_position": [f.file_position for f in findings],
            "physical_offset": [f.physical_offset for f in findings],
            "topic": [_text(f.topic) for f in findings],
            "queue_id": [f.queue_id for f in findings],
            "queue_offset": [f.queue_offset for f in findings],
            "detail": [encodable(f.detail) for f in findings],
        },
        schema=FINDINGS,
    )


# --- the other tables ---------------------------------------------------------------------------


def consume_queue_batches(store: Store, part: QueueSlice) -> Iterator[pa.RecordBatch]:
    """Every unit of the slice's queues with what it points to (:func:`resolve_units`), a
    chunk of units at a time."""
    for queue in part.ranges:
        yield from _queue_batches(store, queue)


def _queue_batches(store: Store, part: QueueRange) -> Iterator[pa.RecordBatch]:
    qdir = store.queue_dirs[QueueId(part.topic, part.queue_id)]
    # Names from directory listings: Arrow strings are UTF-8 (see ``encodable``).
    topic = encodable(part.topic)
    directory = encodable(qdir.relative_to(store.root).as_posix())
    statuses = pa.array([s.value for s in STATUSES], pa.string())
    kinds = pa.array([k.value for k in TAGS_CODE_KINDS], pa.string())
    for chunk in iter_unit_chunks(
        store, part.topic, part.queue_id, part.start, part.stop - part.start
    ):
        if chunk.batch is not None and bool((chunk.queue_offsets < part.start).any()):
            # A BatchConsumeQueue unit belongs to the slice that holds its msgBaseOffset:
            # one whose batch only reaches into this slice is the slice before's row.
            for c in _from_base(chunk, part.start):
                yield _unit_batch(store, part, c, topic, directory, statuses, kinds)
            continue
        yield _unit_batch(store, part, chunk, topic, directory, statuses, kinds)


def _unit_batch(
    store: Store,
    part: QueueRange,
    chunk: UnitChunk,
    topic: str,
    directory: str,
    statuses: pa.Array,
    kinds: pa.Array,
) -> pa.RecordBatch:
    """One chunk's rows of the consume_queue table."""
    n = len(chunk)
    res = resolve_units(store, part.topic, part.queue_id, chunk.queue_offsets, chunk.units)
    tags = chunk.units["tags_code"].astype(np.int64)
    details = np.full(n, "", object)
    if res.details:
        details[list(res.details)] = list(res.details.values())
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic), n),
            pa.repeat(pa.scalar(part.queue_id, pa.int32()), n),
            pa.array(chunk.queue_offsets),
            pa.array(chunk.units["phy_offset"].astype(np.int64)),
            pa.array(chunk.units["size"].astype(np.int32)),
            pa.array(tags),
            kinds.take(pa.array(tags_code_kinds(tags, part.topic))),
            statuses.take(pa.array(res.codes)),
            pa.array(details, pa.string()),
            pa.repeat(pa.scalar(f"{directory}/{chunk.file.name}"), n),
            pa.array(chunk.positions),
        ],
        schema=CONSUME_QUEUE,
    )


def _from_base(chunk: UnitChunk, start: int) -> Iterator[UnitChunk]:
    """The units of a BatchConsumeQueue chunk whose msgBaseOffset is ``start`` or later, one
    chunk each (bases need not rise in a hostile file)."""
    assert chunk.batch is not None
    for i in np.flatnonzero(chunk.batch.bases >= start).tolist():
        rows = chunk.batch.units[i : i + 1]
        batch = BatchChunk(chunk.file, chunk.batch.position + i * BCQ_STORE_UNIT_SIZE, rows)
        yield UnitChunk(
            chunk.file, int(batch.bases[0]), batch.position, bcq_as_file_units(rows), batch
        )


def index_entry_batches(store: Store, part: IndexSlice) -> Iterator[pa.RecordBatch]:
    info = next(i for i in open_index_files(store) if i.file.name == part.file)
    for b in entry_blocks(store, info, range(part.start, part.stop)):
        yield pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(b.file), len(b.number)),
                pa.array(b.number, pa.int32()),
                pa.array(b.key_hash, pa.int32()),
                pa.array(b.slot, pa.int32()),
                pa.array(b.phy_offset),
                pa.array(b.time_diff, pa.int32()),
                _timestamps(pa.array(b.store_timestamp)),
                pa.array(b.prev, pa.int32()),
            ],
            schema=INDEX_ENTRIES,
        )


def consumer_offsets_batch(store: Store) -> pa.RecordBatch:
    # The columns are those judged on disk: no restart emulation (group_offsets has it).
    rows = offsets_report(store, restart=False).rows
    return pa.RecordBatch.from_pylist(
        [
            {
                "table": r.table,
                "group": _text(r.group),
                "topic": encodable(r.topic),
                "queue_id": r.queue_id,
                "offset": r.offset,
                "bak_offset": r.bak_offset,
                "bak_note": r.bak_note,
                "min_offset": r.min_offset,
                "max_offset": r.max_offset,
                "lag": r.lag,
                "status": r.status.value,
                "delay_level": r.delay_level,
            }
            for r in rows
        ],
        schema=CONSUMER_OFFSETS,
    )


def group_offsets_batch(store: Store) -> pa.RecordBatch:
    """``groups --after-restart``'s queue rows, for a broker of the release the store's profile
    was checked against (the export takes no --broker-version)."""
    version = store.profile.profile.checked_against
    report = groups_report(
        store,
        parse_broker_version(version),
        version,
        "the store's profile",
        after_restart=True,
        prove_deliveries=False,  # the table has no column for it: no walk for nothing
    )
    rows = []
    for g in report.groups:
        for r in g.queues:
            disk, after = r.next_pull, r.next_pull_after_restart
            rows.append(
                {
                    "group": encodable(r.group),
                    "topic": encodable(r.topic),
                    "queue_id": r.queue_id,
                    "kind": r.kind,
                    "offset": r.offset,
                    "bak_offset": r.bak_offset,
                    "min_offset": r.min_offset,
                    "max_offset": r.max_offset,
                    "lag": r.lag,
                    "last_consumed_store_timestamp": r.last_consumed_store_timestamp,
                    "next_pull_status": None if disk is None else disk.status.value,
                    "next_offset": None if disk is None else disk.next_offset,
                    "moved": None if disk is None else disk.moved,
                    "replayed": None if disk is None else disk.replayed,
                    "skipped": None if disk is None else disk.skipped,
                    "min_offset_after_restart": r.min_offset_after_restart,
                    "max_offset_after_restart": r.max_offset_after_restart,
                    "lag_after_restart": r.lag_after_restart,
                    "next_pull_status_after_restart": None if after is None else after.status.value,
                    "next_offset_after_restart": None if after is None else after.next_offset,
                    "moved_after_restart": None if after is None else after.moved,
                    "replayed_after_restart": None if after is None else after.replayed,
                    "skipped_after_restart": None if after is None else after.skipped,
                    "broker_version": version,
                }
            )
    return pa.RecordBatch.from_pylist(rows, schema=GROUP_OFFSETS)


def message_copies_batch(
    cols: RecordColumns, file_start: int, groups: tuple[str, ...]
) -> pa.RecordBatch:
    """The copies among a run's records (:func:`copy_rows`) as ``message_copies`` rows."""
    c = copy_rows(cols, groups)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(file_start + cols.positions[c.rows], pa.int64()),
            pa.array(c.from_physical_offsets, pa.int64()),
            pa.array(c.linked_by, pa.string()),
            pa.array([_text(u) for u in c.uniq_keys], pa.string()),
            pa.array([_text(o) for o in c.origin_message_ids], pa.string()),
            pa.array([r.value for r in c.roles], pa.string()),
            pa.array([_text(g) for g in c.groups], pa.string()),
            pa.array(cols.reconsume_times[c.rows], pa.int32()),
            pa.array([encodable(t) for t in c.topics], pa.string()),
            pa.array(cols.queue_id[c.rows], pa.int32()),
            pa.array(cols.queue_offset[c.rows], pa.int64()),
            _timestamps(pa.array(cols.store_timestamp[c.rows], pa.int64())),
        ],
        schema=MESSAGE_COPIES,
    )


# --- source files -------------------------------------------------------------------------------


def file_crc32c(store: Store, group: FileGroup) -> Iterator[tuple[str, int, int, int]]:
    """(path, size, mtime in ns, CRC32C of the content) of each file of the group."""
    for path in group.paths:
        yield (path, *content_crc32c(store.root / path))
