"""``rmqinspect decode-id ID``: offsetMsgId and UNIQ_KEY readings of a message id."""

from __future__ import annotations

import time
from datetime import UTC
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import typer

from rmqinspect.analysis.ids import decode_id
from rmqinspect.cli.common import fail, handle_errors
from rmqinspect.cli.options import FormatOpt, parse_optional_time
from rmqinspect.render.ids import render_id
from rmqinspect.render.output import resolve_format


@handle_errors
def decode_id_command(
    message_id: Annotated[str, typer.Argument(metavar="ID", help="32 or 56 hex characters.")],
    reference: Annotated[
        str | None,
        typer.Option(
            "--reference",
            help="Date the UNIQ_KEY against this time (the born time; ms or ISO 8601).",
        ),
    ] = None,
    tz: Annotated[
        str, typer.Option("--tz", help="The producer's time zone (IANA name), default UTC.")
    ] = "UTC",
    format: FormatOpt = None,
) -> None:
    """Decode an id: an offsetMsgId gives the store host and physical offset, a UNIQ_KEY the
    producer IP, pid and time. A 32-hex id can be either; both readings are shown.

    Example: rmqinspect decode-id 0A01020300002A9F000000000000792E
    """
    try:
        zone = UTC if tz == "UTC" else ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise fail(f"--tz: unknown time zone {tz!r}") from None
    decoding = decode_id(
        message_id, parse_optional_time(reference, "--reference"), int(time.time() * 1000), zone
    )
    render_id(decoding, resolve_format(format))


def register(app: typer.Typer) -> None:
    app.command("decode-id")(decode_id_command)
