"""What a stored record is in a message's life, and what links it to the others: the one home of
the topic names and link rules of retry, delay, DLQ, transactions and traces (no I/O).

The rules, from RocketMQ's broker (4.9.8 and 5.3.3 agree unless noted):

- Retry: a consumer's failed message is stored again as a new record
  (4.9 ``SendMessageProcessor.asyncConsumerSendMsgBack``, 5.x
  ``AbstractSendMessageProcessor.consumerSendMsgBack``) in ``%RETRY%<group>``
  (``MixAll.getRetryTopic``), with ``RETRY_TOPIC`` (the original topic, set once),
  ``ORIGIN_MESSAGE_ID`` (the first copy's offsetMsgId, kept by every later copy; the client's
  fallback path ``DefaultMQPushConsumerImpl.sendMessageBack`` may put the UNIQ_KEY there),
  reconsumeTimes + 1, and delay level ``3 + reconsumeTimes`` so it goes through the schedule
  topic first. ``UNIQ_KEY``, ``KEYS``, ``TAGS`` survive (the properties are copied).
- DLQ: at ``maxReconsumeTimes`` (or delay level < 0) the copy goes to ``%DLQ%<group>``
  (``MixAll.getDLQTopic``) queue 0 instead.
- 5.x POP consumers retry into ``%RETRY%<group>_<topic>`` (``KeyBuilder.buildPopRetryTopicV1``)
  or ``%RETRY%<group>+<topic>`` (``buildPopRetryTopicV2``, ``enableRetryTopicV2``). A group name
  may hold ``_`` but not ``+`` (``TopicValidator``'s character set), so V1 names are split only
  against a group the caller knows.
- Delay (``ScheduleMessageService``, 4.9 ``CommitLog.putMessage``): a record with ``DELAY`` > 0
  is stored in ``SCHEDULE_TOPIC_XXXX`` queue level - 1 with ``REAL_TOPIC``/``REAL_QID``; when due
  it is stored again in the real topic (``messageTimeup``), ``REAL_TOPIC``/``REAL_QID``/``DELAY``
  kept.
- Transactions (``TransactionalMessageBridge``, ``EndTransactionProcessor``): halves in
  ``RMQ_SYS_TRANS_HALF_TOPIC``, op records in ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, given-up halves in
  ``TRANS_CHECK_MAX_TIME_TOPIC``; commit/rollback records carry the transaction type in sysFlag
  and ``preparedTransactionOffset`` = the half's physical offset.
- Traces: ``RMQ_SYS_TRACE_TOPIC`` (``TopicValidator.RMQ_SYS_TRACE_TOPIC``) or the topic a client
  names (``customizedTraceTopic``) holds ``TraceDataEncoder`` bodies (:mod:`.trace_data`).
- Timers (5.x, ``HookUtils.handleScheduleMessage``/``transformTimerMessage``,
  ``TimerMessageStore.convert``/``convertMessage``, ``RecallMessageProcessor``): a timer send
  is stored in ``rmq_sys_wheel_timer`` with ``REAL_TOPIC``/``REAL_QID``/``TIMER_OUT_MS``; a
  roll stores it there again with ``TIMER_ROLL_TIMES``; a recall stores a marker there with the
  same ``UNIQ_KEY`` and ``TIMER_DEL_UNIQKEY``; when it fires it is stored in its real topic
  with ``TIMER_ENQUEUE_MS``/``TIMER_DEQUEUE_MS`` (the properties, ``REAL_TOPIC`` included,
  kept). The timerlog unit of each timer-topic record is :mod:`rmqinspect.format.timer`'s.
- ``OFFSET_MOVED_EVENT`` (4.9 ``PullMessageProcessor.generateOffsetMovedEvent``): a reset of a
  consumer offset, recorded as a message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from rmqinspect.format import properties as props
from rmqinspect.format import timer
from rmqinspect.format.commitlog import (
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from rmqinspect.format.javamath import java_parse_int, java_parse_long

RETRY_PREFIX = "%RETRY%"  # MixAll.RETRY_GROUP_TOPIC_PREFIX
DLQ_PREFIX = "%DLQ%"  # MixAll.DLQ_GROUP_TOPIC_PREFIX
POP_RETRY_SEPARATOR_V1 = "_"  # KeyBuilder.POP_RETRY_SEPARATOR_V1
POP_RETRY_SEPARATOR_V2 = "+"  # KeyBuilder.POP_RETRY_SEPARATOR_V2
POP_RETRY_SEPARATORS = (POP_RETRY_SEPARATOR_V1, POP_RETRY_SEPARATOR_V2)
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC
GIVEN_UP_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # TopicValidator.RMQ_SYS_TRACE_TOPIC
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"  # TopicValidator.RMQ_SYS_OFFSET_MOVED_EVENT
CHECK_GROUP = "CID_RMQ_SYS_TRANS"  # MixAll.CID_SYS_RMQ_TRANS: the transaction check's progress
REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVE_TAG (REMOVETAG in 4.9)
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"  # MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES
TRANSACTION_CHECK_MAX = 15  # BrokerConfig.transactionCheckMax


class Role(StrEnum):
    ORIGINAL = "original"
    SCHEDULE = "schedule"  # waiting in SCHEDULE_TOPIC_XXXX
    SCHEDULED_DELIVERY = "scheduled_delivery"  # a due delayed message stored in its real topic
    RETRY = "retry"
    DLQ = "dlq"
    HALF = "half"
    OP = "op"
    COMMIT = "commit"
    ROLLBACK = "rollback"
    GIVEN_UP = "given_up"
    TRACE = "trace"
    OFFSET_MOVED_EVENT = "offset_moved_event"
    TIMER = "timer"  # a timer send waiting in rmq_sys_wheel_timer
    TIMER_ROLL = "timer_roll"  # stored there again by a roll (TIMER_ROLL_TIMES)
    TIMER_RECALL = "timer_recall"  # a recall's delete marker (TIMER_DEL_UNIQKEY)
    TIMER_DELIVERY = "timer_delivery"  # a fired timer message stored in its real topic


@dataclass(frozen=True, slots=True)
class RetryTopic:
    """A ``%RETRY%`` topic's group, and for a POP retry topic the topic it retries."""

    group: str
    pop_topic: str | None = None


