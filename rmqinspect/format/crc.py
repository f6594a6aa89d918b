"""The one CRC-32 every checksum in rmqinspect goes through.

RocketMQ's body and property CRCs are zlib's CRC-32 masked to 31 bits (``UtilAll.crc32``).
ISA-L (``isal``) computes the same CRC about three times faster than this platform's zlib, which
has no hardware CRC; zlib stays the fallback when ``isal`` cannot be imported.
"""

from __future__ import annotations

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib gives identical results
    from zlib import crc32

__all__ = ["CRC_MASK", "crc32", "masked_crc32"]

CRC_MASK = 0x7FFFFFFF


def masked_crc32(data: bytes | bytearray | memoryview) -> int:
    """``UtilAll.crc32``: the zlib CRC-32 of ``data`` masked to 31 bits."""
    return crc32(data) & CRC_MASK
