"""``rmqinspect offsets STORE``: consumer and delay offsets with queue bounds and lag."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from rmqinspect.analysis.offsets import offsets_report
from rmqinspect.analysis.offsets_at import offsets_at
from rmqinspect.cli.common import EXIT_FINDINGS, handle_errors
from rmqinspect.cli.options import (
    WITHOUT_RESTART,
    FormatOpt,
    StoreArg,
    commitlog_progress,
    no_such_topic,
    open_store,
    parse_time,
    restart_not_emulated,
    topic_not_found,
    with_store_options,
)
from rmqinspect.render.offsets import render_offsets, render_offsets_at
from rmqinspect.render.output import resolve_format, warn
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def offsets(
    store: StoreArg,
    group: Annotated[str | None, typer.Option("--group", "-g", help="Only this group.")] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Instead: per queue the first offset stored at or after this time (epoch ms "
            "or ISO 8601), as resetOffsetByTime sets it; with --group, its topics' queues and "
            "how far each committed offset would move.",
        ),
    ] = None,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    r"""consumerOffset.json and delayOffset.json against the queues: per queue the committed
    offset, the queue's min/max and the lag, both against the queues on disk and against the
    queues as a restart rebuilds them (after a crash only the latter is what consumers will
    see); offsets outside \[min, max] are flagged. Exits 1 when --group names no group.

    Example: rmqinspect offsets STORE --group GID_orders --at 2024-05-01T10:00
    """
    fmt = resolve_format(format)
    if at is not None:
        timestamp = parse_time(at, "--at")
        with open_store(store, store_options, "offsets", WITHOUT_RESTART) as st:
            at_report = offsets_at(st, timestamp, group, topic)
        render_offsets_at(at_report, fmt)
        _check_group(group, at_report.groups)
        return
    # The restart emulation reads every part of the store; where a layout takes the restart
    # over (RocksDB consume queues), the rows are judged against the queues on disk alone.
    with (
        open_store(store, store_options, "offsets", WITHOUT_RESTART) as st,
        commitlog_progress(st, "rebuilding the queues as the restart does", fmt) as advance,
    ):
        report = offsets_report(st, group, topic, advance)
        not_emulated = restart_not_emulated(st)
        if not report.rows and no_such_topic(st, topic):
            assert topic is not None
            raise topic_not_found(topic)
    if not_emulated is not None and report.rows:
        warn(f"no lag after the restart: {not_emulated}")
    render_offsets(report, fmt)
    _check_group(group, report.groups)


def _check_group(group: str | None, groups: tuple[str, ...]) -> None:
    if group is not None and group not in groups:
        known = ", ".join(groups) or "none"
        print(
            f"rmqinspect: no such group: {group!r} (groups with offsets: {known})", file=sys.stderr
        )
        raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("offsets")(offsets)
