"""``rmqinspect stats``: every count against the records ``messages`` lists unfiltered."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from rmqinspect.analysis.stats import BODY_SIZE_BOUNDS, HOUR_MS
from tests.cli_helpers import build_store, orders, run, run_json


def _synth(tmp_path: Path) -> Path:
    store = tmp_path / "s"
    made = run("synth", store, "--messages", "600", "--fate", "--seed", "3")
    assert made.exit_code == 0, made.stderr
    return store


def _listed(store: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``messages -F jsonl``: (messages, skipped ranges)."""
    result = run("messages", store, "-F", "jsonl", "--body", "none")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return [d for d in lines if "skipped" not in d], [d["skipped"] for d in lines if "skipped" in d]


def _bucket(n: int) -> int | None:
    return next((b for b in BODY_SIZE_BOUNDS if n <= b), None)


def _tallies(docs: list[dict[str, Any]], key: Any) -> dict[Any, tuple[int, int]]:
    records: Counter[Any] = Counter()
    size: Counter[Any] = Counter()
    for d in docs:
        records[key(d)] += 1
        size[key(d)] += d["store_size"]
    return {k: (records[k], size[k]) for k in records}


def _got(rows: list[dict[str, Any]], *names: str) -> dict[Any, tuple[int, int]]:
    def key(r: dict[str, Any]) -> Any:
        return r[names[0]] if len(names) == 1 else tuple(r[n] for n in names)

    return {key(r): (r["records"], r["bytes"]) for r in rows}


def test_stats_count_every_record_messages_lists(tmp_path: Path) -> None:
    store = _synth(tmp_path)
    docs, skipped = _listed(store)
    assert skipped == [] and len(docs) > 600  # retries, delays, half messages added
    s = run_json("stats", store, expect=0)
    assert s["records"] == len(docs)
    assert s["bytes"] == sum(d["store_size"] for d in docs)
    assert _got(s["by_topic"], "topic") == _tallies(docs, lambda d: d["topic"])
    assert _got(s["by_queue"], "topic", "queue_id") == _tallies(
        docs, lambda d: (d["topic"], d["queue_id"])
    )
    assert _got(s["by_tag"], "tags") == _tallies(docs, lambda d: d["tags"])
    assert None in _got(s["by_tag"], "tags")  # records without TAGS are counted too
    assert _got(s["by_transaction"], "transaction") == _tallies(docs, lambda d: d["transaction"])
    assert len(s["by_transaction"]) > 1
    assert _got(s["body_size"], "body_length_at_most") == _tallies(
        docs, lambda d: _bucket(d["body_length"])
    )
    hours = _tallies(docs, lambda d: d["store_timestamp"] // HOUR_MS * HOUR_MS)
    assert _got(s["per_hour"], "hour_timestamp") == hours
    assert [r["hour_timestamp"] for r in s["per_hour"]] == sorted(hours)
    assert s["skipped_ranges"] == 0 and s["skipped"] == []


def test_stats_report_the_ranges_the_walk_skips(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(12))
    docs, _ = _listed(store)
    victim = docs[4]
    first = sorted((store / "commitlog").iterdir())[0]
    data = bytearray(first.read_bytes())
    data[victim["physical_offset"] + 4 : victim["physical_offset"] + 8] = b"\0\0\0\0"
    first.write_bytes(bytes(data))
    after, skipped = _listed(store)
    assert len(after) == 11 and len(skipped) == 1
    result = run("stats", store, "-F", "json")
    assert result.exit_code == 0
    s = json.loads(result.stdout)
    assert s["skipped"] == skipped and s["skipped_ranges"] == 1
    assert s["skipped_bytes"] == skipped[0]["length"] >= victim["store_size"]
    assert s["records"] == 11 and s["bytes"] == sum(d["store_size"] for d in after)
    assert "skipped" in result.stderr and f"byte {skipped[0]['file_position']}" in result.stderr


def test_stats_table_shows_each_breakdown(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(4) + orders(2, topic="Other", queues=1))
    table = run("stats", store, "-F", "table")
    assert table.exit_code == 0, table.stderr
    for title in ("By topic", "By queue", "By tag", "By transaction", "By body size", "Per hour"):
        assert title in table.stdout
    assert "TagA" in table.stdout and "Other" in table.stdout
    assert table.stdout.rstrip().splitlines()[-1].startswith("6 records, ")


def test_stats_of_a_real_broker_store(conformance_consume_dir: Path) -> None:
    store = conformance_consume_dir / "stores" / "consume_clean"
    docs, skipped = _listed(store)
    s = run_json("stats", store, expect=0)
    assert s["records"] == len(docs) and s["skipped"] == skipped
    assert _got(s["by_queue"], "topic", "queue_id") == _tallies(
        docs, lambda d: (d["topic"], d["queue_id"])
    )
    assert _got(s["by_tag"], "tags") == _tallies(docs, lambda d: d["tags"])
