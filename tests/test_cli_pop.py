"""``rmqinspect pop``: POP checkpoints and acks written the way the broker writes them
(``PopMessageProcessor.buildCkMsg``, ``AckMessageProcessor.appendAck``, through the timer), on
hand-placed stores and fact by fact on ``synth --fate --pop`` stores."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.format import pop
from rmqinspect.format import properties as props
from rmqinspect.format.fastjson import loads
from rmqinspect.format.profile import Profile
from rmqinspect.format.timer import TIMER_OUT_MS, TIMER_TOPIC
from rmqinspect.synth.fate import GROUP_POP
from rmqinspect.synth.layout import FateSummary
from rmqinspect.synth.pop import BROKER_NAME, REVIVE_TOPIC, PopTruth
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import MessageSpec, StoreLayout
from tests.cli_helpers import SMALL_LAYOUT, SMALL_OPTS, build_store, orders, run, run_json

T0 = 1_700_000_000_000
LAYOUT = replace(SMALL_LAYOUT, profile=Profile.V5_3)
GROUP = "gp"
TOPIC = "TopicP"
PROGRESS = f"{REVIVE_TOPIC}@{pop.REVIVE_GROUP}"


def _ck(so: int, pt: int, it: int, n: int = 1, **over: Any) -> pop.CheckPoint:
    ck = pop.CheckPoint(so, pt, it, 0, n, 0, TOPIC, GROUP, 0, tuple(range(n)), BROKER_NAME, None)
    return replace(ck, **over)


def _spec(body: bytes, tag: str, uniq: str, at: int, revive_qid: int, timer: bool) -> MessageSpec:
    """The timer's copy (``rmq_sys_wheel_timer`` queue 0, ``REAL_*``) or the delivered one."""
    p = {props.TAGS: tag, props.UNIQ_KEY: uniq}
    if timer:
        p |= {props.REAL_TOPIC: REVIVE_TOPIC, props.REAL_QID: str(revive_qid), TIMER_OUT_MS: "0"}
        return MessageSpec(topic=TIMER_TOPIC, body=body, properties=p, store_timestamp=at)
    return MessageSpec(
        topic=REVIVE_TOPIC, queue_id=revive_qid, body=body, properties=p, store_timestamp=at
    )


def _ck_specs(
    ck: pop.CheckPoint, qid: int, delivered: bool, body: bytes | None = None
) -> list[MessageSpec]:
    raw = pop.encode_checkpoint(ck) if body is None else body
    uniq = pop.ck_unique_id(ck)
    out = [_spec(raw, pop.CK_TAG, uniq, ck.pop_time, qid, True)]
    if delivered:
        out.append(_spec(raw, pop.CK_TAG, uniq, ck.revive_time - 1000, qid, False))
    return out


def _ack_spec(ack: pop.Ack, at: int, qid: int, timer: bool) -> MessageSpec:
    tag = pop.BATCH_ACK_TAG if ack.batch else pop.ACK_TAG
    return _spec(pop.encode_ack(ack), tag, pop.ack_unique_id(ack), at, qid, timer)


def _ack(ck: pop.CheckPoint, offset: int, batch: bool = False) -> pop.Ack:
    return pop.Ack(
        (offset,), ck.start_offset, ck.group, ck.topic, ck.queue_id, ck.pop_time,
        ck.broker_name, batch,
    )  # fmt: skip


# Checkpoints of the hand-placed store: A (2 messages, acked by an ack and a bAck the timer
# still holds), B (revived: the progress is past it, one retry copy), C (long field names, due
# and not passed: awaiting revive, overdue), D (in flight, still in the timer), E (not passed,
# but a retry copy was stored at its revive time: the persisted progress lags the revive).
CK_A = _ck(0, T0 + 10, 60_000, n=2)
CK_B = _ck(2, T0 + 20, 10_000)
CK_C = _ck(3, T0 + 30, 10_000)
CK_D = _ck(4, T0 + 150_000, 100_000)
CK_E = _ck(5, T0 + 40, 10_000)
NOW = T0 + 200_000


