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
- What the broker persisted (``consumerOffset.json``, ``delayOffset.json``) and the run's
  summary: :mod:`rmqinspect.synth.fate_persist`.

A clean run keeps the broker going for :data:`CLEAN_HORIZON_MS` after the last workload message
(every retry chain ends; levels 17/18, an hour or two, stay pending). A crash comes
:data:`CRASH_AFTER_MS` after it, while retries are in flight; the records of its last
:data:`CRASH_REPUT_LAG_MS` are not dispatched.

Message traces, by three tracing clients: :mod:`rmqinspect.synth.fate_trace`.
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
from rmqinspect.format.fate import (
    CHECK_TIMES,
    DLQ_PREFIX,
    GIVEN_UP_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    REMOVE_TAG,
    RETRY_PREFIX,
    TRANSACTION_CHECK_MAX,
    Role,
    pop_retry_topic,
)
from rmqinspect.format.host import HostAddress
from rmqinspect.format.pop import FIRST_POP_TIME
from rmqinspect.format.profile import Profile
from rmqinspect.synth.fate_model import (
    GROUP_OK,
    GROUP_POP,
    GROUP_RETRY,
    INF,
    MAX_RECONSUME_TIMES,
    TX_CHECK_INTERVAL_MS,
    TX_TIMEOUT_MS,
    Copy,
    Tx,
)
from rmqinspect.synth.fate_trace import CONSUME_MS, TRACE_SEND_MS, TraceClients
from rmqinspect.synth.layout import FateDelivery, MessageColumns, slice_columns
from rmqinspect.synth.pop import PopBroker
from rmqinspect.synth.records import Row, columns
from rmqinspect.synth.writer import StoreWriter

CLEAN_HORIZON_MS = 150_000
CRASH_AFTER_MS = 70_000
CRASH_REPUT_LAG_MS = 5_000
_SCHEDULE_POLL_MS = 100  # DELAY_FOR_A_WHILE: the timer task's period when nothing is due
_OP_BATCH_MS = 3_000  # BrokerConfig.transactionOpBatchInterval (5.x)
_POP_INVISIBLE_MS = 20_000
FATE_DELAY_LEVELS = (2, 3, 5, 17, 18)  # 5 s, 10 s, 1 min: delivered; 1 h, 2 h: pending
# groupRetry's listener by message class: how many deliveries fail before one succeeds.
_FAILS = {"r1": 1, "r2": 2, "dlq": MAX_RECONSUME_TIMES + 1}


