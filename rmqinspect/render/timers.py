"""Rendering of ``timers``."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from rmqinspect.analysis.timers import TimersReport
from rmqinspect.render.output import OutputFormat, print_document, print_table, to_jsonable, warn
from rmqinspect.render.values import time_cell, with_times

NO_TIMER_STORE = "no timer store (timerlog/, timerwheel, config/timercheck)"
SHOWN_ENTRIES = 20  # late entries listed in a table; JSON lists every entry


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
    topics = Table(title="Pending timers by real topic", title_justify="left")
    for col in (
        "topic",
        "pending",
        "overdue",
        "restart skips",
        "due",
        "rolling",
        "next fire",
        "last fire",
        "delivered",
        "recalled",
        "timermetrics",
    ):
        topics.add_column(
            col, justify="left" if col in ("topic", "next fire", "last fire") else "right"
        )
    for row in report.topics:
        topics.add_row(
            row.real_topic,
            str(row.pending),
            Text(str(row.overdue), style="bold red" if row.overdue else ""),
            Text(str(row.skipped_by_restart), style="bold red" if row.skipped_by_restart else ""),
            str(row.due),
            str(row.rolling),
            time_cell(row.next_fire_timestamp),
            time_cell(row.last_fire_timestamp),
            str(row.delivered),
            str(row.recalled),
            "" if row.metrics_count is None else str(row.metrics_count),
        )
    print_table(topics)
    wheel = Table(title="Wheel occupancy (slot time - read time)", title_justify="left")
    for col in ("ahead", "slots", "units"):
        wheel.add_column(col, justify="left" if col == "ahead" else "right")
    for b in report.histogram:
        wheel.add_row(b.label, str(b.slots), str(b.units))
    print_table(wheel)
    late = [e for e in report.entries if e.late in ("overdue", "skipped_by_restart")]
    if late:
        t = Table(title=f"Late entries ({len(late)}; first {SHOWN_ENTRIES})", title_justify="left")
        for col in ("timerlog offset", "late", "topic", "uniq key", "slot time", "fire time"):
            t.add_column(col)
        for e in late[:SHOWN_ENTRIES]:
            t.add_row(
                str(e.timerlog_offset),
                Text(str(e.late), style="bold red"),
                e.real_topic or "",
                e.uniq_key or "",
                time_cell(e.slot_timestamp),
                time_cell(e.fire_timestamp),
            )
        print_table(t)
    if report.findings:
        t = Table(title="Findings", title_justify="left")
        for col in ("kind", "where", "message"):
            t.add_column(col)
        for f in report.findings:
            where = f.path if f.position is None else f"{f.path} @{f.position}"
            t.add_row(f.kind, where, f.message)
        print_table(t)
