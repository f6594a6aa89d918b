"""``synth --fate``: the chains of copies consumers, the schedule service and the transaction
check leave, read back with the project's own commands and checked fact by fact against the
rules the real 4.9.8 broker followed (``conformance-consume`` README, "What the real code did")."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.format.commitlog import DEFAULT_DELAY_LEVELS, parse_delay_levels
from rmqinspect.format.profile import Profile
from rmqinspect.synth.layout import FateSummary
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import StoreLayout
from tests.cli_helpers import run, run_json, run_jsonl
from tests.conftest import DemoStore, demo_args

LAYOUT = StoreLayout(commitlog_file_size=1 << 20, cq_file_size=6000)
DELAYS = parse_delay_levels(DEFAULT_DELAY_LEVELS)
# Small files: a commitlog of 1 MiB, consume queues of 300 units, index of 500 slots.
SMALL = (
    "--commitlog-file-size",
    "1048576",
    "--cq-file-size",
    "6000",
    "--index-slots",
    "500",
    "--index-entries",
    "2000",
)
RETRY = "%RETRY%groupRetry"
DLQ = "%DLQ%groupRetry"
SCHEDULE = "SCHEDULE_TOPIC_XXXX"


def _write(root: Path, profile: Profile = Profile.V4_9, **kw: Any) -> FateSummary:
    config = WorkloadConfig(messages=kw.pop("messages", 1500), body_size=100, fate=True, **kw)
    summary = write_workload(root, config, StoreLayout(profile=profile, **_small()))
    assert summary.fate is not None
    return summary.fate


def _small() -> dict[str, int]:
    return {"commitlog_file_size": LAYOUT.commitlog_file_size, "cq_file_size": 6000}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FateSummary, list[Any]]:
    root = tmp_path_factory.mktemp("fate") / "store"
    fate = _write(root, seed=7)
    return root, fate, run_jsonl("messages", root, "--body", "none", expect=0)


def _by_uniq(records: list[Any]) -> dict[str, list[Any]]:
    chains: dict[str, list[Any]] = defaultdict(list)
    for r in records:
        if r["uniq_key"]:
            chains[r["uniq_key"]].append(r)
    return chains


def test_counts_by_role_match_the_summary(clean: tuple[Path, FateSummary, list[Any]]) -> None:
    _, fate, records = clean
    by_topic: dict[str, int] = defaultdict(int)
    for r in records:
        by_topic[r["topic"]] += 1
    p = [r["properties"] for r in records]
    retry_schedule = sum(
        1
        for r, q in zip(records, p, strict=True)
        if r["topic"] == SCHEDULE and q.get("REAL_TOPIC") == RETRY
    )
    delivered = sum(
        1
        for r, q in zip(records, p, strict=True)
        if r["topic"].startswith("Topic") and "REAL_TOPIC" in q and "DELAY" in q
    )
    assert by_topic[RETRY] == fate.retry > 0
    assert by_topic[DLQ] == fate.dlq > 0
    assert retry_schedule == fate.retry_schedule
    assert by_topic[SCHEDULE] == fate.retry_schedule + fate.schedule
    assert delivered == fate.scheduled_delivery > 0
    assert fate.pop_retry == 0  # 4.9: no POP consumers
    assert by_topic["RMQ_SYS_TRACE_TOPIC"] == fate.trace_messages > 0
    assert fate.chains > 0


def test_every_dlq_chain_is_the_real_broker_s(clean: tuple[Path, FateSummary, list[Any]]) -> None:
    """Failed at reconsumeTimes 0..3: three schedule copies (levels 3, 4, 5 in queues 2, 3, 4),
    three retry copies, then the DLQ copy with reconsumeTimes 4 and DELAY=0."""
    _, fate, records = clean
    chains = _by_uniq(records)
    dlq_keys = [r["uniq_key"] for r in records if r["topic"] == DLQ and r["uniq_key"]]
    assert fate.examples["dlq"] in dlq_keys
    checked = 0
    for uniq in dlq_keys:
        chain = chains[uniq]
        first = next(r for r in chain if r["topic"] == "TopicA")
        origin = first["msg_id"]
        copies = [r for r in chain if r["properties"].get("RETRY_TOPIC")]
        roles = [(r["topic"], r["reconsume_times"]) for r in copies]
        assert roles == [
            (SCHEDULE, 1),
            (RETRY, 1),
            (SCHEDULE, 2),
            (RETRY, 2),
            (SCHEDULE, 3),
            (RETRY, 3),
            (DLQ, 4),
        ]
        stamps = [r["store_timestamp"] for r in copies]
        assert stamps == sorted(stamps) and stamps[0] >= first["store_timestamp"]
        for n, r in enumerate(copies):
            p = r["properties"]
            assert p["RETRY_TOPIC"] == "TopicA"
            assert p["ORIGIN_MESSAGE_ID"] == origin
            assert p["WAIT"] == "false"
            assert p["REAL_TOPIC"] == RETRY and p["REAL_QID"] == "0"
            for name in ("UNIQ_KEY", "KEYS", "TAGS", "seq"):
                assert p.get(name) == first["properties"].get(name)
            assert r["body_crc"] == first["body_crc"]
            # A send-back is stored by the broker; the schedule delivery copies its unit's host.
            assert r["store_host"] == "10.0.0.1:10911"
            assert r["born_timestamp"] == first["born_timestamp"]
            level = 3 + n // 2
            if r["topic"] == SCHEDULE:
                assert (p["DELAY"], r["queue_id"]) == (str(level), level - 1)
                delivered = copies[n + 1]
                assert delivered["store_timestamp"] >= r["store_timestamp"] + DELAYS[level]
            elif r["topic"] == RETRY:
                assert (p["DELAY"], r["queue_id"]) == (str(level), 0)
            else:
                assert (p["DELAY"], r["queue_id"]) == ("0", 0)
        checked += 1
    assert checked > 0


def test_delayed_sends_and_the_delays_command(
    clean: tuple[Path, FateSummary, list[Any]],
) -> None:
    root, fate, records = clean
    originals = [
        r for r in records if r["topic"] == SCHEDULE and "RETRY_TOPIC" not in r["properties"]
    ]
    assert len(originals) == fate.schedule
    delivered = {
        r["uniq_key"]: r
        for r in records
        if r["topic"].startswith("Topic") and "DELAY" in r["properties"]
    }
    pending = 0
    for s in originals:
        p = s["properties"]
        assert p["WAIT"] == "true" and s["queue_id"] == int(p["DELAY"]) - 1
        copy = delivered.get(s["uniq_key"]) if s["uniq_key"] else None
        if int(p["DELAY"]) >= 17:  # an hour or two: still waiting at the end
            assert copy is None
            pending += 1
        elif copy is not None:
            assert (copy["topic"], copy["queue_id"]) == (p["REAL_TOPIC"], int(p["REAL_QID"]))
            assert copy["properties"] == p
            assert copy["store_host"] == s["store_host"] and copy["body_crc"] == s["body_crc"]
            assert copy["store_timestamp"] >= s["store_timestamp"] + DELAYS[int(p["DELAY"])]
    assert pending > 0
    assert fate.examples["pending_delay"] in {s["uniq_key"] for s in originals}
    report = run_json("delays", root, expect=0)
    offsets = (root / "config" / "delayOffset.json").read_text()
    for level in report["levels"]:
        assert f"{level['level']}:{level['offset']}" in offsets
        if level["level"] >= 17:
            assert level["pending"] == level["max_offset"] > 0 and level["offset"] == 0
        else:
            assert level["pending"] == 0 and level["offset"] == level["max_offset"]
    assert sum(level["pending"] for level in report["levels"]) == fate.pending_delays


def test_schedule_units_carry_their_deliver_time(
    clean: tuple[Path, FateSummary, list[Any]],
) -> None:
    """tagsCode of a SCHEDULE_TOPIC_XXXX unit = store time + the level's delay, for delayed
    sends and send-backs alike."""
    root, _, _ = clean
    seen = set()
    for level in (2, 3, 4, 5, 17, 18):
        units = run_jsonl("consumequeue", root, SCHEDULE, str(level - 1), expect=0)
        for u in units:
            m = u["message"]
            assert u["tags_code"] == m["store_timestamp"] + DELAYS[level]
            assert m["properties"]["DELAY"] == str(level)
            seen.add((level, "RETRY_TOPIC" in m["properties"]))
    # Levels 3-5 hold send-backs, levels 2, 3, 5, 17 and 18 delayed sends.
    assert {(3, True), (4, True), (5, True), (2, False), (17, False), (18, False)} <= seen


def test_transactions_by_state(clean: tuple[Path, FateSummary, list[Any]]) -> None:
    root, fate, records = clean
    report = run_json("transactions", root, expect=0)
    assert report["counts"] == fate.transactions
    assert all(fate.transactions[s] > 0 for s in ("committed", "rolled_back", "pending"))
    assert report["findings"] == []
    assert report["records"]["commit"] == fate.commit_records
    assert report["records"]["op"] == fate.op_records
    assert report["records"]["half"] == fate.half_checks + sum(fate.transactions.values())
    ops = [r for r in records if r["topic"] == "RMQ_SYS_TRANS_OP_HALF_TOPIC"]
    assert ops and all(r["tags"] == "d" and r["body"] is None for r in ops)
    pending = [t for t in report["transactions"] if t["state"] == "pending"]
    assert fate.examples["pending_transaction"] in {t["uniq_key"] for t in pending}


def test_the_offset_beyond_max_and_the_groups(clean: tuple[Path, FateSummary, list[Any]]) -> None:
    root, fate, _ = clean
    group, topic, queue_id, committed, max_offset = fate.offset_ahead
    report = run_json("offsets", root, expect=0)  # a warning, as the other offset findings
    rows = {(r["group"], r["topic"], r["queue_id"]): r for r in report["offsets"]}
    ahead = rows[(group, topic, queue_id)]
    assert (ahead["offset"], ahead["max_offset"], ahead["status"]) == (
        committed,
        max_offset,
        "above_max",
    )
    others = [r for k, r in rows.items() if k != (group, topic, queue_id) and r["group"]]
    assert others and {r["status"] for r in others} == {"ok"}
    # A clean shutdown after every chain ended: each group committed its queues to the end.
    retry = rows[("groupRetry", RETRY, 0)]
    assert retry["offset"] == retry["max_offset"] == fate.retry
    groups = (root / "config" / "subscriptionGroup.json").read_text()
    assert (
        '"groupName":"groupRetry",\n\t\t\t"notifyConsumerIdsChangedEnable":true,\n\t\t\t"retryMaxTimes":3'
        in groups
    )


def test_a_crash_while_retries_and_delays_are_in_flight(tmp_path: Path) -> None:
    root = tmp_path / "s"
    summary = write_workload(
        root, WorkloadConfig(messages=5000, body_size=100, seed=8, crash=True, fate=True), LAYOUT
    )
    fate = summary.fate
    assert fate is not None and summary.crashed
    assert summary.dispatched < summary.messages  # copies past the consume queues
    assert fate.retry_schedule > fate.retry  # sent back, not delivered yet
    records = run_jsonl("messages", root, "--body", "none", expect=0)
    report = run_json("offsets", root, expect=0)
    committed = {(r["group"], r["topic"], r["queue_id"]): r["offset"] for r in report["offsets"]}
    # A retry copy groupRetry took after its last persisted offset: at or past that offset,
    # so the restart hands it over again.
    uniq = fate.examples["consumed_past_commit"]
    retried = [r["queue_offset"] for r in records if r["uniq_key"] == uniq and r["topic"] == RETRY]
    assert retried and max(retried) >= committed[("groupRetry", RETRY, 0)]
    # A schedule unit delivered after the last persisted delayOffset: at or past it, and its
    # delivered copy is on disk (the restart delivers it a second time).
    uniq = fate.examples["delivered_past_delay_offset"]
    units = [r for r in records if r["uniq_key"] == uniq and r["topic"] == SCHEDULE]
    levels = {lv["level"]: lv["offset"] for lv in run_json("delays", root, expect=0)["levels"]}
    last = units[-1]
    assert last["queue_offset"] >= levels[int(last["properties"]["DELAY"])]
    real = last["properties"]["REAL_TOPIC"]
    assert any(
        r["uniq_key"] == uniq
        and r["topic"] == real
        and r["physical_offset"] > last["physical_offset"]
        and r["properties"]["DELAY"] == last["properties"]["DELAY"]
        for r in records
    )


@pytest.mark.parametrize(
    ("profile", "topic"),
    [
        (Profile.V5_1, "%RETRY%groupPop_TopicB"),
        (Profile.V5_3, "%RETRY%groupPop+TopicB"),
    ],
)
def test_pop_retry_topics_and_batched_ops(tmp_path: Path, profile: Profile, topic: str) -> None:
    fate = _write(tmp_path / "s", profile, messages=600, seed=5)
    records = run_jsonl("messages", tmp_path / "s", "--body", "text", expect=0)
    pops = [r for r in records if r["topic"] == topic]
    assert len(pops) == fate.pop_retry > 0
    assert all(r["reconsume_times"] >= 1 and "1ST_POP_TIME" in r["properties"] for r in pops)
    ops = [r["body"] for r in records if r["topic"] == "RMQ_SYS_TRANS_OP_HALF_TOPIC"]
    assert ops and all(b.endswith(",") and b[:-1].replace(",", "").isdigit() for b in ops)


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_same_seed_same_bytes_and_no_fate_no_change(tmp_path: Path) -> None:
    for name in ("a", "b"):
        args = ("-n", "500", "--seed", "3", "--fate", "--crash", *SMALL)
        assert run("synth", tmp_path / name, *args, "-q").exit_code == 0
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    # Without --fate the bytes are those the generator wrote before it existed.
    config = WorkloadConfig(messages=400, body_size=100, seed=3, crash=True)
    write_workload(tmp_path / "off", config, LAYOUT)
    assert _digest(tmp_path / "off") == (
        "2ad74ca16ce22db277929ae4fb9c04076aaff8cf6a328d2970aa1ee532320296"
    )


def test_make_demo_holds_the_cases_the_readme_walks_through(demo_store: DemoStore) -> None:
    """The demo store's cases, by UNIQ_KEY (the README's worked investigation names them)."""
    store = demo_store.root
    fate = demo_store.synth["fate"]
    assert fate["examples"] == {
        "dlq": "0A0000024A8BAF266A9500000057002E",
        "pending_transaction": "0A0000024A8BAF266A950000075F00CB",
        "pending_delay": "FD0000000000000000000000000000024A8BAF266A950000000F0001",
        "retried_then_consumed": "FD0000000000000000000000000000024A8BAF266A95000000E40014",
        "consumed_past_commit": "0A0000024A8BAF266A9500001C580291",
        "delivered_past_delay_offset": "0A0000024A8BAF266A9500002B1D0437",
    }
    assert fate["offset_ahead"] == {
        "group": "groupOK",
        "topic": "TopicA",
        "queue_id": 1,
        "offset": 1381,
        "max_offset": 381,
    }
    # The exits the Makefile asserts: the cut at the zeroed block leaves delayOffset.json past
    # levels 2-5's queues (flagged); the transactions read back whole.
    assert run("delays", store, *demo_args("delays")).exit_code == 1
    assert run("transactions", store, *demo_args("transactions")).exit_code == 0
    report = run_json("transactions", store, expect=0)
    assert report["counts"] == fate["transactions"]
