"""Rendering of the ``index`` command: per-file header, geometry, slot and chain statistics."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table

from rmqinspect.analysis.indexes import IndexEntryRow, IndexFileReport
from rmqinspect.format.times import iso_ms
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    print_json,
    print_json_with_array,
    print_jsonl,
    print_plain_jsonl,
    print_table,
    print_table_batches,
    to_jsonable,
)
from rmqinspect.render.values import with_times


def index_report_json(r: IndexFileReport) -> dict[str, Any]:
    info, h, g, s = r.info, r.info.header, r.info.geometry, r.statistics
    header = None
    if h is not None:
        header = with_times(
            {
                "begin_timestamp": h.begin_timestamp,
                "end_timestamp": h.end_timestamp,
                "begin_phy_offset": h.begin_phy_offset,
                "end_phy_offset": h.end_phy_offset,
                "hash_slot_count": h.hash_slot_count,
                "index_count": h.index_count,
                "entries": h.entry_count,
            }
        )
    stats = None
    if s is not None and g is not None:
        stats = to_jsonable(s)
        stats["slot_occupancy"] = s.used_slots / g.slot_num
        stats["entry_fill"] = s.entries / max(g.index_num - 1, 1)
    return {
        "file": r.file,
        "name": info.file.name,
        "bytes": info.file.length,
        "geometry": None
        if g is None
        else {"slots": g.slot_num, "entries": g.index_num, "basis": info.geometry_basis},
        "header": header,
        "statistics": stats,
        "error": info.error,
    }


def entry_json(e: IndexEntryRow) -> dict[str, Any]:
    return {
        "file": e.file,
        "entry": e.entry.number,
        "key_hash": e.entry.key_hash,
        "slot": e.slot,
        "physical_offset": e.entry.phy_offset,
        "time_diff": e.entry.time_diff,
        "store_timestamp": e.store_timestamp,
        "store_time": iso_ms(e.store_timestamp),
        "prev": e.entry.prev_index,
    }


def render_index(
    reports: list[IndexFileReport], entries: Iterable[IndexEntryRow] | None, fmt: OutputFormat
) -> None:
    if fmt is OutputFormat.JSON:
        head = {"files": [index_report_json(r) for r in reports]}
        if entries is None:
            print_json(head)
        else:
            print_json_with_array(head, "entries", (entry_json(e) for e in entries))
        return
    if fmt is OutputFormat.JSONL:
        if entries is None:
            print_jsonl(index_report_json(r) for r in reports)
        else:
            print_plain_jsonl(entry_json(e) for e in entries)
        return
    print_table(_files_table(reports))
    if entries is not None:
        print_table_batches(entries, _entries_table)


def _files_table(reports: list[IndexFileReport]) -> Table:
    t = Table(title="Index files", title_justify="left")
    t.add_column("file", no_wrap=True)
    for col in ("slots/entries", "entries used", "store times", "phy offsets", "chains"):
        t.add_column(col, overflow="fold")
    for r in reports:
        h, g, s = r.info.header, r.info.geometry, r.statistics
        geo = "" if g is None else f"{g.slot_num}/{g.index_num} ({r.info.geometry_basis})"
        if h is None:
            t.add_row(r.info.file.name, geo, r.info.error or "", "", "", "")
            continue
        chains = r.info.error or ""
        if s is not None:
            chains = (
                f"{s.used_slots} slots used ({100 * s.used_slots / s.slot_num:.1f}%), "
                f"max {s.max_chain}, mean {s.mean_chain:.2f}"
            )
            bad = []
            if s.bad_slots:
                bad.append(f"{s.bad_slots} bad slots")
            if s.broken_links:
                bad.append(f"{s.broken_links} broken links")
            if s.unreachable_entries:
                bad.append(f"{s.unreachable_entries} unreachable entries")
            if bad:
                chains += "; " + ", ".join(bad)
        t.add_row(
            r.info.file.name,
            geo,
            str(h.entry_count),
            f"{iso_ms(h.begin_timestamp)} .. {iso_ms(h.end_timestamp)}",
            f"{h.begin_phy_offset}..{h.end_phy_offset}",
            chains,
        )
    return t


def _entries_table(rows: list[IndexEntryRow], with_title: bool) -> RowTable:
    # At a narrow width the slot, then the key hash make way: the chain (entry, prev) and
    # what it points at stay.
    t = RowTable(
        "Entries" if with_title else None,
        [
            Column("file", whole=True),
            Column("entry", right=True, whole=True),
            Column("keyHash", right=True, whole=True, drop=1),
            Column("slot", right=True, whole=True, drop=2),
            *(Column(col, right=True, whole=True) for col in ("phy offset", "store time", "prev")),
        ],
    )
    for e in rows:
        t.add_row(
            e.file,
            e.entry.number,
            e.entry.key_hash,
            e.slot,
            e.entry.phy_offset,
            iso_ms(e.store_timestamp) or str(e.store_timestamp),
            e.entry.prev_index,
        )
    return t
