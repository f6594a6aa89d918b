"""Shared helpers of the export tests: read the written datasets, snapshot a store, hostile
topic names."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from rmqinspect.export.schema import BROKER_PARTITION, TOPIC_PARTITION, Table
from rmqinspect.format import commitlog as cl
from rmqinspect.format.profile import Profile
from rmqinspect.synth import damage
from rmqinspect.synth.writer import MessageSpec, StoreLayout, StoreWriter

# Names that would escape OUT, collide, or break a path if used as a directory verbatim.
HOSTILE_TOPICS = [
    "..",
    ".",
    "a/b",
    "../../etc",
    "%RETRY%groupX",
    "%25RETRY%25groupX",
    "x\x00y",
    "~7E",
    "~",
    "Ω",
    "T" * 300,
    "T" * 301,
    "T" * 160 + "~41",
    "T" * 160 + "A",
]


def read_table(out: Path, table: Table) -> pa.Table:
    """A table as both engines wrote it, partition column (always a string) included."""
    partitioning = None
    if table is Table.MESSAGES:
        partitioning = ds.partitioning(pa.schema([(TOPIC_PARTITION, pa.string())]), flavor="hive")
    return ds.dataset(out / table.value, format="parquet", partitioning=partitioning).to_table()


def broker_rows(out: Path, table: Table, broker: str) -> pa.Table:
    """One broker's rows of a fleet export, read as a Hive dataset (the broker column dropped)."""
    fields = [(BROKER_PARTITION, pa.string())]
    if table is Table.MESSAGES:
        fields.append((TOPIC_PARTITION, pa.string()))
    partitioning = ds.partitioning(pa.schema(fields), flavor="hive")
    data = ds.dataset(out / table.value, format="parquet", partitioning=partitioning)
    rows = data.to_table(filter=ds.field(BROKER_PARTITION) == broker)
    return rows.drop_columns([BROKER_PARTITION])


def sorted_rows(t: pa.Table) -> pa.Table:
    """Rows in a canonical order: by every column that can be sorted on."""
    keys = [
        (f.name, "ascending")
        for f in t.schema
        if not (pa.types.is_map(f.type) or pa.types.is_list(f.type))
    ]
    return t.sort_by(keys)


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file under ``root``: content hash, size and mtime."""
    out = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            st = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(root))] = (digest, st.st_size, st.st_mtime_ns)
    return out


def hostile_store(root: Path) -> Path:
    """A 5.3 store with ordinary messages, hostile topic names (as PREPARED records, which no
    consume queue receives, so the writer makes no directory from them) and one record whose
    body no longer matches its CRC."""
    layout = StoreLayout(
        profile=Profile.V5_3,
        commitlog_file_size=64 * 1024,
        cq_file_size=50 * 20,
        index_slot_num=64,
        index_num=400,
    )
    with StoreWriter(root, layout) as w:
        for i in range(40):
            w.put(MessageSpec(topic="TopicA", queue_id=i % 2, body=f"m{i}".encode(), keys=f"K{i}"))
        for i, topic in enumerate(HOSTILE_TOPICS):
            w.put(
                MessageSpec(
                    topic=topic,
                    body=f"hostile {i}".encode(),
                    sys_flag=cl.TRANSACTION_PREPARED_TYPE,
                    properties={"n": str(i)},
                )
            )
        bad = w.put(MessageSpec(topic="TopicA", body=b"will be damaged", keys="BAD"))
    damage.flip_body_byte(root, offset=bad.physical_offset)
    return root
