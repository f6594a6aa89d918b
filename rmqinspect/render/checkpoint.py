"""Rendering of the ``checkpoint`` command."""

from __future__ import annotations

from typing import Any

from rmqinspect.analysis.checkpoint import CheckpointReport
from rmqinspect.render.output import (
    OutputFormat,
    key_value_table,
    print_json,
    print_jsonl,
    print_table,
)
from rmqinspect.render.values import iso_ms, time_cell

_TIMES = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")


def checkpoint_json(r: CheckpointReport) -> dict[str, Any]:
    cp = r.checkpoint
    out: dict[str, Any] = {"path": r.path, "file_size": cp.file_size}
    for name in _TIMES:
        out[name] = getattr(cp, name)
        out[name.removesuffix("_timestamp") + "_time"] = iso_ms(getattr(cp, name))
    out.update(
        {
            "master_flushed_offset": cp.master_flushed_offset,
            "confirm_phy_offset": cp.confirm_phy_offset,
            "min_timestamp": r.min_timestamp,
            "min_time": iso_ms(r.min_timestamp),
            "min_timestamp_index": r.min_timestamp_index,
            "min_time_index": iso_ms(r.min_timestamp_index),
            "notes": list(r.notes),
        }
    )
    return out


def render_checkpoint(report: CheckpointReport, fmt: OutputFormat) -> None:
    if fmt is OutputFormat.JSON:
        print_json(checkpoint_json(report))
        return
    if fmt is OutputFormat.JSONL:
        print_jsonl([checkpoint_json(report)])
        return
    cp = report.checkpoint
    rows: list[tuple[str, object]] = [
        ("file", f"{report.path} ({cp.file_size} bytes)"),
        ("physicMsgTimestamp", time_cell(cp.physic_msg_timestamp)),
        ("logicsMsgTimestamp", time_cell(cp.logics_msg_timestamp)),
        ("indexMsgTimestamp", time_cell(cp.index_msg_timestamp)),
        ("masterFlushedOffset (5.x)", cp.master_flushed_offset),
        ("confirmPhyOffset (5.x)", cp.confirm_phy_offset),
        ("minTimestamp (min - 3 s)", time_cell(report.min_timestamp)),
        ("minTimestampIndex", time_cell(report.min_timestamp_index)),
    ]
    rows.extend(("note", n) for n in report.notes)
    print_table(key_value_table("Checkpoint", rows))
