"""Bounded fuzzing of every decoder in ``rmqinspect/format`` (the targets and their invariants
are in ``tests/fuzz_targets.py``; ``make fuzz`` runs the same targets for hundreds of thousands
of inputs under atheris).

Inputs are real bytes from a fixture store with hostile changes: bit flips, fields set to the
extreme values of their width, truncations, and random bytes, so that the decoders meet both
what a broker writes and what no broker writes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz_targets import TARGETS, seeds

EXTREMES = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(1, 255)),
    st.tuples(st.just("word"), st.integers(0, 1 << 16), st.sampled_from(EXTREMES)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 16), st.just(0)),
    st.tuples(st.just("bytes"), st.integers(0, 1 << 16), st.binary(max_size=64)),
)


def mutate(seed: bytes, changes: list[tuple[str, int, object]]) -> bytes:
    data = bytearray(seed)
    for kind, at, value in changes:
        at %= len(data) + 1
        if kind == "flip" and at < len(data):
            data[at] ^= int(value)  # type: ignore[call-overload]
        elif kind == "word":
            data[at : at + 4] = int(value).to_bytes(4, "big")  # type: ignore[call-overload]
        elif kind == "cut":
            del data[at:]
        elif kind == "bytes" and isinstance(value, bytes):
            data[at : at + len(value)] = value
    return bytes(data)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_decoder_survives_hostile_input(target: str) -> None:
    run = TARGETS[target]
    starts = seeds(target)
    for start in starts:
        run(start)  # the unchanged seed is valid input

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        seed=st.integers(0, len(starts) - 1),
        changes=st.lists(mutation, max_size=6),
        raw=st.booleans(),
        noise=st.binary(max_size=512),
    )
    def check(seed: int, changes: list[tuple[str, int, object]], raw: bool, noise: bytes) -> None:
        run(noise if raw else mutate(starts[seed], changes))

    check()
