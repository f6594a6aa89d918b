"""``rmqinspect trace``: fact by fact against the chains a real 4.9.8 broker and real consumers
left (``conformance-consume``), and on stores written the way the broker writes retry, delay,
DLQ, POP retry, transaction and trace records."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.analysis.trace import TraceQuery, trace_report
from rmqinspect.export.schema import Table
from rmqinspect.format import properties as props
from rmqinspect.format.commitlog import SCHEDULE_TOPIC, TRANSACTION_COMMIT_TYPE
from rmqinspect.format.encode import encode_trace_data
from rmqinspect.format.fate import (
    HALF_TOPIC,
    Role,
    link_keys,
    op_offsets,
    parse_retry_topic,
    role_of,
)
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.format.trace_data import TraceRecord, decode_trace_data
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.synth.damage import flip_body_byte
from rmqinspect.synth.layout import DEFAULT_STORE_HOST
from rmqinspect.synth.writer import MessageSpec, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT, SMALL_OPTS, build_store, orders, run, run_json
from tests.export_helpers import read_table

CONSUME_LEVELS = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 10s 20s"  # the corpus broker's
LEVEL_MS = {i + 1: 1000 for i in range(16)} | {17: 10_000, 18: 20_000}
EXPECTED_ROLE = {
    "original": "original",
    "schedule": "schedule",
    "scheduledDelivery": "scheduled_delivery",
    "retry": "retry",
    "dlq": "dlq",
}
T0 = 1_700_000_000_000
TRAILING = SMALL_LAYOUT.profile.properties_trailing_separator


# --- the real broker's chains ----------------------------------------------------------------


def _check_copy(want: dict[str, Any], got: dict[str, Any]) -> None:
    assert got["role"] == EXPECTED_ROLE[want["role"]]
    assert (got["topic"], got["queue_id"], got["queue_offset"]) == (
        want["topic"],
        want["queueId"],
        want["queueOffset"],
    )
    assert (got["physical_offset"], got["store_size"]) == (
        want["commitLogOffset"],
        want["storeSize"],
    )
    assert got["offset_msg_id"] == want["offsetMsgId"]
    assert got["reconsume_times"] == want["reconsumeTimes"]
    assert got["store_timestamp"] == want["storeTimestamp"]
    delay = want["DELAY"]
    assert got["delay_level"] == (None if delay is None else int(delay))
    assert got["real_topic"] == want["REAL_TOPIC"]
    assert got["real_queue_id"] == (None if want["REAL_QID"] is None else int(want["REAL_QID"]))
    assert got["retry_topic"] == want["RETRY_TOPIC"]
    assert got["origin_message_id"] == want["ORIGIN_MESSAGE_ID"]
    assert got["restart"] == "kept"  # a clean shutdown keeps everything
    groups = {g["group"]: g for g in got["groups"]}
    # Every delivery the consumers logged is of a copy their committed offset has passed.
    for delivery in want["consumedBy"]:
        assert groups[delivery["group"]]["consumed"] is True, (want, delivery)
    assert all(g["status_after_restart"] == "ok" for g in groups.values())
    if got["role"] == "retry":
        assert set(groups) == {"groupRetry"} and got["group"] == "groupRetry"
    if got["role"] == "schedule":
        level = int(delay)
        assert got["due_timestamp"] == want["storeTimestamp"] + LEVEL_MS[level]
        assert got["delivered"] is True  # delayOffset.json is past every schedule unit
        assert got["groups"] == []


def _check_chain(want: dict[str, Any], got: dict[str, Any]) -> None:
    assert got["uniq_key"] == want["uniqKey"]
    assert got["topic"] == "TopicA"
    assert len(got["copies"]) == len(want["copies"]), want["key"]
    for w, g in zip(want["copies"], got["copies"], strict=True):
        _check_copy(w, g)
    # The real schedule service stored each delayed copy again once due, not before.
    copies = got["copies"]
    for before, after in itertools.pairwise(copies):
        if before["role"] == "schedule":
            assert after["store_timestamp"] >= before["due_timestamp"]
    fates = {f["group"]: f for f in got["groups"]}
    assert set(fates) == set(want["outcome"]) == {"groupOK", "groupRetry"}
    for group, outcome in want["outcome"].items():
        fate = fates[group]
        if outcome["successAtReconsumeTimes"]:
            (retries,) = outcome["successAtReconsumeTimes"]
            assert (fate["outcome"], fate["retries"]) == ("consumed", retries)
            after = {0: "", 1: " after 1 retry"}.get(retries, f" after {retries} retries")
            assert fate["summary"] == f"consumed by {group}{after}"
            assert fate["attempts"] == outcome["deliveries"]
        else:
            assert want["inDLQ"] and group == "groupRetry"
            assert fate["outcome"] == "dlq"
            assert fate["attempts"] == outcome["deliveries"] == 4
            assert fate["summary"] == "moved to %DLQ%groupRetry after 4 attempts"
    assert any(c["role"] == "dlq" for c in copies) is want["inDLQ"]
    assert ("no retry copies" in got["summary"]) is (want["class"] == "ok")


def _unseeded(chains: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chains without ``linked_by``, which names the query's own seed."""
    return [
        {**c, "copies": [{k: v for k, v in x.items() if k != "linked_by"} for x in c["copies"]]}
        for c in chains
    ]


