"""Rendering of the ``checkpoint`` command."""

from __future__ import annotations

from typing import Any

from rmqinspect.analysis.checkpoint import CheckpointReport
from rmqinspect.render.output import OutputFormat, key_value_table, print_document, print_table
from rmqinspect.render.values import time_cell, with_times


def checkpoint_json(r: CheckpointReport) -> dict[str, Any]:
    cp = r.checkpoint
    return with_times(
        {
            "path": r.path,
            "file_size": cp.file_size,
            "physic_msg_timestamp": cp.physic_msg_timestamp,
            "logics_msg_timestamp": cp.logics_msg_timestamp,
            "index_msg_timestamp": cp.index_msg_timestamp,
            "master_flushed_offset": cp.master_flushed_offset,
            "confirm_phy_offset": cp.confirm_phy_offset,
            "min_timestamp": r.min_timestamp,
            "min_index_timestamp": r.min_timestamp_index,
            "notes": list(r.notes),
        }
    )


def render_checkpoint(report: CheckpointReport, fmt: OutputFormat) -> None:
    if print_document(checkpoint_json(report), fmt):
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
