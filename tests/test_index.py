"""Index files: layout, the broker's putKey/selectPhyOffset/queryOffset, corrupt chains, and the
real 4.9.8 / 5.3.3 corpora (headers, raw query hits, byte-identical rebuilds)."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqinspect.errors import DecodeError
from rmqinspect.format import speedups
from rmqinspect.format.checkpoint import decode_checkpoint
from rmqinspect.format.index import (
    DEFAULT_INDEX_NUM,
    DEFAULT_SLOT_NUM,
    HASH_SLOT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    ChainProblem,
    IndexEntry,
    IndexGeometry,
    IndexHeader,
    chain_problem,
    index_keys,
    query_offsets,
    read_entry,
    read_slot,
    select_phy_offsets,
    slot_statistics,
    walk_chain,
)
from rmqinspect.format.index_build import IndexBuilder, IndexFileBuilder
from rmqinspect.format.javahash import index_key_hash, java_hash
from rmqinspect.format.javamath import wrap64
from tests.index_helpers import BuiltIndex, RecordKeys, put_key, sequence_namer

LONG_MAX = 2**63 - 1
CORPUS_GEOMETRY = IndexGeometry(64, 400)
SMALL = IndexGeometry(8, 16)


# --- constants, hashing, geometry -------------------------------------------------------------


def test_layout_constants() -> None:
    assert (INDEX_HEADER_SIZE, HASH_SLOT_SIZE, INDEX_ENTRY_SIZE) == (40, 4, 20)
    assert IndexGeometry(DEFAULT_SLOT_NUM, DEFAULT_INDEX_NUM).file_size == 420_000_040
    assert CORPUS_GEOMETRY.file_size == 8296
    assert IndexGeometry(DEFAULT_SLOT_NUM, DEFAULT_INDEX_NUM).entries_base == 20_000_040


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TagA", 2598919),
        ("TopicTest#KEY1", -1656969516),
        ("é", 233),
        ("😀", 1772899),
        ("polygenelubricants", -2147483648),
        ("Aa", 2112),
        ("BB", 2112),
    ],
)
def test_java_hash_vectors(text: str, expected: int) -> None:
    assert java_hash(text) == expected


def test_index_key_hash_and_slot_vectors() -> None:
    assert index_key_hash("polygenelubricants") == 0
    default = IndexGeometry(DEFAULT_SLOT_NUM, DEFAULT_INDEX_NUM)
    assert index_key_hash("TopicTest#KEY1") == 1656969516
    assert default.slot_of("TopicTest#KEY1") == 1969516


def test_geometry_infer() -> None:
    default = IndexGeometry(DEFAULT_SLOT_NUM, DEFAULT_INDEX_NUM)
    assert IndexGeometry.infer(420_000_040) == default
    assert IndexGeometry.infer(8296, 64, 400) == CORPUS_GEOMETRY
    assert IndexGeometry.infer(8296, slot_num=64) == CORPUS_GEOMETRY
    assert IndexGeometry.infer(8296, index_num=400) == CORPUS_GEOMETRY
    # Not the default size: the default 1:4 ratio, size = 40 + 84 * slots.
    assert IndexGeometry.infer(40 + 84 * 1000) == IndexGeometry(1000, 4000)


@pytest.mark.parametrize(
    ("size", "slots", "entries"),
    [
        (8296, None, None),  # 8256 is not a multiple of 84
        (8296, 64, 399),  # explicit values that do not fit the size
        (8296, 65, None),  # 8296 - 40 - 260 is not a multiple of 20
        (8296, None, 413),  # more entries than the file holds
        (40, None, None),  # no room for anything
        (10, None, None),
    ],
)
def test_geometry_infer_rejects(size: int, slots: int | None, entries: int | None) -> None:
    with pytest.raises(DecodeError):
        IndexGeometry.infer(size, slots, entries)


def test_geometry_must_be_positive() -> None:
    with pytest.raises(ValueError):
        IndexGeometry(0, 10)


# --- header -----------------------------------------------------------------------------------


def test_header_round_trip_and_loaded_count() -> None:
    header = IndexHeader(1, 2, 3, 4, 5, 6)
    raw = header.encode()
    assert len(raw) == INDEX_HEADER_SIZE
    assert raw == struct.pack(">qqqqii", 1, 2, 3, 4, 5, 6)
    assert IndexHeader.decode(b"\xff" * 7 + raw, 7) == header
    assert IndexHeader(0, 0, 0, 0, 0, 0).loaded_index_count == 1
    assert IndexHeader(0, 0, 0, 0, 0, -5).entry_count == 0
    assert header.entry_count == 5


def test_header_truncated() -> None:
    with pytest.raises(DecodeError) as err:
        IndexHeader.decode(bytes(39))
    assert err.value.offset == 0


def test_is_time_matched() -> None:
    header = IndexHeader(100, 200, 0, 0, 0, 2)
    assert header.is_time_matched(0, LONG_MAX)
    assert header.is_time_matched(150, 160)
    assert header.is_time_matched(50, 100)
    assert header.is_time_matched(200, 300)
    assert not header.is_time_matched(201, 300)
    assert not header.is_time_matched(0, 99)
    assert header.is_time_matched(100, 100)


# --- builder (putKey) -------------------------------------------------------------------------


def _entry(buf: bytes | memoryview, n: int, geometry: IndexGeometry = SMALL) -> IndexEntry:
    return read_entry(buf, geometry, n)


def test_builder_first_file_layout() -> None:
    builder = IndexFileBuilder(SMALL)
    assert builder.header == IndexHeader(0, 0, 0, 0, 0, 1)
    assert builder.to_bytes() == bytes(SMALL.file_size)  # nothing written before the first put
    assert put_key(builder, "T#a", 100, 5_000)
    assert put_key(builder, "T#a", 200, 7_999)
    raw = builder.to_bytes()
    header = IndexHeader.decode(raw)
    # First file: beginTimestamp was 0 when entry 1 was written, so its timeDiff is 0.
    assert header == IndexHeader(5_000, 7_999, 100, 200, 1, 3)
    slot = SMALL.slot_of("T#a")
    assert read_slot(raw, SMALL, slot) == 2
    key_hash = index_key_hash("T#a")
    assert _entry(raw, 1) == IndexEntry(1, key_hash, 100, 0, 0)
    assert _entry(raw, 2) == IndexEntry(2, key_hash, 200, 2, 1)  # (7999 - 5000) // 1000


def test_builder_rolled_first_entry_uses_previous_end() -> None:
    previous = IndexFileBuilder(SMALL)
    put_key(previous, "T#a", 100, 10_000)
    put_key(previous, "T#b", 300, 20_000)
    rolled = IndexFileBuilder.new_rolled(previous)
    assert rolled.header == IndexHeader(20_000, 20_000, 300, 300, 0, 1)
    put_key(rolled, "T#c", 400, 25_500)
    raw = memoryview(rolled.to_bytes())
    assert IndexHeader.decode(raw) == IndexHeader(25_500, 25_500, 400, 400, 1, 2)
    # OBSERVATION (spec 7.3): computed against the previous file's end, 5.5 s earlier.
    assert _entry(raw, 1).time_diff == 5


def test_builder_rolled_copies_only_positive_values() -> None:
    empty = IndexFileBuilder(SMALL)
    assert IndexFileBuilder.new_rolled(empty).to_bytes() == bytes(SMALL.file_size)


def test_builder_time_diff_clamps() -> None:
    builder = IndexFileBuilder(SMALL, end_phy_offset=1, end_timestamp=10_000)
    put_key(builder, "T#a", 1, 10_000)
    put_key(builder, "T#a", 2, 9_001)  # store clock went back: clamped to 0
    put_key(builder, "T#a", 3, 10_000 + 1000 * (2**31 + 5))  # beyond INT_MAX seconds
    raw = builder.to_bytes()
    assert [_entry(raw, n).time_diff for n in (1, 2, 3)] == [0, 0, 2**31 - 1]


def test_builder_hash_slot_count_and_full() -> None:
    geometry = IndexGeometry(4, 4)
    builder = IndexFileBuilder(geometry)
    keys = ["T#1", "T#2", "T#3"]
    assert all(put_key(builder, k, i, 1000 + i) for i, k in enumerate(keys))
    assert builder.is_full  # indexCount 4 >= indexNum 4: only 3 entries fit
    assert not put_key(builder, "T#4", 9, 9999)
    header = IndexHeader.decode(builder.to_bytes())
    assert header.index_count == 4
    assert header.hash_slot_count == len({geometry.slot_of(k) for k in keys})


def test_builder_ignores_slot_value_beyond_index_count() -> None:
    builder = IndexFileBuilder(SMALL)
    raw = bytearray(builder.to_bytes())
    slot = SMALL.slot_of("T#a")
    struct.pack_into(">i", raw, SMALL.slot_position(slot), 9)  # stale pointer past indexCount
    reloaded = IndexFileBuilder.from_bytes(raw, SMALL)
    put_key(reloaded, "T#a", 5, 1000)
    out = reloaded.to_bytes()
    assert _entry(out, 1).prev_index == 0
    assert IndexHeader.decode(out).hash_slot_count == 1


def test_builder_flush_writes_whole_header() -> None:
    builder = IndexFileBuilder(SMALL)
    builder.flush()
    assert IndexHeader.decode(builder.to_bytes()) == IndexHeader(0, 0, 0, 0, 0, 1)


def test_builder_from_bytes_continues_identically() -> None:
    whole = IndexFileBuilder(SMALL)
    first = IndexFileBuilder(SMALL)
    puts = [(f"T#{i % 5}", 10 * i, 1000 + 700 * i) for i in range(12)]
    for key, off, ts in puts[:5]:
        put_key(whole, key, off, ts)
        put_key(first, key, off, ts)
    resumed = IndexFileBuilder.from_bytes(first.to_bytes(), SMALL)
    for key, off, ts in puts[5:]:
        put_key(whole, key, off, ts)
        put_key(resumed, key, off, ts)
    assert resumed.to_bytes() == whole.to_bytes()
    assert resumed.header == whole.header


def test_builder_from_bytes_rejects_oversize() -> None:
    with pytest.raises(DecodeError):
        IndexFileBuilder.from_bytes(bytes(SMALL.file_size + 1), SMALL)


def test_index_keys_order_and_split() -> None:
    assert index_keys("T", "U1", " a  b c ") == ["T#U1", "T#a", "T#b", "T#c"]
    assert index_keys("T", None, "a a") == ["T#a", "T#a"]
    assert index_keys("T", None, None) == []
    assert index_keys("T", None, "") == []


def test_writer_rolls_skips_and_excludes_rollback() -> None:
    geometry = IndexGeometry(4, 3)  # two entries per file
    writer = BuiltIndex(geometry)
    writer.dispatch("T", 0, 1000, 0, "U0", "k0")  # fills file 1
    assert [f.header.index_count for f in writer.files] == [3]
    # Rollback: not indexed, but buildIndex fetched the last file first, so file 2 exists.
    writer.dispatch("T", 50, 2000, 0x0C, "U1", None)
    assert [f.header.index_count for f in writer.files] == [3, 1]
    writer.dispatch("T", 100, 3000, 0x04, None, "k1 k2")  # prepared: indexed
    assert [f.header.index_count for f in writer.files] == [3, 3]
    assert writer.files[1].header.begin_phy_offset == 100
    # File 2 began with file 1's end time (1000), so its first entry says 2 s.
    assert read_entry(memoryview(writer.files[1].to_bytes()), geometry, 1).time_diff == 2
    writer.dispatch("T", 90, 3500, 0, "U2", None)  # below the last endPhyOffset: skipped
    assert [f.header.index_count for f in writer.files] == [3, 3, 1]
    writer.dispatch("T", 100, 3000, 0, "U3", None)  # == endPhyOffset is indexed again
    assert writer.files[2].header == IndexHeader(3000, 3000, 100, 100, 1, 2)


def test_writer_creates_empty_file_when_last_is_full() -> None:
    geometry = IndexGeometry(4, 2)
    writer = BuiltIndex(geometry)
    writer.dispatch("T", 10, 1000, 0, "U", None)
    writer.dispatch("T", 5, 2000, 0, "V", None)  # skipped, but the roll already happened
    assert len(writer.files) == 2
    assert writer.files[1].header == IndexHeader(1000, 1000, 10, 10, 0, 1)


def test_writer_needs_room_for_an_entry() -> None:
    with pytest.raises(ValueError):
        IndexBuilder(IndexGeometry(4, 1), sequence_namer)


# --- selectPhyOffset / queryOffset -----------------------------------------------------------


def _file(puts: list[tuple[str, int, int]], geometry: IndexGeometry = SMALL) -> bytes:
    builder = IndexFileBuilder(geometry)
    for key, off, ts in puts:
        assert put_key(builder, key, off, ts)
    return builder.to_bytes()


def test_select_newest_first_with_collisions() -> None:
    # "Aa" and "BB" collide, so "T#Aa" and "T#BB" do too: the broker returns both.
    assert java_hash("T#Aa") == java_hash("T#BB")
    raw = _file([("T#Aa", 1, 1000), ("T#x", 2, 1000), ("T#BB", 3, 2000), ("T#Aa", 4, 3000)])
    assert select_phy_offsets(raw, SMALL, "T#Aa", 32, 0, LONG_MAX) == [4, 3, 1]
    assert select_phy_offsets(raw, SMALL, "T#Aa", 2, 0, LONG_MAX) == [4, 3]
    assert select_phy_offsets(raw, SMALL, "T#none", 32, 0, LONG_MAX) == []


def test_select_time_window_and_stop_rule() -> None:
    puts = [("T#k", 1, 10_000), ("T#k", 2, 12_000), ("T#k", 3, 14_000), ("T#k", 4, 16_000)]
    raw = _file(puts)
    # timeRead = begin(10 000) + timeDiff*1000; entry 1's timeDiff is 0 (first file).
    assert select_phy_offsets(raw, SMALL, "T#k", 32, 11_000, 14_000) == [3, 2]
    # timeRead < begin stops the walk: older entries are never visited.
    assert select_phy_offsets(raw, SMALL, "T#k", 32, 15_000, LONG_MAX) == [4]
    assert select_phy_offsets(raw, SMALL, "T#k", 0, 0, LONG_MAX) == []


def test_select_time_read_truncates_to_seconds() -> None:
    raw = _file([("T#k", 1, 10_000), ("T#k", 2, 11_999)])
    # Entry 2 is read back as 11 000, not 11 999.
    assert select_phy_offsets(raw, SMALL, "T#k", 32, 11_500, LONG_MAX) == []
    assert select_phy_offsets(raw, SMALL, "T#k", 32, 11_000, 11_000) == [2]


def test_select_empty_file_and_single_entry() -> None:
    assert select_phy_offsets(IndexFileBuilder(SMALL).to_bytes(), SMALL, "T#k", 32, 0, 9) == []
    assert select_phy_offsets(_file([("T#k", 7, 1)]), SMALL, "T#k", 32, 0, LONG_MAX) == [7]


def test_select_stops_on_negative_time_diff() -> None:
    raw = bytearray(_file([("T#k", 1, 1000), ("T#k", 2, 5000), ("T#k", 3, 9000)]))
    struct.pack_into(">i", raw, SMALL.entry_position(2) + 12, -1)
    assert select_phy_offsets(raw, SMALL, "T#k", 32, 0, LONG_MAX) == [3]


def test_query_offsets_across_files() -> None:
    geometry = IndexGeometry(4, 3)
    writer = BuiltIndex(geometry)
    for i in range(6):
        writer.dispatch("T", 100 * i, 10_000 * (i + 1), 0, None, "k")
    files = [(f.header, f.to_bytes()) for f in writer.files]
    assert [h.begin_timestamp for h, _ in files] == [10_000, 30_000, 50_000]
    assert query_offsets(files, geometry, "T#k", 32, 0, LONG_MAX) == [500, 400, 300, 200, 100, 0]
    assert query_offsets(files, geometry, "T#k", 3, 0, LONG_MAX) == [500, 400, 300]
    # File 2 begins before 35 000, so file 1 is never opened. Offset 200 (stored at 30 000) is
    # still a hit: its timeDiff was taken against file 1's end (20 000), so it reads as 40 000.
    assert query_offsets(files, geometry, "T#k", 32, 35_000, LONG_MAX) == [500, 400, 300, 200]
    # Files not time-matched are skipped but do not stop the walk.
    assert query_offsets(files, geometry, "T#k", 32, 0, 20_000) == [100, 0]


def test_query_offsets_stops_at_file_beginning_before_begin() -> None:
    geometry = IndexGeometry(4, 3)
    writer = BuiltIndex(geometry)
    # The store clock steps back between the files: file 1 spans 100-500 s, file 2 300-600 s.
    for i, ts in enumerate([100_000, 500_000, 300_000, 600_000]):
        writer.dispatch("T", 100 * i, ts, 0, None, "k")
    files = [(f.header, f.to_bytes()) for f in writer.files]
    assert files[0][0].is_time_matched(400_000, LONG_MAX)
    # File 2 begins before 400 s, so the broker never opens file 1 although it matches.
    assert query_offsets(files, geometry, "T#k", 32, 400_000, LONG_MAX) == [300]
    assert query_offsets(files, geometry, "T#k", 32, 0, LONG_MAX) == [300, 200, 100, 0]


def test_query_offsets_caps_max_num() -> None:
    geometry = IndexGeometry(4, 100)
    writer = BuiltIndex(geometry)
    for i in range(90):
        writer.dispatch("T", i, 1000, 0, None, "k")
    files = [(f.header, f.to_bytes()) for f in writer.files]
    assert len(query_offsets(files, geometry, "T#k", 1000, 0, LONG_MAX)) == 64
    assert len(query_offsets(files, geometry, "T#k", 1000, 0, LONG_MAX, 80)) == 80


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "Aa", "BB", "d e"]), st.integers(0, 3_000)),
        min_size=1,
        max_size=60,
    ),
    st.integers(1, 40),
)
def test_hypothesis_builder_then_select(puts: list[tuple[str, int]], max_num: int) -> None:
    geometry = IndexGeometry(3, 100)
    builder = IndexFileBuilder(geometry)
    ts = 1_000_000
    model: list[tuple[int, int]] = []  # (key hash, offset), oldest first
    for offset, (key, step) in enumerate(puts):
        ts += step
        assert put_key(builder, f"T#{key}", offset, ts)
        model.append((index_key_hash(f"T#{key}"), offset))
    raw = builder.to_bytes()
    for key in {k for k, _ in puts}:
        want = [off for h, off in reversed(model) if h == index_key_hash(f"T#{key}")]
        assert select_phy_offsets(raw, geometry, f"T#{key}", max_num, 0, LONG_MAX) == want[:max_num]
    stats = slot_statistics(raw, geometry, builder.header)
    assert stats.entries == len(puts)
    assert sum(n * c for n, c in stats.chain_histogram.items()) == len(puts)
    assert stats.unreachable_entries == stats.broken_links == stats.bad_slots == 0


# --- walking and statistics; corrupt files ---------------------------------------------------


def _chain_file() -> tuple[bytearray, IndexHeader, int]:
    """Five entries in one bucket: slot -> 5 -> 4 -> 3 -> 2 -> 1."""
    geometry = IndexGeometry(1, 10)
    builder = IndexFileBuilder(geometry)
    for i in range(5):
        put_key(builder, f"T#{i}", 100 * i, 1000 * (i + 1))
    return bytearray(builder.to_bytes()), builder.header, 0


def _set_prev(raw: bytearray, geometry: IndexGeometry, n: int, prev: int) -> None:
    struct.pack_into(">i", raw, geometry.entry_position(n) + 16, prev)


def test_walk_chain_clean() -> None:
    raw, header, slot = _chain_file()
    walk = walk_chain(raw, IndexGeometry(1, 10), header, slot)
    assert [e.number for e in walk] == [5, 4, 3, 2, 1]
    assert walk.problem is None
    assert [e.phy_offset for e in walk] == [400, 300, 200, 100, 0]  # re-iterable


def test_walk_chain_empty_slot() -> None:
    builder = IndexFileBuilder(SMALL)
    walk = walk_chain(builder.to_bytes(), SMALL, builder.header, 3)
    assert list(walk) == []
    assert walk.problem is None


@pytest.mark.parametrize(
    ("entry", "prev", "kind", "walked"),
    [
        (3, 5, "cycle", [5, 4, 3]),
        (3, 3, "self_loop", [5, 4, 3]),
        (3, 4, "cycle", [5, 4, 3]),
        (2, 99, "prev_out_of_range", [5, 4, 3, 2]),
        (2, 6, "prev_out_of_range", [5, 4, 3, 2]),  # == indexCount: not yet written
        (2, -7, "prev_out_of_range", [5, 4, 3, 2]),
    ],
)
def test_walk_chain_corrupt_links(entry: int, prev: int, kind: str, walked: list[int]) -> None:
    raw, header, slot = _chain_file()
    geometry = IndexGeometry(1, 10)
    _set_prev(raw, geometry, entry, prev)
    walk = walk_chain(raw, geometry, header, slot)
    assert [e.number for e in walk] == walked
    assert walk.problem is not None
    assert walk.problem.kind == kind
    assert walk.problem.entry == entry and walk.problem.target == prev
    assert walk.problem.offset == geometry.entry_position(entry) + 16
    assert kind.split("_")[0] in walk.problem.describe()


def test_walk_chain_forward_link() -> None:
    geometry = IndexGeometry(2, 10)
    builder = IndexFileBuilder(geometry)
    keys = [k for k in (f"T#{i}" for i in range(50)) if geometry.slot_of(k) == 0][:3]
    other = next(k for k in (f"T#{i}" for i in range(50)) if geometry.slot_of(k) == 1)
    for i, key in enumerate([keys[0], keys[1], other, keys[2]]):
        put_key(builder, key, i, 1000)
    raw = bytearray(builder.to_bytes())
    _set_prev(raw, geometry, 2, 3)  # 4 -> 2 -> 3 (entry 3 is in the other bucket)
    walk = walk_chain(raw, geometry, builder.header, 0)
    assert [e.number for e in walk] == [4, 2]
    assert walk.problem is not None and walk.problem.kind == "forward_link"


@pytest.mark.parametrize("value", [6, 7, 1000, -1])
def test_walk_chain_bad_slot_value(value: int) -> None:
    raw, header, slot = _chain_file()
    geometry = IndexGeometry(1, 10)
    struct.pack_into(">i", raw, geometry.slot_position(slot), value)
    walk = walk_chain(raw, geometry, header, slot)
    assert list(walk) == []
    assert walk.problem is not None and walk.problem.kind == "bad_slot_value"
    assert walk.problem.offset == geometry.slot_position(slot)


def test_walk_chain_truncated_buffer() -> None:
    geometry = IndexGeometry(2, 10)
    builder = IndexFileBuilder(geometry)
    keys = [f"T#{i}" for i in range(40)]
    in_0 = [k for k in keys if geometry.slot_of(k) == 0][:2]
    in_1 = next(k for k in keys if geometry.slot_of(k) == 1)
    for i, key in enumerate([*in_0, in_1]):  # entries 1, 2 in slot 0; entry 3 in slot 1
        put_key(builder, key, i, 1000)
    cut = builder.to_bytes()[: geometry.entry_position(3) + 10]
    walk = walk_chain(cut, geometry, builder.header, 0)
    assert [e.number for e in walk] == [2, 1] and walk.problem is None
    walk = walk_chain(cut, geometry, builder.header, 1)
    assert list(walk) == []
    assert walk.problem is not None and walk.problem.kind == "truncated"
    assert walk.problem.offset == geometry.entry_position(3)
    with pytest.raises(DecodeError):
        read_entry(cut, geometry, 3)


def test_read_bounds() -> None:
    raw, _, _ = _chain_file()
    geometry = IndexGeometry(1, 10)
    with pytest.raises(DecodeError):
        read_slot(raw, geometry, 1)
    with pytest.raises(DecodeError):
        read_entry(raw, geometry, 10)
    with pytest.raises(DecodeError):
        read_entry(raw, geometry, -1)
    with pytest.raises(DecodeError) as err:
        read_slot(raw[:41], geometry, 0)
    assert err.value.offset == 40


def test_select_on_cycle_terminates_like_the_broker_would() -> None:
    raw, _, _ = _chain_file()
    geometry = IndexGeometry(1, 10)
    _set_prev(raw, geometry, 3, 5)  # 5 -> 4 -> 3 -> 5 -> ...
    # No key in the cycle matches: the broker would spin forever; we stop.
    assert select_phy_offsets(raw, geometry, "T#nothing", 32, 0, LONG_MAX) == []
    # "T#3" (entry 4) is in the cycle: the broker collects it again on every lap up to maxNum.
    assert select_phy_offsets(raw, geometry, "T#3", 5, 0, LONG_MAX) == [300] * 5


def _reference_select(
    buf: bytes, geometry: IndexGeometry, key: str, max_num: int, begin: int, end: int
) -> list[int]:
    """The step-by-step walk ``selectPhyOffset`` is, one entry per step and one lap of a cycle
    per hit (as the broker does), stopping where a lap collects nothing: the model the linear
    walk must agree with."""
    found: list[int] = []
    header = IndexHeader.decode(buf)
    count = header.loaded_index_count
    key_hash = index_key_hash(key)
    slot_pos = geometry.slot_position(key_hash % geometry.slot_num)
    number = struct.unpack_from(">i", buf, slot_pos)[0] if slot_pos + 4 <= len(buf) else 0
    if number <= 0 or number > count or count <= 1:
        return found
    since_hit: set[int] = set()
    while len(found) < max_num:
        pos = geometry.entry_position(number)
        if pos + INDEX_ENTRY_SIZE > geometry.file_size:
            return found
        entry = bytes(buf[pos : pos + INDEX_ENTRY_SIZE]).ljust(INDEX_ENTRY_SIZE, b"\0")
        hash_read, phy_read, time_diff, prev = struct.unpack(">iqii", entry)
        if time_diff < 0:
            return found
        time_read = wrap64(header.begin_timestamp + time_diff * 1000)
        if hash_read == key_hash and begin <= time_read <= end:
            found.append(phy_read)
            since_hit.clear()
        if prev <= 0 or prev > count or prev == number or time_read < begin:
            return found
        if number in since_hit:
            return found
        since_hit.add(number)
        number = prev
    return found


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 9), st.sampled_from(["T#a", "T#b", "T#c"]), st.integers(-1, 4)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 9),
    st.integers(1, 40),
    st.integers(0, 5_000),
    st.sampled_from([LONG_MAX - 1000, 1_000, -(2**63)]),
    st.integers(0, 184),  # keeps the 40-byte header
)
def test_hypothesis_select_on_corrupt_chains_agrees_with_the_stepwise_walk(
    links: list[tuple[int, str, int]],
    head: int,
    max_num: int,
    begin: int,
    begin_timestamp: int,
    cut: int,
) -> None:
    """Any links (cycles, self loops, forward links, out of range), times (negative, near
    Long.MAX_VALUE), header begin times and short buffers: the same hits, in the same order."""
    geometry = IndexGeometry(1, 9)
    raw = bytearray(geometry.file_size)
    struct.pack_into(">qqqqii", raw, 0, begin_timestamp, 0, 0, 0, 1, len(links) + 1)
    struct.pack_into(">i", raw, geometry.slot_position(0), head)
    for n, (prev, key, time_diff) in enumerate(links[:8], start=1):
        entry = (index_key_hash(key), 100 * n, time_diff, prev)
        struct.pack_into(">iqii", raw, geometry.entry_position(n), *entry)
    buf = bytes(raw[: len(raw) - cut])
    for key in ("T#a", "T#b"):
        want = _reference_select(buf, geometry, key, max_num, begin, LONG_MAX)
        assert select_phy_offsets(buf, geometry, key, max_num, begin, LONG_MAX) == want


@pytest.mark.parametrize("with_c", [True, False])
def test_select_reads_each_entry_of_a_cycle_once(
    monkeypatch: pytest.MonkeyPatch, with_c: bool
) -> None:
    """A cycle of N entries holding one hit: the broker collects the hit once per lap, 32 laps
    for maxNum 32; the query and the chain check each follow the links once, listing each
    entry once (N entries, not 32 N)."""
    if with_c and not speedups.compiled():
        pytest.skip("the C extension is not built")
    n = 5_000
    geometry = IndexGeometry(1, n + 1)
    raw = bytearray(geometry.file_size)
    struct.pack_into(">qqqqii", raw, 0, 1000, 2000, 0, 0, 1, n + 1)
    struct.pack_into(">i", raw, geometry.slot_position(0), n)
    for number in range(1, n + 1):
        key = "T#hit" if number == n // 2 else "T#other"
        prev = number - 1 if number > 1 else n
        struct.pack_into(
            ">iqii", raw, geometry.entry_position(number), index_key_hash(key), 7, 0, prev
        )
    if not with_c:
        monkeypatch.setattr(speedups, "_speedups", None)
    walks: list[int] = []
    follow = speedups.follow_links

    def counting(*args: Any) -> tuple[Any, int]:
        numbers, end = follow(*args)
        walks.append(len(numbers))
        return numbers, end

    monkeypatch.setattr(speedups, "follow_links", counting)
    buf = bytes(raw)
    assert select_phy_offsets(buf, geometry, "T#hit", 32, 0, LONG_MAX) == [7] * 32
    problem = chain_problem(buf, geometry, IndexHeader.decode(buf), 0)
    assert problem == ChainProblem("cycle", 1, n, geometry.entry_position(1) + 16)
    assert walks == [n, n]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-2, 11), st.integers(-1, 4)), min_size=1, max_size=10),
    st.integers(-2, 11),
    st.integers(0, 12),
    st.integers(0, 184),  # keeps the 40-byte header
)
def test_hypothesis_chain_problem_is_the_stepwise_walks(
    links: list[tuple[int, int]], head: int, count: int, cut: int
) -> None:
    """Any links (cycles, self loops, forward links, out of range), index counts and short
    buffers: the problem the one walk of the links finds is the one ChainWalk ends on."""
    geometry = IndexGeometry(1, 9)
    raw = bytearray(geometry.file_size)
    struct.pack_into(">qqqqii", raw, 0, 1000, 2000, 0, 0, 1, count)
    struct.pack_into(">i", raw, geometry.slot_position(0), head)
    for n, (prev, time_diff) in enumerate(links[:8], start=1):
        struct.pack_into(">iqii", raw, geometry.entry_position(n), 5, 100 * n, time_diff, prev)
    buf = bytes(raw[: len(raw) - cut])
    header = IndexHeader.decode(buf)
    walk = walk_chain(buf, geometry, header, 0)
    for _ in walk:
        pass
    assert chain_problem(buf, geometry, header, 0) == walk.problem


def test_select_self_loop_and_out_of_range_prev() -> None:
    raw, _, _ = _chain_file()
    geometry = IndexGeometry(1, 10)
    _set_prev(raw, geometry, 4, 4)
    assert select_phy_offsets(raw, geometry, "T#4", 32, 0, LONG_MAX) == [400]
    assert select_phy_offsets(raw, geometry, "T#3", 32, 0, LONG_MAX) == [300]
    _set_prev(raw, geometry, 4, 7)
    assert select_phy_offsets(raw, geometry, "T#3", 32, 0, LONG_MAX) == [300]


def test_select_bad_slot_values() -> None:
    raw, _, _ = _chain_file()
    geometry = IndexGeometry(1, 10)
    struct.pack_into(">i", raw, geometry.slot_position(0), 7)  # > indexCount 6
    assert select_phy_offsets(raw, geometry, "T#4", 32, 0, LONG_MAX) == []
    struct.pack_into(">i", raw, geometry.slot_position(0), 6)  # == indexCount: unwritten, zeros
    assert select_phy_offsets(raw, geometry, "polygenelubricants", 32, 0, LONG_MAX) == [0]


def test_select_truncated_buffer_reads_zeros_like_the_extended_mapping() -> None:
    raw, _, _ = _chain_file()
    geometry = IndexGeometry(1, 10)
    cut = bytes(raw[: geometry.entry_position(5) + 8])
    # Entry 5 keeps its key hash and the high half of its offset; the rest reads as zeros
    # (offset 400 -> 0, prev 0), so T#4 is found at offset 0 and the walk ends there.
    assert select_phy_offsets(cut, geometry, "T#4", 32, 0, LONG_MAX) == [0]
    assert select_phy_offsets(cut, geometry, "T#3", 32, 0, LONG_MAX) == []
    with pytest.raises(DecodeError):
        select_phy_offsets(raw[:30], geometry, "T#4", 32, 0, LONG_MAX)


def test_select_index_count_beyond_geometry_stops() -> None:
    geometry = IndexGeometry(1, 3)
    raw = bytearray(_file([("T#a", 1, 1000), ("T#b", 2, 2000)], geometry))
    struct.pack_into(">i", raw, 36, 50)  # corrupt indexCount
    struct.pack_into(">i", raw, geometry.slot_position(0), 40)  # points past the file
    assert select_phy_offsets(raw, geometry, "T#a", 32, 0, LONG_MAX) == []


def test_slot_statistics_counts_corruption() -> None:
    raw, header, _ = _chain_file()
    geometry = IndexGeometry(1, 10)
    stats = slot_statistics(raw, geometry, header)
    assert (stats.used_slots, stats.entries, stats.max_chain) == (1, 5, 5)
    assert stats.chain_histogram == {5: 1} and stats.mean_chain == 5.0
    _set_prev(raw, geometry, 3, 5)  # cycle: link not followed
    stats = slot_statistics(raw, geometry, header)
    assert stats.broken_links == 1
    assert stats.max_chain == 3 and stats.unreachable_entries == 2
    struct.pack_into(">i", raw, geometry.slot_position(0), 77)
    stats = slot_statistics(raw, geometry, header)
    assert stats.bad_slots == 1 and stats.used_slots == 0 and stats.unreachable_entries == 5


def test_slot_statistics_truncated_and_lying_header() -> None:
    raw, header, _ = _chain_file()
    geometry = IndexGeometry(1, 10)
    lying = IndexHeader(0, 0, 0, 0, 0, 10**9)
    assert slot_statistics(raw, geometry, lying).entries == 9
    stats = slot_statistics(raw[: geometry.entry_position(3)], geometry, header)
    assert stats.entries == 2 and stats.bad_slots == 1
    assert slot_statistics(raw[:20], geometry, header).entries == 0


# --- conformance corpora ----------------------------------------------------------------------

BLANK_MAGIC = 0xCBD43194 - 2**32
MAGIC_V1 = 0xDAA320A7 - 2**32
MAGIC_V2 = 0xDAA320AB - 2**32


@dataclass(frozen=True)
class Record:
    offset: int
    sys_flag: int
    store_timestamp: int
    topic: str
    properties: dict[str, str]


def _parse_properties(text: str) -> dict[str, str]:
    """``string2messageProperties`` (spec 2.6), deliberately independent of the package."""
    result: dict[str, str] = {}
    i = 0
    while i < len(text):
        j = text.find("\x02", i)
        j = len(text) if j < 0 else j
        k = text.find("\x01", i)
        if j - i >= 3 and i < k < j - 1:
            result[text[i:k]] = text[k + 1 : j]
        i = j + 1
    return result


def walk_commitlog(directory: Path, end: int | None = None) -> Iterator[Record]:
    """A minimal record walk: enough to feed the index, nothing more."""
    if not directory.is_dir():
        return
    for name in sorted(os.listdir(directory)):
        start = int(name)
        data = (directory / name).read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            if end is not None and start + pos >= end:
                return
            total, magic = struct.unpack_from(">ii", data, pos)
            if magic == BLANK_MAGIC:
                break
            if magic not in (MAGIC_V1, MAGIC_V2):
                return
            (phy,) = struct.unpack_from(">q", data, pos + 28)
            (sys_flag,) = struct.unpack_from(">i", data, pos + 36)
            born = 20 if sys_flag & 0x10 else 8
            store = 20 if sys_flag & 0x20 else 8
            (store_ts,) = struct.unpack_from(">q", data, pos + 48 + born)
            p = pos + 68 + born + store
            (body_len,) = struct.unpack_from(">i", data, p)
            p += 4 + body_len
            if magic == MAGIC_V1:
                topic_len, p = data[p], p + 1
            else:
                (topic_len,), p = struct.unpack_from(">h", data, p), p + 2
            topic = data[p : p + topic_len].decode("utf-8", "replace")
            p += topic_len
            (prop_len,) = struct.unpack_from(">h", data, p)
            props = data[p + 2 : p + 2 + prop_len].decode("utf-8", "replace")
            yield Record(phy, sys_flag, store_ts, topic, _parse_properties(props))
            pos += total


def _keys(rec: Record) -> RecordKeys:
    props = rec.properties
    return (
        rec.topic,
        rec.offset,
        rec.store_timestamp,
        rec.sys_flag,
        props.get("UNIQ_KEY"),
        props.get("KEYS"),
    )


def _scenarios(root: Path) -> list[tuple[str, dict[str, Any], Path]]:
    result = []
    for path in sorted((root / "expected").glob("*.json")):
        if path.name == "scenarios.json":
            continue
        expected = json.loads(path.read_text())
        result.append((expected["scenario"], expected, root / expected["inputStore"]))
    return result


def _corpora(
    conformance_dir: Path, conformance5_dir: Path
) -> list[tuple[str, dict[str, Any], Path]]:
    return _scenarios(conformance_dir) + _scenarios(conformance5_dir)


def _header_json(header: IndexHeader) -> dict[str, int]:
    return {
        "beginTimestamp": header.begin_timestamp,
        "endTimestamp": header.end_timestamp,
        "beginPhyOffset": header.begin_phy_offset,
        "endPhyOffset": header.end_phy_offset,
        "hashSlotCount": header.hash_slot_count,
        "indexCount": header.index_count,
    }


def _without_name(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in ("name", "size")}


def _chain_length(raw: bytes, slot: int) -> int:
    """Chain length from the raw prev links, the slow way."""
    n = read_slot(raw, CORPUS_GEOMETRY, slot)
    length = 0
    while n:
        length += 1
        n = read_entry(raw, CORPUS_GEOMETRY, n).prev_index
    return length


def test_conformance_index_headers(conformance_dir: Path, conformance5_dir: Path) -> None:
    seen = 0
    for scenario, expected, store in _corpora(conformance_dir, conformance5_dir):
        for row in expected["before"]["indexFiles"]:
            raw = (store / "index" / row["name"]).read_bytes()
            assert len(raw) == row["size"] == CORPUS_GEOMETRY.file_size, scenario
            assert IndexGeometry.infer(len(raw), 64, 400) == CORPUS_GEOMETRY
            header = IndexHeader.decode(raw)
            assert _header_json(header) == _without_name(row), (scenario, row["name"])
            stats = slot_statistics(raw, CORPUS_GEOMETRY, header)
            assert stats.entries == header.index_count - 1
            assert stats.bad_slots == stats.broken_links == stats.unreachable_entries == 0
            assert stats.used_slots == header.hash_slot_count
            lengths = []
            for slot in range(CORPUS_GEOMETRY.slot_num):
                walk = walk_chain(raw, CORPUS_GEOMETRY, header, slot)
                lengths.append(sum(1 for _ in walk))
                assert walk.problem is None
                assert lengths[-1] == _chain_length(raw, slot)
            assert max(lengths) == stats.max_chain
            assert sum(lengths) == stats.entries
            seen += 1
    assert seen > 40


def _first_store_timestamp(path: Path) -> int:
    """STORETIMESTAMP of a commitlog file's first record, 0 when it is not a message."""
    data = path.read_bytes()[:80]
    if len(data) < 80 or struct.unpack_from(">i", data, 4)[0] not in (MAGIC_V1, MAGIC_V2):
        return 0
    (sys_flag,) = struct.unpack_from(">i", data, 36)
    return int(struct.unpack_from(">q", data, 68 if sys_flag & 0x10 else 56)[0])


