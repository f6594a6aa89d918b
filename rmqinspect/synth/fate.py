"""Message fates for the synthetic workload (``synth --fate``): what consumers, the schedule
service and the transaction check do to the messages after they are stored, written as the
broker writes it.

The model is the real 4.9.8 run of ``conformance-consume`` (its README, "What the real code
did"), driven by a clock: every copy is a new record stored when its cause happens, so copies
interleave with the workload in store-time order.

- Consumer groups: ``groupOK`` (every plain topic, always succeeds) and ``groupRetry``
  (``TopicA``, ``maxReconsumeTimes`` 3) whose listener fails some messages once (``r1``), twice
  (``r2``) or always (``dlq``). A failure is ``SendMessageProcessor.asyncConsumerSendMsgBack``
  (4.9) / ``AbstractSendMessageProcessor.consumerSendMsgBack`` (5.x): a copy with delay level
  ``3 + reconsumeTimes`` through ``SCHEDULE_TOPIC_XXXX`` to ``%RETRY%<group>`` queue 0
  (``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, ``WAIT=false``, reconsumeTimes + 1); once the consumed
  copy's reconsumeTimes reaches the maximum, straight to ``%DLQ%<group>`` queue 0 with
  ``DELAY=0``.
- ``ScheduleMessageService.DeliverDelayedMessageTimerTask.messageTimeup``: when a schedule unit is
  due (polled every 100 ms) a copy goes to ``REAL_TOPIC``/``REAL_QID`` with the stored
  properties string (``DELAY``, ``REAL_TOPIC``, ``REAL_QID`` kept: the string is built before
  the level is cleared from the map).
- 5.x only, ``groupPop`` consumes the second topic by POP: an unacknowledged message comes back
  after its invisible time through ``PopReviveService.reviveRetry`` as a copy in
  ``KeyBuilder.buildPopRetryTopic`` (``%RETRY%<group>_<topic>``; ``+`` instead of ``_`` with
  ``enableRetryTopicV2``, which the 5.3 profile imitates), reconsumeTimes + 1, ``1ST_POP_TIME``.
  Its listener fails messages once or twice only (no POP dead-lettering is written).
- Transactions (``EndTransactionProcessor``, ``TransactionalMessageServiceImpl.check``): a half
  is committed (real-topic COMMIT record with ``preparedTransactionOffset``, then the op record)
  or rolled back (op record only) by its producer, or left unknown: each check run
  (``transactionCheckInterval``, here 10 s, for halves older than ``transactionTimeOut`` 6 s)
  stores a copy with ``TRANSACTION_CHECK_TIMES`` + 1 until 15, then the half goes to
  ``TRANS_CHECK_MAX_TIME_TOPIC``. Op bodies: the half queue offset (4.9), comma-terminated
  offsets batched every 3 s (5.x ``TransactionalOpBatchService``).
- ``consumerOffset.json`` holds each group's progress as persisted (every 5 s, and at a clean
  shutdown), ``delayOffset.json`` each level's (every 10 s); ``.bak`` the generation before.
  One committed offset is set past its queue's end (the ``offset_ahead`` case).

A clean run keeps the broker going for :data:`CLEAN_HORIZON_MS` after the last workload message
(every retry chain ends; levels 17/18, an hour or two, stay pending). A crash comes
:data:`CRASH_AFTER_MS` after it, while retries are in flight; the records of its last
:data:`CRASH_REPUT_LAG_MS` are not dispatched.

Message traces (client/.../trace/, 4.9.8 and 5.3.3): three clients enabled tracing, the rest
did not (so the trace topic stays a small part of the store): the producer of ``TopicA``
(``Pub`` for every send, delayed ones included), the transaction producer ``PID_TX`` (``Pub`` for
each half, ``EndTransaction`` for each commit, rollback and UNKNOW answer, the check's with
``fromTransactionCheck``) and ``groupRetry`` (``SubBefore``/``SubAfter`` around each delivery of
a TopicA or retry copy, ``SubAfter`` with the listener's success). ``SendMessageTraceHookImpl``,
``EndTransactionTraceHookImpl`` and ``ConsumeMessageTraceHookImpl`` hand each record to the
client's ``AsyncTraceDispatcher``; its ``TraceDataSegment`` sends what it holds once its first
record is ``waitTimeThresholdMil`` (500 ms) old (checked every ``pollingTimeMil``, 100 ms) or it
outgrows the message size: one ``RMQ_SYS_TRACE_TOPIC`` message (queue 0: the broker creates the
topic with one queue) whose body is the records' ``TraceDataEncoder`` strings and whose KEYS are
their msgIds (UNIQ_KEYs, else offsetMsgIds) and keys. A crash loses what the clients had not
sent.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rmqinspect.format import properties as props
from rmqinspect.format.commitlog import SCHEDULE_TOPIC, TRANSACTION_COMMIT_TYPE
from rmqinspect.format.encode import encode_trace_data
from rmqinspect.format.fate import (
    CHECK_GROUP,
    CHECK_TIMES,
    DLQ_PREFIX,
    GIVEN_UP_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    REMOVE_TAG,
    RETRY_PREFIX,
    TRACE_TOPIC,
    TRANSACTION_CHECK_MAX,
    Role,
    pop_retry_topic,
)
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.format.javamap import java_map_order
from rmqinspect.format.pop import FIRST_POP_TIME, REVIVE_GROUP
from rmqinspect.format.profile import Profile
from rmqinspect.format.trace_data import TraceRecord
from rmqinspect.synth.clientid import ClientIds
from rmqinspect.synth.layout import (
    FateDelivery,
    FateRecord,
    FateSummary,
    FateTrace,
    MessageColumns,
)
from rmqinspect.synth.pop import REVIVE_TOPIC, PopBroker
from rmqinspect.synth.records import Row, columns
from rmqinspect.synth.writer import StoreWriter

GROUP_OK = "groupOK"
GROUP_RETRY = "groupRetry"
GROUP_POP = "groupPop"
MAX_RECONSUME_TIMES = 3  # groupRetry's DefaultMQPushConsumer.setMaxReconsumeTimes(3)
CLEAN_HORIZON_MS = 150_000
CRASH_AFTER_MS = 70_000
CRASH_REPUT_LAG_MS = 5_000
OFFSET_AHEAD_BY = 1000  # the committed offset set past the queue's max
_CONSUMER_PERSIST_MS = 5_000  # BrokerConfig.flushConsumerOffsetInterval
_DELAY_PERSIST_MS = 10_000  # MessageStoreConfig.flushDelayOffsetInterval
# A push consumer commits to the broker every persistConsumerOffsetInterval (5 s): what the
# broker persists is that much behind what was consumed (taken as half of it).
_CLIENT_COMMIT_LAG_MS = 2_500
_SCHEDULE_POLL_MS = 100  # DELAY_FOR_A_WHILE: the timer task's period when nothing is due
_TX_CHECK_INTERVAL_MS = 10_000
_TX_TIMEOUT_MS = 6_000  # BrokerConfig.transactionTimeOut
_OP_BATCH_MS = 3_000  # BrokerConfig.transactionOpBatchInterval (5.x)
_POP_INVISIBLE_MS = 20_000
FATE_DELAY_LEVELS = (2, 3, 5, 17, 18)  # 5 s, 10 s, 1 min: delivered; 1 h, 2 h: pending
_CONSUMER_OFFSET_TABLE_SLOTS = 1024
# groupRetry's listener by message class: how many deliveries fail before one succeeds.
_FAILS = {"r1": 1, "r2": 2, "dlq": MAX_RECONSUME_TIMES + 1}
_INF = 1 << 62
TX_PRODUCER_GROUP = "PID_TX"  # the workload's transaction producer
TRACED_PRODUCER_GROUP = "PID_TRACED"  # the traced producer of TopicA
_TRACE_WAIT_MS = 500  # AsyncTraceDispatcher.waitTimeThresholdMil
_TRACE_POLL_MS = 100  # AsyncTraceDispatcher.pollingTimeMil
_TRACE_MAX_DATA = 128_000 - 10_000  # TraceDataSegment: maxMsgSize - 10 * 1000 sends at once
# Newer clients also send once the keySet is long (currentMsgKeySize); a cap here, so KEYS
# stays well under the 32 KiB properties limit.
_TRACE_MAX_KEYS = 20_000
_TRACE_SEND_MS = 2  # the trace producer's send
_CONSUME_MS = 4  # a listener's run: SubAfter's costTime
_REGION = "DefaultRegion"  # BrokerConfig.regionId, in every SendResult
# TraceDataEncoder's msgType: MessageType ordinals (Normal_Msg, Trans_Msg_Half,
# Trans_msg_Commit, Delay_Msg); ConsumeReturnType ordinals for SubAfter's contextCode.
_NORMAL_MSG, _HALF_MSG, _COMMIT_MSG, _DELAY_MSG = 0, 1, 2, 3
_RETURN_SUCCESS, _RETURN_FAILED = 0, 4
MSG_REGION = "MSG_REGION"  # MessageConst.PROPERTY_MSG_REGION: the consumer's regionId


@dataclass(slots=True)
class _Copy:
    """A stored record a later event copies: its stored form and where it went."""

    topic: str
    queue_id: int
    properties: dict[str, str]
    body: bytes
    born_timestamp: int
    born_host: HostAddress
    store_host: HostAddress
    sys_flag: int
    flag: int
    reconsume_times: int
    physical_offset: int = 0
    queue_offset: int = 0
    store_timestamp: int = 0
    dispatched: bool = True
    role: Role = Role.ORIGINAL

    @property
    def offset_msg_id(self) -> str:
        return encode_offset_msg_id(self.store_host, self.physical_offset)

    @property
    def identity(self) -> str:
        """The message across its copies: UNIQ_KEY, else the first consumed copy's id."""
        p = self.properties
        return p.get(props.UNIQ_KEY) or p.get(props.ORIGIN_MESSAGE_ID) or self.offset_msg_id


