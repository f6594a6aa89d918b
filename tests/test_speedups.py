"""The C loops of ``rmqinspect.format._speedups`` agree with their pure-Python twins.

Where the extension is not built, rmqinspect runs the twins; these tests compare both on
random buffers, random slices and every fixture store's commitlog (skipped, saying so, when
the extension is absent).
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqinspect.analysis.messages import MessageBatch
from rmqinspect.format import columns, encode, npbytes, scan, speedups
from rmqinspect.format import commitlog as cl
from rmqinspect.format.batch import _arrow_properties_column, map_values, properties_column
from rmqinspect.format.host import HostAddress
from rmqinspect.format.message_json import BodyFormat, message_json
from rmqinspect.format.scan import CheckedRun
from rmqinspect.format.times import MAX_ISO_MS, MIN_ISO_MS
from rmqinspect.render.message import _TRANSACTIONS, _json_settings, message_json_block
from rmqinspect.render.output import dumps
from tests.conftest import FIXTURES

needs_c = pytest.mark.skipif(not speedups.compiled(), reason="the C extension is not built")

_HOST_V4 = HostAddress(bytes([10, 0, 0, 1]), 10911)
_HOST_V6 = HostAddress(bytes(range(16)), 10912)
_MAGICS = [cl.MESSAGE_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE_V2, cl.BLANK_MAGIC_CODE, 0, 0x12345678]


@st.composite
def _chains(draw: st.DrawFn) -> bytes:
    """Headers chained by TOTALSIZE with odd sizes and magics, then random bytes."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 12))):
        size = draw(st.sampled_from([8, 12, 20, 64, 300, -1, 0, 7, 1 << 20]))
        magic = draw(st.sampled_from(_MAGICS))
        out += struct.pack(">ii", size, magic)
        out += bytes(max(0, min(size, 400) - 8))
    out += draw(st.binary(max_size=40))
    return bytes(out)


@needs_c
@settings(max_examples=400, deadline=None)
@given(
    _chains(),
    st.integers(0, 20),
    st.integers(0, 20),
    st.sampled_from([8, 20]),
    st.sampled_from([(cl.MESSAGE_MAGIC_CODE,), (cl.MESSAGE_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE_V2)]),
)
def test_walk_chain_agrees(
    buf: bytes, pos: int, max_records: int, min_size: int, magics: tuple[int, ...]
) -> None:
    pos = min(pos, len(buf))
    got = speedups.walk_chain(buf, pos, max_records, min_size, magics)
    want = speedups.py_walk_chain(buf, pos, max_records, min_size, magics)
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()
    assert got[2] == want[2]


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=3000), st.data())
def test_crcs_agree_with_zlib_and_crc32c(buf: bytes, data: st.DataObject) -> None:
    pairs = data.draw(
        st.lists(
            st.tuples(st.integers(0, len(buf)), st.integers(-2, len(buf))).map(
                lambda p: (p[0], min(p[1], len(buf) - p[0]))
            ),
            max_size=30,
        )
    )
    starts = np.array([s for s, _ in pairs], np.int64)
    lengths = np.array([n for _, n in pairs], np.int64)
    want = [zlib.crc32(buf[s : s + n]) if n > 0 else 0 for s, n in pairs]
    want_c = [crc32c.crc32c(buf[s : s + n]) if n > 0 else 0 for s, n in pairs]
    assert speedups.crc32_many(buf, starts, lengths).tolist() == want
    assert speedups.py_crc32_many(buf, starts, lengths).tolist() == want
    assert speedups.crc32c_many(buf, starts, lengths).tolist() == want_c
    assert speedups.py_crc32c_many(buf, starts, lengths).tolist() == want_c


@needs_c
def test_crc_of_long_slices_uses_every_folding_path() -> None:
    buf = np.random.default_rng(7).integers(0, 256, 1 << 16, np.uint8).tobytes()
    lengths = np.array([63, 64, 65, 79, 80, 127, 128, 129, 1000, 4096, 65535], np.int64)
    starts = np.ones(len(lengths), np.int64)  # unaligned
    assert speedups.crc32_many(buf, starts, lengths).tolist() == [
        zlib.crc32(buf[1 : 1 + n]) for n in lengths.tolist()
    ]


def test_crc_refuses_a_slice_outside_the_buffer() -> None:
    if not speedups.compiled():
        pytest.skip("the C extension is not built")
    with pytest.raises(ValueError):
        speedups.crc32_many(b"abc", np.array([2], np.int64), np.array([5], np.int64))


