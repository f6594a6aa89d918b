"""``rmqinspect messages STORE``: stream messages in commitlog order, filtered."""

from __future__ import annotations

from typing import Annotated

import typer

from rmqinspect.analysis.messages import (
    MessageFilter,
    check_filter_value,
    check_key,
    property_filter,
    stream_messages,
)
from rmqinspect.cli.common import EXIT_FINDINGS, handle_errors
from rmqinspect.cli.options import (
    BodyOpt,
    FormatOpt,
    FromOpt,
    LimitOpt,
    SinceOpt,
    StoreOrFileArg,
    ToOpt,
    UntilOpt,
    check_range,
    commitlog_progress,
    no_such_topic,
    open_store,
    parse_optional_time,
    topic_not_found,
    with_store_options,
)
from rmqinspect.format import commitlog as cl
from rmqinspect.format.message_json import BodyFormat
from rmqinspect.render.message import render_message_stream
from rmqinspect.render.output import resolve_format
from rmqinspect.store.layout import StorePart
from rmqinspect.store.loose import LooseFile, LooseKind
from rmqinspect.store.model import StoreOptions

LOOSE = LooseFile(LooseKind.COMMITLOG)  # STORE may be one commitlog file


@handle_errors
@with_store_options
def messages(
    store: StoreOrFileArg,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")] = None,
    queue_id: Annotated[
        int | None, typer.Option("--queue-id", "-q", help="Only this queue id.")
    ] = None,
    from_offset: FromOpt = None,
    to_offset: ToOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    tag: Annotated[str | None, typer.Option("--tag", help="Only this tag (TAGS).")] = None,
    key: Annotated[
        str | None, typer.Option("--key", help="Only messages with this key (KEYS).")
    ] = None,
    uniq_key: Annotated[
        str | None, typer.Option("--uniq-key", help="Only this message id (UNIQ_KEY).")
    ] = None,
    properties: Annotated[
        list[str] | None,
        typer.Option("--property", help="Only where property NAME has VALUE (repeatable)."),
    ] = None,
    tx_type: Annotated[
        str | None,
        typer.Option(
            "--tx-type", help="Only this transaction state: not|prepared|commit|rollback."
        ),
    ] = None,
    sys_flag: Annotated[
        int | None,
        typer.Option(
            "--sys-flag",
            min=0,
            help="Only records whose sysFlag has all these bits (1: compressed, 2: multi tags).",
        ),
    ] = None,
    limit: LimitOpt = None,
    body: BodyOpt = BodyFormat.TEXT,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Stream messages in commitlog order; damaged byte ranges are skipped and reported.

    Filters combine (AND); exit 1 when filters select no message.

    STORE may be one commitlog file on its own: its name is its first physical offset, its
    length the file size (or --commitlog-file-size).

    Example: rmqinspect messages STORE --topic TopicA --since 2024-05-01T10:00 --limit 20
    """
    since_ms = parse_optional_time(since, "--since")
    until_ms = parse_optional_time(until, "--until")
    check_range(from_offset, to_offset, "--from/--to")
    check_range(since_ms, until_ms, "--since/--until")
    try:
        pairs = tuple(property_filter(p) for p in properties or ())
        for value, what in ((tag, "--tag"), (uniq_key, "--uniq-key")):
            if value is not None:
                check_filter_value(value, what)
        if key is not None:
            check_key(key)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    if tx_type is not None and tx_type not in cl.TRANSACTION_TYPES:
        raise typer.BadParameter(
            f"{tx_type!r} is not one of {', '.join(cl.TRANSACTION_TYPES)}", param_hint="--tx-type"
        )
    flt = MessageFilter(
        topic=topic,
        queue_id=queue_id,
        from_offset=from_offset,
        to_offset=to_offset,
        since=since_ms,
        until=until_ms,
        limit=limit,
        tag=tag,
        key=key,
        uniq_key=uniq_key,
        properties=pairs,
        transaction=tx_type,
        sys_flag=sys_flag,
    )
    fmt = resolve_format(format)
    with (
        open_store(store, store_options, "messages", StorePart.COMMITLOG, LOOSE) as st,
        commitlog_progress(st, "scanning commitlog", fmt) as advance,
    ):
        shown = render_message_stream(stream_messages(st, flt, advance), fmt, body, "Messages")
        unknown = shown == 0 and no_such_topic(st, topic)
    if unknown:
        assert topic is not None
        raise topic_not_found(topic)
    if shown == 0 and flt.selects:
        raise typer.Exit(EXIT_FINDINGS)  # like lookup and grep: the filters found nothing


def register(app: typer.Typer) -> None:
    app.command("messages")(messages)
