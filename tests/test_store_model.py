"""The read-only store model: discovery, file-size inference, offset mapping, layout problems."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmqinspect.errors import StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import encode
from rmqinspect.format.host import HostAddress
from rmqinspect.format.profile import Profile
from rmqinspect.format.scan import CheckedRun, Skipped, WalkPolicy
from rmqinspect.store.layout import rocksdb_queue_dir
from rmqinspect.store.model import Store, StoreOptions

HOST = HostAddress(bytes([127, 0, 0, 1]), 10911)
FILE_SIZE = 4096


def _record(offset: int, queue_offset: int, props: bytes = b"TAGS\x01A") -> bytes:
    return encode.encode_message(
        topic="T",
        queue_id=0,
        flag=0,
        queue_offset=queue_offset,
        physical_offset=offset,
        sys_flag=0,
        born_timestamp=1,
        born_host=HOST,
        store_timestamp=2,
        store_host=HOST,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=b"x" * 100,
        properties=props,
    )


def _write_commitlog(root: Path, files: int = 2) -> list[int]:
    """Files of FILE_SIZE bytes filled with records, each ending in a BLANK; returns offsets."""
    (root / "commitlog").mkdir(parents=True)
    offsets = []
    qo = 0
    for i in range(files):
        start = i * FILE_SIZE
        data = bytearray()
        while True:
            rec = _record(start + len(data), qo)
            if len(data) + len(rec) + 8 > FILE_SIZE:
                data += encode.encode_blank(FILE_SIZE - len(data))
                break
            offsets.append(start + len(data))
            data += rec
            qo += 1
        (root / "commitlog" / f"{start:020d}").write_bytes(bytes(data).ljust(FILE_SIZE, b"\0"))
    return offsets


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a RocketMQ store"):
        Store.open(tmp_path)
    with pytest.raises(StoreError, match="no such directory"):
        Store.open(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        Store.open(tmp_path / "file")


def _scanned(store: Store, start: int | None = None) -> list[int]:
    """Physical offsets of every record :meth:`Store.scan` accepts."""
    return [
        f.start + p
        for f, ev in store.scan(start, policy=WalkPolicy.FORENSIC)
        if isinstance(ev, CheckedRun)
        for p in ev.columns.positions.tolist()
    ]


def test_file_size_inferred_and_offsets_mapped(tmp_path: Path) -> None:
    offsets = _write_commitlog(tmp_path, files=3)
    with Store.open(tmp_path) as store:
        assert store.commitlog.file_size == FILE_SIZE
        assert [f.start for f in store.commitlog.files] == [0, FILE_SIZE, 2 * FILE_SIZE]
        assert store.commitlog.find(FILE_SIZE + 5) == store.commitlog.files[1]
        assert store.commitlog.find(3 * FILE_SIZE) is None
        assert store.commitlog.min_offset == 0
        assert _scanned(store) == offsets
        assert store.read_message(offsets[-1]).queue_offset == len(offsets) - 1
        # scanning from a later record boundary starts there
        assert _scanned(store, offsets[5]) == offsets[5:]
        assert store.problems == []
        assert store.profile.profile is Profile.V4_9


def test_layout_problems_are_reported_not_raised(tmp_path: Path) -> None:
    _write_commitlog(tmp_path, files=3)
    cdir = tmp_path / "commitlog"
    os.remove(cdir / f"{FILE_SIZE:020d}")  # a gap
    (cdir / "notanumber").write_bytes(b"")
    with open(cdir / f"{2 * FILE_SIZE:020d}", "r+b") as fh:
        fh.truncate(100)
    with Store.open(tmp_path, StoreOptions(commitlog_file_size=FILE_SIZE)) as store:
        kinds = sorted(p.kind for p in store.problems)
        assert kinds == ["bad_name", "gap", "wrong_size"]
        assert all(p.broker_fails_to_load for p in store.problems if p.kind != "gap")


def test_read_message_errors_name_file_and_offset(tmp_path: Path) -> None:
    _write_commitlog(tmp_path, files=1)
    with Store.open(tmp_path) as store:
        with pytest.raises(StoreError) as err:
            store.read_message(3)
        assert err.value.path is not None and err.value.path.endswith("00000000000000000000")
        assert err.value.offset is not None
        with pytest.raises(StoreError, match="outside the commitlog"):
            store.read_message(10 * FILE_SIZE)


def test_each_walk_policy_at_a_broken_record(tmp_path: Path) -> None:
    offsets = _write_commitlog(tmp_path, files=2)
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[offsets[2] + 4] ^= 0xFF  # break the third record's magic
    path.write_bytes(bytes(data))
    with Store.open(tmp_path) as store:
        # The forensic walk steps over the broken record, says so, and lists every other one.
        events = list(store.scan(policy=WalkPolicy.FORENSIC))
        (skipped,) = [ev for f, ev in events if isinstance(ev, Skipped)]
        assert (skipped.start, skipped.end) == (offsets[2], offsets[3])  # first file: at 0
        assert skipped.result.reason is cl.CheckReason.BAD_MAGIC
        assert _scanned(store) == offsets[:2] + offsets[3:]
        assert offsets[-1] >= FILE_SIZE  # the walk went on into the second file
        # The broker's walk ends at the broken record, as recovery does: nothing after it.
        seen: list[int] = []
        broker = list(store.scan(policy=WalkPolicy.BROKER))
        for f, ev in broker:
            assert isinstance(ev, CheckedRun)
            seen += (ev.columns.positions + f.start).tolist()
        last = broker[-1][1]
        assert isinstance(last, CheckedRun) and last.failed and last.end == offsets[2]
        assert seen == offsets[:2]


def test_consume_queue_discovery(tmp_path: Path) -> None:
    _write_commitlog(tmp_path, files=1)
    for name in ("0", "1", "x"):
        (tmp_path / "consumequeue" / "T" / name).mkdir(parents=True)
    (tmp_path / "consumequeue" / "T" / "0" / f"{0:020d}").write_bytes(bytes(1000))
    (tmp_path / "consumequeue" / "CURRENT").write_text("rocksdb")
    with Store.open(tmp_path) as store:
        assert [str(q) for q in store.queue_dirs] == ["T/0", "T/1"]
        assert store.cq_file_size == 1000
        assert len(store.consume_queue_files("T", 0).files) == 1
        assert store.consume_queue_files("T", 1).files == []
        # Read, its restart included: no longer a layout rmqinspect does not read.
        assert store.unsupported == []
        assert rocksdb_queue_dir(tmp_path) == tmp_path / "consumequeue"


def test_profile_detection_on_corpus(conformance_dir: Path, conformance5_dir: Path) -> None:
    with Store.open(conformance_dir / "stores" / "clean") as store:
        assert store.profile.profile is Profile.V4_9
    with Store.open(conformance5_dir / "stores" / "clean5") as store:
        assert store.profile.profile is Profile.V5_3
        assert any("0x02" in r for r in store.profile.reasons)
    with Store.open(
        conformance5_dir / "stores" / "clean5", StoreOptions(profile=Profile.V5_1)
    ) as store:
        assert store.profile.profile is Profile.V5_1 and store.profile.explicit


def test_abort_and_lock_markers(conformance_dir: Path, conformance5_dir: Path) -> None:
    with Store.open(conformance_dir / "stores" / "crash") as store:
        marker = store.abort_marker()
        assert marker is not None and marker.pid is None and marker.size == 0
        lock = store.lock_marker()
        assert lock is not None and lock.as_written
    with Store.open(conformance5_dir / "stores" / "crash5") as store:
        marker = store.abort_marker()
        assert marker is not None and marker.pid is not None and marker.pid > 0
    with Store.open(conformance_dir / "stores" / "clean") as store:
        assert store.abort_marker() is None


@pytest.mark.parametrize(
    "command",
    ["messages {store} -F jsonl", "messages {store} -F table", "info {store} -F table"],
)
def test_cli_stops_quietly_when_the_reader_goes_away(conformance_dir: Path, command: str) -> None:
    # Exit 0 whatever the format: 1 means findings, and a table into ``| head`` found nothing.
    import subprocess
    import sys

    store = conformance_dir / "stores" / "clean"
    args = command.format(store=store)
    cmd = f"{sys.executable} -m rmqinspect {args} | head -c 100 > /dev/null"
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_each_queue_directory_is_listed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inferring the queue file size lists every queue directory; the queues then reuse those
    listings, so a store of many queues costs one listing per queue, not two."""
    from rmqinspect.analysis.queues import all_queue_bounds
    from rmqinspect.store import files, model

    _write_commitlog(tmp_path, files=1)
    queues = 30
    for i in range(queues):
        directory = tmp_path / "consumequeue" / f"T{i}" / "0"
        directory.mkdir(parents=True)
        (directory / f"{0:020d}").write_bytes(bytes(1000))
    listed: list[Path] = []
    original = files.list_directory

    def counted(directory: Path, what: str) -> files.Listing:
        listed.append(directory)
        return original(directory, what)

    monkeypatch.setattr(files, "list_directory", counted)
    monkeypatch.setattr(model, "list_directory", counted)
    with Store.open(tmp_path) as store:
        bounds = all_queue_bounds(store)
    assert len(bounds) == queues and store.cq_file_size == 1000
    queue_listings = [d for d in listed if "consumequeue" in d.parts]
    assert len(queue_listings) == queues, sorted(map(str, queue_listings))