@needs_c
@pytest.mark.parametrize("count", [1 << 61, (1 << 63) - 1])
def test_a_count_that_would_wrap_the_output_size_is_refused(count: int) -> None:
    """``count * 8`` wraps to a small number of bytes for these counts: a direct call raises
    instead of writing past the two-item outputs."""
    c = speedups._speedups
    assert c is not None
    positions, sizes = np.zeros(2, np.int64), np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="fewer than"):
        c.walk(bytes(64), 0, count, 8, (1,), positions, sizes)
    assert positions.tolist() == sizes.tolist() == [0, 0]


@needs_c
def test_every_output_is_checked_against_its_count() -> None:
    c = speedups._speedups
    assert c is not None
    buf, three = bytes(range(64)), np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError):
        c.crc32_many(buf, three, three, np.zeros(2, np.int64))
    with pytest.raises(ValueError):
        c.gather(buf, three, columns._LAYOUT, np.zeros(len(c.GATHER_COLUMNS) * 3 - 1, np.int64))
    with pytest.raises(ValueError):
        c.binary_views(buf, three, three, np.zeros(3 * 16 - 1, np.uint8))
    lengths = np.full(3, 9, np.int64)  # room for 9 entries asked
    with pytest.raises(ValueError, match="fewer than"):
        c.property_entries(buf, three, lengths, *(np.zeros(8, np.int64) for _ in range(5)))


@needs_c
def test_a_walk_from_the_largest_position_stops_there() -> None:
    """``pos + 8`` would overflow: the walk compares ``pos`` with the buffer's end instead."""
    c = speedups._speedups
    assert c is not None
    out = np.zeros(1, np.int64)
    last = (1 << 63) - 1
    assert c.walk(bytes(64), last, 1, 8, (1,), out, out.copy()) == (0, last)


@needs_c
@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=6))
def test_gather_at_any_int64_position_agrees(positions: list[int]) -> None:
    """Positions near the ends of int64 wrap their field offsets as numpy does (no undefined
    overflow in C) and read zeros."""
    buf = _record(body=b"x" * 40) * 2
    p = np.array(positions, np.int64)
    assert _fields(columns.gather(buf, p, 0)) == _fields(columns.py_gather(buf, p, 0))


@needs_c
def test_the_extension_names_the_columns_it_gathers() -> None:
    """The C gather's rows are RecordColumns' columns after ``positions``, in field order, and
    a build whose names differ is refused at import, not read into the wrong columns."""
    assert speedups.gather_columns() == columns._ARRAY_FIELDS[1:]
    columns.check_extension_columns(speedups.gather_columns(), speedups.message_fields())
    renamed = tuple(
        "physical_offset" if n == "physical_offset_field" else n for n in columns._ARRAY_FIELDS[1:]
    )
    for gathered, fields in (
        (renamed, speedups.message_fields()),
        (speedups.gather_columns()[:-1], speedups.message_fields()),
        (speedups.gather_columns(), (*speedups.message_fields(), "no_such_column")),
    ):
        with pytest.raises(ImportError, match="does not match"):
            columns.check_extension_columns(gathered, fields)
    columns.check_extension_columns((), ())  # not built: nothing to check


@needs_c
def test_gather_refuses_layout_constants_past_int32() -> None:
    c = speedups._speedups
    assert c is not None
    layout = (1 << 40, *columns._LAYOUT[1:])
    with pytest.raises(ValueError):
        c.gather(
            bytes(64), np.zeros(1, np.int64), layout, np.zeros(len(c.GATHER_COLUMNS), np.int64)
        )


_BORN = HostAddress(bytes([10, 0, 0, 1]), 1)
_STORED = HostAddress(bytes([10, 0, 0, 2]), 2)


def _record(**fields: Any) -> bytes:
    """One encoded record of TopicA between the two test hosts, every other field zero or
    empty, unless given."""
    defaults: dict[str, Any] = {
        "topic": "TopicA", "queue_id": 0, "flag": 0, "queue_offset": 0, "physical_offset": 0,
        "sys_flag": 0, "born_timestamp": 0, "born_host": _BORN, "store_timestamp": 0,
        "store_host": _STORED, "reconsume_times": 0, "prepared_transaction_offset": 0,
        "body": b"", "properties": b"",
    }  # fmt: skip
    return encode.encode_message(**{**defaults, **fields})


def _fields(cols: columns.RecordColumns) -> dict[str, list[int]]:
    return {name: getattr(cols, name).tolist() for name in columns._ARRAY_FIELDS}


