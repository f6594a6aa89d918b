"""The loss search's walks of the commitlog (the kept files' unserved messages, the records past
the recovered end) drop each run's pages as soon as the run is judged: released one run behind,
two runs of 16 Ki records (~40 MB of 1 KiB messages) stayed resident at a time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from rmqinspect.analysis.recovery.lost import NO_QUEUE_UNIT, _Judges, _Listing, _Part, _Rules
from rmqinspect.analysis.recovery.lost import _walk_past_end as walk_past_end
from rmqinspect.analysis.recovery.served import ServedCheck, walk_unserved
from rmqinspect.analysis.recovery.state import CommitlogFile
from rmqinspect.format.scan import FileEvent, Skipped, WalkPolicy, scan_file
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import SMALL_LAYOUT, build_store, read_from_disk
from tests.test_memory_release import SMAPS, _maps

RUN = 100  # records per run: ~115 KiB of these messages
MESSAGES = 600


@pytest.fixture(scope="module")
def store_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SMAPS.exists():
        pytest.skip("no /proc/self/smaps here: a process's mapped pages cannot be counted")
    layout = replace(SMALL_LAYOUT, commitlog_file_size=1 << 20)
    specs = [MessageSpec(topic="TopicA", body=bytes([65 + i % 26]) * 1000) for i in range(MESSAGES)]
    root = build_store(tmp_path_factory.mktemp("walks") / "store", specs, layout)
    for path in (root / "commitlog").iterdir():
        read_from_disk(path)
    return root


class _Sampled:
    """A forensic walk in runs of :data:`RUN` records that samples the walked file's resident
    KiB whenever the next run is asked for: what the walk still holds of the runs it judged."""

    def __init__(self, store: Store) -> None:
        self.path = str(store.commitlog.files[0].path)
        self.opts = store.check_options(check_crc=True, read_body=True)
        self.samples: list[int] = []

    def __call__(self, region: memoryview, start: int, pos: int, end: int) -> Iterator[FileEvent]:
        events = scan_file(
            region, start, pos, self.opts, policy=WalkPolicy.FORENSIC, data_end=end, max_records=RUN
        )
        for event in events:
            yield event
            self.samples.append(_maps({self.path})[1])  # the walk asks for the next run


def _assert_flat(samples: list[int]) -> None:
    assert len(samples) >= MESSAGES // RUN - 1  # the walk went run by run: the check can fail
    # At most what the kernel maps around a fault (fault-around: 64 KiB) and the pages the
    # runs so far share with the next (dropped when the file's walk ends); a run is ~107 KiB.
    for i, kib in enumerate(samples):
        assert kib <= 64 + 4 * (i + 2)


def test_walk_unserved_drops_each_run_as_it_is_judged(store_root: Path) -> None:
    with Store.open(store_root) as store:
        disk = store.commitlog.files[0]
        scan = _Sampled(store)
        # No queue after the restart: every message is unserved, and checked again in full.
        check = ServedCheck(
            store.maps, {}, [CommitlogFile(disk, disk.length)], disk.length, scan.opts
        )
        found = list(walk_unserved(check, store, check.commitlog[0], 0, scan))
        assert len(found) == MESSAGES and not any(isinstance(r, Skipped) for r in found)
        _assert_flat(scan.samples)


def test_walk_past_the_end_drops_each_run_as_it_is_judged(store_root: Path) -> None:
    with Store.open(store_root) as store:
        disk = store.commitlog.files[0]
        scan = _Sampled(store)
        check = ServedCheck(store.maps, {}, [], disk.length, scan.opts)
        rules = _Rules(scan.opts, scan.opts, {}, None, ())
        judges = _Judges(rules, check, scan, scan, scan.opts, False, {disk.path.name: disk})
        part = _Part("", "past_end", disk.path.name, 0, None, False, None)
        listing = _Listing(None)
        assert walk_past_end(store, disk, 0, part, judges, listing) is None
        assert listing.count == MESSAGES and NO_QUEUE_UNIT not in listing.by_where
        _assert_flat(scan.samples)
