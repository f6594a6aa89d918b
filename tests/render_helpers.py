"""What the renderer tests check on every JSON document and table."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from typing import Any

import pytest
from rich.table import Table

from rmqinspect.format.times import iso_ms
from rmqinspect.render.output import print_table

# Store text a table must show as it is, never as rich markup.
MARKUP_KEYS = ("[order]", "a[/]b")
MARKUP_TAG = "[bold]T"


def decode_body(encoding: str, body: str | None) -> bytes | None:
    """The bytes a message JSON's ``body`` stands for, by its ``body_encoding`` (the inverse of
    ``format.message_json.encode_body``)."""
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


_TERMINAL_TOKEN = re.compile(
    r"\x1b\[(?P<args>[0-9;?]*)(?P<code>[A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r|\n|[^\x1b\r\n]+"
)


def terminal_screen(output: str) -> list[str]:
    """The lines a terminal shows after ``output``: text, newlines and carriage returns, and the
    cursor-up and erase-line controls rich's live display redraws with (other escapes ignored)."""
    lines = [""]
    row = col = 0
    for m in _TERMINAL_TOKEN.finditer(output):
        token = m.group(0)
        if token == "\n":
            row += 1
            col = 0
            if row == len(lines):
                lines.append("")
        elif token == "\r":
            col = 0
        elif m.group("code") == "A":
            row = max(row - int(m.group("args") or 1), 0)
        elif m.group("code") == "K":
            mode = m.group("args") or "0"
            lines[row] = "" if mode == "2" else lines[row][:col]
        elif not token.startswith("\x1b"):
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + len(token) :]
            col += len(token)
    return [line.rstrip() for line in lines]


def run_in_terminal(*args: str, columns: int = 200) -> tuple[int, list[str]]:
    """``python -m rmqinspect ARGS`` with stdout and stderr on one pseudo-terminal, as a person
    runs it; returns the exit code and the screen it leaves."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm", "COLUMNS": str(columns), "LINES": "50"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqinspect", *args],
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=child,
        env=env,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    return proc.wait(), terminal_screen(b"".join(chunks).decode("utf-8", "replace"))
