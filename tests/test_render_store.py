"""The info, index, consumequeue, lookup and recover renderers on the analyses of one tiny
writer-built store whose keys and tags look like rich markup: field names, the ``*_time``
sibling of every ``*_timestamp`` at any depth, the JSON each format prints, literal tables."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqinspect.analysis.indexes import index_reports, iter_entries
from rmqinspect.analysis.inventory import build_inventory
from rmqinspect.analysis.lookup import KeyQuery, lookup_key, lookup_msg_id
from rmqinspect.analysis.queue_listing import list_units, queue_listing
from rmqinspect.analysis.recovery import RecoverOptions, analyze_recovery
from rmqinspect.analysis.units import UnitView
from rmqinspect.format.message_json import BodyFormat, message_json
from rmqinspect.render.indexes import entry_json, index_report_json, render_index
from rmqinspect.render.inventory import inventory_json, inventory_tables, render_inventory
from rmqinspect.render.lookup import lookup_json, lookup_tables, render_lookup
from rmqinspect.render.output import OutputFormat
from rmqinspect.render.queues import render_queue_listing, unit_json
from rmqinspect.render.recover import (
    lost_message_json,
    recover_json,
    recover_tables,
    render_recover,
)
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.synth import damage
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import build_store
from tests.render_helpers import (
    MARKUP_KEYS,
    MARKUP_TAG,
    assert_time_siblings,
    printed_json,
    printed_jsonl,
    table_text,
)
from tests.test_cli_recover import LOST_MESSAGE_FIELDS, TOP_LEVEL_KEYS

pytestmark = pytest.mark.usefixtures("wide_console")

T0 = 1_714_557_600_000


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    specs = [
        MessageSpec(
            topic="Orders",
            queue_id=i % 2,
            body=f"order {i} é".encode(),
            tags=MARKUP_TAG,
            keys=[f"K{i}", *MARKUP_KEYS],
            uniq_key=f"{i:032X}",
            store_timestamp=T0 + i,
            dispatch=i < 10,  # a crash before the last two were dispatched
        )
        for i in range(12)
    ]
    root = build_store(
        tmp_path_factory.mktemp("render") / "s",
        specs,
        crash=True,
        consumer_offsets={"Orders@g": {0: 1}},
    )
    damage.torn_tail(root)  # so that recover has a damaged record and lost nothing else
    return root


@pytest.fixture
def store(store_dir: Path) -> Iterator[Store]:
    with Store.open(store_dir, StoreOptions(index_slot_num=64, index_num=400)) as opened:
        yield opened


def test_inventory(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    inv = build_inventory(store)
    doc = inventory_json(inv)
    assert list(doc) == [
        "store",
        "profile",
        "shutdown",
        "families",
        "commitlog",
        "topics",
        "index_files",
        "checkpoint",
        "config_files",
        "unsupported",
        "problems",
        "dledger",  # null unless the commitlog is DLedger's
        "topic_configs",
        "subscription_groups",
        "config_not_read",
    ]
    assert doc["dledger"] is None
    assert list(doc["commitlog"]) == [
        "min_offset",
        "max_offset",
        "max_offset_basis",
        "last_record_offset",
        "first_store_timestamp",
        "first_store_time",
        "last_store_timestamp",
        "last_store_time",
    ]
    assert doc["commitlog"]["first_store_time"] == "2024-05-01T10:00:00.000Z"
    # commitlog (2), checkpoint (3), each index file header (2)
    assert assert_time_siblings(doc) == 5 + 2 * len(doc["index_files"])
    assert doc["shutdown"] == {"clean": False, "abort_file": True, "abort_content": None}
    render_inventory(inv, OutputFormat.JSON)
    assert printed_json(capsys) == doc
    render_inventory(inv, OutputFormat.JSONL)
    assert printed_jsonl(capsys) == [doc]
    out = table_text(inventory_tables(inv), capsys)
    for text in ("CRASHED: abort file present", "Orders", "consumerOffset.json"):
        assert text in out, text


def test_index(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    reports = index_reports(store)
    (doc,) = [index_report_json(r) for r in reports]
    assert list(doc) == ["file", "name", "bytes", "geometry", "header", "statistics", "error"]
    assert doc["geometry"] == {"slots": 64, "entries": 400, "basis": "given"}
    assert list(doc["header"]) == [
        "begin_timestamp",
        "begin_time",
        "end_timestamp",
        "end_time",
        "begin_phy_offset",
        "end_phy_offset",
        "hash_slot_count",
        "index_count",
        "entries",
    ]
    assert {
        "entries",
        "used_slots",
        "slot_occupancy",
        "entry_fill",
        "max_chain",
        "mean_chain",
        "chain_histogram",
        "bad_slots",
        "broken_links",
        "unreachable_entries",
    } <= set(doc["statistics"])
    assert assert_time_siblings(doc) == 2
    entries = list(iter_entries(store, reports[0].info))
    assert len(entries) == 10 * 4  # UNIQ_KEY and three keys of each dispatched message
    first = entry_json(entries[0])
    assert list(first) == [
        "file",
        "entry",
        "key_hash",
        "slot",
        "physical_offset",
        "time_diff",
        "store_timestamp",
        "store_time",
        "prev",
    ]
    assert assert_time_siblings([entry_json(e) for e in entries]) == len(entries)

    render_index(reports, None, OutputFormat.JSON)
    assert printed_json(capsys) == {"files": [doc]}
    render_index(reports, iter(entries), OutputFormat.JSON)
    assert printed_json(capsys) == {"files": [doc], "entries": [entry_json(e) for e in entries]}
    render_index(reports, iter([]), OutputFormat.JSON)
    assert printed_json(capsys) == {"files": [doc], "entries": []}
    render_index(reports, None, OutputFormat.JSONL)
    assert printed_jsonl(capsys) == [doc]
    render_index(reports, iter(entries), OutputFormat.JSONL)
    assert printed_jsonl(capsys) == [entry_json(e) for e in entries]
    render_index(reports, iter(entries[:3]), OutputFormat.TABLE)
    out = capsys.readouterr().out
    assert "Index files" in out and "Entries" in out and "64/400 (given)" in out


def test_consume_queue(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    listing = queue_listing(store, "Orders", 0, None, False)

    def units() -> list[UnitView]:
        return list(list_units(store, listing, "Orders", 0, None))

    docs = [unit_json(u, BodyFormat.TEXT) for u in units()]
    assert len(docs) == 5 and all(d["status"] == "found" for d in docs)
    assert list(docs[0]) == [
        "queue_offset",
        "physical_offset",
        "size",
        "tags_code",
        "tags_code_kind",
        "expected_tags_code",
        "tags_code_ok",
        "status",
        "detail",
        "message",
        "repeat",
    ]
    assert docs[0]["message"]["keys"] == ["K0", *MARKUP_KEYS]
    assert assert_time_siblings(docs) == 2 * len(docs)  # born and store time of each message

    assert render_queue_listing(listing, iter(units()), OutputFormat.JSON, BodyFormat.TEXT) == 0
    doc = printed_json(capsys)
    assert list(doc) == ["queue", "stale_units_after_end", "units"]
    assert doc["units"] == docs and doc["queue"]["topic"] == "Orders"
    render_queue_listing(listing, iter(units()), OutputFormat.JSONL, BodyFormat.TEXT)
    assert printed_jsonl(capsys) == docs
    render_queue_listing(listing, iter([]), OutputFormat.JSON, BodyFormat.TEXT)
    assert printed_json(capsys)["units"] == []
    render_queue_listing(listing, iter(units()), OutputFormat.TABLE, BodyFormat.TEXT)
    out = capsys.readouterr().out
    assert "Consume queue Orders/0" in out and "keys=K0 [order] a[/]b" in out


def test_lookup(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    result = lookup_key(store, KeyQuery("a[/]b", ("Orders",), False, 64))
    doc = lookup_json(result, BodyFormat.TEXT)
    assert list(doc) == [
        "mode",
        "query",
        "found",
        "messages",
        "rejected",
        "index",
        "scanned",
        "tail_scanned",
        "skipped",
        "truncated",
        "warnings",
        "suggest_scan",
    ]
    assert list(doc["index"]) == [
        "state",
        "files_total",
        "files_used",
        "unusable",
        "chain_problems",
        "covered_from",
        "covered_to",
        "keys_queried",
        "index_offsets",
        "broker_offsets",
        "rounds",
    ]
    hits = doc["messages"]
    assert len(hits) == 11  # ten via the index, the undispatched eleventh via the tail scan
    assert [h["via"] for h in hits] == ["index"] * 10 + ["tail_scan"]
    assert all(list(h)[-2:] == ["via", "notes"] for h in hits)
    assert hits[0] == message_json(result.hits[0].record) | {"via": "index", "notes": []}
    assert assert_time_siblings(doc) == 2 * len(hits)

    render_lookup(result, OutputFormat.JSON, BodyFormat.TEXT)
    assert printed_json(capsys) == doc
    render_lookup(result, OutputFormat.JSONL, BodyFormat.TEXT)
    assert printed_jsonl(capsys) == hits
    out = table_text(lookup_tables(result), capsys)
    assert "11 messages" in out and "[order] a[/]b" in out and MARKUP_TAG in out

    one = lookup_msg_id(store, hits[3]["msg_id"])
    out = table_text(lookup_tables(one), capsys)
    assert "Found via physical_offset" in out and "property KEYS" in out
    assert f"K3 {' '.join(MARKUP_KEYS)}" in out


def test_recover(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    report = analyze_recovery(store, RecoverOptions(lost_limit=1))
    doc = recover_json(report)
    assert set(doc) == TOP_LEVEL_KEYS
    assert doc["loses_data"] is True and doc["apply"] is None
    # Every *_timestamp has its ISO sibling at any depth: the checkpoint's four and the three
    # it leaves after shutdown, the last valid record's, the start file candidates', ...
    assert assert_time_siblings(doc) >= 8
    assert doc["checkpoint"]["after_shutdown"]["index_msg_time"].endswith("Z")
    assert doc["commitlog"]["last_valid_record"]["store_time"] == "2024-05-01T10:00:00.010Z"
    assert doc["lost_messages"]["damaged_records"] == 1

    render_recover(report, OutputFormat.JSON)
    assert printed_json(capsys) == doc
    render_recover(report, OutputFormat.JSONL)
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert lines == doc["lost_messages"]["messages"]
    # Nothing intact is lost, yet the exit code says data is: stderr says why.
    assert captured.err == (
        "rmqinspect: warning: 1 damaged record(s) past the recovered end are discarded\n"
    )
    assert lines == [lost_message_json(m) for m in report.lost_messages.messages]
    out = table_text(recover_tables(report), capsys)
    assert "Restart recovery" in out and "the restart loses data" in out


def test_recover_lists_lost_messages_with_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = build_store(
        tmp_path / "s",
        [
            MessageSpec(topic="T", body=b"x" * 50, keys=list(MARKUP_KEYS), store_timestamp=T0 + i)
            for i in range(6)
        ],
    )
    damage.flip_body_byte(root, message_index=2)
    with Store.open(root) as opened:
        report = analyze_recovery(opened, RecoverOptions(lost_limit=2))
    lost = [lost_message_json(m) for m in report.lost_messages.messages]
    assert len(lost) == 2 and report.lost_messages.count == 3
    assert list(lost[0]) == LOST_MESSAGE_FIELDS
    assert lost[0]["store_time"] == "2024-05-01T10:00:00.003Z"
    assert assert_time_siblings(lost) == 2
    render_recover(report, OutputFormat.JSONL)
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == lost
    assert captured.err.splitlines() == [
        "rmqinspect: warning: 1 damaged record(s) past the recovered end are discarded",
        "rmqinspect: warning: 2 of 3 lost messages listed: raise --lost-limit",
    ]
    out = table_text(recover_tables(report), capsys)
    assert "Messages the restart destroys (2 of 3 listed)" in out
    assert " ".join(MARKUP_KEYS) in out
