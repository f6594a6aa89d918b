"""``info``: what is on this disk, as simple on-disk facts (no recovery emulation).

Everything here is read, never inferred from names alone: the commitlog end is found by walking
records forward from where the consume queues end, queue bounds follow the broker's load rules,
and each config file is judged by ``ConfigManager.load``'s rule (main file, else ``.bak``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rmqinspect.analysis.ledger import LedgerSummary, ledger_summary
from rmqinspect.analysis.queues import QueueBounds, all_queue_bounds
from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format.checkpoint import CHECKPOINT_READ_LIMIT, Checkpoint, decode_checkpoint
from rmqinspect.format.config import (
    ConsumerOffsetTable,
    DelayOffsetTable,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
    UntypedConfig,
)
from rmqinspect.format.index import IndexHeader
from rmqinspect.format.scan import CheckedRun, WalkPolicy
from rmqinspect.store.configfiles import (
    ConfigFileResult,
    load_config_files,
    rocksdb_config_dirs,
)
from rmqinspect.store.files import FileQueue, LayoutProblem, read_small
from rmqinspect.store.layout import UnsupportedLayout
from rmqinspect.store.model import Store


@dataclass(frozen=True, slots=True)
class FamilySummary:
    """One file family (commitlog, consume queues, index, ...)."""

    name: str
    directory: str
    file_count: int
    bytes: int
    file_size: int | None  # configured/inferred size of one file, where the family has one
    first_offset: int | None  # first file's name as an offset (None: no files / not offset-named)
    end_offset: int | None  # end of the last file's mapped space
    gaps: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class CommitlogSummary:
    min_offset: int  # first file's start; -1 without files (getMinOffset)
    max_offset: int  # end of the last valid record found walking forward
    max_offset_basis: str  # how max_offset was found
    last_record_offset: int | None
    first_store_timestamp: int | None
    last_store_timestamp: int | None


@dataclass(frozen=True, slots=True)
class TopicSummary:
    topic: str
    queue_count: int
    message_count: int
    queues: tuple[QueueBounds, ...]


@dataclass(frozen=True, slots=True)
class IndexFileSummary:
    name: str
    bytes: int
    header: IndexHeader | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CheckpointSummary:
    path: str
    present: bool
    checkpoint: Checkpoint | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ConfigFileSummary:
    """Which copy of one config file the broker's ``ConfigManager.load`` would use, and why."""

    name: str
    source: str  # "main", "bak", or "none" (the broker starts with an empty table or refuses)
    main_state: str  # missing, empty, unreadable, invalid, ok
    bak_state: str
    main_error: str | None
    bak_error: str | None
    broker_starts: bool  # False: a non-empty .bak that does not decode stops the broker
    bak_differs: bool  # both parse, to different values
    tmp_present: bool  # 4.9 persist died between writing .tmp and renaming it
    entries: int | None  # size of the table that would be loaded
    problems: tuple[str, ...] = ()

    @property
    def on_disk(self) -> bool:
        return self.main_state != "missing" or self.bak_state != "missing" or self.tmp_present


@dataclass(frozen=True, slots=True)
class Inventory:
    root: str
    profile: str
    profile_explicit: bool
    profile_reasons: tuple[str, ...]
    clean_shutdown: bool  # no abort file
    abort_content: str
    families: tuple[FamilySummary, ...]
    commitlog: CommitlogSummary
    topics: tuple[TopicSummary, ...]
    index_files: tuple[IndexFileSummary, ...]
    checkpoint: CheckpointSummary
    config_files: tuple[ConfigFileSummary, ...]
    unsupported: tuple[UnsupportedLayout, ...]
    problems: tuple[LayoutProblem, ...] = field(default_factory=tuple)
    dledger: LedgerSummary | None = None  # a DLedger commitlog's state on disk
    # What the broker would load from topics.json and subscriptionGroup.json (main, else .bak).
    topic_configs: tuple[TopicConfig, ...] = ()
    subscription_groups: tuple[SubscriptionGroupConfig, ...] = ()
    # RocksDB config directories (5.x) whose contents are not read: (name under config/, what).
    config_not_read: tuple[tuple[str, str], ...] = ()


