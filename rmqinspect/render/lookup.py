"""Rendering of ``lookup`` results: one JSON document, JSON Lines of the messages, or tables."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from rmqinspect.analysis.lookup import Hit, IndexReport, LookupResult
from rmqinspect.format.message_json import BodyFormat, message_json
from rmqinspect.render.message import (
    message_detail_table,
    messages_table,
    skipped_json,
    warn_skipped,
)
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    key_value_table,
    print_json,
    print_plain_jsonl,
    print_table,
    warn,
)

if TYPE_CHECKING:
    from rich.table import Table


def hit_json(hit: Hit, body: BodyFormat) -> dict[str, Any]:
    out = message_json(hit.record, body)
    out["via"] = hit.via.value
    out["notes"] = list(hit.notes)
    return out


def index_json(report: IndexReport) -> dict[str, Any]:
    return {
        "state": report.state,
        "files_total": report.files_total,
        "files_used": report.files_used,
        "unusable": report.unusable,
        "chain_problems": report.chain_problems,
        "covered_from": report.covered_from,
        "covered_to": report.covered_to,
        "keys_queried": report.keys_queried,
        "index_offsets": report.index_offsets,
        "broker_offsets": report.broker_offsets,
        "rounds": report.rounds,
    }


def lookup_json(result: LookupResult, body: BodyFormat) -> dict[str, Any]:
    return {
        "mode": result.mode.value,
        "query": result.query,
        "found": result.found,
        "messages": [hit_json(h, body) for h in result.hits],
        "rejected": [
            {
                "physical_offset": r.physical_offset,
                "reason": r.reason,
                "message": None if r.record is None else message_json(r.record, BodyFormat.NONE),
            }
            for r in result.rejected
        ],
        "index": None if result.index is None else index_json(result.index),
        "scanned": result.scanned,
        "tail_scanned": None if result.tail_scanned is None else list(result.tail_scanned),
        "skipped": [skipped_json(r)["skipped"] for r in result.skipped],
        "truncated": result.truncated,
        "warnings": result.warnings,
        "suggest_scan": result.suggest_scan,
    }


def render_lookup(result: LookupResult, fmt: OutputFormat, body: BodyFormat) -> None:
    for w in result.warnings:
        warn(w)
    for r in result.skipped:
        warn_skipped(r)
    if not result.found:
        hint = "; run again with --scan to walk the whole commitlog" if result.suggest_scan else ""
        print(f"rmqinspect: nothing found{hint}", file=sys.stderr)
    if fmt is OutputFormat.JSON:
        print_json(lookup_json(result, body))
        return
    if fmt is OutputFormat.JSONL:
        print_plain_jsonl(hit_json(h, body) for h in result.hits)
        return
    for table in lookup_tables(result, body):
        print_table(table)


def lookup_tables(
    result: LookupResult, body: BodyFormat = BodyFormat.TEXT
) -> list[Table | RowTable]:
    tables: list[Table | RowTable] = []
    query = ", ".join(f"{k}={v}" for k, v in result.query.items() if not isinstance(v, dict))
    if len(result.hits) == 1:
        hit = result.hits[0]
        title = f"Found via {hit.via.value} ({query})"
        tables.append(message_detail_table(hit.record, title, body))
        for note in hit.notes:
            tables.append(key_value_table("", [("note", note)]))
    elif result.hits:
        title = f"{len(result.hits)} messages ({query})"
        records = [h.record for h in result.hits]
        tables.append(messages_table(records, title, body, capped_on_terminal=True))
    if result.rejected:
        rej = RowTable(
            "Candidates not returned",
            [Column("phy offset", right=True, whole=True), Column("why", fold=True)],
            capped_on_terminal=True,
        )
        for r in result.rejected:
            rej.add_row(r.physical_offset, r.reason)
        tables.append(rej)
    if result.index is not None:
        i = result.index
        rows: list[tuple[str, object]] = [
            ("state", i.state),
            ("files used", f"{i.files_used} of {i.files_total}"),
            ("covers phy offsets", f"{i.covered_from}..{i.covered_to}"),
            ("raw index hits", len(i.index_offsets)),
            ("returned by queryMessage", len(i.broker_offsets)),
        ]
        if result.tail_scanned is not None:
            a, b = result.tail_scanned
            rows.append(("unindexed tail scanned", f"[{a}, {b})"))
        tables.append(key_value_table("Index", rows))
    return tables
