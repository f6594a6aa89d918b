"""What dispatch derives from many records' properties at once: the consume queue's tagsCode
(:func:`tags_codes`) and the index's keys (:func:`index_keys`), in C when the extension is
built and with numpy otherwise, and the Java decoding of their text (:func:`decode_text`).
:class:`~rmqinspect.format.columns.RecordColumns` answers them through its methods of the same
names; :mod:`rmqinspect.format.columns` re-exports these names.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format import speedups
from rmqinspect.format.javahash import index_key, prefixed_span_hashes
from rmqinspect.format.npbytes import I64, Mask, members, span_fingerprints, span_ids, split_spans
from rmqinspect.format.properties_text import PropertiesText

if TYPE_CHECKING:
    from rmqinspect.format.columns import RecordColumns

_TAGS_NAME = props.TAGS.encode()


@functools.lru_cache(maxsize=4096)
def decode_text(raw: bytes) -> str:
    """Java decodes with replacement characters; so do we (cached: a log holds few topics)."""
    return raw.decode("utf-8", "replace")


@functools.lru_cache(maxsize=4096)
def tag_hash(tags: str | None) -> int:
    """``cl.dispatch_tags_code`` outside the schedule topic depends on TAGS only: cached."""
    return cl.dispatch_tags_code("", tags, None, 0, {}) or 0


class IndexKeys(NamedTuple):
    """Index keys of many records (see :func:`index_keys`): each key's hash,
    the index of its record among the rows asked about, where the key's bytes are, and a
    fingerprint of them (:func:`~rmqinspect.format.npbytes.span_fingerprints`)."""

    hashes: I64
    owners: I64
    starts: I64
    lengths: I64
    prints: I64


def tags_codes(
    cols: RecordColumns,
    rows: I64,
    delay_levels: Mapping[int, int],
    topics: tuple[I64, Sequence[str]] | None = None,
) -> tuple[I64, Mask]:
    """:meth:`RecordColumns.tags_code <rmqinspect.format.columns.RecordColumns.tags_code>` of
    each record of ``rows`` (ascending), and whether it is known (False where a schedule
    record's DELAY makes the check fail). TAGS are found and hashed by
    :func:`~rmqinspect.format.speedups.property_hashes` (without the extension: by
    :class:`PropertiesText`, each distinct value hashed once); schedule-topic records, whose
    DELAY decides, are looked at apart. ``topics`` is ``cols.topic_ids()``' answer, decoded,
    when the caller has it."""
    known = np.ones(len(rows), bool)
    if speedups.compiled():
        # TAGS found and hashed in C: the tag hash, 0 without tags (``tag_hash``).
        _, _, codes = speedups.property_hashes(
            cols.buf,
            cols.properties_at[rows],
            np.maximum(cols.properties_length[rows], 0),
            _TAGS_NAME,
        )
    else:
        codes = np.zeros(len(rows), np.int64)
        at, length = PropertiesText(cols, rows).spans(props.TAGS)
        present = np.flatnonzero(at >= 0)
        ids, distinct = span_ids(cols.buf, at[present], length[present])
        hashes = np.array([tag_hash(decode_text(v)) for v in distinct], np.int64)
        codes[present] = hashes[ids] if len(distinct) else 0
    if topics is None:
        tids, raw = cols.topic_ids()
        topics = tids, [decode_text(t) for t in raw]
    tids, names = topics
    wanted = [i for i, t in enumerate(names) if t == cl.SCHEDULE_TOPIC]
    schedule = np.flatnonzero(members(tids[rows], np.array(wanted, np.int64)))
    if len(schedule):
        # A run holds few distinct DELAY values: each is judged once.
        at, length = cols.property_spans(props.DELAY, rows[schedule])
        has = at >= 0
        delayed = schedule[has]
        ids, distinct = span_ids(cols.buf, at[has], length[has])
        verdicts = [cl.schedule_delay(decode_text(d), delay_levels) for d in distinct]
        parses = np.array([ok for ok, _ in verdicts], bool)[ids]
        millis = np.array([-1 if ms is None else ms for _, ms in verdicts], np.int64)[ids]
        timed = parses & (millis >= 0)
        codes[delayed[timed]] = cols.store_timestamp[rows[delayed[timed]]] + millis[timed]
        codes[delayed[~parses]] = 0
        known[delayed[~parses]] = False
    return codes, known


def index_keys(
    cols: RecordColumns,
    rows: I64,
    topic_ids: I64 | None = None,
    topics: Sequence[str] | None = None,
) -> IndexKeys:
    """The keys ``IndexService.buildIndex`` puts for the records ``rows`` (ascending, well
    formed), in order: each record's UNIQ_KEY, then its KEYS split on single spaces, empty
    ones dropped; ROLLBACK records put none. Keys stay spans of the buffer, hashed (as
    ``topic#key``) and fingerprinted by :func:`~rmqinspect.format.speedups.index_keys` in
    C, or without the extension with numpy (``topic_ids``/``topics``: ``cols.topic_ids()``'
    answer, decoded, when the caller has it)."""
    rollback = (cols.sys_flag[rows] & cl.TRANSACTION_TYPE_MASK) == cl.TRANSACTION_ROLLBACK_TYPE
    if speedups.compiled():
        keep = np.flatnonzero(~rollback)
        r = rows[keep]
        found = speedups.index_keys(
            cols.buf,
            cols.topic_at[r],
            np.maximum(cols.topic_length[r], 0),
            cols.properties_at[r],
            np.maximum(cols.properties_length[r], 0),
        )
        return IndexKeys(
            found.hashes, keep[found.owners], found.starts, found.lengths, found.prints
        )
    if topic_ids is None or topics is None:
        topic_ids, raw = cols.topic_ids()
        topics = [decode_text(t) for t in raw]
    text = PropertiesText(cols, rows)
    uniq_at, uniq_len = text.spans(props.UNIQ_KEY)
    keys_at, keys_len = text.spans(props.KEYS)
    with_uniq = np.flatnonzero((uniq_at >= 0) & ~rollback)
    with_keys = np.flatnonzero((keys_at >= 0) & ~rollback)
    data = np.frombuffer(cols.buf, np.uint8)
    part_at, part_len, part_of = split_spans(
        data, keys_at[with_keys], keys_len[with_keys], ord(props.KEY_SEPARATOR)
    )
    owner_of_part = with_keys[part_of]
    # A part's rank among its record's parts: UNIQ_KEY (0) comes first.
    first_part = np.searchsorted(part_of, part_of, side="left")
    rank = np.arange(1, len(part_of) + 1) - first_part
    kept = part_len > 0
    owners = np.concatenate([with_uniq, owner_of_part[kept]])
    ranks = np.concatenate([np.zeros(len(with_uniq), np.int64), rank[kept]])
    starts = np.concatenate([uniq_at[with_uniq], part_at[kept]])
    lengths = np.concatenate([uniq_len[with_uniq], part_len[kept]])
    order = np.lexsort((ranks, owners))
    owners, starts, lengths = owners[order], starts[order], lengths[order]
    prefixes = [index_key(topic, "") for topic in topics]
    hashes = prefixed_span_hashes(prefixes, topic_ids[rows[owners]], data, starts, lengths)
    prints = span_fingerprints(data, starts, lengths)
    return IndexKeys(hashes, owners, starts, lengths, prints)
