"""``rmqinspect timers``: the 5.x timer store, on a real 5.3.3 broker's store (``timer_clean``,
fact by fact against its expected JSON) and on small timer stores written the way
``TimerMessageStore.doEnqueue`` writes them (tests/timer_helpers.py), one hostile variant at a
time."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqinspect.format import timer
from rmqinspect.render.timers import NO_TIMER_STORE
from tests.cli_helpers import SMALL_OPTS, build_store, orders, run, run_json, tree_state
from tests.conftest import restore_trimmed_store
from tests.test_evidence import SAFE_OPEN, record_file_access
from tests.timer_helpers import DAY, T0, TimerStore, hostile_timer_store

# --- the real broker's store ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def timer_clean(conformance_timer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("timer") / "timer_clean"
    return restore_trimmed_store(conformance_timer_dir, "timer_clean", dest)


@pytest.fixture(scope="module")
def expected(conformance_timer_dir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        (conformance_timer_dir / "expected/timer_clean.json").read_text("utf-8")
    )
    return doc


_STATES = {"pending": "pending", "recalled": "recalled", "delivered": "delivered"}


def test_conformance_entries_fact_by_fact(timer_clean: Path, expected: dict[str, Any]) -> None:
    doc = run_json("timers", timer_clean, expect=0)
    entries = {e["timerlog_offset"]: e for e in doc["entries"]}
    recalls = {r["timerlog_offset"]: r for r in doc["recalls"]}
    seen_entries: set[int] = set()
    seen_recalls: set[int] = set()
    for m in expected["messages"]:
        for copy in m["copiesInInputStore"]:
            for unit in copy.get("timerLogUnits", []):
                at = unit["timerLogOffset"]
                if copy["role"] == "deleteMarker":
                    r = recalls[at]
                    assert r["target"] == copy["TIMER_DEL_UNIQKEY"] == f"TopicT+{m['uniqKey']}"
                    assert r["physical_offset"] == copy["commitLogOffset"]
                    assert r["slot_timestamp"] == unit["slotTimeMs"]
                    assert r["matched"] is True
                    seen_recalls.add(at)
                    continue
                e = entries[at]
                assert e["state"] == _STATES[m["stateInInputStore"]], m["key"]
                assert e["uniq_key"] == m["uniqKey"]
                assert e["real_topic"] == copy["REAL_TOPIC"] == "TopicT"
                assert e["real_queue_id"] == int(copy["REAL_QID"])
                assert e["fire_timestamp"] == int(copy["TIMER_OUT_MS"]) == m["fireTimeMs"]
                assert e["physical_offset"] == copy["commitLogOffset"]
                assert e["store_size"] == copy["storeSize"]
                assert e["queue_offset"] == copy["queueOffset"]
                assert e["magic"] == unit["magic"]
                assert e["slot_timestamp"] == unit["slotTimeMs"]
                assert e["write_timestamp"] == unit["currWriteTimeMs"]
                assert e["late"] is None  # nothing due by the store's newest store time
                seen_entries.add(at)
    # Every unit of the timerlog is one of the expected copies' units.
    assert seen_entries == set(entries) and seen_recalls == set(recalls)
    summary = expected["summary"]["inputStore"]
    assert doc["timerlog_units"] == summary["timerLogUnits"] == 183
    assert doc["counts"] == {
        "delivered": summary["stateByClass"]["short/delivered"],
        "pending": summary["pendingTimers"],
        "recalled": expected["summary"]["recalls"]["ok"],
        "recall_markers": summary["commitlogRecordsByRole"]["deleteMarker"],
    }
    assert doc["findings"] == [] and doc["flagged"] is False


def test_conformance_checkpoint_wheel_and_queue(
    timer_clean: Path, expected: dict[str, Any]
) -> None:
    doc = run_json("timers", timer_clean, expect=0)
    truth = expected["timercheckReadByRealTimerCheckpoint"]["input"]
    cp = doc["timercheck"]
    assert cp["last_read_timestamp"] == truth["lastReadTimeMs"]
    assert cp["last_timer_log_flush_pos"] == truth["lastTimerLogFlushPos"] == doc["timerlog_end"]
    assert cp["last_timer_queue_offset"] == truth["lastTimerQueueOffset"]
    assert cp["master_timer_queue_offset"] == truth["masterTimerQueueOffset"]
    assert cp["data_version_counter"] == truth["dataVersion"]["counter"]
    assert cp["data_version_timestamp"] == truth["dataVersion"]["timestamp"]
    assert doc["timerlog_end_kind"] == "zeros"
    at_stop = expected["brokerTimerStateAtStop"]
    assert doc["timer_queue_max_offset"] == at_stop["timerTopicMaxOffset"]
    assert doc["not_enqueued"] == 0
    slots = expected["wheelSlots"]["input"]
    summary = expected["summary"]["inputStore"]
    assert doc["wheel_slots_used"] == doc["wheel_slots_valid"] == len(slots)
    assert sum(b["slots"] for b in doc["histogram"]) == summary["wheelSlotsNonEmpty"]
    assert sum(b["units"] for b in doc["histogram"]) == summary["wheelSlotNumSum"]
    last_read = cp["last_read_timestamp"]
    behind = [s for s in slots if s["timeMs"] < last_read]
    read_already = doc["histogram"][0]
    assert read_already == {
        "label": "read already",
        "slots": len(behind),
        "units": sum(s["num"] for s in behind),
    }
    [topic] = doc["topics"]
    pending = [m for m in expected["messages"] if m["stateInInputStore"] == "pending"]
    assert topic["real_topic"] == "TopicT"
    assert topic["pending"] == len(pending)
    assert topic["next_fire_timestamp"] == min(m["fireTimeMs"] for m in pending)
    assert topic["last_fire_timestamp"] == max(m["fireTimeMs"] for m in pending)
    assert topic["rolling"] == summary["stateByClass"]["roll/pending"]
    assert topic["metrics_count"] == at_stop["timerMetricsTimingCount"]["TopicT"]


def test_conformance_restart_delivers_what_was_due(
    timer_clean: Path, expected: dict[str, Any]
) -> None:
    """At the real restart's end, the mid timers were due: the restart fired exactly those."""
    restart = expected["summary"]["restart"]
    doc = run_json("timers", timer_clean, "--now", str(restart["endWallMs"]), expect=0)
    due = {e["uniq_key"] for e in doc["entries"] if e["late"] == "due"}
    fired = {m["uniqKey"] for m in expected["messages"] if m["deliveriesAfterRestart"]}
    assert due == fired and len(due) == restart["pendingFiredAfterRestart"] == 46
    assert doc["counts"]["due"] == restart["pendingDueBeforeRestartEnd"]
    assert doc["restart_read_timestamp"] == doc["timercheck"]["last_read_timestamp"]
    # Down 8 days: the restart reads from now - 7 days + 60 s, past every pending slot.
    late = restart["endWallMs"] + 8 * DAY
    skipped = run_json("timers", timer_clean, "--now", str(late), expect=1)
    floor = late // 1000 * 1000
    assert skipped["restart_read_timestamp"] == floor - 7 * DAY + 60_000
    assert skipped["counts"]["skipped_by_restart"] == restart["pendingInInputStore"]


