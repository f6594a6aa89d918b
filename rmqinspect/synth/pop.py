"""POP checkpoints and acks for ``synth --fate --pop`` (5.x profiles): what the broker stores
for ``groupPop``'s pops, written into the fate run's clock (:mod:`rmqinspect.synth.fate`).

- ``PopMessageProcessor.appendCheckPoint`` / ``buildCkMsg``: each pop (one message per pop
  here: ``n`` 1, ``d`` [0]) stores a ``ck`` message for ``rmq_sys_REVIVE_LOG_DefaultCluster``,
  revive queues taken in turn (``ckMessageNumber % reviveQueueNum``), due at revive time - 1 s
  (``ackTimeInterval``), UNIQ_KEY ``genCkUniqueId``.
- ``AckMessageProcessor.appendAck``: an acked message stores an ``ack`` in its checkpoint's
  revive queue, due at the revive time; acks of odd source queues are written as ``bAck``
  (``BatchAckMsg``, the batch-ack path) so both forms are covered.
- ``HookUtils.handleScheduleMessage``: both pass through the timer: stored first in
  ``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS`` (the due time on the precision's tick,
  one tick earlier when exactly on it), ``REAL_TOPIC``, ``REAL_QID``; when due
  ``TimerMessageStore.convertMessage`` stores them in the revive queue (``REAL_*`` dropped,
  ``TIMER_ENQUEUE_MS``/``TIMER_DEQUEUE_MS`` added). A crash stops deliveries: what was still
  in the timer stays there only.
- ``PopReviveService``: a checkpoint is done with at its revive time (an unacked message is
  revived there by the fate run), an ack when read; ``CID_RMQ_SYS_REVIVE_GROUP``'s offset per
  revive queue is the first record not done when the consumer offsets were persisted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rmqinspect.format import pop
from rmqinspect.format import properties as props
from rmqinspect.format.timer import (
    TIMER_DELIVER_MS,
    TIMER_DEQUEUE_MS,
    TIMER_ENQUEUE_MS,
    TIMER_OUT_MS,
    TIMER_TOPIC,
)

CLUSTER = "DefaultCluster"  # BrokerConfig.brokerClusterName
BROKER_NAME = "broker-a"
REVIVE_TOPIC = pop.revive_topic(CLUSTER)
TIMER_PRECISION_MS = 1000  # MessageStoreConfig.timerPrecisionMs


@dataclass(frozen=True, slots=True)
class PopTruth:
    """One pop as written: the message, its checkpoint and what became of it (for tests)."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    uniq_key: str | None
    pop_time: int
    revive_time: int
    revive_queue_id: int
    acked: bool  # an ack record was stored (in the timer at least)
    ck_timer_position: int
    ck_revive_position: int | None  # None: the crash came before the timer delivered it


@dataclass(slots=True)
class _Pop:
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    uniq_key: str | None
    ck: pop.CheckPoint
    revive_queue_id: int
    acked: bool
    ck_timer_position: int = -1
    ck_revive_position: int | None = None


# put(topic, queue_id, properties, body, at) -> (physical offset, queue offset, store time)
Placed = tuple[int, int, int]
Put = Callable[[str, int, dict[str, str], bytes, int], Placed]
Schedule = Callable[[int, Callable[[int], None]], None]


def timer_out_ms(deliver_ms: int) -> int:
    """``handleScheduleMessage``: the due time on the timer's tick."""
    if deliver_ms % TIMER_PRECISION_MS == 0:
        return deliver_ms - TIMER_PRECISION_MS
    return deliver_ms // TIMER_PRECISION_MS * TIMER_PRECISION_MS


