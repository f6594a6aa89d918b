"""Every retrievable message of both corpora, decoded by ``messages``, equals what the real
broker's ``MessageDecoder`` gave for it (the JSON is the public output format)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.analysis.messages import MessageFilter, one_by_one, stream_messages
from rmqinspect.format.commitlog import MessageRecord, body_crc
from rmqinspect.format.host import HostAddress
from rmqinspect.format.message_json import BodyFormat, message_json
from rmqinspect.store.model import Store
from tests.cli_helpers import run
from tests.corpus import input_store, jsonl, scenarios
from tests.render_helpers import decode_body


def _host(h: dict[str, Any]) -> str:
    return str(HostAddress(bytes.fromhex(h["addrHex"]), h["port"]))


def assert_same_message(doc: dict[str, Any], line: dict[str, Any]) -> None:
    """``doc`` is rmqinspect's JSON for a message, ``line`` the broker's decode of it."""
    assert doc["topic"] == line["topic"]
    assert doc["queue_id"] == line["queueId"]
    assert doc["queue_offset"] == line["queueOffset"]
    assert doc["physical_offset"] == line["commitLogOffset"]
    assert doc.get("physical_offset_field", doc["physical_offset"]) == line["commitLogOffset"]
    assert doc["store_size"] == line["storeSize"]
    assert doc["sys_flag"] == line["sysFlag"]
    assert doc["flag"] == line["flag"]
    assert doc["body_crc"] == line["bodyCRC"]
    assert doc["body_crc_ok"] == (line["bodyCRC"] == line["bodyCrcComputed"])
    assert doc["body_length"] == line["bodyLen"]
    body = decode_body(doc["body_encoding"], doc["body"])
    if body is not None:
        assert len(body) == line["bodyLen"]
        assert body[:16].hex() == line["bodyHead"]
        assert body_crc(body) == line["bodyCrcComputed"]
    assert doc["born_timestamp"] == line["bornTimestamp"]
    assert doc["store_timestamp"] == line["storeTimestamp"]
    assert doc["born_host"] == _host(line["bornHost"])
    assert doc["store_host"] == _host(line["storeHost"])
    assert doc["reconsume_times"] == line["reconsumeTimes"]
    assert doc["prepared_transaction_offset"] == line["preparedTransactionOffset"]
    assert doc["msg_id"] == line["msgId"]
    assert doc["uniq_key"] == line["uniqKey"]
    assert doc["keys"] == ([] if line["keys"] is None else line["keys"].split(" "))
    assert doc["tags"] == line["tags"]
    assert doc["properties"] == line["properties"]


def _decoded(store_dir: Path) -> dict[int, MessageRecord]:
    with Store.open(store_dir) as store:
        return {
            ev.position: ev
            for ev in one_by_one(stream_messages(store, MessageFilter()))
            if isinstance(ev, MessageRecord)
        }


@pytest.mark.parametrize("corpus", ["conformance", "conformance5"])
def test_every_retrievable_message_decodes_like_the_broker(
    corpus: str, request: pytest.FixtureRequest
) -> None:
    base: Path = request.getfixturevalue(f"{corpus}_dir")
    checked = 0
    for scenario in scenarios(base):
        if scenario == "scenarios":
            continue
        records = _decoded(input_store(base, scenario))
        for line in jsonl(base, scenario, "messages"):
            if not line["retrievable"]:
                continue
            record = records.get(line["commitLogOffset"])
            assert record is not None, (scenario, line["commitLogOffset"])
            for fmt in (BodyFormat.TEXT, BodyFormat.BASE64):
                assert_same_message(message_json(record, fmt), line)
            checked += 1
    assert checked > 7000


def test_messages_cli_jsonl_streams_the_whole_store(conformance_dir: Path) -> None:
    store = input_store(conformance_dir, "clean")
    result = run("messages", store, "--format", "jsonl", "--body", "hex")
    assert result.exit_code == 0, result.stderr
    docs = {d["physical_offset"]: d for d in map(json.loads, result.stdout.splitlines())}
    lines = [ln for ln in jsonl(conformance_dir, "clean", "messages") if ln["retrievable"]]
    for line in lines:
        assert_same_message(docs[line["commitLogOffset"]], line)
    # Prepared transaction records never enter a consume queue but are in the commitlog.
    assert len(docs) == 2000
