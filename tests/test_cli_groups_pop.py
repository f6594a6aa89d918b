"""``groups`` on POP groups: a POP group's committed offset moves at pop time, so ``groups``
shows its checkpoints as ``pop`` reads them (outstanding: in flight + awaiting revive; what a
restart revives again), fact by fact against ``synth --fate --pop``'s truth and on the
hand-placed records of ``tests/test_cli_pop.py``; stores without POP records pay nothing."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from rmqinspect.analysis import groups as groups_module
from rmqinspect.format.profile import Profile
from rmqinspect.synth.fate import GROUP_POP
from rmqinspect.synth.layout import FateSummary
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import StoreLayout
from tests.cli_helpers import build_store, orders, run, run_json
from tests.test_cli_pop import GROUP, NOW, _placed_store


@pytest.fixture(scope="module", params=[False, True], ids=["clean", "crash"])
def synth_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, FateSummary]:
    root = tmp_path_factory.mktemp("popgroups") / "store"
    layout = StoreLayout(profile=Profile.V5_3, commitlog_file_size=1 << 20, cq_file_size=6000)
    config = WorkloadConfig(
        messages=400, topics=2, queues=2, seed=29, crash=request.param, fate=True, pop=True
    )
    summary = write_workload(root, config, layout)
    assert summary.fate is not None
    return root, summary.fate


def _pop_group(doc: dict[str, object], name: str) -> dict[str, object]:
    groups = doc["groups"]
    assert isinstance(groups, list)
    return next(g for g in groups if g["group"] == name)


def test_groups_says_a_pop_groups_checkpoints_fact_by_fact(
    synth_store: tuple[Path, FateSummary],
) -> None:
    root, fate = synth_store
    pops = fate.pop
    assert len(pops) > 50 and any(t.acked for t in pops) and any(not t.acked for t in pops)
    # At the newest store time every chain has ended (acked, else revived): nothing outstanding.
    doc = run_json("groups", root, expect=1)  # groupOK's overflow, as without POP
    g = _pop_group(doc, GROUP_POP)
    pop = g["pop"]
    assert pop["group"] == GROUP_POP and pop["checkpoints"] == len(pops)
    assert pop["topics"] == sorted({t.topic for t in pops})
    assert pop["counts"] == {
        "in_flight": 0,
        "awaiting_revive": 0,
        "acked": sum(t.acked for t in pops),
        "revived": sum(not t.acked for t in pops),
    }
    assert (pop["outstanding"], pop["revive_uncommitted"]) == (0, 0)
    assert pop["retry_copies"] == fate.pop_retry
    # Only the POP group has checkpoints; the reference is pop's clock.
    assert [x["group"] for x in doc["groups"] if x["pop"] is not None] == [GROUP_POP]
    assert doc["reference_basis"] == "the store's newest store time"
    # Mid-way, the messages popped and not acked whose invisible time is not over are in
    # flight: the lag (offsets moved at pop time) leaves them out.
    now = int(statistics.median(t.pop_time for t in pops))
    mid = _pop_group(run_json("groups", root, "--now", str(now), expect=1), GROUP_POP)
    in_flight = sum(1 for t in pops if not t.acked and t.revive_time > now)
    assert 0 < in_flight < len(pops)
    assert mid["pop"]["counts"]["in_flight"] == mid["pop"]["outstanding"] == in_flight
    assert mid["pop"]["counts"]["revived"] == sum(
        1 for t in pops if not t.acked and t.revive_time <= now
    )
    assert mid["lag"] == g["lag"] == 0
    assert f"lag leaves out the {in_flight} popped message(s) not acked" in " ".join(mid["notes"])
    # One home: what pop says of the group, as it is.
    [said] = run_json("pop", root, "--now", str(now), expect=0)["groups"]
    assert mid["pop"] == said


def test_groups_on_placed_pop_records(tmp_path: Path) -> None:
    root = _placed_store(tmp_path / "s")
    # gp is flagged for its POP retry queue, which has no committed offset (read from 0).
    result = run("groups", root, "--group", GROUP, "--format", "json")
    assert result.exit_code == 1, result.stderr
    [g] = (doc := json.loads(result.stdout))["groups"]
    assert [f.split(":")[0] for f in g["findings"]] == [f"%RETRY%{GROUP}+TopicP/0"]
    assert (doc["reference_timestamp"], doc["reference_basis"]) == (
        NOW,
        "the store's newest store time",
    )
    # gp's committed offset (6) is past every message: the lag says nothing is owed.
    assert g["lag"] == 0
    pop = g["pop"]
    assert pop["counts"] == {"in_flight": 1, "awaiting_revive": 1, "acked": 2, "revived": 2}
    assert (pop["outstanding"], pop["revive_uncommitted"]) == (2, 1)
    notes = " ".join(g["notes"])
    assert "lag leaves out the 2 popped message(s) not acked (1 in flight, 1 awaiting revive)" in (
        notes
    )
    assert "1 revived message(s) whose checkpoints the revive service's persisted" in notes
    # Said, not gated on (as pop says it): no finding, a line on stderr, the table's title.
    assert f"{GROUP}: a restart revives 1 POP message(s) again" in result.stderr
    table = run("groups", root, "--group", GROUP, "--format", "table")
    assert "POP outstanding 2, 1 revived again by a restart" in " ".join(table.stdout.split())


def test_a_group_named_only_by_its_v2_pop_retry_topic(tmp_path: Path) -> None:
    """``%RETRY%gp2+TopicP`` names group gp2 (KeyBuilder.parseGroup splits at the "+"), not a
    group "gp2+TopicP", though gp2 has no offsets, subscription or retry topic of its own."""
    root = _placed_store(tmp_path / "s")
    names = {g["group"] for g in run_json("groups", root, expect=1)["groups"]}
    assert f"{GROUP}2" in names
    assert not [n for n in names if "+" in n]


def test_groups_without_pop_records_does_not_read_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("pop's walk on a store without revive or timer queues")

    monkeypatch.setattr(groups_module, "pop_report", refused)
    store = build_store(tmp_path / "s", orders(10), consumer_offsets={"Orders@g1": {0: 5, 1: 5}})
    doc = run_json("groups", store, expect=0)
    assert [(g["group"], g["pop"], g["lag"]) for g in doc["groups"]] == [("g1", None, 0)]
    assert doc["reference_basis"] == "not needed"
