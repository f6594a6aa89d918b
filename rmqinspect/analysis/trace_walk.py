"""Which records are one message's copies, for ``trace`` (:mod:`rmqinspect.analysis.trace`):
the seeds the query names (an offsetMsgId's record, the index's answer or a walk), the records
their ORIGIN_MESSAGE_IDs name, one commitlog walk for the copies stored after them, and the
copies grouped into one chain per message."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis import Progress
from rmqinspect.analysis.lookup.keys import KeyQuery, default_max_num, known_topics, lookup_key
from rmqinspect.analysis.lookup.offset import lookup_msg_id
from rmqinspect.analysis.messages import ForensicWalk, SkippedRange
from rmqinspect.analysis.trace_model import BadQuery, Search, TraceQuery
from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.ids import decode_offset_msg_id, decode_uniq_key, msg_id
from rmqinspect.format.npbytes import spans_equal
from rmqinspect.format.properties_text import PropertiesText
from rmqinspect.store.model import Store


@dataclass(slots=True)
class Seeds:
    records: list[cl.MessageRecord] = field(default_factory=list)
    search: Search = Search.INDEX
    notes: list[str] = field(default_factory=list)
    skipped: list[SkippedRange] = field(default_factory=list)


def _is_uniq_key(text: str) -> bool:
    try:
        decode_uniq_key(text)
    except DecodeError:
        return False
    return True


def find_seeds(store: Store, q: TraceQuery, progress: Progress | None) -> Seeds:
    out = Seeds()
    if q.msg_id is not None:
        text = q.msg_id.strip()
        try:
            result = lookup_msg_id(store, text)
        except StoreError as err:
            if not _is_uniq_key(text):
                raise BadQuery(f"--msg-id {text!r}: {err}") from None
            result = None
        if result is not None and result.hits:
            out.search = Search.PHYSICAL_OFFSET
            out.records.append(result.hits[0].record)
            return out
        out.search = Search.PHYSICAL_OFFSET
        if result is not None and result.rejected:
            out.notes.append(f"as an offsetMsgId: {result.rejected[0].reason}")
        if not _is_uniq_key(text):
            return out
        # MessageClientExt.getMsgId: the id a client shows is the UNIQ_KEY.
        out.search = Search.INDEX
        out.notes.append("the msg id is read as a UNIQ_KEY (the client's msgId)")
        return _by_keys(store, (text,), None, None, out, progress)
    if q.key is not None:
        if q.topic is None:
            raise BadQuery("--key needs --topic")
        return _by_keys(store, (), q.key, q.topic, out, progress)
    if not q.uniq_keys:
        raise BadQuery("give --msg-id, --uniq-key or --key with --topic")
    return _by_keys(store, q.uniq_keys, None, None, out, progress)


def _by_keys(
    store: Store,
    uniq_keys: Iterable[str],
    key: str | None,
    topic: str | None,
    out: Seeds,
    progress: Progress | None,
) -> Seeds:
    """The index where it answers, else a walk (``lookup --scan``'s)."""
    queries = [
        KeyQuery(k, tuple(known_topics(store)), True, default_max_num(True)) for k in uniq_keys
    ]
    if key is not None and topic is not None:
        queries.append(KeyQuery(key, (topic,), False, default_max_num(False)))
    for query in queries:
        result = lookup_key(store, query, progress=progress)
        if not result.hits and result.index is not None and result.index.state != "ok":
            out.search = Search.SCAN
            out.notes.append(f"index {result.index.state}: the commitlog was walked instead")
            result = lookup_key(store, query, scan=True, progress=progress)
            out.skipped.extend(s for s in result.skipped if s not in out.skipped)
        out.records.extend(h.record for h in result.hits)
    return out


# --- the walk ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Pool:
    """The records met so far that belong to some traced chain."""

    records: dict[int, cl.MessageRecord] = field(default_factory=dict)
    linked_by: dict[int, str] = field(default_factory=dict)
    uniq_keys: set[str] = field(default_factory=set)
    ids: dict[str, int] = field(default_factory=dict)  # offsetMsgId (upper case) -> position
    trace_bodies: list[cl.MessageRecord] = field(default_factory=list)
    skipped: list[SkippedRange] = field(default_factory=list)

    def add(self, rec: cl.MessageRecord, how: str) -> None:
        if rec.position in self.records:
            return
        self.records[rec.position] = rec
        self.linked_by[rec.position] = how
        if rec.uniq_key is not None:
            self.uniq_keys.add(rec.uniq_key)
        self.ids[msg_id(rec).upper()] = rec.position

    def traced_by(self, trace_keys: Iterable[str]) -> bool:
        """A trace message's KEYS name a record met: its UNIQ_KEY, or for a message without
        one its offsetMsgId (``MessageClientExt.getMsgId``, the msgId a tracing consumer
        records)."""
        return any(k in self.uniq_keys or k.upper() in self.ids for k in trace_keys)


def follow_origins(store: Store, pool: Pool) -> None:
    """Before the walk: the records a seed's ORIGIN_MESSAGE_ID names (a seed may be a copy), as
    far back as they go, each read once."""
    todo = list(pool.records.values())
    while todo:
        rec = todo.pop()
        origin = rec.properties.get(props.ORIGIN_MESSAGE_ID)
        if origin is None or origin in pool.uniq_keys or origin.upper() in pool.ids:
            continue
        target = read_origin(store, origin)
        if isinstance(target, cl.MessageRecord):
            # A record of another message is a finding (trace's ``_origin_findings``), no link.
            if target.position not in pool.records and _same_message(rec, target):
                pool.add(target, props.ORIGIN_MESSAGE_ID.lower())
                todo.append(target)
        elif not isinstance(target, cl.MessageRecord) and _is_uniq_key(origin):
            pool.uniq_keys.add(origin)  # the client's fallback path: the original's UNIQ_KEY


def _same_message(a: cl.MessageRecord, b: cl.MessageRecord) -> bool:
    """Copies keep the original's UNIQ_KEY (the properties are copied): two records with
    different ones are different messages, whatever an ORIGIN_MESSAGE_ID says."""
    return a.uniq_key is None or b.uniq_key is None or a.uniq_key == b.uniq_key


def read_origin(store: Store, origin: str) -> cl.MessageRecord | str:
    """The record an offsetMsgId names, or why there is none."""
    try:
        mid = decode_offset_msg_id(origin)
    except DecodeError:
        return "not an offsetMsgId"
    if store.commitlog.find(mid.physical_offset) is None:
        return f"offset {mid.physical_offset} is in no commitlog file"
    try:
        return store.read_message(mid.physical_offset)
    except StoreError as err:
        return f"no record at offset {mid.physical_offset}: {err}"


def walk_copies(
    store: Store, pool: Pool, trace_topics: tuple[str, ...], progress: Progress | None
) -> None:
    walk = ForensicWalk()
    for cols in walk.runs(store, progress):
        trace_at = np.flatnonzero(cols.topic_mask(list(trace_topics)))
        rows = np.union1d(_candidates(cols, pool.uniq_keys), trace_at)
        uniq = cols.property_values(props.UNIQ_KEY, rows)
        origin = cols.property_values(props.ORIGIN_MESSAGE_ID, rows)
        keys = dict(zip(trace_at.tolist(), cols.property_values(props.KEYS, trace_at), strict=True))
        for j, i in enumerate(rows.tolist()):
            u, o = uniq[j], origin[j]
            how = None
            if i in keys:
                if pool.traced_by(props.split_keys(keys[i])):
                    pool.trace_bodies.append(store.with_entry(cols.record(i, with_body=True)))
                continue
            if u is not None and u in pool.uniq_keys:
                how = "uniq_key"
            elif u is None and o is not None and (o in pool.uniq_keys or o.upper() in pool.ids):
                how = "origin_message_id"  # a copy without UNIQ_KEY (see _same_message)
            if how is not None:
                pool.add(store.with_entry(cols.record(i, with_body=False)), how)
    pool.skipped.extend(walk.skipped)


def _candidates(cols: RecordColumns, uniq_keys: set[str]) -> npt.NDArray[np.int64]:
    """The records of a run the walk must look at one by one: those with one of the chain's
    UNIQ_KEYs (compared as bytes, a key at a time, while there are few) and those without a
    UNIQ_KEY that carry an ORIGIN_MESSAGE_ID. Every other record cannot join (the keys do not
    change during the walk: a record joins by its UNIQ_KEY or, having none, by its origin)."""
    everything = np.arange(len(cols), dtype=np.int64)
    text = PropertiesText(cols, everything)
    at, length = text.spans(props.UNIQ_KEY)
    origin_at, _ = text.spans(props.ORIGIN_MESSAGE_ID)
    wanted = (at < 0) & (origin_at >= 0)
    if len(uniq_keys) > _BYTE_COMPARED_KEYS or not all(k.isascii() for k in uniq_keys):
        wanted |= at >= 0  # many keys, or text that decoding may have changed: compare as text
    else:
        data = np.frombuffer(cols.buf, np.uint8)
        for key in uniq_keys:
            wanted |= spans_equal(data, at, length, key.encode())
    return np.flatnonzero(wanted).astype(np.int64)


_BYTE_COMPARED_KEYS = 32


# --- chains -----------------------------------------------------------------------------------


def chain_components(pool: Pool) -> list[list[cl.MessageRecord]]:
    """Records linked by a shared UNIQ_KEY or an ORIGIN_MESSAGE_ID, in physical order."""
    parent = {p: p for p in pool.records}

    def root(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    def union(a: int, b: int) -> None:
        parent[root(a)] = root(b)

    by_uniq: dict[str, int] = {}
    for p, rec in sorted(pool.records.items()):
        if rec.uniq_key is not None:
            union(p, by_uniq.setdefault(rec.uniq_key, p))
    for p, rec in pool.records.items():
        o = rec.properties.get(props.ORIGIN_MESSAGE_ID)
        if o is None:
            continue
        target = pool.ids.get(o.upper())
        if target is None and o in by_uniq:
            target = by_uniq[o]
        if target is not None and _same_message(rec, pool.records[target]):
            union(p, target)
    groups: dict[int, list[cl.MessageRecord]] = {}
    for p in sorted(pool.records):
        groups.setdefault(root(p), []).append(pool.records[p])
    return list(groups.values())
