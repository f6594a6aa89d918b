"""Rendering of ``consumequeue`` listings."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from rmqinspect.analysis.queue_listing import QueueListing
from rmqinspect.analysis.units import UnitStatus, UnitView
from rmqinspect.format.message_json import BodyFormat, message_json, shown_body
from rmqinspect.format.times import iso_ms
from rmqinspect.render.inventory import queue_json
from rmqinspect.render.message import body_preview
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    key_value_table,
    print_json_with_array,
    print_plain_jsonl,
    print_table,
    print_table_batches,
    warn,
)


def unit_json(u: UnitView, body: BodyFormat) -> dict[str, Any]:
    out = {
        "queue_offset": u.queue_offset,
        "physical_offset": u.phy_offset,
        "size": u.size,
        "tags_code": u.tags_code,
        "tags_code_kind": u.tags_code_kind.value,
        "expected_tags_code": u.expected_tags_code,
        "tags_code_ok": u.tags_code_ok,
        "status": u.status.value,
        "detail": u.detail or None,
        "message": None if u.message is None else message_json(u.message, body),
        "repeat": u.repeat,
    }
    if u.batch_size is not None:  # a BatchConsumeQueue unit
        out["batch_size"] = u.batch_size
    return out


def render_queue_listing(
    listing: QueueListing, units: Iterable[UnitView], fmt: OutputFormat, body: BodyFormat
) -> int:
    """Returns how many units lead nowhere, placeholders aside (the caller reports it)."""
    b = listing.bounds
    if listing.stale_after_end:
        warn(
            f"{b.topic}/{b.queue_id}: {listing.stale_after_end} non-zero units lie after "
            f"maxOffset {b.max_offset} (stale after a truncation?); --all lists them"
        )
    bad = 0

    def counted() -> Iterator[UnitView]:
        nonlocal bad
        for u in units:
            if u.status not in (UnitStatus.FOUND, UnitStatus.PRE_BLANK):
                bad += u.repeat
            yield u

    if fmt is OutputFormat.JSONL:
        print_plain_jsonl(unit_json(u, body) for u in counted())
        return bad
    if fmt is OutputFormat.JSON:
        head = {"queue": queue_json(b), "stale_units_after_end": listing.stale_after_end}
        print_json_with_array(head, "units", (unit_json(u, body) for u in counted()))
        return bad
    print_table(
        key_value_table(
            f"Consume queue {b.topic}/{b.queue_id}",
            [
                ("offsets (min..max)", f"[{b.min_offset}, {b.max_offset}) = {b.message_count}"),
                ("first unit on disk", b.first_unit),
                ("files", f"{b.file_count} ({b.bytes} bytes)"),
                ("pre-blank units", b.pre_blank_units),
                ("note", b.min_note),
            ],
        )
    )
    print_table_batches(counted(), _units_table)
    return bad


def _units_table(units: list[UnitView], with_title: bool) -> RowTable:
    table = RowTable(
        "Units" if with_title else None,
        [
            Column("q offset", right=True, whole=True),
            Column("phy offset", right=True, whole=True),
            Column("size", right=True, whole=True),
            Column("tagsCode", whole=True),
            Column("status", whole=True),
            Column("message"),
        ],
    )
    for u in units:
        tags = str(u.tags_code)
        if u.tags_code_ok is False:
            tags += f" (expected {u.expected_tags_code})"
        if u.message is not None and u.status is UnitStatus.FOUND:
            m = u.message
            preview = body_preview(shown_body(m, BodyFormat.TEXT)[0], 24)
            what = f"{iso_ms(m.store_timestamp)} keys={' '.join(m.keys)} {preview}"
        else:
            what = u.detail
        offset = str(u.queue_offset)
        if u.repeat > 1:
            offset += f"..{u.queue_offset + u.repeat - 1}"
            what = f"{u.repeat} zero units: {what}"
        if u.batch_size is not None:
            offset += f"..{u.queue_offset + u.batch_size - 1}" if u.batch_size > 1 else ""
            what = f"batch of {u.batch_size}: {what}"
        table.add_row(offset, u.phy_offset, u.size, tags, u.status.value, what)
    return table
