"""``rmqinspect delays STORE``: each delay level's offset, pending and overdue messages."""

from __future__ import annotations

from typing import Annotated

import typer

from rmqinspect.analysis.delays import delays_report
from rmqinspect.cli.common import EXIT_FINDINGS, handle_errors
from rmqinspect.cli.options import (
    WITHOUT_RESTART,
    FormatOpt,
    StoreArg,
    commitlog_progress,
    open_store,
    parse_optional_time,
    restart_not_emulated,
    with_store_options,
)
from rmqinspect.render.delays import render_delays
from rmqinspect.render.output import resolve_format, warn
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def delays(
    store: StoreArg,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="The time to judge overdue messages against (epoch ms or ISO 8601); "
            "default: the store's newest store time, the broker's clock when it stopped.",
        ),
    ] = None,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    r"""delayOffset.json against SCHEDULE_TOPIC_XXXX: per delay level the offset, the queue's
    \[min, max], where delivery resumes after load (an offset outside \[min, max] is clamped),
    the pending messages, the oldest stored and next due, and the overdue ones (due more than
    10 s before the reference time and not delivered: a stuck level), and the pending ones
    whose delivery is already stored (delivered again after a crash). The delays come from
    --delay-levels. Exits 1 when a level has overdue messages, an offset outside \[min, max]
    or pending messages past the last delay level, or delayOffset.json does not load.

    Example: rmqinspect delays STORE --delay-levels "1s 5s 10s" --now 2024-05-01T10:00:00
    """
    fmt = resolve_format(format)
    reference = parse_optional_time(now, "--now")
    # correctDelayOffset judges the queues as the restart recovers them, which reads every part
    # (where a layout takes the restart over, the queues on disk).
    with (
        open_store(store, store_options, "delays", WITHOUT_RESTART) as st,
        commitlog_progress(st, "recovering the queues as the restart does", fmt) as advance,
    ):
        report = delays_report(st, reference, advance)
        not_emulated = restart_not_emulated(st)
    if not_emulated is not None and report.levels:
        warn(f"offsets judged against the queues on disk: {not_emulated}")
    render_delays(report, fmt)
    if report.flagged:
        raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("delays")(delays)
