"""``rmqinspect verify STORE``: check every file of a store, as amcheck does a database."""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Annotated

import typer

from rmqinspect.analysis.verify import Severity, Verifier, VerifyOptions
from rmqinspect.cli.common import EXIT_FINDINGS, EXIT_OK, fail, handle_errors
from rmqinspect.cli.options import FormatOpt, StoreArg, commitlog_progress, with_store_options
from rmqinspect.render.output import resolve_format
from rmqinspect.render.verify import render_verify
from rmqinspect.store.layout import StorePart
from rmqinspect.store.model import Store, StoreOptions


class FailOn(StrEnum):
    """The severities ``--fail-on`` takes: an info finding never fails a run."""

    ERROR = Severity.ERROR.value
    WARNING = Severity.WARNING.value


@handle_errors
@with_store_options
def verify(
    store: StoreArg,
    no_crc: Annotated[
        bool, typer.Option("--no-crc", help="Skip BODYCRC and the 5.x property CRC (faster).")
    ] = False,
    fail_on: Annotated[
        FailOn,
        typer.Option(
            "--fail-on",
            case_sensitive=False,
            help="Exit 1 when a finding of this severity or worse is found.",
        ),
    ] = FailOn.ERROR,
    format: FormatOpt = None,
    hexdump: Annotated[
        bool, typer.Option("--hexdump", help="Show the bytes around each bad record.")
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Worker processes: commitlog byte ranges, queue and index files checked in "
            "parallel (default: all cores).",
        ),
    ] = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Check every commitlog, consume-queue and index file, the checkpoint, config files and
    offsets; each problem is a finding with a stable check id (see the README).

    Exit status: 0 when nothing at or above --fail-on is found, 1 when something is,
    2 on unreadable input.

    Example: rmqinspect verify /data/rocketmq/store --fail-on warning -F json
    """
    options = VerifyOptions(check_crc=not no_crc, hexdump=hexdump)
    fmt = resolve_format(format)
    with Store.open(store, store_options) as opened:
        # A layout that takes verify's unit checks over is refused (none does today).
        refusal = opened.refusal("verify", StorePart.VERIFY)
        if refusal is not None:
            raise fail(refusal)
        with (
            Verifier(opened, options, jobs or os.cpu_count() or 1) as verifier,
            commitlog_progress(opened, "verifying", fmt) as advance,
        ):
            report = verifier.run(advance)
    render_verify(report, fmt)
    raise typer.Exit(EXIT_FINDINGS if report.failing(Severity(fail_on.value)) else EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
