"""``lookup``: find messages by offsetMsgId, UNIQ_KEY, key, queue offset, physical offset or time.

Key and UNIQ_KEY lookups reproduce the broker's query path (``IndexService.queryOffset`` inside
``DefaultMessageStore.queryMessage``'s three rounds) on the index files as they are on disk,
touching only the hash slot and its chain of each file (mmap). Hits are then re-checked the way
the client does (``MQAdminImpl.queryMessage``): the index matches on a 32-bit hash, so
collisions are reported and dropped. The commitlog tail after the index's last entry (what the
broker would index on its next start) is scanned too. When the index is missing or broken the
result says so and suggests ``--scan``, a full commitlog walk.
"""

from __future__ import annotations

import contextlib
import mmap
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis.indexes import open_index_files
from rmqinspect.analysis.inventory import commitlog_summary
from rmqinspect.analysis.queues import (
    UnitStatus,
    all_queue_bounds,
    queue_bounds,
    resolve_unit,
    unit_at,
)
from rmqinspect.analysis.recovery import RecoverOptions, run_recovery
from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import decode_offset_msg_id
from rmqinspect.format.index import (
    DEFAULT_QUERY_MAX_NUM,
    MAX_MSGS_NUM_BATCH,
    IndexGeometry,
    IndexHeader,
    query_offsets,
    walk_chain,
)
from rmqinspect.format.index_build import IndexFileBuilder
from rmqinspect.format.javahash import index_key
from rmqinspect.format.scan import Skipped
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import QueueId, Store

LONG_MAX = 2**63 - 1
QUERY_ROUNDS = 3  # DefaultMessageStore.queryMessage
DEFAULT_KEY_MAX_NUM = 64  # mqadmin queryMsgByKey asks for 64 (capped by maxMsgsNumBatch)

Progress = Callable[[int], None]


class Mode(StrEnum):
    MSG_ID = "msg_id"
    UNIQ_KEY = "uniq_key"
    KEY = "key"
    QUEUE_OFFSET = "queue_offset"
    PHY_OFFSET = "phy_offset"
    TIME = "time"


class Via(StrEnum):
    INDEX = "index"
    TAIL_SCAN = "tail_scan"  # commitlog after the index's last entry
    SCAN = "scan"  # full commitlog walk (--scan)
    CONSUME_QUEUE = "consume_queue"
    PHYSICAL_OFFSET = "physical_offset"


@dataclass(frozen=True, slots=True)
class Hit:
    record: cl.MessageRecord
    via: Via
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rejected:
    """A candidate that is not an answer, and why (hash collision, unreadable, ...)."""

    physical_offset: int
    reason: str
    record: cl.MessageRecord | None = None


@dataclass
class IndexReport:
    """How the index was used for one key (all topics tried, for a UNIQ_KEY without --topic)."""

    files_total: int = 0
    files_used: int = 0
    unusable: list[str] = field(default_factory=list)
    chain_problems: list[str] = field(default_factory=list)
    covered_from: int | None = None  # smallest beginPhyOffset of a usable non-empty file
    covered_to: int | None = None  # largest endPhyOffset (start of the last indexed record)
    index_offsets: list[int] = field(default_factory=list)  # IndexService.queryOffset, round 1
    broker_offsets: list[int] = field(default_factory=list)  # what queryMessage returned
    rounds: int = 0
    keys_queried: list[str] = field(default_factory=list)

    @property
    def state(self) -> str:
        """missing, broken (no usable file), damaged (some files or chains bad), or ok."""
        if self.files_total == 0:
            return "missing"
        if self.files_used == 0:
            return "broken"
        if self.unusable or self.chain_problems:
            return "damaged"
        return "ok"


@dataclass
class LookupResult:
    mode: Mode
    query: dict[str, object]
    hits: list[Hit] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    index: IndexReport | None = None
    scanned: bool = False
    tail_scanned: tuple[int, int] | None = None  # [start, end) walked after the index
    warnings: list[str] = field(default_factory=list)
    suggest_scan: bool = False
    truncated: bool = False  # more match than listed: --limit, or --max-num (see warnings)

    @property
    def found(self) -> bool:
        return bool(self.hits)