def _drawn_record(data: st.DataObject) -> bytes:
    return _record(
        topic=data.draw(st.sampled_from(["T", "TopicLonger", ""])),
        queue_id=3,
        flag=1,
        queue_offset=7,
        physical_offset=9,
        sys_flag=data.draw(st.sampled_from([0, 0x10, 0x30])),
        born_timestamp=5,
        born_host=_HOST_V6 if data.draw(st.booleans()) else _HOST_V4,
        store_timestamp=6,
        store_host=_HOST_V4,
        reconsume_times=2,
        prepared_transaction_offset=4,
        body=data.draw(st.binary(max_size=30)),
        properties=data.draw(st.binary(max_size=20)),
    )


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.data())
def test_gather_agrees(data: st.DataObject) -> None:
    """Records whole, cut by the buffer's end, with lying sizes and flags, at any position."""
    records = [_drawn_record(data) for _ in range(data.draw(st.integers(1, 3)))]
    buf = bytearray(b"".join(records))
    for _ in range(data.draw(st.integers(0, 4))):  # flip bytes: sizes, lengths, magics lie
        at = data.draw(st.integers(0, len(buf) - 1))
        buf[at] = data.draw(st.integers(0, 255))
    buf = buf[: data.draw(st.integers(0, len(buf)))]
    positions = np.array(data.draw(st.lists(st.integers(0, len(buf) + 120), max_size=8)), np.int64)
    via_c = _fields(columns.gather(bytes(buf), positions, 0))
    assert via_c == _fields(columns.py_gather(bytes(buf), positions, 0))


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.data())
def test_walk_columns_agree(data: st.DataObject) -> None:
    """The one-pass walk, gather and body CRCs are the walk, the numpy gather and zlib's CRC:
    lying sizes, flags and lengths, a record cut by the buffer's end, the record limit."""
    records = [_drawn_record(data) for _ in range(data.draw(st.integers(1, 4)))]
    buf = bytearray(b"".join(records))
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(buf) - 1))
        buf[at] = data.draw(st.integers(0, 255))
    buf = bytes(buf[: data.draw(st.integers(0, len(buf)))])
    pos = data.draw(st.integers(0, len(buf)))
    kwargs: dict[str, Any] = {
        "accept_v2": data.draw(st.booleans()),
        "max_records": data.draw(st.integers(0, 5)),
        "file_start": 1000,
        "with_crc": data.draw(st.booleans()),
    }
    w, cols, crcs = columns.walk_columns(buf, pos, **kwargs)
    extension = speedups._speedups
    speedups._speedups = None  # the path without it (a fixture would outlive one example)
    try:
        w2, cols2, crcs2 = columns.walk_columns(buf, pos, **kwargs)
    finally:
        speedups._speedups = extension
    assert (w.positions.tolist(), w.store_size.tolist(), w.end, w.stop) == (
        w2.positions.tolist(),
        w2.store_size.tolist(),
        w2.end,
        w2.stop,
    )
    assert _fields(cols) == _fields(cols2)
    assert (crcs is None) == (crcs2 is None) == (not kwargs["with_crc"])
    if crcs is not None and crcs2 is not None:
        assert crcs.tolist() == crcs2.tolist()


@needs_c
def test_walk_gather_refuses_an_output_shorter_than_its_record_limit() -> None:
    layout = columns._LAYOUT
    magics = (cl.MESSAGE_MAGIC_CODE,)
    rows = len(speedups.gather_columns())
    small = np.empty((rows, 2), np.int64)
    for out, positions, crcs in (
        (small, np.empty(3, np.int64), np.empty(3, np.int64)),
        (np.empty((rows, 3), np.int64), np.empty(2, np.int64), np.empty(3, np.int64)),
        (np.empty((rows, 3), np.int64), np.empty(3, np.int64), np.empty(2, np.int64)),
    ):
        with pytest.raises(ValueError):
            speedups._speedups.walk_gather(
                _record(), 0, 3, 8, magics, layout, True, positions, out, crcs
            )
    with pytest.raises(ValueError, match="bad gather arguments"):
        speedups._speedups.walk_gather(
            _record(),
            0,
            1,
            8,
            magics,
            (1 << 40,) * len(layout),
            True,
            *(np.empty(1, np.int64), np.empty((rows, 1), np.int64), np.empty(1, np.int64)),
        )


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=60).map(lambda b: bytes(97 + x % 3 for x in b)), st.data())
def test_span_ids_number_values_as_the_numpy_grouping_does(buf: bytes, data: st.DataObject) -> None:
    """Few distinct values (three letters), and short spans whose 8-byte window the buffer's
    end moves (spans lie inside the buffer: the C pass refuses others, below)."""
    n = data.draw(st.integers(0, 16))
    at = data.draw(st.lists(st.integers(0, len(buf)), min_size=n, max_size=n))
    length = [data.draw(st.integers(0, len(buf) - a)) for a in at]
    spans = np.array(at, np.int64), np.array(length, np.int64)
    got = npbytes.span_ids(buf, *spans)
    extension = speedups._speedups
    speedups._speedups = None
    try:
        want = npbytes.span_ids(buf, *spans)
    finally:
        speedups._speedups = extension
    assert (got[0].tolist(), got[1]) == (want[0].tolist(), want[1])
    assert [got[1][i] for i in got[0].tolist()] == [
        buf[a : a + k] for a, k in zip(at, length, strict=True)
    ]