def _long_names(ck: pop.CheckPoint) -> bytes:
    """What builds before the ``@JSONField`` names wrote: the getters' names."""
    return (
        f'{{"startOffset":{ck.start_offset},"popTime":{ck.pop_time},'
        f'"invisibleTime":{ck.invisible_time},"bitMap":0,"num":{ck.num},"queueId":0,'
        f'"topic":"{TOPIC}","cid":"{GROUP}","reviveOffset":0}}'
    ).encode()


def _placed_store(root: Path) -> Path:
    sources = [
        MessageSpec(topic=TOPIC, body=b"m", uniq_key=f"U{i}", store_timestamp=T0) for i in range(6)
    ]
    retries = [
        MessageSpec(
            topic=f"%RETRY%{GROUP}+{TOPIC}",
            body=b"m",
            uniq_key=f"U{ck.start_offset}",
            properties={pop.FIRST_POP_TIME: str(ck.pop_time)},
            reconsume_times=1,
            store_timestamp=ck.revive_time + 5,
        )
        for ck in (CK_B, CK_E)
    ]
    # Another group's POP retry topic, whose name starts with gp's: not gp's copy.
    other = replace(retries[0], topic=f"%RETRY%{GROUP}2+{TOPIC}", uniq_key="U0")
    specs = [
        *sources,
        *_ck_specs(CK_A, 0, True),
        *_ck_specs(CK_B, 1, True),
        *_ck_specs(CK_C, 1, True, _long_names(CK_C)),
        *_ck_specs(CK_E, 1, True),
        _ack_spec(_ack(CK_A, 0), T0 + 40, 0, True),
        _ack_spec(_ack(CK_A, 0), CK_A.revive_time, 0, False),
        _ack_spec(_ack(CK_A, 1, batch=True), T0 + 41, 0, True),  # not delivered yet
        *retries,
        other,
        *_ck_specs(CK_D, 2, False),
        MessageSpec(topic="Other", body=b"x", store_timestamp=NOW),
    ]
    specs.sort(key=lambda s: s.store_timestamp or 0)
    # Revive queue 0: A's ck and ack are done with; queue 1: B's ck (offset 0), not C's or E's.
    offsets = {PROGRESS: {0: 2, 1: 1}, f"{TOPIC}@{GROUP}": {0: 6}}
    return build_store(root, specs, LAYOUT, consumer_offsets=offsets)


def test_pop_states_on_placed_records(tmp_path: Path) -> None:
    root = _placed_store(tmp_path / "s")
    doc = run_json("pop", root, expect=1)
    assert (doc["reference_timestamp"], doc["reference_basis"]) == (
        NOW,
        "the store's newest store time",
    )
    states = {(m["queue_offset"]): m["state"] for m in doc["messages"]}
    assert states == {
        0: "acked",
        1: "acked",
        2: "revived",
        3: "awaiting_revive",
        4: "in_flight",
        5: "revived",
    }
    by_offset = {m["queue_offset"]: m for m in doc["messages"]}
    assert by_offset[2]["revived"] == 1 and by_offset[2]["uniq_key"] == "U2"
    assert by_offset[0]["revived"] == 0
    assert by_offset[4]["invisible_until"] == CK_D.revive_time
    assert [m["uniq_key"] for m in doc["messages"]] == [f"U{i}" for i in range(6)]
    assert [m["revive_uncommitted"] for m in doc["messages"]] == [False] * 5 + [True]
    assert doc["undelivered"] == {"ck": 1, "ack": 1}
    [group] = doc["groups"]
    assert group["group"] == GROUP
    assert group["counts"] == {"in_flight": 1, "awaiting_revive": 1, "acked": 2, "revived": 2}
    assert group["outstanding"] == 2 and group["retry_copies"] == 2
    assert group["revived_messages"] == {"1": 2}
    assert group["oldest_awaiting"]["queue_offset"] == 3
    queues = {q["queue_id"]: q for q in doc["revive_queues"]}
    assert (queues[0]["checkpoints"], queues[0]["acks"], queues[0]["progress"]) == (1, 1, 2)
    assert (queues[1]["checkpoints"], queues[1]["max_offset"], queues[1]["progress"]) == (3, 3, 1)
    # C is due 190 s before the newest record: overdue; E is revived again by a restart.
    kinds = {(f["kind"], f["group"]) for f in doc["findings"]}
    assert kinds == {("overdue", GROUP), ("revive_uncommitted", GROUP)}
    cks = {c["start_offset"]: c for c in doc["checkpoints"]}
    assert cks[0]["merged_bit_map"] == 0b11 and cks[0]["bit_map"] == 0
    assert cks[4]["revive_position"] is None and cks[4]["timer_position"] is not None
    assert (cks[3]["revive_queue_id"], cks[3]["revive_queue_offset"]) == (1, 1)
    assert "PopBufferMergeService" in doc["caveat"]


