"""``rmqinspect trace STORE``: a message's copies (delay, retry, DLQ, transaction, trace) and
what each consumer group and the next restart make of them."""

from __future__ import annotations

from typing import Annotated

import typer

from rmqinspect.analysis.offsets import ConsumeFromWhere
from rmqinspect.analysis.trace import BadQuery, TraceQuery, trace_report
from rmqinspect.cli.common import EXIT_FINDINGS, fail, handle_errors
from rmqinspect.cli.options import (
    ConsumeFromWhereOpt,
    FormatOpt,
    StoreArg,
    commitlog_progress,
    no_such_topic,
    open_store,
    topic_not_found,
    with_store_options,
)
from rmqinspect.format.fate import TRACE_TOPIC
from rmqinspect.render.output import resolve_format
from rmqinspect.render.trace import render_trace
from rmqinspect.store.layout import ALL_PARTS
from rmqinspect.store.model import StoreOptions


@handle_errors
@with_store_options
def trace(
    store: StoreArg,
    msg_id: Annotated[
        str | None,
        typer.Option(
            "--msg-id", help="offsetMsgId (or the client's msgId, a UNIQ_KEY) of any copy."
        ),
    ] = None,
    uniq_key: Annotated[
        str | None, typer.Option("--uniq-key", help="Client message id (UNIQ_KEY).")
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", help="Business key (KEYS); needs --topic.")
    ] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="The topic of --key.")] = None,
    trace_topic: Annotated[
        list[str] | None,
        typer.Option(
            "--trace-topic",
            help=f"A message-trace topic besides {TRACE_TOPIC} (a client's customizedTraceTopic).",
        ),
    ] = None,
    consume_from_where: ConsumeFromWhereOpt = ConsumeFromWhere.UNKNOWN,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Follow a message through delay, retry, DLQ, transactions, traces and the 5.x timer
    (its record in rmq_sys_wheel_timer, roll copies, a recall's marker, each with its timerlog
    unit, and the delivered copy): the original and
    every copy (linked by UNIQ_KEY and ORIGIN_MESSAGE_ID, op and commit records by the half they
    resolve), ordered by physical offset, each with its delay level and due time, each consumer
    group's committed offset against it (consumed or pending) and what the predicted restart
    does to it (kept, cut, queue entry lost); a summary per group. The seed is found by the
    index where it answers, else by a walk ("search"). A group without a committed offset on a
    copy's queue starts where --consume-from-where says (the rule groups uses). Exits 1 when no
    message matches.

    Example: rmqinspect trace STORE --key ORDER-1 --topic Orders
    """
    fmt = resolve_format(format)
    given = [n for n, v in (("--msg-id", msg_id), ("--uniq-key", uniq_key), ("--key", key)) if v]
    if len(given) != 1:
        raise fail("give exactly one of --msg-id, --uniq-key, --key (with --topic)")
    if (key is None) != (topic is None):
        raise fail("--topic goes with --key")
    query = TraceQuery(
        msg_id=msg_id,
        uniq_keys=(uniq_key,) if uniq_key else (),
        key=key,
        topic=topic,
        trace_topics=(TRACE_TOPIC, *(trace_topic or ())),
        consume_from_where=consume_from_where,
    )
    # The restart prediction recovers the queues and the index: every part is read.
    with (
        open_store(store, store_options, "trace", ALL_PARTS) as st,
        commitlog_progress(st, "following the message's copies", fmt) as advance,
    ):
        try:
            report = trace_report(st, query, advance)
        except BadQuery as err:
            raise fail(str(err)) from None
        if not report.found and no_such_topic(st, topic):
            assert topic is not None
            raise topic_not_found(topic)
    render_trace(report, fmt)
    if not report.found:
        raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)