@needs_c
def test_span_ids_refuse_a_span_outside_the_buffer() -> None:
    out = np.empty(1, np.int64), np.empty(1, np.int64)
    for at, length in ((3, 2), (-1, 1), (5, 0), (0, -1)):
        with pytest.raises(ValueError):
            speedups._speedups.span_ids(b"abcd", np.array([at]), np.array([length]), *out)


def test_gather_reads_a_short_record_at_the_buffers_end() -> None:
    record = _record(
        topic="T",
        queue_id=3,
        queue_offset=77,
        born_timestamp=5,
        born_host=_HOST_V4,
        store_timestamp=6,
        store_host=_HOST_V4,
        reconsume_times=9,
        prepared_transaction_offset=11,
    )
    for gather in (columns.gather, columns.py_gather):
        cols = gather(record, np.zeros(1, np.int64), 0)
        assert cols.well_formed.tolist() == [True]
        assert (cols.queue_offset[0], cols.reconsume_times[0], cols.store_timestamp[0]) == (
            77,
            9,
            6,
        )


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.data())
def test_binary_views_agree(buf: bytes, data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 12))
    starts = np.array(data.draw(st.lists(st.integers(0, len(buf)), min_size=n, max_size=n)))
    lengths = np.array(
        [data.draw(st.integers(-3, len(buf) - int(s))) for s in starts.tolist()], np.int64
    )
    starts = starts.astype(np.int64)
    c_views = speedups.binary_views(buf, starts, lengths)
    assert c_views.tobytes() == speedups.py_binary_views(buf, starts, lengths).tobytes()


def test_binary_views_refuse_a_slice_outside_the_buffer() -> None:
    if not speedups.compiled():
        pytest.skip("the C extension is not built")
    with pytest.raises(ValueError):
        speedups.binary_views(b"abc", np.array([2], np.int64), np.array([5], np.int64))


_PROPERTY_TEXT = st.lists(
    st.sampled_from(["\x01", "\x02", "a", "b", "KEYS", "TAGS", "中", " "]), max_size=30
).map("".join)


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(_PROPERTY_TEXT, max_size=10))
def test_property_entries_make_the_arrow_map(texts: list[str]) -> None:
    """The C entries and the Arrow-only path build the same map, entries in the same order,
    and the same values under a name."""
    raw = pa.array([t.encode() for t in texts], pa.binary())
    via_c = properties_column(raw)
    via_arrow = _arrow_properties_column(raw)
    assert via_c.to_pylist() == via_arrow.to_pylist()
    for name in ("KEYS", "TAGS", "a"):
        assert map_values(via_c, name).to_pylist() == (
            pc.map_lookup(via_arrow, name, "first").to_pylist()
        )


