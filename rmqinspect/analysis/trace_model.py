"""What ``trace`` is asked and answers (:mod:`rmqinspect.analysis.trace`): the query, the
copies of a message, each group's fate of it and the findings."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rmqinspect.analysis.messages import SkippedRange
from rmqinspect.analysis.offsets import ConsumeFromWhere
from rmqinspect.analysis.pop import PopMessage
from rmqinspect.analysis.trace_timer import TimerUnit
from rmqinspect.format.fate import TRACE_TOPIC, Role
from rmqinspect.format.trace_data import TraceRecord


class Search(StrEnum):
    PHYSICAL_OFFSET = "physical_offset"  # --msg-id: the id names the offset
    INDEX = "index"
    SCAN = "scan"


class Restart(StrEnum):
    KEPT = "kept"
    CUT = "cut"  # at or past the recovered end, or in a file the restart deletes
    QUEUE_ENTRY_LOST = "queue_entry_lost"  # kept, but no consume-queue unit serves it
    BROKER_DOES_NOT_START = "broker_does_not_start"


class FindingKind(StrEnum):
    ORIGIN_NOWHERE = "origin_nowhere"  # ORIGIN_MESSAGE_ID names no readable record
    ORIGIN_OTHER_MESSAGE = "origin_other_message"  # ... names a record of another message
    ORIGIN_NOT_AN_ID = "origin_not_an_id"  # ... is neither an offsetMsgId nor a known UNIQ_KEY
    ORIGIN_CYCLE = "origin_cycle"  # following ORIGIN_MESSAGE_ID comes back to a copy
    BAD_TRACE_BODY = "bad_trace_body"
    BAD_PROPERTY = "bad_property"  # DELAY / REAL_QID that is no number
    TRANSACTION = "transaction"  # a transactions finding about this chain's records


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    physical_offset: int
    detail: str


@dataclass(frozen=True, slots=True)
class GroupState:
    """One group's committed offset on a copy's queue, against the copy."""

    group: str
    committed_offset: int
    consumed: bool  # the offset is past the copy's queue offset
    # The offset against the queue the restart rebuilds (offsets' status_after_restart: ok,
    # below_min, above_max, no_queue; None when the broker would not start).
    status_after_restart: str | None


@dataclass(frozen=True, slots=True)
class Copy:
    role: Role
    physical_offset: int
    store_size: int
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    reconsume_times: int
    offset_msg_id: str
    uniq_key: str | None
    keys: str | None
    tags: str | None
    linked_by: str  # seed, uniq_key, origin_message_id, op_record, trace_keys
    delay_level: int | None
    due_timestamp: int | None  # schedule copies: when the schedule service delivers it
    delivered: bool | None  # schedule copies: delayOffset.json is past it
    real_topic: str | None
    real_queue_id: int | None
    retry_topic: str | None
    origin_message_id: str | None
    group: str | None  # the group a retry/DLQ topic names
    pop_topic: str | None
    prepared_transaction_offset: int | None  # commit/rollback records
    groups: tuple[GroupState, ...]
    restart: Restart
    traces: tuple[TraceRecord, ...] = ()
    pops: tuple[PopMessage, ...] = ()  # POP groups' pops of this copy (analysis.pop)
    fire_timestamp: int | None = None  # timer copies and deliveries: TIMER_OUT_MS
    timer: TimerUnit | None = None  # timer-topic copies: their timerlog unit


@dataclass(frozen=True, slots=True)
class GroupFate:
    group: str
    outcome: str  # consumed, pending, in_delay, dlq, not_delivered, lost_by_restart
    retries: int  # retry copies delivered to the group
    attempts: int  # deliveries: the last copy's reconsume times + 1 (a DLQ copy's own count)
    summary: str


@dataclass(frozen=True, slots=True)
class Chain:
    uniq_key: str | None
    topic: str | None  # the topic the producer sent to
    copies: tuple[Copy, ...]
    groups: tuple[GroupFate, ...]
    transaction_state: str | None
    summary: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TraceQuery:
    msg_id: str | None = None
    uniq_keys: tuple[str, ...] = ()
    key: str | None = None
    topic: str | None = None
    trace_topics: tuple[str, ...] = (TRACE_TOPIC,)
    # Where a group without a committed offset on a copy's queue starts reading it
    # (offsets.start_without_offset, the rule groups uses).
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.UNKNOWN


@dataclass(frozen=True, slots=True)
class TraceReport:
    query: dict[str, object]
    search: Search
    chains: tuple[Chain, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    broker_starts: bool | None  # None: nothing to judge
    restart_end: int | None  # where the restarted broker's commitlog ends
    skipped: tuple[SkippedRange, ...]

    @property
    def found(self) -> bool:
        return bool(self.chains)


class BadQuery(ValueError):
    """The query names no message in a form the store could hold (exit 2)."""
