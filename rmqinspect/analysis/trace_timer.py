"""``trace`` through the 5.x timer: each timer-topic copy of a message with its timerlog unit
and the state ``timers`` gives it (:mod:`rmqinspect.analysis.timers`, the one home of the timer
rules), and the chain's timer line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rmqinspect.analysis import Progress
from rmqinspect.analysis.timers import timers_report
from rmqinspect.format.fate import Role
from rmqinspect.format.times import iso_ms
from rmqinspect.store.model import Store

TIMER_ROLES = frozenset({Role.TIMER, Role.TIMER_ROLL, Role.TIMER_RECALL})


@dataclass(frozen=True, slots=True)
class TimerUnit:
    """A timer-topic copy's timerlog unit: where it sits and what became of it."""

    timerlog_offset: int
    slot_timestamp: int  # the slot the unit sits in (a roll unit: its roll time)
    magic: int | None
    state: str  # pending, delivered, recalled, rolled, unreadable; recall_marker for a recall
    late: str | None  # pending only: overdue, skipped_by_restart, due


def timer_units(
    store: Store, positions: Iterable[int], progress: Progress | None = None
) -> dict[int, TimerUnit]:
    """The unit of each timer-topic record at ``positions`` (physical offsets); a record no
    unit points at is missing (the timer has not enqueued it, or the timerlog lost it)."""
    wanted = set(positions)
    if not wanted:
        return {}
    report = timers_report(store, None, progress)
    out = {
        e.physical_offset: TimerUnit(e.timerlog_offset, e.slot_timestamp, e.magic, e.state, e.late)
        for e in report.entries
        if e.physical_offset in wanted
    }
    out |= {
        r.physical_offset: TimerUnit(
            r.timerlog_offset, r.slot_timestamp, r.magic, "recall_marker", None
        )
        for r in report.recalls
        if r.physical_offset in wanted
    }
    return out


def timer_line(roles: list[Role], units: list[TimerUnit | None], fire: int | None) -> str:
    """The chain's fate through the timer, in words."""
    rolls = sum(r is Role.TIMER_ROLL for r in roles)
    head = f"timer message firing at {iso_ms(fire)}" if fire is not None else "timer message"
    parts = [head]
    if rolls:
        parts.append(f"rolled {rolls} time{'' if rolls == 1 else 's'}")
    if Role.TIMER_RECALL in roles:
        parts.append("recalled")
    if Role.TIMER_DELIVERY in roles:
        parts.append("delivered to its real topic")
    else:
        last = next(
            (u for r, u in zip(reversed(roles), reversed(units), strict=True)
             if r in (Role.TIMER, Role.TIMER_ROLL)),
            None,
        )  # fmt: skip
        if last is None:
            parts.append("no timerlog unit points at it: the timer never enqueued it")
        elif last.state == "pending":
            parts.append("pending" + (f" ({last.late.replace('_', ' ')})" if last.late else ""))
        elif last.state == "unreadable":
            parts.append("its timerlog unit points at no timer record")
    return ", ".join(parts)
