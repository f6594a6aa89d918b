"""Damage helpers: each changes exactly what its description says, and the broker's record check
sees the damage it models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmqinspect.format.commitlog import CheckOptions, CheckReason, check_message
from rmqinspect.format.consumequeue import units_array, valid_mask
from rmqinspect.format.host import HostAddress
from rmqinspect.format.profile import Profile
from rmqinspect.synth import damage
from rmqinspect.synth.writer import MessageSpec, PutResult, StoreLayout, StoreWriter

FILE = 8192
LAYOUT = StoreLayout(
    profile=Profile.V4_9, commitlog_file_size=FILE, cq_file_size=100, index_slot_num=8, index_num=32
)
CHECK = CheckOptions(profile=Profile.V4_9)


def make_store(root: Path, count: int = 40) -> list[PutResult]:
    with StoreWriter(root, LAYOUT) as writer:
        return [
            writer.put(
                MessageSpec(
                    topic="TopicA" if i % 3 else "TopicB",
                    queue_id=i % 2,
                    body=bytes([i]) * (150 + i),
                    keys=f"k{i}",
                    born_host=HostAddress(bytes(16), 1)
                    if i % 5 == 0
                    else HostAddress(b"\1\2\3\4", 2),
                    store_timestamp=1000 + i,
                )
            )
            for i in range(count)
        ]


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def assert_changes_match(
    before: dict[str, bytes], after: dict[str, bytes], d: damage.Damage
) -> None:
    """Every changed byte lies in a reported range; created and removed files are reported."""
    assert set(after) - set(before) == set(d.created)
    assert set(before) - set(after) <= set(d.removed)
    for name in set(before) & set(after):
        old, new = before[name], after[name]
        changed = [i for i in range(max(len(old), len(new))) if old[i : i + 1] != new[i : i + 1]]
        ranges = [(r.start, r.end) for r in d.ranges if r.path == name]
        assert all(any(s <= i < e for s, e in ranges) for i in changed), name


def check_at(root: Path, offset: int) -> tuple[bool, CheckReason, int]:
    start = offset - offset % FILE
    data = (root / "commitlog" / f"{start:020d}").read_bytes()
    result = check_message(data, offset - start, start, CHECK)
    return result.is_message, result.reason, result.size


def test_torn_tail(tmp_path: Path) -> None:
    results = make_store(tmp_path)
    before = snapshot(tmp_path)
    d = damage.torn_tail(tmp_path)
    assert_changes_match(before, snapshot(tmp_path), d)
    last = results[-1]
    assert d.details["message_offset"] == last.physical_offset
    (r,) = d.ranges
    assert r.end - r.start == last.size - last.size // 2
    ok, reason, _ = check_at(tmp_path, last.physical_offset)
    assert not ok and reason is CheckReason.BODY_CRC_MISMATCH
    assert check_at(tmp_path, results[-2].physical_offset)[0]


def test_flip_body_byte_default_and_by_index(tmp_path: Path) -> None:
    results = make_store(tmp_path)
    before = snapshot(tmp_path)
    d = damage.flip_body_byte(tmp_path)
    assert_changes_match(before, snapshot(tmp_path), d)
    offset = int(d.details["message_offset"])
    last_file = [
        r for r in results if r.physical_offset >= results[-1].physical_offset // FILE * FILE
    ]
    assert offset == last_file[len(last_file) // 2].physical_offset
    assert check_at(tmp_path, offset)[1] is CheckReason.BODY_CRC_MISMATCH
    assert d.details["old"] == int(d.details["new"]) ^ 0xFF

    d2 = damage.flip_body_byte(tmp_path, message_index=0, byte_in_body=10)
    assert d2.details["message_offset"] == 0
    assert check_at(tmp_path, 0)[1] is CheckReason.BODY_CRC_MISMATCH
    # A message with an IPv6 born host: the body starts 12 bytes later.
    d3 = damage.flip_body_byte(tmp_path, offset=results[5].physical_offset)
    (r,) = d3.ranges
    assert r.start == results[5].physical_offset % FILE + 88 + 12
    with pytest.raises(ValueError, match="no message starts"):
        damage.flip_body_byte(tmp_path, offset=1)
    with pytest.raises(ValueError, match="body"):
        damage.flip_body_byte(tmp_path, message_index=1, byte_in_body=10_000)


def test_zero_region_across_files(tmp_path: Path) -> None:
    make_store(tmp_path)
    before = snapshot(tmp_path)
    d = damage.zero_region(tmp_path, FILE - 100, FILE + 50)
    after = snapshot(tmp_path)
    assert_changes_match(before, after, d)
    assert [(r.path, r.start, r.end) for r in d.ranges] == [
        (f"commitlog/{0:020d}", FILE - 100, FILE),
        (f"commitlog/{FILE:020d}", 0, 50),
    ]
    assert not any(after[f"commitlog/{FILE:020d}"][:50])
    with pytest.raises(ValueError, match="outside"):
        damage.zero_region(tmp_path, 10 * FILE, 10 * FILE + 1)
    with pytest.raises(ValueError, match="empty"):
        damage.zero_region(tmp_path, 5, 5)


def test_cq_ahead_of_commitlog_rolls_into_a_new_file(tmp_path: Path) -> None:
    results = make_store(tmp_path)
    end = results[-1].physical_offset + results[-1].size
    before = snapshot(tmp_path)
    d = damage.cq_ahead_of_commitlog(tmp_path, "TopicA", 1, count=6)
    assert_changes_match(before, snapshot(tmp_path), d)
    assert d.details["commitlog_end"] == end
    queue = tmp_path / "consumequeue" / "TopicA" / "1"
    units = np.concatenate([units_array(path.read_bytes()) for path in sorted(queue.iterdir())])
    valid = units[valid_mask(units)]
    assert valid["phy_offset"][-6:].tolist() == [end + i * int(valid["size"][-7]) for i in range(6)]
    assert d.created and all(p.startswith("consumequeue/TopicA/1/") for p in d.created)
    assert all((tmp_path / p).stat().st_size == 100 for p in d.created)
    with pytest.raises(ValueError, match="no consume queue"):
        damage.cq_ahead_of_commitlog(tmp_path, "Nope", 0)


def test_remove_cq_dir(tmp_path: Path) -> None:
    make_store(tmp_path)
    before = snapshot(tmp_path)
    d = damage.remove_cq_dir(tmp_path, "TopicB", 0)
    after = snapshot(tmp_path)
    assert_changes_match(before, after, d)
    assert not (tmp_path / "consumequeue" / "TopicB" / "0").exists()
    assert (tmp_path / "consumequeue" / "TopicB" / "1").is_dir()
    assert {name for name in before if name.startswith("consumequeue/TopicB/0/")} <= set(d.removed)
    damage.remove_cq_dir(tmp_path, "TopicB", 1)
    assert not (tmp_path / "consumequeue" / "TopicB").exists()
    with pytest.raises(ValueError):
        damage.remove_cq_dir(tmp_path, "TopicB", 1)


def test_stale_copy_passes_the_record_check_but_lies_about_its_offset(tmp_path: Path) -> None:
    results = make_store(tmp_path)
    end = results[-1].physical_offset + results[-1].size
    before = snapshot(tmp_path)
    d = damage.stale_bytes_past_write_position(tmp_path, count=2)
    assert_changes_match(before, snapshot(tmp_path), d)
    assert d.details == {"valid_end": end, "records": 2}
    start = end - end % FILE
    data = (tmp_path / "commitlog" / f"{start:020d}").read_bytes()
    stale = check_message(data, end - start, start, CHECK)
    assert stale.is_message and stale.record is not None
    assert stale.record.physical_offset_field == 0 != stale.record.position


def test_stale_rewrite_leaves_garbage_then_an_intact_old_record(tmp_path: Path) -> None:
    results = make_store(tmp_path)
    before = snapshot(tmp_path)
    d = damage.stale_bytes_past_write_position(tmp_path, mode="rewrite")
    assert_changes_match(before, snapshot(tmp_path), d)
    victim, last = results[-2], results[-1]
    new_end = int(d.details["valid_end"])
    ok, _, size = check_at(tmp_path, victim.physical_offset)
    assert ok and victim.physical_offset + size == new_end < last.physical_offset
    assert not check_at(tmp_path, new_end)[0]
    assert check_at(tmp_path, last.physical_offset)[0]
    with pytest.raises(ValueError, match="unknown"):
        damage.stale_bytes_past_write_position(tmp_path, mode="sideways")


def test_set_abort(tmp_path: Path) -> None:
    make_store(tmp_path, 1)
    assert damage.set_abort(tmp_path, True, b"31337").created == ("abort",)
    assert (tmp_path / "abort").read_bytes() == b"31337"
    assert damage.set_abort(tmp_path, False).removed == ("abort",)
    assert not (tmp_path / "abort").exists()
    assert damage.set_abort(tmp_path, False).removed == ()


def test_helpers_need_messages(tmp_path: Path) -> None:
    StoreWriter(tmp_path / "empty", LAYOUT).close()
    with pytest.raises(ValueError, match="no commitlog file"):
        damage.torn_tail(tmp_path / "empty")