def build_inventory(store: Store) -> Inventory:
    # A RocksDB consume queue's queues are listed too; one that does not open is a problem
    # here, where everything else about the store is still worth saying.
    trouble: list[LayoutProblem] = []
    try:
        store.read_rocksdb_queues()
    except StoreError as err:
        trouble.append(LayoutProblem("rocksdb", err.path or str(store.root), err.message))
    bounds = all_queue_bounds(store)
    problems: list[LayoutProblem] = [*store.problems, *trouble]
    for qid in store.queue_dirs:
        problems.extend(store.consume_queue_files(qid.topic, qid.queue_id).problems)
    det = store.profile
    ledger = ledger_summary(store)
    configs = load_config_files(store.config_dir)
    return Inventory(
        root=str(store.root),
        profile=det.profile.value,
        profile_explicit=det.explicit,
        profile_reasons=det.reasons,
        clean_shutdown=not store.abort_present,
        abort_content=_abort_text(store),
        families=tuple(_families(store, bounds)),
        commitlog=commitlog_summary(store, bounds, ledger),
        topics=tuple(_topics(bounds)),
        index_files=tuple(_index_files(store)),
        checkpoint=checkpoint_summary(store.checkpoint_path),
        config_files=tuple(_config_summary(r) for r in configs.values()),
        unsupported=tuple(store.unsupported),
        problems=tuple(problems),
        dledger=ledger,
        topic_configs=_topic_configs(configs),
        subscription_groups=_subscription_groups(configs),
        config_not_read=tuple(rocksdb_config_dirs(store.config_dir)),
    )


def _abort_text(store: Store) -> str:
    """What ``abort`` holds (a 5.x PID), as text; "..." marks a file longer than what is read
    of it (a broker writes a PID at most)."""
    marker = store.abort_marker()
    content = store.abort_content()
    text = content.decode("utf-8", "replace").strip(" \t\r\n\x00")
    if text and marker is not None and marker.size > len(content):
        text += "..."
    return text


def _family(name: str, queue: FileQueue) -> FamilySummary:
    files = queue.files
    return FamilySummary(
        name=name,
        directory=str(queue.directory),
        file_count=len(files),
        bytes=sum(f.length for f in files),
        file_size=queue.file_size,
        first_offset=files[0].start if files else None,
        end_offset=queue.end_offset if files else None,
        gaps=tuple(queue.gaps()),
    )


def _families(store: Store, bounds: list[QueueBounds]) -> list[FamilySummary]:
    if store.dledger is not None:
        out = [_family("dledger_data", store.dledger.data)]
        out.append(_family("dledger_index", store.dledger.index))
    else:
        out = [_family("commitlog", store.commitlog)]
    cq_files = sum(b.file_count for b in bounds)
    out.append(
        FamilySummary(
            name="consumequeue",
            directory=str(store.root / "consumequeue"),
            file_count=cq_files,
            bytes=sum(b.bytes for b in bounds),
            file_size=store.cq_file_size if cq_files else None,
            first_offset=None,
            end_offset=None,
            gaps=(),
        )
    )
    out.append(
        FamilySummary(
            name="index",
            directory=str(store.root / "index"),
            file_count=len(store.index_files),
            bytes=sum(f.length for f in store.index_files),
            file_size=None,
            first_offset=None,
            end_offset=None,
        )
    )
    for name in ("consumequeue_ext", "batchconsumequeue", "timerlog", "compaction"):
        directory = store.root / name
        if directory.is_dir():
            count, size = _tree_size(directory)
            out.append(FamilySummary(name, str(directory), count, size, None, None, None))
    wheel = store.root / "timerwheel"  # the timer store's one file beside timerlog/
    if wheel.is_file():
        size = wheel.stat().st_size
        out.append(FamilySummary("timerwheel", str(wheel), 1, size, None, None, None))
    return out


def _tree_size(directory: Path) -> tuple[int, int]:
    count = size = 0
    for base, _dirs, names in os.walk(directory):
        for n in names:
            count += 1
            size += os.stat(os.path.join(base, n), follow_symlinks=False).st_size
    return count, size


def commitlog_summary(
    store: Store, bounds: list[QueueBounds], ledger: LedgerSummary | None = None
) -> CommitlogSummary:
    """Min/max physical offsets. The max is found like 4.9's reput: start at the largest
    consume-queue end and walk valid records forward (CRC unchecked, as dispatch reads them).
    In a DLedger store it is where DLedger's entries end (``ledger``, found when not given)."""
    clq = store.commitlog
    if not clq.files:
        return CommitlogSummary(-1, 0, "no commitlog files", None, None, None)
    opts = store.check_options(check_crc=False, read_body=False)
    if store.dledger is not None:
        return _ledger_commitlog(store, ledger or ledger_summary(store), opts)
    cq_last = max((b.last_phy_offset for b in bounds), default=-1)
    last_record: int | None = None
    if clq.find(cq_last) is not None:
        basis = f"walked forward from the consume queues' last record ({cq_last})"
        last_record, last_ts, end = _walk_end(store, cq_last, opts)
    if last_record is None:
        # No consume queue, or its last unit does not point at a record: use the newest file.
        start = _last_nonempty_start(store)
        basis = f"walked forward from the start of the last non-empty file ({start})"
        last_record, last_ts, end = _walk_end(store, start, opts)
    first_ts = _first_store_timestamp(store, opts)
    return CommitlogSummary(
        clq.min_offset, end, basis, last_record, first_ts, last_ts if last_ts is not None else None
    )


