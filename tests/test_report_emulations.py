"""How often a command emulates the restart: ``report`` takes ``verify``'s prediction over (or
runs its own once) and judges the groups against it; ``verify`` of a store whose queues keep up
runs none."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqinspect.analysis.recovery import RecoverOptions, emulator
from rmqinspect.store.model import Store
from tests.cli_helpers import build_store, orders, run, run_json


@pytest.fixture
def emulations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per emulation, counted at its first step (``decide_last_exit``, which only
    ``run_recovery`` calls, through the emulator module: whichever module bound the entry)."""
    calls: list[int] = []
    original = emulator.decide_last_exit

    def counted(store: Store, options: RecoverOptions) -> tuple[bool, str]:
        calls.append(1)
        return original(store, options)

    monkeypatch.setattr(emulator, "decide_last_exit", counted)
    return calls


def _crashed(dest: Path, damage: tuple[str, ...]) -> Path:
    made = run(
        "synth", dest, "--messages", "300", "--topics", "2", "--queues", "2", "--crash",
        "--seed", "5", "--fate", *damage, "-q",
    )  # fmt: skip
    assert made.exit_code == 0, made.stderr
    return dest


# Undamaged, the crash leaves queues lagging: verify predicts the restart and report takes it
# over. A zeroed block cuts the commitlog before the lag: report emulates it itself.
# Exit 1 where the zeroed block loses data (and verify reports it).
@pytest.mark.parametrize(
    ("damage", "by_verify", "loses"), [((), 1, 0), (("--damage", "zero-region"), 0, 1)]
)
def test_report_of_a_crashed_store_emulates_the_restart_once(
    tmp_path: Path, emulations: list[int], damage: tuple[str, ...], by_verify: int, loses: int
) -> None:
    store = _crashed(tmp_path / "s", damage)
    run_json("verify", store, "-j", "1", expect=loses)
    assert len(emulations) == by_verify
    emulations.clear()
    # Before 4.9.4 an offset past its queue resets to 0: the crash makes groups replay.
    version = ("--broker-version", "4.9.3")
    doc = run_json("report", store, "--out", tmp_path / "r.html", *version, expect=loses)
    assert len(emulations) == 1
    # The one emulation speaks for both: recover's loss and the groups judged after it.
    emulations.clear()
    recovered = run_json("recover", store, "--lost-limit", "0", expect=loses)
    groups = run_json("groups", store, "--after-restart", *version, expect=1)
    assert len(emulations) == 2
    assert doc["lost_messages"] == recovered["lost_messages"]["count"]
    replaying = {g["group"]: g["replayed"] for g in groups["groups"] if g["replayed"]}
    assert doc["replaying_groups"] == replaying != {}


def test_report_of_a_clean_store_emulates_once_and_verify_not_at_all(
    tmp_path: Path, emulations: list[int]
) -> None:
    offsets = {"Orders@g1": {0: 3, 1: 4}}
    store = build_store(tmp_path / "s", orders(20), consumer_offsets=offsets)
    run_json("verify", store, "-j", "1", expect=0)
    assert emulations == []  # its offset check reads the queues on disk
    run_json("report", store, "--out", tmp_path / "r.html", expect=0)
    assert len(emulations) == 1
