"""Rendering of ``decode-id``."""

from __future__ import annotations

from typing import Any

from rmqinspect.analysis.ids import IdDecoding
from rmqinspect.render.output import (
    OutputFormat,
    key_value_table,
    print_document,
    print_table,
    to_jsonable,
    warn,
)
from rmqinspect.render.values import time_cell, with_times


def id_json(d: IdDecoding) -> dict[str, Any]:
    uniq = None
    if d.uniq_key is not None:
        uniq = with_times(to_jsonable(d.uniq_key))
    return {
        "id": d.text,
        "ambiguous": d.ambiguous,
        "offset_msg_id": None if d.offset_msg_id is None else to_jsonable(d.offset_msg_id),
        "uniq_key": uniq,
    }


def render_id(d: IdDecoding, fmt: OutputFormat) -> None:
    if d.ambiguous:
        warn(
            f"{len(d.text)} hex characters fit both an offsetMsgId and a UNIQ_KEY; both readings "
            "are shown (a message's UNIQ_KEY property or its position tells which it is)"
        )
    if print_document(id_json(d), fmt):
        return
    if d.offset_msg_id is not None:
        m = d.offset_msg_id
        rows: list[tuple[str, object]] = [
            ("store host", m.store_host),
            ("physical offset", m.physical_offset),
        ]
        rows.extend(("warning", w) for w in m.warnings)
        print_table(key_value_table(f"As an offsetMsgId: {d.text}", rows))
    if d.uniq_key is not None:
        u = d.uniq_key
        rows = [
            ("producer ip", u.ip),
            ("producer pid (low 16 bits)", u.pid),
            ("class loader hash", u.class_loader_hash),
            ("ms since month start", u.time_offset_ms),
            ("counter", u.counter),
            ("producer time", time_cell(u.producer_timestamp)),
            ("time basis", u.time_basis),
        ]
        rows.extend(("warning", w) for w in u.warnings)
        print_table(key_value_table(f"As a UNIQ_KEY: {d.text}", rows))
