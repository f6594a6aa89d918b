"""``rmqinspect delays``: delay levels against SCHEDULE_TOPIC_XXXX, on a real 4.9.8 broker's store
and on synth stores with a pending, an overdue, a past-max and a below-min level."""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.synth.writer import MessageSpec, StoreLayout, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT, orders, run, run_json

T0 = 1_700_000_000_000
LEVELS = "1s 5s 10s"  # the synth stores' messageDelayLevel
CONSUME_LEVELS = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 10s 20s"  # the corpus broker's
LAYOUT = StoreLayout(
    profile=SMALL_LAYOUT.profile,
    commitlog_file_size=SMALL_LAYOUT.commitlog_file_size,
    cq_file_size=SMALL_LAYOUT.cq_file_size,
    index_slot_num=SMALL_LAYOUT.index_slot_num,
    index_num=SMALL_LAYOUT.index_num,
    delay_levels=LEVELS,
)


def _delayed(level: int, store_timestamp: int) -> MessageSpec:
    return MessageSpec(
        topic="Orders", body=b"later", delay_level=level, store_timestamp=store_timestamp
    )


def delay_store(
    root: Path,
    offsets: dict[int, int],
    *,
    start_offsets: dict[int, int] | None = None,
    layout: StoreLayout = LAYOUT,
) -> Path:
    """Level 1 (1 s): 4 messages stored at T0..T0+3 s, due T0+1 s..T0+4 s. Level 2 (5 s): 3 at
    T0..T0+2 s, due T0+5 s..T0+7 s. Level 3 (10 s): 2 at T0+95 s and T0+99 s, due after the
    last record (T0+100 s), the broker's clock when it stopped."""
    with StoreWriter(root, layout) as w:
        for level, first in (start_offsets or {}).items():
            w.set_queue_offset(SCHEDULE_TOPIC, level - 1, first)
        for i in range(4):
            w.put(_delayed(1, T0 + i * 1000))
        for i in range(3):
            w.put(_delayed(2, T0 + i * 1000))
        w.put(_delayed(3, T0 + 95_000))
        w.put(_delayed(3, T0 + 99_000))
        w.put(MessageSpec(topic="Orders", body=b"last", store_timestamp=T0 + 100_000))
        w.set_delay_offsets(offsets)
    return root


