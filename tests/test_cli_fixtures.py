"""Every inspection command on every fixture store: valid JSON, no traceback, sane exit codes,
and lookups that find each sampled message by every id the store gives it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.cli_helpers import run
from tests.conftest import FIXTURES


@pytest.fixture(scope="session")
def fixture_stores(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The committed fixture stores, or the same stores regenerated where they are absent."""
    stores = FIXTURES / "stores"
    if not stores.is_dir():
        spec = importlib.util.spec_from_file_location("regenerate", FIXTURES / "regenerate.py")
        if spec is None or spec.loader is None:
            pytest.skip("fixtures/regenerate.py not found")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out = tmp_path_factory.mktemp("fixtures")
        module.build_all(out)
        stores = out / "stores"
    return sorted(p for p in stores.iterdir() if p.is_dir())


def _json(*args: str | Path) -> object:
    result = run(*args, "--format", "json")
    assert result.exit_code in (0, 1), (args, result.stderr)
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def test_every_command_on_every_fixture(fixture_stores: list[Path]) -> None:
    assert len(fixture_stores) >= 10
    for store in fixture_stores:
        info = _json("info", store)
        assert isinstance(info, dict)
        _json("index", store)
        _json("checkpoint", store)
        _json("offsets", store)
        messages = _json("messages", store, "--body", "base64")
        assert isinstance(messages, list)
        for topic in info["topics"]:
            for queue in topic["queues"]:
                listing = _json("consumequeue", store, topic["topic"], str(queue["queue_id"]))
                assert isinstance(listing, dict)
                assert listing["queue"]["max_offset"] == queue["max_offset"]
        for m in messages[:: max(1, len(messages) // 8)]:
            by_id = _json("lookup", store, "--msg-id", m["msg_id"])
            assert isinstance(by_id, dict)
            assert [h["physical_offset"] for h in by_id["messages"]] == [m["physical_offset"]]
            _json("decode-id", m["msg_id"])
            if m["uniq_key"]:
                found = _json("lookup", store, "--uniq-key", m["uniq_key"], "--topic", m["topic"])
                assert isinstance(found, dict)
                assert m["physical_offset"] in {h["physical_offset"] for h in found["messages"]}
            for key in m["keys"]:
                found = _json("lookup", store, "--key", key, "--topic", m["topic"])
                assert isinstance(found, dict)
                assert m["physical_offset"] in {h["physical_offset"] for h in found["messages"]}
