"""Every scenario of the real-broker consumption corpus (``conformance-consume``): ``groups``,
``trace`` and ``delays`` against what the real 4.9.8 broker stored and, where the scenario has an
``afterRestart`` section, against what it did when it restarted on the store.

Only facts that hold in every scenario are asserted here (the committed offsets and queue ends,
the copies of each chain, the delay offsets, the resets the broker logged, the scheduled
deliveries the restart made); the scenario-specific numbers are in the per-command tests. The
crash cases are also built from ``consume_clean`` in ``tmp_path`` (offset files deleted or made
stale, ``abort`` written), where each prediction is checked exactly against the chains.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.analysis.offsets import ConsumeFromWhere, start_without_offset
from rmqinspect.analysis.trace import TraceQuery, trace_report
from rmqinspect.render.trace import trace_json
from rmqinspect.store.model import Store, StoreOptions
from tests.cli_helpers import build_store, delays_exit, orders, run
from tests.conftest import CONFORMANCE_CONSUME
from tests.corpus import expected, input_store, scenarios

SCENARIOS = scenarios(CONFORMANCE_CONSUME) if (CONFORMANCE_CONSUME / "expected").is_dir() else []
PARAMS = SCENARIOS or [
    pytest.param(
        "absent",
        marks=pytest.mark.skip(reason=f"real-broker corpus not found at {CONFORMANCE_CONSUME}"),
    )
]
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
ROLE = {
    "original": "original",
    "schedule": "schedule",
    "scheduledDelivery": "scheduled_delivery",
    "retry": "retry",
    "dlq": "dlq",
}
CFW = {
    "CONSUME_FROM_FIRST_OFFSET": "first",
    "CONSUME_FROM_LAST_OFFSET": "last",
    "CONSUME_FROM_TIMESTAMP": "timestamp",
}


@cache
def _expected(scenario: str) -> dict[str, Any]:
    return expected(CONFORMANCE_CONSUME, scenario)


def _levels(doc: dict[str, Any]) -> str:
    text: str = doc["brokerConfig"]["messageStoreConfig"]["messageDelayLevel"]
    return text


def _consume_from_where(doc: dict[str, Any]) -> str:
    (where,) = {c["consumeFromWhere"] for c in doc["brokerConfig"]["consumers"].values()}
    return CFW[where]


def _json(*args: str | Path) -> dict[str, Any]:
    """A command's JSON, its exit code pinned to what the document says: 1 for flagged groups
    or delay levels (or a config file in error), a trace that found nothing; else 0."""
    result = run(*args, "--format", "json")
    assert "Traceback" not in result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    assert result.exit_code == _exit_of(str(args[0]), doc), (result.exit_code, result.stderr)
    return doc


def _exit_of(command: str, doc: dict[str, Any]) -> int:
    if command == "groups":
        flagged = bool(doc["problems"]) or any(g["flagged"] for g in doc["groups"])
    elif command == "delays":
        return delays_exit(doc)
    else:  # trace
        flagged = not doc["found"]
    return 1 if flagged else 0


def _groups(store: Path, *args: str) -> dict[str, dict[str, Any]]:
    doc = _json("groups", store, "--broker-version", "4.9.8", *args)
    return {g["group"]: g for g in doc["groups"]}


def _rows(group: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(q["topic"], q["queue_id"]): q for q in group["queues"]}


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value (the broker log is kept as lines, in whatever nesting)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


_MOVED = re.compile(
    r"topic=(?P<topic>[^,\s]+),\s*groupId=(?P<group>[^,\s]+),\s*"
    r"requestOffset=(?P<request>-?\d+),\s*newOffset=(?P<new>-?\d+)"
)


def _moved_in_log(after: dict[str, Any]) -> set[tuple[str, str, int, int]]:
    """(group, topic, requestOffset, newOffset) of the broker's PULL_OFFSET_MOVED log lines
    (``PullMessageProcessor``: "PULL_OFFSET_MOVED:correction offset. topic=..., groupId=...,
    requestOffset=..., newOffset=...")."""
    out = set()
    for line in _strings(after.get("brokerLog", [])):
        if "PULL_OFFSET_MOVED:correction offset" not in line:
            continue
        m = _MOVED.search(line)
        assert m is not None, line
        out.add((m["group"], m["topic"], int(m["request"]), int(m["new"])))
    return out


def _delivered_schedule_units(chains: list[dict[str, Any]]) -> set[tuple[int, int]]:
    """(schedule queue, queue offset) of every schedule copy the schedule service delivered: a
    later copy of the same message in its REAL_TOPIC with its reconsume times."""
    out = set()
    for chain in chains:
        copies = chain["copies"]
        for i, c in enumerate(copies):
            if c["role"] != "schedule":
                continue
            if any(
                later["topic"] == c["REAL_TOPIC"] and later["reconsumeTimes"] == c["reconsumeTimes"]
                for later in copies[i + 1 :]
            ):
                out.add((c["queueId"], c["queueOffset"]))
    return out


# --- every scenario -------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", PARAMS)
def test_groups_offsets_and_queue_ends(conformance_consume_dir: Path, scenario: str) -> None:
    """Committed offsets, lag and queue ends as the corpus computed them from the store, the
    queue on disk as its consume queue files hold it, and the consumers' groups all listed
    (from subscriptionGroup.json where no offset was ever persisted)."""
    doc = _expected(scenario)
    store = input_store(conformance_consume_dir, scenario)
    got = _groups(store, "--after-restart", "--consume-from-where", _consume_from_where(doc))
    assert set(doc["brokerConfig"]["consumers"]) <= set(got)
    on_disk = doc["consumeQueueUnitsOnDisk"]
    maxima = doc["queueMaxOffsetFromCommitLog"]
    for group, topics in (doc.get("backlogFromConsumerOffsetJson") or {}).items():
        rows = _rows(got[group])
        for topic, by_queue in topics.items():
            for qid, facts in by_queue.items():
                row = rows[(topic, int(qid))]
                name = f"{topic}/{qid}"
                assert row["offset"] == facts["committed"]
                assert row["max_offset"] == on_disk.get(name, {}).get("units", 0), name
                assert row["min_offset"] == 0
                # Every record survives these restarts: the rebuilt queue ends where the
                # commitlog's records say.
                assert row["max_offset_after_restart"] == facts["maxOffset"] == maxima.get(name, 0)
                assert row["lag_after_restart"] == facts["lag"]
    dead = Counter(r["topic"] for r in doc.get("dlq") or [])
    for name, group in got.items():
        assert (group["dlq_size"] or 0) == dead[f"%DLQ%{name}"]


@pytest.mark.parametrize("scenario", PARAMS)
def test_groups_predict_the_restarts_resets(conformance_consume_dir: Path, scenario: str) -> None:
    """The resets predicted for the next pulls are the PULL_OFFSET_MOVED answers the real
    broker logged on its restart, and as many OFFSET_MOVED_EVENT records as it stored; the
    messages proven delivered before are at most what it delivered again."""
    doc = _expected(scenario)
    after = doc.get("afterRestart")
    if after is None:
        pytest.skip(f"{scenario} has no restart")
    store = input_store(conformance_consume_dir, scenario)
    got = _groups(store, "--after-restart", "--consume-from-where", _consume_from_where(doc))
    moved = [
        (name, q["topic"], q["queue_id"], q["offset"], q["next_pull_after_restart"]["next_offset"])
        for name, g in got.items()
        for q in g["queues"]
        if q["next_pull_after_restart"] is not None and q["next_pull_after_restart"]["moved"]
    ]
    predicted = {(name, topic, offset, new) for name, topic, _q, offset, new in moved}
    logged = _moved_in_log(after)
    if any("PULL_OFFSET_MOVED:correction" in s for s in _strings(after.get("brokerLog", []))):
        assert predicted == logged
    events = after.get("newRecordsByRole", {}).get("offsetMovedEvent", 0)
    assert len(moved) == events
    final = (after.get("configFiles") or {}).get("consumerOffset.json", {}).get("parsed", {})
    table = final.get("offsetTable", {})
    delivered = after.get("deliveries") or []
    for name, topic, queue_id, _offset, new in moved:
        # The client adopts the corrected offset and commits it: with nothing delivered
        # since, it is the final offset.
        if not any(d.get("group") == name for d in delivered):
            assert table[f"{topic}@{name}"][str(queue_id)] == new
    if all("group" in d for d in delivered):
        again = Counter(d["group"] for d in delivered if d.get("copyWrittenBeforeCrash"))
        for name, g in got.items():
            assert g["delivered_again"] <= again[name], name


@pytest.mark.parametrize("scenario", PARAMS)
def test_trace_copies_are_the_chains(conformance_consume_dir: Path, scenario: str) -> None:
    """Each sent message's copies, as the real broker stored them in this scenario's input."""
    doc = _expected(scenario)
    store = input_store(conformance_consume_dir, scenario)
    keys = tuple(c["uniqKey"] for c in doc["chains"])
    with Store.open(store, StoreOptions(delay_levels=_levels(doc))) as st:
        report = trace_report(st, TraceQuery(uniq_keys=keys))
    got = {c["uniq_key"]: c for c in trace_json(report)["chains"]}
    for want in doc["chains"]:
        copies = got[want["uniqKey"]]["copies"]
        assert [
            (
                c["role"],
                c["topic"],
                c["queue_id"],
                c["queue_offset"],
                c["physical_offset"],
                c["store_size"],
                c["reconsume_times"],
                c["offset_msg_id"],
                c["real_topic"],
                c["retry_topic"],
                c["origin_message_id"],
            )
            for c in copies
        ] == [
            (
                ROLE[w["role"]],
                w["topic"],
                w["queueId"],
                w["queueOffset"],
                w["commitLogOffset"],
                w["storeSize"],
                w["reconsumeTimes"],
                w["offsetMsgId"],
                w["REAL_TOPIC"],
                w["RETRY_TOPIC"],
                w["ORIGIN_MESSAGE_ID"],
            )
            for w in want["copies"]
        ], want["key"]
    assert sum(len(c["copies"]) for c in got.values()) == sum(
        n for role, n in doc["commitLog"]["recordsByRole"].items() if role in ROLE
    )


@pytest.mark.parametrize("scenario", PARAMS)
def test_delays_offsets_and_redeliveries(conformance_consume_dir: Path, scenario: str) -> None:
    """delayOffset.json as the broker wrote it (every level from its min without one); the
    pending units whose delivery is stored are the ones delivered again; and after a restart
    the real broker delivered every pending unit bound for a topic exactly once."""
    doc = _expected(scenario)
    store = input_store(conformance_consume_dir, scenario)
    got = _json("delays", store, "--delay-levels", _levels(doc))
    levels = {lv["level"]: lv for lv in got["levels"]}
    file = doc["configFiles"].get("delayOffset.json")
    offsets = {} if file is None else {int(k): v for k, v in file["parsed"]["offsetTable"].items()}
    assert (got["file"] is None) is (file is None)
    maxima = doc["queueMaxOffsetFromCommitLog"]
    delivered = _delivered_schedule_units(doc["chains"])
    pending_units: list[tuple[int, int]] = []
    for level, lv in levels.items():
        queue = level - 1
        end = maxima.get(f"{SCHEDULE}/{queue}", 0)
        assert lv["offset"] == offsets.get(level)
        assert lv["offset_at_load"] == min(max(offsets.get(level, 0), 0), end)
        assert lv["max_offset_after_dispatch"] == end
        assert lv["pending"] == end - lv["offset_at_load"]
        units = [(queue, q) for q in range(lv["offset_at_load"], end)]
        pending_units += units
        assert lv["redelivered"] == sum(1 for u in units if u in delivered), level
    assert got["redelivered"] == sum(lv["redelivered"] for lv in levels.values())
    after = doc.get("afterRestart")
    if after is not None:
        bound_for_topic = sum(
            1
            for chain in doc["chains"]
            for c in chain["copies"]
            if c["role"] == "schedule"
            and not c["REAL_TOPIC"].startswith("%RETRY%")
            and (c["queueId"], c["queueOffset"]) in set(pending_units)
        )
        assert bound_for_topic == after.get("newRecordsByRole", {}).get("scheduledDelivery", 0)


# --- the start of a queue without a committed offset ---------------------------------------------


@pytest.mark.parametrize(
    ("retry", "where", "lo", "hi", "start"),
    [
        # The broker answers 0 for a queue whose min is 0 (queryConsumerOffset), whatever the
        # client's setting.
        (False, "first", 0, 9, 0),
        (False, "last", 0, 9, 0),
        (False, "timestamp", 0, 9, 0),
        (True, "timestamp", 0, 9, 0),
        # Otherwise computePullFromWhere: FIRST 0 (getMessage then moves it to the min), LAST
        # the max but 0 on a retry topic, TIMESTAMP the max on a retry topic, else searchOffset.
        (False, "first", 4, 9, 0),
        (True, "first", 4, 9, 0),
        (False, "last", 4, 9, 9),
        (True, "last", 4, 9, 0),
        (True, "timestamp", 4, 9, 9),
        (False, "timestamp", 4, 9, None),
        # Not known: a retry queue starts at 0 (FIRST and the default LAST); a topic queue's
        # start is left open.
        (True, "unknown", 4, 9, 0),
        (False, "unknown", 0, 9, None),
    ],
)
def test_start_without_offset(retry: bool, where: str, lo: int, hi: int, start: int | None) -> None:
    assert start_without_offset(retry, ConsumeFromWhere(where), lo, hi).offset == start


# --- crashes built from consume_clean ---------------------------------------------------------


def _crash_copy(corpus: Path, root: Path, drop: tuple[str, ...]) -> Path:
    store = root / "store"
    shutil.copytree(corpus / "stores/consume_clean", store)
    for name in drop:
        for path in (store / "config").glob(f"{name}*"):
            path.unlink()
    (store / "abort").write_bytes(b"")
    return store


def _failed(doc: dict[str, Any], group: str) -> Counter[tuple[str, int]]:
    """Copies the group failed (RECONSUME_LATER), by queue: each left a send-back behind."""
    return Counter(
        (c["topic"], c["queueId"])
        for chain in doc["chains"]
        for c in chain["copies"]
        for d in c["consumedBy"]
        if d["group"] == group and d["status"] == "RECONSUME_LATER"
    )


def test_crash_before_any_offset_was_persisted(
    conformance_consume_dir: Path, tmp_path: Path
) -> None:
    """consume_crash_early's case: no consumerOffset.json and no delayOffset.json. Both groups
    are still listed; with CONSUME_FROM_FIRST_OFFSET (or any other: the broker answers 0 for a
    queue whose min is 0) every queue is read from 0 again, and every delayed message the
    schedule service already delivered is delivered again."""
    doc = _expected("consume_clean")
    store = _crash_copy(
        conformance_consume_dir, tmp_path, ("consumerOffset.json", "delayOffset.json")
    )
    maxima = doc["queueMaxOffsetFromCommitLog"]
    for where in ("first", "last"):
        got = _groups(store, "--after-restart", "--consume-from-where", where)
        assert set(got) == {"groupOK", "groupRetry"}
        retry = got["groupRetry"]
        assert retry["topics_from_retry_copies"] == ["TopicA"]
        rows = _rows(retry)
        failed = _failed(doc, "groupRetry")
        assert set(rows) == {("TopicA", q) for q in range(4)} | {("%RETRY%groupRetry", 0)}
        for (topic, queue), row in rows.items():
            assert row["offset"] is None
            assert row["next_pull_after_restart"]["next_offset"] == 0
            assert row["pending"] == maxima[f"{topic}/{queue}"]
            assert row["delivered_before"] == failed[(topic, queue)]
            assert row["flagged"] is True
        assert retry["replayed"] == 300 + maxima["%RETRY%groupRetry/0"]
        assert retry["lag"] == 300 and retry["retry_backlog"] == 126
        assert retry["delivered_again"] == sum(failed.values())
        # groupOK never failed a message: nothing on disk says which topics it reads.
        ok = got["groupOK"]
        assert ok["queues"] == [] and ok["topics_from_retry_copies"] == []
        assert "no committed offset on a topic queue" in ok["notes"][0]
    unknown = _rows(_groups(store, "--after-restart")["groupRetry"])
    assert unknown[("TopicA", 0)]["next_pull"] is None
    assert "pass --consume-from-where" in unknown[("TopicA", 0)]["notes"][0]
    assert unknown[("%RETRY%groupRetry", 0)]["pending"] == 126  # a retry queue starts at 0
    # trace judges the copies by the same start: the retry copy is read again from 0.
    r1 = next(c for c in doc["chains"] if c["class"] == "r1")
    traced = _json(
        "trace", store, "--uniq-key", r1["uniqKey"], "--delay-levels", _levels(doc),
        "--consume-from-where", "first",
    )  # fmt: skip
    (fate,) = traced["chains"][0]["groups"]
    last = r1["copies"][-1]
    assert last["role"] == "retry"
    assert (fate["group"], fate["outcome"], fate["retries"]) == ("groupRetry", "pending", 1)
    assert fate["summary"].startswith(
        "groupRetry has no committed offset on %RETRY%groupRetry:0: it starts at 0 "
    )
    assert fate["summary"].endswith(
        f"gets the copy at %RETRY%groupRetry:0 offset {last['queueOffset']}, again if it "
        "consumed it before"
    )
    delays = _json("delays", store, "--delay-levels", _levels(doc))
    delivered = _delivered_schedule_units(doc["chains"])
    assert len(delivered) == doc["commitLog"]["recordsByRole"]["schedule"] == 153
    assert delays["redelivered"] == 153
    for lv in delays["levels"]:
        assert (lv["offset"], lv["offset_at_load"], lv["overdue"]) == (None, 0, 0)
        assert lv["redelivered"] == lv["pending"] == maxima[f"{SCHEDULE}/{lv['queue_id']}"]


def test_crash_with_a_stale_delay_offset(conformance_consume_dir: Path, tmp_path: Path) -> None:
    """consume_crash's delayOffset.json ({2:6,3:72,4:3,5:6}) over consume_clean's commitlog:
    the units between each offset and the queue's end were delivered (their copies are stored)
    and are delivered again; levels 17 and 18 have no entry and start at 0."""
    doc = _expected("consume_clean")
    store = _crash_copy(conformance_consume_dir, tmp_path, ())
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        (store / "config" / name).write_text('{\n\t"offsetTable":{2:6,3:72,4:3,5:6\n\t}\n}')
    got = _json("delays", store, "--delay-levels", _levels(doc))
    levels = {
        lv["level"]: (lv["pending"], lv["redelivered"], lv["overdue"]) for lv in got["levels"]
    }
    assert levels == {
        2: (0, 0, 0),
        3: (3, 3, 0),
        4: (42, 42, 0),
        5: (12, 12, 0),
        17: (6, 6, 0),
        18: (3, 3, 0),
    }
    assert got["redelivered"] == 66


def test_crash_with_offsets_behind_what_was_consumed(
    conformance_consume_dir: Path, tmp_path: Path
) -> None:
    """consume_crash's case: groupRetry's TopicA/0 committed at 0 and no %RETRY% entry. The
    messages it failed before (a send-back names them) are proven delivered again; the ones it
    consumed on the first try leave no trace and are only lag."""
    doc = _expected("consume_clean")
    store = _crash_copy(conformance_consume_dir, tmp_path, ())
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        path = store / "config" / name
        text = path.read_text()
        text = text.replace('"TopicA@groupRetry":{0:75,', '"TopicA@groupRetry":{0:0,')
        text = text.replace('\t\t"%RETRY%groupRetry@groupRetry":{0:126\n\t\t},\n', "")
        assert "%RETRY%groupRetry@" not in text and "{0:0,1:75" in text
        path.write_text(text)
    got = _groups(store, "--after-restart")
    rows = _rows(got["groupRetry"])
    failed = _failed(doc, "groupRetry")
    q0 = rows[("TopicA", 0)]
    assert (q0["offset"], q0["pending"], q0["lag_after_restart"]) == (0, 75, 75)
    assert q0["delivered_before"] == failed[("TopicA", 0)] > 0
    assert [r["delivered_before"] for k, r in rows.items() if k[0] == "TopicA" and k[1]] == [0] * 3
    retry = rows[("%RETRY%groupRetry", 0)]
    assert (retry["offset"], retry["pending"]) == (None, 126)
    assert retry["delivered_before"] == failed[("%RETRY%groupRetry", 0)] == 66
    assert got["groupRetry"]["delivered_again"] == failed[("TopicA", 0)] + 66
    assert got["groupOK"]["delivered_again"] == 0 and got["groupOK"]["lag"] == 0


def test_a_bad_consume_from_where_is_a_usage_error(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(2), consumer_offsets={"Orders@g": {0: 1}})
    for command in ("groups", "trace"):
        extra = ("--key", "k", "--topic", "Orders") if command == "trace" else ()
        result = run(command, store, *extra, "--consume-from-where", "sometimes")
        assert result.exit_code == 2, result.stderr
        assert "'sometimes' is not one of 'first', 'last', 'timestamp', 'unknown'" in result.stderr
        assert "Traceback" not in result.stderr
