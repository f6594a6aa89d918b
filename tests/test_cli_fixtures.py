"""Every inspection command on every fixture store: valid JSON, no traceback, exit 0, and lookups
that find each sampled message by every id the store gives it. One test per store and command,
so that a failure names both."""

from __future__ import annotations

import functools
import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import run
from tests.conftest import FIXTURES
from tests.test_fixtures import load_regenerate

STORES = sorted(load_regenerate().STORES)


@pytest.fixture(scope="session")
def fixture_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed fixture stores, or the same stores regenerated where they are absent."""
    stores = FIXTURES / "stores"
    if stores.is_dir():
        return stores
    out = tmp_path_factory.mktemp("fixtures")
    load_regenerate().build_all(out)
    return out / "stores"


def test_every_fixture_store_is_tested(fixture_root: Path) -> None:
    assert len(STORES) >= 10
    assert sorted(p.name for p in fixture_root.iterdir() if p.is_dir()) == STORES


@functools.cache
def _json(*args: str | Path) -> Any:
    """A command's JSON output; cached because several tests read the same ``info`` and
    ``messages`` of a store (callers must not change what they get)."""
    result = run(*args, "--format", "json")
    assert result.exit_code == 0, (args, result.stderr)
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def _files(directory: Path) -> list[Path]:
    """The regular files under ``directory``, sorted; none where git dropped it (empty49)."""
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.is_dir() else []


_PAIRS = re.compile(r"(\d+):(-?\d+)")  # fastjson writes integer keys unquoted


def _consumer_table(path: Path) -> set[tuple[str, str, int, int]]:
    """consumerOffset.json's ``offsetTable`` as (topic, group, queue, offset), read with a
    regex rather than rmqinspect's own parser."""
    text = path.read_text(encoding="utf-8")
    rows = set()
    for key, body in re.findall(r'"([^"]+@[^"]+)":\{([^{}]*)\}', text):
        topic, group = key.split("@", 1)
        rows |= {(topic, group, int(q), int(o)) for q, o in _PAIRS.findall(body)}
    return rows


def _delay_table(path: Path) -> set[tuple[int, int]]:
    """delayOffset.json's flat ``offsetTable`` as (delay level, offset)."""
    body = path.read_text(encoding="utf-8").split("offsetTable", 1)[1]
    return {(int(level), int(o)) for level, o in _PAIRS.findall(body)}


_INDEX_HEADER = (
    "begin_timestamp",
    "end_timestamp",
    "begin_phy_offset",
    "end_phy_offset",
    "hash_slot_count",
    "index_count",
)


@pytest.mark.parametrize("name", STORES)
def test_report_commands_describe_the_files(fixture_root: Path, name: str) -> None:
    """info, index, checkpoint and offsets against the store's files, read here independently:
    file counts per family, index headers, checkpoint fields, and each offset table's rows."""
    store = fixture_root / name
    info = _json("info", store)
    # The three families are always listed (empty49 has none of their files); compaction only
    # where the 5.x store has it.
    families = ["commitlog", "consumequeue", "index"]
    families += ["compaction"] if (store / "compaction").is_dir() else []
    assert [f["name"] for f in info["families"]] == families
    for family in info["families"]:
        assert family["file_count"] == len(_files(store / family["name"])), family["name"]

    headers = {
        path.name: struct.unpack_from(">qqqqii", path.read_bytes())
        for path in _files(store / "index")
    }
    listed = _json("index", store)["files"]
    assert {f["name"]: tuple(f["header"][k] for k in _INDEX_HEADER) for f in listed} == headers

    checkpoint = _json("checkpoint", store)
    raw = (store / "checkpoint").read_bytes()
    assert checkpoint["file_size"] == len(raw)
    assert (
        checkpoint["physic_msg_timestamp"],
        checkpoint["logics_msg_timestamp"],
        checkpoint["index_msg_timestamp"],
        checkpoint["master_flushed_offset"],
        checkpoint["confirm_phy_offset"],
    ) == struct.unpack_from(">qqqqq", raw)

    offsets = _json("offsets", store)["offsets"]
    consumer = {
        (r["topic"], r["group"], r["queue_id"], r["offset"])
        for r in offsets
        if r["table"] == "consumer"
    }
    assert consumer == _consumer_table(store / "config" / "consumerOffset.json")
    delay = {(r["delay_level"], r["offset"]) for r in offsets if r["table"] == "delay"}
    assert delay == _delay_table(store / "config" / "delayOffset.json")