def _ledger_commitlog(
    store: Store, ledger: LedgerSummary | None, opts: cl.CheckOptions
) -> CommitlogSummary:
    assert ledger is not None
    last_ts = None
    if ledger.last_record_offset is not None:
        r = store.check_at(ledger.last_record_offset, opts)
        last_ts = r.record.store_timestamp if r.is_message and r.record is not None else None
    return CommitlogSummary(
        store.commitlog.min_offset,
        ledger.data_end,
        f"DLedger entries walked in the last data file ({ledger.data_end_reason})",
        ledger.last_record_offset,
        _first_store_timestamp(store, opts),
        last_ts,
    )


def _last_nonempty_start(store: Store) -> int:
    opts = store.check_options(check_crc=False, read_body=False)
    for f in reversed(store.commitlog.files):
        if store.first_records(f, opts):
            return f.start
    return store.commitlog.files[0].start


def _walk_end(
    store: Store, start: int, opts: cl.CheckOptions
) -> tuple[int | None, int | None, int]:
    """Follow records from ``start`` across files as recovery does, to the first failure."""
    last: int | None = None
    last_ts: int | None = None
    end = start
    for f, event in store.scan(start, opts, policy=WalkPolicy.BROKER):
        assert isinstance(event, CheckedRun)  # the broker's walk skips nothing: it stops
        cols = event.columns
        if len(cols):
            last = f.start + int(cols.positions[-1])
            last_ts = int(cols.store_timestamp[-1])
        end = f.start + event.end
        if event.stop is not None and event.stop.is_blank:
            end = f.start + store.commitlog.file_size
    return last, last_ts, end


def _first_store_timestamp(store: Store, opts: cl.CheckOptions) -> int | None:
    for f in store.commitlog.files:
        found = store.first_records(f, opts)
        if found:
            return found[0].store_timestamp
    return None


def _topics(bounds: list[QueueBounds]) -> list[TopicSummary]:
    by_topic: dict[str, list[QueueBounds]] = {}
    for b in bounds:
        by_topic.setdefault(b.topic, []).append(b)
    return [
        TopicSummary(t, len(qs), sum(q.message_count for q in qs), tuple(qs))
        for t, qs in sorted(by_topic.items())
    ]


def _index_files(store: Store) -> list[IndexFileSummary]:
    out = []
    for f in store.index_files:
        try:
            header = IndexHeader.decode(store.maps.read(f, 0, 40))
            out.append(IndexFileSummary(f.name, f.length, header))
        except DecodeError as err:
            out.append(IndexFileSummary(f.name, f.length, None, err.message))
    return out


def checkpoint_summary(path: Path) -> CheckpointSummary:
    try:
        raw = read_small(path, CHECKPOINT_READ_LIMIT)
    except StoreError as err:
        return CheckpointSummary(str(path), True, None, err.message)
    if raw is None:
        return CheckpointSummary(str(path), False, None, "missing: the broker would use zeros")
    try:
        return CheckpointSummary(str(path), True, decode_checkpoint(raw.data, raw.size))
    except DecodeError as err:
        return CheckpointSummary(str(path), True, None, err.message)


def _topic_configs(configs: dict[str, ConfigFileResult]) -> tuple[TopicConfig, ...]:
    value = configs["topics.json"].value
    table = value.topic_config_table if isinstance(value, TopicConfigTable) else {}
    return tuple(table[k] for k in sorted(table))


def _subscription_groups(
    configs: dict[str, ConfigFileResult],
) -> tuple[SubscriptionGroupConfig, ...]:
    value = configs["subscriptionGroup.json"].value
    table = value.subscription_group_table if isinstance(value, SubscriptionGroupTable) else {}
    return tuple(table[k] for k in sorted(table))


def _config_summary(r: ConfigFileResult) -> ConfigFileSummary:
    entries: int | None = None
    problems: tuple[str, ...] = ()
    value = r.value
    if isinstance(value, ConsumerOffsetTable):
        entries = len(value.offset_table) + len(value.lmq_offset_table or {})
        problems = value.problems
    elif isinstance(value, DelayOffsetTable):
        entries, problems = len(value.offset_table), value.problems
    elif isinstance(value, TopicConfigTable):
        entries, problems = len(value.topic_config_table), value.problems
    elif isinstance(value, SubscriptionGroupTable):
        entries, problems = len(value.subscription_group_table), value.problems
    elif isinstance(value, UntypedConfig):
        entries = len(value.document)
    return ConfigFileSummary(
        name=r.name,
        source=r.source,
        main_state=r.main_state,
        bak_state=r.bak_state,
        main_error=r.main_error,
        bak_error=r.bak_error,
        broker_starts=r.broker_starts,
        bak_differs=r.bak_differs,
        tmp_present=r.tmp_present,
        entries=entries,
        problems=problems,
    )
