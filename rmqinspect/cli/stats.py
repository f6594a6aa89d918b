"""``rmqinspect stats STORE``: records and bytes by topic, queue, tag, transaction type, body
size and hour."""

from __future__ import annotations

import typer

from rmqinspect.analysis.stats import store_stats
from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import (
    FormatOpt,
    StoreArg,
    commitlog_progress,
    open_store,
    with_store_options,
)
from rmqinspect.render.output import resolve_format
from rmqinspect.render.stats import render_stats
from rmqinspect.store.layout import StorePart
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def stats(store: StoreArg, format: FormatOpt = None, *, store_options: StoreOptions) -> None:
    """Statistics of the commitlog, like pg_waldump --stats: records and bytes (TOTALSIZE) by
    topic, queue, tag, transaction type, body size and store hour, from one walk that skips
    and reports damaged byte ranges as messages does.

    Example: rmqinspect stats STORE -F json
    """
    fmt = resolve_format(format)
    with (
        open_store(store, store_options, "stats", StorePart.COMMITLOG) as st,
        commitlog_progress(st, "scanning commitlog", fmt) as advance,
    ):
        report = store_stats(st, advance)
    render_stats(report, fmt)


def register(app: typer.Typer) -> None:
    app.command("stats")(stats)