def test_property_entries_decline_what_only_the_arrow_path_decodes() -> None:
    """Text that is not UTF-8 and rows of more than 64 entries are left to the Arrow path,
    which decodes with replacement characters (Java's decoding)."""
    if not speedups.compiled():
        pytest.skip("the C extension is not built")
    many = "\x02".join(f"n{i}\x01v" for i in range(65)).encode()
    for rows in ([b"a\x01\xff"], [b"\xff\x01b"], [b"a\x01b", many]):
        lengths = np.array([len(r) for r in rows], np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        assert speedups.property_entries(b"".join(rows), starts, lengths) is None
    entries = speedups.property_entries(b"a\x01b", np.zeros(1, np.int64), np.ones(1, np.int64) * 3)
    assert entries is not None and [a.tolist() for a in entries] == [[0], [0], [1], [2], [1]]


def _scan_summary(path: Path) -> list[tuple[object, ...]]:
    data = path.read_bytes()
    out: list[tuple[object, ...]] = []
    for profile_opts in (
        cl.CheckOptions(),
        cl.CheckOptions(check_crc=False),
    ):
        for ev in scan.scan_file(data, 0, 0, profile_opts, policy=scan.WalkPolicy.FORENSIC):
            if isinstance(ev, CheckedRun):
                stop = None if ev.stop is None else (ev.stop.reason, ev.stop.size)
                cols = ev.columns
                out.append((cols.positions.tolist(), cols.body_crcs().tolist(), ev.end, stop))
            else:
                out.append((ev.start, ev.end, ev.result.reason))
    return out


@needs_c
def test_fixture_scans_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted(FIXTURES.glob("stores/*/commitlog/*"))
    assert files
    with_c = [_scan_summary(f) for f in files]
    assert sum(len(run[0]) for summary in with_c for run in summary if len(run) == 4) > 100
    monkeypatch.setattr(speedups, "_speedups", None)
    assert not speedups.compiled()
    assert [_scan_summary(f) for f in files] == with_c


@needs_c
@pytest.mark.parametrize("name", ["crash49", "crash53"])
def test_recovery_is_the_same_without_the_extension(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmqinspect.analysis.recovery import run_recovery
    from rmqinspect.analysis.recovery.state import RecoverOptions
    from rmqinspect.render.output import to_jsonable
    from rmqinspect.store.model import Store

    def report() -> tuple[dict[str, Any], int]:
        with Store.open(FIXTURES / "stores" / name) as store:
            outcome = run_recovery(store, RecoverOptions())
            doc: dict[str, Any] = to_jsonable(outcome.report)
            for new in doc["index"]["new_files"]:
                new["name"] = None  # named by the wall clock, as the broker names them
            return doc, outcome.report.index.entries_written

    with_c = report()
    monkeypatch.setattr(speedups, "_speedups", None)
    assert report() == with_c
    assert with_c[1] > 0


# --- message JSON -------------------------------------------------------------------------------

_TEXT = st.lists(
    st.sampled_from(
        [b"a", b" ", b'"', b"\\", b"\n", b"\x1f", b"\x7f", b"\xe4\xb8\xad", b"\xff", b"\x01"]
    ),
    max_size=10,
).map(b"".join)
_PROPERTY = st.tuples(
    st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"a", b"", b"__CRC32#", b"\xe4\xb8\xad"]),
    st.sampled_from([b"\x01", b"", b"\x01\x01"]),
    _TEXT,
).map(b"".join)
_V6 = [
    bytes(range(16)),
    bytes(16),
    bytes(15) + b"\x01",
    b"\x00\x01" + bytes(14),
    bytes(10) + b"\xff\xff\x01\x02\x03\x04",  # IPv4-mapped
    bytes.fromhex("20010db8000000000001000000000001"),  # two runs of zeros: the first
    bytes.fromhex("20010db80000000100000000000000ff"),  # the longer run
    bytes.fromhex("fe800000000000000202b3fffe1e8329"),
    bytes.fromhex("000100000001000000010000000100ab"),  # single zero groups stay
]
_HOSTS = [HostAddress(bytes([10, 0, 0, 1]), 10911), HostAddress(b"\xff\x00\x7f\x01", -1)] + [
    HostAddress(ip, 7) for ip in _V6
]
_TIMES = [
    0,
    -1,
    -62135596800000,
    -62135596800001,
    253402300799999,
    253402300800000,
    1_714_557_600_123,
]


_BAD_TOPIC = "\x02\x03\x04"


@st.composite
def _records(draw: st.DrawFn) -> bytes:
    out = bytearray()
    for _ in range(draw(st.integers(1, 5))):
        properties = b"\x02".join(draw(st.lists(_PROPERTY, max_size=5)))
        out += encode.encode_message(
            topic=draw(st.sampled_from(["TopicA", 'T"op\\ic', "中文", "\x01x", _BAD_TOPIC])),
            queue_id=draw(st.integers(-3, 3)),
            flag=draw(st.integers(-(2**31), 2**31 - 1)),
            queue_offset=draw(st.integers(-5, 2**40)),
            physical_offset=draw(st.sampled_from([len(out), 12345, -1])),
            sys_flag=draw(st.sampled_from([0, 4, 8, 12, 1, 0x100 | 1])),
            born_timestamp=draw(st.sampled_from(_TIMES)),
            born_host=draw(st.sampled_from(_HOSTS)),
            store_timestamp=draw(st.sampled_from(_TIMES)),
            store_host=draw(st.sampled_from(_HOSTS)),
            reconsume_times=draw(st.integers(0, 3)),
            prepared_transaction_offset=draw(st.integers(-1, 2**40)),
            body=draw(st.one_of(_TEXT, st.binary(max_size=70))),
            properties=properties,
            version=draw(st.sampled_from([1, 2])),
        )
    # A topic that is not UTF-8 (the encoder takes text): same length, other bytes.
    out = out.replace(_BAD_TOPIC.encode(), b"\xff\xfe\x80")
    return bytes(out) + bytes(256)  # a file goes on: the last record's header rows fit