def retry_topic(group: str) -> str:
    """``MixAll.getRetryTopic``."""
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    """``MixAll.getDLQTopic``."""
    return DLQ_PREFIX + group


def pop_retry_topic(group: str, topic: str, v2: bool) -> str:
    """``KeyBuilder.buildPopRetryTopic``: V1 ``%RETRY%<group>_<topic>``, V2 (``+``) with
    ``enableRetryTopicV2``."""
    return f"{retry_topic(group)}{POP_RETRY_SEPARATOR_V2 if v2 else POP_RETRY_SEPARATOR_V1}{topic}"


def retry_topic_kind(topic: str, group: str) -> str | None:
    """``"retry"`` for ``group``'s ``%RETRY%`` topic, ``"pop_retry"`` for one of its 5.x POP
    retry topics, None for any other topic."""
    own = retry_topic(group)
    if topic == own:
        return "retry"
    pop = len(topic) > len(own) + 1 and topic[len(own)] in POP_RETRY_SEPARATORS
    return "pop_retry" if pop and topic.startswith(own) else None


def parse_retry_topic(topic: str, known_groups: Iterable[str] = ()) -> RetryTopic | None:
    """The group a ``%RETRY%`` topic names (``KeyBuilder.parseGroup``); None for another topic.
    ``+`` splits a V2 POP topic; a V1 ``_`` split needs a group from ``known_groups`` (the
    longest that fits), else the whole rest is the group."""
    if not topic.startswith(RETRY_PREFIX) or len(topic) == len(RETRY_PREFIX):
        return None
    rest = topic[len(RETRY_PREFIX) :]
    group, sep, pop_topic = rest.partition(POP_RETRY_SEPARATOR_V2)
    if sep and group and pop_topic:
        return RetryTopic(group, pop_topic)
    known = set(known_groups)
    if rest in known:
        return RetryTopic(rest)
    fits = [
        g for g in known if rest.startswith(g + POP_RETRY_SEPARATOR_V1) and len(rest) > len(g) + 1
    ]
    if fits:
        group = max(fits, key=len)
        return RetryTopic(group, rest[len(group) + 1 :])
    return RetryTopic(rest)


def parse_dlq_topic(topic: str) -> str | None:
    """The group a ``%DLQ%`` topic names; None for another topic."""
    if not topic.startswith(DLQ_PREFIX) or len(topic) == len(DLQ_PREFIX):
        return None
    return topic[len(DLQ_PREFIX) :]


