"""BatchConsumeQueue units for ``consumequeue`` (docs/batch-consume-queue.md): what lies past
the recovered end, the units as views, and what a unit says of its record, the one rule
``consumequeue`` and ``verify`` apply beyond the unit rule of analysis/units.py.

The reput sets a unit's msgBaseOffset and batchSize from the record's ``INNER_BASE`` and
``INNER_NUM`` properties when it has both (``CommitLog.setBatchSizeIfNeeded``, parsed with
``Long.parseLong`` and ``Short.parseShort``); the broker puts ``INNER_NUM`` on an inner-batch
record when it receives it (``SendMessageProcessor``, the count of the messages in its body)
and ``INNER_BASE`` when it assigns the queue offset (``BatchConsumeQueue.assignQueueOffset``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from rmqinspect.analysis.units import UnitStatus, UnitView, resolve_unit
from rmqinspect.errors import StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.batchcq import BCQ_STORE_UNIT_SIZE
from rmqinspect.format.javamath import java_parse_int, java_parse_long
from rmqinspect.store.batch_queue import BatchQueue
from rmqinspect.store.model import Store

_SHORT_MAX = 0x7FFF
_NO_END = 2**63
_CHUNK = 8192


def batch_mismatch(record: cl.MessageRecord, base: int, batch_size: int) -> str | None:
    """Why the unit (``base``, ``batch_size``) is not what the reput writes for ``record``;
    None when it is, or when the record carries neither property (the count cannot be
    checked)."""
    p = record.properties
    num_text, base_text = p.get(props.INNER_NUM), p.get(props.INNER_BASE)
    if num_text is None and base_text is None:
        return None
    if num_text is None or base_text is None:
        missing = props.INNER_BASE if base_text is None else props.INNER_NUM
        return f"the record has no {missing}: the reput would not have written this unit"
    num = java_parse_int(num_text)
    if num is None or not -_SHORT_MAX - 1 <= num <= _SHORT_MAX:
        return f"{props.INNER_NUM} {num_text[:40]!r} is not a short: the reput fails on it"
    if num != batch_size:
        return f"batchSize {batch_size} but the record's {props.INNER_NUM} is {num}"
    if java_parse_long(base_text) != base:
        return f"msgBaseOffset {base} but the record's {props.INNER_BASE} is {base_text[:40]!r}"
    return None


def inner_batch(store: Store, physical_offset: int) -> tuple[int, int] | None:
    """(msgBaseOffset, batchSize) the reput gives the record at ``physical_offset``
    (``setBatchSizeIfNeeded``: ``INNER_BASE`` by ``Long.parseLong``, ``INNER_NUM`` by
    ``Short.parseShort``); None when it lacks either or one does not parse."""
    try:
        p = store.read_message(physical_offset, with_body=False).properties
    except StoreError:
        return None
    num_text, base_text = p.get(props.INNER_NUM), p.get(props.INNER_BASE)
    if num_text is None or base_text is None:
        return None
    num, base = java_parse_int(num_text), java_parse_long(base_text)
    if num is None or not -_SHORT_MAX - 1 <= num <= _SHORT_MAX or base is None:
        return None
    return base, num


def batch_extent(store: Store, bq: BatchQueue, max_offset: int) -> tuple[int, int]:
    """(non-zero units past the recovered end, the end of the furthest batch of a non-zero
    unit on disk, at least ``max_offset``): what ``consumequeue --all`` lists past the end."""
    stale, end_on_disk = 0, max_offset
    ends = {f.path: f.start + w for f, w in zip(bq.files.files, bq.wrote, strict=True)}
    for c in bq.chunks(store.maps, 0, _NO_END, _CHUNK, everything=True):
        past = c.positions + c.file.start >= ends[c.file.path]
        nonzero = c.units.view(np.uint8).reshape(len(c), BCQ_STORE_UNIT_SIZE).any(axis=1)
        stale += int(np.count_nonzero(past & nonzero))
        batch_ends = (c.bases + c.batch_sizes)[nonzero]
        if len(batch_ends):
            end_on_disk = max(end_on_disk, int(batch_ends.max()))
    return stale, end_on_disk


def batch_unit_views(
    store: Store, bq: BatchQueue, start: int, stop: int, everything: bool, limit: int | None
) -> Iterator[UnitView]:
    """The units serving ``[start, stop)`` (``everything``: past the recovered end too),
    ``limit`` of them: each resolved at its msgBaseOffset (where its record is written), with
    its batchSize, and checked against the record's ``INNER_NUM``/``INNER_BASE``."""
    qid = bq.qid
    shown = 0
    for c in bq.chunks(store.maps, start, stop, _CHUNK, everything=everything):
        for u, base, n in zip(c.units, c.bases.tolist(), c.batch_sizes.tolist(), strict=True):
            if limit is not None and shown >= limit:
                return
            unit = (int(u["phy_offset"]), int(u["size"]), int(u["tags_code"]))
            view = resolve_unit(store, qid.topic, qid.queue_id, base, unit, check_tags=True)
            view = replace(view, batch_size=n)
            if view.status is UnitStatus.FOUND and view.message is not None:
                why = batch_mismatch(view.message, base, n)
                if why is not None:
                    view = replace(view, detail=why)
            shown += 1
            yield view
