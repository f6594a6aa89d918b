"""The vectorised ``buildIndex`` (IndexBuilder) against the reference that puts one key at a
time: same files byte for byte, same headers, rolls, checkpoint value and counters, whatever
the chunking, offsets, transaction types, key hashes or the state of a continued file."""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqinspect.format.commitlog import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rmqinspect.format.index import (
    IndexFileBuilder,
    IndexGeometry,
    IndexHeader,
    read_entry,
)
from rmqinspect.format.index_build import IndexBuilder
from rmqinspect.format.javahash import index_key_hash
from rmqinspect.format.javamath import INT_MAX
from tests.index_reference import ReferenceIndexFile, ReferenceIndexService

INT_MIN_KEY = "polygenelubricants"  # hashCode is Integer.MIN_VALUE: index key hash 0
LOADED_NAME = "20250101000000000"


@dataclass(frozen=True)
class Record:
    phy: int
    timestamp: int
    sys_flag: int
    hashes: tuple[int, ...]


def _namer(timestamp: int, sequence: int) -> str:
    return f"{int(LOADED_NAME) + 1 + sequence:017d}"


# Hashes that collide in small slot tables, the extremes, and the MIN_VALUE key's 0.
_HASHES = st.sampled_from([0, 1, 2, 3, 7, 8, 15, 16, INT_MAX, INT_MAX - 1, 1656969516])
_TYPES = st.sampled_from(
    [
        TRANSACTION_NOT_TYPE,
        TRANSACTION_NOT_TYPE,
        TRANSACTION_PREPARED_TYPE,
        TRANSACTION_COMMIT_TYPE,
        TRANSACTION_ROLLBACK_TYPE,
    ]
)


@st.composite
def records(draw: st.DrawFn) -> list[Record]:
    """Offsets mostly rising, sometimes repeating, falling back or negative; store times that
    jump, step back, or sit at or below zero."""
    count = draw(st.integers(1, 40))
    phy = draw(st.integers(-5, 300))
    timestamp = draw(st.sampled_from([-3000, 0, 1, 999, 1_000_000]))
    out = []
    for _ in range(count):
        step = draw(st.sampled_from([0, 1, 60, 60, 60, 500, -70, -400]))
        phy = step + phy if step >= 0 or draw(st.booleans()) else -phy - 1
        timestamp += draw(st.sampled_from([0, 1, 999, 1000, 2500, -1500, 2**40]))
        keys = draw(st.lists(_HASHES, max_size=4))
        out.append(Record(phy, timestamp, draw(_TYPES), tuple(keys)))
    return out


@st.composite
def loaded_files(draw: st.DrawFn, geometry: IndexGeometry) -> bytes | None:
    """A file kept from before, built by the reference, then possibly corrupted: slot values
    past indexCount or negative, indexCount stored as 0 or negative, a hashSlotCount about to
    overflow, a short buffer."""
    if draw(st.booleans()):
        return None
    reference = ReferenceIndexFile(geometry)
    for n in range(draw(st.integers(0, geometry.index_num - 1))):
        reference.put_key_hash(draw(_HASHES), 100 * n, 5000 + 1000 * n)
    data = bytearray(reference.to_bytes())
    for _ in range(draw(st.integers(0, 3))):
        slot = draw(st.integers(0, geometry.slot_num - 1))
        value = draw(st.sampled_from([-1, 0, 1, 2, 5, geometry.index_num - 1, 2**31 - 1]))
        struct.pack_into(">i", data, geometry.slot_position(slot), value)
    if draw(st.booleans()):
        struct.pack_into(">i", data, 36, draw(st.sampled_from([0, -4])))
    if draw(st.booleans()):
        struct.pack_into(">i", data, 32, INT_MAX)
    if draw(st.booleans()):
        struct.pack_into(">q", data, 24, draw(st.sampled_from([-20, 10**6])))  # endPhyOffset
    cut = draw(st.sampled_from([len(data), len(data) - 3, geometry.entries_base + 7]))
    return bytes(data[:cut])


def _chunks(draw: st.DrawFn, count: int) -> list[int]:
    cuts = draw(st.lists(st.integers(0, count), max_size=5))
    return sorted({0, count, *cuts})


