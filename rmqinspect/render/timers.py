"""Rendering of ``timers``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

from rmqinspect.analysis.timers import TimersReport
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    print_document,
    print_table,
    to_jsonable,
    verdict_line,
    warn,
)
from rmqinspect.render.values import time_cell, with_times

if TYPE_CHECKING:
    from rich.text import Text

NO_TIMER_STORE = "no timer store (timerlog/, timerwheel, config/timercheck)"


def timers_json(report: TimersReport) -> dict[str, Any]:
    doc = to_jsonable(report)
    doc["timercheck"] = None if report.timercheck is None else with_times(doc["timercheck"])
    doc["topics"] = [with_times(t) for t in doc["topics"]]
    doc["entries"] = [with_times(e) for e in doc["entries"]]
    doc["recalls"] = [with_times(r) for r in doc["recalls"]]
    doc["flagged"] = report.flagged
    out: dict[str, Any] = with_times(doc)
    return out


def render_timers(report: TimersReport, fmt: OutputFormat) -> None:
    for note in report.notes:
        warn(note)
    if print_document(timers_json(report), fmt):
        return
    if not report.present:
        print(NO_TIMER_STORE)
        return
    cp = report.timercheck
    summary = Table(title="Timer store", title_justify="left", show_header=False)
    summary.add_column("what")
    summary.add_column("value")
    if cp is not None:
        summary.add_row("timercheck lastReadTimeMs", time_cell(cp.last_read_timestamp))
        summary.add_row("timercheck lastTimerLogFlushPos", str(cp.last_timer_log_flush_pos))
        summary.add_row("timercheck lastTimerQueueOffset", str(cp.last_timer_queue_offset))
    summary.add_row(
        "timerlog",
        f"{report.timerlog_units} unit(s), ends at {report.timerlog_end} "
        f"({report.timerlog_end_kind})",
    )
    queue = (
        "none"
        if report.timer_queue_max_offset is None
        else f"{report.timer_queue_min_offset}..{report.timer_queue_max_offset}"
    )
    summary.add_row("rmq_sys_wheel_timer queue 0", queue)
    summary.add_row(
        "wheel", f"{report.wheel_slots_used} slot(s) used, {report.wheel_slots_valid} valid"
    )
    when = time_cell(report.reference_timestamp) if report.reference_timestamp else "none"
    summary.add_row("reference time", f"{when} ({report.reference_basis})")
    if report.restart_read_timestamp is not None:
        summary.add_row("a restart reads from", time_cell(report.restart_read_timestamp))
    summary.add_row("entries", ", ".join(f"{k} {v}" for k, v in report.counts.items()))
    print_table(summary)
    print_table(_topics_table(report))
    wheel = RowTable(
        "Wheel occupancy (slot time - read time)",
        [Column("ahead", whole=True), Column("slots", right=True), Column("units", right=True)],
    )
    for b in report.histogram:
        wheel.add_row(b.label, b.slots, b.units)
    print_table(wheel)
    late = [e for e in report.entries if e.late in ("overdue", "skipped_by_restart")]
    if late:
        # A terminal is shown the head of a long list; piped, every entry.
        t = RowTable(
            f"Late entries ({len(late)})",
            [
                Column("timerlog offset", whole=True),
                Column("late", whole=True, styles=_LATE_STYLES),
                Column("topic", whole=True, drop=1),
                Column("uniq key", whole=True),
                Column("slot time", whole=True, drop=3),
                Column("fire time", whole=True, drop=2),
            ],
            capped_on_terminal=True,
        )
        for e in late:
            t.add_row(
                e.timerlog_offset,
                e.late,
                e.real_topic,
                e.uniq_key,
                time_cell(e.slot_timestamp),
                time_cell(e.fire_timestamp),
            )
        print_table(t)
    if report.findings:
        t = RowTable(
            "Findings",
            [
                Column("kind", whole=True),
                Column("where", whole=True, breaks="/"),
                Column("message", fold=True, least=24),
            ],
            capped_on_terminal=True,
        )
        for f in report.findings:
            t.add_row(
                f.kind, f.path if f.position is None else f"{f.path} @{f.position}", f.message
            )
        print_table(t)
    print_table(timers_verdict(report))


_LATE_STYLES = {"overdue": "bold red", "skipped_by_restart": "bold red"}


def _topics_table(report: TimersReport) -> RowTable:
    """One row per real topic. At a narrow width timermetrics' count, the recalled and rolling
    counts, the last fire time, the delivered and the due counts make way; topics and times are
    never cut."""
    red = "bold red"
    topics = RowTable(
        "Pending timers by real topic",
        [
            Column("topic", whole=True),
            Column("pending", right=True, whole=True),
            Column(
                "overdue",
                right=True,
                whole=True,
                styles={str(r.overdue): red for r in report.topics if r.overdue},
            ),
            Column(
                "restart skips",
                right=True,
                whole=True,
                styles={
                    str(r.skipped_by_restart): red for r in report.topics if r.skipped_by_restart
                },
            ),
            Column("due", right=True, whole=True, drop=3),
            Column("rolling", right=True, whole=True, drop=6),
            Column("next fire", whole=True),
            Column("last fire", whole=True, drop=5),
            Column("delivered", right=True, whole=True, drop=4),
            Column("recalled", right=True, whole=True, drop=7),
            Column("timermetrics", right=True, whole=True, drop=8),
        ],
    )
    for row in report.topics:
        topics.add_row(
            row.real_topic,
            row.pending,
            row.overdue,
            row.skipped_by_restart,
            row.due,
            row.rolling,
            time_cell(row.next_fire_timestamp),
            time_cell(row.last_fire_timestamp),
            row.delivered,
            row.recalled,
            row.metrics_count,
        )
    return topics


def timers_verdict(report: TimersReport) -> Text:
    """The last line: the overdue and skipped entries and the findings (what ``timers`` exits
    1 for), or that there are none."""
    overdue = sum(e.late == "overdue" for e in report.entries)
    skipped = sum(e.late == "skipped_by_restart" for e in report.entries)
    said = f"{overdue} overdue, {skipped} skipped by the restart, {len(report.findings)} finding(s)"
    if report.flagged:
        return verdict_line(said, "bad")
    return verdict_line(f"nothing late, no findings ({len(report.entries)} entries)", "good")
