"""``report``: the incident as one self-contained HTML page (:mod:`.page`, :mod:`.storemap`,
:mod:`.sections`), and what the command prints about it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rmqinspect.analysis.report import IncidentReport
from rmqinspect.render.output import (
    OutputFormat,
    key_value_table,
    print_json,
    print_jsonl,
    print_table,
)
from rmqinspect.render.report.page import PageMeta, page
from rmqinspect.render.report.sections import MAX_LOST_ROWS

__all__ = ["PageMeta", "page", "render_report", "report_json"]


def report_json(report: IncidentReport, out: Path, written: int) -> dict[str, Any]:
    """What the page shows, counted: the same numbers as the JSON of the commands it names."""
    lost = report.recovery.lost_messages
    summary = report.verify.summary
    return {
        "out": str(out),
        "bytes": written,
        "verdict": report.verdict,
        "recover_verdict": report.recovery.verdict,
        "broker_starts": report.recovery.broker_starts,
        "commitlog_files": len(report.files),
        "lost_messages": lost.count if lost is not None else None,
        "lost_rows": min(lost.count, MAX_LOST_ROWS) if lost is not None else 0,
        "lost_by_topic": report.lost_by_topic,
        "damaged_records": lost.damaged_records if lost is not None else None,
        "findings": summary.findings,
        "findings_by_check": summary.findings_by_check,
        "replaying_groups": {g.group: g.replayed for g in report.replaying},
        "queues": len(report.queues),
        "salvage": None if report.salvage is None else report.salvage.counts,
        "flagged": report.flagged,
    }


def render_report(report: IncidentReport, out: Path, written: int, fmt: OutputFormat) -> None:
    doc = report_json(report, out, written)
    if fmt is OutputFormat.JSON:
        print_json(doc)
        return
    if fmt is OutputFormat.JSONL:
        print_jsonl([doc])
        return
    rows: list[tuple[str, Any]] = [
        ("written", f"{out} ({written:,} bytes)"),
        ("verdict", report.verdict),
        ("commitlog files", doc["commitlog_files"]),
        ("lost messages", doc["lost_messages"]),
        ("findings", doc["findings"]),
        ("groups replaying", len(doc["replaying_groups"])),
    ]
    print_table(key_value_table("Incident report", rows))
