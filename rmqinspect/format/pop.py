"""5.x POP consumption records (no I/O): checkpoints and acks the broker stores as messages in its
revive topic, decoded from their JSON bodies.

The rules, from RocketMQ 5.3.3 (``broker/.../processor``, ``store/.../pop``):

- ``PopMessageProcessor.appendCheckPoint`` / ``buildCkMsg``: each pop of a queue stores one
  ``PopCheckPoint`` as a message with tag ``ck`` in ``rmq_sys_REVIVE_LOG_<cluster>``
  (``PopAckConstants.buildClusterReviveTopic``), queue ``reviveQid`` (0..``reviveQueueNum`` - 1,
  8 by default), delivered at ``popTime + invisibleTime - ackTimeInterval`` (1 s): it enters
  the timer (``TIMER_DELIVER_MS``; the store holds it in ``rmq_sys_wheel_timer`` with
  ``REAL_TOPIC``/``REAL_QID``) and reaches the revive topic when due. Its UNIQ_KEY is
  ``genCkUniqueId``: topic, queue, start offset, group, pop time, broker name, ``ck``, joined by
  ``@``.
- ``PopCheckPoint``'s JSON (fastjson, ``@JSONField``): ``so`` startOffset, ``pt`` popTime,
  ``it`` invisibleTime, ``bm`` bitMap (bit i: message i acked), ``n`` num (a byte), ``q``
  queueId, ``t`` topic, ``c`` cid (the group), ``ro`` reviveOffset, ``d`` queueOffsetDiff
  (message i is at ``so + d[i]``; absent in old checkpoints: ``so + i``,
  ``PopCheckPoint.ackOffsetByIndex``), ``bn`` brokerName, ``rp`` rePutTimes (a string), and
  ``reviveTime``, a getter fastjson writes too (nothing reads it back). Builds before the
  annotations serialised the getters' long names (``startOffset``...): both are read.
- ``AckMessageProcessor.appendAck`` / ``PopBufferMergeService.putAckToStore``: an ack is a
  message with tag ``ack`` (``AckMsg``: ``ao`` ackOffset, ``so``, ``c`` consumerGroup, ``t``,
  ``q``, ``pt``, ``bn``; ``alternateNames`` the long ones) or ``bAck`` (``BatchAckMsg``: ``aol``
  ackOffsetList) in the same revive queue as its checkpoint, through the timer too.
- ``PopBufferMergeService.cancelCkTimer``: a ``ck``-tagged message whose body is
  ``<reviveQid>-<reviveOffset>`` (no JSON) cancels a stored checkpoint's timer.
- ``PopReviveService.consumeReviveMessage``: checkpoints and acks meet by the merge key topic,
  group, queue, start offset, pop time, broker name (``PopCheckPointWrapper.mergeKey``); an ack
  sets the bit ``indexOfAck(ao)``. Progress through each revive queue is the group
  ``CID_RMQ_SYS_REVIVE_GROUP`` (``PopAckConstants.REVIVE_GROUP``) in ``consumerOffset.json``.
  ``reviveRetry`` stores an unacked message again in the POP retry topic with ``1ST_POP_TIME``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rmqinspect.errors import DecodeError
from rmqinspect.format import fastjson

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"  # PopAckConstants.REVIVE_TOPIC
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # PopAckConstants.REVIVE_GROUP
CK_TAG = "ck"  # PopAckConstants.CK_TAG
ACK_TAG = "ack"  # PopAckConstants.ACK_TAG
BATCH_ACK_TAG = "bAck"  # PopAckConstants.BATCH_ACK_TAG
SPLIT = "@"  # PopAckConstants.SPLIT
ACK_TIME_INTERVAL_MS = 1000  # PopAckConstants.ackTimeInterval
REVIVE_QUEUE_NUM = 8  # BrokerConfig.reviveQueueNum
FIRST_POP_TIME = "1ST_POP_TIME"  # MessageConst.PROPERTY_FIRST_POP_TIME
BITMAP_BITS = 32  # bitMap is a Java int

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_CANCEL = re.compile(rb"\s*-?\d+-\d+\s*")
_MAX_OFFSETS = 1 << 16  # a list longer than any batch the broker writes is hostile, not read


def revive_topic(cluster: str) -> str:
    """``PopAckConstants.buildClusterReviveTopic``."""
    return REVIVE_TOPIC_PREFIX + cluster


def is_revive_topic(topic: str | None) -> bool:
    return topic is not None and topic.startswith(REVIVE_TOPIC_PREFIX)


@dataclass(frozen=True, slots=True)
class CheckPoint:
    start_offset: int
    pop_time: int
    invisible_time: int
    bit_map: int  # as stored: a signed Java int
    num: int
    queue_id: int
    topic: str
    group: str
    revive_offset: int
    queue_offset_diff: tuple[int, ...] | None
    broker_name: str | None
    re_put_times: str | None

    @property
    def revive_time(self) -> int:
        """``PopCheckPoint.getReviveTime``: when its unacked messages are due for revive."""
        return self.pop_time + self.invisible_time

    @property
    def merge_key(self) -> str:
        """``PopCheckPointWrapper.mergeKey`` (Java string concatenation: a null is ``null``)."""
        return merge_key(
            self.topic, self.group, self.queue_id, self.start_offset, self.pop_time,
            self.broker_name,
        )  # fmt: skip

    def offset_at(self, index: int) -> int:
        return offset_at(self.start_offset, self.queue_offset_diff, index)

    def index_of(self, ack_offset: int) -> int:
        return index_of(self.start_offset, self.num, self.queue_offset_diff, ack_offset)

    def acked(self, index: int) -> bool:
        return bool((self.bit_map >> index) & 1)


@dataclass(frozen=True, slots=True)
class Ack:
    """An ``AckMsg`` (one offset) or ``BatchAckMsg`` (several)."""

    ack_offsets: tuple[int, ...]
    start_offset: int
    group: str
    topic: str
    queue_id: int
    pop_time: int
    broker_name: str | None
    batch: bool

    @property
    def merge_key(self) -> str:
        return merge_key(
            self.topic, self.group, self.queue_id, self.start_offset, self.pop_time,
            self.broker_name,
        )  # fmt: skip


def offset_at(start_offset: int, diff: tuple[int, ...] | None, index: int) -> int:
    """``PopCheckPoint.ackOffsetByIndex``: the queue offset of message ``index``."""
    return start_offset + (diff[index] if diff else index)


def index_of(start_offset: int, num: int, diff: tuple[int, ...] | None, ack_offset: int) -> int:
    """``PopCheckPoint.indexOfAck``: the message index an ack offset names, -1 for none."""
    if ack_offset < start_offset:
        return -1
    if not diff:
        return ack_offset - start_offset if ack_offset - start_offset < num else -1
    try:
        return diff.index(ack_offset - start_offset)
    except ValueError:
        return -1


def merge_key(
    topic: str, group: str, queue_id: int, start_offset: int, pop_time: int, broker: str | None
) -> str:
    return f"{topic}{group}{queue_id}{start_offset}{pop_time}{'null' if broker is None else broker}"


def is_cancel(body: bytes) -> bool:
    """A ``cancelCkTimer`` body: ``<reviveQid>-<reviveOffset>``."""
    return _CANCEL.fullmatch(body) is not None


def _object(body: bytes, what: str) -> dict[str, Any]:
    try:
        doc = fastjson.loads(body)
    except DecodeError as err:
        raise DecodeError(f"{what} body is no JSON: {err}", err.offset) from None
    if not isinstance(doc, dict):
        raise DecodeError(f"{what} body is JSON but no object", 0)
    return doc


def _field(doc: dict[str, Any], short: str, long: str) -> Any:
    return doc[short] if short in doc else doc.get(long)


def _number(
    doc: dict[str, Any], short: str, long: str, what: str, lo: int, hi: int, default: int | None
) -> int:
    value = _field(doc, short, long)
    if value is None:
        if default is None:
            raise DecodeError(f"{what} has no {short!r} ({long})", 0)
        return default
    # fastjson reads a number written as a string too (TypeUtils.castToLong).
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,20}", value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise DecodeError(f"{what} {short!r} ({long}) is {str(value)[:40]!r}, no Java number", 0)
    return value


def _text(doc: dict[str, Any], short: str, long: str, what: str, required: bool) -> str | None:
    value = _field(doc, short, long)
    if value is None and not required:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and not required:
        return str(value)  # rp is a String: fastjson turns a number into its text
    if not isinstance(value, str):
        raise DecodeError(f"{what} {short!r} ({long}) is {str(value)[:40]!r}, no string", 0)
    return value


def _offsets(value: Any, what: str, name: str, lo: int, hi: int) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > _MAX_OFFSETS:
        raise DecodeError(f"{what} {name!r} is no list of numbers", 0)
    for v in value:
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise DecodeError(f"{what} {name!r} holds {str(v)[:40]!r}, no Java number", 0)
    return tuple(value)


def decode_checkpoint(body: bytes) -> CheckPoint:
    """A ``ck`` body; DecodeError says what is wrong (JSON, a missing or ill-typed field)."""
    what = "checkpoint"
    doc = _object(body, what)
    diff = _field(doc, "d", "queueOffsetDiff")
    return CheckPoint(
        start_offset=_number(doc, "so", "startOffset", what, _LONG_MIN, _LONG_MAX, None),
        pop_time=_number(doc, "pt", "popTime", what, _LONG_MIN, _LONG_MAX, None),
        invisible_time=_number(doc, "it", "invisibleTime", what, _LONG_MIN, _LONG_MAX, None),
        bit_map=_number(doc, "bm", "bitMap", what, _INT_MIN, _INT_MAX, 0),
        num=_number(doc, "n", "num", what, -128, 127, None),
        queue_id=_number(doc, "q", "queueId", what, _INT_MIN, _INT_MAX, None),
        topic=_text(doc, "t", "topic", what, True) or "",
        group=_text(doc, "c", "cid", what, True) or "",
        revive_offset=_number(doc, "ro", "reviveOffset", what, _LONG_MIN, _LONG_MAX, 0),
        queue_offset_diff=None if diff is None else _offsets(diff, what, "d", _INT_MIN, _INT_MAX),
        broker_name=_text(doc, "bn", "brokerName", what, False),
        re_put_times=_text(doc, "rp", "rePutTimes", what, False),
    )


def decode_ack(body: bytes, batch: bool) -> Ack:
    """An ``ack`` (``batch`` False) or ``bAck`` body; DecodeError says what is wrong."""
    what = "batch ack" if batch else "ack"
    doc = _object(body, what)
    if batch:
        offsets = _offsets(_field(doc, "aol", "ackOffsetList"), what, "aol", _LONG_MIN, _LONG_MAX)
    else:
        offsets = (_number(doc, "ao", "ackOffset", what, _LONG_MIN, _LONG_MAX, None),)
    return Ack(
        ack_offsets=offsets,
        start_offset=_number(doc, "so", "startOffset", what, _LONG_MIN, _LONG_MAX, None),
        group=_text(doc, "c", "consumerGroup", what, True) or "",
        topic=_text(doc, "t", "topic", what, True) or "",
        queue_id=_number(doc, "q", "queueId", what, _INT_MIN, _INT_MAX, None),
        pop_time=_number(doc, "pt", "popTime", what, _LONG_MIN, _LONG_MAX, None),
        broker_name=_text(doc, "bn", "brokerName", what, False),
        batch=batch,
    )


def _json(fields: dict[str, Any]) -> bytes:
    """fastjson's ``JSON.toJSONString``: keys sorted (``SortField``), nulls left out."""
    kept = {k: v for k, v in sorted(fields.items()) if v is not None}
    # String.getBytes(UTF_8) writes an unpaired surrogate as "?".
    return json.dumps(kept, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace")


def encode_checkpoint(ck: CheckPoint) -> bytes:
    return _json(
        {
            "so": ck.start_offset,
            "pt": ck.pop_time,
            "it": ck.invisible_time,
            "bm": ck.bit_map,
            "n": ck.num,
            "q": ck.queue_id,
            "t": ck.topic,
            "c": ck.group,
            "ro": ck.revive_offset,
            "d": None if ck.queue_offset_diff is None else list(ck.queue_offset_diff),
            "bn": ck.broker_name,
            "rp": ck.re_put_times,
            # fastjson writes every getter: getReviveTime() too (read back by no setter).
            "reviveTime": ck.revive_time,
        }
    )


def encode_ack(ack: Ack) -> bytes:
    fields: dict[str, Any] = {
        "so": ack.start_offset,
        "c": ack.group,
        "t": ack.topic,
        "q": ack.queue_id,
        "pt": ack.pop_time,
        "bn": ack.broker_name,
    }
    if ack.batch:
        fields["aol"] = list(ack.ack_offsets)
    else:
        fields["ao"] = ack.ack_offsets[0]
    return _json(fields)


def ck_unique_id(ck: CheckPoint) -> str:
    """``PopMessageProcessor.genCkUniqueId``: the checkpoint message's UNIQ_KEY."""
    return SPLIT.join(
        map(
            str,
            (ck.topic, ck.queue_id, ck.start_offset, ck.group, ck.pop_time, ck.broker_name, CK_TAG),
        )
    )


def ack_unique_id(ack: Ack) -> str:
    """``PopMessageProcessor.genAckUniqueId``: the ack message's UNIQ_KEY."""
    return SPLIT.join(
        map(
            str,
            (
                ack.topic, ack.queue_id, ack.ack_offsets[0], ack.group, ack.pop_time,
                ack.broker_name, ACK_TAG,
            ),
        )
    )  # fmt: skip