def levels(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {lv["level"]: lv for lv in doc["levels"]}


def delays(store: Path, *args: str, expect: int) -> dict[str, Any]:
    doc: dict[str, Any] = run_json("delays", store, "--delay-levels", LEVELS, *args, expect=expect)
    return doc


# --- the real broker's store ----------------------------------------------------------------------


def test_conformance_levels_fact_by_fact(conformance_consume_dir: Path) -> None:
    expected = json.loads((conformance_consume_dir / "expected/consume_clean.json").read_text())
    store = conformance_consume_dir / "stores/consume_clean"
    doc = run_json("delays", store, "--delay-levels", CONSUME_LEVELS, expect=0)
    parsed = expected["configFiles"]["delayOffset.json"]["parsed"]["offsetTable"]
    maxima = expected["queueMaxOffsetFromCommitLog"]
    units = expected["consumeQueueUnitsOnDisk"]
    got = levels(doc)
    assert sorted(got) == sorted(int(k) for k in parsed) == [2, 3, 4, 5, 17, 18]
    for key, offset in parsed.items():
        level = int(key)
        queue = f"{SCHEDULE_TOPIC}/{level - 1}"
        row = got[level]
        assert row["queue_id"] == level - 1
        assert row["offset"] == offset
        assert row["min_offset"] == 0  # the commitlog's first file is still there
        assert row["max_offset"] == maxima[queue] == units[queue]["units"]
        assert row["offset_at_load"] == offset
        # A clean shutdown: the restart loads the queues as they are.
        assert (row["min_offset_at_load"], row["max_offset_at_load"]) == (0, maxima[queue])
        assert row["max_offset_after_dispatch"] == maxima[queue]
        # Every delayed copy was delivered before the clean shutdown persisted the table.
        assert row["pending"] == maxima[queue] - offset == 0
        assert (row["overdue"], row["out_of_range"], row["flagged"]) == (0, None, False)
    assert (got[17]["delay_ms"], got[18]["delay_ms"], got[2]["delay_ms"]) == (10_000, 20_000, 1000)
    disk = [
        json.loads(line)
        for line in gzip.decompress(
            (conformance_consume_dir / "expected/consume_clean.disk.jsonl.gz").read_bytes()
        ).splitlines()
    ]
    assert doc["reference_timestamp"] == max(r["storeTimestamp"] for r in disk)
    assert doc["reference_basis"] == "the store's newest store time"
    assert doc["file"]["source"] == "main" and doc["file"]["errors"] == []
    assert doc["restart"] == {"broker_starts": True, "recovery_path": "normal", "refusal": None}


def test_conformance_rewound_level_shows_the_brokers_due_times(
    conformance_consume_dir: Path, tmp_path: Path
) -> None:
    """Level 18's offset put back to 0 in a copy: its 3 units are pending again, due at the
    real broker's tagsCode, which is the schedule record's store time + 20 s."""
    store = tmp_path / "s"
    shutil.copytree(conformance_consume_dir / "stores/consume_clean", store)
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        (store / "config" / name).write_text('{"offsetTable":{2:6,3:75,4:45,5:18,17:6,18:0}}')
    disk = [
        json.loads(line)
        for line in gzip.decompress(
            (conformance_consume_dir / "expected/consume_clean.disk.jsonl.gz").read_bytes()
        ).splitlines()
    ]
    scheduled = sorted(
        (r["queueOffset"], r["storeTimestamp"])
        for r in disk
        if r["topic"] == SCHEDULE_TOPIC and r["queueId"] == 17
    )
    assert [q for q, _ in scheduled] == [0, 1, 2]
    doc = run_json("delays", store, "--delay-levels", CONSUME_LEVELS, expect=0)
    row = levels(doc)[18]
    assert (row["offset"], row["offset_at_load"], row["pending"]) == (0, 0, 3)
    assert row["oldest_store_timestamp"] == scheduled[0][1]
    assert row["next_due_timestamp"] == scheduled[0][1] + 20_000
    assert row["last_due_timestamp"] == scheduled[-1][1] + 20_000
    stop = doc["reference_timestamp"]
    assert stop - 10_000 <= row["next_due_timestamp"] <= row["last_due_timestamp"] <= stop
    # The real broker delivered all three (their TopicA copies are stored after them): the
    # rewound offset makes the restart deliver them again; none is overdue or stuck.
    delivered = [
        r
        for r in disk
        if r["topic"] == "TopicA" and (r.get("properties") or {}).get("DELAY") == "18"
    ]
    assert len(delivered) == 3
    assert (row["redelivered"], row["overdue"], row["recently_due"]) == (3, 0, 0)
    assert row["flagged"] is False and doc["redelivered"] == 3
    # A minute later they are still delivered, not overdue: not the #1472/#4226 signature.
    later = run_json(
        "delays", store, "--delay-levels", CONSUME_LEVELS, "--now", str(stop + 60_000), expect=0
    )
    row = levels(later)[18]
    assert (row["overdue"], row["recently_due"], row["redelivered"]) == (0, 0, 3)


# --- synth stores -------------------------------------------------------------------------------


def test_pending_level_not_yet_due_exits_0(tmp_path: Path) -> None:
    store = delay_store(tmp_path / "s", {1: 4, 2: 3, 3: 0})
    doc = delays(store, expect=0)
    assert doc["reference_timestamp"] == T0 + 100_000
    got = levels(doc)
    assert (got[1]["pending"], got[2]["pending"]) == (0, 0)
    three = got[3]
    assert (three["offset"], three["min_offset"], three["max_offset"]) == (0, 0, 2)
    assert (three["offset_at_load"], three["pending"], three["delay_ms"]) == (0, 2, 10_000)
    assert three["oldest_store_timestamp"] == T0 + 95_000
    assert three["next_due_timestamp"] == T0 + 105_000
    assert three["last_due_timestamp"] == T0 + 109_000
    assert (three["overdue"], three["recently_due"], three["flagged"]) == (0, 0, False)
    assert three["next_due_time"] == "2023-11-14T22:15:05.000Z"


def test_overdue_level_exits_1(tmp_path: Path) -> None:
    store = delay_store(tmp_path / "s", {1: 4, 2: 1, 3: 2})
    row = levels(delays(store, expect=1))[2]
    # Units 1 and 2 were due at T0+6 s and T0+7 s, 93 s before the broker stopped.
    assert (row["offset_at_load"], row["pending"], row["overdue"]) == (1, 2, 2)
    assert row["next_due_timestamp"] == T0 + 6000
    assert row["out_of_range"] is None and row["flagged"] is True
    assert any("stuck" in n for n in row["notes"])


def test_recently_due_is_not_overdue(tmp_path: Path) -> None:
    """Due within the 10 s delayOffset.json may lag by: maybe delivered, not overdue."""
    store = delay_store(tmp_path / "s", {1: 4, 2: 3, 3: 0})
    row = levels(delays(store, "--now", str(T0 + 106_000), expect=0))[3]
    assert (row["pending"], row["overdue"], row["recently_due"]) == (2, 0, 1)
    row = levels(delays(store, "--now", "2023-11-14T22:15:30Z", expect=1))[3]  # T0 + 130 s
    assert (row["overdue"], row["recently_due"]) == (2, 0)


def test_offset_past_max_is_clamped_to_max(tmp_path: Path) -> None:
    store = delay_store(tmp_path / "s", {1: 10, 2: 3, 3: 2})
    row = levels(delays(store, expect=1))[1]
    assert (row["offset"], row["min_offset"], row["max_offset"]) == (10, 0, 4)
    assert (row["out_of_range"], row["offset_at_load"], row["pending"]) == ("above_max", 4, 0)
    assert row["overdue"] == 0 and row["flagged"] is True
    assert any("correctDelayOffset" in n and "6 more message(s)" in n for n in row["notes"])


def test_offset_below_min_is_clamped_to_min(tmp_path: Path) -> None:
    """Level 2's queue starts at offset 5, the commitlog's first file deleted by retention (so
    the pre-blank units point below it and correctMinOffset moves min to 5): offset 2 loads
    as 5."""
    retained = replace(LAYOUT, commitlog_start_offset=LAYOUT.commitlog_file_size)
    store = delay_store(tmp_path / "s", {1: 4, 2: 2, 3: 2}, start_offsets={2: 5}, layout=retained)
    row = levels(delays(store, expect=1))[2]
    assert (row["offset"], row["min_offset"], row["max_offset"]) == (2, 5, 8)
    assert (row["out_of_range"], row["offset_at_load"], row["pending"]) == ("below_min", 5, 3)
    assert row["next_due_timestamp"] == T0 + 5000


def test_no_delay_messages_is_one_line(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with StoreWriter(store, LAYOUT) as w:
        for spec in orders(4):
            w.put(spec)
    result = run("delays", store, "--format", "table")
    assert (result.exit_code, result.stdout) == (0, "no delay levels in use\n")
    doc = delays(store, expect=0)
    assert doc["levels"] == [] and doc["reference_timestamp"] is None


def test_level_past_the_configured_ones_is_never_delivered(tmp_path: Path) -> None:
    store = delay_store(tmp_path / "s", {1: 4, 2: 3, 3: 0})
    doc = run_json("delays", store, "--delay-levels", "1s 5s", expect=1)
    row = levels(doc)[3]
    assert (row["delay_ms"], row["pending"], row["overdue"], row["flagged"]) == (None, 2, 0, True)
    assert any("never delivers" in n for n in row["notes"])


def _hostile(tmp_path: Path, text: str, bak: str | None = None) -> Path:
    store = delay_store(tmp_path / "s", {1: 4, 2: 3, 3: 2})
    (store / "config/delayOffset.json").write_text(text)
    if bak is not None:
        (store / "config/delayOffset.json.bak").write_text(bak)
    return store


def test_non_numeric_offset_falls_back_to_the_bak(tmp_path: Path) -> None:
    store = _hostile(tmp_path, '{"offsetTable":{1:"four",2:3,3:2}}')
    result = run("delays", store, "--delay-levels", LEVELS, "--format", "json")
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["file"]["source"], doc["file"]["main_state"]) == ("bak", "invalid")
    assert levels(doc)[1]["offset"] == 4  # the .bak the writer left
    assert "loads the .bak" in result.stderr and "Traceback" not in result.stderr


def test_negative_and_huge_offsets_are_findings(tmp_path: Path) -> None:
    huge = (1 << 63) - 1
    store = _hostile(tmp_path, f'{{"offsetTable":{{1:-7,2:{huge},3:2}}}}')
    got = levels(delays(store, expect=1))
    assert (got[1]["out_of_range"], got[1]["offset_at_load"], got[1]["pending"]) == (
        "below_min",
        0,
        4,
    )
    assert got[1]["overdue"] == 4
    assert (got[2]["out_of_range"], got[2]["offset_at_load"], got[2]["pending"]) == (
        "above_max",
        3,
        0,
    )


def test_offset_beyond_a_long_and_both_files_bad(tmp_path: Path) -> None:
    """Neither file decodes: a non-empty bad .bak makes the broker refuse to start."""
    store = _hostile(tmp_path, '{"offsetTable":{1:99999999999999999999}}', bak="{not json")
    result = run("delays", store, "--delay-levels", LEVELS, "--format", "json")
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["file"]["source"], doc["file"]["broker_starts"]) == ("none", False)
    assert len(doc["file"]["errors"]) == 2
    # No table loads: every level starts at 0, its queue's min here.
    assert [(lv["level"], lv["offset"], lv["pending"]) for lv in doc["levels"]] == [
        (1, None, 4),
        (2, None, 3),
        (3, None, 2),
    ]
    assert "refuses to start" in result.stderr and "Traceback" not in result.stderr
    assert "every level starts" not in result.stderr


