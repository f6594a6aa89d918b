"""Rendering of ``stats``."""

from __future__ import annotations

from typing import Any

from rmqinspect.analysis.stats import BODY_SIZE_BOUNDS, StoreStats, Tally
from rmqinspect.format.times import iso_ms
from rmqinspect.render.message import skipped_json, warn_skipped
from rmqinspect.render.output import Column, OutputFormat, RowTable, print_document, print_table

_LARGER = f"more than {BODY_SIZE_BOUNDS[-1]}"


def _tally(t: Tally) -> dict[str, int]:
    return {"records": t.records, "bytes": t.bytes}


def stats_json(s: StoreStats) -> dict[str, Any]:
    """Each breakdown a list, largest first (hours and body sizes in their order)."""

    def largest(d: dict[Any, Tally]) -> list[tuple[Any, Tally]]:
        return sorted(d.items(), key=lambda kv: (-kv[1].bytes, str(kv[0])))

    return {
        "records": s.records,
        "bytes": s.bytes,
        "skipped_ranges": len(s.skipped),
        "skipped_bytes": s.skipped_bytes,
        "by_topic": [{"topic": k, **_tally(t)} for k, t in largest(s.by_topic)],
        "by_queue": [
            {"topic": k[0], "queue_id": k[1], **_tally(t)} for k, t in largest(s.by_queue)
        ],
        "by_tag": [{"tags": k, **_tally(t)} for k, t in largest(s.by_tag)],
        "by_transaction": [{"transaction": k, **_tally(t)} for k, t in largest(s.by_transaction)],
        "body_size": [
            {"body_length_at_most": k, **_tally(s.body_sizes[k])}
            for k in sorted(s.body_sizes, key=lambda b: (b is None, b or 0))
        ],
        "per_hour": [
            {"hour_timestamp": h, "hour_time": iso_ms(h), **_tally(s.per_hour[h])}
            for h in sorted(s.per_hour)
        ],
        "skipped": [skipped_json(r)["skipped"] for r in s.skipped],
    }


def render_stats(s: StoreStats, fmt: OutputFormat) -> None:
    for r in s.skipped:
        warn_skipped(r)
    doc = stats_json(s)
    if print_document(doc, fmt):
        return
    sections = (
        ("By topic", "by_topic", ("topic",), ""),
        ("By queue", "by_queue", ("topic", "queue_id"), ""),
        ("By tag", "by_tag", ("tags",), "(no tag)"),
        ("By transaction type", "by_transaction", ("transaction",), ""),
        ("By body size (bytes, at most)", "body_size", ("body_length_at_most",), _LARGER),
        ("Per hour (store time)", "per_hour", ("hour_time",), ""),
    )
    for title, key, names, none in sections:
        table = RowTable(
            title,
            [
                *(Column(n, whole=True) for n in names),
                Column("records", right=True),
                Column("bytes", right=True),
            ],
        )
        for row in doc[key]:
            cells = (none if row[n] is None else row[n] for n in names)
            table.add_row(*cells, row["records"], row["bytes"])
        print_table(table)
    skipped = f"; skipped {doc['skipped_ranges']} range(s), {doc['skipped_bytes']} bytes"
    print_table(f"{s.records} records, {s.bytes} bytes{skipped if s.skipped else ''}")