# --- opened index files ---------------------------------------------------------------------------


class OpenIndex:
    """Usable index files with read-only views; the geometry is the broker's one configuration.

    A ``restart`` (see :func:`restarted_index`) replaces the store's own ``index/`` listing with
    the post-restart set: the kept files on disk and the ones the restart builds, in memory."""

    def __init__(self, store: Store, restart: RestartedIndex | None = None) -> None:
        self.store = store
        self.infos = open_index_files(store, None if restart is None else restart.files)
        built = [] if restart is None else restart.built
        self.report_base = IndexReport(files_total=len(self.infos) + len(built))
        self._stack = contextlib.ExitStack()
        self.files: list[tuple[str, IndexHeader, memoryview]] = []
        self.geometry: IndexGeometry | None = None
        for b in built:
            self.geometry = b.geometry
            self.files.append((b.name, b.header, b.view))
        for info in self.infos:
            if not info.usable:
                self.report_base.unusable.append(info.error or f"{info.file.path}: unusable")
                continue
            assert info.geometry is not None and info.header is not None
            if self.geometry is None:
                self.geometry = info.geometry
            elif info.geometry != self.geometry:
                self.report_base.unusable.append(
                    f"{info.file.path}: geometry {info.geometry.slot_num}/"
                    f"{info.geometry.index_num} differs from the other files'"
                )
                continue
            view = store.view(info.file)
            self._stack.callback(view.release)
            self.files.append((str(info.file.path), info.header, view))
        self.files.sort(key=lambda f: Path(f[0]).name)  # the broker loads them by name
        self.report_base.files_used = len(self.files)
        non_empty = [h for _, h, _ in self.files if h.entry_count > 0]
        if non_empty:
            self.report_base.covered_from = min(h.begin_phy_offset for h in non_empty)
            self.report_base.covered_to = max(h.end_phy_offset for h in non_empty)

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> OpenIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def new_report(self) -> IndexReport:
        b = self.report_base
        return IndexReport(
            files_total=b.files_total,
            files_used=b.files_used,
            unusable=list(b.unusable),
            covered_from=b.covered_from,
            covered_to=b.covered_to,
        )

    def query_offset(
        self, full_key: str, max_num: int, begin: int, end: int, batch: int = MAX_MSGS_NUM_BATCH
    ) -> list[int]:
        """``IndexService.queryOffset`` over the usable files (load order = name order);
        ``batch`` is the broker's cap on ``max_num`` (maxMsgsNumBatch)."""
        if self.geometry is None:
            return []
        pairs = [(h, v) for _, h, v in self.files]
        return query_offsets(pairs, self.geometry, full_key, max_num, begin, end, batch)

    def holds_more(self, full_key: str, max_num: int, begin: int, end: int) -> bool:
        """Whether the index holds more hits for the key than a query of ``max_num`` returns
        (the broker stops collecting there)."""
        cap = min(max_num, MAX_MSGS_NUM_BATCH)
        return len(self.query_offset(full_key, cap + 1, begin, end, cap + 1)) > cap

    def chain_problems(self, full_key: str) -> list[str]:
        """Corrupt links met walking this key's bucket in each file (slot + chain only)."""
        if self.geometry is None:
            return []
        slot = self.geometry.slot_of(full_key)
        out = []
        for path, header, view in self.files:
            walk = walk_chain(view, self.geometry, header, slot)
            deque(walk, maxlen=0)  # walk the whole chain: its problem is known only at the end
            if walk.problem is not None:
                out.append(f"{path}: {walk.problem.describe()}")
        return out


# --- the broker's queryMessage -------------------------------------------------------------------