def delay_level(properties: Mapping[str, str]) -> int | None:
    """``DELAY`` as the broker parses it (``Integer.parseInt``); None when absent or no int."""
    value = properties.get(props.DELAY)
    return None if value is None else java_parse_int(value)


def int_property(properties: Mapping[str, str], name: str) -> int | None:
    """A property the broker reads with ``Integer.parseInt`` (None: absent or no int)."""
    value = properties.get(name)
    return None if value is None else java_parse_int(value)


def long_property(properties: Mapping[str, str], name: str) -> int | None:
    """A property the broker reads with ``Long.parseLong`` (None: absent or no long)."""
    value = properties.get(name)
    return None if value is None else java_parse_long(value)


def role_of(
    topic: str,
    properties: Mapping[str, str],
    sys_flag: int,
    trace_topics: Iterable[str] = (TRACE_TOPIC,),
) -> Role:
    """The role of one stored record. System topics decide first; a commit/rollback type comes
    next (it lands in the real topic); a real topic with ``REAL_TOPIC`` is a due delayed
    message (``messageTimeup`` keeps the property), or with ``TIMER_DEQUEUE_MS`` a fired timer
    message."""
    if topic == SCHEDULE_TOPIC:
        return Role.SCHEDULE
    if topic == timer.TIMER_TOPIC:
        if timer.TIMER_DEL_UNIQKEY in properties:
            return Role.TIMER_RECALL
        return Role.TIMER_ROLL if timer.TIMER_ROLL_TIMES in properties else Role.TIMER
    if topic.startswith(DLQ_PREFIX):
        return Role.DLQ
    if topic.startswith(RETRY_PREFIX):
        return Role.RETRY
    system = {
        HALF_TOPIC: Role.HALF,
        OP_TOPIC: Role.OP,
        GIVEN_UP_TOPIC: Role.GIVEN_UP,
        OFFSET_MOVED_EVENT: Role.OFFSET_MOVED_EVENT,
    }
    if topic in system:
        return system[topic]
    if topic in trace_topics:
        return Role.TRACE
    tx = sys_flag & TRANSACTION_TYPE_MASK
    if tx == TRANSACTION_COMMIT_TYPE:
        return Role.COMMIT
    if tx == TRANSACTION_ROLLBACK_TYPE:
        return Role.ROLLBACK
    if timer.TIMER_DEQUEUE_MS in properties:
        return Role.TIMER_DELIVERY
    if props.REAL_TOPIC in properties:
        return Role.SCHEDULED_DELIVERY
    return Role.ORIGINAL


@dataclass(frozen=True, slots=True)
class LinkKeys:
    """What ties a record to the other copies of its message."""

    uniq_key: str | None
    origin_message_id: str | None  # the first copy's offsetMsgId (or UNIQ_KEY, client path)
    retry_topic: str | None  # the original topic of a retry/DLQ copy
    real_topic: str | None
    real_queue_id: int | None
    delay_level: int | None
    group: str | None  # the group a retry/DLQ topic names
    pop_topic: str | None  # the topic a POP retry topic retries


def link_keys(
    topic: str, properties: Mapping[str, str], known_groups: Iterable[str] = ()
) -> LinkKeys:
    retry = parse_retry_topic(topic, known_groups)
    group = retry.group if retry is not None else parse_dlq_topic(topic)
    return LinkKeys(
        properties.get(props.UNIQ_KEY),
        properties.get(props.ORIGIN_MESSAGE_ID),
        properties.get(props.RETRY_TOPIC),
        properties.get(props.REAL_TOPIC),
        int_property(properties, props.REAL_QID),
        delay_level(properties),
        group,
        retry.pop_topic if retry is not None else None,
    )


def op_offsets(body: bytes | None) -> tuple[list[int], list[str]]:
    """The half-queue offsets an op record's body names, and the tokens that are no offset:
    one decimal (4.9) or several, comma-separated, with a trailing separator (5.x
    ``TransactionalOpBatchService``; read by ``TransactionalMessageServiceImpl.fillOpRemoveMap``,
    ``split(OFFSET_SEPARATOR)``). Empty tokens are no offsets and no error."""
    text = (body or b"").decode("utf-8", "replace")
    offsets: list[int] = []
    bad: list[str] = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        if token.isdecimal() and token.isascii():
            offsets.append(int(token))
        else:
            bad.append(token)
    return offsets, bad