class PopBroker:
    """The broker's POP bookkeeping over the fate run's clock and writer."""

    def __init__(self, put: Put, schedule: Schedule, invisible_ms: int) -> None:
        self.put = put
        self.schedule = schedule
        self.invisible_ms = invisible_ms
        self.ck_number = 0
        self.pops: list[_Pop] = []
        # revive queue -> [(queue offset, time the revive service is done with it)]
        self.done: dict[int, list[tuple[int, int]]] = {}

    def popped(
        self,
        group: str,
        topic: str,
        queue_id: int,
        queue_offset: int,
        uniq_key: str | None,
        at: int,
        acked_at: int | None,
    ) -> None:
        """``groupPop`` popped one message at ``at``; ``acked_at``: when it acked it."""
        revive_qid = self.ck_number % pop.REVIVE_QUEUE_NUM
        self.ck_number += 1
        ck = pop.CheckPoint(
            start_offset=queue_offset,
            pop_time=at,
            invisible_time=self.invisible_ms,
            bit_map=0,
            num=1,
            queue_id=queue_id,
            topic=topic,
            group=group,
            revive_offset=0,
            queue_offset_diff=(0,),
            broker_name=BROKER_NAME,
            re_put_times=None,
        )
        entry = _Pop(
            group, topic, queue_id, queue_offset, uniq_key, ck, revive_qid, acked_at is not None
        )
        self.pops.append(entry)
        p = {props.TAGS: pop.CK_TAG, props.UNIQ_KEY: pop.ck_unique_id(ck)}
        deliver = ck.revive_time - pop.ACK_TIME_INTERVAL_MS
        entry.ck_timer_position = self._through_timer(
            revive_qid, p, pop.encode_checkpoint(ck), at, deliver,
            lambda placed: self._ck_done(entry, placed),
        )  # fmt: skip
        if acked_at is not None:
            self.schedule(acked_at, lambda now: self._ack(ck, revive_qid, now))

    def _ack(self, ck: pop.CheckPoint, revive_qid: int, now: int) -> None:
        batch = ck.queue_id % 2 == 1
        ack = pop.Ack(
            (ck.start_offset,), ck.start_offset, ck.group, ck.topic, ck.queue_id, ck.pop_time,
            ck.broker_name, batch,
        )  # fmt: skip
        p = {
            props.TAGS: pop.BATCH_ACK_TAG if batch else pop.ACK_TAG,
            props.UNIQ_KEY: pop.ack_unique_id(ack),
        }
        self._through_timer(
            revive_qid, p, pop.encode_ack(ack), now, ck.revive_time,
            lambda placed: self.done.setdefault(revive_qid, []).append(placed[1:]),
        )  # fmt: skip

    def _through_timer(
        self,
        revive_qid: int,
        properties: dict[str, str],
        body: bytes,
        at: int,
        deliver_ms: int,
        delivered: Callable[[Placed], None],
    ) -> int:
        """Store into the timer topic now, into the revive queue when due; returns the timer
        record's physical offset; ``delivered`` gets the revive record's placement."""
        p = dict(properties)
        p[TIMER_DELIVER_MS] = str(deliver_ms)
        out = timer_out_ms(deliver_ms)
        p[TIMER_OUT_MS] = str(out)
        p[props.REAL_TOPIC] = REVIVE_TOPIC
        p[props.REAL_QID] = str(revive_qid)
        position, _, enqueued = self.put(TIMER_TOPIC, 0, p, body, at)

        def deliver(now: int) -> None:
            q = {k: v for k, v in p.items() if k not in (props.REAL_TOPIC, props.REAL_QID)}
            q[TIMER_ENQUEUE_MS] = str(enqueued)
            q[TIMER_DEQUEUE_MS] = str(now)
            delivered(self.put(REVIVE_TOPIC, revive_qid, q, body, now))

        self.schedule(out, deliver)
        return position

    def _ck_done(self, entry: _Pop, placed: Placed) -> None:
        position, queue_offset, stored = placed
        entry.ck_revive_position = position
        # Done with at its revive time: acked, or revived then by the fate run.
        self.done.setdefault(entry.revive_queue_id, []).append(
            (queue_offset, max(stored, entry.ck.revive_time))
        )

    def revive_offsets(self, at: int) -> dict[int, int]:
        """``CID_RMQ_SYS_REVIVE_GROUP``'s offsets as persisted at ``at``: per revive queue, the
        first record the revive service was not done with (it goes in queue order)."""
        out: dict[int, int] = {}
        for qid, records in sorted(self.done.items()):
            offset = 0
            for queue_offset, done in sorted(records):
                if queue_offset != offset or done > at:
                    break
                offset += 1
            out[qid] = offset
        return out

    def truths(self) -> tuple[PopTruth, ...]:
        return tuple(
            PopTruth(
                e.group, e.topic, e.queue_id, e.queue_offset, e.uniq_key, e.ck.pop_time,
                e.ck.revive_time, e.revive_queue_id, e.acked, e.ck_timer_position,
                e.ck_revive_position,
            )
            for e in self.pops
        )  # fmt: skip
