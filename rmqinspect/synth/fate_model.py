"""What the parts of the fate run (:mod:`rmqinspect.synth.fate`) share: the consumer groups, the
broker's timings they all read, and the record a later event copies."""

from __future__ import annotations

from dataclasses import dataclass

from rmqinspect.format import properties as props
from rmqinspect.format.fate import Role
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.synth.layout import FateRecord

GROUP_OK = "groupOK"
GROUP_RETRY = "groupRetry"
TX_PRODUCER_GROUP = "PID_TX"  # the workload's transaction producer, in its records and traces
GROUP_POP = "groupPop"
MAX_RECONSUME_TIMES = 3  # groupRetry's DefaultMQPushConsumer.setMaxReconsumeTimes(3)
TX_CHECK_INTERVAL_MS = 10_000
TX_TIMEOUT_MS = 6_000  # BrokerConfig.transactionTimeOut
INF = 1 << 62  # a time that never comes: not consumed, not delivered


@dataclass(slots=True)
class Copy:
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
class Tx:
    half: Copy
    fate: str  # committed / rolled_back / unknown
    checks: int = 0
    done: bool = False


def fate_record(c: Copy) -> FateRecord:
    """The copy as the summary's truth lists it."""
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
