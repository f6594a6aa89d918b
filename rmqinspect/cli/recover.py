"""``rmqinspect recover STORE``: what a broker restart will keep, cut, delete and rebuild."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from rmqinspect.analysis.recovery import (
    ApplyRefused,
    RangeChecker,
    RecoverOptions,
    analyze_recovery,
    apply_recovery,
)
from rmqinspect.cli.common import EXIT_FINDINGS, EXIT_OK, fail, handle_errors
from rmqinspect.cli.options import (
    OUT_NAMES,
    FormatOpt,
    StoreArg,
    commitlog_progress,
    hidden_alias,
    merged,
    open_store,
    parse_optional_time,
    with_store_options,
)
from rmqinspect.render.output import resolve_format, warn
from rmqinspect.render.recover import render_recover
from rmqinspect.store.layout import ALL_PARTS
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def recover(
    store: StoreArg,
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
    force_verify_prop_crc: Annotated[
        bool,
        typer.Option(
            "--force-verify-prop-crc",
            help="The broker (5.2+) runs with forceVerifyPropCRC=true: recovery checks each "
            "record's __CRC32# property instead of the body CRC, and stops at the first mismatch.",
        ),
    ] = False,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="When the broker restarts (epoch ms or ISO 8601), for the timer store's read "
            "time (pulled forward to now - 7 days + 60 slots); default: the store's newest "
            "store time.",
        ),
    ] = None,
    format: FormatOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            *OUT_NAMES,
            help="Write the post-restart store into this new or empty directory (STORE is "
            "never touched).",
        ),
    ] = None,
    apply_to: Annotated[Path | None, hidden_alias("--apply-to")] = None,
    lost_limit: Annotated[
        int,
        typer.Option("--lost-limit", min=0, help="List at most this many lost messages."),
    ] = 1000,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Worker processes: the records of the recovery's commitlog files are checked "
            "in byte ranges in parallel, then dispatched in order here (default: all cores).",
        ),
    ] = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Predict exactly what a broker restart keeps, cuts, deletes and rebuilds.

    A 5.x timer store gets its own section: the timerlog's recovered end, where enqueueing
    of rmq_sys_wheel_timer resumes, the wheel's read time, and the timer units whose records
    the commitlog's recovery cuts.

    Exit status: 0 when the restart loses nothing, 2 on unreadable input,
    1 when it would discard messages or the broker would refuse to start.

    --format json prints the whole report; jsonl only the lost messages,
    one per line (at most --lost-limit of them).

    Example: rmqinspect recover /data/rocketmq/store --format json
    """
    out = merged(out, apply_to, "--out", "--apply-to")
    if assume_clean and assume_crash:
        raise typer.BadParameter("give at most one of --assume-clean and --assume-crash")
    options = RecoverOptions(
        last_exit_ok=True if assume_clean else False if assume_crash else None,
        check_crc=not no_check_crc,
        message_index_safe=message_index_safe,
        force_verify_prop_crc=force_verify_prop_crc,
        lost_limit=lost_limit,
        read_timer=True,
        now=parse_optional_time(now, "--now"),
    )
    fmt = resolve_format(format)
    with (
        open_store(store, store_options, "recover", ALL_PARTS) as opened,
        RangeChecker(opened, jobs or os.cpu_count() or 1) as checker,
        commitlog_progress(opened, "recovering", fmt) as advance,
    ):
        profile = opened.profile.profile
        if force_verify_prop_crc and not profile.supports_prop_crc:
            raise fail(f"--force-verify-prop-crc: a {profile} broker has no forceVerifyPropCRC")
        if out is None:
            report = analyze_recovery(opened, options, advance, checker)
            applied = None
        else:
            try:
                report, applied = apply_recovery(opened, out, options, advance, checker)
            except ApplyRefused as refused:
                # The verdict still goes to stdout; the refusal to apply is the error line.
                report, applied = refused.report, None
                warn(f"{refused}")
    render_recover(report, fmt, applied)
    if not report.broker_starts or report.loses_data:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command("recover")(recover)