def test_pop_threshold_and_group_filter(tmp_path: Path) -> None:
    root = _placed_store(tmp_path / "s")
    # Due 190 s ago: within a 200 s threshold, nothing is overdue (exit 0); the duplicate a
    # restart makes is said, not gated on.
    doc = run_json("pop", root, "--stuck-after", "200", expect=0)
    assert [f["kind"] for f in doc["findings"]] == ["revive_uncommitted"]
    table = run("pop", root, "--stuck-after", "200", "--format", "table")
    assert (
        "verdict: nothing inconsistent or overdue; 2 message(s) outstanding, 1 revived again"
        in (" ".join(table.stdout.split()))
    )
    assert run_json("pop", root, "--group", "nobody", expect=0)["messages"] == []
    assert len(run_json("pop", root, "--group", GROUP, expect=1)["messages"]) == 6
    # --now before D's revive time and after C's + 60 s: the same states; after D's: D is due,
    # not passed, overdue once 60 s late.
    later = run_json("pop", root, "--now", str(CK_D.revive_time + 61_000), expect=1)
    assert later["reference_basis"] == "--now"
    states = {m["queue_offset"]: m["state"] for m in later["messages"]}
    assert states[4] == "awaiting_revive"
    assert sorted(f["kind"] for f in later["findings"]).count("overdue") == 2


def test_pop_table_says_the_caveat_and_verdict(tmp_path: Path) -> None:
    root = _placed_store(tmp_path / "s")
    result = run("pop", root, "--format", "table")
    assert result.exit_code == 1
    out = " ".join(result.stdout.split())
    assert "caveat: enablePopBufferMerge" in out
    assert "still in the timer, not yet in a revive queue: 1 ck(s), 1 ack(s)" in out
    assert "verdict: 0 inconsistencies, 1 overdue message(s)" in out


def test_pop_without_pop_records(tmp_path: Path) -> None:
    root = build_store(tmp_path / "s", orders(5))
    result = run("pop", root, "--format", "table")
    assert (result.exit_code, result.stdout.strip()) == (0, "no POP checkpoints or acks")
    assert run_json("pop", root, expect=0)["checkpoints"] == []


