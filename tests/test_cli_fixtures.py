"""Every inspection command on every fixture store: valid JSON, no traceback, exit 0, and lookups
that find each sampled message by every id the store gives it. One test per store and command,
so that a failure names both."""

from __future__ import annotations

import functools
import json
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


@pytest.mark.parametrize("command", ["info", "index", "checkpoint", "offsets"])
@pytest.mark.parametrize("name", STORES)
def test_report_commands(fixture_root: Path, name: str, command: str) -> None:
    assert isinstance(_json(command, fixture_root / name), dict)


@pytest.mark.parametrize("name", STORES)
def test_recover_exit_code_follows_its_verdict(fixture_root: Path, name: str) -> None:
    result = run("recover", fixture_root / name, "--format", "json")
    assert "Traceback" not in result.stderr
    doc = json.loads(result.stdout)
    assert result.exit_code == int(doc["loses_data"] or not doc["broker_starts"]), result.stderr


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