@settings(max_examples=300, deadline=None)
@given(_records(), st.sampled_from(list(BodyFormat)), st.booleans())
def test_message_json_lines_are_the_per_record_json(
    buf: bytes, body: BodyFormat, with_c: bool
) -> None:
    cols = columns.gather(buf, columns.walk(buf, 0), 0)
    rows = np.arange(len(cols), dtype=np.int64)
    assert len(cols) and cols.well_formed.all()
    want = [dumps(message_json(cols.record(i), body)) for i in range(len(cols))]
    out = bytearray()  # one buffer for both calls, as a stream hands it batch after batch
    with pytest.MonkeyPatch.context() as patch:
        if not with_c:
            patch.setattr(speedups, "_speedups", None)
        assert message_json_lines(cols, rows, body, out) == want
        # every other row: the writer is handed rows, not a contiguous run
        assert message_json_lines(cols, rows[::2], body, out) == want[::2]


@needs_c
def test_the_c_writer_writes_every_key_of_the_definition() -> None:
    """Otherwise every row would take the per-record path, silently slow."""
    buf = (FIXTURES / "stores").glob("*/commitlog/*").__next__().read_bytes()
    cols = columns.gather(buf, columns.walk(buf, 0), 0)
    moved = cols.record(0)
    moved.physical_offset_field += 1  # the one optional key: a disagreeing PHYSICALOFFSET field
    for body in BodyFormat:
        keys = set(message_json(moved, body))
        assert "physical_offset_field" in keys and keys <= set(speedups.message_values())


@needs_c
def test_the_c_writer_writes_copies_of_one_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies of one record, each with the first one's PHYSICALOFFSET field (a stale region):
    the C writer writes them all, physical_offset_field included where it disagrees; the
    per-record definition only gives the keys (it took every copy, 10x slower, before)."""
    from rmqinspect.render import message as render_message

    data = _record(physical_offset=0, body=b"x") * 50 + bytes(256)
    cols = columns.gather(data, columns.walk(data, 0), 0)
    rows = np.arange(len(cols), dtype=np.int64)
    want = [dumps(message_json(cols.record(i), BodyFormat.TEXT)) for i in rows.tolist()]
    assert b"physical_offset_field" not in want[0] and b'"physical_offset_field":0}' in want[1]
    calls = 0

    def counting(*args: Any) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return message_json(*args)

    monkeypatch.setattr(render_message, "message_json", counting)
    assert message_json_lines(cols, rows, BodyFormat.TEXT, bytearray()) == want
    assert calls == 1


def message_json_lines(
    cols: columns.RecordColumns, rows: columns.I64, body: BodyFormat, out: bytearray
) -> list[bytes]:
    """The block's lines (JSON text holds no raw newline)."""
    batch = MessageBatch(cols, rows, lambda record: record)
    with message_json_block(batch, body, b"\n", out) as block:
        return bytes(block).split(b"\n")[:-1]


@needs_c
def test_message_json_lines_of_the_fixture_stores(monkeypatch: pytest.MonkeyPatch) -> None:
    written = 0
    out = bytearray()  # reused across every batch, as a stream does
    for path in sorted(FIXTURES.glob("stores/*/commitlog/*")):
        buf = path.read_bytes()
        for ev in scan.scan_file(
            buf, 0, 0, cl.CheckOptions(check_crc=False), policy=scan.WalkPolicy.FORENSIC
        ):
            if not isinstance(ev, CheckedRun) or not len(ev):
                continue
            cols = ev.columns
            rows = np.arange(len(cols), dtype=np.int64)
            for body in BodyFormat:
                want = [dumps(message_json(cols.record(i), body)) for i in range(len(cols))]
                assert message_json_lines(cols, rows, body, out) == want
                written += len(rows)
    assert written > 1000


# Bytes the writer's chunked loops (16 bytes with SSE2, else 8) must stop at: escapes, UTF-8 of
# every length, and byte strings Python's strict decoder refuses (a stray continuation byte,
# overlong forms, a surrogate, beyond U+10FFFF, a sequence cut short).
_AWKWARD = [
    b'"',
    b"\\",
    b"\n",
    b"\x1f",
    b"\x7f",
    b"\xc3\xa9",
    b"\xe4\xb8\xad",
    b"\xf0\x9f\x98\x80",
    b"\xef\xbf\xbf",
    b"\xf4\x8f\xbf\xbf",
    b"\x80",
    b"\xff",
    b"\xc1\xbf",
    b"\xe0\x9f\xbf",
    b"\xed\xa0\x80",
    b"\xf0\x8f\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xe4\xb8",
]