def test_hostile_pop_records_are_findings(tmp_path: Path) -> None:
    good = _ck(0, T0, 10_000, n=2)
    specs = [
        MessageSpec(topic=TOPIC, body=b"m", uniq_key=f"U{i}", store_timestamp=T0) for i in range(2)
    ]
    specs += _ck_specs(good, 0, True)
    bad_bodies = {
        "json": b'{"so":1,"pt":',
        "array": b"[1,2]",
        "string_number": pop.encode_checkpoint(good).replace(b'"so":0', b'"so":"abc"'),
        "bool_number": pop.encode_checkpoint(good).replace(b'"n":2', b'"n":true'),
        "huge_n": pop.encode_checkpoint(good).replace(b'"n":2', b'"n":4096'),
    }
    for n, body in enumerate(bad_bodies.values()):
        specs.append(_spec(body, pop.CK_TAG, f"bad{n}", T0 + 1, 0, False))
    beyond = _ck(5, T0 + 2, 10_000, n=2, bit_map=0b100)  # a bit past n
    specs += _ck_specs(beyond, 0, False)
    diff = _ck(7, T0 + 3, 10_000, n=2, queue_offset_diff=(0,))  # d shorter than n
    specs += _ck_specs(diff, 0, False)
    specs += [
        _ack_spec(_ack(_ck(9, T0 + 4, 10_000), 9), T0 + 5, 0, False),  # no such checkpoint
        _ack_spec(_ack(good, 7), T0 + 6, 0, False),  # not one of good's messages
        _spec(b'{"aol":["x"],"so":0}', pop.BATCH_ACK_TAG, "bad-back", T0 + 7, 0, False),
        _spec(b"0-3", pop.CK_TAG, "cancel", T0 + 8, 0, False),  # cancelCkTimer: no finding
        _spec(b"?", "zz", "other", T0 + 9, 0, False),
        MessageSpec(topic="Other", body=b"x", store_timestamp=T0 + 20_000),
    ]
    root = build_store(tmp_path / "s", specs, LAYOUT)
    doc = run_json("pop", root, "--stuck-after", "100000", expect=1)
    kinds = sorted(f["kind"] for f in doc["findings"])
    assert kinds == sorted(
        ["ck_malformed"] * len(bad_bodies)
        + [
            "ck_bitmap_beyond_num",
            "ck_diff_length",
            "ack_without_ck",
            "ack_outside_ck",
            "ack_malformed",
            "revive_tag_unknown",
        ]
    )
    assert next(q for q in doc["revive_queues"])["cancels"] == 1
    # The good checkpoint is still read: two messages, due, not passed.
    good_msgs = [m for m in doc["messages"] if m["queue_offset"] in (0, 1)]
    assert [m["state"] for m in good_msgs] == ["awaiting_revive"] * 2
    result = run("pop", root, "--format", "table")
    assert result.exit_code == 1 and "Traceback" not in result.stdout + result.stderr


# --- synth --fate --pop ---------------------------------------------------------------------

SYNTH = {"clean": False, "crash": True}


@pytest.fixture(scope="module", params=list(SYNTH))
def synth_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, FateSummary]:
    root = tmp_path_factory.mktemp("pop") / "store"
    layout = StoreLayout(profile=Profile.V5_3, commitlog_file_size=1 << 20, cq_file_size=6000)
    config = WorkloadConfig(
        messages=400, topics=2, queues=2, seed=29, crash=SYNTH[request.param], fate=True, pop=True
    )
    summary = write_workload(root, config, layout)
    assert summary.fate is not None
    return root, summary.fate


def test_pop_on_synth_fact_by_fact(synth_store: tuple[Path, FateSummary]) -> None:
    root, fate = synth_store
    truth: dict[tuple[str, int, int, int], PopTruth] = {
        (t.topic, t.queue_id, t.queue_offset, t.pop_time): t for t in fate.pop
    }
    assert len(truth) == len(fate.pop) > 50
    assert any(not t.acked for t in fate.pop) and any(t.acked for t in fate.pop)
    doc = run_json("pop", root, expect=0)
    messages = {
        (m["topic"], m["queue_id"], m["queue_offset"], m["pop_time"]): m for m in doc["messages"]
    }
    assert messages.keys() == truth.keys()
    copies: dict[str, int] = {}
    for r in fate.records:
        if r.topic.startswith(f"%RETRY%{GROUP_POP}+"):
            copies[r.identity] = copies.get(r.identity, 0) + 1
    for key, t in truth.items():
        m = messages[key]
        assert m["group"] == t.group == GROUP_POP
        assert m["uniq_key"] == t.uniq_key
        assert m["invisible_until"] == t.revive_time
        # Every chain ends before the crash or the shutdown: acked, else revived.
        assert m["state"] == ("acked" if t.acked else "revived"), (key, m, t)
        assert m["revived"] == copies.get(t.uniq_key or "", 0)
    cks = {
        (c["topic"], c["queue_id"], c["start_offset"], c["pop_time"]): c for c in doc["checkpoints"]
    }
    for key, t in truth.items():
        c = cks[key]
        assert (c["timer_position"], c["revive_position"]) == (
            t.ck_timer_position,
            t.ck_revive_position,
        )
        assert c["revive_queue_id"] == t.revive_queue_id
        assert c["num"] == 1 and c["invisible_time"] == t.revive_time - t.pop_time
    text = (root / "config" / "consumerOffset.json").read_text()
    persisted = loads(text)["offsetTable"][PROGRESS]
    queues = {q["queue_id"]: q for q in doc["revive_queues"]}
    assert {q: queues[q]["progress"] for q in queues} == persisted
    # The broker was done with every revive record: the progress is at each queue's end.
    assert all(q["progress"] == q["max_offset"] for q in queues.values())
    assert doc["undelivered"] == {"ck": 0, "ack": 0}
    assert doc["findings"] == []
    [group] = doc["groups"]
    assert group["counts"]["acked"] == sum(t.acked for t in fate.pop)
    assert group["retry_copies"] == sum(copies.values()) == fate.pop_retry


