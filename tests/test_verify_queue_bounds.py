"""verify's per-queue shortcuts on the walk's proven units: the units-to-records check skips
units the commitlog walk saw lead to their records, and the offsets' bounds neither count the
first file's fillPreBlank placeholders where every unit of it was proven nor map the file again
for the last unit the records' check still holds. The bounds are the broker's all the same."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from rmqinspect.analysis import queues
from rmqinspect.analysis.queues import QueueBounds, queue_bounds
from rmqinspect.analysis.verify import VerifyOptions, context, verify_store
from rmqinspect.analysis.verify import queues as verify_queues
from rmqinspect.format.consumequeue import CQ_UNIT_DTYPE
from rmqinspect.store.consume_queue import ConsumeQueue, CqFile
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT, build_store

PER_QUEUE = 4
BLANKS = 3  # queue 1 starts at this offset: placeholders fill its first file before it


def test_bounds_and_units_from_the_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    with StoreWriter(root, SMALL_LAYOUT) as w:
        w.set_queue_offset("T", 1, BLANKS)
        for i in range(2 * PER_QUEUE):
            w.put(MessageSpec(topic="T", queue_id=i % 2, body=b"m", tags="a"))
        w.set_consumer_offsets({"T@g": {0: PER_QUEUE, 1: BLANKS + PER_QUEUE}})
    seen: dict[QueueId, QueueBounds] = {}
    bounds = context.Context.bounds
    unit = ConsumeQueue.unit
    units_read_for_bounds: list[int] = []

    def recorded(self: context.Context, qid: QueueId) -> QueueBounds:
        monkeypatch.setattr(ConsumeQueue, "unit", counted_unit)
        seen[qid] = bounds(self, qid)
        monkeypatch.setattr(ConsumeQueue, "unit", unit)
        return seen[qid]

    def counted_unit(self: ConsumeQueue, f: CqFile, pos: int) -> tuple[int, int, int]:
        units_read_for_bounds.append(pos)
        return unit(self, f, pos)

    counted: Counter[str] = Counter()

    def counting(name: str, module: object) -> None:
        real = getattr(module, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            counted[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    monkeypatch.setattr(context.Context, "bounds", recorded)
    counting("_pre_blanks", queues)
    counting("resolve_units", verify_queues)
    with Store.open(root) as store:
        report = verify_store(store, VerifyOptions(), jobs=1)
    # (SMALL_LAYOUT's index is smaller than a broker's: index.geometry says so)
    assert [f.check for f in report.findings] == ["index.geometry"]
    # Every record's unit was proven by the walk: queue 0's units are not resolved again, nor
    # its first file's placeholders counted. Queue 1's placeholders lie in its range (4.9 keeps
    # minOffset 0) and no record proves them: its units are resolved and counted as before.
    assert counted == {"_pre_blanks": 1, "resolve_units": 1}
    assert units_read_for_bounds == []  # each queue's last unit: the one its records' check read
    monkeypatch.undo()
    with Store.open(root) as store:
        assert seen == {qid: queue_bounds(store, qid) for qid in store.queue_dirs}
    blanked = seen[QueueId("T", 1)]
    assert (blanked.pre_blank_units, blanked.min_offset, blanked.max_offset) == (
        BLANKS,
        0,
        BLANKS + PER_QUEUE,
    )
    plain = seen[QueueId("T", 0)]
    assert (plain.pre_blank_units, plain.min_offset, plain.max_offset) == (0, 0, PER_QUEUE)
    assert plain.last_phy_offset > 0


def test_units_at_consecutive_and_scattered(tmp_path: Path) -> None:
    """A read ahead's consecutive offsets are read in one piece where one file holds them; the
    units are the files' all the same, across a file boundary and for scattered offsets."""
    n = 70  # SMALL_LAYOUT's queue files hold 50 units: two files
    root = build_store(
        tmp_path / "store", [MessageSpec(topic="T", queue_id=0, body=b"m") for _ in range(n)]
    )
    files = sorted((root / "consumequeue" / "T" / "0").iterdir())
    raw = np.frombuffer(b"".join(p.read_bytes() for p in files), CQ_UNIT_DTYPE)[:n]
    assert len(files) == 2 and raw["phy_offset"].tolist() == sorted(set(raw["phy_offset"]))
    with Store.open(root) as store:
        q, _ = queues.loaded_queue(store, QueueId("T", 0))
        for lo, hi, step in ((3, 40, 1), (50, n, 1), (0, n, 1), (49, 51, 1), (0, n, 3), (7, 8, 1)):
            got = q.units_at(np.arange(lo, hi, step, dtype=np.int64))
            assert got.tobytes() == raw[lo:hi:step].tobytes(), (lo, hi, step)
