"""Java integer arithmetic and parsing, so corrupt values compute what the broker computes.

The broker does its offset and timestamp arithmetic on Java ``int``/``long``: sums overflow and
wrap, ``/`` and ``%`` truncate toward zero, and ``Integer.parseInt``/``String.split`` have their
own rules. Every emulated rule uses these helpers instead of Python's unbounded integers.
"""

from __future__ import annotations

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1


def wrap64(value: int) -> int:
    """Java ``long`` overflow: the value modulo 2**64, as a signed 64-bit integer."""
    value &= _MASK64
    return value - (1 << 64) if value >> 63 else value


def wrap32(value: int) -> int:
    """Java ``int`` overflow (and the ``(int)`` cast of a long)."""
    value &= _MASK32
    return value - (1 << 32) if value >> 31 else value


def jdiv(a: int, b: int) -> int:
    """Java ``/`` on integers: truncates toward zero."""
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def jmod(a: int, b: int) -> int:
    """Java ``%``: the sign follows the dividend."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def java_parse_int(text: str) -> int | None:
    """``Integer.parseInt``: optional sign, decimal digits (Java's ``Character.digit`` accepts
    every Unicode decimal digit, as ``str.isdecimal`` does), 32-bit range; None where Java
    throws."""
    value = java_parse_long(text)
    if value is None or not INT_MIN <= value <= INT_MAX:
        return None
    return value


def java_parse_long(text: str) -> int | None:
    """``Long.parseLong`` (and ``Long.valueOf``): as :func:`java_parse_int`, 64-bit range."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isdecimal():
        return None
    value = int(text)
    if not -(1 << 63) <= value < 1 << 63:
        return None
    return value


def java_split(text: str, sep: str) -> list[str]:
    """``String.split`` with a literal separator: trailing empty strings are dropped."""
    if not text:
        return [""]
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts
