"""Text for the page: every string from the store escaped once, here (control characters as
``printable`` shows them on a terminal, then HTML's specials)."""

from __future__ import annotations

import html

from rmqinspect.render.values import printable, size_cell, time_cell


def esc(value: object) -> str:
    """``value`` as text safe inside an element or a quoted attribute."""
    return html.escape(printable(str(value)), quote=True)


def num(n: int | None) -> str:
    """A count or an offset with thousands separators; "-" for none."""
    return "-" if n is None else f"{n:,}"


def when(ms: int | None) -> str:
    return esc(time_cell(ms))


def size(n: int) -> str:
    return esc(size_cell(n))