def broker_query(
    store: Store,
    index: OpenIndex,
    topic: str,
    key: str,
    max_num: int,
    begin: int,
    end: int,
    readable_end: int,
    report: IndexReport,
) -> list[int]:
    """``DefaultMessageStore.queryMessage``: up to three rounds, each narrowing ``end`` to the
    store time of the oldest hit; offsets the commitlog cannot serve are dropped."""
    full_key = index_key(topic, key)
    report.keys_queried.append(full_key)
    last_query_time = end
    returned: list[int] = []
    for round_no in range(QUERY_ROUNDS):
        offsets = sorted(index.query_offset(full_key, max_num, begin, last_query_time))
        if round_no == 0:
            report.index_offsets.extend(offsets)
        if not offsets:
            break
        report.rounds = max(report.rounds, round_no + 1)
        for m, offset in enumerate(offsets):
            record = _look_message(store, offset, readable_end)
            if record is None:
                continue  # lookMessageByOffset/getData give nothing; the broker skips it
            if m == 0:
                last_query_time = record.store_timestamp
            returned.append(offset)
        if returned or last_query_time < begin:
            break
    report.broker_offsets.extend(returned)
    report.chain_problems.extend(index.chain_problems(full_key))
    return returned


def _look_message(store: Store, offset: int, readable_end: int) -> cl.MessageRecord | None:
    if offset < 0 or offset >= readable_end or store.commitlog.find(offset) is None:
        return None
    try:
        return store.read_message(offset)
    except StoreError:
        return None


# --- scanning -------------------------------------------------------------------------------------


def _scan_records(
    store: Store,
    start: int | None,
    end: int | None,
    progress: Progress | None,
    topics: Sequence[str],
    select: Callable[[RecordColumns], npt.NDArray[np.bool_]] | None = None,
) -> Iterator[cl.MessageRecord]:
    """Every decodable record of ``topics`` in ``[start, end)`` (and ``select``, a mask over the
    scanner's columns, when given), CRC unchecked (forensics wants all), without its body:
    matching needs only the header and properties (see :func:`_with_body`). Records are built
    only for what the columns already match."""
    opts = cl.CheckOptions(profile=store.profile.profile, check_crc=False, read_body=False)
    last_pos = start if start is not None else max(store.commitlog.min_offset, 0)
    for f, event in store.scan(start, opts):
        if isinstance(event, Skipped):
            continue
        cols = event.columns
        keep = cols.topic_mask(topics)
        if end is not None:
            keep &= cols.positions + f.start < end
        if select is not None:
            keep &= select(cols)
        yield from cols.records(np.flatnonzero(keep), with_body=False)
        run_end = f.start + event.end
        if end is not None and run_end >= end:
            break
        if progress is not None and run_end > last_pos:
            progress(run_end - last_pos)
            last_pos = run_end


def _with_body(store: Store, rec: cl.MessageRecord) -> cl.MessageRecord:
    return store.read_message(rec.position)


def readable_end_offset(store: Store) -> int:
    """Where valid records end (walking forward from the consume queues' end, CRC unchecked)."""
    return commitlog_summary(store, all_queue_bounds(store)).max_offset


# --- key and UNIQ_KEY ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyQuery:
    key: str
    topics: tuple[str, ...]  # one topic, or every known topic for a UNIQ_KEY without --topic
    uniq: bool
    max_num: int
    begin: int = 0
    end: int = LONG_MAX

    def select(self, cols: RecordColumns) -> npt.NDArray[np.bool_]:
        """The column tests :func:`_scan_match` implies: indexed (not ROLLBACK) and stored
        within ``[begin, end]``; the keys are then matched record by record."""
        indexed = (cols.sys_flag & cl.TRANSACTION_TYPE_MASK) != cl.TRANSACTION_ROLLBACK_TYPE
        keep: npt.NDArray[np.bool_] = indexed & (cols.store_timestamp >= self.begin)
        return keep & (cols.store_timestamp <= self.end)


