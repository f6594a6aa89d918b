"""Rendering of ``verify``: ``{"findings": [...], "summary": {...}}`` as JSON, one finding per
line then the summary as JSON Lines, or a findings table followed by the store's statistics."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from rmqinspect.analysis.verify import CHECKS, Finding, Summary, VerifyReport
from rmqinspect.render.output import (
    SEVERITY_STYLES,
    Column,
    OutputFormat,
    RowTable,
    key_value_table,
    print_json,
    print_plain_jsonl,
    print_table,
    print_table_batches,
    stdout_console,
    to_jsonable,
    verdict_line,
)
from rmqinspect.render.values import size_cell, time_cell, with_times


def finding_json(finding: Finding) -> dict[str, Any]:
    # check_id, as the export's findings column: "check" is a reserved word in SQL (DuckDB).
    doc: dict[str, Any] = {"check_id": finding.check}
    doc.update(to_jsonable(finding))
    del doc["check"]
    doc["hexdump"] = list(finding.hexdump)
    return doc


def summary_json(summary: Summary) -> dict[str, Any]:
    doc: dict[str, Any] = with_times(to_jsonable(summary))
    doc["files"] = [with_times(f) for f in doc["files"]]
    return doc


def verify_json(report: VerifyReport) -> dict[str, Any]:
    return {
        "findings": [finding_json(f) for f in report.findings],
        "summary": summary_json(report.summary),
    }


def render_verify(report: VerifyReport, fmt: OutputFormat) -> None:
    if fmt is OutputFormat.JSON:
        print_json(verify_json(report))
    elif fmt is OutputFormat.JSONL:
        print_plain_jsonl(finding_json(f) for f in report.findings)
        print_plain_jsonl([{"summary": summary_json(report.summary)}])
    else:
        print_table_batches(report.findings, _findings_table, capped_on_terminal=True)
        console = stdout_console()
        for f in report.findings:
            if f.hexdump:
                console.print()
                console.print(f"{f.check} at {f.file} byte {f.file_position}:")
                for line in f.hexdump:  # the console escapes a newline inside a string
                    console.print(line)
        for table in summary_tables(report.summary):
            print_table(table)
        print_table(verify_verdict(report.summary))


def verify_verdict(s: Summary) -> Text:
    """The last line: how many errors and warnings (red with an error, yellow with a warning)."""
    errors, warnings = (
        s.findings_by_severity.get("error", 0),
        s.findings_by_severity.get("warning", 0),
    )
    if not errors and not warnings:
        return verdict_line("no errors or warnings", "good")
    said = [
        f"{n} {word}{'' if n == 1 else 's'}"
        for n, word in ((errors, "error"), (warnings, "warning"))
        if n
    ]
    return verdict_line(", ".join(said), "bad" if errors else "doubt")


def _findings_table(batch: list[Finding], first: bool) -> RowTable:
    """One row per finding. At a narrow width the queue, then the position in its file and the
    file make way (the physical offset stays) and the detail wraps; check ids, files and
    offsets are never cut inside a word."""
    t = RowTable(
        "Findings" if first else None,
        [
            Column("severity", whole=True, styles=SEVERITY_STYLES),
            Column("check", whole=True, breaks="."),
            Column("file", whole=True, breaks="/", drop=2),
            Column("position", right=True, whole=True, drop=3),
            Column("physical offset", right=True, whole=True),
            Column("queue", fold=True, drop=4),
            Column("detail", fold=True, least=30),
        ],
    )
    if first and not batch:
        t.add_row("", "", "", "", "", "", "no findings")
    for f in batch:
        queue = ""
        if f.topic is not None:
            queue = f"{f.topic}/{f.queue_id}"
            if f.queue_offset is not None:
                queue += f" @{f.queue_offset}"
        t.add_row(
            f.severity.value,
            f.check,
            f.file,
            f.file_position,
            f.physical_offset,
            queue,
            f.detail,
        )
    return t


def summary_tables(s: Summary) -> list[Table | RowTable]:
    """The statistics, as ``pg_waldump --stats`` prints a WAL's: overall, per topic, per file,
    and findings by check."""
    overview = key_value_table(
        f"Summary: {s.store}",
        [
            ("profile", s.profile),
            ("body/property CRCs", "checked" if s.crc_checked else "not checked (--no-crc)"),
            ("records", s.records),
            ("record bytes", size_cell(s.bytes)),
            ("damaged bytes", size_cell(s.damaged_bytes)),
            ("intact records after damage", s.intact_after_damage),
            ("first store time", time_cell(s.first_store_timestamp)),
            ("last store time", time_cell(s.last_store_timestamp)),
            ("commitlog data end", s.data_end),
            ("commitlog files", s.commitlog_files),
            ("consume queues / units checked", f"{s.consume_queues} / {s.units_checked}"),
            ("index files / entries checked", f"{s.index_files} / {s.index_entries_checked}"),
            (
                "restart emulation",
                "ran: it judged the records without units"
                if s.restart_predicted
                else "not needed: every record has its unit",
            ),
            (
                "findings",
                ", ".join(f"{n} {sev}" for sev, n in s.findings_by_severity.items())
                + ("" if s.findings == s.findings_listed else f" ({s.findings_listed} listed)"),
            ),
        ],
    )
    topics = Table(title="Records per topic", title_justify="left")
    for col in ("topic", "records", "% records", "bytes", "% bytes"):
        topics.add_column(col, justify="left" if col == "topic" else "right")
    for t in s.topics:
        topics.add_row(
            t.topic,
            str(t.records),
            _percent(t.records, s.records),
            str(t.bytes),
            _percent(t.bytes, s.bytes),
        )
    files = Table(title="Commitlog files", title_justify="left")
    columns = ("file", "records", "bytes", "damaged", "after damage", "ends with", "first", "last")
    for col in columns:
        files.add_column(col, justify="left" if col in ("file", "ends with") else "right")
    for f in s.files:
        files.add_row(
            f.file,
            str(f.records),
            str(f.bytes),
            str(f.damaged_bytes),
            str(f.intact_after_damage),
            f.end,
            time_cell(f.first_store_timestamp),
            time_cell(f.last_store_timestamp),
        )
    checks = RowTable(
        "Findings by check",
        [
            Column("check", whole=True, breaks="."),
            Column("severity", whole=True, styles=SEVERITY_STYLES),
            Column("findings", right=True, whole=True),
            Column("what it means"),
        ],
    )
    for check, n in s.findings_by_check.items():
        checks.add_row(check, CHECKS[check].severity.value, n, CHECKS[check].summary)
    return [overview, topics, files, checks]


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}" if whole else ""
