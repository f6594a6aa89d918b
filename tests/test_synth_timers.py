"""``synth --timers``: the 5.x timer store as the synth writer places it
(rmqinspect/synth/timer.py), read back by ``timers``, ``verify`` and ``lookup`` fact by fact
against the writer's truth (:class:`~rmqinspect.synth.layout.TimerSummary`)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from rmqinspect.format import timer
from rmqinspect.format.profile import Profile
from rmqinspect.synth.layout import StoreSummary, TimerSummary
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import StoreLayout
from tests.cli_helpers import run, run_json

TIMERS = 60  # ten of each class


@pytest.fixture(scope="module")
def synth_timers(tmp_path_factory: pytest.TempPathFactory) -> StoreSummary:
    root = tmp_path_factory.mktemp("timers") / "s"
    config = WorkloadConfig(messages=120, body_size=64, topics=2, queues=4, timers=TIMERS)
    return write_workload(root, config, StoreLayout(profile=Profile.V5_3))


def _truth(summary: StoreSummary) -> TimerSummary:
    assert summary.timers is not None
    return summary.timers


def test_every_unit_reads_back_as_placed(synth_timers: StoreSummary) -> None:
    truth = _truth(synth_timers)
    doc = run_json("timers", synth_timers.root, expect=0)
    entries = {e["timerlog_offset"]: e for e in doc["entries"]}
    recalls = {r["timerlog_offset"]: r for r in doc["recalls"]}
    assert len(entries) + len(recalls) == truth.timerlog_units == doc["timerlog_units"]
    for t in truth.timers:
        e = entries[t.timerlog_offset]
        assert {
            k: e[k]
            for k in (
                "physical_offset", "magic", "slot_timestamp", "state", "real_topic",
                "real_queue_id", "uniq_key", "fire_timestamp", "queue_offset", "roll_times",
            )
        } == {
            "physical_offset": t.physical_offset,
            "magic": t.magic,
            "slot_timestamp": t.slot_ms,
            "state": t.state,
            "real_topic": t.real_topic,
            "real_queue_id": t.real_queue_id,
            "uniq_key": t.uniq_key,
            "fire_timestamp": t.fire_ms,
            "queue_offset": t.queue_offset,
            "roll_times": 0,
        }, t.key  # fmt: skip
        if t.roll_timerlog_offset is not None:
            # The roll copy is enqueued anew: a normal unit in its fire time's slot, pending.
            r = entries[t.roll_timerlog_offset]
            assert (r["physical_offset"], r["roll_times"], r["magic"]) == (
                t.roll_offset,
                1,
                timer.MAGIC_DEFAULT,
            )
            assert (r["slot_timestamp"], r["state"], r["uniq_key"]) == (
                t.fire_ms,
                "pending",
                t.uniq_key,
            )
        if t.recall_timerlog_offset is not None:
            m = recalls[t.recall_timerlog_offset]
            assert (m["physical_offset"], m["slot_timestamp"], m["target"], m["matched"]) == (
                t.recall_offset,
                t.slot_ms,
                f"{t.real_topic}+{t.uniq_key}",
                True,
            )


def test_classes_states_and_magic(synth_timers: StoreSummary) -> None:
    truth = _truth(synth_timers)
    got = Counter((t.kind, t.state, t.magic) for t in truth.timers)
    ten = TIMERS // 6
    assert got == {
        ("short", "delivered", timer.MAGIC_DEFAULT): ten,
        ("mid", "pending", timer.MAGIC_DEFAULT): ten,
        ("hours", "pending", timer.MAGIC_DEFAULT): ten,
        # More than the 2-day window ahead: marked to roll, half a window (1 day) on.
        ("roll", "pending", timer.MAGIC_DEFAULT | timer.MAGIC_ROLL): ten,
        ("recalled", "recalled", timer.MAGIC_DEFAULT): ten,
        ("rolled", "rolled", timer.MAGIC_DEFAULT | timer.MAGIC_ROLL): ten,
    }
    for t in truth.timers:
        if t.magic & timer.MAGIC_ROLL:
            assert t.slot_ms - t.slot_ms % 1000 == t.slot_ms < t.fire_ms - timer.DAY_SECS * 1000
    doc = run_json("timers", synth_timers.root, expect=0)
    pending = 4 * ten  # mid, hours, roll and the rolled ones' copies
    assert doc["counts"] == {
        "delivered": ten,
        "pending": pending,
        "recall_markers": ten,
        "recalled": ten,
        "rolled": ten,
    }
    [topic] = doc["topics"]
    assert (topic["real_topic"], topic["pending"], topic["rolling"]) == ("TopicA", pending, ten)
    assert (topic["delivered"], topic["recalled"]) == (ten, ten)
    assert topic["metrics_count"] == truth.metrics["TopicA"] == pending


def test_wheel_checkpoint_and_queue(synth_timers: StoreSummary) -> None:
    truth = _truth(synth_timers)
    doc = run_json("timers", synth_timers.root, expect=0)
    assert doc["wheel_slots_used"] == doc["wheel_slots_valid"] == len(truth.slots)
    # Each slot's num: its normal units minus its delete units, the histogram's sum.
    assert sum(b["units"] for b in doc["histogram"]) == sum(s[2] for s in truth.slots.values())
    cp = doc["timercheck"]
    assert (cp["last_read_timestamp"], cp["last_timer_log_flush_pos"]) == (
        truth.last_read_ms,
        truth.timerlog_units * timer.UNIT_SIZE,
    )
    assert (
        cp["last_timer_queue_offset"] == truth.timer_queue_offset == doc["timer_queue_max_offset"]
    )
    assert doc["not_enqueued"] == 0 and doc["findings"] == []
    assert doc["timerlog_end"] == truth.timerlog_units * timer.UNIT_SIZE


def test_delivered_and_roll_copies_carry_the_timer_properties(synth_timers: StoreSummary) -> None:
    truth = _truth(synth_timers)
    short = next(t for t in truth.timers if t.kind == "short")
    rolled = next(t for t in truth.timers if t.kind == "rolled")
    for offset, topic, extra in (
        (short.delivered_offset, "TopicA", {}),
        (rolled.roll_offset, timer.TIMER_TOPIC, {timer.TIMER_ROLL_TIMES: "1"}),
    ):
        doc = run_json("lookup", synth_timers.root, "--phy-offset", str(offset), expect=0)
        [m] = doc["messages"]
        p = m["properties"]
        t = short if topic == "TopicA" else rolled
        assert m["topic"] == topic and p[timer.TIMER_OUT_MS] == str(t.fire_ms)
        assert p["UNIQ_KEY"] == t.uniq_key and p["REAL_TOPIC"] == "TopicA"
        assert timer.TIMER_ENQUEUE_MS in p and timer.TIMER_DEQUEUE_MS in p
        assert {k: p.get(k) for k in extra} == extra


def test_verify_is_clean_and_synth_refuses_4_9(synth_timers: StoreSummary, tmp_path: Path) -> None:
    doc = run_json("verify", synth_timers.root, expect=0)
    assert doc["findings"] == []
    result = run("synth", str(tmp_path / "x"), "--timers", "6", "-q")
    assert result.exit_code == 2 and "--timers needs --profile 5.3" in result.stderr
    # fate's crash leaves its copies undispatched at the log's end: no timer message can follow
    # them dispatched. Refused before anything is written.
    out = tmp_path / "y"
    args = ("--profile", "5.3", "--messages", "300", "--crash", "--fate", "--timers", "6")
    result = run("synth", str(out), *args)
    assert result.exit_code == 2 and "--crash with --fate cannot add --timers" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("damage", "timer_kinds", "verify_checks"),
    [
        ("timer-cycle", {"timerlog.cycle"}, {"timer.chain"}),
        ("timer-cross-slot", {"timerlog.chain_into_other_slot"}, {"timer.chain"}),
        (
            "timer-truncated",
            {"timerlog.truncated", "timerlog.chain_outside_log"},
            {"timer.log", "timer.chain"},
        ),
        ("timer-commitlog-cut", {"timerlog.past_commitlog_end"}, {"timer.points_past_end"}),
    ],
)
def test_synth_timer_damage_is_a_finding(
    tmp_path: Path, damage: str, timer_kinds: set[str], verify_checks: set[str]
) -> None:
    store = tmp_path / "s"
    made = run(
        "synth", str(store), "--profile", "5.3", "-n", "40", "--timers", "30",
        "--damage", damage, "--json",
    )  # fmt: skip
    assert made.exit_code == 0, made.stderr
    [placed] = json.loads(made.stdout)["damage"]
    doc = run_json("timers", store, expect=1)
    assert {f["kind"] for f in doc["findings"]} == timer_kinds
    if damage in ("timer-cycle", "timer-cross-slot"):
        # The walk meets the unit the altered prevPos points at.
        [finding] = doc["findings"]
        assert re.search(rf"timerlog offset {placed['details']['prev_pos']}\b", finding["message"])
    elif damage == "timer-commitlog-cut":
        [finding] = doc["findings"]
        assert re.search(rf"commitlog offset {placed['details']['cut']}\b", finding["message"])
    checks = run_json("verify", store, expect=1)["summary"]["findings_by_check"]
    assert verify_checks <= set(checks)


def test_checkpoint_behind_through_the_cli(tmp_path: Path) -> None:
    store = tmp_path / "s"
    made = run(
        "synth", str(store), "--profile", "5.3", "-n", "20", "--timers", "12",
        "--damage", "timer-checkpoint-behind", "--json",
    )  # fmt: skip
    assert made.exit_code == 0, made.stderr
    doc = json.loads(made.stdout)
    [placed] = doc["damage"]
    assert placed["kind"] == "timer_checkpoint_behind"
    assert doc["timers"]["by_state"] == {"delivered": 2, "pending": 6, "recalled": 2, "rolled": 2}
    check = run_json("timers", store, expect=0)["timercheck"]
    assert check["last_read_timestamp"] == placed["details"]["last_read_time_ms"]
    assert check["last_timer_log_flush_pos"] == 0
