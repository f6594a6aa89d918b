"""Round trip against the real-broker corpora: decode every record of a store the broker wrote,
feed the records to the writer with the same file sizes, index geometry and index file names,
and compare the resulting files byte for byte.

Everything the broker derives is recomputed by the writer: physical and queue offsets, BLANK
records and file rolling, body and property CRCs, consume-queue units (tagsCode included),
index slots, chains, headers and rollover, the checkpoint's logics and index timestamps, the
markers and the pre-allocated file of a crash. Two inputs cannot be derived from the records and
are taken from the corpus: when the broker's flush thread last ran (the checkpoint's
physicMsgTimestamp, passed as a lag) and, for the crash stores, where the stopped reput service
had got to (the last message in the consume queues).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqinspect.format import fastjson
from rmqinspect.format.checkpoint import decode_checkpoint
from rmqinspect.format.commitlog import (
    BLANK_MAGIC_CODE,
    CRC32_RESERVED_LEN,
    MessageRecord,
    decode_message,
)
from rmqinspect.format.config import parse_consumer_offsets, parse_delay_offsets
from rmqinspect.format.profile import Profile
from rmqinspect.synth.writer import MessageSpec, StoreLayout, StoreWriter

CORPUS_LAYOUT = {"commitlog_file_size": 262144, "cq_file_size": 1000}
INDEX_GEOMETRY = {"index_slot_num": 64, "index_num": 400}
# Files of the corpus the broker did not write (hand-written, see the corpus READMEs) or that
# the writer adds and the corpus lacks.
HAND_WRITTEN = ("consumerOffset.json", "consumerOffset.json.bak", "delayOffset.json")
WRITER_ONLY = {"config/topics.json", "config/subscriptionGroup.json"}


def records(store: Path) -> Iterator[MessageRecord]:
    """Every message of every commitlog file, in log order."""
    for path in sorted((store / "commitlog").iterdir()):
        data = path.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            magic = struct.unpack_from(">i", data, pos + 4)[0]
            if magic == BLANK_MAGIC_CODE or struct.unpack_from(">i", data, pos)[0] == 0:
                break
            record = decode_message(data, pos, int(path.name))
            yield record
            pos += record.store_size


def spec_of(record: MessageRecord, prop_crc: bool, dispatch: bool = True) -> MessageSpec:
    raw = record.properties_raw
    if prop_crc:
        raw = raw[:-CRC32_RESERVED_LEN]  # the writer computes the tail again
    return MessageSpec(
        topic=record.topic,
        body=record.body or b"",
        queue_id=record.queue_id,
        properties=raw,
        sys_flag=record.sys_flag,
        flag=record.flag,
        born_timestamp=record.born_timestamp,
        store_timestamp=record.store_timestamp,
        born_host=record.born_host,
        store_host=record.store_host,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
        dispatch=dispatch,
    )


def files_of(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}


def rebuild(
    store: Path, out: Path, profile: Profile, *, prop_crc: bool = False
) -> tuple[Path, list[MessageRecord]]:
    """Write ``out`` from the records of ``store``; returns it and the records."""
    recs = list(records(store))
    names = sorted(p.name for p in (store / "index").iterdir())
    checkpoint = decode_checkpoint((store / "checkpoint").read_bytes())
    crashed = (store / "abort").exists()
    # The reput stopped after the last message a consume queue or the index holds.
    dispatched_end = max_dispatched(store)
    layout = StoreLayout(
        profile=profile, append_prop_crc=prop_crc, **CORPUS_LAYOUT, **INDEX_GEOMETRY
    )
    abort = (store / "abort").read_bytes() if crashed else b""
    with StoreWriter(
        out,
        layout,
        index_namer=lambda _ts, seq: names[seq],
        crash=crashed,
        flush_lag_ms=recs[-1].store_timestamp - checkpoint.physic_msg_timestamp,
        pid=int(abort or b"0"),
    ) as writer:
        for record in recs:
            result = writer.put(
                spec_of(record, prop_crc, record.physical_offset_field <= dispatched_end)
            )
            assert (result.physical_offset, result.queue_offset) == (
                record.physical_offset_field,
                record.queue_offset,
            )
        config = store / "config"
        offsets = parse_consumer_offsets(fastjson.loads((config / HAND_WRITTEN[0]).read_bytes()))
        previous = parse_consumer_offsets(fastjson.loads((config / HAND_WRITTEN[1]).read_bytes()))
        writer.set_consumer_offsets(offsets.offset_table, previous.offset_table)
        delays = parse_delay_offsets(fastjson.loads((config / HAND_WRITTEN[2]).read_bytes()))
        writer.set_delay_offsets(delays.offset_table)
    return out, recs


def max_dispatched(store: Path) -> int:
    """The largest physical offset in any consume queue unit."""
    best = -1
    for path in (store / "consumequeue").rglob("0000*"):
        data = path.read_bytes()
        for pos in range(0, len(data), 20):
            phy, size = struct.unpack_from(">qi", data, pos)
            if size <= 0:
                break
            if size != 0x7FFFFFFF:
                best = max(best, phy)
    return best


def assert_same_store(original: Path, rebuilt: Path, *, fastjson_config: bool) -> None:
    """Every file of the original is reproduced byte for byte; config files the corpus
    hand-wrote without the 5.x dataVersion are compared by content instead."""
    want, got = files_of(original), files_of(rebuilt)
    assert set(got) - set(want) == WRITER_ONLY
    assert set(want) == set(got) - WRITER_ONLY
    for name, path in want.items():
        if name.startswith("config/") and not fastjson_config:
            continue
        assert path.read_bytes() == got[name].read_bytes(), name
    if not fastjson_config:
        for name in ("consumerOffset.json", "consumerOffset.json.bak"):
            a = parse_consumer_offsets(fastjson.loads(want[f"config/{name}"].read_bytes()))
            b = parse_consumer_offsets(fastjson.loads(got[f"config/{name}"].read_bytes()))
            assert a.offset_table == b.offset_table
        for name in ("delayOffset.json", "delayOffset.json.bak"):
            c = parse_delay_offsets(fastjson.loads(want[f"config/{name}"].read_bytes()))
            d = parse_delay_offsets(fastjson.loads(got[f"config/{name}"].read_bytes()))
            assert c.offset_table == d.offset_table


@pytest.mark.parametrize("scenario", ["clean", "single_message", "crash"])
def test_round_trip_4_9(conformance_dir: Path, tmp_path: Path, scenario: str) -> None:
    store = conformance_dir / "stores" / scenario
    rebuilt, recs = rebuild(store, tmp_path / scenario, Profile.V4_9)
    assert recs
    assert_same_store(store, rebuilt, fastjson_config=True)


@pytest.mark.parametrize(
    ("scenario", "prop_crc"), [("clean5", False), ("clean5_propcrc", True), ("crash5", False)]
)
def test_round_trip_5_3(
    conformance5_dir: Path, tmp_path: Path, scenario: str, prop_crc: bool
) -> None:
    store = conformance5_dir / "stores" / scenario
    rebuilt, recs = rebuild(store, tmp_path / scenario, Profile.V5_3, prop_crc=prop_crc)
    assert any(r.version == "v2" for r in recs)
    assert_same_store(store, rebuilt, fastjson_config=False)


def test_checkpoint_semantics_match_the_corpus(conformance_dir: Path, tmp_path: Path) -> None:
    """logicsMsgTimestamp and indexMsgTimestamp are derived, not copied: they equal the values
    the expected JSON recorded from the real checkpoint."""
    from tests.corpus import expected

    store = conformance_dir / "stores" / "clean"
    rebuilt, _ = rebuild(store, tmp_path / "clean", Profile.V4_9)
    before = expected(conformance_dir, "clean")["before"]["checkpoint"]
    cp = decode_checkpoint((rebuilt / "checkpoint").read_bytes())
    assert cp.logics_msg_timestamp == before["logicsMsgTimestamp"]
    assert cp.index_msg_timestamp == before["indexMsgTimestamp"]
    assert cp.physic_msg_timestamp == before["physicMsgTimestamp"]
