"""``rmqinspect timers STORE``: the 5.x timer store's pending, late, rolled and recalled timers."""

from __future__ import annotations

from typing import Annotated

import typer

from rmqinspect.analysis.timers import timers_report
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
from rmqinspect.render.timers import render_timers
from rmqinspect.store.layout import StorePart
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def timers(
    store: StoreArg,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="When the broker restarts (epoch ms or ISO 8601), to judge what is due and "
            "what the restart skips; default: the store's newest store time.",
        ),
    ] = None,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    r"""The 5.x timer store (timerlog/, timerwheel, config/timercheck) against the commitlog:
    per real topic the pending timer messages and their fire times; entries overdue (their
    slot is before timercheck's lastReadTimeMs, not delivered), skipped by a restart at --now
    (the read time is pulled forward to now - 7 days + 60 slots), due; rolled and recalled
    ones; the wheel's occupancy; timercheck against the timerlog and the rmq_sys_wheel_timer
    queue. Exits 1 on overdue or skipped entries and on findings (a prevPos cycle, a chain
    into another slot, a slot whose time is not its own, a unit past the commitlog's end or at
    a non-timer record, a truncated timerlog, a bad unit).

    Example: rmqinspect timers STORE --now 2024-05-01T10:00:00Z
    """
    fmt = resolve_format(format)
    reference = parse_optional_time(now, "--now")
    # The timer topic's queue bounds and the records the timerlog points at.
    with (
        open_store(
            store, store_options, "timers", StorePart.COMMITLOG | StorePart.CONSUME_QUEUES
        ) as st,
        commitlog_progress(st, "reading the timer topic and delivered copies", fmt) as advance,
    ):
        report = timers_report(st, reference, advance)
    render_timers(report, fmt)
    if report.flagged:
        raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("timers")(timers)
