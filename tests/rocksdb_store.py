"""Test stores with a RocksDB consume queue (``storeType=defaultRocksDB``), written through the
binding rmqinspect reads with and keyed exactly as ``RocksDBConsumeQueueStore`` keys them
(docs/rocksdb-consume-queue.md): a store of file queues is written by ``StoreWriter``, then its
units move into a database in ``consumequeue/`` and the topic directories go."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import Options, Rdict

from rmqinspect.analysis.queues import iter_unit_chunks
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
class Placed:
    """What the writer put in the database, per queue, to assert against."""

    units: dict[QueueId, dict[int, Unit]] = field(default_factory=dict)
    max_entry: dict[QueueId, tuple[int, int]] = field(default_factory=dict)
    min_entry: dict[QueueId, tuple[int, int]] = field(default_factory=dict)
    checkpoint: int = 0


def file_units(store: Path) -> dict[QueueId, dict[int, Unit]]:
    """Every unit of the store's file queues, with its record's store timestamp."""
    out: dict[QueueId, dict[int, Unit]] = {}
    with Store.open(store) as st:
        for qid in st.queue_dirs:
            units: dict[int, Unit] = {}
            for c in iter_unit_chunks(st, qid.topic, qid.queue_id, 0, None):
                for qoff, u in zip(c.queue_offsets.tolist(), c.units, strict=True):
                    phy, size, tags = int(u["phy_offset"]), int(u["size"]), int(u["tags_code"])
                    if size <= 0:
                        continue  # the zeros past a file's units
                    ts = st.read_message(phy, with_body=False).store_timestamp
                    units[qoff] = (phy, size, tags, ts)
            out[qid] = units
    return out


def to_rocksdb(
    store: Path,
    *,
    directory: str = "consumequeue",
    min_entries: bool = True,
    edit: Callable[[Rdict, Rdict], None] | None = None,
) -> Placed:
    """Move the store's consume queues into a RocksDB database at ``store/directory``, as the
    broker's dispatch leaves it: units, each queue's ``max`` entry, the dispatch checkpoint and
    (``min_entries``) the ``min`` entries ``getMinCqOffset`` writes. ``edit(units, offsets)``
    adds hostile entries."""
    placed = Placed(units=file_units(store))
    shutil.rmtree(store / "consumequeue")
    path = store / directory
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
