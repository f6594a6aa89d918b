"""``rmqinspect info STORE``: what is on this disk."""

from __future__ import annotations

import typer

from rmqinspect.analysis.inventory import build_inventory
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
from rmqinspect.render.inventory import render_inventory
from rmqinspect.render.output import resolve_format


@handle_errors
def info(
    store: StoreArg,
    format: FormatOpt = None,
    commitlog_file_size: CommitlogSizeOpt = None,
    cq_file_size: CqSizeOpt = None,
    index_slots: IndexSlotsOpt = None,
    index_entries: IndexEntriesOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Version profile, shutdown state, file families, offsets, topics/queues, checkpoint and
    config files of a store.

    Example: rmqinspect info /data/rocketmq/store
    """
    with open_store(
        store, commitlog_file_size, cq_file_size, index_slots, index_entries, profile
    ) as st:
        inv = build_inventory(st)
    render_inventory(inv, resolve_format(format))


def register(app: typer.Typer) -> None:
    app.command("info")(info)
