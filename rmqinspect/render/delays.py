"""Rendering of ``delays``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmqinspect.analysis.delays import DelayLevel, DelaysReport
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
        if report.flagged:
            print_table(delays_verdict(report))
        return
    basis = report.reference_basis
    when = (
        time_cell(report.reference_timestamp) if report.reference_timestamp is not None else "none"
    )
    print_table(_levels_table(report, f"{when} ({basis})"))
    print_table(delays_verdict(report))


def _levels_table(report: DelaysReport, against: str) -> RowTable:
    """One row per level. At a narrow width the oldest store time, the last due time, the
    redelivered count, the queue's bounds, the next due time and the delay make way; levels,
    offsets, what the load does and the overdue count stay, and times are never cut."""
    # A cell that reads as a finding is red: the texts of this report's flagged cells.
    red = "bold red"
    t = RowTable(
        f"Delay levels (SCHEDULE_TOPIC_XXXX); overdue against {against}",
        [
            Column("level", right=True, whole=True),
            Column("delay", whole=True, drop=4),
            Column("offset", right=True, whole=True),
            Column("queue", whole=True, drop=6),
            Column(
                "at load",
                whole=True,
                styles={_at_load(lv): red for lv in report.levels if lv.out_of_range},
            ),
            Column("pending", right=True, whole=True),
            Column("again", right=True, whole=True, drop=7),
            Column("oldest stored", whole=True, drop=9),
            Column("next due", whole=True, drop=5),
            Column("last due", whole=True, drop=8),
            Column(
                "overdue",
                whole=True,
                styles={str(lv.overdue): red for lv in report.levels if lv.overdue},
            ),
            Column("notes", fold=True, least=16),
        ],
    )
    for lv in report.levels:
        t.add_row(
            lv.level,
            _delay(lv.delay_ms),
            lv.offset,
            _queue(lv),
            _at_load(lv),
            lv.pending,
            lv.redelivered,
            time_cell(lv.oldest_store_timestamp),
            time_cell(lv.next_due_timestamp),
            time_cell(lv.last_due_timestamp),
            lv.overdue,
            "; ".join(lv.notes),
        )
    return t


def delays_verdict(report: DelaysReport) -> Text:
    """The last line: the flagged levels (what ``delays`` exits 1 for) and why, or that none
    is; deliveries the restart repeats make it a doubt."""
    said = []
    for lv in report.levels:
        if not lv.flagged:
            continue
        why = [f"{lv.overdue} overdue"] if lv.overdue else []
        if lv.out_of_range is not None:
            why.append(f"offset {lv.out_of_range}")
        if lv.delay_ms is None and lv.pending:
            why.append(f"{lv.pending} pending past the last delay level")
        said.append(f"level {lv.level} ({', '.join(why)})")
    if report.file is not None and report.file.errors:
        said.append(f"{report.file.name} does not load")
    again = (
        f"; {report.redelivered} delivered again after the restart" if report.redelivered else ""
    )
    if said:
        return verdict_line(f"{len(said)} flagged: " + ", ".join(said) + again, "bad")
    levels = f"no level overdue, out of range or undeliverable ({len(report.levels)} level(s))"
    return verdict_line(levels + again, "doubt" if again else "good")


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


def _at_load(lv: DelayLevel) -> str:
    text = "" if lv.offset_at_load is None else str(lv.offset_at_load)
    return text if lv.out_of_range is None else f"{text} ({lv.out_of_range})"