@needs_c
@pytest.mark.parametrize("awkward", _AWKWARD)
def test_message_json_at_every_chunk_boundary(awkward: bytes) -> None:
    """The awkward bytes at each position of bodies and topics up to 40 bytes long, so each
    falls at every place in a chunk, at a chunk's end and in the scalar tail after the last."""
    out = bytearray()
    for length in range(41):
        buf = bytearray()
        for at in range(length + 1):
            body = b"a" * at + awkward + b"b" * (length - at)
            buf += _record(
                topic="T" * (length % 7),
                queue_offset=at,
                physical_offset=len(buf),
                body=body,
                properties=b"KEYS\x01" + body.replace(b"\x01", b"").replace(b"\x02", b""),
            )
        data = bytes(buf) + bytes(256)
        cols = columns.gather(data, columns.walk(data, 0), 0)
        rows = np.arange(len(cols), dtype=np.int64)
        assert len(cols) == length + 1
        for body_format in BodyFormat:
            want = [dumps(message_json(cols.record(i), body_format)) for i in range(len(cols))]
            assert message_json_lines(cols, rows, body_format, out) == want


# Pieces of UTF-8 at the edges of each rule (the lowest and highest second byte of every lead,
# the last code points before a surrogate and past them) and pieces that break one rule each.
_UTF8_PIECES = [
    b"a",
    b"\x7f",
    b"\xc2\x80",
    b"\xdf\xbf",
    b"\xe0\xa0\x80",
    b"\xe4\xb8\xad",
    b"\xed\x9f\xbf",
    b"\xee\x80\x80",
    b"\xef\xbf\xbf",
    b"\xf0\x90\x80\x80",
    b"\xf3\xbf\xbf\xbf",
    b"\xf4\x8f\xbf\xbf",
    b"\x80",  # a continuation byte alone
    b"\xc0\x80",  # overlong
    b"\xc1\xbf",
    b"\xe0\x9f\xbf",
    b"\xf0\x8f\xbf\xbf",
    b"\xed\xa0\x80",  # surrogate
    b"\xf4\x90\x80\x80",  # beyond U+10FFFF
    b"\xf5\x80\x80\x80",
    b"\xff",
    b"\xe4\xb8",  # cut short
    b"\xf0\x90\x80",
    b"\xc2",
]


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_UTF8_PIECES), max_size=80).map(b"".join), max_size=4))
def test_the_c_writer_takes_as_text_what_python_decodes(bodies: list[bytes]) -> None:
    """Bodies of many blocks of 16 bytes: the C writer writes a body as text exactly when
    Python's strict decoder takes it, and the same text."""
    buf = bytearray()
    for body in [*bodies, b"\xe4\xb8\xad" * 40]:  # a long valid body in every example
        buf += _record(physical_offset=len(buf), body=body)
    data = bytes(buf) + bytes(256)
    cols = columns.gather(data, columns.walk(data, 0), 0)
    rows = np.arange(len(cols), dtype=np.int64)
    want = [dumps(message_json(cols.record(i), BodyFormat.TEXT)) for i in range(len(cols))]
    assert message_json_lines(cols, rows, BodyFormat.TEXT, bytearray()) == want


@needs_c
@pytest.mark.parametrize("name_length", [1, 27, 28, 29, 60])
def test_the_c_writer_writes_keys_of_any_length(name_length: int) -> None:
    """Short key prefixes are copied as one padded block, long ones byte for byte."""
    data = _record(queue_id=7, body=b"x") + bytes(256)
    cols = columns.gather(data, columns.walk(data, 0), 0)
    rows = np.arange(len(cols), dtype=np.int64)
    table = np.stack([getattr(cols, name)[rows] for name in speedups.message_fields()], 1)
    name = "k" * name_length
    keys = (
        (b'{"' + name.encode() + b'":', speedups.message_values().index("queue_id")),
        (b',"' + name.encode() + b'2":', speedups.message_values().index("topic")),
    )
    out = bytearray()
    length, _, fallback = speedups.message_json(
        cols.buf, 0, table, keys, 3, _json_settings(), _TRANSACTIONS, b"\n", out
    )
    assert not len(fallback)
    assert bytes(out[:length]) == dumps({name: 7, name + "2": "TopicA"}) + b"\n"


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-3, 12), min_size=1, max_size=12), st.integers(-2, 13))
def test_follow_links_agrees(links: list[int], head: int) -> None:
    """Chains of 8-byte entries whose link is their second int32: cycles, self loops, links
    out of range; the walk stops at the limit, the first repeat or a number out of range."""
    buf = b"".join(struct.pack(">ii", 7, link) for link in links)
    for limit in range(len(links) + 1):
        want = speedups.py_follow_links(buf, 0, 8, 4, head, limit)
        got = speedups.follow_links(buf, 0, 8, 4, head, limit)
        assert got[0].tolist() == want[0].tolist() and got[1] == want[1]


