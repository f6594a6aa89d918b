"""CRC helpers of ``format/crc.py`` against the libraries they stand in for."""

from __future__ import annotations

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from rmqinspect.format.crc import crc32c_zeros


@given(prefix=st.binary(max_size=64), count=st.integers(0, 5000))
def test_crc32c_zeros_is_the_crc_of_appended_zeros(prefix: bytes, count: int) -> None:
    assert crc32c_zeros(crc32c.crc32c(prefix), count) == crc32c.crc32c(prefix + bytes(count))


def test_crc32c_zeros_composes_over_large_counts() -> None:
    start = crc32c.crc32c(b"RocketMQ")
    big = (1 << 36) + 12345  # a 64 GiB hole, never materialised
    assert crc32c_zeros(crc32c_zeros(start, big), 7) == crc32c_zeros(start, big + 7)
    assert crc32c_zeros(start, 1 << 20) == crc32c.crc32c(bytes(1 << 20), start)