@dataclass(order=True, slots=True)
class _Event:
    time: int
    seq: int
    action: Callable[[int], None] = field(compare=False)


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
        # (group, topic, queue) -> [consume time per queue offset] (INF: not consumed)
        self.consumed: dict[tuple[str, str, int], list[int]] = {}
        self.delivered: dict[int, list[int]] = {}  # delay level -> [delivery time per offset]
        self.level_last: dict[int, int] = {}  # delay level -> its latest delivery time
        self.heap: list[_Event] = []
        self.event_seq = 0
        self.last_ts = start_ms
        self.stop_at = INF  # set by finish(): the crash or the clean shutdown
        self.counts = dict.fromkeys(
            ("schedule", "scheduled_delivery", "retry_schedule", "retry", "dlq", "pop_retry"), 0
        )
        self.failed_chains: set[str] = set()
        self.txs: list[Tx] = []
        self.half_checks = 0
        self.op_records = 0
        self.commit_records = 0
        self.op_batch: list[int] = []
        self.check_tick_scheduled = False
        self.examples: dict[str, str | None] = {"dlq": None}
        # Deliveries of copies with a UNIQ_KEY and KEYS, groupRetry's and any of a scheduled or
        # retry copy: (time, copy, succeeded)
        self.deliveries: list[tuple[int, Copy, bool]] = []
        # Schedule units: (level, offset) -> (UNIQ_KEY, whether a retry's)
        self.units: dict[tuple[int, int], tuple[str | None, bool]] = {}
        self.writer: StoreWriter | None = None
        self.traces = TraceClients(seed, start_ms, broker_host, topics[0], self._at, self._put)
        # --pop: groupPop's checkpoints and acks (5.x)
        self.pop = PopBroker(self._pop_put, self._at, _POP_INVISIBLE_MS) if pop else None
        self.truth: list[Copy] = []
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
            nxt = self.heap[0].time if self.heap else INF
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
        copy: Copy,
        at: int,
        delay: str | None = None,
        prepared: int = 0,
    ) -> Copy:
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
        src: Copy,
        topic: str,
        queue_id: int,
        properties: dict[str, str],
        reconsume_times: int,
        keep_store_host: bool = False,
    ) -> Copy:
        """A copy of ``src``: body, flags and born fields kept; the store host is the broker's
        (a send-back, a POP revive) or, where the broker copies the record as it is (the
        schedule delivery, the transaction end and check), ``src``'s."""
        return Copy(
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
            copy = Copy(
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
            self.traces.pub(copy)

    def _entered(self, copy: Copy) -> None:
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
            times.extend([INF] * (copy.queue_offset + 1 - len(times)))
            if not copy.dispatched:
                continue
            at = copy.store_timestamp + 3 + (self._word() & 31)
            times[copy.queue_offset] = at
            fails = self._fails(group, copy)
            ok = fails <= copy.reconsume_times
            self.delivery_log.append(FateDelivery(group, copy.physical_offset, at, ok))
            if group in self.traces.clients:
                self._at(at, functools.partial(self.traces.consumed, group, copy, ok))
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

    def _fails(self, group: str, copy: Copy) -> int:
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

    def _failed(self, group: str, copy: Copy, now: int) -> None:
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

    def _popped(self, copy: Copy, ok: bool, now: int) -> None:
        """``groupPop`` popped ``copy``: its checkpoint now, its ack once the listener is done."""
        assert self.pop is not None
        self.pop.popped(
            GROUP_POP,
            copy.topic,
            copy.queue_id,
            copy.queue_offset,
            copy.properties.get(props.UNIQ_KEY),
            now,
            now + CONSUME_MS if ok else None,
        )

    def _pop_put(
        self, topic: str, queue_id: int, properties: dict[str, str], body: bytes, at: int
    ) -> tuple[int, int, int]:
        """A record the broker itself stores for POP (:mod:`rmqinspect.synth.pop`)."""
        record = Copy(
            topic, queue_id, properties, body, at, self.broker_host, self.broker_host, 0, 0, 0
        )
        self._put(record, at)
        return record.physical_offset, record.queue_offset, record.store_timestamp

    def _revive(self, copy: Copy, popped: int, now: int) -> None:
        """``PopReviveService.reviveRetry``: the unacked message again, in the POP retry topic."""
        p = dict(copy.properties)
        if copy.reconsume_times == 0 or FIRST_POP_TIME not in p:
            p[FIRST_POP_TIME] = str(popped)
        topic = copy.topic if copy.topic.startswith(RETRY_PREFIX) else self.pop_retry
        self.counts["pop_retry"] += 1
        revived = self._derived(copy, topic, 0, p, copy.reconsume_times + 1)
        revived.role = Role.RETRY
        self._put(revived, now)

    # --- the schedule service ---------------------------------------------------------------------

    def _schedule_unit(self, copy: Copy) -> None:
        level = int(copy.properties[props.DELAY])
        self.units[(level, copy.queue_offset)] = (
            copy.properties.get(props.UNIQ_KEY),
            props.RETRY_TOPIC in copy.properties,
        )
        times = self.delivered.setdefault(level, [])
        times.extend([INF] * (copy.queue_offset + 1 - len(times)))
        if not copy.dispatched:
            return
        due = copy.store_timestamp + self.delay_table[level]
        # The level's timer delivers its queue in order, polling every 100 ms.
        at = max(due + self._word() % _SCHEDULE_POLL_MS, self.level_last.get(level, 0))
        self.level_last[level] = at
        times[copy.queue_offset] = at
        self._at(at, lambda now: self._deliver(copy, level, now))

    def _deliver(self, copy: Copy, level: int, now: int) -> None:
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

    def _new_transaction(self, half: Copy) -> None:
        roll = self._word() % 100
        fate = "committed" if roll < 55 else "rolled_back" if roll < 80 else "unknown"
        tx = Tx(half, fate)
        self.txs.append(tx)
        if fate == "unknown":
            # executeLocalTransaction said UNKNOW: endTransaction with it, traced.
            self.traces.end(half, "UNKNOW", half.store_timestamp + TRACE_SEND_MS)
            if not self.check_tick_scheduled:
                self._next_check(half.store_timestamp)
            return
        self._at(half.store_timestamp + 5 + self._word() % 45, lambda now: self._end(tx, now))

    def _end(self, tx: Tx, now: int) -> None:
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
        self.traces.end(
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
        op = Copy(
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
        tick = ((after - self.start_ms) // TX_CHECK_INTERVAL_MS + 1) * TX_CHECK_INTERVAL_MS
        self._at(self.start_ms + tick, self._check)

    def _check(self, now: int) -> None:
        """One run of the check service over the unknown halves old enough to check."""
        self.check_tick_scheduled = False
        waiting = False
        for tx in self.txs:
            if tx.done or tx.fate != "unknown":
                continue
            half = tx.half
            if now - half.store_timestamp < TX_TIMEOUT_MS or not half.dispatched:
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
            self.traces.end(copy, "UNKNOW", now + TRACE_SEND_MS, from_check=True)
            waiting = True
        if waiting:
            self._next_check(now)
