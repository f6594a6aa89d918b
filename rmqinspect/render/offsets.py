"""Rendering of ``offsets``."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from rmqinspect.analysis.offsets import OffsetsReport, OffsetStatus
from rmqinspect.render.output import (
    OutputFormat,
    print_jsonl,
    print_plain_json,
    print_table,
    to_jsonable,
    warn,
)


def offsets_json(report: OffsetsReport) -> dict[str, Any]:
    return {
        "files": [to_jsonable(f) for f in report.files],
        "restart": to_jsonable(report.restart),
        "offsets": [to_jsonable(r) for r in report.rows],
    }


def render_offsets(report: OffsetsReport, fmt: OutputFormat) -> None:
    for f in report.files:
        if f.source == "bak":
            warn(f"{f.name}: the main file is {f.main_state}; the broker loads the .bak")
        elif f.source == "none":
            warn(f"{f.name}: neither file loads; the broker starts with an empty table")
        if f.bak_differs:
            warn(f"{f.name}: .bak (the previous generation) differs from the main file")
        if not f.broker_starts:
            warn(f"{f.name}: the .bak cannot be decoded: the broker refuses to start")
        for e in f.errors:
            warn(e)
    flagged = [r for r in report.rows if r.status is not OffsetStatus.OK]
    if flagged:
        warn(f"{len(flagged)} offset(s) outside their queue's [min, max] or without a queue")
    restart = report.restart
    if restart is not None and restart.refusal is not None:
        warn(f"no lag after the restart: {restart.refusal}")
    after = [r for r in report.rows if r.status_after_restart not in (None, OffsetStatus.OK)]
    if after:
        warn(f"{len(after)} offset(s) outside their queue's [min, max] after the restart")
    if fmt is OutputFormat.JSON:
        print_plain_json(offsets_json(report))  # plain already: not walked a second time
        return
    if fmt is OutputFormat.JSONL:
        print_jsonl(report.rows)
        return
    path = f"{restart.recovery_path} recovery" if restart is not None else "not emulated"
    t = Table(
        title=f"Committed offsets against the queues on disk and after the restart ({path})",
        title_justify="left",
    )
    for col in (
        "group",
        "topic",
        "queue",
        "offset",
        "on disk",
        "lag",
        "status",
        "after restart",
        "lag",
        "status",
        ".bak",
    ):
        t.add_column(col, justify="right" if col in ("queue", "offset", "lag") else "left")
    for r in report.rows:
        group = r.group if r.group is not None else f"(delay level {r.delay_level})"
        t.add_row(
            group,
            r.topic,
            str(r.queue_id),
            str(r.offset),
            _range(r.min_offset, r.max_offset),
            _opt(r.lag),
            _status(r.status),
            _range(r.min_offset_after_start, r.max_offset_after_dispatch),
            _opt(r.lag_after_restart),
            _status(r.status_after_restart),
            r.bak_note or "",
        )
    print_table(t)


def _range(low: int | None, high: int | None) -> str:
    return "" if low is None or high is None else f"{low}..{high}"


def _status(status: OffsetStatus | None) -> Text:
    if status is None:
        return Text("")
    return Text(status.value, style="" if status is OffsetStatus.OK else "bold red")


def _opt(v: int | None) -> str:
    return "" if v is None else str(v)
