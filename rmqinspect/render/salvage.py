"""What ``salvage`` prints: its report (also written as ``report.json`` by
:class:`~rmqinspect.export.salvage.SalvageWriter`) as JSON, or as tables."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from rmqinspect.analysis.salvage import SalvageReport
from rmqinspect.render.output import (
    OutputFormat,
    key_value_table,
    print_json,
    print_jsonl,
    print_table,
    to_jsonable,
)


def salvage_json(report: SalvageReport, out: Path, files: Sequence[str]) -> dict[str, Any]:
    """The salvage report: where it wrote, what it found, and the ``files`` it wrote there."""
    doc: dict[str, Any] = {"out": str(out)}
    doc.update(to_jsonable(report))
    doc["files"] = list(files)
    return doc


def render_salvage(
    report: SalvageReport, out: Path, files: Sequence[str], fmt: OutputFormat
) -> None:
    if fmt is OutputFormat.JSON:
        print_json(salvage_json(report, out, files))
        return
    if fmt is OutputFormat.JSONL:
        print_jsonl([salvage_json(report, out, files)])
        return
    restart = report.restart
    print_table(
        key_value_table(
            f"Salvaged into {out}",
            [
                ("records listed", report.messages),
                ("intact", report.intact),
                ("damaged (intact false)", report.damaged),
                ("  decoded only partly (jsonl only)", report.partial),
                ("kept by the restart", report.restart_keeps),
                ("intact, but the restart discards them", report.intact_restart_discards),
                ("damaged ranges", len(report.damaged_ranges)),
                ("restart verdict", restart.verdict if restart is not None else ""),
                ("recovered end", restart.recovered_end if restart is not None else ""),
            ],
        )
    )
    if report.damaged_ranges:
        t = Table(title="Damaged ranges", title_justify="left")
        for col in ("file", "file position", "physical offset", "length", "reason", "detail"):
            t.add_column(col, justify="right" if "offset" in col or col == "length" else "left")
        for r in report.damaged_ranges:
            t.add_row(
                r.file,
                str(r.file_position),
                str(r.physical_offset),
                str(r.length),
                r.reason,
                r.detail,
            )
        print_table(t)