def _client_match(record: cl.MessageRecord, q: KeyQuery, topic: str) -> str | None:
    """None when the client keeps the message, else why ``MQAdminImpl`` drops it."""
    if q.uniq:
        # MessageClientExt.getMsgId(): the UNIQ_KEY, or the offsetMsgId without one.
        from rmqinspect.render.message import msg_id

        shown = record.uniq_key if record.uniq_key is not None else msg_id(record)
        if shown != q.key:
            return f"hash collision: UNIQ_KEY is {record.uniq_key!r}"
        return None
    if record.topic != topic:
        return f"topic is {record.topic!r}"
    keys = (record.properties.get("KEYS") or "").split(" ") if "KEYS" in record.properties else []
    if q.key not in keys:
        return f"hash collision: KEYS are {record.properties.get('KEYS')!r}"
    return None


def _scan_match(record: cl.MessageRecord, q: KeyQuery) -> bool:
    if record.topic not in q.topics or not record.is_indexed:
        return False
    if not q.begin <= record.store_timestamp <= q.end:
        return False
    if q.uniq:
        return record.uniq_key == q.key
    return q.key in record.keys


def lookup_key(
    store: Store,
    q: KeyQuery,
    *,
    scan: bool = False,
    limit: int | None = None,
    restart: RestartedIndex | None = None,
    progress: Progress | None = None,
) -> LookupResult:
    """Messages whose key (or UNIQ_KEY) is ``q.key``, oldest first. ``restart`` answers as the
    broker would after restarting on this store (recovered end, rebuilt index)."""
    result = _lookup_key(store, q, scan, restart, progress)
    if not scan:
        _keep_max_num(result, q)
    _keep_limit(result, limit)
    return result


def _lookup_key(
    store: Store,
    q: KeyQuery,
    scan: bool,
    restart: RestartedIndex | None,
    progress: Progress | None,
) -> LookupResult:
    mode = Mode.UNIQ_KEY if q.uniq else Mode.KEY
    result = LookupResult(
        mode,
        {
            "key": q.key,
            "topics": list(q.topics),
            "max_num": q.max_num,
            "begin": q.begin,
            "end": q.end,
        },
    )
    end = restart.end if restart is not None else readable_end_offset(store)
    seen: set[int] = set()
    if scan:
        result.scanned = True
        for rec in _scan_records(store, None, end, progress, q.topics, q.select):
            if _scan_match(rec, q) and rec.position not in seen:
                seen.add(rec.position)
                result.hits.append(Hit(_with_body(store, rec), Via.SCAN))
        _sort_hits(result)
        return result
    if restart is not None:
        result.warnings.extend(restart.notes)
    with OpenIndex(store, restart) as index:
        report = index.new_report()
        result.index = report
        for topic in q.topics:
            offsets = broker_query(
                store, index, topic, q.key, q.max_num, q.begin, q.end, end, report
            )
            for offset in dict.fromkeys(offsets):  # the last indexed record can repeat
                if offset in seen:
                    continue
                record = store.read_message(offset)
                why = _client_match(record, q, topic)
                if why is None:
                    seen.add(offset)
                    result.hits.append(Hit(record, Via.INDEX))
                else:
                    result.rejected.append(Rejected(offset, why, record))
        if any(index.holds_more(k, q.max_num, q.begin, q.end) for k in report.keys_queried):
            result.truncated = True
        for offset in dict.fromkeys(report.index_offsets):
            if offset in report.broker_offsets or offset in seen:
                continue
            if offset >= end:
                reason = f"not served: at or past the commitlog's end {end}"
            else:
                reason = "not served: no readable message record there"
            result.rejected.append(Rejected(offset, reason))
        _scan_tail(store, q, result, report, end, seen, progress)
    _explain_index(result, report)
    if q.uniq and not result.hits and len(q.key) in (32, 56):
        # msgId vs offsetMsgId: users often hold the other kind of id.
        result.warnings.append(
            "no message has this UNIQ_KEY; a 32/56-hex id may also be an offsetMsgId: try --msg-id"
        )
    _sort_hits(result)
    return result


