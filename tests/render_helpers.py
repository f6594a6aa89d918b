"""What the renderer tests check on every JSON document and table."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from rich.table import Table

from rmqinspect.render.output import print_table
from rmqinspect.render.values import iso_ms

# Store text a table must show as it is, never as rich markup.
MARKUP_KEYS = ("[order]", "a[/]b")
MARKUP_TAG = "[bold]T"


def decode_body(encoding: str, body: str | None) -> bytes | None:
    """The bytes a message JSON's ``body`` stands for, by its ``body_encoding`` (the inverse of
    ``render.message.encode_body``)."""
    if body is None or encoding == "none":
        return None
    if encoding == "text":
        return body.encode("utf-8")
    if encoding == "hex":
        return bytes.fromhex(body)
    if encoding == "base64":
        return base64.b64decode(body)
    raise ValueError(f"unknown body_encoding {encoding!r}")


def assert_time_siblings(doc: Any) -> int:
    """Every ``*_timestamp`` (epoch ms or None) at any depth has its ``*_time`` sibling, the
    ISO form of the same value, and every ``*_time`` a ``*_timestamp``; returns how many."""
    found = 0
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key.endswith("_timestamp") and (value is None or isinstance(value, int)):
                sibling = key.removesuffix("stamp")
                assert sibling in doc, key
                assert doc[sibling] == iso_ms(value), key
                found += 1
            elif key.endswith("_time"):
                assert f"{key}stamp" in doc, key
            found += assert_time_siblings(value)
    elif isinstance(doc, list):
        found += sum(assert_time_siblings(v) for v in doc)
    return found


def printed_json(capsys: pytest.CaptureFixture[str]) -> Any:
    """The JSON document a renderer just printed (it must be exactly one)."""
    return json.loads(capsys.readouterr().out)


def printed_jsonl(capsys: pytest.CaptureFixture[str]) -> list[Any]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def table_text(tables: list[Table], capsys: pytest.CaptureFixture[str]) -> str:
    for table in tables:
        print_table(table)
    return capsys.readouterr().out
