"""Rendering of ``offsets``."""

from __future__ import annotations

from typing import Any

from rmqinspect.analysis.offsets import OffsetsReport, OffsetStatus
from rmqinspect.analysis.offsets_at import OffsetAtTime, OffsetsAtReport
from rmqinspect.format.times import iso_ms
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    print_document,
    print_jsonl,
    print_plain_json,
    print_plain_jsonl,
    print_table,
    to_jsonable,
    warn,
)
from rmqinspect.render.values import with_times


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
    print_table(_offsets_table(report, path))


# A status that is no "ok" reads as a finding.
_STATUS_STYLES = {s.value: "bold red" for s in OffsetStatus if s is not OffsetStatus.OK}


def _offsets_table(report: OffsetsReport, path: str) -> RowTable:
    """One row per committed offset. At a narrow width the lags (the range says them), the
    .bak note and the ranges make way; without a restart emulated its empty columns go first.
    Groups, topics and offsets are never cut."""
    # Highest first: what goes first at a narrow width (after restart's columns, when no
    # restart was emulated and they are empty, else the view on disk's).
    emulated = report.restart is not None
    disk = (4, 9, 3) if emulated else (1, 6, 0)  # range, lag, status
    after = (2, 8, 0) if emulated else (7, 10, 9)
    t = RowTable(
        f"Committed offsets against the queues on disk and after the restart ({path})",
        [
            Column("group", whole=True),
            Column("topic", whole=True),
            Column("queue", right=True, whole=True),
            Column("offset", right=True, whole=True),
            Column("on disk", whole=True, drop=disk[0]),
            Column("lag", right=True, whole=True, drop=disk[1]),
            Column("status", whole=True, styles=_STATUS_STYLES, drop=disk[2]),
            Column("after restart", whole=True, drop=after[0]),
            # Named apart from the view on disk's: at a narrow width one status may be alone.
            Column("lag after", right=True, whole=True, drop=after[1]),
            Column("status after", whole=True, styles=_STATUS_STYLES, drop=after[2]),
            Column(".bak", drop=5),
        ],
    )
    for r in report.rows:
        group = r.group if r.group is not None else f"(delay level {r.delay_level})"
        t.add_row(
            group,
            r.topic,
            r.queue_id,
            r.offset,
            _range(r.min_offset, r.max_offset),
            r.lag,
            _status(r.status),
            _range(r.min_offset_after_start, r.max_offset_after_dispatch),
            r.lag_after_restart,
            _status(r.status_after_restart),
            r.bak_note,
        )
    return t


def _range(low: int | None, high: int | None) -> str:
    return "" if low is None or high is None else f"{low}..{high}"


def _status(status: OffsetStatus | None) -> str:
    return "" if status is None else status.value


def offsets_at_json(report: OffsetsAtReport) -> dict[str, Any]:
    return {
        **with_times({"at_timestamp": report.timestamp}),
        "group": report.group,
        "queues": [_at_row(r) for r in report.queues],
    }


def _at_row(r: OffsetAtTime) -> dict[str, Any]:
    return {
        "topic": r.topic,
        "queue_id": r.queue_id,
        "min_offset": r.min_offset,
        "max_offset": r.max_offset,
        "offset": r.offset,
        **with_times({"store_timestamp": r.store_timestamp}),
        "committed_offset": r.committed_offset,
        "moves_by": r.moves_by,
    }


def render_offsets_at(report: OffsetsAtReport, fmt: OutputFormat) -> None:
    if fmt is OutputFormat.JSONL:
        print_plain_jsonl(_at_row(r) for r in report.queues)
        return
    if print_document(offsets_at_json(report), fmt):
        return
    who = f" and {report.group}'s committed offsets" if report.group is not None else ""
    t = RowTable(
        f"First offset stored at or after {iso_ms(report.timestamp)} per queue{who}",
        [
            Column("topic", whole=True),
            Column("queue", right=True, whole=True),
            Column("offset", right=True, whole=True),
            Column("its store time", whole=True, drop=3),
            Column("min..max", whole=True, drop=4),
            Column("committed", right=True, whole=True, drop=2),
            Column("moves by", right=True, whole=True, drop=1),
        ],
    )
    for r in report.queues:
        t.add_row(
            r.topic,
            r.queue_id,
            r.offset,
            "" if r.store_timestamp is None else iso_ms(r.store_timestamp),
            _range(r.min_offset, r.max_offset),
            r.committed_offset,
            r.moves_by,
        )
    print_table(t)