# --- small timer stores ---------------------------------------------------------------------------


def _basic(root: Path) -> TimerStore:
    """pending (T0+60 s), delivered (T0+1 s), recalled (T0+2 h), rolled once (fires T0+3 days,
    first unit at T0+1 day, its roll copy at the fire time)."""
    s = TimerStore(root)
    s.add("PENDING", T0 + 60_000)
    s.add("DELIVERED", T0 + 1000)
    s.add("RECALLED", T0 + 2 * 3_600_000)
    s.add("ROLLED", T0 + 3 * DAY, slot=T0 + DAY, rolls=True)
    s.add("RECALLED", T0 + 2 * 3_600_000, recall="Orders+RECALLED")
    s.add("ROLLED", T0 + 3 * DAY, roll_times=1)
    s.deliver("DELIVERED")
    return s


def _entries(doc: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(e["uniq_key"], e["roll_times"]): e for e in doc["entries"]}


def test_synth_states_fire_times_and_topics(tmp_path: Path) -> None:
    store = _basic(tmp_path / "s").close(last_read=T0 + 5000)
    doc = run_json("timers", store, "--now", str(T0 + 10_000), expect=0)
    got = {k: (e["state"], e["late"], e["fire_timestamp"]) for k, e in _entries(doc).items()}
    assert got == {
        ("PENDING", 0): ("pending", None, T0 + 60_000),
        ("DELIVERED", 0): ("delivered", None, T0 + 1000),
        ("RECALLED", 0): ("recalled", None, T0 + 2 * 3_600_000),
        ("ROLLED", 0): ("rolled", None, T0 + 3 * DAY),
        ("ROLLED", 1): ("pending", None, T0 + 3 * DAY),
    }
    assert [(r["target"], r["matched"]) for r in doc["recalls"]] == [("Orders+RECALLED", True)]
    [topic] = doc["topics"]
    assert topic | {"next_fire_time": None, "last_fire_time": None} == {
        "real_topic": "Orders",
        "pending": 2,
        "overdue": 0,
        "skipped_by_restart": 0,
        "due": 0,
        "rolling": 0,
        "next_fire_timestamp": T0 + 60_000,
        "next_fire_time": None,
        "last_fire_timestamp": T0 + 3 * DAY,
        "last_fire_time": None,
        "delivered": 1,
        "recalled": 1,
        "metrics_count": 2,  # TimerMetrics: enqueued minus dequeued and recalled
    }
    assert doc["wheel_slots_used"] == doc["wheel_slots_valid"] == 5
    # Slots against the read time (T0+5 s): +1 s (read already), +60 s, +2 h (a target and
    # its recall marker: num 0), +1 day (the first roll unit), +3 days (the roll copy).
    assert [(b["label"], b["slots"], b["units"]) for b in doc["histogram"]] == [
        ("read already", 1, 1),
        ("< 1 min", 1, 1),
        ("< 1 h", 0, 0),
        ("< 1 day", 2, 1),
        ("< 2 days", 0, 0),
        ("later", 1, 1),
    ]
    assert doc["findings"] == [] and doc["timerlog_end_kind"] == "zeros"


