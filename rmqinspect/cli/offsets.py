"""``rmqinspect offsets STORE``: consumer and delay offsets with queue bounds and lag."""

from __future__ import annotations

from typing import Annotated

import typer

from rmqinspect.analysis.offsets import offsets_report
from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import (
    CommitlogSizeOpt,
    CqSizeOpt,
    FormatOpt,
    IndexEntriesOpt,
    IndexSlotsOpt,
    ProfileOpt,
    StoreArg,
    open_store,
)
from rmqinspect.render.offsets import render_offsets
from rmqinspect.render.output import resolve_format


@handle_errors
def offsets(
    store: StoreArg,
    group: Annotated[str | None, typer.Option("--group", "-g", help="Only this group.")] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")] = None,
    format: FormatOpt = None,
    commitlog_file_size: CommitlogSizeOpt = None,
    cq_file_size: CqSizeOpt = None,
    index_slots: IndexSlotsOpt = None,
    index_entries: IndexEntriesOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """consumerOffset.json and delayOffset.json against the queues: per queue the committed
    offset, the queue's min/max on disk and the lag; offsets outside [min, max] are flagged.

    Example: rmqinspect offsets STORE --group GID_orders
    """
    with open_store(
        store, commitlog_file_size, cq_file_size, index_slots, index_entries, profile
    ) as st:
        report = offsets_report(st, group, topic)
    render_offsets(report, resolve_format(format))


def register(app: typer.Typer) -> None:
    app.command("offsets")(offsets)
