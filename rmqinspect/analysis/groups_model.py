"""What ``groups`` (:mod:`rmqinspect.analysis.groups`) reports: each group's queues with their
committed offsets and next pulls, its subscription settings, DLQ and ``OFFSET_MOVED_EVENT``
records, and the report around them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmqinspect.analysis.offsets import FileUse, NextPull, RestartView
from rmqinspect.analysis.pop import PopGroup
from rmqinspect.format.config import OffsetMovedEvent


@dataclass(frozen=True, slots=True)
class Subscription:
    """The ``subscriptionGroup.json`` settings that decide a group's retries and pulls."""

    retry_max_times: int
    consume_enable: bool
    consume_broadcast_enable: bool
    consume_from_min_enable: bool
    retry_queue_nums: int
    broker_id: int
    which_broker_when_consume_slowly: int
    consume_message_orderly: bool | None  # 5.x only
    group_retry_policy: dict[Any, Any] | None  # 5.x only


@dataclass(frozen=True, slots=True)
class QueueRow:
    group: str
    topic: str
    queue_id: int
    kind: str  # topic, retry (%RETRY%<group>), pop_retry (%RETRY%<group>_<topic>/+<topic>), lmq
    offset: int | None  # committed; None: no committed offset
    bak_offset: int | None  # the .bak's value when it differs
    bak_note: str | None
    min_offset: int  # the queue on disk (0, 0: no queue, which the broker creates empty)
    max_offset: int
    lag: int | None  # max - offset on disk
    last_consumed_store_timestamp: int | None  # the message at offset - 1 (mqadmin lastTimestamp)
    next_pull: NextPull | None  # against the queue on disk; None: the start is not known
    # With --after-restart, the queue as the restart rebuilds it (None otherwise, or when the
    # broker would not start).
    min_offset_after_restart: int | None
    max_offset_after_restart: int | None
    lag_after_restart: int | None
    next_pull_after_restart: NextPull | None
    pending: int | None  # messages the group still gets from the next pull on (judged view)
    notes: tuple[str, ...]
    findings: tuple[str, ...]  # what makes the row (and its group) flagged
    # Of the pending messages, those the store proves reached the group before (a send-back of
    # theirs is stored): delivered again. A lower bound (a success leaves no trace); None: the
    # group has no retry or DLQ copy to prove anything with.
    delivered_before: int | None = None

    @property
    def flagged(self) -> bool:
        return bool(self.findings)


@dataclass(frozen=True, slots=True)
class MovedEvent:
    """One ``OFFSET_MOVED_EVENT`` record: where it lies and what its body says."""

    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    event: OffsetMovedEvent | None  # None: the body does not decode (see ``problem``)
    problem: str | None


@dataclass(frozen=True, slots=True)
class Group:
    group: str
    subscription: Subscription | None  # None: not in subscriptionGroup.json
    queues: tuple[QueueRow, ...]
    lag: int  # pending messages in the group's topic queues (judged view)
    retry_backlog: int  # pending messages in its %RETRY% and POP retry queues
    replayed: int  # messages the next pulls deliver again
    skipped: int  # messages the next pulls jump over (deleted before they were read)
    dlq_size: int | None  # messages in %DLQ%<group> queue 0; None: no such queue
    dlq_oldest_store_timestamp: int | None
    dlq_oldest_age_ms: int | None  # against the reference time
    moved_events: tuple[MovedEvent, ...]
    findings: tuple[str, ...]
    # Topics its retry or DLQ copies name as their original (RETRY_TOPIC): consumed by it, so
    # read on its next start even without a committed offset.
    topics_from_retry_copies: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    delivered_again: int = 0  # the queues' delivered_before: duplicates the store proves
    # A POP group's checkpoints as ``pop`` reads them (None: it has none): its committed offset
    # moves at pop time, so ``lag`` leaves out what it popped and has not acked (``outstanding``).
    pop: PopGroup | None = None

    @property
    def flagged(self) -> bool:
        return bool(self.findings)


@dataclass(frozen=True, slots=True)
class GroupsReport:
    broker_version: str
    version_basis: str  # "--broker-version" or the profile it was assumed from
    view: str  # "disk" or "after restart": what the findings and totals are judged against
    consume_from_where: str  # how queues without a committed offset are started
    files: tuple[FileUse, ...]
    restart: RestartView | None  # None: not emulated (no --after-restart)
    reference_timestamp: int | None  # the DLQ ages' clock
    reference_basis: str
    groups: tuple[Group, ...]
    known_groups: tuple[str, ...]  # every group found, unfiltered
    moved_event_source: str | None  # how the OFFSET_MOVED_EVENT records were read; None: none
    problems: tuple[str, ...]  # findings outside any group (malformed event bodies, files)

    @property
    def flagged(self) -> bool:
        return bool(self.problems) or any(g.flagged for g in self.groups)