def _scan_tail(
    store: Store,
    q: KeyQuery,
    result: LookupResult,
    report: IndexReport,
    end: int,
    seen: set[int],
    progress: Progress | None,
) -> None:
    """Walk what the index does not cover yet: from its last entry to the commitlog's end."""
    if report.files_used == 0:
        return
    start = report.covered_to
    if start is None:
        start = max(store.commitlog.min_offset, 0)
    if start >= end or store.commitlog.find(start) is None:
        return
    result.tail_scanned = (start, end)
    for rec in _scan_records(store, start, end, progress, q.topics, q.select):
        if rec.position in seen or rec.position in report.broker_offsets:
            continue
        if _scan_match(rec, q):
            seen.add(rec.position)
            result.hits.append(
                Hit(
                    _with_body(store, rec),
                    Via.TAIL_SCAN,
                    ("after the index's last entry: not indexed yet",),
                )
            )


def _keep_max_num(result: LookupResult, q: KeyQuery) -> None:
    """``queryMessage`` answers at most maxNum messages, the newest (index chains run from the
    newest entry); the tail scan's hits are newer than any indexed one, so the same cut keeps
    what the broker would answer once it has indexed them. ``truncated`` says when more exist
    (also when the index itself held more than it answered)."""
    cap = min(q.max_num, MAX_MSGS_NUM_BATCH)
    _sort_hits(result)
    if len(result.hits) > cap:
        del result.hits[: len(result.hits) - cap]
        result.truncated = True
    if result.truncated:
        more = (
            f"raise --max-num (up to {MAX_MSGS_NUM_BATCH}) or " if cap < MAX_MSGS_NUM_BATCH else ""
        )
        result.warnings.append(
            f"more than {cap} messages match: the {cap} newest are listed, as the broker answers; "
            f"{more}use --scan for all"
        )


def _keep_limit(result: LookupResult, limit: int | None) -> None:
    """``--limit``: the first ``limit`` hits, oldest first."""
    if limit is not None and len(result.hits) > limit:
        del result.hits[limit:]
        result.truncated = True
        result.warnings.append("more messages match: raise --limit to see them")


def _explain_index(result: LookupResult, report: IndexReport) -> None:
    state = report.state
    if state == "missing":
        result.warnings.append("no index files: the index cannot answer; use --scan")
        result.suggest_scan = True
    elif state == "broken":
        result.warnings.append("no usable index file: " + "; ".join(report.unusable))
        result.suggest_scan = True
    else:
        for u in report.unusable:
            result.warnings.append(f"index file skipped: {u}")
        for c in report.chain_problems:
            result.warnings.append(f"corrupt hash chain: {c}")
        if state == "damaged" and not result.hits:
            result.suggest_scan = True
    if not result.hits and state == "ok":
        result.suggest_scan = True


def _sort_hits(result: LookupResult) -> None:
    result.hits.sort(key=lambda h: (h.record.store_timestamp, h.record.position))


@dataclass(frozen=True, slots=True)
class BuiltIndexFile:
    """An index file the restart writes, held in memory (zero pages are not allocated)."""

    name: str
    header: IndexHeader
    geometry: IndexGeometry
    view: memoryview


@dataclass(frozen=True, slots=True)
class RestartedIndex:
    """The index and commitlog end a broker restarting on this store would query."""

    end: int  # the recovered commitlog end E: queryMessage serves nothing at or past it
    files: list[StoreFile]  # the on-disk files the restart keeps untouched
    built: list[BuiltIndexFile]  # the files it writes (new, or kept and continued)
    notes: tuple[str, ...]


