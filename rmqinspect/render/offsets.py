"""Rendering of ``offsets``."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from rmqinspect.analysis.offsets import OffsetsReport, OffsetStatus
from rmqinspect.render.output import (
    OutputFormat,
    print_json,
    print_jsonl,
    print_table,
    to_jsonable,
    warn,
)


def offsets_json(report: OffsetsReport) -> dict[str, Any]:
    return {
        "files": [to_jsonable(f) for f in report.files],
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
    if fmt is OutputFormat.JSON:
        print_json(offsets_json(report))
        return
    if fmt is OutputFormat.JSONL:
        print_jsonl(report.rows)
        return
    t = Table(title="Committed offsets", title_justify="left")
    for col in ("group", "topic", "queue", "offset", "min", "max", "lag", "status", ".bak"):
        t.add_column(
            col, justify="right" if col in ("queue", "offset", "min", "max", "lag") else "left"
        )
    for r in report.rows:
        group = r.group if r.group is not None else f"(delay level {r.delay_level})"
        t.add_row(
            group,
            r.topic,
            str(r.queue_id),
            str(r.offset),
            _opt(r.min_offset),
            _opt(r.max_offset),
            _opt(r.lag),
            Text(r.status.value, style="" if r.status is OffsetStatus.OK else "bold red"),
            r.bak_note or "",
        )
    print_table(t)


def _opt(v: int | None) -> str:
    return "" if v is None else str(v)