# --- trace ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uniq", "state", "outcome"),
    [
        ("U0", "acked", "consumed"),
        ("U2", "revived", "revived"),
        ("U3", "awaiting_revive", "awaiting_revive"),
        ("U4", "in_flight", "in_flight"),
    ],
)
def test_trace_says_what_the_pops_say(tmp_path: Path, uniq: str, state: str, outcome: str) -> None:
    # gp's committed offset (5) is past every message: it moved at pop time, so only the
    # checkpoints tell the in-flight and unacked ones from the consumed.
    root = _placed_store(tmp_path / "s")
    doc = run_json("trace", root, "--uniq-key", uniq, *SMALL_OPTS, expect=0)
    [chain] = doc["chains"]
    original = next(c for c in chain["copies"] if c["topic"] == TOPIC)
    assert [(p["group"], p["state"]) for p in original["pops"]] == [(GROUP, state)]
    fate = next(g for g in chain["groups"] if g["group"] == GROUP)
    assert fate["outcome"] == outcome
    assert "popped 1 time(s)" in fate["summary"]
    if uniq == "U2":  # the revived copy joins the chain by its UNIQ_KEY
        assert [c["role"] for c in chain["copies"]] == ["original", "retry"]


def test_trace_on_synth_pop_follows_revives(synth_store: tuple[Path, FateSummary]) -> None:
    root, fate = synth_store
    revived = next(t for t in fate.pop if not t.acked and t.topic == "TopicB")
    doc = run_json("trace", root, "--uniq-key", revived.uniq_key or "", expect=0)
    [chain] = doc["chains"]
    by_topic = {c["topic"]: c for c in chain["copies"]}
    assert [p["state"] for p in by_topic["TopicB"]["pops"]] == ["revived"]
    pops_in_retry = [
        (t.topic, t.acked) for t in fate.pop if t.uniq_key == revived.uniq_key and t is not revived
    ]
    retry = [c for c in chain["copies"] if c["topic"].startswith(f"%RETRY%{GROUP_POP}+")]
    assert len(retry) == len(pops_in_retry) >= 1
    last_acked = pops_in_retry[-1][1]
    group = next(g for g in chain["groups"] if g["group"] == GROUP_POP)
    assert group["outcome"] == ("consumed" if last_acked else "revived")


def test_synth_pop_needs_fate_on_5x(tmp_path: Path) -> None:
    old = run("synth", tmp_path / "a", "--messages", "10", "--fate", "--pop", "-q")
    assert old.exit_code == 2 and "--pop needs a 5.x --profile" in old.stderr
    alone = run("synth", tmp_path / "b", "--profile", "5.3", "--messages", "10", "--pop", "-q")
    assert alone.exit_code == 2 and "pop needs fate" in alone.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_synth_pop_summary_agrees_with_pop(tmp_path: Path) -> None:
    store = tmp_path / "s"
    made = run("synth", store, "--profile", "5.3", "--messages", "300", "--fate", "--pop", "--json")
    assert made.exit_code == 0, made.stderr
    said = json.loads(made.stdout)["fate"]["pop"]
    doc = run_json("pop", store, expect=0)
    assert said["checkpoints"] == len(doc["checkpoints"]) > 0
    assert said["acked"] == doc["groups"][0]["counts"]["acked"]
    assert said["in_timer"] == doc["undelivered"]["ck"] == 0
    plain = run("synth", tmp_path / "p", "--profile", "5.3", "--messages", "50", "--fate", "--json")
    assert json.loads(plain.stdout)["fate"]["pop"] is None
