"""Bytes as ``xxd``-style lines, for showing the neighbourhood of a bad record."""

from __future__ import annotations

_WIDTH = 16


def hexdump_lines(buf: bytes | memoryview, start: int, end: int) -> tuple[str, ...]:
    """Lines of 16 bytes covering ``[start, end)`` of ``buf`` (clipped to it), each as
    ``<position>: <hex pairs>  <ASCII>`` with buffer positions."""
    start = max(0, start - start % _WIDTH)
    end = min(len(buf), end)
    lines = []
    for at in range(start, end, _WIDTH):
        row = bytes(buf[at : min(at + _WIDTH, end)])
        pairs = " ".join(row[i : i + 2].hex() for i in range(0, len(row), 2))
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{at:010d}: {pairs:<39}  {text}")
    return tuple(lines)
