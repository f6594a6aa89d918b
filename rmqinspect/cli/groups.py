"""``rmqinspect groups STORE``: each consumer group's offsets, backlog, DLQ and next-pull resets."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from typing import Annotated

import typer

from rmqinspect.analysis.groups import groups_report
from rmqinspect.analysis.offsets import ConsumeFromWhere, parse_broker_version
from rmqinspect.cli.common import EXIT_FINDINGS, fail, handle_errors
from rmqinspect.cli.options import (
    WITHOUT_RESTART,
    ConsumeFromWhereOpt,
    FormatOpt,
    StoreArg,
    commitlog_progress,
    open_store,
    parse_optional_time,
    with_store_options,
)
from rmqinspect.render.groups import render_groups
from rmqinspect.render.output import resolve_format
from rmqinspect.store.layout import ALL_PARTS
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def groups(
    store: StoreArg,
    group: Annotated[str | None, typer.Option("--group", "-g", help="Only this group.")] = None,
    after_restart: Annotated[
        bool,
        typer.Option(
            "--after-restart",
            help="Judge the next pulls against the queues as the restart rebuilds them (the "
            "recover emulation) instead of the queues on disk.",
        ),
    ] = False,
    broker_version: Annotated[
        str | None,
        typer.Option(
            "--broker-version",
            help="The broker's release (e.g. 4.9.3): before 4.9.4 an offset past a queue whose "
            "min is 0 resets to 0. Default: the release the store's profile was checked against.",
        ),
    ] = None,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="The time to age DLQ messages and judge POP revive times against (epoch ms "
            "or ISO 8601); default: the store's newest store time.",
        ),
    ] = None,
    consume_from_where: ConsumeFromWhereOpt = ConsumeFromWhere.UNKNOWN,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    r"""Per consumer group and queue: the committed offset (and the .bak's when it differs),
    the queue's \[min, max], lag, the store time of the last consumed message, and what the
    next pull does (getMessage: below min -> OFFSET_TOO_SMALL, reset to min; past max ->
    OFFSET_OVERFLOW_BADLY, reset to max, or to 0 before 4.9.4 where min is 0); the %RETRY%
    backlog, the %DLQ% size and oldest message, subscriptionGroup.json settings and the
    OFFSET_MOVED_EVENT history. Exits 1 when a reset is due, a .bak disagrees, a retry queue
    without an offset is read again from 0, or an event or config file is malformed.

    A queue without a committed offset (a crash before consumerOffset.json was first
    persisted) starts where --consume-from-where says, and its messages count as replayed.
    A 5.x POP group, whose offset moves at pop time, also shows its outstanding pops and
    what a restart revives again, as `pop` reads its checkpoints.

    Example: rmqinspect groups STORE --group GID_orders --after-restart --broker-version 4.9.3
    """
    fmt = resolve_format(format)
    reference = parse_optional_time(now, "--now")
    version_text = broker_version
    # Without --after-restart no restart is emulated, so a layout that takes the restart over
    # (RocksDB consume queues) is read.
    reads = ALL_PARTS if after_restart else WITHOUT_RESTART
    with open_store(store, store_options, "groups", reads) as st:
        if version_text is None:
            profile = st.profile.profile
            version_text = profile.checked_against
            basis = f"assumed from the store's profile {profile}; set --broker-version"
        else:
            basis = "--broker-version"
        try:
            version = parse_broker_version(version_text)
        except ValueError as err:
            raise fail(f"--broker-version: {err}") from None
        # Only the restart emulation walks the commitlog long enough to want a progress bar.
        with (
            commitlog_progress(st, "rebuilding the queues as the restart does", fmt)
            if after_restart
            else nullcontext(None)
        ) as advance:
            report = groups_report(
                st,
                version,
                version_text,
                basis,
                group=group,
                after_restart=after_restart,
                now=reference,
                progress=advance,
                consume_from_where=consume_from_where,
            )
    render_groups(report, fmt)
    if group is not None and group not in report.known_groups:
        known = ", ".join(report.known_groups) or "none"
        print(f"rmqinspect: no such group: {group!r} (groups: {known})", file=sys.stderr)
        raise typer.Exit(EXIT_FINDINGS)
    if report.flagged:
        raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("groups")(groups)
