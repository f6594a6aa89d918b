"""``rmqinspect checkpoint STORE|FILE``: the checkpoint's times and offsets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rmqinspect.analysis.checkpoint import read_checkpoint
from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import FormatOpt
from rmqinspect.render.checkpoint import render_checkpoint
from rmqinspect.render.output import resolve_format


@handle_errors
def checkpoint(
    target: Annotated[
        Path, typer.Argument(help="A store directory or a checkpoint file.", show_default=False)
    ],
    format: FormatOpt = None,
) -> None:
    """Checkpoint times (human and ms), 5.x offsets, and the recovery start time derived from them.

    Example: rmqinspect checkpoint /data/rocketmq/store
    """
    render_checkpoint(read_checkpoint(target), resolve_format(format))


def register(app: typer.Typer) -> None:
    app.command("checkpoint")(checkpoint)
