"""Bodies compressed by the producer: decoded by every command that shows or exports bodies,
kept as stored on request, and a finding (never a crash) when they do not decompress.

The stores are ``synth`` workloads whose bodies reach ``compressMsgBodyOverHowmuch``, written
as each producer line writes them: 4.9 (zlib, sysFlag bit 0 only) and 5.3 with each codec.
Bodies are checked against the reference libraries directly, not through rmqinspect."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lz4.frame
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from rmqinspect.export import Engine, ExportOptions, Table, export_store
from rmqinspect.format import commitlog as cl
from rmqinspect.format.batch import consumer_bodies
from rmqinspect.format.compression import (
    COMPRESS_OVER,
    Codec,
    DecompressError,
    compress,
    compression_flags,
    consumer_body,
    decompress,
)
from rmqinspect.format.profile import Profile
from rmqinspect.store.model import StoreOptions
from rmqinspect.synth import damage
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import StoreLayout
from tests.cli_helpers import run
from tests.export_helpers import read_table
from tests.render_helpers import decode_body

SLOTS, ENTRIES = 64, 2000
OPTS = ["--index-slots", str(SLOTS), "--index-entries", str(ENTRIES)]
STORE_OPTIONS = StoreOptions(index_slot_num=SLOTS, index_num=ENTRIES)
TEXT = b"rocketmq"  # a word of the workload's ASCII bodies


@dataclass(frozen=True)
class Case:
    profile: Profile
    codec: Codec

    @property
    def type_bits(self) -> int:
        return compression_flags(self.codec, self.profile is not Profile.V4_9) & ~1


CASES = [
    Case(Profile.V4_9, Codec.ZLIB),
    Case(Profile.V5_3, Codec.ZLIB),
    Case(Profile.V5_3, Codec.ZSTD),
    Case(Profile.V5_3, Codec.LZ4),
]


def write_store(root: Path, case: Case) -> Path:
    layout = StoreLayout(
        profile=case.profile,
        commitlog_file_size=128 * 1024,
        index_slot_num=SLOTS,
        index_num=ENTRIES,
    )
    # Pools of 2048, 4096 and 6144 bytes: most bodies compressed, a few (and the empty ones)
    # stored as sent, in the same runs.
    config = WorkloadConfig(messages=160, body_size=4096, seed=5, compress_type=case.codec)
    write_workload(root, config, layout)
    return root


def independent(codec: Codec, data: bytes) -> bytes:
    """The reference libraries' decompression, as RocketMQ's compressors read their output."""
    if codec is Codec.ZLIB:
        return zlib.decompress(data)
    if codec is Codec.ZSTD:
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return bytes(lz4.frame.decompress(data))


def jsonl(*args: str | Path, code: int = 0) -> list[Any]:
    result = run(*args, "--format", "jsonl", *OPTS)
    assert result.exit_code == code, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line]


@dataclass(frozen=True)
class Listed:
    """Each message of a store by physical offset: its ``messages`` object (bodies decoded)
    and its stored body bytes (``--body raw``)."""

    docs: dict[int, dict[str, Any]]
    stored: dict[int, bytes]

    def body(self, offset: int) -> bytes:
        d = self.docs[offset]
        out = decode_body(d["body_encoding"], d["body"])
        assert out is not None
        return out


def listed(store: Path) -> Listed:
    docs = {d["physical_offset"]: d for d in jsonl("messages", store) if "skipped" not in d}
    raw = jsonl("messages", store, "--body", "raw")
    stored = {}
    for d in raw:
        body = decode_body(d["body_encoding"], d["body"])
        assert body is not None
        stored[d["physical_offset"]] = body
    return Listed(docs, stored)


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c.profile}-{c.codec}")
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    case: Case = request.param
    root = write_store(tmp_path_factory.mktemp("compressed") / "store", case)
    return case, root, listed(root)


# --- messages --------------------------------------------------------------------------------


def test_messages_show_compressed_bodies_as_their_consumer_gets_them(store: Any) -> None:
    case, _, seen = store
    compressed = [o for o, d in seen.docs.items() if d["compression"] is not None]
    plain = [o for o, d in seen.docs.items() if d["compression"] is None]
    assert len(compressed) > len(seen.docs) // 2 and plain  # a mix in the same runs
    for o in compressed:
        d = seen.docs[o]
        assert d["compression"] == case.codec.value
        assert d["sys_flag"] & cl.COMPRESSION_TYPE_MASK == case.type_bits
        assert (d["body_form"], d["body_error"], d["body_crc_ok"]) == ("decompressed", None, True)
        assert d["body_length"] == len(seen.stored[o])  # BODYLENGTH: the stored bytes
        body = seen.body(o)
        assert body == independent(case.codec, seen.stored[o])
        assert len(body) >= COMPRESS_OVER
    for o in plain:
        assert "body_form" not in seen.docs[o] and "body_error" not in seen.docs[o]
        assert seen.body(o) == seen.stored[o] and len(seen.stored[o]) < COMPRESS_OVER
    assert any(TEXT in seen.body(o) for o in compressed)


def test_raw_shows_the_stored_bytes(store: Any) -> None:
    _, root, seen = store
    raw = jsonl("messages", root, "--body", "raw", "--limit", "40")
    for d in raw:
        if d["compression"] is None:  # stored as sent: the same object as --body text
            assert d == seen.docs[d["physical_offset"]]
        else:
            assert (d["body_form"], d["body_error"]) == ("stored", None)
            assert d["body_encoding"] == "base64"
    none = jsonl("messages", root, "--body", "none", "--limit", "40")
    assert {d["body_form"] for d in none if d["compression"] is not None} == {None}
    assert all(d["body"] is None for d in none)


def test_the_detail_table_shows_the_decompressed_body(store: Any) -> None:
    case, root, seen = store
    offset = next(o for o in seen.docs if seen.docs[o]["compression"] and TEXT in seen.body(o))
    result = run("lookup", root, "--phy-offset", str(offset), "--format", "table", *OPTS)
    assert result.exit_code == 0, result.stderr
    assert "decompressed" in result.stdout and TEXT.decode() in result.stdout
    assert f"{case.codec.value} (shown decompressed)" in result.stdout


# --- lookup ----------------------------------------------------------------------------------


def test_lookup_answers_with_the_decompressed_body(store: Any) -> None:
    _, root, seen = store
    offset, doc = next(
        (o, d)
        for o, d in seen.docs.items()
        if d["compression"] and d["keys"] and d["queue_offset"] >= 0 and d["topic"] == "TopicA"
    )
    for args in (("--msg-id", doc["msg_id"]), ("--key", doc["keys"][-1], "--topic", "TopicA")):
        result = run("lookup", root, *args, "--format", "json", *OPTS)
        assert result.exit_code == 0, result.stderr
        hits = [m for m in json.loads(result.stdout)["messages"] if m["physical_offset"] == offset]
        assert len(hits) == 1
        assert decode_body(hits[0]["body_encoding"], hits[0]["body"]) == seen.body(offset)
        assert hits[0]["body_form"] == "decompressed"


# --- salvage ---------------------------------------------------------------------------------


def test_salvage_writes_decompressed_bodies_and_keeps_the_stored_ones(
    store: Any, tmp_path: Path
) -> None:
    _, root, seen = store
    out = tmp_path / "found"
    result = run("salvage", root, "--out", out, "--format", "json", *OPTS)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["intact"] == report["messages"] == len(seen.docs)
    table = pq.read_table(out / "messages.parquet").to_pylist()
    assert len(table) == len(seen.docs)
    for row in table:
        o = row["physical_offset"]
        compressed = seen.docs[o]["compression"] is not None
        assert row["body"] == seen.body(o)
        assert row["body_stored"] == (seen.stored[o] if compressed else None)
        assert row["body_error"] is None and row["intact"]
    lines = [json.loads(x) for x in (out / "messages.jsonl").read_text().splitlines()]
    for d in lines:
        assert decode_body(d["body_encoding"], d["body"]) == seen.body(d["physical_offset"])


# --- export ----------------------------------------------------------------------------------


def check_exported_bodies(out: Path, seen: Listed) -> None:
    rows = read_table(out, Table.MESSAGES).to_pylist()
    assert len(rows) == len(seen.docs)
    for row in rows:
        o = row["physical_offset"]
        compressed = seen.docs[o]["compression"] is not None
        assert row["body"] == seen.body(o)
        assert row["body_stored"] == (seen.stored[o] if compressed else None)
        assert row["body_error"] is None
        assert row["body_length"] == len(seen.stored[o])


def test_the_arrow_export_holds_decompressed_and_stored_bodies(store: Any, tmp_path: Path) -> None:
    _, root, seen = store
    options = ExportOptions(engine=Engine.ARROW, jobs=2, store=STORE_OPTIONS)
    export_store(root, tmp_path / "out", options)
    check_exported_bodies(tmp_path / "out", seen)


# --- a body that does not decompress ---------------------------------------------------------


def test_a_body_that_does_not_decompress_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    root = write_store(tmp_path / "store", Case(Profile.V5_3, Codec.ZSTD))
    garbled = damage.garble_compressed_body(root)
    offset = int(garbled.details["message_offset"])
    docs = {d["physical_offset"]: d for d in jsonl("messages", root)}
    bad = docs[offset]
    assert bad["body_form"] == "stored" and bad["body_error"].startswith("zstd: ")
    assert bad["body_crc_ok"] is True  # BODYCRC is over the stored bytes
    stored = decode_body(bad["body_encoding"], bad["body"])
    assert stored is not None and stored[:4] == bytes(4)
    assert all(d.get("body_error") is None for o, d in docs.items() if o != offset)

    found = jsonl("verify", root, code=1)
    findings = [f for f in found if "check_id" in f]
    assert [(f["check_id"], f["physical_offset"]) for f in findings] == [
        ("commitlog.body_compression", offset)
    ]

    out = tmp_path / "found"
    assert run("salvage", root, "--out", out, *OPTS).exit_code == 0
    lines = [json.loads(x) for x in (out / "messages.jsonl").read_text().splitlines()]
    assert [(d["physical_offset"], d["failed"]) for d in lines if not d["intact"]] == [
        (offset, ["commitlog.body_compression"])
    ]
    rows = {r["physical_offset"]: r for r in pq.read_table(out / "messages.parquet").to_pylist()}
    assert rows[offset]["body"] == rows[offset]["body_stored"] == stored
    assert rows[offset]["body_error"] == bad["body_error"]

    export_store(root, tmp_path / "out", ExportOptions(engine=Engine.ARROW, store=STORE_OPTIONS))
    exported = {
        r["physical_offset"]: r for r in read_table(tmp_path / "out", Table.MESSAGES).to_pylist()
    }
    assert exported[offset]["body_error"] == bad["body_error"]
    checks = read_table(tmp_path / "out", Table.FINDINGS).column("check_id").to_pylist()
    assert checks == ["commitlog.body_compression"]


def test_the_damage_helper_refuses_a_store_without_compressed_bodies(tmp_path: Path) -> None:
    root = tmp_path / "store"
    layout = StoreLayout(index_slot_num=SLOTS, index_num=ENTRIES)
    write_workload(root, WorkloadConfig(messages=20, body_size=100), layout)
    with pytest.raises(ValueError, match="no compressed message"):
        damage.garble_compressed_body(root)


# --- the codecs themselves -------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Codec))
def test_each_codec_round_trips_and_reads_frame_after_frame(codec: Codec) -> None:
    body = b"rocketmq store commitlog " * 400
    flags = compression_flags(codec, five_x=True)
    packed = compress(body, codec)
    assert decompress(packed, flags) == body == independent(codec, packed)
    if codec is not Codec.ZLIB:  # ZstdInputStream and LZ4FrameInputStream read on
        assert decompress(packed + packed, flags) == body + body


def test_sysflag_bits_follow_each_producer_line() -> None:
    assert compression_flags(Codec.ZLIB, five_x=False) == cl.COMPRESSED_FLAG
    assert compression_flags(Codec.LZ4, five_x=True) == 0x101
    assert compression_flags(Codec.ZSTD, five_x=True) == 0x201
    assert compression_flags(Codec.ZLIB, five_x=True) == 0x301
    with pytest.raises(ValueError, match="zlib only"):
        compression_flags(Codec.ZSTD, five_x=False)
    # Type 0 is zlib ("compatible for older versions"), 4..7 no codec at all.
    assert decompress(compress(b"x" * 10, Codec.ZLIB), cl.COMPRESSED_FLAG) == b"x" * 10
    assert "no codec" in str(consumer_body(b"abc", 0x501).error)


@pytest.mark.parametrize("codec", list(Codec))
def test_a_bomb_stops_at_the_limit_and_a_cut_stream_is_an_error(codec: Codec) -> None:
    flags = compression_flags(codec, five_x=True)
    bomb = compress(bytes(4 << 20), codec)
    with pytest.raises(DecompressError, match="more than 65536 bytes"):
        decompress(bomb, flags, limit=65536)
    packed = compress(b"rocketmq " * 1000, codec)
    with pytest.raises(DecompressError, match="ends early"):
        decompress(packed[: len(packed) // 2], flags)


@given(st.binary(max_size=200), st.sampled_from([0x1, 0x101, 0x201, 0x301, 0x401, 0x701]))
def test_consumer_body_never_raises(data: bytes, flags: int) -> None:
    got = consumer_body(data, flags)
    assert got.decompressed != (got.error is not None)
    assert got.body == data or got.decompressed


def test_batches_hold_at_most_the_budget_of_decompressed_bodies() -> None:
    texts = [b"a" * 3000, b"plain", b"b" * 3000, b"c" * 3000, b"", b"garbage"]
    flags = [0x301, 0, 0x301, 0x301, 0, 0x301]
    stored = [
        compress(t, Codec.ZLIB) if f and t != b"garbage" else t
        for t, f in zip(texts, flags, strict=True)
    ]
    slices = list(consumer_bodies(pa.array(stored, pa.binary()), np.array(flags), budget=5000))
    assert [(s.start, s.stop) for s in slices] == [(0, 2), (2, 3), (3, 6)]
    assert pa.concat_arrays([s.body for s in slices]).to_pylist() == texts
    assert pa.concat_arrays([s.body_stored for s in slices]).to_pylist() == [
        stored[i] if flags[i] else None for i in range(len(texts))
    ]
    errors = pa.concat_arrays([s.body_error for s in slices]).to_pylist()
    assert [e is not None for e in errors] == [False] * 5 + [True]
    (whole,) = consumer_bodies(pa.array([b"x", b"y"]), np.zeros(2, np.int64))
    assert whole.body.to_pylist() == [b"x", b"y"] and whole.body_stored.null_count == 2
