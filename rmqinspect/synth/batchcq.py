"""BatchConsumeQueue topics in a synthetic store (docs/batch-consume-queue.md): the inner-batch
records a 5.x broker appends for a topic whose ``queue.type`` is ``BatchCQ`` and the 46-byte
units its reput writes for them.

A producer's batch sent to such a topic is stored as one record (``SendMessageProcessor``:
sysFlag ``NEED_UNWRAP | INNER_BATCH``, ``INNER_NUM`` = the messages in its body); the queue
offset it gets is the first of ``INNER_NUM`` (``assignBatchQueueOffset``), written into the
record and its ``INNER_BASE`` property (``BatchConsumeQueue.assignQueueOffset``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rmqinspect.format import properties as props
from rmqinspect.format.batchcq import BCQ_STORE_UNIT_SIZE, encode_bcq_unit
from rmqinspect.format.commitlog import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG
from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE
from rmqinspect.format.names import offset_file_name
from rmqinspect.store.layout import QueueId, plain_name
from rmqinspect.synth.files import create_file, write_at

if TYPE_CHECKING:
    from rmqinspect.synth.writer import StoreWriter as StoreWriterLike

INNER_BATCH_SYS_FLAG = NEED_UNWRAP_FLAG | INNER_BATCH_FLAG
BATCH_CQ_ATTRIBUTES = {"queue.type": "BatchCQ"}  # TopicAttributes.QUEUE_TYPE_ATTRIBUTE
_HEAD = struct.Struct(">iiiii")  # storeSize, magic, bodyCRC, flag, body length


def inner_batch_body(bodies: Sequence[bytes], flag: int = 0) -> bytes:
    """The body of a batch record as ``MessageDecoder.encodeMessages`` lays it out (what
    ``countInnerMsgNum`` counts): per message its size, magic 0, body CRC 0, flag, body
    length, body, and empty properties."""
    out = bytearray()
    for body in bodies:
        size = _HEAD.size + len(body) + 2
        out += _HEAD.pack(size, 0, 0, flag, len(body)) + body + b"\0\0"
    return bytes(out)


def inner_num(properties: bytes) -> int:
    """The queue offsets a record of a BatchCQ topic takes: its ``INNER_NUM`` when it is a
    positive number, else 1 (``assignBatchQueueOffset`` of a single message)."""
    text = props.parse_properties(properties.decode("utf-8", "replace")).get(props.INNER_NUM)
    return int(text) if text is not None and text.isdigit() and int(text) > 0 else 1


def bcq_file_size(cq_file_size: int) -> int:
    """The BCQ file size that holds as many units as a consume-queue file of
    ``cq_file_size`` (the defaults agree: 300,000 units each)."""
    return max(cq_file_size // CQ_STORE_UNIT_SIZE, 1) * BCQ_STORE_UNIT_SIZE


class BatchQueueFiles:
    """One ``batchconsumequeue/<topic>/<queueId>``: units appended in dispatch order, from
    file 0 (no pre-blank fill: the first file is created at the queue's max offset, 0)."""

    def __init__(self, root: Path, queue: QueueId, file_size: int) -> None:
        self.directory = root / "batchconsumequeue" / plain_name(queue.topic, "topic")
        self.directory /= str(queue.queue_id)
        self.file_size = file_size
        self.file_start = 0
        self.position = 0
        self.units = 0

    def append(self, phy: int, size: int, tags: int, store_ts: int, base: int, batch: int) -> None:
        if self.units == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            os.close(create_file(self._path(), self.file_size))
        elif self.position + BCQ_STORE_UNIT_SIZE > self.file_size:
            self.file_start += self.file_size
            self.position = 0
            os.close(create_file(self._path(), self.file_size))
        write_at(
            self._path(),
            self.position,
            encode_bcq_unit(phy, size, tags, store_ts, base, batch),
        )
        self.position += BCQ_STORE_UNIT_SIZE
        self.units += 1

    def _path(self) -> Path:
        return self.directory / offset_file_name(self.file_start)


BATCH_TOPIC = "BatchTopic"  # the workload's BatchCQ topic (synth --batch-queue)


def write_batches(
    writer: StoreWriterLike, records: int, queues: int, body_size: int, end_ms: int
) -> None:
    """``records`` producer batches of 1-4 messages to :data:`BATCH_TOPIC` (queue ``i %
    queues``, keys ``BATCH-<i>``, tag ``Batch``), each stored as one inner-batch record, a
    millisecond apart up to ``end_ms`` (where the rest of the workload's clock starts)."""
    writer.declare_batch_topic(BATCH_TOPIC, queues)
    for i in range(records):
        count = 1 + i % 4
        bodies = [(b"batch %d message %d " % (i, k)).ljust(body_size, b".") for k in range(count)]
        writer.put_inner_batch(
            BATCH_TOPIC,
            i % queues,
            bodies,
            tags="Batch",
            keys=f"BATCH-{i}",
            store_timestamp=end_ms - records + i,
        )
