"""What ``timers`` (:mod:`rmqinspect.analysis.timers`) reports: the timerlog's entries and recall
markers, each real topic's pending timers, the wheel's occupancy and the findings."""

from __future__ import annotations

from dataclasses import dataclass

from rmqinspect.format import timer


@dataclass(frozen=True, slots=True)
class TimerEntry:
    timerlog_offset: int
    physical_offset: int  # the unit's offsetPy
    store_size: int  # the unit's sizePy
    magic: int
    slot_timestamp: int  # currWriteTimeMs + delayed offset: the slot the unit sits in
    write_timestamp: int  # currWriteTimeMs
    state: str  # pending, delivered, recalled, rolled, unreadable (no timer record there)
    late: str | None  # pending only: overdue, skipped_by_restart, due or None (ahead)
    real_topic: str | None = None
    real_queue_id: int | None = None
    uniq_key: str | None = None
    fire_timestamp: int | None = None  # TIMER_OUT_MS
    queue_offset: int | None = None  # in rmq_sys_wheel_timer
    roll_times: int = 0  # TIMER_ROLL_TIMES of its record

    @property
    def rolls(self) -> bool:
        return bool(self.magic & timer.MAGIC_ROLL)


@dataclass(frozen=True, slots=True)
class Recall:
    timerlog_offset: int
    physical_offset: int
    slot_timestamp: int
    target: str  # TIMER_DEL_UNIQKEY: <topic>+<uniqKey>
    matched: bool  # an entry of the timerlog carries that key
    queue_offset: int | None = None  # the marker's, in rmq_sys_wheel_timer
    magic: int | None = None  # the unit's (MAGIC_DELETE, with MAGIC_ROLL when it rolls)


@dataclass(frozen=True, slots=True)
class TopicTimers:
    real_topic: str
    pending: int
    overdue: int
    skipped_by_restart: int
    due: int
    rolling: int  # pending entries that roll again when their slot fires
    next_fire_timestamp: int | None
    last_fire_timestamp: int | None
    delivered: int
    recalled: int
    metrics_count: int | None  # config/timermetrics' count for the topic


@dataclass(frozen=True, slots=True)
class WheelBucket:
    label: str
    slots: int
    units: int  # the slots' num: normal units minus recall markers


@dataclass(frozen=True, slots=True)
class TimerFinding:
    kind: str
    path: str  # the file it is about (a directory when no one file is)
    position: int | None  # the byte position in it (a unit's, a slot's), when one applies
    message: str


@dataclass(frozen=True, slots=True)
class TimerCheckView:
    last_read_timestamp: int
    last_timer_log_flush_pos: int
    last_timer_queue_offset: int
    master_timer_queue_offset: int
    data_version_counter: int
    data_version_timestamp: int


@dataclass(frozen=True, slots=True)
class TimersReport:
    present: bool  # False: the store has no timer store
    timercheck: TimerCheckView | None
    reference_timestamp: int | None
    reference_basis: str
    restart_read_timestamp: int | None  # where a restart at the reference time resumes reading
    timerlog_units: int
    timerlog_end: int
    timerlog_end_kind: str
    wheel_slots_used: int
    wheel_slots_valid: int  # used slots whose stored time is one of theirs
    timer_queue_min_offset: int | None
    timer_queue_max_offset: int | None
    not_enqueued: int  # timer-topic messages past lastTimerQueueOffset (the restart enqueues them)
    commitlog_end: int  # where the last record the walk found ends
    counts: dict[str, int]
    topics: tuple[TopicTimers, ...]
    histogram: tuple[WheelBucket, ...]
    entries: tuple[TimerEntry, ...]
    recalls: tuple[Recall, ...]
    findings: tuple[TimerFinding, ...]
    notes: tuple[str, ...] = ()

    @property
    def flagged(self) -> bool:
        """What ``timers`` exits 1 for: findings, and pending entries the wheel passed or a
        restart would skip."""
        return bool(self.findings) or any(
            e.late in ("overdue", "skipped_by_restart") for e in self.entries
        )
