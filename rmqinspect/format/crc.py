"""The one CRC-32 every checksum in rmqinspect goes through.

RocketMQ's body and property CRCs are zlib's CRC-32 masked to 31 bits (``UtilAll.crc32``).
Where the CPU has PCLMULQDQ the C extension computes it by carry-less folding: :func:`crc32`
here for one buffer, and ``crc32_many`` of :mod:`rmqinspect.format.speedups`, the same C
function, for the many slices of a scan. Elsewhere (no extension, another CPU, or
``RMQINSPECT_SCALAR=1``) :func:`crc32` is zlib's, faster there than the extension's
slicing-by-8 tables (``benchmarks/crc.py``); identical results either way.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable

Crc32 = Callable[[bytes | bytearray | memoryview], int]


def _pick() -> Crc32:
    try:
        c = importlib.import_module("rmqinspect.format._speedups")
    except ImportError:  # pragma: no cover - built at install where a C compiler is present
        return zlib.crc32
    fast: Crc32 = c.crc32
    return fast if c.features()["pclmul"] else zlib.crc32


crc32 = _pick()

__all__ = ["CRC_MASK", "crc32", "masked_crc32"]

CRC_MASK = 0x7FFFFFFF


def masked_crc32(data: bytes | bytearray | memoryview) -> int:
    """``UtilAll.crc32``: the zlib CRC-32 of ``data`` masked to 31 bits."""
    return crc32(data) & CRC_MASK


# --- CRC-32C over runs of zeros -------------------------------------------------------------------

_CRC32C_POLY = 0x82F63B78  # Castagnoli, reflected


def _apply(matrix: tuple[int, ...], vector: int) -> int:
    out = 0
    bit = 0
    while vector:
        if vector & 1:
            out ^= matrix[bit]
        vector >>= 1
        bit += 1
    return out


def _square(matrix: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_apply(matrix, column) for column in matrix)


def _zero_bit() -> tuple[int, ...]:
    """The CRC register's step on one zero bit, as the images of its 32 unit vectors."""
    return (_CRC32C_POLY, *(1 << (n - 1) for n in range(1, 32)))


_ZERO_POWERS: list[tuple[int, ...]] = []  # the step over 2**k zero bytes, k = 0, 1, ...


def crc32c_zeros(crc: int, count: int) -> int:
    """The CRC-32C (as ``crc32c.crc32c`` returns it) of data whose CRC-32C is ``crc`` followed
    by ``count`` zero bytes, in O(log count): a sparse file's holes are checksummed without
    reading or feeding gigabytes of zeros."""
    if count <= 0:
        return crc
    if not _ZERO_POWERS:
        step = _zero_bit()
        for _ in range(3):  # 8 bits
            step = _square(step)
        _ZERO_POWERS.append(step)
    state = crc ^ 0xFFFFFFFF  # the register before the final inversion
    k = 0
    while count:
        while len(_ZERO_POWERS) <= k:
            _ZERO_POWERS.append(_square(_ZERO_POWERS[-1]))
        if count & 1:
            state = _apply(_ZERO_POWERS[k], state)
        count >>= 1
        k += 1
    return state ^ 0xFFFFFFFF