def test_bad_now_exits_2(tmp_path: Path) -> None:
    store = delay_store(tmp_path / "s", {1: 4, 2: 3, 3: 2})
    result = run("delays", store, "--now", "yesterday")
    assert result.exit_code == 2
    assert result.stderr.startswith("rmqinspect: error: --now: 'yesterday'")


def test_a_due_time_beyond_the_delay_is_delivered_at_once(tmp_path: Path) -> None:
    """A reference time 60 s before level 3's units were stored (a clock that went back): they
    are due more than the level's 10 s after it, which correctDeliverTimestamp treats as now."""
    store = delay_store(tmp_path / "s", {1: 4, 2: 3, 3: 0})
    row = levels(delays(store, "--now", str(T0 + 35_000), expect=0))[3]
    assert (row["pending"], row["overdue"], row["recently_due"]) == (2, 0, 0)
    assert any("delivers them at once" in n and n.startswith("2 unit(s)") for n in row["notes"])


def test_table_shows_each_level(tmp_path: Path, wide_console: None) -> None:
    store = delay_store(tmp_path / "s", {1: 10, 2: 1, 3: 0})
    result = run("delays", store, "--delay-levels", LEVELS, "--format", "table")
    assert result.exit_code == 1, result.stderr
    lines = result.stdout.splitlines()
    one = next(line for line in lines if "│     1 │" in line)
    assert "1s" in one and "0..4" in one and "4 (above_max)" in one
    two = next(line for line in lines if "│     2 │" in line)
    assert "5s" in two and "stuck" in two