def _index_after_recovery(expected: dict[str, Any], store: Path) -> list[tuple[IndexHeader, bytes]]:
    """The index files the broker queried after load()+start(), rebuilt from the input store.

    Normal start: the files as they are. Abnormal start (abort file): IndexService.load drops
    files whose endTimestamp is past the checkpoint's indexMsgTimestamp, and recoverAbnormally
    re-dispatches from the checkpoint-chosen commitlog file up to the recovered end.
    """
    names = [row["name"] for row in expected["before"]["indexFiles"]]
    raw_files = [(store / "index" / name).read_bytes() for name in names]
    if not (store / "abort").exists():
        return [(IndexHeader.decode(raw), raw) for raw in raw_files]
    checkpoint = decode_checkpoint((store / "checkpoint").read_bytes())
    kept = [
        IndexFileBuilder.from_bytes(raw, CORPUS_GEOMETRY)
        for raw in raw_files
        if IndexHeader.decode(raw).end_timestamp <= checkpoint.index_msg_timestamp
    ]
    assert len(kept) == len(raw_files) - len(expected["summary"]["indexFilesDestroyedAtLoad"])
    writer = BuiltIndex(CORPUS_GEOMETRY, kept[-1] if kept else None)
    commitlog = store / "commitlog"
    first = 0
    for name in sorted(os.listdir(commitlog), reverse=True):
        stamp = _first_store_timestamp(commitlog / name)
        if 0 < stamp <= checkpoint.min_timestamp():
            first = int(name)
            break
    assert first == 2 * 262144  # both READMEs: the abnormal path started at the third file
    end = expected["summary"]["commitlogEndOffsetAfterRecovery"]
    writer.dispatch_chunk([_keys(r) for r in walk_commitlog(commitlog, end) if r.offset >= first])
    return [(f.header, f.to_bytes()) for f in [*kept[:-1], *writer.files]]


