"""``rmqinspect pop STORE``: POP checkpoints and acks, per POP group."""

from __future__ import annotations

from typing import Annotated

import typer

from rmqinspect.analysis.pop import DEFAULT_STUCK_AFTER_MS, pop_report
from rmqinspect.cli.common import EXIT_FINDINGS, handle_errors
from rmqinspect.cli.options import (
    FormatOpt,
    StoreArg,
    commitlog_progress,
    open_store,
    parse_optional_time,
    with_store_options,
)
from rmqinspect.render.output import resolve_format
from rmqinspect.render.pop import render_pop
from rmqinspect.store.layout import StorePart
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def pop(
    store: StoreArg,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="Only this POP consumer group.")
    ] = None,
    stuck_after: Annotated[
        float,
        typer.Option(
            "--stuck-after",
            min=0,
            help="Seconds past its revive time an unacked message may wait for the revive "
            "service before it counts as overdue.",
        ),
    ] = DEFAULT_STUCK_AFTER_MS / 1000,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="What in flight and due are measured against (epoch ms or ISO 8601); default: "
            "the store's newest store time.",
        ),
    ] = None,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    """5.x POP consumption: the checkpoints (ck) and acks (ack, bAck) in
    rmq_sys_REVIVE_LOG_<cluster> and in the timer, merged as PopReviveService merges them: per
    POP group the messages in flight, awaiting revive, acked and revived (with their copies in
    the POP retry topic), and the revive service's progress. Exits 1 on an inconsistency (a
    malformed checkpoint or ack, a bitmap past n, an ack no checkpoint has) or a message
    awaiting revive longer than --stuck-after.

    Example: rmqinspect pop STORE --group groupPop
    """
    fmt = resolve_format(format)
    reference = parse_optional_time(now, "--now")
    with (
        open_store(
            store, store_options, "pop", StorePart.COMMITLOG | StorePart.CONSUME_QUEUES
        ) as st,
        commitlog_progress(st, "reading POP records", fmt) as advance,
    ):
        report = pop_report(st, group, round(stuck_after * 1000), advance, now=reference)
    render_pop(report, fmt)
    if report.inconsistent or report.overdue:
        raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("pop")(pop)