def test_synth_table(tmp_path: Path, wide_console: None) -> None:
    store = _basic(tmp_path / "s").close(last_read=T0 + 5000)
    result = run("timers", store, "--now", str(T0 + 10_000), "--format", "table")
    assert result.exit_code == 0, result.stderr
    assert "Pending timers by real topic" in result.stdout
    row = next(line for line in result.stdout.splitlines() if "│ Orders" in line)
    assert [c.strip() for c in row.split("│")[1:6]] == ["Orders", "2", "0", "0", "0"]


def test_overdue_due_and_skipped_by_restart(tmp_path: Path) -> None:
    s = TimerStore(tmp_path / "s")
    s.add("BEHIND", T0 + 1000)  # before lastReadTimeMs, not delivered: overdue
    s.add("AHEAD", T0 + 60_000)
    store = s.close(last_read=T0 + 30_000)
    doc = run_json("timers", store, "--now", str(T0 + 120_000), expect=1)
    late = {e["uniq_key"]: e["late"] for e in doc["entries"]}
    assert late == {"BEHIND": "overdue", "AHEAD": "due"}
    assert doc["flagged"] is True and doc["findings"] == []
    # Down 8 days: the restart reads from now - 7 days + 60 s, past AHEAD's slot.
    down = run_json("timers", store, "--now", str(T0 + 8 * DAY), expect=1)
    assert {e["uniq_key"]: e["late"] for e in down["entries"]} == {
        "BEHIND": "overdue",
        "AHEAD": "skipped_by_restart",
    }
    assert down["restart_read_timestamp"] == T0 + DAY + 60_000


@pytest.mark.parametrize(
    ("variant", "kinds"),
    [
        ("cycle", ["timerlog.cycle"]),
        ("chain_into_other_slot", ["timerlog.chain_into_other_slot"]),
        ("slot_time_mismatch", ["wheel.slot_time_mismatch"]),
        ("past_commitlog_end", ["timerlog.past_commitlog_end"]),
        ("not_timer_record", ["timerlog.not_timer_record"]),
        ("truncated_flush", ["timerlog.truncated"]),
        ("truncated_file", ["timerlog.truncated"]),
        # The log ends at the bad unit: both slots' chains start past it.
        ("bad_unit", ["timerlog.bad_unit", *["timerlog.chain_outside_log"] * 2]),
    ],
)
def test_hostile_timer_stores_are_findings(
    tmp_path: Path, wide_console: None, variant: str, kinds: list[str]
) -> None:
    store = hostile_timer_store(tmp_path / "s", variant)
    doc = run_json("timers", store, "--now", str(T0), expect=1)
    assert [f["kind"] for f in doc["findings"]] == kinds, doc["findings"]
    table = run("timers", store, "--now", str(T0), "--format", "table")
    assert table.exit_code == 1 and "Traceback" not in table.stderr + table.stdout
    assert all(kind in table.stdout for kind in kinds)


