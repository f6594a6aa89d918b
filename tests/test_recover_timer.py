"""``recover`` on stores with a 5.x timer store: the timer section (TimerMessageStore.recover)
fact by fact against the real 5.3.3 broker's restart of ``timer_clean`` and against what
``synth --timers`` placed, clean, with the commitlog cut under the timerlog
(apache/rocketmq#10668) and with a restart more than 7 days later."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rmqinspect.format import timer
from rmqinspect.format.profile import Profile
from rmqinspect.synth.layout import StoreSummary, TimerSummary
from rmqinspect.synth.timer_damage import checkpoint_behind, commitlog_cut_under_timer
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import StoreLayout
from tests.cli_helpers import run, run_json
from tests.conftest import restore_trimmed_store

DAY = 86_400_000


def end_of(truth: TimerSummary) -> int:
    return truth.timerlog_units * timer.UNIT_SIZE


def _synth(root: Path) -> StoreSummary:
    config = WorkloadConfig(messages=80, body_size=64, topics=2, queues=4, timers=36)
    return write_workload(root, config, StoreLayout(profile=Profile.V5_3))


def test_real_broker_restart_of_timer_clean(conformance_timer_dir: Path, tmp_path: Path) -> None:
    expected: dict[str, Any] = json.loads(
        (conformance_timer_dir / "expected/timer_clean.json").read_text("utf-8")
    )
    store = restore_trimmed_store(conformance_timer_dir, "timer_clean", tmp_path / "s")
    after = expected["brokerTimerStateAfterRestart"]
    start = after["brokerStartWallMs"]
    doc = run_json("recover", store, "--now", str(start), expect=0)
    t = doc["timer"]
    state = after["afterStart"]  # the broker's state once load() and recover() ran
    assert t["timerlog_end"] == state["timerLogMaxOffset"]
    assert t["timer_queue_offset"] == state["queueOffset"] == state["commitQueueOffset"]
    check = expected["timercheckReadByRealTimerCheckpoint"]["input"]
    assert (t["last_read_timestamp"], t["last_timer_log_flush_pos"]) == (
        check["lastReadTimeMs"],
        check["lastTimerLogFlushPos"],
    )
    # Down 89 s, not 7 days: reading resumes at lastReadTimeMs, and the 46 mid timers whose
    # slots it passed while down fire at once (none lost, all late).
    assert (t["read_timestamp"], t["read_rule"]) == (check["lastReadTimeMs"], "timercheck")
    restart = expected["summary"]["restart"]
    assert t["due_pending"] == restart["pendingFiredAfterRestart"] == 46
    assert t["skipped_pending"] == len(restart["lostDueButNotDelivered"]) == 0
    assert (t["units_cut"], t["enqueued_again"], t["units_dropped"]) == (0, 0, 0)
    assert t["fired_again"] == len(restart["keysWithSeveralTopicCopiesAfterRestart"]) == 0
    assert doc["verdict"] == "no_loss"


def test_synth_clean_restart(tmp_path: Path) -> None:
    summary = _synth(tmp_path / "s")
    truth = summary.timers
    assert truth is not None
    doc = run_json("recover", summary.root, expect=0)
    t = doc["timer"]
    end = truth.timerlog_units * timer.UNIT_SIZE
    assert (t["timerlog_end"], t["last_timer_log_flush_pos"], t["timerlog_end_reason"]) == (
        end,
        end,
        "zeros",
    )
    assert t["queue_offset_from_log"] == truth.timer_queue_offset - 1
    assert t["timer_queue_offset"] == t["timer_queue_max_offset"] == truth.timer_queue_offset
    assert (t["read_timestamp"], t["read_rule"]) == (truth.last_read_ms, "timercheck")
    assert (t["units_cut"], t["slots_revised"], t["slots_past_end"]) == (0, 0, 0)


def test_synth_restart_after_nine_days_skips_pending(tmp_path: Path) -> None:
    summary = _synth(tmp_path / "s")
    truth = summary.timers
    assert truth is not None
    now = truth.last_read_ms + 9 * DAY
    doc = run_json("recover", summary.root, "--now", str(now), expect=0)
    t = doc["timer"]
    read = timer.restart_read_ms(truth.last_read_ms, now)
    assert read == now - (timer.SLOTS_TOTAL - timer.TIMER_BLANK_SLOTS) * 1000 > truth.last_read_ms
    assert (t["read_timestamp"], t["read_rule"]) == (read, "seven_days_back")
    # Pending units: mid, hours, roll (at +1 day) and the rolled ones' copies (at their fire
    # time, +1 day 6 h); all lie before the new read time (+2 days), so the restart skips
    # every one of them.
    pending = [p for p in truth.timers if p.state == "pending"]
    slots = [p.slot_ms for p in pending] + [
        p.fire_ms for p in truth.timers if p.roll_offset is not None
    ]
    assert t["skipped_pending"] == sum(s < read for s in slots) == len(slots)
    assert t["due_pending"] == 0


def test_commitlog_cut_under_the_timerlog(tmp_path: Path) -> None:
    summary = _synth(tmp_path / "s")
    truth = summary.timers
    assert truth is not None
    cut = commitlog_cut_under_timer(summary.root, summary.commitlog_end).details["cut"]
    assert isinstance(cut, int)
    # Zeros are no records: the restart itself destroys nothing (the loss came before it).
    doc = run_json("recover", summary.root, expect=0)
    t = doc["timer"]
    # Every timer-topic record at or past the cut: first records, roll copies, recall markers.
    records = {p.physical_offset: (p.timerlog_offset, p.queue_offset) for p in truth.timers}
    records |= {
        p.roll_offset: (p.roll_timerlog_offset, None) for p in truth.timers if p.roll_offset
    }
    records |= {
        p.recall_offset: (p.recall_timerlog_offset, None) for p in truth.timers if p.recall_offset
    }
    gone = sorted(v[0] for k, v in records.items() if k is not None and k >= cut)
    assert gone and t["units_cut"] == len(gone)
    assert [u["timerlog_offset"] for u in t["units_cut_listed"]] == gone
    # The last unit's record is gone: reviseQueueOffset finds nothing, timercheck's offset is
    # past the cut queue, so enqueueing resumes at the timer queue's new max.
    assert t["queue_offset_from_log"] is None
    assert t["timer_queue_offset"] == t["timer_queue_max_offset"] < truth.timer_queue_offset
    assert "lowered to the queue's max offset" in t["queue_offset_rule"]


def test_wrong_size_timerwheel_stops_the_broker(tmp_path: Path) -> None:
    summary = _synth(tmp_path / "s")
    with open(summary.root / "timerwheel", "r+b") as fh:
        fh.truncate(timer.WHEEL_FILE_SIZE - timer.SLOT_SIZE)
    doc = run_json("recover", summary.root, expect=1)
    assert doc["broker_starts"] is False and doc["verdict"] == "refuses_to_start"
    assert [f["kind"] for f in doc["load_failures"]] == ["timerwheel_wrong_size"]


def test_table(tmp_path: Path, wide_console: None) -> None:
    summary = _synth(tmp_path / "s")
    result = run("recover", summary.root, "--format", "table")
    assert result.exit_code == 0, result.stderr
    assert "Timer store after the restart" in result.stdout
    line = next(x for x in result.stdout.splitlines() if "enqueue resumes at" in x)
    assert f"{summary.timers.timer_queue_offset if summary.timers else -1} (" in line


def test_checkpoint_behind_fires_delivered_and_rolled_again(tmp_path: Path) -> None:
    """A crash before timercheck caught up with the dequeue (synth's timer-checkpoint-behind):
    the restart reads the slots already fired from again, storing a second delivered copy of
    each short timer and a second roll copy of each rolled one (timer_crash_early's
    duplicates)."""
    summary = _synth(tmp_path / "s")
    truth = summary.timers
    assert truth is not None
    back = checkpoint_behind(summary.root).details["last_read_time_ms"]
    assert back == min([p.slot_ms for p in truth.timers] + [p.fire_ms for p in truth.timers])
    t = run_json("recover", summary.root, expect=0)["timer"]
    assert (t["read_timestamp"], t["read_rule"]) == (back, "timercheck")
    assert t["last_timer_log_flush_pos"] == 0 and t["timerlog_end"] == end_of(truth)
    fired = [p for p in truth.timers if p.state in ("delivered", "rolled")]
    assert t["fired_again"] == len(fired) == sum(p.slot_ms >= back for p in fired) > 0


def test_truncated_timerlog(tmp_path: Path) -> None:
    summary = _synth(tmp_path / "s")
    truth = summary.timers
    assert truth is not None
    log = summary.root / "timerlog" / f"{0:020d}"
    os.truncate(log, truth.timerlog_units * timer.UNIT_SIZE - timer.UNIT_SIZE // 2)
    t = run_json("recover", summary.root, expect=0)["timer"]
    assert t["timerlog_end"] == (truth.timerlog_units - 1) * timer.UNIT_SIZE
    assert (t["timerlog_units"], t["flushed_units_lost"]) == (truth.timerlog_units - 1, 1)
    # The lost unit's slot still ends at it: reviseSlot moves it back to an earlier unit of the
    # slot, or, alone in its slot, it points past the end.
    last = truth.timerlog_units - 1
    alone = sum(1 for s in truth.slots.values() if s[1] == last * timer.UNIT_SIZE and s[0] == s[1])
    assert (t["slots_revised"], t["slots_past_end"]) == (1 - alone, alone)


def test_synth_crash_after_the_roll_copies(tmp_path: Path) -> None:
    """synth --timers --crash: the roll copies are past the reput (no units yet) and the
    checkpoint is before their roll slot. The restart dispatches them into the timer queue, the
    timer enqueues them from where its log ends, and fires the rolled ones' slots again."""
    config = WorkloadConfig(messages=80, body_size=64, topics=2, queues=4, timers=36, crash=True)
    summary = write_workload(tmp_path / "s", config, StoreLayout(profile=Profile.V5_3))
    truth = summary.timers
    assert truth is not None and summary.crashed
    rolled = [p for p in truth.timers if p.kind == "rolled"]
    assert rolled and all(
        p.roll_offset is not None and p.roll_timerlog_offset is None and p.state == "pending"
        for p in rolled
    )
    doc = run_json("recover", summary.root, expect=0)
    assert doc["recovery_path"] == "abnormal"
    t = doc["timer"]
    assert (t["read_timestamp"], t["timer_queue_offset"]) == (
        truth.last_read_ms,
        truth.timer_queue_offset,
    )
    assert t["timer_queue_max_offset"] == truth.timer_queue_offset + len(rolled)
    assert t["to_enqueue"] == len(rolled) and t["enqueued_again"] == 0
    # The rolled ones' first units sit in the slot after the read time, before the newest
    # store time (the default "now"): due at once.
    assert all(truth.last_read_ms <= p.slot_ms for p in rolled)
    assert t["due_pending"] == len(rolled)
    counts = run_json("timers", summary.root, expect=0)["counts"]
    assert (counts["due"], counts.get("rolled", 0)) == (len(rolled), 0)