@contextlib.contextmanager
def restarted_index(store: Store, progress: Progress | None = None) -> Iterator[RestartedIndex]:
    """Emulate the restart (``analysis.recovery``), keep the index files it writes in memory,
    and yield the post-restart view; the store itself is only read."""
    images: list[mmap.mmap] = []
    built: list[BuiltIndexFile] = []

    def keep(f: IndexFileBuilder) -> None:
        image = mmap.mmap(-1, f.geometry.file_size)  # anonymous: untouched pages cost nothing
        images.append(image)
        for position, data in f.writes():
            image[position : position + len(data)] = data
        built.append(BuiltIndexFile(f.name, f.header, f.geometry, memoryview(image).toreadonly()))

    try:
        outcome = run_recovery(
            store, RecoverOptions(lost_limit=0, find_lost=False), progress, index_sink=keep
        )
        report = outcome.report
        end = report.commitlog.max_offset if report.commitlog is not None else None
        if end is None:
            raise StoreError(f"--as-recovered: {report.verdict_reason}", str(store.root))
        replaced = set(outcome.index_deleted) | set(outcome.index_written)
        files = [f for f in store.index_files if f.name not in replaced]
        notes = [f"as after a restart: the commitlog ends at {end}"]
        if outcome.index_deleted:
            notes.append("index files the restart deletes: " + ", ".join(outcome.index_deleted))
        yield RestartedIndex(end, files, built, tuple(notes))
    finally:
        for b in built:
            b.view.release()
        for image in images:
            image.close()


def known_topics(store: Store) -> list[str]:
    """Topics a UNIQ_KEY may be indexed under: consume queues and topics.json."""
    from rmqinspect.format.config import TopicConfigTable
    from rmqinspect.store.configfiles import load_config_file

    topics = {qid.topic for qid in store.queue_dirs}
    cfg = load_config_file(store.config_dir, "topics.json")
    if isinstance(cfg.value, TopicConfigTable):
        topics.update(cfg.value.topic_config_table)
    return sorted(topics)


# --- offsetMsgId, physical offset, queue offset ---------------------------------------------


def lookup_phy_offset(store: Store, offset: int) -> LookupResult:
    result = LookupResult(Mode.PHY_OFFSET, {"physical_offset": offset})
    record, why = _read_at(store, offset)
    if record is not None:
        result.hits.append(Hit(record, Via.PHYSICAL_OFFSET, _record_notes(record, offset)))
    else:
        result.rejected.append(Rejected(offset, why))
    return result


def _read_at(store: Store, offset: int) -> tuple[cl.MessageRecord | None, str]:
    clq = store.commitlog
    if not clq.files:
        return None, "the store has no commitlog files"
    if store.commitlog.find(offset) is None:
        lo, hi = max(clq.min_offset, 0), clq.end_offset
        return None, f"offset is outside the commitlog files [{lo}, {hi})"
    try:
        return store.read_message(offset), ""
    except StoreError as err:
        return None, f"no message record there: {err}"


def _record_notes(record: cl.MessageRecord, offset: int) -> tuple[str, ...]:
    notes = []
    if record.physical_offset != offset:
        notes.append(f"the record's PHYSICALOFFSET field says {record.physical_offset}")
    if record.body_crc_ok is False:
        notes.append("body CRC mismatch")
    return tuple(notes)


def lookup_msg_id(store: Store, text: str) -> LookupResult:
    """Decode the offsetMsgId, read the record there and check the store host matches."""
    result = LookupResult(Mode.MSG_ID, {"msg_id": text})
    try:
        mid = decode_offset_msg_id(text.strip())
    except DecodeError as err:
        raise StoreError(f"not an offsetMsgId: {err.message} (character {err.offset})") from None
    result.query.update({"store_host": str(mid.store_host), "physical_offset": mid.physical_offset})
    record, why = _read_at(store, mid.physical_offset)
    maybe_uniq = "; a 32/56-hex id may also be a UNIQ_KEY: try --uniq-key"
    if record is None:
        result.rejected.append(Rejected(mid.physical_offset, why + maybe_uniq))
        return result
    if not _same_host(record.store_host, mid.store_host):
        result.rejected.append(
            Rejected(
                mid.physical_offset,
                f"the record there was stored by {record.store_host}, the id names "
                f"{mid.store_host}: a different broker's message{maybe_uniq}",
                record,
            )
        )
        return result
    result.hits.append(Hit(record, Via.PHYSICAL_OFFSET, _record_notes(record, mid.physical_offset)))
    return result


def _same_host(a: HostAddress, b: HostAddress) -> bool:
    return a.ip == b.ip and a.port == b.port


