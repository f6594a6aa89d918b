"""Column forms of the record rules (used by the Parquet export) agree with the scalar rules."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqinspect.format import commitlog as cl
from rmqinspect.format.batch import (
    host_text_column,
    keys_column,
    offset_msg_id_column,
    properties_column,
)
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.format.properties import parse_properties, split_keys

# Property bytes drawn mostly from the separators and a few letters, so empty names, empty
# values, repeated names, missing 0x01 and invalid UTF-8 all come up often.
_PROPERTY_BYTES = st.lists(
    st.sampled_from([b"\x01", b"\x02", b"a", b"b", b"K", b"\xe4\xb8", b"\xff", b" "]),
    max_size=24,
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PROPERTY_BYTES, max_size=8))
def test_properties_column_is_parse_properties(raw: list[bytes]) -> None:
    column = properties_column(pa.array(raw, pa.binary()))
    assert column.type == pa.map_(pa.string(), pa.string())
    for got, text in zip(column.to_pylist(), raw, strict=True):
        expected = parse_properties(text.decode("utf-8", "replace"))
        assert dict(got) == expected
        assert len(got) == len(expected)  # no name twice: the later duplicate won


def test_properties_column_keeps_the_later_duplicate() -> None:
    column = properties_column(pa.array([b"K\x01v1\x02T\x01t\x02K\x01v2", b"K\x01x"]))
    assert [dict(m) for m in column.to_pylist()] == [{"K": "v2", "T": "t"}, {"K": "x"}]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | st.text(alphabet=" ab中", max_size=10), max_size=8))
def test_keys_column_is_split_keys(keys: list[str | None]) -> None:
    assert keys_column(pa.array(keys, pa.string())).to_pylist() == [split_keys(k) for k in keys]


_HOSTS = st.builds(
    HostAddress,
    st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16),
    st.integers(-(2**31), 2**31 - 1),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_HOSTS, st.integers(-(2**63), 2**63 - 1)), max_size=10))
def test_host_and_msg_id_columns_are_the_scalar_forms(rows: list[tuple[HostAddress, int]]) -> None:
    ip = pa.array([h.ip for h, _ in rows], pa.binary())
    port = np.array([h.port for h, _ in rows], np.int64)
    offsets = np.array([o for _, o in rows], np.int64)
    assert host_text_column(ip, pa.array(port, pa.int32())).to_pylist() == [str(h) for h, _ in rows]
    assert offset_msg_id_column(ip, port, offsets).to_pylist() == [
        encode_offset_msg_id(h, o) for h, o in rows
    ]
    # A slice of a column (as a batch of a larger decode) reads its own rows only.
    if rows:
        tail = offset_msg_id_column(ip.slice(1), port[1:], offsets[1:]).to_pylist()
        assert tail == [encode_offset_msg_id(h, o) for h, o in rows[1:]]


def test_transaction_and_compression_names_follow_sys_flag() -> None:
    assert [cl.transaction_name(f) for f in (0, 4, 8, 12, 0x13)] == [
        "not",
        "prepared",
        "commit",
        "rollback",
        "not",
    ]
    assert cl.compression_name(0x200) is None
    assert cl.compression_name(cl.COMPRESSED_FLAG | 0x200) == "zstd"
    assert cl.compression_name(cl.COMPRESSED_FLAG | 0x700) == "unknown(7)"


def test_properties_column_with_many_distinct_names() -> None:
    names = [f"n{i}" for i in range(100)]  # more names than the bit-set test covers
    raw = "\x02".join(f"{n}\x01v" for n in names) + "\x02n5\x01w"
    column = properties_column(pa.array([raw.encode(), b"a\x01b\x02a\x01c"]))
    assert [dict(m) for m in column.to_pylist()] == [
        parse_properties(raw),
        {"a": "c"},
    ]
