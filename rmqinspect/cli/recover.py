"""``rmqinspect recover STORE``: what a broker restart will keep, cut, delete and rebuild."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rmqinspect.analysis.recovery import (
    ApplyRefused,
    RecoverOptions,
    analyze_recovery,
    apply_recovery,
)
from rmqinspect.cli.common import EXIT_FINDINGS, EXIT_OK, handle_errors
from rmqinspect.cli.options import (
    CommitlogSizeOpt,
    CqSizeOpt,
    IndexEntriesOpt,
    IndexSlotsOpt,
    StoreArg,
    open_store,
    progress_wanted,
)
from rmqinspect.format.profile import Profile
from rmqinspect.render.output import OutputFormat, progress_bar, resolve_format
from rmqinspect.render.recover import render_recover


class ProfileChoice(StrEnum):
    V4_9 = "4.9"
    V5_1 = "5.1"
    V5_3 = "5.3"
    AUTO = "auto"


class ReportFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


@handle_errors
def recover(
    store: StoreArg,
    profile: Annotated[
        ProfileChoice,
        typer.Option(
            "--profile",
            help="Broker line whose recovery rules apply: 4.9, 5.1, 5.3, or auto (detected).",
        ),
    ] = ProfileChoice.AUTO,
    assume_clean: Annotated[
        bool,
        typer.Option(
            "--assume-clean", help="Treat the last shutdown as clean whatever abort says."
        ),
    ] = False,
    assume_crash: Annotated[
        bool,
        typer.Option(
            "--assume-crash", help="Treat the last shutdown as a crash whatever abort says."
        ),
    ] = False,
    no_check_crc: Annotated[
        bool,
        typer.Option("--no-check-crc", help="The broker runs with checkCRCOnRecover=false."),
    ] = False,
    message_index_safe: Annotated[
        bool,
        typer.Option(
            "--message-index-safe",
            help="The broker runs with messageIndexSafe=true (crash start file honours the index).",
        ),
    ] = False,
    commitlog_file_size: CommitlogSizeOpt = None,
    cq_file_size: CqSizeOpt = None,
    index_slots: IndexSlotsOpt = None,
    index_entries: IndexEntriesOpt = None,
    format: Annotated[
        ReportFormat | None,
        typer.Option(
            "--format",
            "-F",
            case_sensitive=False,
            help="table or json (default: table on a terminal, json when piped).",
        ),
    ] = None,
    apply_to: Annotated[
        Path | None,
        typer.Option(
            "--apply-to",
            help="Write the post-restart store into this new or empty directory (STORE is "
            "never touched).",
        ),
    ] = None,
    lost_limit: Annotated[
        int,
        typer.Option("--lost-limit", min=0, help="List at most this many lost messages."),
    ] = 1000,
) -> None:
    """Predict exactly what a broker restart keeps, cuts, deletes and rebuilds.

    Exit status: 0 when the restart loses nothing, 1 when it would discard messages (or the
    broker would refuse to start), 2 on unreadable input.

    Example: rmqinspect recover /data/rocketmq/store --format json
    """
    if assume_clean and assume_crash:
        raise typer.BadParameter("give at most one of --assume-clean and --assume-crash")
    options = RecoverOptions(
        last_exit_ok=True if assume_clean else False if assume_crash else None,
        check_crc=not no_check_crc,
        message_index_safe=message_index_safe,
        lost_limit=lost_limit,
    )
    fmt = resolve_format(None if format is None else OutputFormat(format.value))
    total = _commitlog_bytes(store)
    chosen = None if profile is ProfileChoice.AUTO else Profile(profile.value)
    with (
        open_store(
            store, commitlog_file_size, cq_file_size, index_slots, index_entries, chosen
        ) as opened,
        progress_bar(total, "recovering", progress_wanted(fmt)) as advance,
    ):
        if apply_to is None:
            report = analyze_recovery(opened, options, advance)
            applied = None
        else:
            try:
                report, applied = apply_recovery(opened, apply_to, options, advance)
            except ApplyRefused as refused:
                print(f"rmqinspect: error: {refused}", file=sys.stderr)
                raise typer.Exit(EXIT_FINDINGS) from None
    render_recover(report, fmt, applied)
    if not report.broker_starts or report.loses_data:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_OK)


def _commitlog_bytes(store: Path) -> int:
    directory = store / "commitlog"
    try:
        return sum(e.stat().st_size for e in directory.iterdir() if e.is_file())
    except OSError:
        return 0


def register(app: typer.Typer) -> None:
    app.command("recover")(recover)
