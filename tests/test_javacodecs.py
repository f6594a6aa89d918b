"""Java codecs the broker's output depends on: ``String.hashCode`` vectorised, ``HashMap``
iteration order, and the properties string built from a map."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rmqinspect.format.javahash import (
    index_key_hash,
    java_hash,
    java_hashes,
    prefixed_key_hashes,
)
from rmqinspect.format.javamap import hashmap_order, java_map_order
from rmqinspect.format.properties import encode_properties_map, properties_template


def test_properties_follow_java_hashmap_order() -> None:
    # Buckets of a 16-slot table: spread(hash) & 15.
    names = ("UNIQ_KEY", "WAIT", "TAGS", "seq", "KEYS", "traceId")
    order = [names[i] for i in hashmap_order(names)]
    spread = {
        n: (java_hash(n) & 0xFFFFFFFF ^ (java_hash(n) & 0xFFFFFFFF) >> 16) & 15 for n in names
    }
    assert order == sorted(names, key=lambda n: (spread[n], names.index(n)))
    # 13 names pass the 0.75 load factor of 16 slots: the table has doubled to 32.
    many = tuple(f"p{i}" for i in range(13))
    doubled = [many[i] for i in hashmap_order(many)]
    assert doubled == sorted(
        many, key=lambda n: ((java_hash(n) ^ java_hash(n) >> 16) & 31, many.index(n))
    )
    assert java_map_order(["b", "a"], 1024) == sorted(["b", "a"], key=lambda n: java_hash(n))


# --- vectorised hashing ------------------------------------------------------------------


@given(st.lists(st.text(max_size=40), max_size=30))
def test_vectorised_java_hash(strings: list[str]) -> None:
    assert java_hashes(strings).tolist() == [java_hash(s) for s in strings]
    no_prefix = prefixed_key_hashes([""], np.zeros(len(strings), dtype=np.int64), strings)
    assert no_prefix.tolist() == [index_key_hash(s) for s in strings]


def test_index_key_hash_of_integer_min_value() -> None:
    hashes = prefixed_key_hashes(
        ["Topic", ""], np.array([0, 1]), ["Test#KEY1", "polygenelubricants"]
    )
    assert hashes.tolist() == [1656969516, 0]


@given(
    st.lists(
        st.sampled_from(["TAGS", "KEYS", "WAIT", "seq", "UNIQ_KEY", "a%b", "x"]),
        unique=True,
        min_size=1,
    ),
    st.booleans(),
)
def test_properties_template_matches_the_map_encoder(names: list[str], trailing: bool) -> None:
    values = [f"v{i}" for i in range(len(names))]
    fmt, order = properties_template(tuple(names), trailing)
    expected = encode_properties_map(dict(zip(names, values, strict=True)), trailing)
    assert (fmt % order(values)).encode() == expected


@given(
    st.lists(st.text(max_size=6), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 3), st.text(max_size=30)), max_size=30),
)
def test_prefixed_key_hashes(prefixes: list[str], keys: list[tuple[int, str]]) -> None:
    owners = np.array([p % len(prefixes) for p, _ in keys], dtype=np.int64)
    texts = [k for _, k in keys]
    full = [prefixes[int(p)] + k for p, k in zip(owners, texts, strict=True)]
    assert prefixed_key_hashes(prefixes, owners, texts).tolist() == [
        index_key_hash(s) for s in full
    ]
