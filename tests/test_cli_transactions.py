"""``rmqinspect transactions``: half messages by state, written the way the broker writes them
(``TransactionalMessageBridge``, ``EndTransactionProcessor``), and the real-broker corpora."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.format import properties as props
from rmqinspect.format.commitlog import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from rmqinspect.synth.writer import MessageSpec, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT, build_store, orders, run, run_json
from tests.corpus import expected, input_store, jsonl

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
GIVEN_UP = "TRANS_CHECK_MAX_TIME_TOPIC"
CHECK = "RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS"
T0 = 1_700_000_000_000


def _half(uniq: str, at: int, checks: int | None = None, qid: int = 1) -> MessageSpec:
    """``parseHalfMessageInner``: the real topic/queue in properties, sysFlag reset to NOT."""
    p = {props.REAL_TOPIC: "TopicTx", props.REAL_QID: str(qid), props.PGROUP: "PID_TX"}
    p[props.TRAN_MSG] = "true"
    if checks is not None:  # renewHalfMessageInner: a check's copy carries its count
        p["TRANSACTION_CHECK_TIMES"] = str(checks)
    return MessageSpec(topic=HALF, uniq_key=uniq, properties=p, body=b"tx", store_timestamp=at)


def _commit(uniq: str, half_at: int, at: int, qid: int = 1, topic: str = "TopicTx") -> MessageSpec:
    """``endMessageTransaction``: the real topic, COMMIT type, preparedTransactionOffset back
    at the half."""
    p = {props.REAL_TOPIC: "TopicTx", props.REAL_QID: str(qid), props.PGROUP: "PID_TX"}
    return MessageSpec(
        topic=topic,
        queue_id=qid,
        uniq_key=uniq,
        properties=p,
        body=b"tx",
        sys_flag=TRANSACTION_COMMIT_TYPE,
        prepared_transaction_offset=half_at,
        store_timestamp=at,
    )


def _op(body: bytes, at: int, tags: str = "d") -> MessageSpec:
    """``putOpMessage``: tag d, the half-queue offset(s) as text."""
    return MessageSpec(topic=OP, tags=tags, body=body, store_timestamp=at)


def _broker_store(root: Path, *, pending_age_ms: int = 1_000) -> tuple[Path, dict[str, int]]:
    """Committed (U1), rolled back (U2), pending with one check copy (U3), given up after 15
    checks (U4), and a 5.x batched op resolving a rollback (U5)."""
    at: dict[str, int] = {}
    with StoreWriter(root, SMALL_LAYOUT) as w:
        t = T0
        at["U1"] = w.put(_half("U1", t)).physical_offset  # queue offset 0
        at["U2"] = w.put(_half("U2", t + 1)).physical_offset  # 1
        at["U3"] = w.put(_half("U3", t + 2)).physical_offset  # 2
        at["U4"] = w.put(_half("U4", t + 3)).physical_offset  # 3
        at["U5"] = w.put(_half("U5", t + 4)).physical_offset  # 4
        at["commit"] = w.put(_commit("U1", at["U1"], t + 5)).physical_offset
        at["op1"] = w.put(_op(b"0", t + 6)).physical_offset  # 4.9: one decimal
        at["op2"] = w.put(_op(b"1", t + 7)).physical_offset  # rollback: the op alone
        at["U3copy"] = w.put(_half("U3", t + 8, checks=1)).physical_offset  # 5
        at["U4copy"] = w.put(_half("U4", t + 9, checks=15)).physical_offset  # 6
        # resolveDiscardMsg: the half's properties, in TRANS_CHECK_MAX_TIME_TOPIC queue 0.
        given_up = replace(_half("U4", t + 10, checks=15), topic=GIVEN_UP)
        at["given_up"] = w.put(given_up).physical_offset
        at["op3"] = w.put(_op(b"4,", t + 11)).physical_offset  # 5.x: comma-separated
        w.put(MessageSpec(topic="Other", body=b"x", store_timestamp=t + pending_age_ms))
        # The check has passed the first five halves (their copies are further on).
        w.set_consumer_offsets({CHECK: {0: 5}})
    return root, at


def _by_key(doc: dict[str, Any]) -> dict[str | None, dict[str, Any]]:
    return {t["uniq_key"]: t for t in doc["transactions"]}


def test_states_as_the_broker_writes_them(tmp_path: Path) -> None:
    store, at = _broker_store(tmp_path / "s")
    doc = run_json("transactions", store, expect=0)
    assert doc["source"] == "commitlog scan"
    assert doc["records"] == {
        "half": 7,
        "op": 3,
        "commit": 1,
        "rollback": 0,
        "given_up": 1,
        "prepared_outside_half_topic": 0,
    }
    assert doc["check_offset"] == 5
    assert doc["counts"] == {"committed": 1, "rolled_back": 2, "pending": 1, "given_up": 1}
    assert doc["findings"] == []
    tx = _by_key(doc)
    assert tx["U1"]["state"] == "committed"
    assert tx["U1"]["commit_positions"] == [at["commit"]]
    assert tx["U1"]["op_positions"] == [at["op1"]]
    assert (tx["U1"]["real_topic"], tx["U1"]["real_queue_id"]) == ("TopicTx", 1)
    assert tx["U1"]["producer_group"] == "PID_TX"
    assert tx["U2"]["state"] == "rolled_back"
    assert (tx["U2"]["op_positions"], tx["U2"]["commit_positions"]) == ([at["op2"]], [])
    assert tx["U5"]["state"] == "rolled_back"
    assert tx["U5"]["op_positions"] == [at["op3"]]
    # The pending one: both copies, the check count of the newer, not yet passed by the check.
    u3 = tx["U3"]
    assert u3["state"] == "pending"
    assert [(h["position"], h["queue_offset"], h["check_times"]) for h in u3["halves"]] == [
        (at["U3"], 2, 0),
        (at["U3copy"], 5, 1),
    ]
    assert u3["check_times"] == 1
    assert u3["checked_past"] is False
    assert u3["first_store_timestamp"] == T0 + 2
    assert u3["age_ms"] == 1_000 - 2  # to the newest record of the commitlog
    assert doc["oldest_pending"]["uniq_key"] == "U3"
    assert tx["U4"]["state"] == "given_up"
    assert tx["U4"]["given_up_position"] == at["given_up"]
    assert tx["U4"]["check_times"] == 15
    table = run("transactions", store, "--format", "table")
    assert table.exit_code == 0
    assert "1 committed, 2 rolled back, 1 pending, 1 given up" in table.stdout
    assert "oldest pending: U3 for TopicTx" in table.stdout


def test_pending_past_the_threshold_exits_1(tmp_path: Path) -> None:
    store, at = _broker_store(tmp_path / "s", pending_age_ms=20 * 60_000)
    doc = run_json("transactions", store, expect=1)  # the default: 15 checks x 60 s
    (stuck,) = doc["findings"]
    assert (stuck["kind"], stuck["uniq_key"], stuck["position"]) == ("stuck", "U3", at["U3copy"])
    assert run_json("transactions", store, "--stuck-after", "1201", expect=0)["findings"] == []
    assert run_json("transactions", store, "--stuck-after", "1199", expect=1)["findings"]
    bad = run("transactions", store, "--stuck-after", "-1")
    assert bad.exit_code == 2 and bad.stdout == ""


def test_hostile_op_and_commit_records_are_findings(tmp_path: Path) -> None:
    at: dict[str, int] = {}
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        at["U1"] = w.put(_half("U1", T0)).physical_offset  # queue offset 0
        at["U2"] = w.put(_half("U2", T0 + 1)).physical_offset  # 1
        at["U3"] = w.put(_half("U3", T0 + 2)).physical_offset  # 2
        # Committed, then the broker died before the op record (EndTransactionProcessor writes
        # the real-topic record first): the check will ask the producer again.
        at["c1"] = w.put(_commit("U1", at["U1"], T0 + 3)).physical_offset
        # Committed into another queue than REAL_QID says, and twice.
        at["c2"] = w.put(_commit("U2", at["U2"], T0 + 4, qid=3)).physical_offset
        at["c2b"] = w.put(_commit("U2", at["U2"], T0 + 5)).physical_offset
        at["c3"] = w.put(_commit("UX", 12345, T0 + 6)).physical_offset  # names no half
        at["op"] = w.put(_op(b"1", T0 + 7)).physical_offset
        at["bad"] = w.put(_op(b"12abc,\xff\xfe", T0 + 8)).physical_offset
        at["far"] = w.put(_op(b"999", T0 + 9)).physical_offset
        at["tag"] = w.put(_op(b"2", T0 + 10, tags="x")).physical_offset
        # A pre-4.3 broker's ROLLBACK-type record for a half that was committed too.
        rollback = MessageSpec(
            topic="TopicTx",
            sys_flag=TRANSACTION_ROLLBACK_TYPE,
            prepared_transaction_offset=at["U2"],
            store_timestamp=T0 + 11,
        )
        at["rb"] = w.put(rollback).physical_offset
        w.put(
            MessageSpec(
                topic="TopicTx", sys_flag=TRANSACTION_PREPARED_TYPE, store_timestamp=T0 + 12
            )
        )
        # Hostile half properties: no REAL_TOPIC, a REAL_QID and a check count that are no numbers.
        odd = {props.REAL_QID: "x\x1b[2J", "TRANSACTION_CHECK_TIMES": "many"}
        at["odd"] = w.put(
            MessageSpec(topic=HALF, uniq_key="U9", properties=odd, store_timestamp=T0 + 13)
        ).physical_offset
    doc = run_json("transactions", tmp_path / "s", expect=1)
    found = sorted((f["kind"], f["position"]) for f in doc["findings"])
    assert found == sorted(
        [
            ("commit_without_op", at["c1"]),
            ("commit_elsewhere", at["c2"]),
            ("commit_repeated", at["c2b"]),
            ("rollback_and_commit", at["rb"]),
            ("commit_without_half", at["c3"]),
            ("op_not_number", at["bad"]),
            ("op_not_number", at["bad"]),
            ("op_points_nowhere", at["far"]),
            ("op_other_tag", at["tag"]),
            ("half_without_real_topic", at["odd"]),
        ]
    )
    tx = _by_key(doc)
    assert tx["U1"]["state"] == "committed"  # the commit record decides, op or not
    assert tx["U2"]["state"] == "committed"
    assert tx["U3"]["state"] == "pending"  # the other-tag op does not resolve it
    u9 = tx["U9"]
    assert (u9["real_topic"], u9["real_queue_id"], u9["check_times"]) == (None, None, 0)
    assert doc["records"]["rollback"] == 1
    assert doc["records"]["prepared_outside_half_topic"] == 1
    nowhere = next(f for f in doc["findings"] if f["kind"] == "op_points_nowhere")
    assert "offset 999" in nowhere["detail"] and "[0, 3]" in nowhere["detail"]
    table = run("transactions", tmp_path / "s", "--format", "table")
    assert table.exit_code == 1
    assert "op_not_number" in table.stdout


def test_op_offsets_past_a_long_and_in_one_body_keep_their_order(tmp_path: Path) -> None:
    """An op body's offsets are decimal text of any length: one past a long's range names no
    half (a finding, no overflow); the findings of one op record keep its body's order, and
    its offsets that name a half resolve it."""
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        w.put(_half("U1", T0))  # queue offset 0
        w.put(_half("U2", T0 + 1))  # 1
        at = w.put(_op(b"99999999999999999999999,1,888,", T0 + 2)).physical_offset
    doc = run_json("transactions", tmp_path / "s", expect=1)
    assert [(f["kind"], f["position"], f["detail"].split(";")[0]) for f in doc["findings"]] == [
        ("op_points_nowhere", at, "op names half-queue 0 offset 99999999999999999999999"),
        ("op_points_nowhere", at, "op names half-queue 0 offset 888"),
    ]
    tx = _by_key(doc)
    assert (tx["U1"]["state"], tx["U2"]["state"]) == ("pending", "rolled_back")
    assert tx["U2"]["op_positions"] == [at]


def test_half_the_check_passed_over(tmp_path: Path) -> None:
    """The check moved past the only copy, yet wrote no op, copy or given-up record for it: a
    finding that does not fail the gate (nothing on disk contradicts another record)."""
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        at = w.put(_half("U1", T0)).physical_offset
        w.set_consumer_offsets({CHECK: {0: 1}})
    doc = run_json("transactions", tmp_path / "s", expect=0)
    assert [(f["kind"], f["position"], f["uniq_key"]) for f in doc["findings"]] == [
        ("passed_by_check", at, "U1")
    ]
    (tx,) = doc["transactions"]
    assert (tx["state"], tx["checked_past"]) == ("pending", True)


def test_given_up_records_without_their_half_and_links_to_the_last_copy(tmp_path: Path) -> None:
    """Given-up records whose half is gone make transactions of their own (one per UNIQ_KEY,
    the last record's position kept; one without a UNIQ_KEY alone), listed before those with
    a half in the order first met; a rollback and an op link to their half by position and by
    half-queue offset."""
    given_up = replace(_half("UX", T0 + 1, checks=15), topic=GIVEN_UP)
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        half = w.put(_half("UA", T0)).physical_offset  # half queue 0, offset 0
        first_ux = w.put(given_up).physical_offset
        keyless = w.put(replace(given_up, uniq_key=None, store_timestamp=T0 + 2)).physical_offset
        last_ux = w.put(replace(given_up, store_timestamp=T0 + 3)).physical_offset
        ua = w.put(replace(_half("UA", T0 + 4, checks=3), topic=GIVEN_UP)).physical_offset
        rollback = MessageSpec(
            topic="TopicTx",
            queue_id=1,
            body=b"tx",
            sys_flag=TRANSACTION_ROLLBACK_TYPE,
            prepared_transaction_offset=half,
            store_timestamp=T0 + 5,
        )
        rolled = w.put(rollback).physical_offset
        op = w.put(_op(b"0", T0 + 6)).physical_offset
        nowhere = w.put(_op(b"7", T0 + 7)).physical_offset
    doc = run_json("transactions", tmp_path / "s", expect=1)
    assert doc["records"] == {
        "half": 1,
        "op": 2,
        "commit": 0,
        "rollback": 1,
        "given_up": 4,
        "prepared_outside_half_topic": 0,
    }
    got = [
        (
            t["uniq_key"],
            t["state"],
            t["given_up_position"],
            t["check_times"],
            [h["position"] for h in t["halves"]],
            t["op_positions"],
            t["rollback_positions"],
        )
        for t in doc["transactions"]
    ]
    assert first_ux < keyless < last_ux
    assert got == [
        ("UX", "given_up", last_ux, 15, [], [], []),
        (None, "given_up", keyless, 15, [], [], []),
        ("UA", "rolled_back", ua, 0, [half], [op], [rolled]),
    ]
    assert [(f["kind"], f["position"], f["uniq_key"], f["detail"]) for f in doc["findings"]] == [
        ("given_up_and_resolved", ua, "UA", "in TRANS_CHECK_MAX_TIME_TOPIC and also rolled_back"),
        (
            "op_points_nowhere",
            nowhere,
            None,
            "op names half-queue 0 offset 7; no half on disk has it (queue 0 offsets read: [0, 0])",
        ),
    ]


def test_store_without_transactions(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(6))
    table = run("transactions", store, "--format", "table")
    assert (table.exit_code, table.stdout) == (0, "no transactional messages\n")
    doc = run_json("transactions", store, expect=0)
    assert doc["transactions"] == [] and doc["findings"] == []
    assert doc["counts"] == {"committed": 0, "rolled_back": 0, "pending": 0, "given_up": 0}
    missing = run("transactions", tmp_path / "nope")
    assert missing.exit_code == 2
    assert missing.stderr.startswith("rmqinspect: error: ")


@pytest.mark.parametrize(
    ("corpus_fixture", "scenario"),
    [("conformance_dir", "clean"), ("conformance5_dir", "clean5")],
)
def test_real_broker_half_messages(
    corpus_fixture: str, scenario: str, request: pytest.FixtureRequest
) -> None:
    """The 4.9.8 and 5.3.3 corpora hold half messages (no op records, no check copies) and
    COMMIT/PREPARED records put straight into TopicTx with preparedTransactionOffset 0: every
    half is pending, every commit record names no half, and the check offset is the file's."""
    corpus = request.getfixturevalue(corpus_fixture)
    exp = expected(corpus, scenario)
    records = list(jsonl(corpus, scenario, "messages"))
    halves = [r for r in records if r["topic"] == HALF]
    commits = [
        r for r in records if r["sysFlag"] & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE
    ]
    # PREPARED records never enter a queue: the broker's own walk of the log (prescan) has them.
    prepared = [
        r
        for r in jsonl(corpus, scenario, "prescan")
        if r.get("sysFlag", 0) & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE  # BLANKs: none
    ]
    assert len(halves) == exp["summary"]["consumeQueues"][f"{HALF}/0"]["maxOffsetAfterLoad"]
    doc = run_json("transactions", input_store(corpus, scenario), expect=1)
    assert doc["records"] == {
        "half": len(halves),
        "op": 0,
        "commit": len(commits),
        "rollback": 0,
        "given_up": 0,
        "prepared_outside_half_topic": len(prepared),
    }
    assert doc["check_offset"] == exp["configFilesSemantics"]["consumerOffset.json"][CHECK]["0"]
    assert doc["counts"]["pending"] == len(halves)
    got = sorted(
        (h["position"], h["queue_offset"], h["store_timestamp"], t["uniq_key"], t["real_topic"])
        for t in doc["transactions"]
        for h in t["halves"]
    )
    want = sorted(
        (
            r["commitLogOffset"],
            r["queueOffset"],
            r["storeTimestamp"],
            r["properties"].get("UNIQ_KEY"),
            r["properties"]["REAL_TOPIC"],
        )
        for r in halves
    )
    assert got == want
    without_half = sorted(
        f["position"] for f in doc["findings"] if f["kind"] == "commit_without_half"
    )
    assert without_half == sorted(r["commitLogOffset"] for r in commits)
    passed = sorted(f["position"] for f in doc["findings"] if f["kind"] == "passed_by_check")
    assert passed == sorted(r["commitLogOffset"] for r in halves)  # the check offset is past all
    oldest = min(halves, key=lambda r: r["storeTimestamp"])
    assert doc["oldest_pending"]["halves"][0]["position"] == oldest["commitLogOffset"]
