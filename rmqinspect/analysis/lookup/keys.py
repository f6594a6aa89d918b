"""Key and UNIQ_KEY lookups: the broker's query path on the index, re-checked the way the client
does, plus the unindexed commitlog tail."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis import Progress
from rmqinspect.analysis.lookup.index import OpenIndex, RestartedIndex, broker_query
from rmqinspect.analysis.lookup.result import (
    DEFAULT_KEY_MAX_NUM,
    LONG_MAX,
    Hit,
    IndexReport,
    LookupResult,
    Mode,
    Rejected,
    Via,
    keep_limit,
    sort_hits,
)
from rmqinspect.analysis.lookup.scan import readable_end_offset, scan_records, with_body
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.ids import msg_id
from rmqinspect.format.index import (
    DEFAULT_QUERY_MAX_NUM,
    MAX_MSGS_NUM_BATCH,
)
from rmqinspect.store.model import Store

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
    keep_limit(result, limit)
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
    seen: set[int] = set()
    if scan:
        # Every intact message with the key, as ``messages`` lists them: the whole commitlog,
        # past damage, not only what the broker reads up to its first bad record.
        result.scanned = True
        found = scan_records(store, None, None, progress, q.topics, result.skipped, q.select)
        for rec in found:
            if _scan_match(rec, q) and rec.position not in seen:
                seen.add(rec.position)
                result.hits.append(Hit(with_body(store, rec), Via.SCAN))
        sort_hits(result)
        return result
    end = restart.end if restart is not None else readable_end_offset(store)
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
    sort_hits(result)
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
    for rec in scan_records(store, start, end, progress, q.topics, result.skipped, q.select):
        if rec.position in seen or rec.position in report.broker_offsets:
            continue
        if _scan_match(rec, q):
            seen.add(rec.position)
            result.hits.append(
                Hit(
                    with_body(store, rec),
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
    sort_hits(result)
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


def known_topics(store: Store) -> list[str]:
    """Topics a UNIQ_KEY may be indexed under: consume queues and topics.json."""
    from rmqinspect.format.config import TopicConfigTable
    from rmqinspect.store.configfiles import load_config_file

    topics = {qid.topic for qid in store.queue_dirs}
    cfg = load_config_file(store.config_dir, "topics.json")
    if isinstance(cfg.value, TopicConfigTable):
        topics.update(cfg.value.topic_config_table)
    return sorted(topics)


def default_max_num(uniq: bool) -> int:
    """The broker caps a UNIQ_KEY query at ``defaultQueryMaxNum`` and mqadmin asks for 64 keys."""
    return DEFAULT_QUERY_MAX_NUM if uniq else min(DEFAULT_KEY_MAX_NUM, MAX_MSGS_NUM_BATCH)
