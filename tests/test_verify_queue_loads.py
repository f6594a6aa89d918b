"""verify loads each consume queue once (``ConsumeQueue.recover`` and ``correctMinOffset``):
the records' check and the committed offsets' bounds share it. The offsets' check loaded every
queue a committed offset names again (800 loads for 400 queues)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from rmqinspect.analysis import queues
from rmqinspect.analysis.verify import VerifyOptions, context, verify_store
from rmqinspect.store.consume_queue import ConsumeQueue
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import build_store

QUEUES = 6
PER_QUEUE = 5


def test_verify_loads_each_queue_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [
        MessageSpec(topic="TopicA", queue_id=i % QUEUES, body=b"m")
        for i in range(QUEUES * PER_QUEUE)
    ]
    # Queue 0's offset is past its end, queue 1's at it: the bounds the check reads.
    offsets = {"TopicA@g": {q: (PER_QUEUE + 3 if q == 0 else PER_QUEUE) for q in range(QUEUES)}}
    root = build_store(tmp_path / "store", specs, consumer_offsets=offsets)
    loads: Counter[QueueId] = Counter()
    load = queues.loaded_queue

    def counted(store: Store, qid: QueueId) -> tuple[ConsumeQueue, str]:
        loads[qid] += 1
        return load(store, qid)

    monkeypatch.setattr(queues, "loaded_queue", counted)
    monkeypatch.setattr(context, "loaded_queue", counted)
    with Store.open(root) as store:
        report = verify_store(store, VerifyOptions(), jobs=1)
    assert loads == {QueueId("TopicA", q): 1 for q in range(QUEUES)}
    offsets_findings = [f for f in report.findings if f.check.startswith("offsets.")]
    assert [
        (f.check, f.file, f.detail, f.topic, f.queue_id, f.queue_offset) for f in offsets_findings
    ] == [
        (
            "offsets.above_max",
            "config/consumerOffset.json",
            f"group g: offset {PER_QUEUE + 3}; the queue holds 0..{PER_QUEUE}",
            "TopicA",
            0,
            PER_QUEUE + 3,
        )
    ]
