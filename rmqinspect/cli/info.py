"""``rmqinspect info STORE``: what is on this disk."""

from __future__ import annotations

import typer

from rmqinspect.analysis.inventory import build_inventory
from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import FormatOpt, StoreArg, open_store, with_store_options
from rmqinspect.render.inventory import render_inventory
from rmqinspect.render.output import resolve_format
from rmqinspect.store.layout import StorePart
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def info(
    store: StoreArg,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Version profile, shutdown state, file families, offsets, topics/queues, checkpoint and
    config files of a store.

    Example: rmqinspect info /data/rocketmq/store
    """
    with open_store(store, store_options, "info", StorePart(0)) as st:
        inv = build_inventory(st)
    render_inventory(inv, resolve_format(format))


def register(app: typer.Typer) -> None:
    app.command("info")(info)
