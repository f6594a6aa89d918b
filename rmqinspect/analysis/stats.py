"""``stats``: records and bytes of the commitlog by topic, queue, tag, transaction type, body
size and hour, like ``pg_waldump --stats``, from one forensic walk (the ``messages`` walk,
unfiltered: skipped byte ranges are counted and listed, never hidden)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from rmqinspect.analysis import Progress
from rmqinspect.analysis.messages import (
    MessageBatch,
    MessageFilter,
    SkippedRange,
    stream_messages,
)
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.columns import decode_text
from rmqinspect.format.npbytes import I64, span_ids
from rmqinspect.store.model import Store

HOUR_MS = 3_600_000
# Body-size buckets: each is "at most this many bytes" (the last one has no bound).
BODY_SIZE_BOUNDS = (0, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


@dataclass(frozen=True, slots=True)
class Tally:
    """Records and their bytes (TOTALSIZE) under one key."""

    records: int
    bytes: int


@dataclass(frozen=True, slots=True)
class StoreStats:
    records: int
    bytes: int
    by_topic: dict[str, Tally]
    by_queue: dict[tuple[str, int], Tally]
    by_tag: dict[str | None, Tally]  # None: no TAGS property
    by_transaction: dict[str, Tally]  # not|prepared|commit|rollback
    body_sizes: dict[int | None, Tally]  # bucket bound (BODY_SIZE_BOUNDS), None: larger
    per_hour: dict[int, Tally]  # hour start, epoch ms (store time)
    skipped: list[SkippedRange]

    @property
    def skipped_bytes(self) -> int:
        return sum(s.length for s in self.skipped)


class _Counts:
    def __init__(self) -> None:
        self.records: defaultdict[Any, int] = defaultdict(int)
        self.bytes: defaultdict[Any, int] = defaultdict(int)

    def add(self, keys: list[Any], ids: I64, sizes: I64) -> None:
        """Add each record's size to its key, ``keys[ids[i]]``: one bincount per batch."""
        n = np.bincount(ids, minlength=len(keys))
        b = np.bincount(ids, weights=sizes, minlength=len(keys))
        for k, key in enumerate(keys):
            if n[k]:
                self.records[key] += int(n[k])
                self.bytes[key] += int(b[k])

    def tallies(self) -> dict[Any, Tally]:
        return {k: Tally(self.records[k], self.bytes[k]) for k in self.records}


def store_stats(store: Store, progress: Progress | None = None) -> StoreStats:
    """Every readable record of the commitlog counted, batch by batch with numpy."""
    topics, queues, tags, txs, bodies, hours = (_Counts() for _ in range(6))
    skipped: list[SkippedRange] = []
    bounds = np.array(BODY_SIZE_BOUNDS, np.int64)
    for ev in stream_messages(store, MessageFilter(), progress):
        if isinstance(ev, SkippedRange):
            skipped.append(ev)
            continue
        assert isinstance(ev, MessageBatch)  # the walk yields batches and skipped ranges
        cols, rows = ev.columns, ev.rows
        sizes = cols.store_size[rows]
        tids, raw = cols.topic_ids()
        names = [decode_text(t) for t in raw]
        topics.add(list(names), tids[rows], sizes)
        qid = cols.queue_id[rows]
        pairs, pair_ids = np.unique(np.stack([tids[rows], qid]), axis=1, return_inverse=True)
        queues.add(
            [(names[int(t)], int(q)) for t, q in pairs.T.tolist()], pair_ids.reshape(-1), sizes
        )
        at, length = cols.property_spans(props.TAGS, rows)
        present = at >= 0
        ids, distinct = span_ids(cols.buf, at[present], length[present])
        tag_ids = np.full(len(rows), len(distinct), np.int64)  # the last key: no tag
        tag_ids[present] = ids
        tags.add([*(decode_text(d) for d in distinct), None], tag_ids, sizes)
        tt = (cols.sys_flag[rows] & cl.TRANSACTION_TYPE_MASK) >> 2
        txs.add([cl.transaction_name(k << 2) for k in range(4)], tt, sizes)
        bucket = np.searchsorted(bounds, np.maximum(cols.body_length[rows], 0), side="left")
        bodies.add([*BODY_SIZE_BOUNDS, None], bucket, sizes)
        hour = cols.store_timestamp[rows] // HOUR_MS
        distinct_hours, hour_ids = np.unique(hour, return_inverse=True)
        hours.add([int(h) * HOUR_MS for h in distinct_hours], hour_ids.reshape(-1), sizes)
    total = topics.tallies()
    return StoreStats(
        records=sum(t.records for t in total.values()),
        bytes=sum(t.bytes for t in total.values()),
        by_topic=total,
        by_queue=queues.tallies(),
        by_tag=tags.tallies(),
        by_transaction=txs.tallies(),
        body_sizes=bodies.tallies(),
        per_hour=hours.tallies(),
        skipped=skipped,
    )
