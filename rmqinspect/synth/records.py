"""Records in stored form: messages resolved by the writer (:class:`Row`) turned into columns,
topic encodings, and the record bytes of a batch (§2.2), built with numpy a host layout at a
time."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from rmqinspect.format.commitlog import (
    BORNHOST_V6_FLAG,
    IPV4_HOST_SIZE,
    IPV6_HOST_SIZE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOSTADDRESS_V6_FLAG,
    body_crc,
    calc_msg_length,
)
from rmqinspect.format.encode import fill_prop_crc, record_head_dtype
from rmqinspect.format.host import HostAddress
from rmqinspect.synth.layout import MessageColumns

_I16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    version: int
    magic: int
    fixed_length: int  # record length with IPv4 hosts and empty body and properties
    tail: bytes  # TOPICLENGTH (i8 or i16) + topic bytes


UNUSED_TOPIC = TopicInfo(1, MESSAGE_MAGIC_CODE, 0, b"")


def topic_info(topic: str, v2_enabled: bool) -> TopicInfo:
    """How records of ``topic`` are encoded: V2 (i16 topic length) for a topic over 127 Java
    characters where the profile and ``autoMessageVersionOnTopicLen`` allow it."""
    encoded = topic.encode("utf-8")
    java_length = len(topic.encode("utf-16-le", "surrogatepass")) // 2
    if v2_enabled and java_length > 127:
        if len(encoded) > 32767:
            raise ValueError("topic longer than 32767 bytes")
        tail = _I16.pack(len(encoded)) + encoded
        return TopicInfo(2, MESSAGE_MAGIC_CODE_V2, calc_msg_length(0, 0, len(encoded), 0, 2), tail)
    if len(encoded) > 127:
        raise ValueError(f"topic of {len(encoded)} bytes needs a V2 record (5.x)")
    tail = bytes([len(encoded)]) + encoded
    return TopicInfo(1, MESSAGE_MAGIC_CODE, calc_msg_length(0, 0, len(encoded), 0, 1), tail)


class Row(NamedTuple):
    """One message resolved into its stored form (see :meth:`StoreWriter._resolve`)."""

    topic: str
    queue_id: int
    properties: bytes
    tags: str | None
    delay: str | None
    keys: list[str]
    body: bytes
    born_host: HostAddress
    store_host: HostAddress
    born_timestamp: int
    store_timestamp: int
    sys_flag: int
    flag: int
    reconsume_times: int
    prepared_offset: int
    dispatch: bool


def columns(rows: Sequence[Row]) -> MessageColumns:
    """Rows to columns; topics and hosts become tables, each row keeps its own body."""
    topics: dict[str, int] = {}
    hosts: dict[HostAddress, int] = {}
    key_owner: list[int] = []
    keys: list[str] = []
    for n, row in enumerate(rows):
        topics.setdefault(row.topic, len(topics))
        hosts.setdefault(row.born_host, len(hosts))
        hosts.setdefault(row.store_host, len(hosts))
        keys += row.keys
        key_owner += [n] * len(row.keys)

    def ints(values: Iterable[int]) -> npt.NDArray[np.int64]:
        return np.fromiter(values, dtype=np.int64, count=len(rows))

    return MessageColumns(
        topics=list(topics),
        topic=ints(topics[r.topic] for r in rows),
        queue_id=ints(r.queue_id for r in rows),
        properties=[r.properties for r in rows],
        tags=[r.tags for r in rows],
        delay=[r.delay for r in rows],
        keys=keys,
        key_owner=np.array(key_owner, dtype=np.int64),
        bodies=[r.body for r in rows],
        body=np.arange(len(rows), dtype=np.int64),
        hosts=list(hosts),
        born_host=ints(hosts[r.born_host] for r in rows),
        store_host=ints(hosts[r.store_host] for r in rows),
        born_timestamp=ints(r.born_timestamp for r in rows),
        store_timestamp=ints(r.store_timestamp for r in rows),
        sys_flag=ints(r.sys_flag for r in rows),
        flag=ints(r.flag for r in rows),
        reconsume_times=ints(r.reconsume_times for r in rows),
        prepared_offset=ints(r.prepared_offset for r in rows),
        dispatch=np.fromiter((r.dispatch for r in rows), dtype=bool, count=len(rows)),
    )


def heads(
    c: MessageColumns,
    infos: Sequence[TopicInfo],
    length: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
    queue_offset: npt.NDArray[np.int64],
    sys_flag: npt.NDArray[np.int64],
    born6: npt.NDArray[np.bool_],
    store6: npt.NDArray[np.bool_],
    body_length: npt.NDArray[np.int64],
) -> list[bytes]:
    """Each record's fixed part, TOTALSIZE to BODYLENGTH (§2.2), built a host layout at a time."""
    heads = [b""] * len(length)
    topic = np.asarray(c.topic, dtype=np.int64)
    magic = np.array([info.magic for info in infos], dtype=np.int64)[topic]
    crcs = np.fromiter(map(body_crc, c.bodies), dtype=np.int64, count=len(c.bodies))[c.body]
    encoded = [h.encode() for h in c.hosts]
    host_fields = {
        size: np.frombuffer(
            b"".join(e if len(e) == size else bytes(size) for e in encoded), dtype=f"V{size}"
        )
        for size in (IPV4_HOST_SIZE, IPV6_HOST_SIZE)
    }
    for b6, s6 in ((False, False), (False, True), (True, False), (True, True)):
        rows = np.flatnonzero((born6 == b6) & (store6 == s6))
        if not rows.size:
            continue
        dtype = record_head_dtype(BORNHOST_V6_FLAG * b6 | STOREHOSTADDRESS_V6_FLAG * s6)
        arr = np.empty(rows.size, dtype=dtype)
        arr["store_size"] = length[rows]
        arr["magic"] = magic[rows]
        arr["body_crc"] = crcs[rows]
        arr["queue_id"] = np.asarray(c.queue_id)[rows]
        arr["flag"] = np.asarray(c.flag)[rows]
        arr["queue_offset"] = queue_offset[rows]
        arr["physical_offset_field"] = offsets[rows]
        arr["sys_flag"] = sys_flag[rows]
        arr["born_timestamp"] = np.asarray(c.born_timestamp)[rows]
        arr["born_host"] = host_fields[dtype["born_host"].itemsize][np.asarray(c.born_host)[rows]]
        arr["store_timestamp"] = np.asarray(c.store_timestamp)[rows]
        arr["store_host"] = host_fields[dtype["store_host"].itemsize][
            np.asarray(c.store_host)[rows]
        ]
        arr["reconsume_times"] = np.asarray(c.reconsume_times)[rows]
        arr["prepared_transaction_offset"] = np.asarray(c.prepared_offset)[rows]
        arr["body_length"] = body_length[rows]
        blob = arr.tobytes()
        size = dtype.itemsize
        for r, k in enumerate(rows.tolist()):
            heads[k] = blob[r * size : (r + 1) * size]
    return heads