def test_hostile_details(tmp_path: Path) -> None:
    """What the findings say and keep: a bad unit ends the log where the broker does, and the
    units after it are not read; a unit past the commitlog is unreadable, not guessed at."""
    bad = run_json("timers", hostile_timer_store(tmp_path / "bad", "bad_unit"), expect=1)
    assert bad["timerlog_end"] == timer.UNIT_SIZE and bad["timerlog_units"] == 1
    assert "drops the 1 non-zero unit(s) after it" in bad["findings"][0]["message"]
    past = run_json(
        "timers", hostile_timer_store(tmp_path / "past", "past_commitlog_end"), expect=1
    )
    assert [e["state"] for e in past["entries"]] == ["pending", "pending", "unreadable"]
    assert past["entries"][2]["physical_offset"] == 10**9


def test_store_without_timer_store(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(3))
    assert run_json("timers", store, expect=0)["present"] is False
    table = run("timers", store, "--format", "table")
    assert (table.exit_code, table.stdout) == (0, NO_TIMER_STORE + "\n")


def test_missing_timercheck_and_short_wheel(tmp_path: Path) -> None:
    store = _basic(tmp_path / "s").close(last_read=T0)
    os.remove(store / "config" / "timercheck")
    os.truncate(store / "timerwheel", 16)
    doc = run_json("timers", store, expect=1)
    assert [f["kind"] for f in doc["findings"]] == ["timercheck.missing", "wheel.wrong_size"]
    assert doc["timercheck"] is None and doc["wheel_slots_used"] == 0


def test_timer_files_are_only_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``timers``, ``verify`` and ``recover`` open the timer store's files read-only,
    non-blocking and without following links, map them read-only, and change nothing; ``info``
    says who reads the timer store."""
    store = _basic(tmp_path / "s").close(last_read=T0 + 5000)
    before = tree_state(store)
    log = record_file_access(monkeypatch)
    for args in (
        ("timers", store),
        ("verify", store, *SMALL_OPTS),
        ("recover", store, *SMALL_OPTS),
    ):
        result = run(*args, "--format", "json")
        assert result.exit_code == 0, (args, result.stderr)
    monkeypatch.undo()
    timer_files = {str(p.resolve()) for p in (store / "timerwheel", store / "timerlog")}
    timer_files |= {str((store / "timerlog" / f"{0:020d}").resolve())}
    timer_files |= {str((store / "config" / "timercheck").resolve())}
    seen = [a for a in log if a.path in timer_files]
    assert {a.path for a in seen} >= timer_files - {str((store / "timerlog").resolve())}
    assert not [a for a in seen if a.writable]
    opened = [a for a in seen if a.call == "os.open"]
    assert opened and all(a.flags & SAFE_OPEN == SAFE_OPEN for a in opened)
    assert tree_state(store) == before
    info = run_json("info", store, expect=0)
    assert info["unsupported"] == []  # read, so not listed as a layout the tool does not read
    assert {"timerlog", "timerwheel"} <= {f["name"] for f in info["families"]}


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(junk=st.binary(min_size=1, max_size=3 * timer.UNIT_SIZE), at=st.integers(0, 160))
def test_any_timerlog_bytes_are_findings_never_tracebacks(
    tmp_path_factory: pytest.TempPathFactory, junk: bytes, at: int
) -> None:
    """Arbitrary bytes over the timerlog's units (sizes, magics, prevPos, offsets): an answer,
    exit 0 or 1, never a traceback or a hang."""
    store = _basic(tmp_path_factory.mktemp("fuzz") / "s").close(last_read=T0)
    path = store / "timerlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[at : at + len(junk)] = junk
    path.write_bytes(bytes(data))
    result = run("timers", store, "--format", "json")
    doc = json.loads(result.stdout)
    assert doc["present"] is True
    # Exit 1 exactly when the report is flagged (findings, overdue or skipped entries).
    assert result.exit_code == (1 if doc["flagged"] else 0), result.stderr


@pytest.mark.parametrize("name", ["timerwheel", "config/timercheck"])
@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_timer_files_that_are_not_regular_files(tmp_path: Path, name: str, kind: str) -> None:
    """Neither opened nor followed (a FIFO would block): a finding naming the file."""
    store = _basic(tmp_path / "s").close(last_read=T0 + 5000)
    path = store / name
    path.unlink()
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(tmp_path / "elsewhere")
    doc = run_json("timers", store, "--now", str(T0 + 10_000), expect=1)
    expected = "wheel.unreadable" if name == "timerwheel" else "timercheck.unreadable"
    assert [(f["kind"], f["path"]) for f in doc["findings"]] == [(expected, str(path))]
