"""``rmqinspect offsets STORE``: consumer and delay offsets with queue bounds and lag."""

from __future__ import annotations

from typing import Annotated

import typer

from rmqinspect.analysis.offsets import offsets_report
from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import FormatOpt, StoreArg, open_store, with_store_options
from rmqinspect.render.offsets import render_offsets
from rmqinspect.render.output import resolve_format
from rmqinspect.store.model import StoreOptions, StorePart


@handle_errors
@with_store_options
def offsets(
    store: StoreArg,
    group: Annotated[str | None, typer.Option("--group", "-g", help="Only this group.")] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")] = None,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    r"""consumerOffset.json and delayOffset.json against the queues: per queue the committed
    offset, the queue's min/max on disk and the lag; offsets outside \[min, max] are flagged.

    Example: rmqinspect offsets STORE --group GID_orders
    """
    reads = StorePart.CONSUME_QUEUES | StorePart.COMMITLOG
    with open_store(store, store_options, "offsets", reads) as st:
        report = offsets_report(st, group, topic)
    render_offsets(report, resolve_format(format))


def register(app: typer.Typer) -> None:
    app.command("offsets")(offsets)