@dataclass(slots=True)
class _Tx:
    half: _Copy
    fate: str  # committed / rolled_back / unknown
    checks: int = 0
    done: bool = False


@dataclass(slots=True)
class _TraceClient:
    """One tracing client's ``AsyncTraceDispatcher`` and its ``TraceDataSegment``."""

    ids: ClientIds  # the trace producer's (and SubBefore requestIds') MessageClientIDSetter
    host: HostAddress
    records: list[TraceRecord] = field(default_factory=list)
    keys: dict[str, None] = field(default_factory=dict)  # the segment's keySet, in order
    size: int = 0
    key_size: int = 0
    generation: int = 0  # bumped by each send: a time-threshold event of an older one is moot


@dataclass(order=True, slots=True)
class _Event:
    time: int
    seq: int
    action: Callable[[int], None] = field(compare=False)


def slice_columns(c: MessageColumns, start: int, end: int) -> MessageColumns:
    """Messages ``start:end`` of ``c`` (the tables are shared)."""
    owner = np.asarray(c.key_owner)
    lo, hi = np.searchsorted(owner, [start, end], side="left").tolist()
    return MessageColumns(
        topics=c.topics,
        topic=c.topic[start:end],
        queue_id=c.queue_id[start:end],
        properties=c.properties[start:end],
        tags=c.tags[start:end],
        delay=c.delay[start:end],
        keys=c.keys[lo:hi],
        key_owner=owner[lo:hi] - start,
        bodies=c.bodies,
        body=c.body[start:end],
        hosts=c.hosts,
        born_host=c.born_host[start:end],
        store_host=c.store_host[start:end],
        born_timestamp=c.born_timestamp[start:end],
        store_timestamp=c.store_timestamp[start:end],
        sys_flag=c.sys_flag[start:end],
        flag=c.flag[start:end],
        reconsume_times=c.reconsume_times[start:end],
        prepared_offset=c.prepared_offset[start:end],
        dispatch=c.dispatch[start:end],
    )


