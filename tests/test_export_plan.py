"""Partition planning and the range reader: ranges cut at record boundaries cover each file's
chain exactly, and reading them (in windows of any size) gives the records of one whole read."""

from __future__ import annotations

import itertools

import numpy as np

from rmqinspect.export import records
from rmqinspect.export.plan import (
    StoreRef,
    commitlog_file,
    plan_chunks,
    plan_commitlog,
    resolve_chunk,
)
from rmqinspect.store.model import Store
from tests.conftest import FIXTURES

STORE = FIXTURES / "stores" / "zeroed49"  # a damaged region mid-file: damage and a stop


def _read(store: Store, split: int) -> tuple[list[int], list[int]]:
    positions: list[int] = []
    problems: list[int] = []
    for rng in plan_commitlog(store, split):
        f = commitlog_file(store, rng.file)
        for run in records.record_runs(store, f, rng.begin, rng.end):
            positions += (f.start + run.positions).tolist()
            problems += [] if run.damage_at is None else [f.start + run.damage_at]
    # A decoded run's rows come grouped by topic: the records, not their order, must agree.
    return sorted(positions), sorted(problems)


def test_ranges_cut_at_record_boundaries_and_cover_the_chain() -> None:
    with StoreRef.of(Store.open(STORE)).open() as store:
        whole = plan_commitlog(store, 1 << 40)
        small = plan_commitlog(store, 4096)
        assert len(small) > 2 * len(whole)
        for name in {r.file for r in whole}:
            mine = [r for r in small if r.file == name]
            (one,) = [r for r in whole if r.file == name]
            f = commitlog_file(store, name)
            assert mine[0].begin == 0 and mine[-1].end == one.end == f.length
            assert all(a.end == b.begin for a, b in itertools.pairwise(mine))
            starts = np.concatenate(
                [r.positions for r in records.record_runs(store, f, 0, one.end, decode=False)]
            )
            assert {r.begin for r in mine} <= set(starts.tolist())
            # Past the first damage, walks resume from it (the restart emulation's walk may
            # resync elsewhere); before it, from the range's own begin.
            damage = next(
                (
                    r.damage_at
                    for r in records.record_runs(store, f, 0, one.end, decode=False)
                    if r.damage_at is not None
                ),
                None,
            )
            for r in mine:
                past = damage is not None and damage < r.begin
                assert r.walk_from == (damage if past else r.begin)


def test_reading_in_ranges_equals_one_read() -> None:
    with StoreRef.of(Store.open(STORE)).open() as store:
        expected = _read(store, 1 << 40)
        assert expected[0] and expected[1]
        assert _read(store, 4096) == expected
        assert _read(store, 150) == expected  # a range shorter than most records


def test_chunks_planned_from_lengths_resolve_to_the_ranges_of_the_walk() -> None:
    """The DataFrame source's partitions are chunks its tasks resolve: the same ranges (bounds,
    resumed walks past damage) as the whole walk, and a chunk past a file's last range is
    empty; their numbers stay distinct."""
    with StoreRef.of(Store.open(STORE)).open() as store:
        for split in (1 << 40, 4096, 150):
            chunks = plan_chunks(store, split)
            resolved = [resolve_chunk(store, c) for c in chunks]
            found = [r for r in resolved if r is not None]
            assert [(r.file, r.begin, r.end, r.walk_from) for r in found] == [
                (r.file, r.begin, r.end, r.walk_from) for r in plan_commitlog(store, split)
            ]
            assert [r.number for r in found] == sorted({r.number for r in found})
            if split == 150:
                assert len(found) < len(chunks)  # records longer than 150 bytes
