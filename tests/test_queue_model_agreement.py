"""``info``/``offsets``/``lookup`` (queue bounds) and ``recover`` share one consume-queue model:
on every fixture and conformance store they report the same bounds wherever the restart leaves a
queue's units alone."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from rmqinspect.analysis.queues import all_queue_bounds
from rmqinspect.analysis.recovery import analyze_recovery
from rmqinspect.format.host import HostAddress
from rmqinspect.format.profile import Profile
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.synth.writer import MessageSpec, StoreLayout, StoreWriter
from tests.conftest import CONFORMANCE, CONFORMANCE5, FIXTURES

T0 = 1_767_225_600_000


def _stores() -> list[Path]:
    found = sorted(p for p in (FIXTURES / "stores").iterdir() if p.is_dir())
    for corpus in (CONFORMANCE, CONFORMANCE5):
        if (corpus / "stores").is_dir():
            found += sorted(p for p in (corpus / "stores").iterdir() if p.is_dir())
    return found


@pytest.mark.parametrize("root", _stores(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_info_bounds_equal_recover_after_load(root: Path) -> None:
    with Store.open(root) as store:
        bounds = {QueueId(b.topic, b.queue_id): b for b in all_queue_bounds(store)}
        report = analyze_recovery(store)
        minimum_unchanged = report.commitlog is not None and (
            report.commitlog.min_offset == store.commitlog.min_offset
        )
    if not report.broker_starts:
        pytest.skip("the broker refuses to start: no after-load state to compare")
    compared = 0
    existing = [q for q in report.consume_queues if q.existed]
    for q in existing:
        b = bounds[QueueId(q.topic, q.queue_id)]
        assert b.max_offset == q.max_offset_on_disk, q
        untouched = not (q.units_truncated or q.units_written_at_load or q.files_deleted)
        if untouched and minimum_unchanged:
            assert (b.min_offset, b.max_offset) == (
                q.min_offset_after_load,
                q.max_offset_after_load,
            ), q
            compared += 1
    if report.recovery_path == "normal" and not report.cq_truncation:
        # A restart that neither dispatches nor truncates leaves every queue as loaded.
        assert compared == len(existing)


def test_5x_binary_search_min_offset(tmp_path: Path) -> None:
    """The issue's case: a 5.3 queue whose unit 0 and units 30-70 point below the commitlog's
    first file. 5.x ``correctMinOffset`` binary-searches the first file and lands on 71 (4.9's
    linear scan would say 1); ``info`` and ``recover`` must both say so."""
    root = tmp_path / "store"
    layout = StoreLayout(
        profile=Profile.V5_3,
        commitlog_file_size=64 * 1024,
        cq_file_size=6000,
        index_slot_num=64,
        index_num=400,
        commitlog_start_offset=64 * 1024,
    )
    with StoreWriter(root, layout) as writer:
        for i in range(100):
            writer.put(
                MessageSpec(
                    topic="TopicA",
                    queue_id=0,
                    body=f"message {i}".encode(),
                    tags="TagA",
                    store_timestamp=T0 + i,
                    born_host=HostAddress(bytes([10, 0, 0, 9]), 40000),
                )
            )
    cq = root / "consumequeue" / "TopicA" / "0" / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    for unit in (0, *range(30, 71)):
        struct.pack_into(">q", data, unit * 20, 1000)  # below the first file (65536)
    cq.write_bytes(bytes(data))
    with Store.open(root, StoreOptions(index_slot_num=64, index_num=400)) as store:
        assert store.profile.profile is Profile.V5_3
        (bounds,) = all_queue_bounds(store)
        report = analyze_recovery(store)
    (q,) = report.consume_queues
    assert (bounds.min_offset, bounds.max_offset) == (71, 100)
    assert (q.min_offset_after_load, q.max_offset_after_load) == (71, 100)
    assert q.min_offset_after_start == 71
