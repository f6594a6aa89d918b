"""A decoded message as rich tables and as streamed JSON: the message object itself is
:func:`rmqinspect.format.message_json.message_json`; here it is written, by the C writer where
it can, and laid out for a terminal."""

from __future__ import annotations

import base64
import dataclasses
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from rmqinspect.format import commitlog as cl
from rmqinspect.format.commitlog import MessageRecord
from rmqinspect.format.ids import msg_id
from rmqinspect.format.message_json import BodyFormat, message_json, shown_body
from rmqinspect.format.times import MAX_ISO_MS, MIN_ISO_MS, iso_ms
from rmqinspect.render.output import (
    JSONL_SEPARATOR,
    Column,
    OutputFormat,
    RowTable,
    array_separator,
    dumps,
    print_json_array_blocks,
    print_jsonl_blocks,
    print_table_batches,
    warn,
)
from rmqinspect.render.values import time_cell

if TYPE_CHECKING:
    from rich.table import Table

    from rmqinspect.analysis.messages import MessageBatch, ScanEvent, SkippedRange

BODY_PREVIEW_CHARS = 48


def body_preview(body: bytes | None, limit: int = BODY_PREVIEW_CHARS) -> str:
    if body is None:
        return ""
    try:
        text = body.decode("utf-8")
        shown = text if len(text) <= limit else text[:limit] + "…"
        return shown.encode("unicode_escape").decode("ascii") if not text.isprintable() else shown
    except UnicodeDecodeError:
        head = body[: limit // 2].hex()
        return f"0x{head}{'…' if len(body) > limit // 2 else ''}"


def body_cell(record: MessageRecord, body: BodyFormat, limit: int = BODY_PREVIEW_CHARS) -> str:
    """The start of a message's body as ``--body`` asks for it: text (hex for bytes that are
    not UTF-8), hex or base64 (``none``: no body column)."""
    shown = shown_body(record, body)[0]
    if body in (BodyFormat.TEXT, BodyFormat.RAW) or shown is None:
        return body_preview(shown, limit)
    # Only the bytes the preview shows are encoded: a body can be megabytes.
    if body is BodyFormat.HEX:
        text, full = shown[: limit // 2 + 1].hex(), 2 * len(shown)
    else:
        text, full = (
            base64.b64encode(shown[: (limit // 4 + 1) * 3]).decode(),
            (len(shown) + 2) // 3 * 4,
        )
    return text[:limit] + ("…" if full > limit else "")


def messages_table(
    records: Iterable[MessageRecord],
    title: str,
    body: BodyFormat = BodyFormat.TEXT,
    capped_on_terminal: bool = False,
) -> RowTable:
    """One row per message: where it is, what it is, and the start of its body. At a narrow
    width the body, then the keys, then the tags make way; offsets and times are never cut."""
    columns = [
        Column("phy offset", right=True, whole=True),
        Column("topic"),
        Column("queue", right=True, whole=True),
        Column("q offset", right=True, whole=True),
        Column("store time", whole=True),
        Column("tags", drop=1),
        Column("keys", drop=2),
    ]
    if body is not BodyFormat.NONE:
        columns.append(
            Column(f"body ({body.value})" if body is not BodyFormat.TEXT else "body", drop=3)
        )
    table = RowTable(title, columns, capped_on_terminal)
    for r in records:
        cells = [
            r.position,
            r.topic,
            r.queue_id,
            r.queue_offset,
            iso_ms(r.store_timestamp) or str(r.store_timestamp),
            r.tags or "",
            " ".join(r.keys),
        ]
        if body is not BodyFormat.NONE:
            cells.append(body_cell(r, body))
        table.add_row(*cells)
    return table


def message_detail_table(
    record: MessageRecord, title: str, body: BodyFormat = BodyFormat.TEXT
) -> Table:
    """Every field of one message, then its properties and body (as ``--body`` asks)."""
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    crc = {True: "ok", False: "MISMATCH", None: "not read"}[record.body_crc_ok]
    rows: list[tuple[str, str]] = [
        ("physical offset", str(record.position)),
        ("msg id (offsetMsgId)", msg_id(record)),
        ("uniq key", record.uniq_key or ""),
        ("topic / queue", f"{record.topic} / {record.queue_id}"),
        ("queue offset", str(record.queue_offset)),
        ("store size", f"{record.store_size} ({record.version})"),
        ("sys flag", f"{record.sys_flag} ({record.transaction_name})"),
        ("flag", str(record.flag)),
        ("born", f"{time_cell(record.born_timestamp)} from {record.born_host}"),
        ("stored", f"{time_cell(record.store_timestamp)} on {record.store_host}"),
        ("reconsume times", str(record.reconsume_times)),
        ("prepared tx offset", str(record.prepared_transaction_offset)),
        ("tags", record.tags or ""),
        ("keys", " ".join(record.keys)),
        ("body crc", f"{record.body_crc} ({crc})"),
    ]
    if record.prop_crc is not None:
        p = record.prop_crc
        verdict = "ok" if p.match else f"MISMATCH: the record gives {p.computed}"
        rows.append(("property crc (__CRC32#)", f"{p.raw} ({verdict})"))
    if record.physical_offset_field != record.position:
        rows.append(("PHYSICALOFFSET field", f"{record.physical_offset_field} (differs!)"))
    if record.entry is not None:
        e = record.entry
        rows.append(("DLedger entry", f"index {e.index}, term {e.term}, at {e.pos} ({e.size} B)"))
    shown, compressed = shown_body(record, BodyFormat.TEXT)
    if record.compression:
        error = compressed.get("body_error")
        verdict = f"does not decompress: {error}" if error else "shown decompressed"
        rows.append(("compression", f"{record.compression} ({verdict})"))
    for k, v in sorted(record.properties.items()):
        rows.append((f"property {k}", v))
    size = f"{record.body_length} bytes"
    if compressed.get("body_form") == "decompressed" and shown is not None:
        size += f" stored, {len(shown)} decompressed"
    if body is not BodyFormat.NONE:
        shown_as = "" if body in (BodyFormat.TEXT, BodyFormat.RAW) else f", {body.value}"
        rows.append((f"body ({size}{shown_as})", body_cell(record, body, 400)))
    for k, v in rows:
        table.add_row(k, v)
    return table


def skipped_json(skipped: SkippedRange) -> dict[str, Any]:
    """A skipped byte range in a message stream: one ``skipped`` key, so it cannot be mistaken
    for a message object."""
    return {"skipped": dataclasses.asdict(skipped)}


def message_json_block(
    batch: MessageBatch, body: BodyFormat, separator: bytes, out: bytearray
) -> memoryview:
    """``dumps(message_json(record, body)) + separator`` for each record of ``batch``, joined,
    as a view of ``out``: a stream hands the same bytearray for every batch, so its pages are
    mapped once (fresh memory for each batch's text cost page faults worth a quarter of the C
    writer's time). The view must be released before ``out`` is written again.

    :func:`message_json` stays the definition: the C writer (``speedups.message_json``) is
    handed its keys, in its order, from its object for the first uncompressed record (with the
    PHYSICALOFFSET field made to disagree, so that the one optional key it writes where the
    field disagrees has its place), and only computes the values from the columns; the rows it
    leaves (text that is not UTF-8, property CRCs, compression, IPv4-mapped hosts) are written
    here record by record, as is every row without the extension."""
    import numpy as np  # the stream only: a lookup prints one message without numpy

    from rmqinspect.format import speedups

    cols, rows = batch.columns, batch.rows
    if not len(rows):
        return memoryview(b"")
    # The C writer's keys come from a record it can write: a compressed one (the C writer
    # leaves those) has keys of its own.
    plain = np.flatnonzero((cols.sys_flag[rows] & cl.COMPRESSED_FLAG) == 0)
    keys = None
    if len(plain):
        example = batch.record(int(rows[plain[0]]))
        moved = dataclasses.replace(example, physical_offset_field=example.position + 1)
        keys = _c_keys(message_json(moved, body), speedups.message_values())
    if keys is None:  # no extension, or a key it cannot write: every row record by record
        length, ends, fallback = 0, np.zeros(len(rows), np.int64), rows
    else:
        table = np.stack([getattr(cols, name)[rows] for name in speedups.message_fields()], 1)
        length, ends, fallback = speedups.message_json(
            cols.buf,
            cols.file_start,
            table,
            keys,
            _BODY_MODES[body],
            _json_settings(),
            _TRANSACTIONS,
            separator,
            out,
        )
    text = memoryview(out)[:length]
    if not len(fallback):
        return text
    pieces: list[bytes | memoryview] = []
    at = 0
    for k, end in enumerate(ends.tolist()):
        if end == at:  # a row the C writer left: it writes at least "{}"
            pieces.append(dumps(message_json(batch.record(int(rows[k])), body)) + separator)
        else:
            pieces.append(text[at:end])
        at = end
    with text:
        return memoryview(b"".join(pieces))


def _c_keys(
    example: dict[str, Any], writable: tuple[str, ...]
) -> tuple[tuple[bytes, int], ...] | None:
    """The keys of ``example`` for the C writer: the bytes before each value and the value's
    index among ``writable``; None when it cannot write one of them."""
    if not set(example) <= set(writable):
        return None
    return tuple(
        ((b"{" if k == 0 else b",") + dumps(key) + b":", writable.index(key))
        for k, key in enumerate(example)
    )


# ``raw`` is ``text`` for the rows the C writer writes: it leaves compressed ones.
_BODY_MODES = {
    BodyFormat.TEXT: 0,
    BodyFormat.RAW: 0,
    BodyFormat.HEX: 1,
    BodyFormat.BASE64: 2,
    BodyFormat.NONE: 3,
}
_TRANSACTIONS = tuple(cl.transaction_name(v).encode() for v in range(cl.TRANSACTION_TYPE_MASK + 1))


def _json_settings() -> tuple[int, ...]:
    return (
        cl.MESSAGE_MAGIC_CODE_V2,
        cl.BORNHOST_V6_FLAG,
        cl.STOREHOSTADDRESS_V6_FLAG,
        cl.COMPRESSED_FLAG,
        cl.TRANSACTION_TYPE_MASK,
        MIN_ISO_MS,
        MAX_ISO_MS,
    )


def render_message_stream(
    events: Iterable[ScanEvent], fmt: OutputFormat, body: BodyFormat, title: str
) -> int:
    """Messages to stdout in ``fmt``; each skipped byte range as a warning on stderr and, in
    JSON and JSON Lines, as a ``skipped`` object where it occurs. Returns the message count."""
    from rmqinspect.analysis.messages import SkippedRange, one_by_one

    count = 0

    def blocks(separator: bytes) -> Iterator[bytes | memoryview]:
        nonlocal count
        out = bytearray()  # every batch's text, in the same memory
        for ev in events:
            if isinstance(ev, SkippedRange):
                warn_skipped(ev)
                yield dumps(skipped_json(ev)) + separator
            elif isinstance(ev, MessageRecord):
                count += 1
                yield dumps(message_json(ev, body)) + separator
            else:
                count += len(ev)
                with message_json_block(ev, body, separator, out) as block:
                    yield block

    if fmt is OutputFormat.JSON:
        print_json_array_blocks(blocks(array_separator()))
        sys.stdout.write("\n")
        return count
    if fmt is OutputFormat.JSONL:
        print_jsonl_blocks(blocks(JSONL_SEPARATOR))
        return count

    def messages() -> Iterator[MessageRecord]:
        for ev in one_by_one(events):
            if isinstance(ev, SkippedRange):
                warn_skipped(ev)
            else:
                yield ev

    return print_table_batches(
        messages(), lambda batch, first: messages_table(batch, title if first else "", body)
    )


def warn_skipped(ev: SkippedRange) -> None:
    warn(
        f"{ev.file}: byte {ev.file_position}: skipped {ev.length} bytes "
        f"(physical offset {ev.physical_offset}): {ev.reason}: {ev.detail}".rstrip(": ")
    )
