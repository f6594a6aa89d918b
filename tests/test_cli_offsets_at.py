"""``rmqinspect offsets --at TIME``: per queue the first offset stored at or after TIME (5.x
``getOffsetInQueueByTime``, BoundaryType.LOWER), checked fact by fact against the store times a
synth store was written with."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import build_store, run, run_json

T0 = 1_700_000_000_000
# Queue 0: 120 messages over three consume queue files (50 units a file), three at each time;
# queue 1: 5 later messages.
TIMES = {0: [T0 + 10 * (i // 3) for i in range(120)], 1: [T0 + 1000 + i for i in range(5)]}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    specs = [
        MessageSpec(topic="Orders", queue_id=q, body=b"x", store_timestamp=t)
        for q, times in TIMES.items()
        for t in times
    ]
    specs.sort(key=lambda s: s.store_timestamp or 0)
    return build_store(
        tmp_path_factory.mktemp("at") / "s",
        specs,
        consumer_offsets={"Orders@g1": {0: 100, 1: 2}, "Other@g2": {0: 0}},
    )


def first_at_or_after(times: list[int], at: int) -> int:
    return next((i for i, t in enumerate(times) if t >= at), len(times))


@pytest.mark.parametrize(
    "at",
    [
        T0 - 1,  # before every message: the queue's min
        T0,  # equal to the first three: the first of them
        T0 + 5,  # between two times: the next one
        T0 + 10 * 17,  # equal times straddling a file boundary (offsets 51..53)
        T0 + 10 * 16 + 1,  # the boundary of the first file (offset 50 is at T0 + 160)
        T0 + 10 * 39,  # the last time of queue 0
        T0 + 10 * 39 + 1,  # after queue 0's last: its max
        T0 + 1002,
        T0 + 5000,  # after everything: each queue's max
    ],
)
def test_each_queue_answers_its_first_offset_at_or_after(store: Path, at: int) -> None:
    doc = run_json("offsets", store, "--at", str(at), expect=0)
    assert doc["at_timestamp"] == at and doc["group"] is None
    rows = {r["queue_id"]: r for r in doc["queues"] if r["topic"] == "Orders"}
    assert set(rows) == {0, 1}
    for q, times in TIMES.items():
        want = first_at_or_after(times, at)
        row = rows[q]
        assert (row["min_offset"], row["max_offset"], row["offset"]) == (0, len(times), want)
        assert row["store_timestamp"] == (times[want] if want < len(times) else None)
        assert row["committed_offset"] is None and row["moves_by"] is None


def test_with_a_group_its_topics_and_how_far_a_reset_moves_it(store: Path) -> None:
    at = T0 + 10 * 20  # queue 0: offset 60; queue 1: 0
    doc = run_json("offsets", store, "--at", "2023-11-14T22:13:20.200Z", "-g", "g1", expect=0)
    assert doc["at_timestamp"] == at and doc["group"] == "g1"
    got = [
        (r["topic"], r["queue_id"], r["offset"], r["committed_offset"], r["moves_by"])
        for r in doc["queues"]
    ]
    # Back to 60 from 100: 40 messages replayed; back to 0 from 2.
    assert got == [("Orders", 0, 60, 100, -40), ("Orders", 1, 0, 2, -2)]


def test_topic_filter_and_table(store: Path) -> None:
    doc = run_json("offsets", store, "--at", str(T0 + 1003), "-t", "Orders", expect=0)
    assert [(r["queue_id"], r["offset"]) for r in doc["queues"]] == [(0, 120), (1, 3)]
    table = run("offsets", store, "--at", str(T0 + 1003), "-g", "g1", "--format", "table")
    assert table.exit_code == 0
    assert "First offset stored at or after 2023-11-14T22:13:21.003Z" in table.stdout


def test_an_unknown_group_or_a_bad_time(store: Path) -> None:
    result = run("offsets", store, "--at", str(T0), "-g", "nobody", "--format", "json")
    assert result.exit_code == 1 and "no such group: 'nobody'" in result.stderr
    result = run("offsets", store, "--at", "yesterday")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "--at" in result.stderr
