"""Every copy the broker stored of a message, as original → copy edges, for the whole store (the
``message_copies`` export table; ``trace`` follows one message with the same rules).

A copy keeps its message's UNIQ_KEY (the properties are copied: retry, DLQ, schedule, scheduled
delivery, half check copies, commit), so the message's first record (the lowest physical offset
with that UNIQ_KEY: the original, or for a delayed message its schedule record) is the edge's
origin and every later record with the key is a copy. A copy without UNIQ_KEY is linked by its
``ORIGIN_MESSAGE_ID``: the original's UNIQ_KEY (the client's fallback path) or its offsetMsgId,
whose physical offset is the origin. Roles are :func:`rmqinspect.format.fate.role_of`'s.

Two forensic walks, so memory follows the copies, not the messages: the first finds the copies
(records whose role is not ``original``, or that carry ``ORIGIN_MESSAGE_ID``) and their keys,
the second the first record of each of those keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rmqinspect.analysis import Progress
from rmqinspect.errors import DecodeError
from rmqinspect.format import properties as props
from rmqinspect.format.columns import RecordColumns, decode_text
from rmqinspect.format.fate import TRACE_TOPIC, Role, link_keys, role_of
from rmqinspect.format.ids import decode_offset_msg_id
from rmqinspect.format.scan import Skipped, WalkPolicy
from rmqinspect.store.model import Store

# Records that are no copy of a message, whatever properties they carry.
_NOT_COPIES = frozenset({Role.ORIGINAL, Role.TRACE, Role.OP, Role.OFFSET_MOVED_EVENT})


@dataclass(frozen=True, slots=True)
class CopyEdge:
    from_physical_offset: int  # the message's first record (or what ORIGIN_MESSAGE_ID names)
    to_physical_offset: int  # the copy
    uniq_key: str | None
    role: Role  # the copy's
    group: str | None  # the group a retry/DLQ topic names
    reconsume_times: int
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    linked_by: str  # uniq_key or origin_message_id


@dataclass(frozen=True, slots=True)
class _Candidate:
    position: int
    uniq_key: str | None
    origin: str | None
    role: Role
    group: str | None
    reconsume_times: int
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int


def _walk(store: Store, progress: Progress | None) -> Iterator[RecordColumns]:
    """The runs of a forensic walk (damage stepped over: what it held is no copy to list)."""
    opts = store.check_options(check_crc=False, read_body=False)
    last = max(store.commitlog.min_offset, 0)
    for f, event in store.scan(None, opts, policy=WalkPolicy.FORENSIC):
        if isinstance(event, Skipped):
            continue
        yield event.columns
        end = f.start + event.end
        if progress is not None and end > last:
            progress(end - last)
            last = end


def copy_edges(
    store: Store,
    trace_topics: tuple[str, ...] = (TRACE_TOPIC,),
    known_groups: tuple[str, ...] = (),
    progress: Progress | None = None,
) -> list[CopyEdge]:
    candidates: list[_Candidate] = []
    for cols in _walk(store, progress):
        rows = np.arange(len(cols), dtype=np.int64)
        uniq = cols.property_values(props.UNIQ_KEY, rows)
        origin = cols.property_values(props.ORIGIN_MESSAGE_ID, rows)
        real = cols.property_values(props.REAL_TOPIC, rows)
        topic_ids, topic_bytes = cols.topic_ids()
        topics = [decode_text(t) for t in topic_bytes]
        for i in range(len(cols)):
            topic = topics[topic_ids[i]]
            p = {} if real[i] is None else {props.REAL_TOPIC: real[i] or ""}
            role = role_of(topic, p, int(cols.sys_flag[i]), trace_topics)
            if role in _NOT_COPIES and (role is not Role.ORIGINAL or origin[i] is None):
                continue
            candidates.append(
                _Candidate(
                    cols.file_start + int(cols.positions[i]),
                    uniq[i],
                    origin[i],
                    role,
                    link_keys(topic, {}, known_groups).group,
                    int(cols.reconsume_times[i]),
                    topic,
                    int(cols.queue_id[i]),
                    int(cols.queue_offset[i]),
                    int(cols.store_timestamp[i]),
                )
            )
    wanted = {c.uniq_key for c in candidates if c.uniq_key is not None}
    wanted |= {c.origin for c in candidates if c.uniq_key is None and c.origin is not None}
    first: dict[str, int] = {}
    if wanted:
        for cols in _walk(store, None):
            rows = np.arange(len(cols), dtype=np.int64)
            for i, u in enumerate(cols.property_values(props.UNIQ_KEY, rows)):
                if u is not None and u in wanted and u not in first:
                    first[u] = cols.file_start + int(cols.positions[i])
    edges = []
    for c in candidates:
        edge = _edge(c, first)
        if edge is not None:
            edges.append(edge)
    return edges


def _edge(c: _Candidate, first: dict[str, int]) -> CopyEdge | None:
    if c.uniq_key is not None:
        source, how = first.get(c.uniq_key), "uniq_key"
    elif c.origin is not None and c.origin in first:
        source, how = first[c.origin], "origin_message_id"
    elif c.origin is not None:
        try:
            source, how = decode_offset_msg_id(c.origin).physical_offset, "origin_message_id"
        except DecodeError:
            return None  # names nothing: trace reports it, the table has no edge to give
    else:
        return None
    if source is None or source == c.position:
        return None  # the message's first record is no copy of itself
    return CopyEdge(
        source,
        c.position,
        c.uniq_key,
        c.role,
        c.group,
        c.reconsume_times,
        c.topic,
        c.queue_id,
        c.queue_offset,
        c.store_timestamp,
        how,
    )