@dataclass(frozen=True, slots=True)
class RecordParts:
    """A batch's records as the parts the append callback writes one after another."""

    heads: list[bytes]  # TOTALSIZE to BODYLENGTH
    bodies: Sequence[bytes]
    body_of: list[int]
    tails: list[bytes]  # topic length and topic, per topic
    topic_of: list[int]
    props_lengths: bytes  # PROPERTIESLENGTH of every record, as i16
    properties: Sequence[bytes]
    lengths: list[int]
    prop_crc: bool  # fill the reserved ``__CRC32#`` tails

    def join(self, first: int, end: int) -> bytes:
        """The bytes of records ``first .. end - 1``, one after another."""
        heads, bodies, body_of, tails = self.heads, self.bodies, self.body_of, self.tails
        topic_of, props_lengths, properties = self.topic_of, self.props_lengths, self.properties
        parts: list[bytes] = []
        extend = parts.extend
        for k in range(first, end):
            extend(
                (
                    heads[k],
                    bodies[body_of[k]],
                    tails[topic_of[k]],
                    props_lengths[2 * k : 2 * k + 2],
                    properties[k],
                )
            )
        data = b"".join(parts)
        if not self.prop_crc:
            return data
        buf = bytearray(data)
        pos = 0
        for length in self.lengths[first:end]:
            fill_prop_crc(buf, pos, length)
            pos += length
        return bytes(buf)
