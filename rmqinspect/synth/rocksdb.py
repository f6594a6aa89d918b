"""A RocksDB consume queue (``storeType=defaultRocksDB``, docs/rocksdb-consume-queue.md) as a
5.x broker's dispatch leaves it, written through the binding rmqinspect reads with: the units
of a store's file queues move into a database in ``consumequeue/`` (or the separate store path
``consumequeue_rocksdb/``), keyed as ``RocksDBConsumeQueueTable`` and
``RocksDBConsumeQueueOffsetTable`` key them, and the topic directories go."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rmqinspect.errors import StoreError
from rmqinspect.format.consumequeue import (
    CQ_STORE_UNIT_SIZE,
    pre_blank_mask,
    units_array,
    valid_mask,
)
from rmqinspect.format.rocksdb_cq import (
    CHECKPOINT_TOPIC,
    OFFSET_FAMILY,
    encode_offset_key,
    encode_offset_value,
    encode_unit_key,
    encode_unit_value,
)
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store

Unit = tuple[int, int, int, int]  # phy_offset, size, tags_code, store_timestamp


@dataclass
class RocksPlaced:
    """What was written, per queue: the units by queue offset, the ``max``/``min`` entries
    ((commitlog offset, queue offset)) and the dispatch checkpoint."""

    units: dict[QueueId, dict[int, Unit]] = field(default_factory=dict)
    max_entry: dict[QueueId, tuple[int, int]] = field(default_factory=dict)
    min_entry: dict[QueueId, tuple[int, int]] = field(default_factory=dict)
    checkpoint: int = 0


def file_units(root: Path) -> dict[QueueId, dict[int, Unit]]:
    """Every valid unit of the store's file queues (pre-blank placeholders aside), with the
    store timestamp of its record (0 when the unit leads to none: a damaged store's)."""
    out: dict[QueueId, dict[int, Unit]] = {}
    with Store.open(root) as st:
        for qid in st.queue_dirs:
            units: dict[int, Unit] = {}
            for f in st.consume_queue_files(qid.topic, qid.queue_id).files:
                buf = st.view(f)
                try:
                    rows = units_array(buf).copy()
                finally:
                    buf.release()
                keep = np.flatnonzero(valid_mask(rows) & ~pre_blank_mask(rows))
                first = f.start // CQ_STORE_UNIT_SIZE
                for i in keep.tolist():
                    phy, size = int(rows["phy_offset"][i]), int(rows["size"][i])
                    try:
                        stored = st.read_message(phy, with_body=False).store_timestamp
                    except StoreError:  # a unit past the commitlog (--damage cq-ahead)
                        stored = 0
                    units[first + i] = (phy, size, int(rows["tags_code"][i]), stored)
            out[qid] = units
    return out


def move_queues_to_rocksdb(
    root: Path,
    *,
    directory: str = "consumequeue",
    min_entries: bool = True,
    edit: Callable[[Any, Any], None] | None = None,
) -> RocksPlaced:
    """Replace the store's file queues by a RocksDB database at ``root/directory`` holding
    their units, each queue's ``max`` entry, the dispatch checkpoint and (``min_entries``) the
    ``min`` entries ``getMinCqOffset`` writes. ``edit(units, offsets)`` (the two column
    families) may add entries before the database is closed."""
    from rocksdict import Options, Rdict

    placed = RocksPlaced(units=file_units(root))
    shutil.rmtree(root / "consumequeue", ignore_errors=True)
    path = root / directory
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    db = Rdict(str(path), options, column_families={OFFSET_FAMILY: Options(raw_mode=True)})
    offsets = db.get_column_family(OFFSET_FAMILY)
    for qid, units in placed.units.items():
        for qoff, u in units.items():
            db[encode_unit_key(qid.topic, qid.queue_id, qoff)] = encode_unit_value(*u)
            placed.checkpoint = max(placed.checkpoint, u[0] + u[1])
        if not units:
            continue
        last, first = max(units), min(units)
        placed.max_entry[qid] = (units[last][0], last)
        offsets[encode_offset_key(qid.topic, "max", qid.queue_id)] = encode_offset_value(
            *placed.max_entry[qid]
        )
        if min_entries:
            placed.min_entry[qid] = (units[first][0], first)
            offsets[encode_offset_key(qid.topic, "min", qid.queue_id)] = encode_offset_value(
                *placed.min_entry[qid]
            )
    offsets[encode_offset_key(CHECKPOINT_TOPIC, "max", 0)] = placed.checkpoint.to_bytes(8, "big")
    if edit is not None:
        edit(db, offsets)
    db.flush()
    del offsets
    db.close()
    # The binding's own file: a broker's database has none.
    (path / "rocksdict-config.json").unlink(missing_ok=True)
    return placed
