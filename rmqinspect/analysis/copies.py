"""The copies the broker stored of messages, one row per copy, read from each run of records on
its own (the ``message_copies`` export table; ``trace`` follows one message with the same
rules, :mod:`rmqinspect.format.fate`).

A message's first record is an original send (its topic, or ``SCHEDULE_TOPIC_XXXX`` for a
delayed send, ``rmq_sys_wheel_timer`` for a 5.x timer send, or the half of a transaction); every
other record that carries its properties is a copy: a retry or DLQ copy, a retry's schedule
copy, a due delayed message stored again in its real topic, a timer roll or a fired timer
message, a half's check copy or given-up copy, a commit or rollback (a timer recall's marker
shares the UNIQ_KEY but is no copy). Where the copy itself
names its source, the row says where that is (``linked_by``):

- ``origin_message_id``: a retry, DLQ or retry-schedule copy's ``ORIGIN_MESSAGE_ID`` is the
  offsetMsgId of the copy its group consumed, so ``from_physical_offset`` is that record's
  (``SendMessageProcessor.asyncConsumerSendMsgBack``); the client's fallback path stores the
  UNIQ_KEY there instead, which names no position (join on ``uniq_key``);
- ``prepared_transaction_offset``: a commit or rollback names its half
  (``EndTransactionProcessor.endMessageTransaction``);
- ``uniq_key``: nothing else (a due delayed message, a check copy): the message's records share
  its UNIQ_KEY, the first of them (lowest physical offset) being the send.

Each row needs only its own record, so the table is built range by range in parallel with the
``messages`` table, no walk of its own (a retry storm's copies are most of a store).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import DecodeError
from rmqinspect.format import properties as props
from rmqinspect.format import timer
from rmqinspect.format.columns import RecordColumns, decode_text
from rmqinspect.format.commitlog import TRANSACTION_TYPE_MASK
from rmqinspect.format.config import ConsumerOffsetTable, split_topic_group
from rmqinspect.format.fate import CHECK_TIMES, TRACE_TOPIC, Role, link_keys, role_of
from rmqinspect.format.ids import decode_offset_msg_id
from rmqinspect.format.properties_text import PropertiesText
from rmqinspect.store.configfiles import load_config_file
from rmqinspect.store.model import Store

# Records that are no copy of a message, whatever properties they carry.
_NOT_COPIES = frozenset({Role.TRACE, Role.OP, Role.OFFSET_MOVED_EVENT, Role.TIMER_RECALL})
# The properties role_of decides by (besides the topic and the transaction type).
_ROLE_PROPERTIES = (
    props.REAL_TOPIC,
    timer.TIMER_DEQUEUE_MS,
    timer.TIMER_ROLL_TIMES,
    timer.TIMER_DEL_UNIQKEY,
)
# Roles a message's first record has; such a record is a copy only when it names a source.
_SENDS = frozenset({Role.ORIGINAL, Role.SCHEDULE, Role.HALF, Role.TIMER})


@dataclass(frozen=True, slots=True)
class CopyRows:
    """The copies among a run's records, as columns (``rows``: their indexes in the run)."""

    rows: npt.NDArray[np.int64]
    topics: list[str]
    roles: list[Role]
    groups: list[str | None]
    uniq_keys: list[str | None]
    origin_message_ids: list[str | None]
    from_physical_offsets: list[int | None]
    linked_by: list[str]


