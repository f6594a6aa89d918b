"""Store file names, written and read the way the broker does (spec §0, §1.1, §7).

A file of an offset-named family (commitlog, consume queue, timerlog) is named by the 20-digit,
zero-padded decimal offset of its first byte (``UtilAll.offset2FileName``); an index file by the
17-digit local time of its creation (``yyyyMMddHHmmssSSS``). Anything else in those directories
is not a file the broker wrote: the store model reports it as a layout problem.
"""

from __future__ import annotations

from rmqinspect.format.javamath import LONG_MAX

OFFSET_NAME_DIGITS = 20
INDEX_NAME_DIGITS = 17


def offset_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: the 20-digit name of the file starting at ``offset``."""
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


def _ascii_digits(name: str, width: int) -> bool:
    return len(name) == width and name.isascii() and name.isdigit()


def parse_offset_name(name: str) -> int | None:
    """The offset an offset-named file starts at: exactly 20 ASCII digits whose value fits a
    Java long (what ``offset2FileName`` writes and ``Long.parseLong`` reads); None otherwise."""
    if not _ascii_digits(name, OFFSET_NAME_DIGITS):
        return None
    value = int(name)
    return value if value <= LONG_MAX else None


def fits_offset_stream(start: int, file_size: int) -> bool:
    """Whether a file of ``file_size`` bytes starting at ``start`` ends inside a Java long's
    range: past it the broker's offset arithmetic wraps, so no real store reaches it."""
    return 0 <= start <= LONG_MAX - file_size


def is_index_name(name: str) -> bool:
    """An index file name: 17 ASCII digits (``UtilAll.timeMillisToHumanString``)."""
    return _ascii_digits(name, INDEX_NAME_DIGITS)
