"""``rmqinspect consumequeue STORE TOPIC QUEUE_ID``: units and the message each points to."""

from __future__ import annotations

from typing import Annotated

import typer

from rmqinspect.analysis.queues import list_units, queue_listing
from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import (
    BodyOpt,
    FormatOpt,
    FromQueueOffsetOpt,
    LimitOpt,
    StoreArg,
    hidden_alias,
    merged,
    no_such_topic,
    open_store,
    topic_not_found,
    with_store_options,
)
from rmqinspect.format.message_json import BodyFormat
from rmqinspect.render.output import resolve_format, warn
from rmqinspect.render.queues import render_queue_listing
from rmqinspect.store.layout import StorePart
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def consumequeue(
    store: StoreArg,
    topic: Annotated[str, typer.Argument(help="Topic (directory name under consumequeue/).")],
    queue_id: Annotated[int, typer.Argument(help="Queue id.")],
    from_offset: FromQueueOffsetOpt = None,
    old_from: Annotated[int | None, hidden_alias("--from", min=0)] = None,
    limit: LimitOpt = None,
    show_all: Annotated[
        bool,
        typer.Option("--all", help="Also list units after maxOffset (stale or zero units)."),
    ] = False,
    body: BodyOpt = BodyFormat.NONE,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    """List a consume queue's units, each with the message it points to or why it points nowhere.

    Example: rmqinspect consumequeue STORE TopicA 0 --from-queue-offset 100 --limit 20
    """
    from_offset = merged(from_offset, old_from, "--from-queue-offset", "--from")
    fmt = resolve_format(format)
    reads = StorePart.CONSUME_QUEUES | StorePart.COMMITLOG
    with open_store(store, store_options, "consumequeue", reads) as st:
        if no_such_topic(st, topic):
            raise topic_not_found(topic)
        listing = queue_listing(st, topic, queue_id, from_offset, show_all)
        bad = render_queue_listing(
            listing, list_units(st, listing, topic, queue_id, limit), fmt, body
        )
    if bad:
        warn(f"{bad} listed unit(s) do not lead to their message")


def register(app: typer.Typer) -> None:
    app.command("consumequeue")(consumequeue)
