"""The checkpoint file: decoding, size anomalies, the derived recovery timestamps, encoding."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.errors import DecodeError
from rmqinspect.format.checkpoint import (
    CHECKPOINT_FILE_SIZE,
    Checkpoint,
    decode_checkpoint,
    encode_checkpoint,
)
from rmqinspect.format.profile import Profile


def _raw(*fields: int, size: int = CHECKPOINT_FILE_SIZE) -> bytes:
    head = struct.pack(f">{len(fields)}q", *fields)
    return head + bytes(size - len(head))


def test_decode_five_fields() -> None:
    cp = decode_checkpoint(_raw(1, 2, 3, 4, 5))
    assert cp == Checkpoint(1, 2, 3, 4, 5, CHECKPOINT_FILE_SIZE, False)
    assert cp.size_anomaly is None


def test_decode_rejects_short_buffer() -> None:
    with pytest.raises(DecodeError) as err:
        decode_checkpoint(bytes(23))
    assert err.value.offset == 23
    with pytest.raises(DecodeError):
        decode_checkpoint(b"")


def test_decode_short_file_reads_missing_fields_as_zero() -> None:
    cp = decode_checkpoint(struct.pack(">qqqi", 7, 8, 9, -1))  # 28 bytes: half a long
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (7, 8, 9)
    assert cp.master_flushed_offset == struct.unpack(">q", b"\xff" * 4 + bytes(4))[0]
    assert cp.confirm_phy_offset == 0
    assert cp.size_anomaly is not None and "28 bytes" in cp.size_anomaly
    assert decode_checkpoint(_raw(1, 2, 3, size=24)).file_size == 24


def test_decode_odd_sizes_and_tail() -> None:
    assert "8192" in (decode_checkpoint(_raw(1, 2, 3, size=8192)).size_anomaly or "")
    assert decode_checkpoint(_raw(1, 2, 3, size=40)).size_anomaly is not None
    dirty = bytearray(_raw(1, 2, 3))
    dirty[4095] = 1
    cp = decode_checkpoint(dirty)
    assert cp.nonzero_tail and cp.size_anomaly is None
    assert not decode_checkpoint(memoryview(_raw(1, 2, 3))).nonzero_tail


def test_min_timestamp_margin_and_floor() -> None:
    cp = Checkpoint(10_000, 20_000, 5_000)
    assert cp.min_timestamp() == 7_000  # min(physic, logics) - 3 s
    assert cp.min_timestamp_index() == 5_000  # the index time gets no margin
    assert Checkpoint(30_000, 20_000, 99_000).min_timestamp_index() == 17_000
    assert Checkpoint(2_000, 20_000, 0).min_timestamp() == 0
    assert Checkpoint(0, 0, 0).min_timestamp_index() == 0
    assert Checkpoint(5_000, 5_000, -9).min_timestamp_index() == -9


def test_min_timestamp_wraps_like_java_long() -> None:
    # Long.MIN_VALUE - 3000 overflows to a large positive value in Java.
    cp = Checkpoint(-(2**63), 1, 0)
    assert cp.min_timestamp() == 2**63 - 3000


def test_encode_by_profile() -> None:
    cp = Checkpoint(1, 2, 3, 4, 5)
    old = encode_checkpoint(cp, Profile.V4_9)
    assert len(old) == CHECKPOINT_FILE_SIZE
    assert old == _raw(1, 2, 3)  # 4.9 writes three longs only
    for profile in (Profile.V5_1, Profile.V5_3):
        new = encode_checkpoint(cp, profile)
        assert new == _raw(1, 2, 3, 4, 5)
        assert decode_checkpoint(new) == cp


def _expected_files(root: Path) -> list[dict[str, Any]]:
    return [
        json.loads(path.read_text())
        for path in sorted((root / "expected").glob("*.json"))
        if path.name != "scenarios.json"
    ]


@pytest.mark.parametrize(("corpus", "profile"), [("4.9.8", Profile.V4_9), ("5.3.3", Profile.V5_3)])
def test_conformance_checkpoints(
    corpus: str, profile: Profile, conformance_dir: Path, conformance5_dir: Path
) -> None:
    root = conformance_dir if corpus == "4.9.8" else conformance5_dir
    checked = 0
    for expected in _expected_files(root):
        raw_json = expected["before"]["checkpoint"]
        raw = (root / expected["inputStore"] / "checkpoint").read_bytes()
        cp = decode_checkpoint(raw)
        assert cp.file_size == raw_json["fileSize"] == CHECKPOINT_FILE_SIZE
        assert cp.size_anomaly is None and not cp.nonzero_tail
        assert cp.physic_msg_timestamp == raw_json["physicMsgTimestamp"]
        assert cp.logics_msg_timestamp == raw_json["logicsMsgTimestamp"]
        assert cp.index_msg_timestamp == raw_json["indexMsgTimestamp"]
        assert cp.master_flushed_offset == raw_json.get("masterFlushedOffset", 0)
        assert cp.confirm_phy_offset == raw_json.get("confirmPhyOffset", 0)
        assert encode_checkpoint(cp, profile) == raw
        loaded = expected["afterLoad"]["checkpoint"]
        in_memory = Checkpoint(
            loaded["physicMsgTimestamp"],
            loaded["logicsMsgTimestamp"],
            loaded["indexMsgTimestamp"],
        )
        assert in_memory.min_timestamp() == loaded["minTimestamp"]
        assert in_memory.min_timestamp_index() == loaded["minTimestampIndex"]
        checked += 1
    assert checked == (7 if corpus == "4.9.8" else 4)