def _corpus(conformance_consume_dir: Path) -> tuple[Path, dict[str, Any]]:
    doc = json.loads((conformance_consume_dir / "expected/consume_clean.json").read_text())
    return conformance_consume_dir / "stores/consume_clean", doc


def _sample(chains: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One chain of each class and of each delay level."""
    picked: dict[tuple[str, int], dict[str, Any]] = {}
    for c in chains:
        picked.setdefault((c["class"], 0), c)
        if c["delayLevel"]:
            picked.setdefault(("delay", c["delayLevel"]), c)
    assert {k for k in picked if k[0] == "delay"} == {("delay", lv) for lv in (2, 3, 4, 5, 17, 18)}
    return list(picked.values())


def test_corpus_sample_through_the_cli(conformance_consume_dir: Path) -> None:
    """Each class (ok, r1, r2, dlq) and delay level (2, 3, 4, 5, 17, 18), by every way in."""
    store, doc = _corpus(conformance_consume_dir)
    for want in _sample(doc["chains"]):
        by_key = run_json(
            "trace", store, "--key", want["key"], "--topic", "TopicA", "--delay-levels",
            CONSUME_LEVELS, expect=0,
        )  # fmt: skip
        assert by_key["search"] == "index"
        assert by_key["findings"] == [] and by_key["notes"] == []
        (chain,) = by_key["chains"]
        _check_chain(want, chain)
        # The producer's offsetMsgId (the first copy), and the client's msgId (the UNIQ_KEY).
        for msg_id in (want["sendResult"]["offsetMsgId"], want["uniqKey"]):
            by_id = run_json(
                "trace", store, "--msg-id", msg_id, "--delay-levels", CONSUME_LEVELS, expect=0
            )
            assert _unseeded(by_id["chains"]) == _unseeded(by_key["chains"])
            read_as_offset = msg_id == want["sendResult"]["offsetMsgId"]
            assert by_id["search"] == ("physical_offset" if read_as_offset else "index")
    # A retry copy's own offsetMsgId leads to the same chain.
    dlq = next(c for c in doc["chains"] if c["class"] == "dlq")
    retry = next(c for c in dlq["copies"] if c["role"] == "retry")
    by_copy = run_json(
        "trace", store, "--msg-id", retry["offsetMsgId"], "--delay-levels", CONSUME_LEVELS,
        expect=0,
    )  # fmt: skip
    assert by_copy["search"] == "physical_offset"
    _check_chain(dlq, by_copy["chains"][0])


def test_corpus_every_chain(conformance_consume_dir: Path) -> None:
    """All 300 messages in one report: every copy the real broker stored, nothing else."""
    store, doc = _corpus(conformance_consume_dir)
    from rmqinspect.render.trace import trace_json

    keys = tuple(c["uniqKey"] for c in doc["chains"])
    with Store.open(store, StoreOptions(delay_levels=CONSUME_LEVELS)) as st:
        report = trace_report(st, TraceQuery(uniq_keys=keys))
    got = {c["uniq_key"]: c for c in trace_json(report)["chains"]}
    assert len(got) == 300 and report.findings == ()
    for want in doc["chains"]:
        _check_chain(want, got[want["uniqKey"]])
    copies = sum(len(c["copies"]) for c in got.values())
    assert copies == doc["commitLog"]["records"] == 591


# --- the rules, one by one ---------------------------------------------------------------------


def test_roles_and_retry_topic_names() -> None:
    assert role_of(SCHEDULE_TOPIC, {}, 0) is Role.SCHEDULE
    assert role_of("%RETRY%g", {props.REAL_TOPIC: "%RETRY%g"}, 0) is Role.RETRY
    assert role_of("%DLQ%g", {}, 0) is Role.DLQ
    assert role_of("T", {props.REAL_TOPIC: "T"}, 0) is Role.SCHEDULED_DELIVERY
    assert role_of("T", {}, TRANSACTION_COMMIT_TYPE) is Role.COMMIT
    assert role_of("T", {}, 0) is Role.ORIGINAL
    assert role_of("MyTrace", {}, 0, ("MyTrace",)) is Role.TRACE
    assert role_of("OFFSET_MOVED_EVENT", {}, 0) is Role.OFFSET_MOVED_EVENT
    # KeyBuilder.buildPopRetryTopicV2 / V1 (5.3.3).
    assert parse_retry_topic("%RETRY%cg+TopicP") == parse_retry_topic("%RETRY%cg_TopicP", ["cg"])
    v2 = parse_retry_topic("%RETRY%cg+TopicP")
    assert v2 is not None and (v2.group, v2.pop_topic) == ("cg", "TopicP")
    # A "_" splits only against a known group: group names may contain it.
    plain = parse_retry_topic("%RETRY%my_group", ["other"])
    assert plain is not None and (plain.group, plain.pop_topic) == ("my_group", None)
    known = parse_retry_topic("%RETRY%my_group", ["my", "my_group"])
    assert known is not None and (known.group, known.pop_topic) == ("my_group", None)
    assert parse_retry_topic("TopicA") is None and parse_retry_topic("%RETRY%") is None
    keys = link_keys("%DLQ%g", {props.REAL_QID: "x", props.DELAY: "3"})
    assert (keys.group, keys.real_queue_id, keys.delay_level) == ("g", None, 3)
    assert op_offsets(b"1,2,x,,") == ([1, 2], ["x"])
    assert op_offsets(b"\xff") == ([], ["\ufffd"])


def test_trace_data_round_trip_and_hostile_bodies() -> None:
    records = [
        TraceRecord(
            "Pub", "U1", timestamp=5, region_id="R", group="pg", topic="T", tags="a",
            keys="k1 k2", store_host="10.0.0.1:10911", body_length=3, cost_time=2, msg_type=0,
            offset_msg_id="0A00000100002A9F0000000000000000", success=True,
        ),
        TraceRecord(
            "SubBefore", "U1", timestamp=6, region_id="R", group="cg", request_id="q",
            retry_times=1, keys="k1",
        ),
        TraceRecord(
            "SubAfter", "U1", request_id="q", cost_time=3, success=False, keys="k1",
            context_code=1, timestamp=7,
        ),
        TraceRecord(
            "EndTransaction", "U1", timestamp=5, region_id="R", group="pg", topic="T", tags="a",
            keys="k1", store_host="h", msg_type=2, transaction_id="t",
            transaction_state="COMMIT_MESSAGE", from_transaction_check=False,
        ),
    ]  # fmt: skip
    body = encode_trace_data(records)
    assert body.count(b"\x02") == 4 and body.startswith(b"Pub\x015\x01R\x01pg\x01T\x01U1\x01")
    assert decode_trace_data(body) == (records, [])
    got, problems = decode_trace_data(
        b"Pub\x01x\x02Foo\x02SubBefore\x01NaN\x01r\x01g\x01q\x01m\x011\x01k\x02"
    )
    assert got == []
    assert [p.detail for p in problems] == [
        "Pub record with 2 fields, at least 13 expected",
        "unknown trace type 'Foo'",
        "timestamp 'NaN' is not a number",
    ]
    with pytest.raises(ValueError, match="cannot contain"):
        encode_trace_data([TraceRecord("SubBefore", "a\x01b", retry_times=0)])


# --- stores written the way the broker writes them -------------------------------------------


def _raw(pairs: dict[str, str]) -> bytes:
    """A properties string stored as is: ``messageTimeup`` sets the string before it clears
    DELAY from the map, so the stored copy keeps DELAY and the append path does not delay it
    again."""
    return props.encode_properties_map(pairs, TRAILING)


def _send_back(
    w: StoreWriter, uniq: str, group: str, topic: str, origin: str, times: int, at: int
) -> None:
    """``asyncConsumerSendMsgBack``: the schedule copy (level 2 + reconsumeTimes), then the
    schedule service's delivery into %RETRY%group once due."""
    level = 2 + times
    p = {props.UNIQ_KEY: uniq, props.RETRY_TOPIC: topic, props.ORIGIN_MESSAGE_ID: origin}
    w.put(
        MessageSpec(
            topic=f"%RETRY%{group}", properties=p, delay_level=level, reconsume_times=times,
            store_timestamp=at, body=b"m",
        )
    )  # fmt: skip
    real = {**p, props.REAL_TOPIC: f"%RETRY%{group}", props.REAL_QID: "0", props.DELAY: str(level)}
    w.put(
        MessageSpec(
            topic=f"%RETRY%{group}", properties=_raw(real), reconsume_times=times,
            store_timestamp=at + 1000 * level, body=b"m",
        )
    )  # fmt: skip


def test_a_store_without_retries_says_so_in_one_line(tmp_path: Path) -> None:
    specs = orders(4)
    offsets = {"Orders@cg": {0: 2, 1: 0}, "Orders@ahead": {0: 9}}
    store = build_store(tmp_path / "s", specs, consumer_offsets=offsets)
    doc = run_json("trace", store, "--key", "ORDER-0", "--topic", "Orders", *SMALL_OPTS, expect=0)
    (chain,) = doc["chains"]
    assert chain["summary"] == ["consumed by ahead", "consumed by cg", "no retry copies"]
    (copy,) = chain["copies"]
    # Past the queue's max: the restart finds it OFFSET_OVERFLOW_BADLY (the groups command
    # predicts the reset); the copy itself is behind it.
    assert [g.pop("status_after_restart") for g in copy["groups"]] == ["above_max", "ok"]
    assert (copy["role"], copy["linked_by"], copy["groups"]) == (
        "original",
        "seed",
        [
            {"group": "ahead", "committed_offset": 9, "consumed": True},
            {"group": "cg", "committed_offset": 2, "consumed": True},
        ],
    )
    pending = run_json("trace", store, "--uniq-key", specs[1].uniq_key or "", *SMALL_OPTS, expect=0)
    assert pending["chains"][0]["summary"] == [
        "ahead has no committed offset on Orders:1: the copy at Orders:1 offset 0 is not known "
        "to be consumed",
        "pending for cg at Orders:1 offset 0 (committed offset 0)",
        "no retry copies",
    ]
    table = run("trace", store, "--uniq-key", specs[1].uniq_key or "", *SMALL_OPTS, "-F", "table")
    assert table.exit_code == 0 and "  - no retry copies" in table.stdout


def test_not_found_and_bad_input(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(2))
    missing = run_json("trace", store, "--key", "nope", "--topic", "Orders", *SMALL_OPTS, expect=1)
    assert (missing["found"], missing["chains"], missing["search"]) == (False, [], "index")
    far = encode_offset_msg_id(DEFAULT_STORE_HOST, 1 << 40)
    assert run_json("trace", store, "--msg-id", far, expect=1)["found"] is False
    for args in (
        ("--msg-id", "xyz"),
        ("--key", "ORDER-1"),
        ("--uniq-key", "a", "--key", "b", "--topic", "Orders"),
        (),
    ):
        r = run("trace", store, *args)
        assert r.exit_code == 2 and r.stdout == "", args
        assert r.stderr.startswith("rmqinspect: error:") and "Traceback" not in r.stderr


def test_index_missing_falls_back_to_a_walk(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(3))
    for f in (store / "index").iterdir():
        f.unlink()
    doc = run_json("trace", store, "--key", "ORDER-2", "--topic", "Orders", *SMALL_OPTS, expect=0)
    assert doc["search"] == "scan" and len(doc["chains"]) == 1
    assert doc["notes"] == ["index missing: the commitlog was walked instead"]


def _retry_store(root: Path, *, crash: bool = False) -> tuple[Path, dict[str, int]]:
    """U1 consumed by ok at once, by cg after 2 retries; U2 to the DLQ; U3's retry copy waits in
    level 4; U4 retried by a 5.x POP consumer (both retry topic forms)."""
    at: dict[str, int] = {}
    with StoreWriter(root, SMALL_LAYOUT, crash=crash) as w:
        t = T0
        for u in ("U1", "U2", "U3", "U4"):
            spec = MessageSpec(topic="T", uniq_key=u, keys=f"k-{u}", body=b"m", store_timestamp=t)
            at[u] = w.put(spec).physical_offset
        first = {u: encode_offset_msg_id(DEFAULT_STORE_HOST, at[u]) for u in at}
        _send_back(w, "U1", "cg", "T", first["U1"], 1, t + 10)
        _send_back(w, "U1", "cg", "T", first["U1"], 2, t + 20_000)
        _send_back(w, "U2", "cg", "T", first["U2"], 1, t + 30_000)
        dlq = {props.UNIQ_KEY: "U2", props.RETRY_TOPIC: "T", props.ORIGIN_MESSAGE_ID: first["U2"]}
        at["dlq"] = w.put(
            MessageSpec(
                topic="%DLQ%cg", properties=dlq, reconsume_times=2, body=b"m",
                store_timestamp=t + 40_000,
            )
        ).physical_offset  # fmt: skip
        p3 = {props.UNIQ_KEY: "U3", props.RETRY_TOPIC: "T", props.ORIGIN_MESSAGE_ID: first["U3"]}
        at["U3sched"] = w.put(
            MessageSpec(
                topic="%RETRY%cg", properties=p3, delay_level=3, reconsume_times=1,
                store_timestamp=t + 50_000, body=b"m",
            )
        ).physical_offset  # fmt: skip
        for topic in ("%RETRY%pop+T", "%RETRY%pop_T"):
            p4 = {
                props.UNIQ_KEY: "U4",
                props.ORIGIN_MESSAGE_ID: first["U4"],
                props.RETRY_TOPIC: "T",
            }
            at[topic] = w.put(
                MessageSpec(
                    topic=topic, properties=p4, reconsume_times=1, body=b"m",
                    store_timestamp=t + 60_000,
                )
            ).physical_offset  # fmt: skip
        w.set_consumer_offsets(
            {
                "T@ok": {0: 4},
                "T@cg": {0: 4},
                "T@pop": {0: 4},
                "%RETRY%cg@cg": {0: 3},
                "%RETRY%pop+T@pop": {0: 1},
                "%RETRY%pop_T@pop": {0: 0},
            }
        )
        w.set_delay_offsets({3: 2, 4: 1})
    return root, at


def _chain(root: Path, uniq: str, *extra: str, expect: int = 0) -> dict[str, Any]:
    doc = run_json("trace", root, "--uniq-key", uniq, *SMALL_OPTS, *extra, expect=expect)
    (chain,) = doc["chains"]
    assert isinstance(chain, dict)
    return chain


def _fates(chain: dict[str, Any]) -> dict[str, str]:
    return {f["group"]: f["summary"] for f in chain["groups"]}


def test_retry_delay_dlq_and_pop_chains(tmp_path: Path) -> None:
    store, at = _retry_store(tmp_path / "s")
    u1 = _chain(store, "U1")
    assert [(c["role"], c["topic"], c["reconsume_times"]) for c in u1["copies"]] == [
        ("original", "T", 0),
        ("schedule", SCHEDULE_TOPIC, 1),
        ("retry", "%RETRY%cg", 1),
        ("schedule", SCHEDULE_TOPIC, 2),
        ("retry", "%RETRY%cg", 2),
    ]
    assert [c["delay_level"] for c in u1["copies"]] == [None, 3, 3, 4, 4]
    assert [c["linked_by"] for c in u1["copies"]] == ["seed"] * 5  # the index holds them all
    sched = u1["copies"][1]
    assert (sched["real_topic"], sched["real_queue_id"], sched["queue_id"]) == ("%RETRY%cg", 0, 2)
    assert sched["due_timestamp"] == T0 + 10 + 10_000  # level 3 of the default table: 10 s
    assert sched["delivered"] is True
    assert _fates(u1) == {
        "cg": "consumed by cg after 2 retries",
        "ok": "consumed by ok",
        "pop": "consumed by pop",
    }
    u2 = _chain(store, "U2")
    assert u2["copies"][-1]["role"] == "dlq" and u2["copies"][-1]["physical_offset"] == at["dlq"]
    assert _fates(u2)["cg"] == "moved to %DLQ%cg after 2 attempts"
    u3 = _chain(store, "U3")
    waiting = u3["copies"][-1]
    assert (waiting["role"], waiting["delivered"], waiting["queue_offset"]) == (
        "schedule",
        False,
        2,
    )
    due = T0 + 50_000 + 10_000
    assert waiting["due_timestamp"] == due
    assert _fates(u3)["cg"] == (
        "the retry copy waits in delay level 3 until 2023-11-14T22:14:20.000Z"
    )
    assert due == 1_700_000_060_000  # the instant the summary names
    u4 = _chain(store, "U4")
    pops = [c for c in u4["copies"] if c["role"] == "retry"]
    assert [(c["topic"], c["group"], c["pop_topic"]) for c in pops] == [
        ("%RETRY%pop+T", "pop", "T"),
        ("%RETRY%pop_T", "pop", "T"),
    ]
    assert [c["groups"] for c in pops] == [
        [{"group": "pop", "committed_offset": 1, "consumed": True, "status_after_restart": "ok"}],
        [{"group": "pop", "committed_offset": 0, "consumed": False, "status_after_restart": "ok"}],
    ]
    assert _fates(u4)["pop"] == "pending for pop at %RETRY%pop_T:0 offset 0 (committed offset 0)"


def test_the_restart_cuts_a_retry_copy(tmp_path: Path) -> None:
    store, at = _retry_store(tmp_path / "s", crash=True)
    flip_body_byte(store, offset=at["%RETRY%pop_T"])  # checkCRCOnRecover stops the recovery there
    doc = run_json("trace", store, "--key", "k-U4", "--topic", "T", *SMALL_OPTS, expect=0)
    assert doc["broker_starts"] is True and doc["restart_end"] == at["%RETRY%pop_T"]
    (chain,) = doc["chains"]
    restart = {c["physical_offset"]: c["restart"] for c in chain["copies"]}
    assert restart[at["%RETRY%pop_T"]] == "cut"
    assert restart[at["%RETRY%pop+T"]] == restart[at["U4"]] == "kept"
    fate = next(f for f in chain["groups"] if f["group"] == "pop")
    assert fate["outcome"] == "lost_by_restart"
    assert fate["summary"].endswith("; the restart cuts the retry copy: pop will never see it")


def test_transaction_chains(tmp_path: Path) -> None:
    """Committed (half, commit record, op), rolled back (half, op), pending (half alone), and an
    op body that is no number: the transactions command's rules, per message."""
    half_topic, op_topic = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"
    at: dict[str, int] = {}
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        for u in ("X1", "X2", "X3"):  # half queue offsets 0, 1, 2
            p = {props.REAL_TOPIC: "TopicTx", props.REAL_QID: "0", props.TRAN_MSG: "true"}
            half = MessageSpec(topic=half_topic, uniq_key=u, properties=p, body=b"tx")
            at[u] = w.put(half).physical_offset
        real = {props.REAL_TOPIC: "TopicTx", props.REAL_QID: "0"}
        commit = MessageSpec(
            topic="TopicTx", uniq_key="X1", properties=real, body=b"tx",
            sys_flag=TRANSACTION_COMMIT_TYPE, prepared_transaction_offset=at["X1"],
        )  # fmt: skip
        at["commit"] = w.put(commit).physical_offset
        for body in (b"0", b"1", b"zz"):
            at[body.decode()] = w.put(
                MessageSpec(topic=op_topic, tags="d", body=body)
            ).physical_offset
    store = tmp_path / "s"
    x1 = _chain(store, "X1")
    assert [(c["role"], c["physical_offset"]) for c in x1["copies"]] == [
        ("half", at["X1"]),
        ("commit", at["commit"]),
        ("op", at["0"]),
    ]
    assert x1["copies"][1]["prepared_transaction_offset"] == at["X1"]
    assert x1["copies"][2]["linked_by"] == "op_record"
    assert x1["transaction_state"] == "committed"
    assert x1["summary"] == [
        "no consumer group has a committed offset on TopicTx",
        "transaction committed",
        "no retry copies",
    ]
    x2 = _chain(store, "X2")
    assert [c["role"] for c in x2["copies"]] == ["half", "op"]
    assert x2["transaction_state"] == "rolled_back"
    doc = run_json("trace", store, "--uniq-key", "X3", *SMALL_OPTS, expect=0)
    assert doc["chains"][0]["transaction_state"] == "pending"
    assert [c["role"] for c in doc["chains"][0]["copies"]] == ["half"]
    assert [(f["kind"], f["physical_offset"]) for f in doc["findings"]] == [
        ("transaction", at["zz"])
    ]
    assert "op_not_number" in doc["findings"][0]["detail"]


def test_trace_records_join_the_chain(tmp_path: Path) -> None:
    pub = TraceRecord(
        "Pub", "U9", timestamp=T0, region_id="R", group="pg", topic="T", tags="a", keys="k9",
        store_host="10.0.0.1:10911", body_length=1, cost_time=2, msg_type=0,
        offset_msg_id=encode_offset_msg_id(DEFAULT_STORE_HOST, 0), success=True,
    )  # fmt: skip
    sub = TraceRecord(
        "SubBefore", "U9", timestamp=T0 + 5, region_id="R", group="cg", request_id="r",
        retry_times=0, keys="k9",
    )  # fmt: skip
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        w.put(MessageSpec(topic="T", uniq_key="U9", keys="k9", body=b"m"))
        # AsyncTraceDispatcher: the traced msgIds and keys are the trace message's KEYS.
        w.put(MessageSpec(topic="RMQ_SYS_TRACE_TOPIC", keys="U9 k9", body=encode_trace_data([pub])))
        w.put(MessageSpec(topic="MyTraces", keys="U9", body=encode_trace_data([sub])))
        bad = w.put(MessageSpec(topic="RMQ_SYS_TRACE_TOPIC", keys="U9", body=b"Pub\x01oops\x02"))
        w.put(MessageSpec(topic="RMQ_SYS_TRACE_TOPIC", keys="other", body=b"Pub\x01x\x02"))
    store = tmp_path / "s"
    doc = run_json("trace", store, "--uniq-key", "U9", *SMALL_OPTS, expect=0)
    copies = doc["chains"][0]["copies"]
    assert [(c["role"], c["topic"]) for c in copies] == [
        ("original", "T"),
        ("trace", "RMQ_SYS_TRACE_TOPIC"),
        ("trace", "RMQ_SYS_TRACE_TOPIC"),
    ]
    assert copies[1]["traces"][0]["trace_type"] == "Pub"
    assert copies[1]["traces"][0]["offset_msg_id"] == pub.offset_msg_id
    assert [(f["kind"], f["physical_offset"]) for f in doc["findings"]] == [
        ("bad_trace_body", bad.physical_offset)
    ]
    custom = run_json(
        "trace", store, "--uniq-key", "U9", "--trace-topic", "MyTraces", *SMALL_OPTS, expect=0
    )
    roles = [(c["role"], c["topic"]) for c in custom["chains"][0]["copies"]]
    assert ("trace", "MyTraces") in roles
    mine = next(c for c in custom["chains"][0]["copies"] if c["topic"] == "MyTraces")
    assert [TraceRecord(**t) for t in mine["traces"]] == [sub]


def test_hostile_origin_ids(tmp_path: Path) -> None:
    """An ORIGIN_MESSAGE_ID naming no record, one that is no id at all, and two copies naming
    each other: findings, and the chain is still told."""

    def write(root: Path, ids: tuple[str, str]) -> list[int]:
        with StoreWriter(root, SMALL_LAYOUT) as w:
            out = [w.put(MessageSpec(topic="T", uniq_key="H1", body=b"m")).physical_offset]
            for origin, times in ((ids[0], 1), (ids[1], 2)):
                p = {props.UNIQ_KEY: "H1", props.ORIGIN_MESSAGE_ID: origin, props.DELAY: "x"}
                spec = MessageSpec(topic="%RETRY%g", properties=_raw(p), reconsume_times=times)
                out.append(w.put(spec).physical_offset)
            nowhere = {
                props.UNIQ_KEY: "H1",
                props.ORIGIN_MESSAGE_ID: encode_offset_msg_id(DEFAULT_STORE_HOST, 1 << 40),
            }
            out.append(
                w.put(MessageSpec(topic="%RETRY%g", properties=_raw(nowhere))).physical_offset
            )
            junk = {props.UNIQ_KEY: "H1", props.ORIGIN_MESSAGE_ID: "not-an-id"}
            out.append(w.put(MessageSpec(topic="%RETRY%g", properties=_raw(junk))).physical_offset)
        return out

    # Learn where the two copies land, then write them naming each other.
    first = write(tmp_path / "probe", ("A" * 32, "B" * 32))
    a, b = (encode_offset_msg_id(DEFAULT_STORE_HOST, p) for p in first[1:3])
    at = write(tmp_path / "s", (b, a))
    assert at == first
    doc = run_json("trace", tmp_path / "s", "--uniq-key", "H1", *SMALL_OPTS, expect=0)
    assert len(doc["chains"][0]["copies"]) == 5
    kinds = [(f["kind"], f["physical_offset"]) for f in doc["findings"]]
    assert kinds == [
        ("bad_property", at[1]),
        ("origin_cycle", at[1]),
        ("bad_property", at[2]),
        ("origin_nowhere", at[3]),
        ("origin_not_an_id", at[4]),
    ]
    cycle = next(f for f in doc["findings"] if f["kind"] == "origin_cycle")
    assert cycle["detail"] == f"ORIGIN_MESSAGE_ID cycle: {at[1]} -> {at[2]} -> {at[1]}"


def test_copies_without_uniq_key_link_by_origin(tmp_path: Path) -> None:
    """A copy without UNIQ_KEY joins by ORIGIN_MESSAGE_ID, the offsetMsgId of the original or
    (the client's fallback path) its UNIQ_KEY; an ORIGIN_MESSAGE_ID naming another message's
    record is a finding, and that message stays out of the chain."""
    uniq = "0A000001000000000000000000000001"
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        first = w.put(MessageSpec(topic="T", uniq_key=uniq, body=b"m")).physical_offset
        other = w.put(MessageSpec(topic="T", uniq_key="OTHER", body=b"m")).physical_offset
        first_id = encode_offset_msg_id(DEFAULT_STORE_HOST, first)
        by_id = w.put(
            MessageSpec(topic="%RETRY%g", properties={props.ORIGIN_MESSAGE_ID: first_id})
        ).physical_offset
        by_uniq = w.put(
            MessageSpec(topic="%RETRY%g", properties={props.ORIGIN_MESSAGE_ID: uniq})
        ).physical_offset
        stray = {props.ORIGIN_MESSAGE_ID: encode_offset_msg_id(DEFAULT_STORE_HOST, other)}
        wrong = w.put(MessageSpec(topic="%DLQ%g", uniq_key=uniq, properties=stray)).physical_offset
    doc = run_json("trace", tmp_path / "s", "--msg-id", first_id, *SMALL_OPTS, expect=0)
    (chain,) = doc["chains"]
    assert [(c["physical_offset"], c["linked_by"]) for c in chain["copies"]] == [
        (first, "seed"),
        (by_id, "origin_message_id"),
        (by_uniq, "origin_message_id"),
        (wrong, "uniq_key"),
    ]
    assert [(f["kind"], f["physical_offset"]) for f in doc["findings"]] == [
        ("origin_other_message", wrong)
    ]
    # Seeded at the copy, the original is found by following its ORIGIN_MESSAGE_ID back.
    back = run_json(
        "trace", tmp_path / "s", "--msg-id", encode_offset_msg_id(DEFAULT_STORE_HOST, by_id),
        *SMALL_OPTS, expect=0,
    )  # fmt: skip
    assert [c["physical_offset"] for c in back["chains"][0]["copies"]] == [
        first,
        by_id,
        by_uniq,
        wrong,
    ]


# --- the export's message_copies table ----------------------------------------------------------


def test_message_copies_table_is_every_corpus_copy(
    conformance_consume_dir: Path, tmp_path: Path
) -> None:
    """One row per copy the real broker stored (every record of a chain but its send: the
    original, or a delayed message's schedule record), with trace's roles; a copy that names its
    source by ORIGIN_MESSAGE_ID points at a record of its own chain, the one its group consumed."""
    store, doc = _corpus(conformance_consume_dir)
    out = tmp_path / "out"
    done = run(
        "export", store, out, "--engine", "arrow", "--tables", "message_copies", "--jobs", "1"
    )
    assert done.exit_code == 0, done.stderr
    rows = read_table(out, Table.MESSAGE_COPIES).to_pylist()
    got = {r["physical_offset"]: r for r in rows}
    want = {
        copy["commitLogOffset"]: (chain, copy)
        for chain in doc["chains"]
        for copy in chain["copies"][1:]
    }
    assert len(rows) == len(got) == len(want) == 591 - 300
    assert set(got) == set(want)
    linked = 0
    for at, (chain, copy) in want.items():
        row = got[at]
        assert row["role"] == EXPECTED_ROLE[copy["role"]]
        assert row["uniq_key"] == chain["uniqKey"]
        assert (row["topic"], row["queue_id"], row["queue_offset"]) == (
            copy["topic"],
            copy["queueId"],
            copy["queueOffset"],
        )
        assert row["reconsume_times"] == copy["reconsumeTimes"]
        assert int(row["store_timestamp"].timestamp() * 1000) == copy["storeTimestamp"]
        assert row["group"] == ("groupRetry" if copy["role"] in ("retry", "dlq") else None)
        origin = copy["ORIGIN_MESSAGE_ID"]
        assert row["origin_message_id"] == origin
        if origin is None:
            assert (row["from_physical_offset"], row["linked_by"]) == (None, "uniq_key")
            continue
        linked += 1
        source = next(c for c in chain["copies"] if c["offsetMsgId"] == origin)
        assert source["role"] in ("original", "scheduledDelivery")  # what groupRetry consumed
        assert row["from_physical_offset"] == source["commitLogOffset"]
        assert row["linked_by"] == "origin_message_id"
    # Every retry, its schedule copies and the dead letters name their origin: the 72 + 42 + 12
    # failures at reconsume times 0-2 each made a schedule and a retry copy, the 12 fourth
    # failures a DLQ copy.
    assert linked == 2 * (72 + 42 + 12) + 12


def test_message_copies_links_a_copy_without_uniq_key(tmp_path: Path) -> None:
    """A POP retry copy named by its origin's offsetMsgId (the group split against the one
    consumerOffset.json names), a commit by its preparedTransactionOffset, and a copy whose
    ORIGIN_MESSAGE_ID names nothing: a row, linked by nothing it stores."""
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        first = w.put(MessageSpec(topic="T", uniq_key="U1", body=b"m")).physical_offset
        origin = encode_offset_msg_id(DEFAULT_STORE_HOST, first)
        p = {props.ORIGIN_MESSAGE_ID: origin, props.RETRY_TOPIC: "T"}
        pop = w.put(
            MessageSpec(topic="%RETRY%cg_T", properties=p, reconsume_times=1)
        ).physical_offset
        junk = {props.ORIGIN_MESSAGE_ID: "junk"}
        stray = w.put(
            MessageSpec(topic="%RETRY%cg", properties=junk, reconsume_times=1)
        ).physical_offset
        half = w.put(MessageSpec(topic=HALF_TOPIC, uniq_key="X1", body=b"h")).physical_offset
        commit = w.put(
            MessageSpec(
                topic="T",
                uniq_key="X1",
                sys_flag=TRANSACTION_COMMIT_TYPE,
                prepared_transaction_offset=half,
            )
        ).physical_offset
        w.set_consumer_offsets({"%RETRY%cg_T@cg": {0: 0}})
    out = tmp_path / "out"
    done = run(
        "export", tmp_path / "s", out, "--engine", "arrow", "--tables", "message_copies",
        "--jobs", "1", *SMALL_OPTS,
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    rows = read_table(out, Table.MESSAGE_COPIES).to_pylist()
    assert sorted(
        (r["physical_offset"], r["from_physical_offset"], r["role"], r["group"], r["linked_by"])
        for r in rows
    ) == [
        (pop, first, "retry", "cg", "origin_message_id"),
        (stray, None, "retry", "cg", "uniq_key"),
        (commit, half, "commit", None, "prepared_transaction_offset"),
    ]


def test_a_delayed_message_not_yet_delivered(tmp_path: Path) -> None:
    """The original's schedule copy waits (delayOffset.json is at it): every group, and a store
    without groups, is told when it is due."""
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        spec = MessageSpec(topic="T", uniq_key="D1", delay_level=2, store_timestamp=T0)
        w.put(spec)
        w.set_delay_offsets({2: 0})
    store = tmp_path / "s"
    lone = _chain(store, "D1")
    (copy,) = lone["copies"]
    assert (copy["role"], copy["real_topic"], copy["delivered"]) == ("schedule", "T", False)
    assert copy["due_timestamp"] == T0 + 5_000  # level 2 of the default table
    assert lone["topic"] == "T"
    assert lone["summary"] == [
        "no consumer group has a committed offset on T",
        "the message waits in delay level 2 until 2023-11-14T22:13:25.000Z",
        "no retry copies",
    ]
    with_group = tmp_path / "g"
    with StoreWriter(with_group, SMALL_LAYOUT) as w:
        w.put(spec)
        w.set_delay_offsets({2: 0})
        w.set_consumer_offsets({"T@cg": {0: 0}})
    assert _fates(_chain(with_group, "D1")) == {
        "cg": "the message waits in delay level 2 until 2023-11-14T22:13:25.000Z"
    }


def test_store_text_cannot_drive_the_terminal(tmp_path: Path) -> None:
    group = "g\x1b[2J\u202e"
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        w.put(MessageSpec(topic="T", uniq_key="E1", body=b"m"))
        w.put(MessageSpec(topic=f"%DLQ%{group}", uniq_key="E1", reconsume_times=3))
    shown = run("trace", tmp_path / "s", "--uniq-key", "E1", *SMALL_OPTS, "-F", "table")
    assert shown.exit_code == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\u202e" not in shown.stdout
    assert "  - moved to %DLQ%g\\x1b[2J\\u202e after 3 attempts" in shown.stdout
    doc = run_json("trace", tmp_path / "s", "--uniq-key", "E1", *SMALL_OPTS, expect=0)
    assert doc["chains"][0]["groups"][0]["group"] == group  # JSON keeps the name exactly