@pytest.mark.parametrize("bound", [MIN_ISO_MS, MAX_ISO_MS])
def test_the_c_writer_refuses_a_time_range_past_four_digit_years(bound: int) -> None:
    """Outside years 0000-9999 the date text would index past its digit table, and
    ``-ms`` of the least int64 would overflow: such a range is refused, not written."""
    data = _record(body=b"x") + bytes(256)
    cols = columns.gather(data, columns.walk(data, 0), 0)
    table = np.stack([getattr(cols, name) for name in speedups.message_fields()], 1)
    keys = ((b'{"t":', speedups.message_values().index("store_time")),)
    past = -(1 << 63) if bound == MIN_ISO_MS else (1 << 63) - 1
    settings = tuple(past if v == bound else v for v in _json_settings())
    with pytest.raises(ValueError, match="time range"):
        speedups.message_json(
            cols.buf, 0, table, keys, 3, settings, _TRANSACTIONS, b"\n", bytearray()
        )


def _switched_path_inputs() -> tuple[bytes, columns.I64, columns.I64, columns.RecordColumns]:
    """Input that reaches every path ``RMQINSPECT_SCALAR=1`` switches: slices around the 64-
    and 16-byte CRC folding steps, and records whose bodies and properties hold every awkward
    byte string at every place of a 16-byte block (the UTF-8 check, the escape and copy
    chunks, base64 and hex)."""
    rng = np.random.default_rng(3)
    buf = rng.integers(0, 256, 1 << 14, np.uint8).tobytes()
    lengths = np.array([0, 1, 7, 8, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4097], np.int64)
    starts = np.arange(len(lengths), dtype=np.int64) * 5 + 1  # unaligned
    records = bytearray()
    for awkward in _AWKWARD:
        for at in (0, 1, 7, 8, 15, 16, 17, 31):
            body = b"a" * at + awkward + b"b" * 24
            records += _record(
                queue_offset=at,
                physical_offset=len(records),
                body=body,
                properties=b"KEYS\x01" + body,
            )
    data = bytes(records) + bytes(256)
    return buf, starts, lengths, columns.gather(data, columns.walk(data, 0, max_records=1 << 12), 0)


def _switched_path_results() -> list[object]:
    """The C extension's answers on :func:`_switched_path_inputs`."""
    buf, starts, lengths, cols = _switched_path_inputs()
    rows = np.arange(len(cols), dtype=np.int64)
    return [
        speedups.crc32_many(buf, starts, lengths).tolist(),
        speedups.crc32c_many(buf, starts, lengths).tolist(),
        *(message_json_lines(cols, rows, body, bytearray()) for body in BodyFormat),
        [a.tolist() for a in cols.index_keys(rows)],
        columns.walk_columns(cols.buf, 0, max_records=1 << 12, with_crc=True)[2].tolist(),
    ]


@needs_c
def test_the_scalar_switch_changes_no_result() -> None:
    """``RMQINSPECT_SCALAR=1`` turns off every CPU-specific path (what an ARM host runs): a
    process started with it answers as this one does, and both as zlib, crc32c and the
    per-record JSON definition do."""
    script = (
        "import pickle, sys\n"
        "from rmqinspect.format import speedups\n"
        "from tests.test_speedups import _switched_path_results\n"
        "sys.stdout.buffer.write(pickle.dumps("
        "(speedups._speedups.features(), _switched_path_results())))\n"
    )
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "RMQINSPECT_SCALAR": "1", "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=root, capture_output=True, check=True
    )
    features, scalar = pickle.loads(done.stdout)
    assert features == dict.fromkeys(features, False) and "sse2" in features
    here = _switched_path_results()
    assert scalar == here
    buf, starts, lengths, cols = _switched_path_inputs()
    slices = [buf[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
    assert here[0] == [zlib.crc32(b) if b else 0 for b in slices]
    assert here[1] == [crc32c.crc32c(b) if b else 0 for b in slices]
    spans = (cols.topic_at, cols.topic_length, cols.properties_at, cols.properties_length)
    assert here[-2][0] == speedups.py_index_keys(cols.buf, *spans).hashes.tolist()
    assert here[-1] == cols.body_crcs().tolist()
    for body, lines in zip(BodyFormat, here[2:-2], strict=True):
        assert lines == [dumps(message_json(cols.record(i), body)) for i in range(len(cols))]
