"""``rmqinspect lookup STORE``: where is message X (by id, key, queue offset, offset or time)."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer

from rmqinspect.analysis import lookup as lk
from rmqinspect.cli.common import EXIT_FINDINGS, fail, handle_errors
from rmqinspect.cli.options import (
    BodyOpt,
    FormatOpt,
    LimitOpt,
    SinceOpt,
    StoreArg,
    UntilOpt,
    check_range,
    commitlog_progress,
    hidden_alias,
    merged,
    no_such_topic,
    open_store,
    parse_optional_time,
    parse_time,
    topic_not_found,
    with_store_options,
)
from rmqinspect.format.message_json import BodyFormat
from rmqinspect.render.lookup import render_lookup
from rmqinspect.render.output import resolve_format
from rmqinspect.store.layout import ALL_PARTS, StorePart
from rmqinspect.store.model import StoreOptions

_MODES = ("--msg-id", "--uniq-key", "--key", "--queue-offset", "--physical-offset")
_TIME_MODE = "--since/--until"  # the window alone: messages of --topic stored in it
_BY_TOPIC = ("--uniq-key", "--key", "--queue-offset", _TIME_MODE)


@handle_errors
@with_store_options
def lookup(
    store: StoreArg,
    msg_id: Annotated[
        str | None,
        typer.Option("--msg-id", help="offsetMsgId: decode it and read the record it points to."),
    ] = None,
    uniq_key: Annotated[
        str | None,
        typer.Option("--uniq-key", help="Client message id (UNIQ_KEY), via the index."),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="Business key (KEYS), via the index; needs --topic."),
    ] = None,
    queue_offset: Annotated[
        str | None,
        typer.Option("--queue-offset", help="TOPIC:QUEUE_ID:OFFSET, via the consume queue."),
    ] = None,
    physical_offset: Annotated[
        int | None,
        typer.Option("--physical-offset", help="Read the record at this physical offset."),
    ] = None,
    topic: Annotated[
        str | None, typer.Option("--topic", "-t", help="Topic of the key or time window.")
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    old_phy_offset: Annotated[int | None, hidden_alias("--phy-offset")] = None,
    time_range: Annotated[str | None, hidden_alias("--time")] = None,
    begin: Annotated[str | None, hidden_alias("--begin")] = None,
    end: Annotated[str | None, hidden_alias("--end")] = None,
    max_num: Annotated[
        int | None,
        typer.Option(
            "--max-num", min=1, help="Index hits asked for (default: 64 for keys, 32 for ids)."
        ),
    ] = None,
    scan: Annotated[
        bool,
        typer.Option("--scan", help="Walk the whole commitlog instead of using the index."),
    ] = False,
    as_recovered: Annotated[
        bool,
        typer.Option(
            "--as-recovered",
            help="Key/UNIQ_KEY: answer as the broker would after restarting on this store "
            "(recovered end, index files deleted and rebuilt); costs a recovery emulation.",
        ),
    ] = False,
    limit: LimitOpt = None,
    body: BodyOpt = BodyFormat.TEXT,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Find messages: exactly one of --msg-id, --uniq-key, --key, --queue-offset,
    --physical-offset, or --since/--until alone (with --topic: the messages stored in that
    window; with --key or --uniq-key they narrow the index search). Exits 0 when something is
    found, 1 when nothing is.

    Examples:
      rmqinspect lookup STORE --msg-id 0A01020300002A9F000000000000792E
      rmqinspect lookup STORE --key ORDER-42 --topic TopicA
      rmqinspect lookup STORE --queue-offset TopicA:0:17
    """
    physical_offset = merged(physical_offset, old_phy_offset, "--physical-offset", "--phy-offset")
    since = merged(since, begin, "--since", "--begin")
    until = merged(until, end, "--until", "--end")
    if time_range is not None and (since is not None or until is not None):
        raise fail("--time is the old spelling of --since/--until: give only those")
    begin_ms = parse_optional_time(since, "--since")
    end_ms = parse_optional_time(until, "--until")
    check_range(begin_ms, end_ms, "--since/--until")
    given = [
        name
        for name, value in zip(
            _MODES, (msg_id, uniq_key, key, queue_offset, physical_offset), strict=True
        )
        if value is not None
    ]
    window = _time_range(time_range) if time_range is not None else None
    if window is not None or (not given and (begin_ms is not None or end_ms is not None)):
        given.append(_TIME_MODE)
        window = window or (begin_ms or 0, _or_max(end_ms))
    if len(given) != 1:
        raise fail(f"give exactly one of {', '.join(_MODES)}, or {_TIME_MODE} (got {len(given)})")
    if as_recovered and key is None and uniq_key is None:
        raise fail("--as-recovered applies to --key and --uniq-key")
    if (key is not None or window is not None) and topic is None:
        raise fail(f"{given[0]} needs --topic")
    ref = _queue_ref(queue_offset) if queue_offset is not None else None
    fmt = resolve_format(format)
    with (
        open_store(
            store, store_options, f"lookup {given[0]}", _reads(given[0], scan, as_recovered)
        ) as st,
        commitlog_progress(st, "scanning commitlog", fmt) as advance,
    ):
        if msg_id is not None:
            result = lk.lookup_msg_id(st, msg_id)
        elif physical_offset is not None:
            result = lk.lookup_phy_offset(st, physical_offset)
        elif ref is not None:
            result = lk.lookup_queue_offset(st, *ref, advance)
        elif window is not None:
            assert topic is not None
            start, stop = window
            result = lk.lookup_time(
                st, topic, start, stop, limit=limit, scan=scan, progress=advance
            )
        else:
            uniq = uniq_key is not None
            text = uniq_key if uniq_key is not None else key
            assert text is not None
            topics = (topic,) if topic is not None else tuple(lk.known_topics(st))
            q = lk.KeyQuery(
                text,
                topics,
                uniq,
                max_num or lk.default_max_num(uniq),
                begin_ms or 0,
                _or_max(end_ms),
            )
            with contextlib.ExitStack() as stack:
                restart = None
                if as_recovered and not scan:
                    restart = stack.enter_context(lk.restarted_index(st, advance))
                result = lk.lookup_key(
                    st, q, scan=scan, limit=limit, restart=restart, progress=advance
                )
        # Nothing found for a topic the store does not know: that, not "try --scan" (the
        # commitlog's undispatched tail was read; a --scan read every record).
        asked = ref[0] if ref is not None else topic
        if not result.found and given[0] in _BY_TOPIC and no_such_topic(st, asked):
            assert asked is not None
            raise topic_not_found(asked)
        render_lookup(result, fmt, body)
    if not result.found:
        raise typer.Exit(EXIT_FINDINGS)


def _reads(mode: str, scan: bool, as_recovered: bool) -> StorePart:
    """What a mode's answer is read from (the index and the queues are skipped by --scan)."""
    reads = StorePart.COMMITLOG
    if scan:
        return reads
    if mode in ("--key", "--uniq-key"):
        reads |= StorePart.INDEX | (ALL_PARTS if as_recovered else StorePart(0))
    elif mode in ("--queue-offset", _TIME_MODE):
        reads |= StorePart.CONSUME_QUEUES
    return reads


def _or_max(value: int | None) -> int:
    return lk.LONG_MAX if value is None else value


def _queue_ref(text: str) -> tuple[str, int, int]:
    try:
        return lk.parse_queue_ref(text)
    except ValueError as err:
        raise fail(f"--queue-offset: {err}") from None


def _time_range(text: str) -> tuple[int, int]:
    start, sep, stop = text.partition("..")
    if not sep:
        raise fail(f"--time expects FROM..TO, got {text!r}")
    begin = parse_time(start, "--time") if start.strip() else 0
    end = parse_time(stop, "--time") if stop.strip() else lk.LONG_MAX
    check_range(begin, end, "--time")
    return begin, end


def register(app: typer.Typer) -> None:
    app.command("lookup")(lookup)
