"""Small value formatters shared by the renderers: times, sizes, body encodings."""

from __future__ import annotations

import re

from rmqinspect.format.times import iso_ms


def time_cell(ms: int | None) -> str:
    """``2024-05-01T10:00:00.000Z (1714557600000)`` for tables; zero reads as "0 (unset)"."""
    if ms is None:
        return ""
    if ms == 0:
        return "0 (unset)"
    text = iso_ms(ms)
    return f"{text} ({ms})" if text else f"{ms} (out of range)"


def size_cell(n: int) -> str:
    """Bytes in a short human form next to the exact count."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            human = f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
            return human if unit == "B" else f"{human} ({n})"
        value /= 1024
    raise AssertionError("unreachable")


def with_times(doc: dict[str, object]) -> dict[str, object]:
    """JSON convention: every ``*_timestamp`` (epoch ms) gets a ``*_time`` ISO 8601 sibling."""
    out: dict[str, object] = {}
    for key, value in doc.items():
        out[key] = value
        if key.endswith("_timestamp") and (value is None or isinstance(value, int)):
            out[key.removesuffix("stamp")] = iso_ms(value)
    return out


# C0 and C1 controls, DEL, and the Unicode line breaks and bidirectional overrides that reorder or
# split what a terminal shows.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# What UTF-8 cannot carry: a lone surrogate. Python reads an undecodable byte of a file name or an
# argument as U+DC80..U+DCFF (surrogateescape); a ``\\ud800`` escape in config JSON stays a lone
# surrogate as it does in a Java String.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def unencodable(text: str) -> bool:
    """Whether ``text`` holds what UTF-8 cannot carry (a lone surrogate)."""
    return _SURROGATE.search(text) is not None


def encodable(text: str) -> str:
    """``text`` as UTF-8 can carry it: unchanged unless it holds a lone surrogate; then an
    undecodable byte of a name (``0xff``) reads ``\\xff``, any other lone surrogate ``\\ud800``,
    and the string's own backslashes are doubled (``\\\\``), so that the escaped text reads back
    unambiguously. Every output (JSON, tables, Parquet, stderr) shows such strings this way; a
    string UTF-8 can carry is written exactly."""
    if not unencodable(text):
        return text
    return _SURROGATE.sub(_escape_surrogate, text.replace("\\", "\\\\"))


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b``, ``\\x0a``, ``\\u202e`` as text), so
    store data (topic names, keys, directory names) cannot drive the terminal or split a line;
    what UTF-8 cannot carry is escaped as :func:`encodable` does."""
    return _UNPRINTABLE.sub(_escape, encodable(text))


# The most of one string a table shows. A table wraps a cell into its column, so a long value
# (a 16 MiB group name in a config file) would print ten times its size and take seconds per
# MiB to lay out; JSON output keeps the whole value.
MAX_CELL_CHARS = 1024


def capped(text: str, limit: int = MAX_CELL_CHARS) -> str:
    """``text`` as a table shows it: at most ``limit`` characters, then how much was left out,
    ``… (16,777,216 chars; 16,776,192 not shown)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} chars; {len(text) - limit:,} not shown)"
