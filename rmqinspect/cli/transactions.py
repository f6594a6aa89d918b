"""``rmqinspect transactions STORE``: half messages by state, op and commit records."""

from __future__ import annotations

from typing import Annotated

import typer

from rmqinspect.analysis.transactions import DEFAULT_STUCK_AFTER_MS, transactions_report
from rmqinspect.cli.common import EXIT_FINDINGS, handle_errors
from rmqinspect.cli.options import (
    FormatOpt,
    StoreArg,
    commitlog_progress,
    open_store,
    with_store_options,
)
from rmqinspect.render.output import resolve_format
from rmqinspect.render.transactions import render_transactions
from rmqinspect.store.layout import StorePart
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def transactions(
    store: StoreArg,
    stuck_after: Annotated[
        float,
        typer.Option(
            "--stuck-after",
            min=0,
            help="Seconds a transaction may stay pending (to the newest record) before it "
            "counts as stuck; default: the check service's budget, 15 checks x 60 s.",
        ),
    ] = DEFAULT_STUCK_AFTER_MS / 1000,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Transactional messages: each half (RMQ_SYS_TRANS_HALF_TOPIC) linked to its check copies,
    its op record (RMQ_SYS_TRANS_OP_HALF_TOPIC), its commit record in the real topic and its
    TRANS_CHECK_MAX_TIME_TOPIC record: committed, rolled back, pending or given up, with check
    counts, the oldest pending and inconsistencies (an op body that is no offset or names no
    half, a commit record that names no half). Exits 1 on an inconsistency or a transaction
    pending longer than --stuck-after.

    Example: rmqinspect transactions STORE --stuck-after 600
    """
    fmt = resolve_format(format)
    with (
        open_store(store, store_options, "transactions", StorePart.COMMITLOG) as st,
        commitlog_progress(st, "reading transactional records", fmt) as advance,
    ):
        report = transactions_report(st, round(stuck_after * 1000), advance)
    render_transactions(report, fmt)
    if report.inconsistent or report.stuck:
        raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("transactions")(transactions)
