"""The index keys of many records (``speedups.index_keys``: C, its pure-Python twin, and the
numpy path of ``RecordColumns.index_keys``) against the broker's rule for one record:
``IndexService.buildIndex`` puts ``topic#UNIQ_KEY`` then ``topic#`` each non-empty ``KEYS``
part, hashed by ``IndexFile.indexKeyHashMethod`` (``abs(String.hashCode())``, Java hashing
UTF-16 code units of the text it decoded with replacement characters)."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqinspect.format import columns, encode, speedups
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.host import HostAddress
from rmqinspect.format.javahash import index_key, index_key_hash, java_hash
from rmqinspect.format.npbytes import span_fingerprints

needs_c = pytest.mark.skipif(not speedups.compiled(), reason="the C extension is not built")
_HOST = HostAddress(bytes([10, 0, 0, 1]), 10911)

# Pieces of property text: separators, the two key names, spaces, text beyond ASCII (a CJK
# character, one beyond the BMP: two UTF-16 units in Java), and bytes that are not UTF-8 (a
# lone continuation byte, a cut sequence, an encoded surrogate, an overlong form).
_PIECES = [
    b"\x01", b"\x02", b" ", b"  ", b"UNIQ_KEY\x01", b"KEYS\x01", b"\x02KEYS\x01", b"a", b"Kz",
    "中".encode(), "😀".encode(), b"\xff", b"\x80", b"\xe4\xb8", b"\xed\xa0\x80", b"\xc0\xaf",
    b"x" * 40,
]  # fmt: skip
_TOPICS = [b"T", b"TopicA", "主题".encode(), "t😀".encode(), b"\xffT", b""]


def _java_index_hash(units: list[int]) -> int:
    """``abs(hashCode)`` of the UTF-16 code units, written out (0 for Integer.MIN_VALUE)."""
    h = 0
    for u in units:
        h = (31 * h + u) & 0xFFFFFFFF
    signed = h - (1 << 32) if h & 0x80000000 else h
    return 0 if signed == -(1 << 31) else abs(signed)


def _expected(topic: bytes, raw: bytes) -> list[tuple[bytes, int]]:
    """Each key's bytes and hash by the one-record rule (parse_properties of the decoded
    text), the key bytes found by re-encoding what Java decoded where the text is UTF-8."""
    text = raw.decode("utf-8", "replace")
    p = props.parse_properties(text)
    name = topic.decode("utf-8", "replace")
    keys = props.index_key_values(p.get(props.UNIQ_KEY), p.get(props.KEYS))
    return [(k.encode(), index_key_hash(index_key(name, k))) for k in keys]


def _spans(records: list[tuple[bytes, bytes]]) -> tuple[bytes, list[np.ndarray]]:
    """A buffer holding each (topic, properties) pair, and their spans as int64 arrays."""
    buf = bytearray(b"\x00\x02")  # nothing starts at 0
    at: list[list[int]] = [[], [], [], []]
    for topic, raw in records:
        at[0].append(len(buf))
        at[1].append(len(topic))
        buf += topic + b"\x02"
        at[2].append(len(buf))
        at[3].append(len(raw))
        buf += raw + b"\x01"
    return bytes(buf), [np.array(a, np.int64) for a in at]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_TOPICS), st.lists(st.sampled_from(_PIECES)).map(b"".join)),
        max_size=8,
    )
)
def test_index_keys_are_the_brokers_keys(records: list[tuple[bytes, bytes]]) -> None:
    buf, spans = _spans(records)
    twin = speedups.py_index_keys(buf, *spans)
    got = speedups.index_keys(buf, *spans)
    for name in speedups.KeySpans._fields:
        assert getattr(got, name).tolist() == getattr(twin, name).tolist(), name
    data = np.frombuffer(buf, np.uint8)
    assert got.prints.tolist() == span_fingerprints(data, got.starts, got.lengths).tolist()
    for r, (topic, raw) in enumerate(records):
        mine = np.flatnonzero(got.owners == r)
        found = [
            (buf[s : s + n], h)
            for s, n, h in zip(
                got.starts[mine].tolist(),
                got.lengths[mine].tolist(),
                got.hashes[mine].tolist(),
                strict=True,
            )
        ]
        want = _expected(topic, raw)
        assert [h for _, h in found] == [h for _, h in want]
        if raw.decode("utf-8", "replace").encode() == raw:  # keys are their own bytes
            assert [k for k, _ in found] == [k for k, _ in want]


def test_keys_beyond_the_bmp_hash_as_two_surrogates() -> None:
    """Java's ``"T#😀x".hashCode()`` runs over T, #, 0xD83D, 0xDE00, x; a CJK character is one
    unit; text that is not UTF-8 is hashed as the replacement character U+FFFD."""
    records = [
        (b"T", b"UNIQ_KEY\x01" + "😀x".encode()),
        (b"T", b"KEYS\x01" + "中 ".encode() + b"\xffk"),
    ]
    buf, spans = _spans(records)
    for keys in (speedups.index_keys(buf, *spans), speedups.py_index_keys(buf, *spans)):
        assert keys.owners.tolist() == [0, 1, 1]
        assert keys.hashes.tolist() == [
            _java_index_hash([0x54, 0x23, 0xD83D, 0xDE00, 0x78]),
            _java_index_hash([0x54, 0x23, 0x4E2D]),
            _java_index_hash([0x54, 0x23, 0xFFFD, 0x6B]),
        ]


def test_the_last_non_empty_value_wins_and_empty_parts_are_dropped() -> None:
    raw = b"KEYS\x01a\x02UNIQ_KEY\x01u1\x02KEYS\x01 b  c \x02UNIQ_KEY\x01\x02X\x01KEYS\x01d"
    buf, spans = _spans([(b"T", raw)])
    keys = speedups.index_keys(buf, *spans)
    assert [buf[s : s + n] for s, n in zip(keys.starts, keys.lengths, strict=True)] == [
        b"u1",
        b"b",
        b"c",
    ]
    assert keys.hashes.tolist() == [index_key_hash(k) for k in ("T#u1", "T#b", "T#c")]


@needs_c
def test_a_record_with_more_keys_than_the_first_guess_is_resumed() -> None:
    """The wrapper makes room for four keys a record; a record of many KEYS parts makes the C
    loop stop before it, and the wrapper goes on from there with room for it."""
    many = b"KEYS\x01" + b" ".join(b"k%d" % i for i in range(50))
    records = [(b"T", b"UNIQ_KEY\x01u"), (b"T", many), (b"T", b"KEYS\x01z")]
    buf, spans = _spans(records)
    keys = speedups.index_keys(buf, *spans)
    assert keys.owners.tolist() == [0] + [1] * 50 + [2]
    assert keys.hashes.tolist() == speedups.py_index_keys(buf, *spans).hashes.tolist()
    out = [np.empty(8, np.int64) for _ in range(5)]  # room for record 0's 2 + 10 // 2 at most
    assert speedups._speedups.index_keys(buf, *spans, 0x20, *out) == (1, 1)  # stops before 1


@needs_c
def test_hostile_spans_and_columns_are_refused() -> None:
    buf, spans = _spans([(b"T", b"KEYS\x01a")])
    out = [np.empty(4, np.int64) for _ in range(5)]
    past = [spans[0], spans[1], spans[2], spans[3] + len(buf)]
    with pytest.raises(ValueError, match="outside the buffer"):
        speedups._speedups.index_keys(buf, *past, 0x20, *out)
    negative = [spans[0] - 100, spans[1], spans[2], spans[3]]
    with pytest.raises(ValueError, match="outside the buffer"):
        speedups._speedups.index_keys(buf, *negative, 0x20, *out)
    with pytest.raises(ValueError, match="differ in length"):
        speedups._speedups.index_keys(buf, *spans, 0x20, *out[:4], np.empty(3, np.int64))
    short = [spans[0], spans[1], spans[2][:0], spans[3][:0]]
    with pytest.raises(ValueError):
        speedups._speedups.index_keys(buf, *short, 0x20, *out)
    # a length of zero or below is no text, wherever it says it starts
    empty = [spans[0], spans[1] * 0 - 5, spans[2] * 0 + 10**12, spans[3] * 0 - 1]
    assert speedups._speedups.index_keys(buf, *empty, 0x20, *out) == (0, 1)


def test_record_columns_keys_are_the_same_with_and_without_the_extension(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RecordColumns.index_keys``: C, and the numpy path the package runs without it (a
    ROLLBACK record puts no key)."""
    data = bytearray()
    for i, (topic, raw) in enumerate(
        [
            ("TopicA", b"UNIQ_KEY\x01U1\x02KEYS\x01a b"),
            ("主题", "KEYS\x01中 😀".encode()),
            ("TopicA", b"KEYS\x01rolled"),
            ("T", b"TAGS\x01x"),
            ("T", b"KEYS\x01" + b"long" * 200 + b" \xffz"),
        ]
    ):
        data += encode.encode_message(
            topic=topic, queue_id=0, flag=0, queue_offset=i, physical_offset=len(data),
            sys_flag=cl.TRANSACTION_ROLLBACK_TYPE if i == 2 else 0, born_timestamp=0,
            born_host=_HOST, store_timestamp=0, store_host=_HOST, reconsume_times=0,
            prepared_transaction_offset=0, body=b"b", properties=raw,
        )  # fmt: skip
    cols = columns.gather(bytes(data), columns.walk(bytes(data), 0), 0)
    rows = np.arange(len(cols), dtype=np.int64)
    got = cols.index_keys(rows)
    monkeypatch.setattr(speedups, "_speedups", None)
    want = cols.index_keys(rows)
    assert got.owners.tolist() == [0, 0, 0, 1, 1, 4, 4]
    for name in columns.IndexKeys._fields:
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name
    assert got.hashes[:3].tolist() == [
        index_key_hash(k) for k in ("TopicA#U1", "TopicA#a", "TopicA#b")
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from([*_PIECES, b"TAGS\x01"])).map(b"".join), max_size=8))
def test_property_hashes_are_parse_properties_and_java_hash(texts: list[bytes]) -> None:
    """The value ``parse_properties`` keeps under a name, and Java's ``String.hashCode`` of it
    (the tag hash of a consume-queue unit), C and twin alike."""
    buf, spans = _spans([(b"T", t) for t in texts])
    for name in (b"TAGS", b"KEYS", b"UNIQ_KEY"):
        got = speedups.property_hashes(buf, spans[2], spans[3], name)
        twin = speedups.py_property_hashes(buf, spans[2], spans[3], name)
        assert [a.tolist() for a in got] == [a.tolist() for a in twin]
        for r, raw in enumerate(texts):
            value = props.parse_properties(raw.decode("utf-8", "replace")).get(name.decode())
            assert (got[0][r] >= 0) == (value is not None)
            assert int(got[2][r]) == (java_hash(value) if value else 0)
            if value is not None and raw.decode("utf-8", "replace").encode() == raw:
                assert buf[int(got[0][r]) : int(got[0][r] + got[1][r])] == value.encode()


