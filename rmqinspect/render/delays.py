"""Rendering of ``delays``."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from rmqinspect.analysis.delays import DelayLevel, DelaysReport
from rmqinspect.render.output import OutputFormat, print_document, print_table, to_jsonable, warn
from rmqinspect.render.values import time_cell, with_times

NO_LEVELS = "no delay levels in use"


def delays_json(report: DelaysReport) -> dict[str, Any]:
    return with_times(
        {
            "file": to_jsonable(report.file),
            "reference_timestamp": report.reference_timestamp,
            "reference_basis": report.reference_basis,
            "restart": to_jsonable(report.restart),
            "problems": list(report.problems),
            "redelivered": report.redelivered,
            "levels": [
                with_times({**to_jsonable(lv), "flagged": lv.flagged}) for lv in report.levels
            ],
        }
    )


def render_delays(report: DelaysReport, fmt: OutputFormat) -> None:
    f = report.file
    if f is not None:
        if not f.broker_starts:
            # ConfigManager.load fails, so ScheduleMessageService.load does: no broker at all.
            warn(f"{f.name}: the .bak cannot be decoded: the broker refuses to start")
        elif f.source == "bak":
            warn(f"{f.name}: the main file is {f.main_state}; the broker loads the .bak")
        elif f.source == "none":
            warn(f"{f.name}: neither file loads; every level starts at its queue's min")
        for e in f.errors:
            warn(e)
    if report.restart is not None and report.restart.refusal is not None:
        warn(f"offsets judged against the queues on disk: {report.restart.refusal}")
    for p in report.problems:
        warn(f"delayOffset.json: {p}")
    if report.redelivered:
        warn(
            f"{report.redelivered} delayed message(s) already delivered are delivered again "
            "after the restart (delayOffset.json is behind their stored deliveries)"
        )
    if print_document(delays_json(report), fmt):
        return
    if not report.levels:
        print(NO_LEVELS)
        return
    basis = report.reference_basis
    when = (
        time_cell(report.reference_timestamp) if report.reference_timestamp is not None else "none"
    )
    t = Table(
        title=f"Delay levels (SCHEDULE_TOPIC_XXXX); overdue against {when} ({basis})",
        title_justify="left",
    )
    for col in (
        "level",
        "delay",
        "offset",
        "queue",
        "at load",
        "pending",
        "again",
        "oldest stored",
        "next due",
        "last due",
        "overdue",
        "notes",
    ):
        t.add_column(
            col, justify="right" if col in ("level", "offset", "pending", "again") else "left"
        )
    for lv in report.levels:
        t.add_row(
            str(lv.level),
            _delay(lv.delay_ms),
            "" if lv.offset is None else str(lv.offset),
            _queue(lv),
            _at_load(lv),
            str(lv.pending),
            str(lv.redelivered),
            time_cell(lv.oldest_store_timestamp) if lv.oldest_store_timestamp is not None else "",
            time_cell(lv.next_due_timestamp) if lv.next_due_timestamp is not None else "",
            time_cell(lv.last_due_timestamp) if lv.last_due_timestamp is not None else "",
            Text(str(lv.overdue), style="bold red" if lv.overdue else ""),
            "; ".join(lv.notes),
        )
    print_table(t)


def _queue(lv: DelayLevel) -> str:
    """The queue on disk, and at load when the restart's recovery changes it."""
    disk = f"{lv.min_offset}..{lv.max_offset}"
    if lv.min_offset_at_load is None or lv.max_offset_at_load is None:
        return disk
    load = f"{lv.min_offset_at_load}..{lv.max_offset_at_load}"
    after = lv.max_offset_after_dispatch
    if load == disk and after == lv.max_offset:
        return disk
    return f"{disk} (at load {load}, after dispatch ..{after})"


def _delay(ms: int | None) -> str:
    """A delay as messageDelayLevel writes it (``1s``, ``2m``, ``2h``, ``1d``)."""
    if ms is None:
        return "never"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _at_load(lv: DelayLevel) -> Text:
    text = "" if lv.offset_at_load is None else str(lv.offset_at_load)
    if lv.out_of_range is None:
        return Text(text)
    return Text(f"{text} ({lv.out_of_range})", style="bold red")
