"""``rmqinspect report STORE --out FILE``: the incident on one self-contained HTML page."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from rmqinspect import __version__
from rmqinspect.analysis.offsets import parse_broker_version
from rmqinspect.analysis.report import incident_report
from rmqinspect.analysis.verify import Verifier, VerifyOptions
from rmqinspect.cli.common import EXIT_FINDINGS, EXIT_OK, fail, handle_errors
from rmqinspect.cli.options import (
    FormatOpt,
    StoreArg,
    commitlog_progress,
    open_store,
    with_store_options,
)
from rmqinspect.render.output import resolve_format
from rmqinspect.render.report import PageMeta, page, render_report
from rmqinspect.store.layout import ALL_PARTS, StorePart
from rmqinspect.store.model import StoreOptions
from rmqinspect.store.output import prepare_output_file, replace_file


@handle_errors
@with_store_options
def report(
    store: StoreArg,
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="The HTML file to write (outside STORE)."),
    ],
    salvage: Annotated[
        Path | None,
        typer.Option(
            "--salvage",
            help="A directory `rmqinspect salvage --out` wrote: its counts go on the page.",
        ),
    ] = None,
    broker_version: Annotated[
        str | None,
        typer.Option(
            "--broker-version",
            help="The broker's release, as for `groups` (e.g. 4.9.3). Default: the release "
            "the store's profile was checked against.",
        ),
    ] = None,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Write the incident as one HTML page that opens with no network: the verdict, the
    commitlog files as a map (data, damage, the restart's start, end and cut), the queues
    with the groups' committed offsets, the lost messages and verify's findings. Its numbers
    are those of `verify`, `recover` and `groups --after-restart`, named on the page.

    Exit status: 0 when the restart loses nothing and verify finds no error, 1 otherwise,
    2 on unreadable input or an --out inside STORE.

    Example: rmqinspect report /data/rocketmq/store --out incident.html
    """
    fmt = resolve_format(format)
    with open_store(store, store_options, "report", ALL_PARTS | StorePart.VERIFY) as opened:
        target = prepare_output_file(out, "--out", opened.root)
        profile = opened.profile.profile
        version_text = broker_version or profile.checked_against
        try:
            version = parse_broker_version(version_text)
        except ValueError as err:
            raise fail(f"--broker-version: {err}") from None
        basis = "--broker-version" if broker_version else f"assumed from the profile {profile}"
        with (
            Verifier(opened, VerifyOptions(hexdump=True), os.cpu_count() or 1) as verifier,
            commitlog_progress(opened, "verifying", fmt) as advance,
        ):
            verified = verifier.run(advance)
        with commitlog_progress(opened, "recovering", fmt) as advance:
            incident = incident_report(
                opened, verified, version, version_text, basis, salvage, advance, verifier.restart
            )
    shown = str(store)
    lost = incident.recovery.lost_messages
    limit = lost.count if lost is not None else 0
    meta = PageMeta(
        __version__,
        datetime.now(UTC).isoformat(timespec="seconds"),
        {
            "findings, map": f"rmqinspect verify {shown} --hexdump -F json",
            "verdict, map, lost": f"rmqinspect recover {shown} -F json --lost-limit {limit}",
            "groups, queues": f"rmqinspect groups {shown} --after-restart "
            f"--broker-version {version_text} -F json",
            "queues on disk": f"rmqinspect offsets {shown} -F json",
            **({"salvage": f"{salvage}/report.json"} if salvage is not None else {}),
        },
    )
    data = page(incident, meta).encode("utf-8")
    replace_file(target, data)
    render_report(incident, target, len(data), fmt)
    raise typer.Exit(EXIT_FINDINGS if incident.flagged else EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