def _run_builder(
    geometry: IndexGeometry,
    loaded: bytes | None,
    recs: list[Record],
    bounds: list[int],
    materialise: bool,
) -> tuple[IndexBuilder, list[IndexFileBuilder], list[tuple[int, int]]]:
    rolled: list[IndexFileBuilder] = []
    names: list[tuple[int, int]] = []

    def namer(timestamp: int, sequence: int) -> str:
        names.append((timestamp, sequence))
        return _namer(timestamp, sequence)

    last = (
        None
        if loaded is None
        else IndexFileBuilder.from_bytes(
            loaded, geometry, name=LOADED_NAME, materialise=materialise
        )
    )
    builder = IndexBuilder(
        geometry, namer, materialise=materialise, last_file=last, on_rolled=rolled.append
    )
    for a, b in itertools.pairwise(bounds):
        chunk = recs[a:b]
        owners = [n for n, r in enumerate(chunk) for _ in r.hashes]
        builder.dispatch(
            np.array([r.phy for r in chunk], dtype=np.int64),
            np.array([r.timestamp for r in chunk], dtype=np.int64),
            np.array([r.sys_flag for r in chunk], dtype=np.int64),
            np.array([h for r in chunk for h in r.hashes], dtype=np.int64),
            np.array(owners, dtype=np.int64),
        )
    return builder, rolled, names


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_builder_equals_one_key_at_a_time(data: st.DataObject) -> None:
    geometry = IndexGeometry(data.draw(st.integers(1, 9)), data.draw(st.integers(2, 12)))
    loaded = data.draw(loaded_files(geometry))
    recs = data.draw(records())
    bounds = _chunks(data.draw, len(recs))

    kept = [] if loaded is None else [ReferenceIndexFile.from_bytes(loaded, geometry)]
    reference = ReferenceIndexService(geometry, kept)
    for r in recs:
        reference.dispatch(r.phy, r.timestamp, r.sys_flag, r.hashes)

    builder, rolled, names = _run_builder(geometry, loaded, recs, bounds, materialise=True)
    assert names == [(ts, n) for n, ts in enumerate(reference.triggers)]
    assert builder.created == [_namer(0, n) for n in range(len(reference.triggers))]
    assert builder.index_msg_timestamp == reference.index_msg_timestamp
    assert builder.first_indexed_offset == reference.first_indexed_offset
    assert builder.entries == reference.entries
    expected_headers = [f.header for f in reference.files]
    assert [h for _, h in builder.headers()] == expected_headers
    assert builder.creates_file == reference.files[-1].is_full
    current = builder.current
    assert current is not None
    assert builder.end_phy_offset == (
        max(current.end_phy_offset, 0) if current.is_full else current.end_phy_offset
    )
    last = builder.finish()
    assert last is current
    # The reference never flushes; a rolled file is full, so its header bytes already agree.
    assert [f.to_bytes() for f in [*rolled, last]] == [f.to_bytes() for f in reference.files]

    # Header-only mode: the same headers and counters, no bytes.
    header_only, _, _ = _run_builder(geometry, loaded, recs, bounds, materialise=False)
    assert [h for _, h in header_only.headers()] == expected_headers
    assert header_only.entries == reference.entries
    assert header_only.index_msg_timestamp == reference.index_msg_timestamp
    assert header_only.current is not None
    with pytest.raises(ValueError, match="header-only"):
        header_only.current.to_bytes()


@pytest.mark.parametrize(
    "recs",
    [
        # A new file inherits endPhyOffset only if positive: once -10 filled the continued
        # file (endPhyOffset -20), -8 is below the new file's 0 and skipped although the
        # offsets never decrease.
        [Record(-10, 1000, 0, (1,)), Record(-8, 2000, 0, (2,)), Record(0, 3000, 0, (3,))],
        # Falling back below endPhyOffset skips; the same offset again does not.
        [Record(100, 1000, 0, (1,)), Record(40, 2000, 0, (2,)), Record(100, 3000, 0, (3, 4))],
        # Keys of ROLLBACK records are dropped, PREPARED ones kept, in one chunk.
        [
            Record(0, 1000, TRANSACTION_ROLLBACK_TYPE, (1, 2)),
            Record(10, 2000, TRANSACTION_PREPARED_TYPE, (3,)),
        ],
    ],
)
def test_offsets_and_types_match_the_reference(recs: list[Record]) -> None:
    geometry = IndexGeometry(3, 2)
    loaded = bytearray(geometry.file_size)
    struct.pack_into(">q", loaded, 24, -20)  # endPhyOffset of an empty continued file
    reference = ReferenceIndexService(geometry, [ReferenceIndexFile.from_bytes(loaded, geometry)])
    for r in recs:
        reference.dispatch(r.phy, r.timestamp, r.sys_flag, r.hashes)
    for bounds in ([0, len(recs)], list(range(len(recs) + 1))):
        builder, rolled, _ = _run_builder(geometry, bytes(loaded), recs, bounds, True)
        assert [h for _, h in builder.headers()] == [f.header for f in reference.files]
        last = builder.finish()
        assert last is not None
        assert [f.to_bytes() for f in [*rolled, last]] == [f.to_bytes() for f in reference.files]


