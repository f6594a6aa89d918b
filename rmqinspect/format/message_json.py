"""The message object: a decoded record as JSON values, with stable field names, the one
definition that ``messages``, ``lookup``, ``consumequeue``, ``salvage`` and the C writer
(``format/_speedups.c``, which takes its keys and their order from :func:`message_json`) share.

The body is emitted in a form its exact bytes can be recovered from: ``body_encoding`` says how
``body`` is written. ``text`` falls back to ``base64`` for a body that is not valid UTF-8, so the
JSON never loses bytes. A body the producer compressed is shown decompressed (what its consumer
gets), ``raw`` shows the bytes as stored; such a record's object says which (``body_form``) and
why its body did not decompress (``body_error``). Pure: no I/O, no printing.
"""

from __future__ import annotations

import base64
import enum
from typing import Any

from rmqinspect.format import commitlog as cl
from rmqinspect.format.commitlog import MessageRecord
from rmqinspect.format.compression import consumer_body
from rmqinspect.format.ids import msg_id
from rmqinspect.format.times import iso_ms


class BodyFormat(enum.StrEnum):
    TEXT = "text"
    HEX = "hex"
    BASE64 = "base64"
    RAW = "raw"  # the bytes as stored (compressed bodies not decompressed), as ``text`` shows them
    NONE = "none"


def encode_body(body: bytes | None, fmt: BodyFormat) -> tuple[str, str | None]:
    """(body_encoding, body) for JSON; ``text`` degrades to ``base64`` for non-UTF-8 bytes."""
    if body is None or fmt is BodyFormat.NONE:
        return "none", None
    if fmt in (BodyFormat.TEXT, BodyFormat.RAW):
        try:
            return "text", body.decode("utf-8")
        except UnicodeDecodeError:
            return "base64", base64.b64encode(body).decode("ascii")
    if fmt is BodyFormat.HEX:
        return "hex", body.hex()
    return "base64", base64.b64encode(body).decode("ascii")


def shown_body(record: MessageRecord, fmt: BodyFormat) -> tuple[bytes | None, dict[str, Any]]:
    """The bytes ``body`` shows in ``fmt`` and, for a compressed record, its ``body_form``
    (decompressed|stored; null when no body is shown) and ``body_error`` keys: a compressed
    body is shown decompressed, unless ``fmt`` is ``raw`` or it does not decompress."""
    if record.body is None or not record.sys_flag & cl.COMPRESSED_FLAG:
        return record.body, {}
    decoded = consumer_body(record.body, record.sys_flag)
    shown = record.body if fmt is BodyFormat.RAW else decoded.body
    form = "decompressed" if decoded.decompressed and fmt is not BodyFormat.RAW else "stored"
    extra = {"body_form": None if fmt is BodyFormat.NONE else form, "body_error": decoded.error}
    return shown, extra


def message_json(record: MessageRecord, body: BodyFormat = BodyFormat.TEXT) -> dict[str, Any]:
    shown, compressed = shown_body(record, body)
    encoding, text = encode_body(shown, body)
    out: dict[str, Any] = {
        "physical_offset": record.position,
        "store_size": record.store_size,
        "version": record.version,
        "topic": record.topic,
        "queue_id": record.queue_id,
        "queue_offset": record.queue_offset,
        "sys_flag": record.sys_flag,
        "transaction": record.transaction_name,
        "flag": record.flag,
        "body_crc": record.body_crc,
        "body_crc_ok": record.body_crc_ok,
        "prop_crc": None if record.prop_crc is None else record.prop_crc.stored,
        "prop_crc_ok": None if record.prop_crc is None else record.prop_crc.match,
        "born_timestamp": record.born_timestamp,
        "born_time": iso_ms(record.born_timestamp),
        "born_host": str(record.born_host),
        "store_timestamp": record.store_timestamp,
        "store_time": iso_ms(record.store_timestamp),
        "store_host": str(record.store_host),
        "reconsume_times": record.reconsume_times,
        "prepared_transaction_offset": record.prepared_transaction_offset,
        "properties": dict(sorted(record.properties.items())),
        "tags": record.tags,
        "keys": record.keys,
        "uniq_key": record.uniq_key,
        "msg_id": msg_id(record),
        "body_length": record.body_length,
        "compression": record.compression,
        "body_encoding": encoding,
        "body": text,
        **compressed,
    }
    if record.physical_offset_field != record.position:
        # The PHYSICALOFFSET field disagrees with where the record sits: worth seeing.
        out["physical_offset_field"] = record.physical_offset_field
    if record.entry is not None:
        # A DLedger store: the Raft log entry that holds the record (at physical offset - 48).
        out["entry_index"] = record.entry.index
        out["entry_term"] = record.entry.term
        out["entry_position"] = record.entry.pos
    return out