def crashed_store(root: Path, offsets: dict[int, int]) -> Path:
    """A killed broker's store: level 1 holds 4 messages (due T0+1 s..T0+4 s) of which the
    reput dispatched only the first 2, so its queue on disk ends at 2 and the commitlog at 4."""
    with StoreWriter(root, LAYOUT, crash=True) as w:
        for i in range(4):
            w.put(replace(_delayed(1, T0 + i * 1000), dispatch=i < 2))
        w.put(
            MessageSpec(topic="Orders", body=b"last", store_timestamp=T0 + 100_000, dispatch=False)
        )
        w.set_delay_offsets(offsets)
    return root


def test_crash_offset_past_the_queue_on_disk_is_judged_at_load(tmp_path: Path) -> None:
    """correctDelayOffset runs after the recovery, whose load-time dispatch restores units 2
    and 3: offset 4 is then in range, not clamped to the 2 on disk (which would deliver the
    two messages again)."""
    store = crashed_store(tmp_path / "s", {1: 4})
    doc = delays(store, expect=0)
    assert doc["restart"] == {"broker_starts": True, "recovery_path": "abnormal", "refusal": None}
    row = levels(doc)[1]
    assert (row["min_offset"], row["max_offset"]) == (0, 2)
    assert (row["min_offset_at_load"], row["max_offset_at_load"]) == (0, 4)
    assert row["max_offset_after_dispatch"] == 4
    assert (row["offset_at_load"], row["out_of_range"], row["pending"]) == (4, None, 0)
    assert row["flagged"] is False


