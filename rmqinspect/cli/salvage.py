"""``rmqinspect salvage STORE --out DIR``: every intact message, even those a restart discards."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rmqinspect.analysis.salvage import predict_restart
from rmqinspect.analysis.salvage import salvage as run_salvage
from rmqinspect.cli.common import EXIT_OK, handle_errors
from rmqinspect.cli.options import (
    OUT_NAMES,
    BodyOpt,
    FormatOpt,
    StoreArg,
    commitlog_progress,
    open_store,
    with_store_options,
)
from rmqinspect.export.salvage import SALVAGE_FILES, SalvageWriter
from rmqinspect.format.message_json import BodyFormat
from rmqinspect.render.output import resolve_format
from rmqinspect.render.salvage import render_salvage
from rmqinspect.store.layout import StorePart
from rmqinspect.store.model import StoreOptions
from rmqinspect.store.output import prepare_output_dir


@handle_errors
@with_store_options
def salvage(
    store: StoreArg,
    out: Annotated[
        Path,
        typer.Option(
            *OUT_NAMES,
            help="New or empty directory outside STORE for messages.jsonl, messages.parquet "
            "and report.json.",
        ),
    ],
    body: BodyOpt = BodyFormat.TEXT,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Recover every intact message of the commitlog files, resynchronising past damage,
    with whether the restart `recover` predicts keeps it; damaged records that decode
    partly are listed with intact false and what failed.

    Exit status: 0 when it ran, 2 on unreadable input or a refused --out.

    Example: rmqinspect salvage /data/rocketmq/store --out /tmp/lost+found
    """
    fmt = resolve_format(format)
    with open_store(store, store_options, "salvage", StorePart.SALVAGE) as opened:
        prepare_output_dir(out, "--out", opened.root)
        with SalvageWriter(out, body) as writer:
            # A bar per walk: the restart prediction's first, which the records are judged by.
            with commitlog_progress(opened, "predicting the restart", fmt) as advance:
                restart = predict_restart(opened, advance)
            with commitlog_progress(opened, "salvaging", fmt) as advance:
                report = run_salvage(opened, writer, advance, restart)
            writer.write_report(report)
    render_salvage(report, out, SALVAGE_FILES, fmt)
    raise typer.Exit(EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command("salvage")(salvage)
