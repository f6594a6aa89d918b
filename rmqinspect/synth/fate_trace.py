"""Message traces of the fate run (client/.../trace/, 4.9.8 and 5.3.3).

Three clients enabled tracing, the rest did not (so the trace topic stays a small part of the
store): the producer of ``TopicA`` (``Pub`` for every send, delayed ones included), the
transaction producer ``PID_TX`` (``Pub`` for each half, ``EndTransaction`` for each commit,
rollback and UNKNOW answer, the check's with ``fromTransactionCheck``) and ``groupRetry``
(``SubBefore``/``SubAfter`` around each delivery of a TopicA or retry copy, ``SubAfter`` with the
listener's success). ``SendMessageTraceHookImpl``, ``EndTransactionTraceHookImpl`` and
``ConsumeMessageTraceHookImpl`` hand each record to the client's ``AsyncTraceDispatcher``; its
``TraceDataSegment`` sends what it holds once its first record is ``waitTimeThresholdMil``
(500 ms) old (checked every ``pollingTimeMil``, 100 ms) or it outgrows the message size: one
``RMQ_SYS_TRACE_TOPIC`` message (queue 0: the broker creates the topic with one queue) whose body
is the records' ``TraceDataEncoder`` strings and whose KEYS are their msgIds (UNIQ_KEYs, else
offsetMsgIds) and keys. A crash loses what the clients had not sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rmqinspect.format import properties as props
from rmqinspect.format.encode import encode_trace_data
from rmqinspect.format.fate import TRACE_TOPIC, Role
from rmqinspect.format.host import HostAddress
from rmqinspect.format.trace_data import TraceRecord
from rmqinspect.synth.clientid import ClientIds
from rmqinspect.synth.fate_model import GROUP_RETRY, TX_PRODUCER_GROUP, Copy
from rmqinspect.synth.layout import FateTrace

TRACED_PRODUCER_GROUP = "PID_TRACED"  # the traced producer of TopicA
_TRACE_WAIT_MS = 500  # AsyncTraceDispatcher.waitTimeThresholdMil
_TRACE_POLL_MS = 100  # AsyncTraceDispatcher.pollingTimeMil
_TRACE_MAX_DATA = 128_000 - 10_000  # TraceDataSegment: maxMsgSize - 10 * 1000 sends at once
# Newer clients also send once the keySet is long (currentMsgKeySize); a cap here, so KEYS
# stays well under the 32 KiB properties limit.
_TRACE_MAX_KEYS = 20_000
TRACE_SEND_MS = 2  # the trace producer's send
CONSUME_MS = 4  # a listener's run: SubAfter's costTime
_REGION = "DefaultRegion"  # BrokerConfig.regionId, in every SendResult
# TraceDataEncoder's msgType: MessageType ordinals (Normal_Msg, Trans_Msg_Half,
# Trans_msg_Commit, Delay_Msg); ConsumeReturnType ordinals for SubAfter's contextCode.
_NORMAL_MSG, _HALF_MSG, _COMMIT_MSG, _DELAY_MSG = 0, 1, 2, 3
_RETURN_SUCCESS, _RETURN_FAILED = 0, 4
MSG_REGION = "MSG_REGION"  # MessageConst.PROPERTY_MSG_REGION: the consumer's regionId


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


class TraceClients:
    """The tracing clients, on the fate run's clock: ``at`` sets an event, ``put`` stores a
    record (and returns it placed)."""

    def __init__(
        self,
        seed: int,
        start_ms: int,
        broker_host: HostAddress,
        traced_topic: str,
        at: Callable[[int, Callable[[int], None]], None],
        put: Callable[[Copy, int], Copy],
    ) -> None:
        self.start_ms = start_ms
        self.broker_host = broker_host
        self.traced_topic = traced_topic
        self._at = at
        self._put = put
        prefix = f"{seed & 0xFFFF:04X}{(seed * 2654435761) & 0xFFFFFFFF:08X}"
        self.clients = {
            name: _TraceClient(ClientIds(ip.hex().upper() + prefix), HostAddress(ip, port))
            for name, ip, port in (
                (TRACED_PRODUCER_GROUP, bytes([10, 0, 0, 5]), 50011),
                (TX_PRODUCER_GROUP, bytes([10, 0, 0, 6]), 50012),
                (GROUP_RETRY, bytes([10, 0, 0, 7]), 50021),
            )
        }
        self.messages: list[FateTrace] = []

    @staticmethod
    def _client_msg_id(copy: Copy) -> str:
        """``MessageClientExt.getMsgId``: the UNIQ_KEY, else the offsetMsgId."""
        return copy.properties.get(props.UNIQ_KEY) or copy.offset_msg_id

    def pub(self, copy: Copy) -> None:
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

    def consumed(self, group: str, copy: Copy, ok: bool, now: int) -> None:
        """``ConsumeMessageTraceHookImpl``: SubBefore when the listener starts, SubAfter when it
        returns (costTime per message; ``FAILED`` for RECONSUME_LATER)."""
        tracer = self.clients[group]
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
            cost_time=CONSUME_MS,
            success=ok,
            keys=p.get(props.KEYS),
            context_code=_RETURN_SUCCESS if ok else _RETURN_FAILED,
            timestamp=now + CONSUME_MS,
        )
        self._trace(group, after, now + CONSUME_MS)

    def end(self, half: Copy, state: str, now: int, from_check: bool = False) -> None:
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
        tracer = self.clients[name]
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
        tracer = self.clients[name]
        if generation == tracer.generation and tracer.records:
            self._send_segment(name, now)

    def _send_segment(self, name: str, at: int) -> None:
        """``TraceDataSegment.sendAllData``: its records leave for the trace producer."""
        tracer = self.clients[name]
        records, keys = tracer.records, list(tracer.keys)
        tracer.records, tracer.keys, tracer.size, tracer.key_size = [], {}, 0, 0
        tracer.generation += 1
        self._at(at + TRACE_SEND_MS, lambda now: self._store_traces(tracer, records, keys, now))

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
        message = Copy(
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
        self.messages.append(FateTrace(stored.physical_offset, tuple(records)))
