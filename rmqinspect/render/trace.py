"""Rendering of ``trace``."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from rmqinspect.analysis.trace import Chain, Copy, TraceReport
from rmqinspect.format.times import iso_ms
from rmqinspect.format.trace_data import TraceRecord
from rmqinspect.render.output import OutputFormat, print_document, print_table, to_jsonable, warn
from rmqinspect.render.values import printable, with_times

NOT_FOUND = "no message matches"


def _copy_json(c: Copy) -> dict[str, Any]:
    doc = with_times(to_jsonable(c))
    doc["traces"] = [to_jsonable(t) for t in c.traces]
    return doc


def _chain_json(chain: Chain) -> dict[str, Any]:
    doc: dict[str, Any] = to_jsonable(chain)
    doc["copies"] = [_copy_json(c) for c in chain.copies]
    return doc


def trace_json(report: TraceReport) -> dict[str, Any]:
    return {
        "query": report.query,
        "search": report.search.value,
        "found": report.found,
        "notes": list(report.notes),
        "broker_starts": report.broker_starts,
        "restart_end": report.restart_end,
        "chains": [_chain_json(c) for c in report.chains],
        "findings": to_jsonable(report.findings),
        "skipped": to_jsonable(report.skipped),
    }


def _delay_cell(c: Copy) -> str:
    if c.delay_level is None or c.delay_level <= 0:
        return ""
    if c.due_timestamp is None:
        return str(c.delay_level)
    state = {True: "delivered", False: "pending", None: "no delayOffset.json entry"}[c.delivered]
    return f"{c.delay_level}: due {iso_ms(c.due_timestamp) or c.due_timestamp}, {state}"


def _groups_cell(c: Copy) -> str:
    return ", ".join(f"{g.group}: {'consumed' if g.consumed else 'pending'}" for g in c.groups)


def _trace_words(t: TraceRecord) -> str:
    """One decoded trace record, in a few words."""
    if t.trace_type == "Pub":
        return f"Pub by {t.group}: {'sent' if t.success else 'send failed'}"
    if t.trace_type == "SubBefore":
        return f"SubBefore {t.group}: reconsume {t.retry_times}"
    if t.trace_type == "SubAfter":
        return f"SubAfter: {'consumed' if t.success else 'failed'} in {t.cost_time} ms"
    check = " (check)" if t.from_transaction_check else ""
    return f"EndTransaction by {t.group}: {t.transaction_state}{check}"


def _chain_table(chain: Chain) -> Table:
    t = Table(title=f"Copies of {chain.uniq_key or '(no UNIQ_KEY)'}", title_justify="left")
    for col in ("role", "topic:queue", "queue offset", "physical offset", "stored", "reconsume"):
        t.add_column(col, justify="right" if "offset" in col or col == "reconsume" else "left")
    for col in ("delay", "groups / trace records", "restart"):
        t.add_column(col)
    for c in chain.copies:
        t.add_row(
            c.role.value,
            f"{c.topic}:{c.queue_id}",
            str(c.queue_offset),
            str(c.physical_offset),
            iso_ms(c.store_timestamp) or str(c.store_timestamp),
            str(c.reconsume_times),
            _delay_cell(c),
            "; ".join(_trace_words(r) for r in c.traces) if c.traces else _groups_cell(c),
            c.restart.value,
        )
    return t


def render_trace(report: TraceReport, fmt: OutputFormat) -> None:
    for note in report.notes:
        warn(note)
    if report.skipped:
        lost = sum(s.length for s in report.skipped)
        warn(f"{len(report.skipped)} damaged range(s), {lost} bytes, stepped over: not read")
    if print_document(trace_json(report), fmt):
        return
    if not report.found:
        print(NOT_FOUND)
        return
    print(f"found by {report.search.value}; {len(report.chains)} message(s)")
    for chain in report.chains:
        # Store data (topics, keys, group names) cannot drive the terminal.
        print(printable(f"{chain.uniq_key or '(no UNIQ_KEY)'} sent to {chain.topic or '?'}:"))
        for line in chain.summary:
            print(printable(f"  - {line}"))
        print_table(_chain_table(chain))
    if report.findings:
        f = Table(title="Findings", title_justify="left")
        for col in ("kind", "at", "detail"):
            f.add_column(col, justify="right" if col == "at" else "left")
        for x in report.findings:
            f.add_row(x.kind.value, str(x.physical_offset), x.detail)
        print_table(f)
