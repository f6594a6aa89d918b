"""Epoch-millisecond times as text: the ``*_time`` value of every ``*_timestamp`` rmqinspect
writes (JSON documents, the message object and its C writer, tables)."""

from __future__ import annotations

from datetime import UTC, datetime

MIN_ISO_MS = -62135596800000  # 0001-01-01T00:00:00Z, datetime's lower bound
MAX_ISO_MS = 253402300799999  # 9999-12-31T23:59:59.999Z


def iso_ms(ms: int | None) -> str | None:
    """An epoch-millisecond value as ISO 8601 UTC with milliseconds; None when out of range."""
    if ms is None or not MIN_ISO_MS <= ms <= MAX_ISO_MS:
        return None
    # Whole seconds as an int (no float rounding); isoformat pads years before 1000 to four
    # digits, where strftime("%Y") does not on Linux.
    dt = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=(ms % 1000) * 1000)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")
