"""Lookups against what the real 4.9.8 and 5.3.3 brokers returned for the same stores.

* Every ``queries`` entry: with ``--as-recovered`` the emulated ``queryMessage`` returns exactly
  ``queryMessageOffsets`` (duplicates included), its first index round exactly
  ``indexPhyOffsets``, and the client-checked messages are those offsets. On stores a clean
  shutdown left, the on-disk answer is the same.
* Every retrievable ``messages.jsonl`` line: ``--msg-id`` and ``--queue-offset`` return that
  message with equal fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.analysis.lookup import (
    KeyQuery,
    lookup_key,
    lookup_msg_id,
    lookup_queue_offset,
    restarted_index,
)
from rmqinspect.format.message_json import BodyFormat
from rmqinspect.render.lookup import hit_json
from rmqinspect.store.model import Store
from tests.cli_helpers import run
from tests.corpus import expected, input_store, jsonl, scenarios
from tests.test_messages_conformance import assert_same_message

CORPORA = ("conformance", "conformance5")


def _scenarios(base: Path) -> list[str]:
    return [s for s in scenarios(base) if s != "scenarios"]


def _query(q: dict[str, Any]) -> KeyQuery:
    return KeyQuery(q["key"], (q["topic"],), q["keyKind"] == "uniq", 32)


@pytest.mark.parametrize("corpus", CORPORA)
def test_queries_match_query_message_after_restart(
    corpus: str, request: pytest.FixtureRequest
) -> None:
    base: Path = request.getfixturevalue(f"{corpus}_dir")
    total = 0
    for scenario in _scenarios(base):
        meta = expected(base, scenario)
        with Store.open(input_store(base, scenario)) as store, restarted_index(store) as restart:
            for q in meta["queries"]:
                result = lookup_key(store, _query(q), restart=restart)
                assert result.index is not None
                where = (scenario, q["keyKind"], q["key"])
                assert sorted(result.index.index_offsets) == q["indexPhyOffsets"], where
                assert result.index.broker_offsets == sorted(q["queryMessageOffsets"]), where
                got = sorted(h.record.position for h in result.hits)
                assert got == sorted(set(q["queryMessageOffsets"])), where
                for h in result.hits:
                    assert h.record.topic == q["topic"]
                    if q["keyKind"] == "uniq":
                        assert h.record.uniq_key == q["key"]
                    else:
                        assert q["key"] in h.record.keys
                total += 1
    assert total > 300


@pytest.mark.parametrize("corpus", CORPORA)
def test_queries_on_cleanly_shut_down_stores_need_no_restart(
    corpus: str, request: pytest.FixtureRequest
) -> None:
    base: Path = request.getfixturevalue(f"{corpus}_dir")
    checked = 0
    for scenario in _scenarios(base):
        meta = expected(base, scenario)
        if meta["before"]["abortFilePresent"]:
            continue
        with Store.open(input_store(base, scenario)) as store:
            for q in meta["queries"]:
                result = lookup_key(store, _query(q))
                got = sorted(h.record.position for h in result.hits)
                assert got == sorted(set(q["queryMessageOffsets"])), (scenario, q["key"])
                checked += 1
    assert checked > 150


@pytest.mark.parametrize("corpus", CORPORA)
def test_msg_id_and_queue_offset_return_the_broker_message(
    corpus: str, request: pytest.FixtureRequest
) -> None:
    base: Path = request.getfixturevalue(f"{corpus}_dir")
    checked = 0
    for scenario in _scenarios(base):
        with Store.open(input_store(base, scenario)) as store:
            for line in jsonl(base, scenario, "messages"):
                if not line["retrievable"]:
                    continue
                by_id = lookup_msg_id(store, line["msgId"])
                assert len(by_id.hits) == 1, (scenario, line["msgId"], by_id.rejected)
                assert_same_message(hit_json(by_id.hits[0], BodyFormat.BASE64), line)
                by_queue = lookup_queue_offset(
                    store, line["topic"], line["queueId"], line["cqIndex"]
                )
                assert len(by_queue.hits) == 1, (scenario, line["topic"], line["cqIndex"])
                assert_same_message(hit_json(by_queue.hits[0], BodyFormat.TEXT), line)
                checked += 1
    assert checked > 7000


@pytest.mark.parametrize("corpus", CORPORA)
def test_cli_lookups_on_a_sample(corpus: str, request: pytest.FixtureRequest) -> None:
    """The same answers through the command line, JSON output and exit codes."""
    base: Path = request.getfixturevalue(f"{corpus}_dir")
    scenario = "crash" if corpus == "conformance" else "crash5"
    store = input_store(base, scenario)
    lines = [ln for ln in jsonl(base, scenario, "messages") if ln["retrievable"]]
    for line in lines[:: max(1, len(lines) // 15)]:
        for args in (
            ("--msg-id", line["msgId"]),
            ("--queue-offset", f"{line['topic']}:{line['queueId']}:{line['cqIndex']}"),
        ):
            result = run("lookup", store, *args, "--format", "json", "--body", "hex")
            assert result.exit_code == 0, (args, result.stderr)
            (doc,) = json.loads(result.stdout)["messages"]
            assert_same_message(doc, line)
    for q in expected(base, scenario)["queries"][:20]:
        mode = "--uniq-key" if q["keyKind"] == "uniq" else "--key"
        result = run(
            "lookup",
            store,
            mode,
            q["key"],
            "--topic",
            q["topic"],
            "--max-num",
            "32",
            "--as-recovered",
            "--format",
            "json",
        )
        want = sorted(set(q["queryMessageOffsets"]))
        assert result.exit_code == (0 if want else 1), result.stderr
        doc = json.loads(result.stdout)
        assert sorted(m["physical_offset"] for m in doc["messages"]) == want
        assert doc["index"]["broker_offsets"] == sorted(q["queryMessageOffsets"])


@pytest.mark.parametrize("corpus", CORPORA)
def test_time_lookup_after_a_crash_finds_what_the_restarted_broker_serves(
    corpus: str, request: pytest.FixtureRequest
) -> None:
    """The crash stores' last burst is in the commitlog only; --time finds it past the queues,
    exactly the messages the restarted broker serves in that window."""
    base: Path = request.getfixturevalue(f"{corpus}_dir")
    scenario = "crash" if corpus == "conformance" else "crash5"
    store = input_store(base, scenario)
    served = [ln for ln in jsonl(base, scenario, "messages") if ln["retrievable"]]
    last_burst = sorted(ln["storeTimestamp"] for ln in served)[-150]
    window = (last_burst, last_burst + 10_000)
    want = sorted(
        ln["commitLogOffset"]
        for ln in served
        if ln["topic"] == "TopicA" and window[0] <= ln["storeTimestamp"] <= window[1]
    )
    assert len(want) > 20
    result = run(
        "lookup", store, "--time", "{}..{}".format(*window), "--topic", "TopicA", "-F", "json"
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert sorted(m["physical_offset"] for m in doc["messages"]) == want
    assert {m["via"] for m in doc["messages"]} >= {"tail_scan"}
    listed = run(
        "messages", store, "--topic", "TopicA", "--since", str(window[0]), "--until", str(window[1])
    )
    assert sorted(m["physical_offset"] for m in json.loads(listed.stdout)) == want


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("topic", ["TopicA", "TopicB"])
def test_max_num_keeps_the_newest_and_says_when_it_cuts(
    corpus: str, topic: str, request: pytest.FixtureRequest
) -> None:
    """The key HOT: TopicA has more messages than --max-num 32, TopicB fewer. On the crash
    stores part of them is past the index (the tail scan finds them)."""
    base: Path = request.getfixturevalue(f"{corpus}_dir")
    for scenario in ("clean", "crash") if corpus == "conformance" else ("clean5", "crash5"):
        store = input_store(base, scenario)
        args = ("lookup", store, "--key", "HOT", "--topic", topic, "-F", "json")
        every = [m["physical_offset"] for m in json.loads(run(*args, "--scan").stdout)["messages"]]
        doc = json.loads(run(*args, "--max-num", "32").stdout)
        got = [m["physical_offset"] for m in doc["messages"]]
        assert got == every[-32:], scenario
        assert doc["truncated"] is (len(every) > 32), scenario
    assert len(every) != 32