def parse_queue_ref(text: str) -> tuple[str, int, int]:
    """``TOPIC:QUEUE_ID:OFFSET`` (topic names cannot contain ':')."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise ValueError(f"expected TOPIC:QUEUE_ID:OFFSET, got {text!r}")
    try:
        return parts[0], int(parts[1]), int(parts[2])
    except ValueError:
        raise ValueError(f"queue id and offset must be integers in {text!r}") from None


def lookup_queue_offset(
    store: Store, topic: str, queue_id: int, offset: int, progress: Progress | None = None
) -> LookupResult:
    result = LookupResult(
        Mode.QUEUE_OFFSET, {"topic": topic, "queue_id": queue_id, "queue_offset": offset}
    )
    qid = QueueId(topic, queue_id)
    if qid not in store.queue_dirs:
        result.warnings.append(f"no consume queue directory for {qid}")
        result.rejected.append(Rejected(-1, f"no consume queue {qid} on disk"))
        _find_undispatched(store, result, topic, queue_id, offset, progress)
        return result
    bounds = queue_bounds(store, qid)
    if not bounds.min_offset <= offset < bounds.max_offset:
        result.warnings.append(
            f"queue offset {offset} is outside {qid}'s range "
            f"[{bounds.min_offset}, {bounds.max_offset})"
        )
    try:
        unit = unit_at(store, topic, queue_id, offset)
    except StoreError as err:
        result.rejected.append(Rejected(-1, err.message))
        if offset >= bounds.max_offset:
            _find_undispatched(store, result, topic, queue_id, offset, progress)
        return result
    view = resolve_unit(store, topic, queue_id, offset, unit)
    result.query["unit"] = {"phy_offset": view.phy_offset, "size": view.size, "tags_code": unit[2]}
    if view.status is UnitStatus.FOUND and view.message is not None:
        result.hits.append(Hit(view.message, Via.CONSUME_QUEUE))
        return result
    why = f"unit points nowhere: {view.status.value}"
    result.rejected.append(
        Rejected(view.phy_offset, f"{why} ({view.detail})" if view.detail else why, view.message)
    )
    if offset >= bounds.max_offset:
        _find_undispatched(store, result, topic, queue_id, offset, progress)
    return result


def _find_undispatched(
    store: Store,
    result: LookupResult,
    topic: str,
    queue_id: int,
    offset: int,
    progress: Progress | None,
) -> None:
    """Look for the record in the commitlog after the consume queues' end."""
    tail = _undispatched_range(store)
    if tail is None:
        return
    result.tail_scanned = tail

    def select(cols: RecordColumns) -> npt.NDArray[np.bool_]:
        keep: npt.NDArray[np.bool_] = cols.queue_id == queue_id
        keep &= cols.queue_offset == offset
        return keep

    for rec in _scan_records(store, *tail, progress, [topic], select):
        if (rec.topic, rec.queue_id, rec.queue_offset) == (topic, queue_id, offset) and (
            rec.enters_consume_queue
        ):
            result.hits.append(Hit(_with_body(store, rec), Via.TAIL_SCAN, (_UNDISPATCHED,)))
            return


_UNDISPATCHED = "not in the consume queue on disk: stored after the last dispatched record"


def _undispatched_range(store: Store) -> tuple[int, int] | None:
    """``[start, end)`` of the commitlog after the consume queues' last record: what the broker
    stored but had not dispatched (it dispatches it when it restarts); None when empty."""
    bounds = all_queue_bounds(store)
    start = max((b.last_phy_offset for b in bounds), default=-1)
    if start < 0 or store.commitlog.find(start) is None:
        start = max(store.commitlog.min_offset, 0)
    end = commitlog_summary(store, bounds).max_offset
    return (start, end) if start < end else None


# --- store time ---------------------------------------------------------------------------


