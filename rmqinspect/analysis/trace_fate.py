"""What each consumer group makes of a message's copies, for ``trace``
(:mod:`rmqinspect.analysis.trace`): consumed, pending, waiting in a delay level or the timer,
dead-lettered, never delivered, or lost by the restart."""

from __future__ import annotations

from dataclasses import replace

from rmqinspect.analysis.offsets import ConsumeFromWhere, start_without_offset
from rmqinspect.analysis.pop import pop_outcome
from rmqinspect.analysis.queues import queue_bounds
from rmqinspect.analysis.trace_model import Copy, GroupFate, Restart
from rmqinspect.format.fate import RETRY_PREFIX, Role, dlq_topic, retry_topic
from rmqinspect.format.times import iso_ms
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store

# Copies in the topic the producer sent to that a consumer of it receives.
_DELIVERED = frozenset({Role.ORIGINAL, Role.SCHEDULED_DELIVERY, Role.COMMIT, Role.TIMER_DELIVERY})


def base_topic(copies: list[Copy]) -> str | None:
    for c in copies:
        if c.role in _DELIVERED:
            return c.topic
    for c in copies:
        if c.retry_topic is not None:
            return c.retry_topic
        if c.role in (Role.SCHEDULE, Role.HALF, Role.TIMER) and c.real_topic is not None:
            return c.real_topic
    return None


def group_fate(
    store: Store, group: str, base: str | None, copies: list[Copy], where: ConsumeFromWhere
) -> GroupFate:
    retry = retry_topic(group)
    dlq = next((c for c in copies if c.topic == dlq_topic(group)), None)
    if dlq is not None:
        attempts = dlq.reconsume_times
        return GroupFate(
            group,
            "dlq",
            max(attempts - 1, 0),
            attempts,
            f"moved to {dlq.topic} after {attempts} attempts" + _dlq_restart_words(dlq),
        )
    delivered = [
        c
        for c in copies
        if (c.topic == base and c.role in _DELIVERED) or (c.role is Role.RETRY and c.group == group)
    ]
    w = waiting_copy(copies, (retry, base), delivered)
    if w is not None:
        return GroupFate(
            group,
            "in_delay",
            w.reconsume_times,
            w.reconsume_times,
            wait_words(w, retry) + _restart_words(w, group),
        )
    if not delivered:
        return GroupFate(group, "not_delivered", 0, 0, f"no copy for {group} on disk")
    last = delivered[-1]
    retries = last.reconsume_times if last.role is Role.RETRY else 0
    state = next((s for s in last.groups if s.group == group), None)
    where_text = f"{last.topic}:{last.queue_id} offset {last.queue_offset}"
    if state is None:
        return _uncommitted_fate(store, group, last, retries, where)
    if state.consumed:
        after = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
        return GroupFate(group, "consumed", retries, retries + 1, f"consumed by {group}{after}")
    lost = _restart_words(last, group)
    return GroupFate(
        group,
        "lost_by_restart" if lost else "pending",
        retries,
        retries + 1,
        f"pending for {group} at {where_text} (committed offset {state.committed_offset})" + lost,
    )


def _uncommitted_fate(
    store: Store, group: str, last: Copy, retries: int, where: ConsumeFromWhere
) -> GroupFate:
    """The group has no committed offset on the copy's queue: it reads the queue from where
    :func:`start_without_offset` says (getMessage moves a start below the min up to it)."""
    qid = QueueId(last.topic, last.queue_id)
    b = queue_bounds(store, qid) if qid in store.queue_dirs else None
    lo, hi = (0, 0) if b is None else (b.min_offset, b.max_offset)
    retry = last.topic.startswith(RETRY_PREFIX)
    start = start_without_offset(retry, where, lo, hi)
    at = f"{last.topic}:{last.queue_id} offset {last.queue_offset}"
    text = start.basis.removeprefix("no committed offset: ")
    head = f"{group} has no committed offset on {last.topic}:{last.queue_id}"
    if start.offset is None:
        return GroupFate(
            group,
            "pending",
            retries,
            retries + 1,
            f"{head}: the copy at {at} is not known to be consumed" + _restart_words(last, group),
        )
    begin = max(start.offset, lo)
    if last.queue_offset < begin:
        return GroupFate(
            group,
            "not_delivered",
            retries,
            retries,
            f"{head}: it starts at {begin} ({text}), past the copy at {at}: never delivered",
        )
    return GroupFate(
        group,
        "pending",
        retries,
        retries + 1,
        f"{head}: it starts at {begin} ({text}) and gets the copy at {at}, again if it "
        "consumed it before" + _restart_words(last, group),
    )


def waiting_copy(
    copies: list[Copy], real_topics: tuple[str | None, ...], delivered: list[Copy]
) -> Copy | None:
    """The newest schedule copy bound for one of ``real_topics`` that the schedule service has
    not delivered (delayOffset.json is not past it and no later copy with its reconsume count
    was stored), or timer copy whose unit is pending."""
    waiting = [
        c
        for c in copies
        if (
            c.role is Role.SCHEDULE
            and c.real_topic in real_topics
            and c.delivered is not True
            and not any(
                d.physical_offset > c.physical_offset and d.reconsume_times == c.reconsume_times
                for d in delivered
            )
        )
        or (c.real_topic in real_topics and c.timer is not None and c.timer.state == "pending")
    ]
    return waiting[-1] if waiting else None


def wait_words(w: Copy, retry: str | None) -> str:
    what = "the retry copy" if retry is not None and w.real_topic == retry else "the message"
    if w.timer is not None:
        fire = iso_ms(w.fire_timestamp) or w.fire_timestamp
        return f"{what} waits in the timer until {fire}"
    due = "" if w.due_timestamp is None else f" until {iso_ms(w.due_timestamp) or w.due_timestamp}"
    return f"{what} waits in delay level {w.delay_level}{due}"


def _restart_words(c: Copy, group: str) -> str:
    name = "retry copy" if c.role is Role.RETRY else f"{c.role.value.replace('_', ' ')} copy"
    if c.restart is Restart.CUT:
        return f"; the restart cuts the {name}: {group} will never see it"
    if c.restart is Restart.QUEUE_ENTRY_LOST:
        return (
            f"; the restart keeps the {name} but no queue entry serves it: "
            f"{group} will never see it"
        )
    return ""


def _dlq_restart_words(c: Copy) -> str:
    """No group consumes a DLQ copy, so what its loss means is that the DLQ will not hold it."""
    if c.restart is Restart.CUT:
        return f"; the restart cuts the DLQ copy: {c.topic} will not hold it"
    if c.restart is Restart.QUEUE_ENTRY_LOST:
        return f"; the restart keeps the DLQ copy but no queue entry of {c.topic} serves it"
    return ""


def pop_fate(fate: GroupFate, copies: list[Copy]) -> GroupFate:
    """A POP group's fate from its newest popped copy's checkpoint, where it has one."""
    for c in reversed(copies):
        said = pop_outcome(fate.group, list(c.pops))
        if said is None:
            continue
        outcome, words = said
        if outcome != "consumed":
            return replace(fate, outcome=outcome, summary=f"{fate.group}: {words}")
        head = fate.summary if fate.outcome == "consumed" else f"consumed by {fate.group}"
        return replace(fate, outcome=outcome, summary=f"{head} ({words})")
    return fate