def test_roll_mid_message_is_named_by_that_message() -> None:
    geometry = IndexGeometry(4, 3)  # two entries a file
    builder, rolled, names = _run_builder(
        geometry,
        None,
        [Record(0, 1000, 0, (1, 2, 3)), Record(50, 2000, 0, ()), Record(60, 3000, 0, (4,))],
        [0, 3],
        materialise=True,
    )
    # Record 0 fills file 1 and retries its third key in file 2; record 1 puts nothing, and
    # record 2's key still fits file 2, which it fills: no third file yet.
    assert names == [(1000, 0), (1000, 1)]
    assert [h.index_count for _, h in builder.headers()] == [3, 3]
    assert builder.creates_file
    assert builder.index_msg_timestamp == 1000
    assert rolled[0].header_bytes == rolled[0].header.encode()  # flushed at the roll
    current = builder.current
    assert current is not None
    entry = read_entry(current.to_bytes(), geometry, 1)
    assert (entry.key_hash, entry.phy_offset, entry.time_diff) == (3, 0, 0)


def test_empty_rolled_file_header_bytes() -> None:
    geometry = IndexGeometry(4, 2)
    builder, _, _ = _run_builder(
        geometry,
        None,
        [Record(10, 5000, 0, (index_key_hash(INT_MIN_KEY),)), Record(5, 9000, 0, (1,))],
        [0, 1, 2],
        materialise=True,
    )
    # The second record rolled the full file, then was skipped (5 < endPhyOffset 10).
    last = builder.finish()
    assert last is not None and last.header == IndexHeader(5000, 5000, 10, 10, 0, 1)
    # Until a put or flush only the constructor's copies are stored: indexCount reads 0.
    assert IndexHeader.decode(last.header_bytes) == IndexHeader(5000, 5000, 10, 10, 0, 0)
    last.flush()
    assert IndexHeader.decode(last.header_bytes) == last.header
    with pytest.raises(ValueError, match="handed over"):
        builder.dispatch(*(np.zeros(1, dtype=np.int64) for _ in range(3)), *(np.zeros(0),) * 2)


def test_dispatch_validates_columns() -> None:
    builder = IndexBuilder(IndexGeometry(4, 4), _namer)
    one = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="differ"):
        builder.dispatch(one, one, np.zeros(2, dtype=np.int64), one, one)
    with pytest.raises(ValueError, match="non-decreasing"):
        builder.dispatch(one, one, one, one, one + 1)
    with pytest.raises(ValueError, match="MAX_VALUE"):
        builder.dispatch(one, one, one, one - 1, one)
    assert builder.current is None and builder.created == []


def test_continued_file_must_match_the_mode() -> None:
    geometry = IndexGeometry(4, 4)
    loaded = IndexFileBuilder.from_bytes(bytes(geometry.file_size), geometry, materialise=False)
    with pytest.raises(ValueError, match="mode"):
        IndexBuilder(geometry, _namer, materialise=True, last_file=loaded)


def test_names_must_sort_after_the_last_file() -> None:
    geometry = IndexGeometry(4, 2)
    loaded = IndexFileBuilder.from_bytes(bytes(geometry.file_size), geometry, name="5")
    builder = IndexBuilder(geometry, lambda ts, seq: "4", materialise=True, last_file=loaded)
    one = np.ones(1, dtype=np.int64)
    builder.dispatch(one, one, one * 0, one, one * 0)  # fills the loaded file (1 entry)
    with pytest.raises(ValueError, match="does not sort after"):
        builder.dispatch(one, one, one * 0, one, one * 0)


@settings(max_examples=150, deadline=None)
@given(
    geometry=st.tuples(st.integers(1, 9), st.integers(2, 12)),
    puts=st.lists(
        st.tuples(
            st.sampled_from(["T#a", "T#b", "T#Aa", "T#BB", INT_MIN_KEY]),
            st.integers(-5, 10**6),
            st.integers(-3000, 10**7),
            st.booleans(),  # read the header after this put
        ),
        max_size=30,
    ),
)
def test_put_key_queue_equals_one_key_at_a_time(
    geometry: tuple[int, int], puts: list[tuple[str, int, int, bool]]
) -> None:
    """``put_key`` queues keys and puts them a run at a time; reads in between see every key."""
    g = IndexGeometry(*geometry)
    built, reference = IndexFileBuilder(g), ReferenceIndexFile(g)
    for key, phy, timestamp, read in puts:
        assert built.put_key(key, phy, timestamp) == reference.put_key(key, phy, timestamp)
        assert built.is_full == reference.is_full
        if read:
            assert built.header == reference.header
    rolled = IndexFileBuilder.new_rolled(built)
    assert rolled.header == ReferenceIndexFile.new_rolled(reference).header
    assert built.to_bytes() == reference.to_bytes()