def test_conformance_queries(conformance_dir: Path, conformance5_dir: Path) -> None:
    checked = 0
    for scenario, expected, store in _corpora(conformance_dir, conformance5_dir):
        files = _index_after_recovery(expected, store)
        after = [_without_name(row) for row in expected["afterStart"]["indexFiles"]]
        assert [_header_json(h) for h, _ in files] == after, scenario
        for query in expected["queries"]:
            key = f"{query['topic']}#{query['key']}"
            got = query_offsets(files, CORPUS_GEOMETRY, key, 32, 0, LONG_MAX)
            assert sorted(got) == query["indexPhyOffsets"], (scenario, key)
            checked += 1
    assert checked > 700


@pytest.mark.parametrize(("corpus", "minimum"), [("conformance", 23), ("conformance5", 22)])
def test_conformance_rebuild_byte_identical(
    corpus: str, minimum: int, conformance_dir: Path, conformance5_dir: Path
) -> None:
    root = conformance_dir if corpus == "conformance" else conformance5_dir
    rebuilt = 0
    for scenario, expected, store in _scenarios(root):
        if (store / "abort").exists():
            continue
        writer = BuiltIndex(CORPUS_GEOMETRY)
        for rec in walk_commitlog(store / "commitlog"):
            writer.dispatch(*_keys(rec))
        names = [row["name"] for row in expected["before"]["indexFiles"]]
        assert len(writer.files) == len(names), scenario
        for name, built in zip(names, writer.files, strict=True):
            assert built.to_bytes() == (store / "index" / name).read_bytes(), (scenario, name)
            rebuilt += 1
    assert rebuilt >= minimum