def copy_rows(
    cols: RecordColumns,
    known_groups: tuple[str, ...] = (),
    trace_topics: tuple[str, ...] = (TRACE_TOPIC,),
) -> CopyRows:
    """The copies among ``cols``' records. Roles are decided once per (topic, which of the
    properties :func:`role_of` looks at are set, transaction type), not per record."""
    everything = np.arange(len(cols), dtype=np.int64)
    text = PropertiesText(cols, everything)
    has = {
        name: text.spans(name)[0] >= 0
        for name in (
            *_ROLE_PROPERTIES,
            props.ORIGIN_MESSAGE_ID,
            props.RETRY_TOPIC,
            CHECK_TIMES,
        )
    }
    topic_ids, topic_bytes = cols.topic_ids()
    topics = [decode_text(t) for t in topic_bytes]
    tx = (cols.sys_flag.astype(np.int64) & TRANSACTION_TYPE_MASK) >> 2
    key = topic_ids
    for name in _ROLE_PROPERTIES:
        key = key * 2 + has[name]
    kinds, inverse = np.unique(key * 4 + tx, return_inverse=True)
    kind_roles = [_kind_role(int(k), topics, trace_topics) for k in kinds]
    every = list(Role)
    role_ids = np.array([every.index(r) for r in kind_roles], np.int64)[inverse]
    sends = np.isin(role_ids, [every.index(r) for r in _SENDS])
    excluded = np.isin(role_ids, [every.index(r) for r in _NOT_COPIES])
    # A send's record is a copy when it says whose: a retry's schedule copy names its origin
    # (and RETRY_TOPIC), a check copy carries its check count.
    names_source = has[props.ORIGIN_MESSAGE_ID] | has[props.RETRY_TOPIC] | has[CHECK_TIMES]
    rows = np.flatnonzero(~excluded & (~sends | names_source)).astype(np.int64)
    roles = [every[i] for i in role_ids[rows].tolist()]
    group_of = [link_keys(t, {}, known_groups).group for t in topics]
    groups = [group_of[int(i)] for i in topic_ids[rows]]
    uniq = cols.property_values(props.UNIQ_KEY, rows)
    origin = cols.property_values(props.ORIGIN_MESSAGE_ID, rows)
    prepared = cols.prepared_transaction_offset[rows].tolist()
    sources: list[int | None] = []
    linked: list[str] = []
    for role, o, p in zip(roles, origin, prepared, strict=True):
        source, how = _source(role, o, p)
        sources.append(source)
        linked.append(how)
    row_topics = [topics[i] for i in topic_ids[rows].tolist()]
    return CopyRows(rows, row_topics, roles, groups, uniq, origin, sources, linked)


def _kind_role(kind: int, topics: list[str], trace_topics: tuple[str, ...]) -> Role:
    """:func:`role_of` for one kind: its transaction type, then one bit per
    ``_ROLE_PROPERTIES`` name (the last name lowest), then the topic."""
    tx, rest = kind % 4, kind // 4
    present: dict[str, str] = {}
    for name in reversed(_ROLE_PROPERTIES):
        if rest % 2:
            present[name] = ""
        rest //= 2
    return role_of(topics[rest], present, tx << 2, trace_topics)


def _source(role: Role, origin: str | None, prepared: int) -> tuple[int | None, str]:
    if role in (Role.COMMIT, Role.ROLLBACK):
        return prepared, "prepared_transaction_offset"
    if origin is not None:
        try:
            return decode_offset_msg_id(origin).physical_offset, "origin_message_id"
        except DecodeError:
            pass  # the client's fallback path: the UNIQ_KEY (or an id naming nothing)
    return None, "uniq_key"


def known_groups(store: Store) -> tuple[str, ...]:
    """The groups ``consumerOffset.json`` names: a 5.x POP retry topic
    ``%RETRY%<group>_<topic>`` splits only against a known group (group names may hold ``_``).
    Read once per process and file state: every commitlog range of an export asks."""
    path = store.config_dir / "consumerOffset.json"
    try:
        st = path.stat()
        state: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
    except OSError:
        state = None
    return _groups(store.config_dir, state)


@lru_cache(maxsize=8)
def _groups(config_dir: Path, state: tuple[int, int] | None) -> tuple[str, ...]:
    """``state`` (the file's mtime and size) is only part of the cache key: a changed file is
    read again."""
    loaded = load_config_file(config_dir, "consumerOffset.json").value
    if not isinstance(loaded, ConsumerOffsetTable):
        return ()
    pairs = (split_topic_group(key) for key in loaded.offset_table)
    return tuple(sorted({p[1] for p in pairs if p is not None}))