@needs_c
def test_property_hashes_refuse_a_name_that_splits_entries() -> None:
    buf, spans = _spans([(b"T", b"TAGS\x01a")])
    out = [np.empty(1, np.int64) for _ in range(3)]
    for name in (b"", b"TA\x01GS", b"TA\x02GS", b"N" * 64):
        with pytest.raises(ValueError, match="bad property name"):
            speedups._speedups.property_hashes(buf, spans[2], spans[3], name, *out)
    with pytest.raises(ValueError, match="fewer than 1"):
        speedups._speedups.property_hashes(buf, spans[2], spans[3], b"TAGS", *out[:2], out[2][:0])


def test_tags_codes_are_the_same_with_and_without_the_extension(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tag hashes (U+FFFD for bytes that are not UTF-8, none without TAGS), and a schedule
    record's delivery time by its DELAY level."""
    data = bytearray()
    cases = [
        ("TopicA", b"TAGS\x01TagA"),
        ("TopicA", "TAGS\x01标签😀".encode()),
        ("TopicA", b"TAGS\x01a\xffb\x02TAGS\x01"),
        ("TopicA", b"KEYS\x01k"),
        (cl.SCHEDULE_TOPIC, b"TAGS\x01t\x02DELAY\x012"),
    ]
    for i, (topic, raw) in enumerate(cases):
        data += encode.encode_message(
            topic=topic, queue_id=0, flag=0, queue_offset=i, physical_offset=len(data),
            sys_flag=0, born_timestamp=0, born_host=_HOST, store_timestamp=1000,
            store_host=_HOST, reconsume_times=0, prepared_transaction_offset=0, body=b"b",
            properties=raw,
        )  # fmt: skip
    cols = columns.gather(bytes(data), columns.walk(bytes(data), 0), 0)
    rows = np.arange(len(cols), dtype=np.int64)
    levels = {1: 1000, 2: 5000}
    codes, known = cols.tags_codes(rows, levels)
    assert codes.tolist() == [
        java_hash("TagA"),
        java_hash("标签😀"),
        java_hash("a\ufffdb"),
        0,
        1000 + 5000,
    ]
    assert known.all()
    monkeypatch.setattr(speedups, "_speedups", None)
    assert [a.tolist() for a in cols.tags_codes(rows, levels)] == [codes.tolist(), known.tolist()]


def test_a_build_from_an_older_source_is_refused() -> None:
    """An extension built before a loop was added would fail in the middle of a command: it is
    refused at import, saying to rebuild it."""
    old = types.ModuleType("_speedups")
    for name in speedups.LOOPS:
        if name != "walk_gather":
            setattr(old, name, len)
    with pytest.raises(ImportError, match=r"lacks walk_gather.*rebuild"):
        speedups.check_build(old)
    old.walk_gather = len  # type: ignore[attr-defined]
    speedups.check_build(old)
    if speedups.compiled():
        assert speedups._speedups is not None
        speedups.check_build(speedups._speedups)
