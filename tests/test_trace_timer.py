"""``trace`` through the 5.x timer: a timer send, its roll copies, a recall's marker and the
delivered copy, each with its timerlog unit, against what ``synth --timers`` placed and against
the real 5.3.3 broker's ``timer_clean`` store (its expected per-message copies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.export.schema import Table
from rmqinspect.format import timer
from rmqinspect.format.profile import Profile
from rmqinspect.format.times import iso_ms
from rmqinspect.synth.layout import PlacedTimer, StoreSummary
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import StoreLayout
from tests.cli_helpers import run, run_json
from tests.conftest import restore_trimmed_store
from tests.export_helpers import read_table


@pytest.fixture(scope="module")
def synth_timers(tmp_path_factory: pytest.TempPathFactory) -> StoreSummary:
    root = tmp_path_factory.mktemp("trace-timers") / "s"
    config = WorkloadConfig(messages=60, body_size=64, topics=2, queues=4, timers=12)
    return write_workload(root, config, StoreLayout(profile=Profile.V5_3))


def _expected_copies(t: PlacedTimer) -> list[tuple[str, int, int | None, str | None]]:
    """(role, physical offset, timerlog offset, unit state) of each copy, in store order."""
    rows: list[tuple[str, int, int | None, str | None]] = [
        ("timer", t.physical_offset, t.timerlog_offset, t.state)
    ]
    if t.roll_offset is not None:
        rows.append(("timer_roll", t.roll_offset, t.roll_timerlog_offset, "pending"))
    if t.recall_offset is not None:
        rows.append(("timer_recall", t.recall_offset, t.recall_timerlog_offset, "recall_marker"))
    if t.delivered_offset is not None:
        rows.append(("timer_delivery", t.delivered_offset, None, None))
    return sorted(rows, key=lambda r: r[1])


@pytest.mark.parametrize("kind", ["short", "mid", "roll", "recalled", "rolled"])
def test_each_class_is_followed_through_the_timer(synth_timers: StoreSummary, kind: str) -> None:
    assert synth_timers.timers is not None
    t = next(p for p in synth_timers.timers.timers if p.kind == kind)
    doc = run_json("trace", synth_timers.root, "--uniq-key", t.uniq_key, expect=0)
    [chain] = doc["chains"]
    assert chain["topic"] == t.real_topic
    got = [
        (
            c["role"],
            c["physical_offset"],
            None if c["timer"] is None else c["timer"]["timerlog_offset"],
            None if c["timer"] is None else c["timer"]["state"],
        )
        for c in chain["copies"]
    ]
    assert got == _expected_copies(t)
    assert all(c["fire_timestamp"] == t.fire_ms for c in chain["copies"])
    first = chain["copies"][0]["timer"]
    assert (first["slot_timestamp"], first["magic"]) == (t.slot_ms, t.magic)
    words = {
        "short": "delivered to its real topic",
        "mid": "pending",
        "roll": "pending",
        "recalled": "recalled",
        "rolled": "rolled 1 time, pending",
    }[kind]
    line = next(s for s in chain["summary"] if s.startswith("timer message"))
    assert words in line
    # A group of the real topic: the pending ones wait in the timer, a recalled one never comes.
    assert chain["groups"]
    for g in chain["groups"]:
        if kind in ("mid", "roll", "rolled"):
            assert g["outcome"] == "in_delay"
            assert g["summary"] == f"the message waits in the timer until {iso_ms(t.fire_ms)}"
        elif kind == "recalled":
            assert g["outcome"] == "not_delivered"
        else:
            assert g["outcome"] in ("consumed", "pending")


_ROLES = {
    "timerCopy": "timer",
    "rollCopy": "timer_roll",
    "deleteMarker": "timer_recall",
    "delivered": "timer_delivery",
}


def test_real_broker_copies(conformance_timer_dir: Path, tmp_path: Path) -> None:
    expected: dict[str, Any] = json.loads(
        (conformance_timer_dir / "expected/timer_clean.json").read_text("utf-8")
    )
    store = restore_trimmed_store(conformance_timer_dir, "timer_clean", tmp_path / "s")
    # A delivered short one, a recalled mid one and a recalled roll-marked one.
    for key in ("short-004", "mid-001", "roll-003"):
        m = next(x for x in expected["messages"] if x["key"] == key)
        doc = run_json("trace", store, "--uniq-key", m["uniqKey"], expect=0)
        [chain] = doc["chains"]
        want = [
            (
                _ROLES[c["role"]],
                c["commitLogOffset"],
                [u["timerLogOffset"] for u in c.get("timerLogUnits", [])],
            )
            for c in m["copiesInInputStore"]
        ]
        got = [
            (
                c["role"],
                c["physical_offset"],
                [] if c["timer"] is None else [c["timer"]["timerlog_offset"]],
            )
            for c in chain["copies"]
        ]
        assert got == want, key
        assert chain["copies"][0]["fire_timestamp"] == m["fireTimeMs"]
        magic = m["copiesInInputStore"][0]["timerLogUnits"][0]["magic"]
        assert chain["copies"][0]["timer"]["magic"] == magic
        assert bool(magic & timer.MAGIC_ROLL) == (key == "roll-003")


def test_message_copies_holds_roll_copies_and_deliveries(
    synth_timers: StoreSummary, tmp_path: Path
) -> None:
    """The export's copies: a roll copy and a delivered copy per timer message that has one,
    linked by UNIQ_KEY; the timer sends and the recall markers are no copies."""
    assert synth_timers.timers is not None
    out = tmp_path / "out"
    done = run(
        "export", synth_timers.root, out, "--engine", "arrow", "--tables", "message_copies",
        "--jobs", "1",
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    rows = read_table(out, Table.MESSAGE_COPIES).to_pylist()
    timed = {t.uniq_key for t in synth_timers.timers.timers}
    got = sorted(
        (r["physical_offset"], r["role"], r["uniq_key"], r["linked_by"])
        for r in rows
        if r["uniq_key"] in timed
    )
    want = sorted(
        [(t.roll_offset, "timer_roll", t.uniq_key, "uniq_key")
         for t in synth_timers.timers.timers if t.roll_offset is not None]
        + [(t.delivered_offset, "timer_delivery", t.uniq_key, "uniq_key")
           for t in synth_timers.timers.timers if t.delivered_offset is not None]
    )  # fmt: skip
    assert got == want and len(want) == 2 * (12 // 6)
