"""The fastjson 1.x JSON dialect of RocketMQ broker metadata files (spec 11.2).

:func:`loads` is a lenient reader: on top of strict JSON it accepts what fastjson's default parser
features let through (unquoted integer and identifier keys, objects or arrays used as keys,
single-quoted strings, redundant commas). :func:`dumps` reproduces the byte layout of
``JSON.toJSONString(obj, prettyFormat=true)``.

The reader works on bytes so that every :class:`~rmqinspect.errors.DecodeError` carries a byte
offset into the file, and it keeps its own stack so hostile nesting cannot exhaust Python's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rmqinspect.errors import DecodeError

MAX_DEPTH = 512
"""Deepest container nesting :func:`loads` accepts; real metadata files nest 4 levels at most."""

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = b"{}[]"
_COMMA, _COLON, _BACKSLASH, _DQUOTE, _SQUOTE = b",:\\\"'"
_OPENERS = (_LBRACE, _LBRACKET)

# fastjson's lexer also skips form feed and backspace (IOUtils.whitespaceFlags).
_WHITESPACE = re.compile(rb"[ \t\r\n\f\x08]*")
_WHITESPACE_AND_COMMAS = re.compile(rb"[ \t\r\n\f\x08,]*")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_IDENTIFIER = re.compile(rb"[A-Za-z_$][A-Za-z0-9_$]*")
_STRING_RUN = {_DQUOTE: re.compile(rb'[^"\\]*'), _SQUOTE: re.compile(rb"[^'\\]*")}
_HEX4 = re.compile(rb"[0-9A-Fa-f]{4}")
_SIMPLE_ESCAPES = {
    ord('"'): '"',
    ord("'"): "'",
    ord("\\"): "\\",
    ord("/"): "/",
    ord("b"): "\b",
    ord("f"): "\f",
    ord("n"): "\n",
    ord("r"): "\r",
    ord("t"): "\t",
}
_LITERALS = ((b"true", True), (b"false", False), (b"null", None))


@dataclass(frozen=True, slots=True)
class FrozenKey:
    """A JSON object used as a map key, e.g. a ``MessageQueue`` in a client ``offsets.json``.

    ``items`` holds the (key, value) pairs sorted by key, so equal objects are equal keys whatever
    order they were written in; nested objects are FrozenKeys and nested arrays tuples.
    """

    items: tuple[tuple[Any, Any], ...]

    @classmethod
    def of(cls, mapping: Mapping[Any, Any]) -> FrozenKey:
        pairs = [(key, freeze(value)) for key, value in mapping.items()]
        pairs.sort(key=lambda pair: _sort_token(pair[0]))
        return cls(tuple(pairs))

    def __getitem__(self, key: Any) -> Any:
        for k, v in self.items:
            if k == key:
                return v
        raise KeyError(key)

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def to_dict(self) -> dict[Any, Any]:
        """The mutable form: nested FrozenKeys become dicts and tuples lists."""
        return {key: _thaw(value) for key, value in self.items}


def freeze(value: Any) -> Any:
    """Hashable form of a parsed value: dicts become :class:`FrozenKey`, lists tuples."""
    if isinstance(value, dict):
        return FrozenKey.of(value)
    if isinstance(value, list):
        return tuple(freeze(item) for item in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, FrozenKey):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


def _sort_token(key: Any) -> tuple[int, Any]:
    # Keys of one object may mix str, numbers and FrozenKeys, which Python cannot order directly.
    if isinstance(key, str):
        return (0, key)
    if isinstance(key, int | float):
        return (1, key)
    return (2, repr(key))


LENIENT_MAX_BYTES = 2 << 20
"""Largest document the lenient reader takes on. It spends a few microseconds a byte; the
documents brokers write (plain JSON apart from unquoted integer keys) take the fast path, whatever
their size, so only hand-edited dialect files meet this limit."""


def loads(data: bytes | str) -> Any:
    """Parse one fastjson document. Integer keys come back as ``int``, identifier keys as ``str``,
    object keys as :class:`FrozenKey` and array keys as tuples.

    Raises :class:`DecodeError` whose offset is a byte offset into the UTF-8 form of ``data``.
    """
    buf = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    try:
        return _fast_loads(buf)
    except _NotPlain as plain:
        if len(buf) > LENIENT_MAX_BYTES:
            raise DecodeError(
                f"not plain JSON ({plain}); at {len(buf)} bytes the document is too large for "
                f"the lenient fastjson reader (at most {LENIENT_MAX_BYTES} bytes)",
                plain.offset,
            ) from None
    return _Reader(buf).document()


# --- the fast path: plain JSON plus unquoted integer keys, through the C json module ------------


class _NotPlain(Exception):
    """The document is not plain JSON with integer keys: the lenient reader decides."""

    def __init__(self, reason: str, offset: int = 0) -> None:
        super().__init__(reason)
        self.offset = offset


# An unquoted integer key becomes a quoted one behind a private-use mark, so that the C json
# module can read the document and the keys come back as ints. The fast substitution ignores
# strings: a mark put inside one always leaves a bare mark outside any string, which json
# rejects, and then the string-aware substitution (slower, by callback) decides.
_INT_KEY_MARK = "\ue000"
_INT_KEY = re.compile(r"([{,][ \t\n\r]*)(-?(?:0|[1-9][0-9]*))(?=[ \t\n\r]*:)")
_INT_KEY_TEMPLATE = r'\1"' + _INT_KEY_MARK + r'\2"'
_STRING_OR_INT_KEY = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|' + _INT_KEY.pattern, re.S)
_MARK_IN_SOURCE = re.compile(rb"\xee\x80\x80|\\u[eE]000")


def _mark_int_key(match: re.Match[str]) -> str:
    if match.group(2) is None:
        return match.group(0)
    return f'{match.group(1)}"{_INT_KEY_MARK}{match.group(2)}"'


def _object(pairs: list[tuple[str, Any]]) -> dict[Any, Any]:
    return {(_int(k[1:]) if k[:1] == _INT_KEY_MARK else k): v for k, v in pairs}


def _int(text: str) -> int:
    if len(text) > 20:
        raise _NotPlain("a very long integer")
    value = int(text)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _NotPlain("an integer out of the signed 64-bit range")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotPlain("a number out of the double range")
    return value


def _constant(text: str) -> Any:
    raise _NotPlain(f"{text} is not JSON")


def _fast_loads(buf: bytes, *, strings_aware: bool = False) -> Any:
    if _MARK_IN_SOURCE.search(buf):
        raise _NotPlain("holds the integer-key mark")
    try:
        text = buf.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _NotPlain("not UTF-8", err.start) from None
    if strings_aware:
        marked = _STRING_OR_INT_KEY.sub(_mark_int_key, text)
    else:
        marked = _INT_KEY.sub(_INT_KEY_TEMPLATE, text)
    try:
        value = json.loads(
            marked,
            object_pairs_hook=_object,
            parse_int=_int,
            parse_float=_float,
            parse_constant=_constant,
            strict=False,
        )
    except json.JSONDecodeError as err:
        if not strings_aware and len(buf) > LENIENT_MAX_BYTES:
            return _fast_loads(buf, strings_aware=True)
        raise _NotPlain(err.msg) from None
    except RecursionError:
        raise _NotPlain("nested too deep for the C reader") from None
    if buf.count(b"[") + buf.count(b"{") > MAX_DEPTH and _depth(value) > MAX_DEPTH:
        raise _NotPlain(f"nested deeper than {MAX_DEPTH} levels")
    return value


def _depth(value: Any) -> int:
    """Container nesting of a parsed value (iterative: the value may be deep)."""
    deepest = 0
    if not isinstance(value, dict | list):
        return 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


class _Object:
    __slots__ = ("items", "key")

    def __init__(self) -> None:
        self.items: dict[Any, Any] = {}
        self.key: Any = _PENDING


class _Array:
    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[Any] = []


_PENDING: Any = object()  # _Object.key while the object waits for its next key


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def document(self) -> Any:
        self._skip(_WHITESPACE)
        if self.pos == len(self.buf):
            raise DecodeError("empty document", self.pos)
        value = self._value()
        self._skip(_WHITESPACE)
        if self.pos != len(self.buf):
            raise self._error("trailing data after the JSON value")
        return value

    def _value(self) -> Any:
        stack: list[_Object | _Array] = []
        while True:
            self._skip(_WHITESPACE)
            top = stack[-1] if stack else None
            in_slot = isinstance(top, _Array) or (isinstance(top, _Object) and top.key is _PENDING)
            if in_slot:
                # fastjson's AllowArbitraryCommas: extra commas before a key or element are no-ops.
                self._skip(_WHITESPACE_AND_COMMAS)
            byte = self._peek()
            if in_slot and byte == (_RBRACE if isinstance(top, _Object) else _RBRACKET):
                assert top is not None
                self.pos += 1
                stack.pop()
                value: Any = top.items
            elif byte in _OPENERS:
                if len(stack) >= MAX_DEPTH:
                    raise DecodeError(f"nesting deeper than {MAX_DEPTH} levels", self.pos)
                self.pos += 1
                stack.append(_Object() if byte == _LBRACE else _Array())
                continue
            elif in_slot and isinstance(top, _Object):
                top.key = self._scalar_key()
                self._expect_colon()
                continue
            else:
                value = self._scalar_value()

            # Hand the finished value to its container; closing a container finishes another value.
            while True:
                if not stack:
                    return value
                top = stack[-1]
                if isinstance(top, _Array):
                    top.items.append(value)
                    if not self._after_item(_RBRACKET, "array element"):
                        break
                elif top.key is _PENDING:  # the value was an object or array used as a key
                    top.key = freeze(value)
                    self._expect_colon()
                    break
                else:
                    top.items[top.key] = value
                    top.key = _PENDING
                    if not self._after_item(_RBRACE, "object value"):
                        break
                stack.pop()
                value = top.items

    def _after_item(self, closer: int, what: str) -> bool:
        """Consume the separator after an item; True when it closed the container."""
        self._skip(_WHITESPACE)
        byte = self._peek()
        if byte == _COMMA:
            self.pos += 1
            return False
        if byte == closer:
            self.pos += 1
            return True
        raise self._error(f"expected ',' or '{chr(closer)}' after {what}")

    def _expect_colon(self) -> None:
        self._skip(_WHITESPACE)
        if self._peek() != _COLON:
            raise self._error("expected ':' after object key")
        self.pos += 1

    def _scalar_key(self) -> Any:
        byte = self._peek()
        if byte in (_DQUOTE, _SQUOTE):
            return self._string()
        if byte == ord("-") or ord("0") <= byte <= ord("9"):
            return self._number()
        match = _IDENTIFIER.match(self.buf, self.pos)
        if match is None:
            raise self._error("expected an object key")
        self.pos = match.end()
        return match.group().decode("ascii")

    def _scalar_value(self) -> Any:
        byte = self._peek()
        if byte in (_DQUOTE, _SQUOTE):
            return self._string()
        if byte == ord("-") or ord("0") <= byte <= ord("9"):
            return self._number()
        for text, value in _LITERALS:
            if self.buf.startswith(text, self.pos):
                self.pos += len(text)
                return value
        raise self._error("expected a value")

    def _number(self) -> int | float:
        start = self.pos
        match = _NUMBER.match(self.buf, start)
        if match is None:
            raise self._error("invalid number")
        text = match.group()
        self.pos = match.end()
        if match.group(1) is not None or match.group(2) is not None:
            number = float(text)
            if not math.isfinite(number):
                raise DecodeError("number out of the double range", start)
            return number
        # The length check keeps int() away from pathological digit strings.
        digits = len(text) - (text[0] == ord("-"))
        value = int(text) if digits <= 19 else _INT64_MAX + 1
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise DecodeError("integer out of the signed 64-bit range", start)
        return value

    def _string(self) -> str:
        buf = self.buf
        start = self.pos
        quote = buf[start]
        run = _STRING_RUN[quote]
        parts: list[str] = []
        pos = start + 1
        while True:
            end = run.match(buf, pos).end()  # type: ignore[union-attr]  # '*' always matches
            if end > pos:
                # Java decodes config files leniently (malformed UTF-8 becomes U+FFFD), and so
                # does the broker's parse; mirror it so the same files load.
                parts.append(buf[pos:end].decode("utf-8", "replace"))
            pos = end
            if pos >= len(buf):
                raise DecodeError("unterminated string", start)
            if buf[pos] == quote:
                self.pos = pos + 1
                return "".join(parts)
            pos = self._escape(pos, start, parts)

    def _escape(self, pos: int, start: int, parts: list[str]) -> int:
        """Decode the escape at ``pos`` (a backslash) into ``parts``; return the next position."""
        buf = self.buf
        if pos + 1 >= len(buf):
            raise DecodeError("unterminated string", start)
        kind = buf[pos + 1]
        simple = _SIMPLE_ESCAPES.get(kind)
        if simple is not None:
            parts.append(simple)
            return pos + 2
        if kind != ord("u"):
            raise DecodeError(f"invalid escape {self._describe(pos + 1)} in string", pos)
        code = self._hex4(pos)
        pos += 6
        if 0xD800 <= code < 0xDC00 and buf.startswith(b"\\u", pos):
            low = self._hex4(pos)
            if 0xDC00 <= low < 0xE000:
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                pos += 6
        # A lone surrogate stays one, as in a Java String.
        parts.append(chr(code))
        return pos

    def _hex4(self, pos: int) -> int:
        digits = self.buf[pos + 2 : pos + 6]
        if _HEX4.fullmatch(digits) is None:
            raise DecodeError("invalid \\u escape in string", pos)
        return int(digits, 16)

    def _skip(self, pattern: re.Pattern[bytes]) -> None:
        self.pos = pattern.match(self.buf, self.pos).end()  # type: ignore[union-attr]

    def _peek(self) -> int:
        return self.buf[self.pos] if self.pos < len(self.buf) else -1

    def _describe(self, pos: int) -> str:
        if pos >= len(self.buf):
            return "end of input"
        byte = self.buf[pos]
        if 0x20 <= byte < 0x7F:
            return repr(chr(byte))
        return f"byte 0x{byte:02x}"

    def _error(self, message: str) -> DecodeError:
        return DecodeError(f"{message}, found {self._describe(self.pos)}", self.pos)


def dumps(obj: Any) -> str:
    """Serialize like fastjson ``toJSONString(obj, prettyFormat=true)``.

    Layout rules (``MapSerializer`` / ``ListSerializer``): tab indentation and no space after
    ``:``; a string key starts a new line, any other key (int, :class:`FrozenKey`) follows the
    previous entry inline; a non-empty map closes on a new line at its own level; ``None`` map
    values are omitted. A ``list`` of two or more items puts each on its own line (``List``); a
    ``tuple`` is written inline (other ``Collection``\\s, e.g. ``Set``). Dict keys are written in
    the order given: callers pass bean properties sorted as fastjson sorts them. No trailing
    newline.
    """
    out: list[str] = []
    _write(obj, 0, out)
    return "".join(out)


def _write(obj: Any, level: int, out: list[str]) -> None:
    # ``level`` is fastjson's current indent count, bumped by each map and multi-line list.
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, int):
        out.append(str(obj))
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"fastjson cannot represent {obj!r}")
        out.append(repr(obj))
    elif isinstance(obj, str):
        out.append(quote(obj))
    elif isinstance(obj, Mapping):
        _write_map(list(obj.items()), level, out)
    elif isinstance(obj, FrozenKey):
        _write_map(list(obj.items), level, out)
    elif isinstance(obj, list):
        _write_list(obj, level, out)
    elif isinstance(obj, tuple):
        out.append("[")
        for i, item in enumerate(obj):
            if i:
                out.append(",")
            _write(item, level, out)
        out.append("]")
    else:
        raise TypeError(f"cannot serialize {type(obj).__name__} as fastjson")


def _write_map(items: list[tuple[Any, Any]], level: int, out: list[str]) -> None:
    out.append("{")
    inner = level + 1
    first = True
    for key, value in items:
        if value is None:
            continue
        if not first:
            out.append(",")
        if isinstance(key, str):
            out.append(_newline(inner))
            out.append(quote(key))
        else:
            _write(key, inner, out)
        out.append(":")
        _write(value, inner, out)
        first = False
    # fastjson tests the map's size, not how many entries it wrote.
    if items:
        out.append(_newline(level))
    out.append("}")


def _write_list(items: list[Any], level: int, out: list[str]) -> None:
    if len(items) <= 1:
        out.append("[")
        if items:
            _write(items[0], level, out)
        out.append("]")
        return
    out.append("[")
    for i, item in enumerate(items):
        if i:
            out.append(",")
        out.append(_newline(level + 1))
        _write(item, level + 1, out)
    out.append(_newline(level))
    out.append("]")


def _newline(level: int) -> str:
    return "\n" + "\t" * level


# SerializeWriter.writeStringWithDoubleQuote: short escapes for these, \u00XX (upper-case hex)
# for the other C0 controls and U+007F..U+00A0, and \u2028; '/' is left alone.
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\x7f-\xa0\u2028]')


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04X}"


def quote(text: str) -> str:
    """A JSON string literal escaped as fastjson escapes it."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, text) + '"'