# What the restart does to each fixture, by its construction (fixtures/README.md): exit status,
# verdict, intact messages lost, damaged records past the recovered end. The damage that cuts
# the log (a torn, zeroed, CRC-failing or rewritten record) under an abnormal recovery loses
# what follows; a missing queue directory strands that queue's messages; units pointing past
# the log end, stale records past the write position and a crash before dispatch lose nothing.
RECOVER_VERDICTS = {
    "bad_crc49": (1, "loses_data", 44, 1),
    "clean49": (0, "no_loss", 0, 0),
    "clean51": (0, "no_loss", 0, 0),
    "clean53": (0, "no_loss", 0, 0),
    "clean53_propcrc": (0, "no_loss", 0, 0),
    "cq_ahead49": (0, "no_loss", 0, 0),
    "cq_missing49": (1, "loses_data", 22, 0),
    "crash49": (0, "no_loss", 0, 0),
    "crash53": (0, "no_loss", 0, 0),
    "empty49": (0, "no_loss", 0, 0),
    "retention49": (0, "no_loss", 0, 0),
    "rewritten_tail49": (1, "loses_data", 1, 0),
    "stale_tail49": (0, "no_loss", 0, 0),
    "torn_tail49": (1, "loses_data", 0, 1),
    "zeroed49": (1, "loses_data", 73, 1),
}


@pytest.mark.parametrize("name", STORES)
def test_recover_verdict_of_each_fixture(fixture_root: Path, name: str) -> None:
    result = run("recover", fixture_root / name, "--format", "json")
    assert "Traceback" not in result.stderr
    doc = json.loads(result.stdout)
    lost = doc["lost_messages"]
    got = (result.exit_code, doc["verdict"], lost["count"], lost["damaged_records"])
    assert got == RECOVER_VERDICTS[name], result.stderr


@pytest.mark.parametrize("name", STORES)
def test_consume_queues_end_where_info_says(fixture_root: Path, name: str) -> None:
    store = fixture_root / name
    queues = [(t["topic"], q) for t in _json("info", store)["topics"] for q in t["queues"]]
    if not queues:
        pytest.skip(f"{name} has no consume queue")
    for topic, queue in queues:
        listing = _json("consumequeue", store, topic, str(queue["queue_id"]))
        assert listing["queue"]["max_offset"] == queue["max_offset"], (topic, queue["queue_id"])


def _sampled(store: Path) -> list[dict[str, Any]]:
    messages = _json("messages", store, "--body", "base64")
    assert isinstance(messages, list)
    if not messages:
        assert not _json("info", store)["topics"]
        pytest.skip(f"{store.name} holds no message")
    sample: list[dict[str, Any]] = messages[:: max(1, len(messages) // 8)]
    return sample


@pytest.mark.parametrize("name", STORES)
def test_lookup_by_msg_id(fixture_root: Path, name: str) -> None:
    store = fixture_root / name
    for m in _sampled(store):
        by_id = _json("lookup", store, "--msg-id", m["msg_id"])
        assert [h["physical_offset"] for h in by_id["messages"]] == [m["physical_offset"]]
        decoded = _json("decode-id", m["msg_id"])
        assert decoded["offset_msg_id"]["physical_offset"] == m["physical_offset"]


@pytest.mark.parametrize("name", STORES)
def test_lookup_by_uniq_key_and_keys(fixture_root: Path, name: str) -> None:
    store = fixture_root / name
    queries = [
        (m, option, value)
        for m in _sampled(store)
        for option, value in [("--key", k) for k in m["keys"]] + [("--uniq-key", m["uniq_key"])]
        if value
    ]
    assert queries
    for m, option, value in queries:
        found = _json("lookup", store, option, value, "--topic", m["topic"])
        assert m["physical_offset"] in {h["physical_offset"] for h in found["messages"]}, (
            option,
            value,
        )
