"""``rmqinspect consumequeue STORE TOPIC QUEUE_ID``: units and the message each points to."""

from __future__ import annotations

from typing import Annotated

import typer

from rmqinspect.analysis.queue_listing import list_units, queue_listing
from rmqinspect.cli.common import fail, handle_errors
from rmqinspect.cli.options import (
    BodyOpt,
    FormatOpt,
    FromQueueOffsetOpt,
    LimitOpt,
    StoreOrFileArg,
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
from rmqinspect.store.layout import QueueId, StorePart
from rmqinspect.store.loose import LooseFile, LooseKind, is_loose
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def consumequeue(
    store: StoreOrFileArg,
    topic: Annotated[
        str | None,
        typer.Argument(
            help="Topic (directory name under consumequeue/); for one file, default: its "
            "grandparent directory's name.",
            show_default=False,
        ),
    ] = None,
    queue_id: Annotated[
        int | None,
        typer.Argument(
            help="Queue id; for one file, default: its parent directory's name.",
            show_default=False,
        ),
    ] = None,
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

    STORE may be one consume queue file on its own (its name is its first unit's byte
    offset): its units are listed, without the messages (no commitlog is read).

    Example: rmqinspect consumequeue STORE TopicA 0 --from-queue-offset 100 --limit 20
    """
    from_offset = merged(from_offset, old_from, "--from-queue-offset", "--from")
    fmt = resolve_format(format)
    loose = LooseFile(LooseKind.CONSUME_QUEUE, topic, queue_id)
    wanted = QueueId(topic, queue_id) if topic is not None and queue_id is not None else None
    if wanted is None and not is_loose(store):
        raise fail(f"{store}: give TOPIC and QUEUE_ID of the consume queue to list")
    reads = StorePart.CONSUME_QUEUES | StorePart.COMMITLOG
    with open_store(store, store_options, "consumequeue", reads, loose) as st:
        if st.loose is None and topic is not None and no_such_topic(st, topic):
            raise topic_not_found(topic)
        qid = wanted if st.loose is None and wanted is not None else next(iter(st.queue_dirs))
        listing = queue_listing(st, qid.topic, qid.queue_id, from_offset, show_all)
        units = list_units(st, listing, qid.topic, qid.queue_id, limit)
        bad = render_queue_listing(listing, units, fmt, body)
        alone = st.loose is not None
    if alone:
        warn(f"{store}: a consume queue file on its own: its units' messages are not read")
    elif bad:
        warn(f"{bad} listed unit(s) do not lead to their message")


def register(app: typer.Typer) -> None:
    app.command("consumequeue")(consumequeue)
