"""The index file's slot and chain checks read a chunk of entries at a time (whole-file arrays
grew with the file, 8 bytes per entry each): over many chunks, with more broken links than
are listed, they find what the whole-file rule finds, in the same order, counted the same."""

from __future__ import annotations

import numpy as np

from rmqinspect.analysis.verify.finding import Findings
from rmqinspect.analysis.verify.indexes import (
    _CHUNK,
    _check_links,
    _check_slots,
    _loops,
    _slot_of,
)
from rmqinspect.format.index import ENTRY_DTYPE, IndexGeometry, IndexHeader

GEOMETRY = IndexGeometry(3 * _CHUNK + 7, 4 * _CHUNK)  # slots and entries: four chunks each


def _entries(n: int) -> np.ndarray:
    """``n`` entries chained slot by slot as putKey links them, then broken: links outside
    the entries, to the entry itself, to newer entries (loops among them), to other slots."""
    rng = np.random.default_rng(7)
    entries = np.zeros(n, ENTRY_DTYPE)
    hashes = rng.integers(-(2**31), 2**31, n)
    entries["key_hash"] = hashes
    slots = np.where(hashes >= 0, hashes % GEOMETRY.slot_num, -1)
    last: dict[int, int] = {}
    prev = np.zeros(n, np.int64)
    for i, s in enumerate(slots.tolist()):
        prev[i] = last.get(s, 0)
        last[s] = i + 1
    broken = rng.choice(n, 3000, replace=False)
    for k, i in enumerate(broken.tolist()):
        prev[i] = (-5, n + 9, i + 1, min(n, i + 2), int(rng.integers(1, i + 1)))[k % 5]
    prev[10], prev[20] = 21, 11  # a two-entry loop through a newer link
    entries["prev"] = prev
    return entries


def _whole_file(entries: np.ndarray, heads: np.ndarray, findings: Findings) -> None:
    """The rule over whole-file arrays, as verify checked it before."""
    n = len(entries)
    slots = np.where(entries["key_hash"] >= 0, entries["key_hash"] % GEOMETRY.slot_num, -1)
    number = np.arange(1, n + 1, dtype=np.int64)
    prev = entries["prev"].astype(np.int64)

    def add(check: str, i: int, detail: str) -> None:
        position = GEOMETRY.entry_position(i + 1) + 16
        findings.add(check, "f", f"entry {i + 1}: {detail}", file_position=position)

    used = np.flatnonzero(heads)
    for s in used[(heads[used] < 1) | (heads[used] > n)].tolist():
        detail = f"slot {s} holds entry {int(heads[s])}; entries are 1..{n}"
        findings.add("index.slot", "f", detail, file_position=GEOMETRY.slot_position(s))
    good = used[(heads[used] >= 1) & (heads[used] <= n)]
    for s in good[slots[heads[good] - 1] != good].tolist():
        detail = (
            f"slot {s} holds entry {int(heads[s])}, whose key hash belongs to slot "
            f"{int(slots[heads[s] - 1])}"
        )
        findings.add("index.slot", "f", detail, file_position=GEOMETRY.slot_position(s))
    outside = (prev < 0) | (prev > n)
    for i in np.flatnonzero(outside).tolist():
        add("index.chain_link", i, f"prev {int(prev[i])} is outside the entries 1..{n}")
    for i in np.flatnonzero(prev == number).tolist():
        add("index.chain_cycle", i, "prev links the entry to itself")
    for i in np.flatnonzero(~outside & (prev > number)).tolist():
        if _loops(prev, i + 1):
            add("index.chain_cycle", i, f"prev {int(prev[i])} leads back to entry {i + 1}")
        else:
            add("index.chain_link", i, f"prev {int(prev[i])} is a newer entry")
    older = np.flatnonzero(~outside & (prev > 0) & (prev < number))
    for i in older[slots[prev[older] - 1] != slots[older]].tolist():
        detail = (
            f"prev {int(prev[i])} is an entry of slot {int(slots[prev[i] - 1])}, not "
            f"{int(slots[i])}"
        )
        add("index.chain_link", i, detail)


def test_chunked_slot_and_link_checks_find_what_the_whole_file_rule_finds() -> None:
    n = 3 * _CHUNK + 123
    entries = _entries(n)
    heads = np.random.default_rng(3).integers(-3, n + 5, GEOMETRY.slot_num)
    heads[::3] = 0
    heads[1::3] = np.arange(1, n + 1)[: len(heads[1::3])]  # entries, most of another slot
    expected = Findings(limit=400)
    _whole_file(entries, heads, expected)
    got = Findings(limit=400)
    header = IndexHeader(0, 0, 0, 0, 0, n + 1)
    slot = _slot_of(entries, GEOMETRY)
    dropped: list[None] = []
    _check_slots("f", header, GEOMETRY, heads, n, slot, got, lambda: dropped.append(None))
    assert len(dropped) == 4  # after each chunk of slots
    _check_links("f", GEOMETRY, entries, slot, got, lambda: dropped.append(None))
    assert len(dropped) == 8  # and of entries
    assert got.counts == expected.counts
    assert expected.counts[("index.chain_link", "f")] > 400  # more than are listed
    assert expected.counts[("index.slot", "f")] > 400
    assert expected.counts[("index.chain_cycle", "f")] > 2
    assert got.listed == expected.listed