class FateSimulator:
    """Writes the workload's batches interleaved with the records their fates cause."""

    def __init__(
        self,
        seed: int,
        profile: Profile,
        topics: list[str],
        delay_table: dict[int, int],
        broker_host: HostAddress,
        start_ms: int,
        crash: bool,
        pop: bool = False,
    ) -> None:
        self.profile = profile
        self.trailing = profile.properties_trailing_separator
        self.delay_table = delay_table
        self.broker_host = broker_host
        self.start_ms = start_ms
        self.crash = crash
        self.rng = np.random.PCG64([seed, 21])  # its own stream: the workload's stays as it is
        self._words: list[int] = []
        self.v5 = profile is not Profile.V4_9
        # Subscriptions: group -> plain topics it consumes.
        self.subscriptions: dict[str, list[str]] = {
            GROUP_OK: list(topics),
            GROUP_RETRY: [topics[0]],
        }
        self.pop_topic = topics[1] if len(topics) > 1 else topics[0]
        if self.v5:
            self.subscriptions[GROUP_POP] = [self.pop_topic]
        self.pop_retry = pop_retry_topic(GROUP_POP, self.pop_topic, profile is Profile.V5_3)
        self.retry_topic = RETRY_PREFIX + GROUP_RETRY
        self.consumers_of: dict[str, list[str]] = {}
        for group, subscribed in self.subscriptions.items():
            for topic in subscribed:
                self.consumers_of.setdefault(topic, []).append(group)
        self.consumers_of[self.retry_topic] = [GROUP_RETRY]
        self.consumers_of[self.pop_retry] = [GROUP_POP]
        # (group, topic, queue) -> [consume time per queue offset] (_INF: not consumed)
        self.consumed: dict[tuple[str, str, int], list[int]] = {}
        self.delivered: dict[int, list[int]] = {}  # delay level -> [delivery time per offset]
        self.level_last: dict[int, int] = {}  # delay level -> its latest delivery time
        self.heap: list[_Event] = []
        self.event_seq = 0
        self.last_ts = start_ms
        self.stop_at = _INF  # set by finish(): the crash or the clean shutdown
        self.counts = dict.fromkeys(
            ("schedule", "scheduled_delivery", "retry_schedule", "retry", "dlq", "pop_retry"), 0
        )
        self.failed_chains: set[str] = set()
        self.txs: list[_Tx] = []
        self.half_checks = 0
        self.op_records = 0
        self.commit_records = 0
        self.op_batch: list[int] = []
        self.check_tick_scheduled = False
        self.examples: dict[str, str | None] = {"dlq": None}
        # Deliveries of copies with a UNIQ_KEY and KEYS, groupRetry's and any of a scheduled or
        # retry copy: (time, copy, succeeded)
        self.deliveries: list[tuple[int, _Copy, bool]] = []
        # Schedule units: (level, offset) -> (UNIQ_KEY, whether a retry's)
        self.units: dict[tuple[int, int], tuple[str | None, bool]] = {}
        self.writer: StoreWriter | None = None
        self.traced_topic = topics[0]
        prefix = f"{seed & 0xFFFF:04X}{(seed * 2654435761) & 0xFFFFFFFF:08X}"
        self.tracers = {
            name: _TraceClient(ClientIds(ip.hex().upper() + prefix), HostAddress(ip, port))
            for name, ip, port in (
                (TRACED_PRODUCER_GROUP, bytes([10, 0, 0, 5]), 50011),
                (TX_PRODUCER_GROUP, bytes([10, 0, 0, 6]), 50012),
                (GROUP_RETRY, bytes([10, 0, 0, 7]), 50021),
            )
        }
        self.trace_messages: list[FateTrace] = []
        # --pop: groupPop's checkpoints and acks (5.x)
        self.pop = PopBroker(self._pop_put, self._at, _POP_INVISIBLE_MS) if pop else None
        self.truth: list[_Copy] = []
        self.delivery_log: list[FateDelivery] = []

    # --- random words -----------------------------------------------------------------------------

    def _word(self) -> int:
        if not self._words:
            self._words = self.rng.random_raw(256).tolist()[::-1]
        return int(self._words.pop())

    # --- the event loop ---------------------------------------------------------------------------

    def _at(self, time: int, action: Callable[[int], None]) -> None:
        self.event_seq += 1
        heapq.heappush(self.heap, _Event(time, self.event_seq, action))

    def _run_before(self, limit: int) -> None:
        while self.heap and self.heap[0].time < limit and self.heap[0].time <= self.stop_at:
            event = heapq.heappop(self.heap)
            event.action(max(event.time, self.last_ts))

    def put_batch(self, writer: StoreWriter, c: MessageColumns) -> npt.NDArray[np.int64]:
        """Put a workload batch, the fate records due between its messages in between;
        returns the batch's physical offsets."""
        self.writer = writer
        stamps = np.asarray(c.store_timestamp)
        count = len(stamps)
        offsets = np.zeros(count, dtype=np.int64)
        i = 0
        while i < count:
            first = int(stamps[i])
            if self.heap and self.heap[0].time < first:
                self._run_before(first)
                continue
            nxt = self.heap[0].time if self.heap else _INF
            j = max(i + 1, int(np.searchsorted(stamps, nxt, side="left")))
            placed = writer.put_columns(slice_columns(c, i, j))
            offsets[i:j] = placed.physical_offset
            self._observe_batch(c, i, j, placed.physical_offset, placed.queue_offset)
            self.last_ts = max(self.last_ts, int(stamps[j - 1]))
            i = j
        return offsets

    def finish(self, writer: StoreWriter) -> None:
        """Run the broker on to the crash or the clean shutdown."""
        self.writer = writer
        self.stop_at = self.last_ts + (CRASH_AFTER_MS if self.crash else CLEAN_HORIZON_MS)
        self._run_before(self.stop_at + 1)
        if self.op_batch and not self.crash:  # a clean shutdown writes the batch; a kill loses it
            self._flush_ops(self.last_ts)

    # --- writing ----------------------------------------------------------------------------------

    def _put(
        self,
        copy: _Copy,
        at: int,
        delay: str | None = None,
        prepared: int = 0,
    ) -> _Copy:
        """Store ``copy`` at ``at`` (never before the last record: store times only grow)."""
        assert self.writer is not None
        at = max(at, self.last_ts)
        self.last_ts = at
        p = copy.properties
        dispatched = not (self.crash and at >= self.stop_at - CRASH_REPUT_LAG_MS)
        row = Row(
            copy.topic,
            copy.queue_id,
            props.encode_properties_map(p, self.trailing),
            p.get(props.TAGS),
            delay,
            props.index_key_values(p.get(props.UNIQ_KEY), p.get(props.KEYS)),
            copy.body,
            copy.born_host,
            copy.store_host,
            copy.born_timestamp,
            at,
            copy.sys_flag,
            copy.flag,
            copy.reconsume_times,
            prepared,
            dispatched,
        )
        placed = self.writer.put_columns(columns([row]))
        copy.physical_offset = int(placed.physical_offset[0])
        copy.queue_offset = int(placed.queue_offset[0])
        copy.store_timestamp = at
        copy.dispatched = dispatched
        self._entered(copy)
        return copy

    def _derived(
        self,
        src: _Copy,
        topic: str,
        queue_id: int,
        properties: dict[str, str],
        reconsume_times: int,
        keep_store_host: bool = False,
    ) -> _Copy:
        """A copy of ``src``: body, flags and born fields kept; the store host is the broker's
        (a send-back, a POP revive) or, where the broker copies the record as it is (the
        schedule delivery, the transaction end and check), ``src``'s."""
        return _Copy(
            topic,
            queue_id,
            properties,
            src.body,
            src.born_timestamp,
            src.born_host,
            src.store_host if keep_store_host else self.broker_host,
            src.sys_flag,
            src.flag,
            reconsume_times,
        )

    # --- what enters a queue ----------------------------------------------------------------------

    def _observe_batch(
        self,
        c: MessageColumns,
        start: int,
        end: int,
        physical: npt.NDArray[np.int64],
        queue_offsets: npt.NDArray[np.int64],
    ) -> None:
        topic_ids = np.asarray(c.topic[start:end]).tolist()
        for n, t in enumerate(topic_ids):
            topic = c.topics[t]
            if topic not in self.consumers_of and topic not in (SCHEDULE_TOPIC, HALF_TOPIC):
                continue
            k = start + n
            copy = _Copy(
                topic,
                int(c.queue_id[k]),
                props.parse_properties(bytes(c.properties[k]).decode("utf-8")),
                c.bodies[int(c.body[k])],
                int(c.born_timestamp[k]),
                c.hosts[int(c.born_host[k])],
                c.hosts[int(c.store_host[k])],
                int(c.sys_flag[k]),
                int(c.flag[k]),
                int(c.reconsume_times[k]),
                int(physical[n]),
                int(queue_offsets[n]),
                int(c.store_timestamp[k]),
                bool(c.dispatch[k]),
            )
            if topic == SCHEDULE_TOPIC:
                self.counts["schedule"] += 1
                copy.role = Role.SCHEDULE
            elif topic == HALF_TOPIC:
                copy.role = Role.HALF
            self._entered(copy)
            self._pub(copy)

    def _entered(self, copy: _Copy) -> None:
        """A record entered its queue: consumers, the schedule service or the transaction
        check will see it (once dispatched)."""
        self.truth.append(copy)
        topic = copy.topic
        if topic == SCHEDULE_TOPIC:
            self._schedule_unit(copy)
        elif topic == HALF_TOPIC and CHECK_TIMES not in copy.properties:
            self._new_transaction(copy)
        for group in self.consumers_of.get(topic, ()):
            key = (group, topic, copy.queue_id)
            times = self.consumed.setdefault(key, [])
            times.extend([_INF] * (copy.queue_offset + 1 - len(times)))
            if not copy.dispatched:
                continue
            at = copy.store_timestamp + 3 + (self._word() & 31)
            times[copy.queue_offset] = at
            fails = self._fails(group, copy)
            ok = fails <= copy.reconsume_times
            self.delivery_log.append(FateDelivery(group, copy.physical_offset, at, ok))
            if group in self.tracers:
                self._at(at, functools.partial(self._consumed, group, copy, ok))
            if group == GROUP_POP and self.pop is not None:
                self._at(at, functools.partial(self._popped, copy, ok))
            if not ok:
                self._at(at, functools.partial(self._failed, group, copy))
            p = copy.properties
            # (examples for a reader: with a UNIQ_KEY and KEYS to look them up by)
            if (
                props.UNIQ_KEY in p
                and props.KEYS in p
                and (group == GROUP_RETRY or props.REAL_TOPIC in p)
            ):
                self.deliveries.append((at, copy, ok))

    def _fails(self, group: str, copy: _Copy) -> int:
        """How many deliveries of this message the group's listener fails."""
        if group == GROUP_OK:
            return 0
        word = self._class_word(group, copy.identity)
        roll = word % 1000
        if roll < 50:
            klass = "r1"
        elif roll < 80:
            klass = "r2"
        elif roll < 95 and group == GROUP_RETRY:  # a POP message is never dead-lettered here
            klass = "dlq"
        else:
            return 0
        return _FAILS[klass]

    def _class_word(self, group: str, uniq: str) -> int:
        """A stable roll per (group, message), so every copy of a message gets the same
        class: FNV-1a over the names (Python's hash is salted per process)."""
        h = 0xCBF29CE484222325
        for byte in f"{group}/{uniq}".encode():
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        return h >> 11

    # --- consumers --------------------------------------------------------------------------------

    def _failed(self, group: str, copy: _Copy, now: int) -> None:
        """The group's listener returned RECONSUME_LATER (or a POP message was not acked)."""
        p = copy.properties
        self.failed_chains.add(f"{group}/{copy.identity}")
        if group == GROUP_POP:
            self._at(now + _POP_INVISIBLE_MS, lambda t: self._revive(copy, now, t))
            return
        back = dict(p)
        back.setdefault(props.RETRY_TOPIC, copy.topic)
        back.setdefault(props.ORIGIN_MESSAGE_ID, copy.offset_msg_id)
        back[props.WAIT] = "false"
        if copy.reconsume_times >= MAX_RECONSUME_TIMES:
            back[props.DELAY] = "0"
            dead = self._derived(copy, DLQ_PREFIX + group, 0, back, copy.reconsume_times + 1)
            dead.role = Role.DLQ
            dlq = self._put(dead, now)
            self.counts["dlq"] += 1
            if self.examples["dlq"] is None and props.KEYS in p:
                self.examples["dlq"] = dlq.properties.get(props.UNIQ_KEY)
            return
        level = 3 + copy.reconsume_times  # asyncConsumerSendMsgBack: delayLevel 0 -> 3 + times
        back[props.DELAY] = str(level)
        back[props.REAL_TOPIC] = RETRY_PREFIX + group
        back[props.REAL_QID] = "0"
        scheduled = self._derived(copy, SCHEDULE_TOPIC, level - 1, back, copy.reconsume_times + 1)
        scheduled.role = Role.SCHEDULE
        self.counts["retry_schedule"] += 1
        self._put(scheduled, now, delay=str(level))

    def _popped(self, copy: _Copy, ok: bool, now: int) -> None:
        """``groupPop`` popped ``copy``: its checkpoint now, its ack once the listener is done."""
        assert self.pop is not None
        self.pop.popped(
            GROUP_POP,
            copy.topic,
            copy.queue_id,
            copy.queue_offset,
            copy.properties.get(props.UNIQ_KEY),
            now,
            now + _CONSUME_MS if ok else None,
        )

    def _pop_put(
        self, topic: str, queue_id: int, properties: dict[str, str], body: bytes, at: int
    ) -> tuple[int, int, int]:
        """A record the broker itself stores for POP (:mod:`rmqinspect.synth.pop`)."""
        record = _Copy(
            topic, queue_id, properties, body, at, self.broker_host, self.broker_host, 0, 0, 0
        )
        self._put(record, at)
        return record.physical_offset, record.queue_offset, record.store_timestamp

    def _revive(self, copy: _Copy, popped: int, now: int) -> None:
        """``PopReviveService.reviveRetry``: the unacked message again, in the POP retry topic."""
        p = dict(copy.properties)
        if copy.reconsume_times == 0 or FIRST_POP_TIME not in p:
            p[FIRST_POP_TIME] = str(popped)
        topic = copy.topic if copy.topic.startswith(RETRY_PREFIX) else self.pop_retry
        self.counts["pop_retry"] += 1
        revived = self._derived(copy, topic, 0, p, copy.reconsume_times + 1)
        revived.role = Role.RETRY
        self._put(revived, now)

    # --- message traces -------------------------------------------------------------------------

    @staticmethod
    def _client_msg_id(copy: _Copy) -> str:
        """``MessageClientExt.getMsgId``: the UNIQ_KEY, else the offsetMsgId."""
        return copy.properties.get(props.UNIQ_KEY) or copy.offset_msg_id

    def _pub(self, copy: _Copy) -> None:
        """``SendMessageTraceHookImpl``: a traced producer's send, once its result is back."""
        p = copy.properties
        if copy.role is Role.HALF:
            group, msg_type = TX_PRODUCER_GROUP, _HALF_MSG
        elif self.traced_topic in (copy.topic, p.get(props.REAL_TOPIC)):
            group = TRACED_PRODUCER_GROUP
            msg_type = _DELAY_MSG if copy.role is Role.SCHEDULE else _NORMAL_MSG
        else:
            return
        uniq = p.get(props.UNIQ_KEY)
        if uniq is None:  # a Java producer always sets one; the others trace nothing
            return
        record = TraceRecord(
            "Pub",
            uniq,
            timestamp=copy.born_timestamp,  # sendMessageBefore's clock
            region_id=_REGION,
            group=group,
            topic=p.get(props.REAL_TOPIC) or copy.topic,  # the topic the client sent to
            tags=p.get(props.TAGS),
            keys=p.get(props.KEYS),
            store_host=str(copy.store_host),  # the broker address it sent to
            body_length=len(copy.body),
            cost_time=max(copy.store_timestamp - copy.born_timestamp, 0) + 1,
            msg_type=msg_type,
            offset_msg_id=copy.offset_msg_id,
            success=True,
        )
        self._trace(group, record, copy.store_timestamp + 1)

    def _consumed(self, group: str, copy: _Copy, ok: bool, now: int) -> None:
        """``ConsumeMessageTraceHookImpl``: SubBefore when the listener starts, SubAfter when it
        returns (costTime per message; ``FAILED`` for RECONSUME_LATER)."""
        tracer = self.tracers[group]
        p = copy.properties
        msg_id = self._client_msg_id(copy)
        request = tracer.ids.next_id(now)  # TraceContext's requestId
        before = TraceRecord(
            "SubBefore",
            msg_id,
            timestamp=now,
            region_id=p.get(MSG_REGION),  # absent here: the trace says null
            group=group,
            request_id=request,
            retry_times=copy.reconsume_times,
            keys=p.get(props.KEYS),
        )
        self._trace(group, before, now)
        after = TraceRecord(
            "SubAfter",
            msg_id,
            request_id=request,
            cost_time=_CONSUME_MS,
            success=ok,
            keys=p.get(props.KEYS),
            context_code=_RETURN_SUCCESS if ok else _RETURN_FAILED,
            timestamp=now + _CONSUME_MS,
        )
        self._trace(group, after, now + _CONSUME_MS)

    def _end_trace(self, half: _Copy, state: str, now: int, from_check: bool = False) -> None:
        """``EndTransactionTraceHookImpl``: the transaction producer's end (or check answer)."""
        p = half.properties
        uniq = p.get(props.UNIQ_KEY)
        if uniq is None:
            return
        record = TraceRecord(
            "EndTransaction",
            uniq,
            timestamp=now,
            region_id=p.get(MSG_REGION),
            group=TX_PRODUCER_GROUP,
            topic=p.get(props.REAL_TOPIC) or half.topic,
            tags=p.get(props.TAGS),
            keys=p.get(props.KEYS),
            store_host=str(half.store_host),
            msg_type=_COMMIT_MSG,
            transaction_id=uniq,  # sendMessageInTransaction: the UNIQ_KEY
            transaction_state=state,
            from_transaction_check=from_check,
        )
        self._trace(TX_PRODUCER_GROUP, record, now)

    def _trace(self, name: str, record: TraceRecord, at: int) -> None:
        """``TraceDataSegment.addTraceTransferBean``: keep it; send once the segment is full,
        else when its first record is old enough (the dispatcher's next poll after that)."""
        tracer = self.tracers[name]
        if not tracer.records:
            due = at + _TRACE_WAIT_MS + _TRACE_POLL_MS - (at - self.start_ms) % _TRACE_POLL_MS
            generation = tracer.generation
            self._at(due, lambda now: self._time_threshold(name, generation, now))
        tracer.records.append(record)
        tracer.size += len(encode_trace_data([record]))
        # encoderFromContextBean's transKey: the msgId, and the keys as one string.
        for key in (record.msg_id, record.keys):
            if key and key not in tracer.keys:
                tracer.keys[key] = None
                tracer.key_size += len(key) + 1
        if tracer.size >= _TRACE_MAX_DATA or tracer.key_size >= _TRACE_MAX_KEYS:
            self._send_segment(name, at)

    def _time_threshold(self, name: str, generation: int, now: int) -> None:
        """``sendDataByTimeThreshold``: the segment this event was set for, unless sent since."""
        tracer = self.tracers[name]
        if generation == tracer.generation and tracer.records:
            self._send_segment(name, now)

    def _send_segment(self, name: str, at: int) -> None:
        """``TraceDataSegment.sendAllData``: its records leave for the trace producer."""
        tracer = self.tracers[name]
        records, keys = tracer.records, list(tracer.keys)
        tracer.records, tracer.keys, tracer.size, tracer.key_size = [], {}, 0, 0
        tracer.generation += 1
        self._at(at + _TRACE_SEND_MS, lambda now: self._store_traces(tracer, records, keys, now))

    def _store_traces(
        self, tracer: _TraceClient, records: list[TraceRecord], keys: list[str], now: int
    ) -> None:
        """``AsyncDataSendTask``: one trace message, its body the records' strings, its KEYS the
        segment's keySet (a HashSet: taken in insertion order here)."""
        properties = {
            props.WAIT: "true",
            props.KEYS: " ".join(keys),  # Message.setKeys(Collection): space-separated
            props.UNIQ_KEY: tracer.ids.next_id(now),
        }
        message = _Copy(
            TRACE_TOPIC,
            0,
            properties,
            encode_trace_data(records),
            now,
            tracer.host,
            self.broker_host,
            0,
            0,
            0,
            role=Role.TRACE,
        )
        stored = self._put(message, now)
        self.trace_messages.append(FateTrace(stored.physical_offset, tuple(records)))

    # --- the schedule service ---------------------------------------------------------------------

    def _schedule_unit(self, copy: _Copy) -> None:
        level = int(copy.properties[props.DELAY])
        self.units[(level, copy.queue_offset)] = (
            copy.properties.get(props.UNIQ_KEY),
            props.RETRY_TOPIC in copy.properties,
        )
        times = self.delivered.setdefault(level, [])
        times.extend([_INF] * (copy.queue_offset + 1 - len(times)))
        if not copy.dispatched:
            return
        due = copy.store_timestamp + self.delay_table[level]
        # The level's timer delivers its queue in order, polling every 100 ms.
        at = max(due + self._word() % _SCHEDULE_POLL_MS, self.level_last.get(level, 0))
        self.level_last[level] = at
        times[copy.queue_offset] = at
        self._at(at, lambda now: self._deliver(copy, level, now))

    def _deliver(self, copy: _Copy, level: int, now: int) -> None:
        p = copy.properties
        real_topic = p[props.REAL_TOPIC]
        delivered = self._derived(
            copy, real_topic, int(p[props.REAL_QID]), dict(p), copy.reconsume_times, True
        )
        self.delivered[level][copy.queue_offset] = max(now, self.last_ts)
        retry = real_topic.startswith(RETRY_PREFIX)
        delivered.role = Role.RETRY if retry else Role.SCHEDULED_DELIVERY
        self.counts["retry" if retry else "scheduled_delivery"] += 1
        self._put(delivered, now)

    # --- transactions -----------------------------------------------------------------------------

    def _new_transaction(self, half: _Copy) -> None:
        roll = self._word() % 100
        fate = "committed" if roll < 55 else "rolled_back" if roll < 80 else "unknown"
        tx = _Tx(half, fate)
        self.txs.append(tx)
        if fate == "unknown":
            # executeLocalTransaction said UNKNOW: endTransaction with it, traced.
            self._end_trace(half, "UNKNOW", half.store_timestamp + _TRACE_SEND_MS)
            if not self.check_tick_scheduled:
                self._next_check(half.store_timestamp)
            return
        self._at(half.store_timestamp + 5 + self._word() % 45, lambda now: self._end(tx, now))

    def _end(self, tx: _Tx, now: int) -> None:
        """``EndTransactionProcessor``: a commit stores the real-topic record, then the op
        record (``deletePrepareMessage``) resolves the half; a rollback only the op."""
        half = tx.half
        tx.done = True
        if tx.fate == "committed":
            p = half.properties
            # endMessageTransaction keeps the half's properties string (REAL_TOPIC, REAL_QID
            # and TRAN_MSG are cleared from the map after it is built).
            commit = self._derived(
                half, p[props.REAL_TOPIC], int(p[props.REAL_QID]), dict(p), 0, True
            )
            commit.sys_flag = half.sys_flag | TRANSACTION_COMMIT_TYPE
            commit.role = Role.COMMIT
            self.commit_records += 1
            self._put(commit, now, prepared=half.physical_offset)
        self._end_trace(
            half, "COMMIT_MESSAGE" if tx.fate == "committed" else "ROLLBACK_MESSAGE", now
        )
        if self.v5:
            if not self.op_batch:
                self._at((now // _OP_BATCH_MS + 1) * _OP_BATCH_MS, self._flush_ops)
            self.op_batch.append(half.queue_offset)
        else:
            self._op([half.queue_offset], now)

    def _flush_ops(self, now: int) -> None:
        batch, self.op_batch = self.op_batch, []
        if batch:
            self._op(batch, now)

    def _op(self, offsets: list[int], now: int) -> None:
        # putOpMessage: Message(opTopic, "d", body): TAGS and WAIT; queue = the half's queue.
        text = ",".join(map(str, offsets)) + ("," if self.v5 else "")
        op = _Copy(
            OP_TOPIC,
            0,
            {props.TAGS: REMOVE_TAG, props.WAIT: "true"},
            text.encode(),
            now,
            self.broker_host,
            self.broker_host,
            0,
            0,
            0,
            role=Role.OP,
        )
        self.op_records += 1
        self._put(op, now)

    def _next_check(self, after: int) -> None:
        self.check_tick_scheduled = True
        tick = ((after - self.start_ms) // _TX_CHECK_INTERVAL_MS + 1) * _TX_CHECK_INTERVAL_MS
        self._at(self.start_ms + tick, self._check)

    def _check(self, now: int) -> None:
        """One run of the check service over the unknown halves old enough to check."""
        self.check_tick_scheduled = False
        waiting = False
        for tx in self.txs:
            if tx.done or tx.fate != "unknown":
                continue
            half = tx.half
            if now - half.store_timestamp < _TX_TIMEOUT_MS or not half.dispatched:
                waiting = waiting or half.dispatched
                continue
            if tx.checks >= TRANSACTION_CHECK_MAX:
                tx.done, tx.fate = True, "given_up"
                given_up = self._derived(half, GIVEN_UP_TOPIC, 0, dict(half.properties), 0, True)
                given_up.role = Role.GIVEN_UP
                self._put(given_up, now)
                continue
            tx.checks += 1
            renewed = dict(half.properties)
            renewed[CHECK_TIMES] = str(tx.checks)
            copy = self._derived(half, HALF_TOPIC, half.queue_id, renewed, 0, True)
            copy.role = Role.HALF
            self.half_checks += 1
            tx.half = self._put(copy, now)
            # checkTransactionState: the producer answers UNKNOW again (the trace says so).
            self._end_trace(copy, "UNKNOW", now + _TRACE_SEND_MS, from_check=True)
            waiting = True
        if waiting:
            self._next_check(now)

    # --- what the broker persisted ----------------------------------------------------------------

    def _persist_times(self, interval: int, lag: int = 0) -> tuple[int, int]:
        """What the table last persisted had seen, and the generation before (the ``.bak``);
        ``lag``: how far behind the broker's copy is (a client's commit interval)."""
        periodic = self.stop_at - (self.stop_at - self.start_ms) % interval
        if self.crash:
            return periodic - lag, periodic - interval - lag
        # A clean shutdown persists once more; .bak is the last periodic generation.
        return self.stop_at, periodic if periodic < self.stop_at else periodic - interval

    def retry_max_times(self) -> dict[str, int]:
        """``subscriptionGroup.json``'s ``retryMaxTimes`` for the failing groups: set to the
        consumers' maxReconsumeTimes, as ``updateSubGroup`` would (a 4.9 broker takes the
        client's header value anyway; 5.x POP revives read the group's)."""
        return {g: MAX_RECONSUME_TIMES for g in self.subscriptions if g != GROUP_OK}

    def consumer_offsets(
        self, topics: list[str]
    ) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]]:
        """``consumerOffset.json`` and its ``.bak``: each group's persisted progress (consumed
        in queue order), the check service's, and one offset past its queue's max."""
        tables: list[dict[str, dict[int, int]]] = []
        for at in self._persist_times(_CONSUMER_PERSIST_MS, _CLIENT_COMMIT_LAG_MS):
            table: dict[str, dict[int, int]] = {}
            for (group, topic, queue_id), times in sorted(self.consumed.items()):
                done = next((n for n, t in enumerate(times) if t > at), len(times))
                table.setdefault(f"{topic}@{group}", {})[queue_id] = done
            for group in self.subscriptions:
                if group != GROUP_POP:  # a push consumer registers its retry topic at 0
                    table.setdefault(f"{RETRY_PREFIX}{group}@{group}", {0: 0})
            if self.txs:
                table[f"{HALF_TOPIC}@{CHECK_GROUP}"] = {0: self._check_offset(at)}
            if self.pop is not None and self.pop.done:
                # The revive service commits on the broker: no client lag.
                revived_at = self._persist_times(_CONSUMER_PERSIST_MS)[len(tables)]
                table[f"{REVIVE_TOPIC}@{REVIVE_GROUP}"] = self.pop.revive_offsets(revived_at)
            group, topic, queue_id, ahead, _ = self.offset_ahead(topics)
            table.setdefault(f"{topic}@{group}", {})[queue_id] = ahead
            tables.append({k: table[k] for k in _java_order(table)})
        return tables[0], tables[1]

    def offset_ahead(self, topics: list[str]) -> tuple[str, str, int, int, int]:
        """The ``offset_ahead`` case: groupOK's committed offset of TopicA queue 1 (0 with one
        queue) past the queue's end, as if taken from another broker or edited."""
        queues = sorted(q for g, t, q in self.consumed if g == GROUP_OK and t == topics[0])
        queue_id = 1 if 1 in queues else 0
        end = len(self.consumed.get((GROUP_OK, topics[0], queue_id), []))
        return GROUP_OK, topics[0], queue_id, end + OFFSET_AHEAD_BY, end

    def _check_offset(self, at: int) -> int:
        """The check service's progress through half queue 0: past every copy it had
        processed, up to the first not yet old enough at its last run before ``at``."""
        last_run = (
            self.start_ms + (at - self.start_ms) // _TX_CHECK_INTERVAL_MS * _TX_CHECK_INTERVAL_MS
        )
        halves: list[tuple[int, int]] = []
        for tx in self.txs:
            halves.append((tx.half.queue_offset, tx.half.store_timestamp))
        young = [q for q, ts in halves if ts > last_run - _TX_TIMEOUT_MS]
        return min(young) if young else 1 + max(q for q, _ in halves)

    def delay_offsets(self) -> tuple[dict[int, int], dict[int, int]]:
        """``delayOffset.json`` and its ``.bak``: per level used, the next offset to deliver."""
        tables: list[dict[int, int]] = []
        for at in self._persist_times(_DELAY_PERSIST_MS):
            tables.append(
                {
                    level: next((n for n, t in enumerate(times) if t > at), len(times))
                    for level, times in sorted(self.delivered.items())
                }
            )
        return tables[0], tables[1]

    def summary(self, topics: list[str]) -> FateSummary:
        states = {"committed": 0, "rolled_back": 0, "pending": 0, "given_up": 0}
        pending_tx = None
        for tx in self.txs:
            state = tx.fate if tx.done else "pending"
            states[state] += 1
            if state == "pending" and pending_tx is None and props.UNIQ_KEY in tx.half.properties:
                pending_tx = tx.half.properties.get(props.UNIQ_KEY)
        pending = sum(t == _INF or t > self.stop_at for ts in self.delivered.values() for t in ts)
        examples = dict(self.examples)
        examples["pending_transaction"] = pending_tx
        examples["pending_delay"] = next(
            (
                uniq
                for (level, offset), (uniq, retry) in sorted(
                    self.units.items(), key=lambda u: -u[0][0]
                )
                if uniq and not retry and self.delivered[level][offset] > self.stop_at
            ),
            None,
        )
        examples["retried_then_consumed"] = next(
            (
                c.properties[props.UNIQ_KEY]
                for _, c, ok in self.deliveries
                if ok and c.reconsume_times and c.topic == self.retry_topic
            ),
            None,
        )
        # A retry or scheduled copy a group took after its last persisted offset: after the
        # crash's restart the group is handed it again (consumed twice); a retry copy first.
        committed, _ = self._persist_times(_CONSUMER_PERSIST_MS, _CLIENT_COMMIT_LAG_MS)
        past = sorted(
            ((c.topic != self.retry_topic, t), c.properties[props.UNIQ_KEY])
            for t, c, _ in self.deliveries
            if self.crash and committed < t <= self.stop_at
        )
        examples["consumed_past_commit"] = past[0][1] if past else None
        # A delayed send delivered after the last persisted delayOffset: the restart delivers
        # it again (a second scheduled copy).
        persisted, _ = self._persist_times(_DELAY_PERSIST_MS)
        examples["delivered_past_delay_offset"] = next(
            (
                uniq
                for (level, offset), (uniq, _) in sorted(self.units.items())
                if uniq and self.crash and persisted < self.delivered[level][offset] <= self.stop_at
            ),
            None,
        )
        return FateSummary(
            chains=len(self.failed_chains),
            schedule=self.counts["schedule"],
            scheduled_delivery=self.counts["scheduled_delivery"],
            retry_schedule=self.counts["retry_schedule"],
            retry=self.counts["retry"],
            dlq=self.counts["dlq"],
            pop_retry=self.counts["pop_retry"],
            pending_delays=pending,
            transactions=states,
            half_checks=self.half_checks,
            op_records=self.op_records,
            commit_records=self.commit_records,
            offset_ahead=self.offset_ahead(topics),
            examples=examples,
            trace_messages=len(self.trace_messages),
            records=tuple(_record(c) for c in self.truth),
            deliveries=tuple(self.delivery_log),
            traces=tuple(self.trace_messages),
            pop=() if self.pop is None else self.pop.truths(),
            transaction_states={
                uniq: tx.fate if tx.done else "pending"
                for tx in self.txs
                if (uniq := tx.half.properties.get(props.UNIQ_KEY)) is not None
            },
        )


def _record(c: _Copy) -> FateRecord:
    return FateRecord(
        c.role.value,
        c.identity,
        c.topic,
        c.queue_id,
        c.queue_offset,
        c.physical_offset,
        c.store_timestamp,
        c.reconsume_times,
        int(c.properties[props.DELAY]) if props.DELAY in c.properties else None,
        c.properties.get(props.REAL_TOPIC),
        c.properties.get(props.ORIGIN_MESSAGE_ID),
        c.offset_msg_id,
        c.dispatched,
    )


def _java_order(table: dict[str, dict[int, int]]) -> list[str]:
    return java_map_order(table, _CONSUMER_OFFSET_TABLE_SLOTS)
