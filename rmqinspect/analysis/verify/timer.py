"""The 5.x timer store's checks: the findings of ``timers`` (:mod:`rmqinspect.analysis.timers`,
where the rules live) as verify checks. Entries overdue or skipped by a restart are not damage
and need a clock: ``timers`` reports them, verify does not."""

from __future__ import annotations

from rmqinspect.analysis.timers import timers_report
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.finding import Findings
from rmqinspect.store.timer import has_timer_store

_CHECK_OF = {
    "timerlog.cycle": "timer.chain",
    "timerlog.chain_into_other_slot": "timer.chain",
    "timerlog.chain_outside_log": "timer.chain",
    "wheel.slot_time_mismatch": "timer.slot",
    "wheel.wrong_size": "timer.slot",
    "wheel.unreadable": "timer.slot",
    "timerlog.past_commitlog_end": "timer.points_past_end",
    "timerlog.not_timer_record": "timer.no_record",
}


def check_timer(ctx: Context, findings: Findings) -> None:
    """The timerlog as the broker's recovery reads it, every wheel slot and its chain, every
    unit against the record it points at, timercheck against the log and the timer queue. It
    walks the commitlog once more (for the timer-topic records), only where a timer store is."""
    if not has_timer_store(ctx.store.root):
        return
    for f in timers_report(ctx.store).findings:
        check = _CHECK_OF.get(f.kind)
        if check is None:
            # The log's own damage (timerlog.*) and timercheck's (timercheck.*).
            check = "timer.log" if f.kind.startswith("timerlog.") else "timer.checkpoint"
        findings.add(check, ctx.rel(f.path), f.message, file_position=f.position)
