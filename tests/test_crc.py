"""CRC helpers of ``format/crc.py`` against the libraries they stand in for."""

from __future__ import annotations

import zlib

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from rmqinspect.format import crc, speedups
from rmqinspect.format.crc import crc32c_zeros


@given(st.binary(max_size=300), st.integers(0, 3))
def test_crc32_is_zlibs(data: bytes, skip: int) -> None:
    """Every length around the 16- and 64-byte folding steps, any alignment, any buffer type."""
    view = memoryview(data)[skip:]
    assert crc.crc32(view) == zlib.crc32(view)
    assert crc.crc32(bytearray(view)) == zlib.crc32(view)


def test_crc32_is_the_extensions_where_the_cpu_folds() -> None:
    """The extension's CRC-32 where it has PCLMULQDQ (RMQINSPECT_SCALAR=1 turns that off);
    zlib's elsewhere, which beats the extension's table loop."""
    c = speedups._speedups
    folds = c is not None and c.features()["pclmul"]
    assert crc.crc32 is (c.crc32 if folds else zlib.crc32)


@given(prefix=st.binary(max_size=64), count=st.integers(0, 5000))
def test_crc32c_zeros_is_the_crc_of_appended_zeros(prefix: bytes, count: int) -> None:
    assert crc32c_zeros(crc32c.crc32c(prefix), count) == crc32c.crc32c(prefix + bytes(count))


def test_crc32c_zeros_composes_over_large_counts() -> None:
    start = crc32c.crc32c(b"RocketMQ")
    big = (1 << 36) + 12345  # a 64 GiB hole, never materialised
    assert crc32c_zeros(crc32c_zeros(start, big), 7) == crc32c_zeros(start, big + 7)
    assert crc32c_zeros(start, 1 << 20) == crc32c.crc32c(bytes(1 << 20), start)
