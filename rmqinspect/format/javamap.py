"""Iteration order of Java's ``HashMap`` and ``ConcurrentHashMap``: what the broker writes when
it serialises a map (message properties, the config tables)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from rmqinspect.format.javahash import java_hash


def _spread(name: str) -> int:
    h = java_hash(name) & 0xFFFFFFFF
    return h ^ (h >> 16)


@functools.lru_cache(maxsize=4096)
def hashmap_order(names: tuple[str, ...]) -> tuple[int, ...]:
    """Iteration order of a ``new HashMap<>()`` after putting ``names`` (distinct) in order, as
    indexes into ``names``.

    Buckets are ``spread(hash) & (capacity - 1)``; the table starts at 16 and doubles when the
    size passes 0.75 x capacity, or when a bucket reaches 9 nodes while the table is below 64
    (``treeifyBin``). Resizing keeps the relative order inside a bucket, so the final order is by
    bucket, then insertion. (Tree bins, which need 9+ colliding names and a 64+ table, are not
    modelled.)
    """
    spreads = [_spread(name) for name in names]
    capacity = 16
    for count in range(1, len(spreads) + 1):
        bucket = spreads[count - 1] & (capacity - 1)
        chain = sum(1 for h in spreads[:count] if h & (capacity - 1) == bucket)
        if chain >= 9 and capacity < 64:
            capacity *= 2
        if count > capacity * 3 // 4:
            capacity *= 2
    mask = capacity - 1
    return tuple(sorted(range(len(names)), key=lambda i: (spreads[i] & mask, i)))


def java_map_order(names: Iterable[str], capacity: int) -> list[str]:
    """Iteration order of a (Concurrent)HashMap with a table of ``capacity`` slots that holds
    ``names`` (inserted in the given order, no resize): what fastjson writes for the broker's
    config tables."""
    mask = capacity - 1
    ranked = sorted((_spread(name) & mask, i, name) for i, name in enumerate(names))
    return [name for _, _, name in ranked]
