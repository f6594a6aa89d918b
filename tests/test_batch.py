"""Arrow batches of scanner columns agree with the record-by-record decoder."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqinspect.format import columns, encode
from rmqinspect.format import commitlog as cl
from rmqinspect.format.batch import BatchDecodeError, decode_batch
from rmqinspect.format.host import HostAddress
from rmqinspect.store.model import Store

V4 = HostAddress(bytes([10, 0, 0, 7]), 10911)
V6 = HostAddress(bytes(range(16)), 10912)


def _rows(buf: bytes, start: int = 0) -> list[dict[str, object]]:
    return decode_batch(columns.gather(buf, columns.walk(buf), start)).to_pylist()


def _assert_same(row: dict[str, object], rec: cl.MessageRecord) -> None:
    assert row["physical_offset"] == rec.position
    assert row["store_size"] == rec.store_size
    assert row["version"] == (2 if rec.version == "v2" else 1)
    assert row["topic"] == rec.topic and row["queue_id"] == rec.queue_id
    assert row["queue_offset"] == rec.queue_offset and row["sys_flag"] == rec.sys_flag
    assert row["physical_offset_field"] == rec.physical_offset_field
    assert row["born_timestamp"] == rec.born_timestamp
    assert row["store_timestamp"] == rec.store_timestamp
    assert (row["born_host"], row["born_port"]) == (rec.born_host.ip, rec.born_host.port)
    assert (row["store_host"], row["store_port"]) == (rec.store_host.ip, rec.store_host.port)
    assert row["reconsume_times"] == rec.reconsume_times
    assert row["prepared_transaction_offset"] == rec.prepared_transaction_offset
    assert row["body"] == rec.body and row["properties"] == rec.properties_raw
    assert row["body_crc"] == rec.body_crc and row["body_crc_ok"] == rec.body_crc_ok


messages = st.builds(
    dict,
    topic=st.text(min_size=1, max_size=140).filter(lambda t: len(t.encode()) <= 300),
    body=st.binary(max_size=300),
    born_host=st.sampled_from([V4, V6]),
    store_host=st.sampled_from([V4, V6]),
    queue_offset=st.integers(0, 2**40),
    properties=st.binary(max_size=200),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(messages, min_size=1, max_size=8))
def test_batch_equals_record_decoder(specs: list[dict[str, object]]) -> None:
    buf = bytearray()
    for spec in specs:
        topic = str(spec["topic"])
        buf += encode.encode_message(
            topic=topic,
            queue_id=3,
            flag=1,
            queue_offset=int(spec["queue_offset"]),  # type: ignore[call-overload]
            physical_offset=len(buf),
            sys_flag=0,
            born_timestamp=5,
            born_host=spec["born_host"],  # type: ignore[arg-type]
            store_timestamp=6,
            store_host=spec["store_host"],  # type: ignore[arg-type]
            reconsume_times=2,
            prepared_transaction_offset=9,
            body=spec["body"],  # type: ignore[arg-type]
            properties=spec["properties"],  # type: ignore[arg-type]
            version=2 if len(topic.encode()) > 127 else 1,
        )
    buf += encode.encode_blank(64) + bytes(56)
    rows = _rows(bytes(buf))
    assert len(rows) == len(specs)
    for row in rows:
        _assert_same(row, cl.decode_message(bytes(buf), int(row["physical_offset"])))  # type: ignore[call-overload]


def test_walk_stops_and_reports_why() -> None:
    rec = encode.encode_message(
        topic="T", queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0,
        born_timestamp=0, born_host=V4, store_timestamp=0, store_host=V4, reconsume_times=0,
        prepared_transaction_offset=0, body=b"b", properties=b"",
    )  # fmt: skip
    assert columns.walk(rec + encode.encode_blank(8)).stop == "blank"
    assert columns.walk(rec + bytes(8)).stop == "bad_magic"
    assert columns.walk(rec[:-1]).stop == "bad_size"
    w = columns.walk(rec * 3 + bytes(8), max_records=2)
    assert (w.stop, w.end, len(w.positions)) == ("limit", 2 * len(rec), 2)


def test_inconsistent_lengths_name_the_record() -> None:
    rec = encode.encode_message(
        topic="T", queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0,
        born_timestamp=0, born_host=V4, store_timestamp=0, store_host=V4, reconsume_times=0,
        prepared_transaction_offset=0, body=b"body", properties=b"a\x01b",
    )  # fmt: skip
    bad = bytearray(rec)
    struct.pack_into(">i", bad, 84, 9999)  # BODYLENGTH
    buf = rec + bytes(bad) + bytes(8)
    with pytest.raises(BatchDecodeError) as err:
        decode_batch(columns.gather(buf, columns.walk(buf)))
    assert err.value.position == len(rec)


def test_corpus_files_decode_in_batches(conformance5_dir: Path) -> None:
    with Store.open(conformance5_dir / "stores" / "clean5_propcrc") as store:
        total = 0
        for f in store.commitlog.files:
            buf = bytes(store.maps.read(f, 0, f.length))
            for row in _rows(buf, f.start):
                _assert_same(
                    row, cl.decode_message(buf, int(row["physical_offset"]) - f.start, f.start)
                )  # type: ignore[call-overload]
                total += 1
        assert total == 2000


def test_short_values_at_the_very_end_of_the_buffer() -> None:
    """Values ending at the buffer's last byte are read in full (no padding or shifting)."""
    recs = [
        encode.encode_message(
            topic=topic, queue_id=0, flag=0, queue_offset=i, physical_offset=0, sys_flag=0,
            born_timestamp=0, born_host=V4, store_timestamp=0, store_host=V6, reconsume_times=0,
            prepared_transaction_offset=0, body=body, properties=props,
        )
        for i, (topic, body, props) in enumerate(
            [("T", b"x" * 40, b"a\x01b"), ("Topic", b"", b""), ("TT", b"short", b"k\x01v")]
        )
    ]  # fmt: skip
    buf = b"".join(recs)
    rows = _rows(buf)
    assert len(rows) == 3
    for row in rows:
        _assert_same(row, cl.decode_message(buf, int(row["physical_offset"])))  # type: ignore[call-overload]
