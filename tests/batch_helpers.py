"""BatchConsumeQueue stores for the tests: a 5.3 store whose topic ``Batched`` (queue.type
BatchCQ, 2 queues) holds inner-batch records written as the broker writes them, beside a plain
topic, and what the writer placed (to compare every command's answer with)."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, replace
from pathlib import Path

from rmqinspect.format.batchcq import BCQ_STORE_UNIT_SIZE
from rmqinspect.format.profile import Profile
from rmqinspect.synth.writer import MessageSpec, PutResult, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT

T0 = 1_700_000_000_000
LAYOUT = replace(SMALL_LAYOUT, profile=Profile.V5_3, cq_file_size=10 * 20)  # 10 units a file
TOPIC = "Batched"
RECORDS = 30  # batches, alternating between the two queues


@dataclass(frozen=True, slots=True)
class Batch:
    """One inner-batch record as the writer placed it."""

    put: PutResult
    count: int  # INNER_NUM
    keys: str
    store_timestamp: int

    @property
    def base(self) -> int:
        return self.put.queue_offset


def batch_size(i: int) -> int:
    return 1 + i % 4  # 1, 2, 3, 4, ...


def batch_store(root: Path, *, consumer_offsets: dict[int, int] | None = None) -> list[Batch]:
    """30 batches of 1-4 messages (batch ``i`` in queue ``i % 2``, stored at ``T0 + i`` s,
    keys ``K<i>``), then one record of the plain topic ``Plain``. Queue 0 takes 15 batches
    of 1 and 3 messages (29 offsets) over two BCQ files of 10 units; queue 1 15 of 2 and 4
    (44 offsets). ``consumer_offsets``: group ``G``'s committed offsets of the topic."""
    placed = []
    with StoreWriter(root, LAYOUT) as w:
        w.declare_batch_topic(TOPIC, 2)
        for i in range(RECORDS):
            n = batch_size(i)
            ts = T0 + i * 1000
            put = w.put_inner_batch(
                TOPIC,
                i % 2,
                [f"m{i}-{k}".encode() for k in range(n)],
                tags="TagA",
                keys=f"K{i}",
                store_timestamp=ts,
            )
            placed.append(Batch(put, n, f"K{i}", ts))
        w.put(MessageSpec("Plain", b"plain", store_timestamp=T0 + RECORDS * 1000))
        if consumer_offsets is not None:
            w.set_consumer_offsets({f"{TOPIC}@G": consumer_offsets})
    return placed


def queue_file(root: Path, queue_id: int, index: int = 0) -> Path:
    """The ``index``-th BCQ file of ``Batched/<queue_id>`` (10 units, 460 bytes each)."""
    start = index * 10 * BCQ_STORE_UNIT_SIZE
    return root / "batchconsumequeue" / TOPIC / str(queue_id) / f"{start:020d}"


def patch_unit(root: Path, queue_id: int, unit: int, field_at: int, data: bytes) -> None:
    """Overwrite bytes of the ``unit``-th unit of a queue (10 units a file)."""
    path = queue_file(root, queue_id, unit // 10)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, (unit % 10) * BCQ_STORE_UNIT_SIZE + field_at)
    finally:
        os.close(fd)


BASE_AT = 28  # BatchConsumeQueue.MSG_BASE_OFFSET_INDEX
BATCH_AT = 36  # MSG_BATCH_SIZE_INDEX


def set_base(root: Path, queue_id: int, unit: int, base: int) -> None:
    patch_unit(root, queue_id, unit, BASE_AT, struct.pack(">q", base))


def set_batch_size(root: Path, queue_id: int, unit: int, size: int) -> None:
    patch_unit(root, queue_id, unit, BATCH_AT, struct.pack(">h", size))