def lookup_time(
    store: Store,
    topic: str,
    begin: int,
    end: int,
    *,
    limit: int | None,
    scan: bool = False,
    progress: Progress | None = None,
) -> LookupResult:
    """Messages of ``topic`` stored in ``[begin, end]``: a binary search per consume queue on
    store time (``getOffsetInQueueByTime``), then a forward walk, and the commitlog after the
    queues' end (what they do not hold yet); ``scan`` walks the whole commitlog instead."""
    result = LookupResult(Mode.TIME, {"topic": topic, "begin": begin, "end": end, "limit": limit})
    if scan:
        result.scanned = True
        for rec in _scan_records(store, None, None, progress, [topic], _in_time(begin, end)):
            if rec.topic == topic and begin <= rec.store_timestamp <= end:
                result.hits.append(Hit(_with_body(store, rec), Via.SCAN))
                if limit is not None and len(result.hits) > limit:
                    break  # one more than asked for: enough to know the list is cut
        _sort_hits(result)
        _keep_limit(result, limit)
        return result
    queues = [qid for qid in store.queue_dirs if qid.topic == topic]
    for qid in queues:
        bounds = queue_bounds(store, qid)
        first = _first_at_or_after(store, qid, bounds.min_offset, bounds.max_offset, begin)
        taken = 0
        for qoff in range(first, bounds.max_offset):
            if limit is not None and taken > limit:
                break  # times rise along a queue: later units cannot make the first ``limit``
            view = resolve_unit(store, topic, qid.queue_id, qoff, unit_at(store, *_ref(qid), qoff))
            if view.message is None or view.status is not UnitStatus.FOUND:
                continue
            ts = view.message.store_timestamp
            if ts > end:
                break
            if ts >= begin:
                result.hits.append(Hit(view.message, Via.CONSUME_QUEUE))
                taken += 1
    _time_tail(store, topic, begin, end, result, progress)
    if not queues and not result.hits:
        result.warnings.append(
            f"no consume queue for topic {topic!r}; messages only in the commitlog need --scan"
        )
        result.suggest_scan = True
    _sort_hits(result)
    _keep_limit(result, limit)
    return result


def _in_time(begin: int, end: int) -> Callable[[RecordColumns], npt.NDArray[np.bool_]]:
    def select(cols: RecordColumns) -> npt.NDArray[np.bool_]:
        keep: npt.NDArray[np.bool_] = cols.store_timestamp >= begin
        keep &= cols.store_timestamp <= end
        return keep

    return select


def _time_tail(
    store: Store,
    topic: str,
    begin: int,
    end: int,
    result: LookupResult,
    progress: Progress | None,
) -> None:
    """The messages of ``topic`` in ``[begin, end]`` the consume queues do not hold yet."""
    tail = _undispatched_range(store)
    if tail is None:
        return
    result.tail_scanned = tail
    seen = {h.record.position for h in result.hits}
    for rec in _scan_records(store, *tail, progress, [topic], _in_time(begin, end)):
        if rec.topic != topic or not rec.enters_consume_queue or rec.position in seen:
            continue
        if begin <= rec.store_timestamp <= end:
            result.hits.append(Hit(_with_body(store, rec), Via.TAIL_SCAN, (_UNDISPATCHED,)))


def _ref(qid: QueueId) -> tuple[str, int]:
    return qid.topic, qid.queue_id


def _first_at_or_after(store: Store, qid: QueueId, low: int, high: int, ts: int) -> int:
    """Smallest queue offset whose message was stored at or after ``ts`` (store times rise
    along a queue); units that point nowhere count as "before"."""
    while low < high:
        mid = (low + high) // 2
        view = resolve_unit(store, qid.topic, qid.queue_id, mid, unit_at(store, *_ref(qid), mid))
        t = view.message.store_timestamp if view.message is not None else None
        if t is not None and t >= ts:
            high = mid
        else:
            low = mid + 1
    return low


def default_max_num(uniq: bool) -> int:
    """The broker caps a UNIQ_KEY query at ``defaultQueryMaxNum`` and mqadmin asks for 64 keys."""
    return DEFAULT_QUERY_MAX_NUM if uniq else min(DEFAULT_KEY_MAX_NUM, MAX_MSGS_NUM_BATCH)