def test_crash_pending_units_not_yet_in_the_queue_files(tmp_path: Path) -> None:
    store = crashed_store(tmp_path / "s", {1: 1})
    row = levels(delays(store, expect=1))[1]
    # Units 1..3 are pending; only unit 1 is in the files on disk, due T0+2 s: overdue.
    assert (row["offset_at_load"], row["pending"], row["overdue"]) == (1, 3, 1)
    assert (row["next_due_timestamp"], row["last_due_timestamp"]) == (T0 + 2000, T0 + 2000)
    assert any(n.startswith("2 pending unit(s) are not in the queue files") for n in row["notes"])


def test_no_delay_offset_file_starts_every_level_at_its_min(tmp_path: Path) -> None:
    store = delay_store(tmp_path / "s", {1: 4, 2: 3, 3: 2})
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        (store / "config" / name).unlink()
    doc = delays(store, expect=1)
    assert doc["file"] is None
    got = levels(doc)
    assert [(lv, got[lv]["offset"], got[lv]["pending"]) for lv in (1, 2, 3)] == [
        (1, None, 4),
        (2, None, 3),
        (3, None, 2),
    ]
    assert (got[1]["overdue"], got[2]["overdue"], got[3]["overdue"]) == (4, 3, 0)


def test_level_below_1_is_a_problem_not_a_level(tmp_path: Path) -> None:
    store = _hostile(tmp_path, '{"offsetTable":{0:5,-3:1,1:4,2:3,3:2}}')
    result = run("delays", store, "--delay-levels", LEVELS, "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [lv["level"] for lv in doc["levels"]] == [1, 2, 3]
    assert len(doc["problems"]) == 2 and all("below 1" in p for p in doc["problems"])
    assert result.stderr.count("delay level below 1") == 2


def test_a_broker_that_would_not_start_is_judged_on_disk(tmp_path: Path) -> None:
    store = delay_store(tmp_path / "s", {1: 10, 2: 3, 3: 2})
    (first,) = sorted((store / "commitlog").iterdir())[:1]
    with open(first, "r+b") as fh:
        fh.truncate(first.stat().st_size // 2)  # a wrong-size file: load() fails
    result = run(
        "delays", store, "--delay-levels", LEVELS, "--commitlog-file-size", "65536", "-F", "json"
    )
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["restart"]["broker_starts"] is False
    assert "refuses to start" in doc["restart"]["refusal"]
    row = levels(doc)[1]
    assert (row["min_offset_at_load"], row["max_offset_at_load"]) == (None, None)
    assert (row["out_of_range"], row["offset_at_load"]) == ("above_max", 4)  # the queue on disk
    assert "offsets judged against the queues on disk: the broker refuses" in result.stderr
