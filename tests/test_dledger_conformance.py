"""A DLedger store that real RocketMQ 4.9.8 + DLedger 0.3.1.2 wrote and restarted
(``../shared/conformance-dledger``): every message, entry, lookup and the restart must agree with
what the real code did, field by field. The store's trimmed index file is restored in a
temporary copy (``restore_trimmed_store``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.analysis.messages import MessageFilter, one_by_one, stream_messages
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.format.message_json import BodyFormat, message_json
from rmqinspect.format.profile import Profile
from rmqinspect.format.scan import CheckedRun, Skipped, WalkPolicy
from rmqinspect.store.model import Store
from tests.cli_helpers import run
from tests.corpus import expected, jsonl
from tests.test_messages_conformance import assert_same_message

SCENARIO = "dledger_clean"


@pytest.fixture(scope="module")
def meta(conformance_dledger_dir: Path) -> dict[str, Any]:
    return expected(conformance_dledger_dir, SCENARIO)


def _prescan(corpus: Path) -> list[dict[str, Any]]:
    return list(jsonl(corpus, SCENARIO, "prescan"))


def test_every_entry_walks_as_the_prescan_saw_it(
    conformance_dledger_dir: Path, dledger_clean_store: Path
) -> None:
    """Each data file walked from position 0 with the broker's record check (CRC on; before
    ``load()`` 4.9.8 has no delay levels, so schedule records keep their tag hash): every
    message where the prescan found one, the same blanks and the same end of data."""
    lines = _prescan(conformance_dledger_dir)
    seen: list[dict[str, Any]] = []
    with Store.open(dledger_clean_store) as store:
        opts = cl.CheckOptions(check_crc=True, delay_levels=())
        for f in store.commitlog.files:
            for _, event in store.scan(f.start, opts, policy=WalkPolicy.BROKER, files=[f]):
                assert not isinstance(event, Skipped), event
                assert isinstance(event, CheckedRun)
                cols = event.columns
                for i in range(len(cols)):
                    at = int(cols.positions[i]) - dl.BODY_OFFSET
                    h = dl.EntryHeader.decode(store.view(f), at)
                    seen.append(
                        {
                            "kind": "msg",
                            "entryOffset": f.start + at,
                            "entryIndex": h.index,
                            "entryTerm": h.term,
                            "entrySize": h.size,
                            "offset": f.start + int(cols.positions[i]),
                            "queueOffset": int(cols.queue_offset[i]),
                            "topic": cols.topic(i),
                            "tagsCode": event.tags_code(i),
                        }
                    )
                if event.stop is not None:
                    kind = "blank" if event.stop.is_blank else "stop"
                    seen.append({"kind": kind, "entryOffset": f.start + event.end})
    want = [
        {k: line[k] for k in seen_keys(line)}
        for line in lines
        if line["kind"] in ("msg", "blank", "stop")
    ]
    assert [{k: s[k] for k in seen_keys(s)} for s in seen] == want
    assert sum(1 for s in seen if s["kind"] == "msg") == 2000


def seen_keys(line: dict[str, Any]) -> list[str]:
    if line["kind"] != "msg":
        return ["kind", "entryOffset"]
    return [
        "kind",
        "entryOffset",
        "entryIndex",
        "entryTerm",
        "entrySize",
        "offset",
        "queueOffset",
        "topic",
        "tagsCode",
    ]


def test_every_retrievable_message_decodes_like_the_broker(
    conformance_dledger_dir: Path, dledger_clean_store: Path
) -> None:
    """``messages`` gives each message as ``getMessage`` served it, with its entry."""
    entries = {
        line["offset"]: line for line in _prescan(conformance_dledger_dir) if line["kind"] == "msg"
    }
    with Store.open(dledger_clean_store) as store:
        records = {
            ev.position: ev
            for ev in one_by_one(stream_messages(store, MessageFilter()))
            if isinstance(ev, cl.MessageRecord)
        }
    assert len(records) == 2000
    checked = 0
    for line in jsonl(conformance_dledger_dir, SCENARIO, "messages"):
        assert line["retrievable"]
        record = records[line["commitLogOffset"]]
        doc = message_json(record, BodyFormat.BASE64)
        assert_same_message(doc, line)
        entry = entries[line["commitLogOffset"]]
        assert (doc["entry_index"], doc["entry_term"], doc["entry_position"]) == (
            entry["entryIndex"],
            entry["entryTerm"],
            entry["entryOffset"],
        )
        checked += 1
    assert checked == 1956


def test_messages_cli_streams_the_dledger_store(
    conformance_dledger_dir: Path, dledger_clean_store: Path
) -> None:
    result = run("messages", dledger_clean_store, "--format", "jsonl", "--topic", "TopicC")
    assert result.exit_code == 0, result.stderr
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    want = [
        line
        for line in jsonl(conformance_dledger_dir, SCENARIO, "messages")
        if line["topic"] == "TopicC"
    ]
    assert [d["physical_offset"] for d in docs] == [w["commitLogOffset"] for w in want]
    assert all(d["entry_position"] == d["physical_offset"] - 48 for d in docs)


def test_writer_rebuilds_the_store_byte_for_byte(
    conformance_dledger_dir: Path, dledger_clean_store: Path, tmp_path: Path
) -> None:
    """Every record of the store, put again through ``StoreWriter`` with the DLedger commitlog,
    gives the same data files (entry headers, blanks), index file, consume queues, RocketMQ
    index files, store checkpoint, DLedger checkpoint and currterm."""
    from rmqinspect.format import fastjson
    from rmqinspect.format.config import parse_consumer_offsets, parse_delay_offsets
    from rmqinspect.synth.writer import StoreLayout, StoreWriter
    from tests.test_writer_conformance import (
        CORPUS_LAYOUT,
        HAND_WRITTEN,
        INDEX_GEOMETRY,
        WRITER_ONLY,
        files_of,
        spec_of,
    )

    original = dledger_clean_store
    with Store.open(original) as store:
        recs = [
            store.read_message(ev.position)
            for ev in one_by_one(stream_messages(store, MessageFilter()))
            if isinstance(ev, cl.MessageRecord)
        ]
    names = sorted(p.name for p in (original / "index").iterdir())
    layout = StoreLayout(**CORPUS_LAYOUT, **INDEX_GEOMETRY, enable_dledger_commitlog=True)
    out = tmp_path / "rebuilt"
    with StoreWriter(out, layout, index_namer=lambda _ts, seq: names[seq]) as writer:
        for record in recs:
            result = writer.put(spec_of(record, False))
            assert (result.physical_offset, result.queue_offset) == (
                record.physical_offset_field,
                record.queue_offset,
            )
        config = original / "config"
        offsets = parse_consumer_offsets(fastjson.loads((config / HAND_WRITTEN[0]).read_bytes()))
        previous = parse_consumer_offsets(fastjson.loads((config / HAND_WRITTEN[1]).read_bytes()))
        writer.set_consumer_offsets(offsets.offset_table, previous.offset_table)
        delays = parse_delay_offsets(fastjson.loads((config / HAND_WRITTEN[2]).read_bytes()))
        writer.set_delay_offsets(delays.offset_table)
    want, got = files_of(original), files_of(out)
    assert set(got) - set(want) == WRITER_ONLY
    assert set(want) == set(got) - WRITER_ONLY
    for name, path in want.items():
        assert path.read_bytes() == got[name].read_bytes(), name


def _ledger_state(s: Any) -> dict[str, Any]:
    return {
        "ledgerBeginIndex": s.ledger_begin_index,
        "ledgerEndIndex": s.ledger_end_index,
        "ledgerEndTerm": s.ledger_end_term,
        "committedIndex": s.committed_index,
        "committedPos": s.committed_pos,
        "currTerm": s.current_term,
        "role": s.role,
    }


@pytest.mark.parametrize("auto_profile", [False, True], ids=["explicit", "inferred"])
def test_recover_report_matches_the_broker(
    meta: dict[str, Any], dledger_clean_store: Path, auto_profile: bool
) -> None:
    """The restart predicted field by field: DLedger's recovery (files, data and index ends,
    ledger indexes and terms, committed index and position after load and after start, the
    checkpoint and currterm read), RocketMQ's max offset after load and start, consume queues,
    index files and the checkpoints the following shutdown leaves."""
    from rmqinspect.analysis.recovery import RecoverOptions, run_recovery
    from tests.test_recover_conformance import _queues, _store_options

    s = meta["summary"]
    options = _store_options(meta, None if auto_profile else Profile.V4_9)
    with Store.open(dledger_clean_store, options) as store:
        report = run_recovery(store, RecoverOptions(check_crc=True)).report
    assert report.profile == "4.9"
    assert report.broker_starts is s["loadResult"]
    assert report.last_exit_ok is s["lastExitOK"]
    assert report.recovery_path == s["recoveryPath"]
    c = report.commitlog
    d = report.dledger
    assert c is not None and d is not None
    assert c.max_offset == s["commitlogEndOffsetAfterRecovery"]
    assert d.after_load.max_offset == meta["afterLoad"]["commitlog"]["maxPhyOffset"]
    assert d.after_start.max_offset == s["commitlogEndOffsetAfterStart"]
    assert d.after_start.max_offset == meta["afterStart"]["commitlog"]["maxPhyOffset"]
    assert c.min_offset == s["minPhyOffset"] == meta["afterLoad"]["commitlog"]["minPhyOffset"]
    assert c.files_before == d.data_files_before == s["dledgerDataFilesBefore"]
    assert c.deleted_files == d.data_files_deleted == s["dledgerDataFilesDeletedByRecovery"]
    assert d.data_end == s["dledgerDataEndAfterRecovery"]
    assert d.index_end == s["dledgerIndexEndAfterRecovery"]
    assert _ledger_state(d.after_load) == s["dledgerAfterLoad"]
    assert (
        _ledger_state(d.after_start) | {"leaderId": d.after_start.leader_id}
        == (s["dledgerAfterStart"])
    )
    for phase, state in (("afterLoad", d.after_load), ("afterStart", d.after_start)):
        raw = meta[phase]["commitlog"]["dledger"]
        assert (state.role, state.leader_id, state.current_term) == (
            raw["role"],
            raw["leaderId"],
            raw["currTerm"],
        )
        assert [(f.name, f.wrote_position) for f in d.data_files_after] == [
            (f["name"], f["wrotePosition"]) for f in raw["dataFiles"]
        ]
        assert [(f.name, f.wrote_position) for f in d.index_files_after] == [
            (f["name"], f["wrotePosition"]) for f in raw["indexFiles"]
        ]
        assert d.data_end == raw["dataWritePos"] == raw["dataMaxWrotePosition"]
        assert d.index_end == raw["indexMaxWrotePosition"]
        assert d.checkpoint.lines == raw["checkpointFile"]["lines"]
        assert d.currterm.lines == raw["currtermFile"]["lines"]
    assert d.start_entry_index == 767
    assert report.start_file is not None and report.start_file.index == 2
    assert d.index_rebuilt_from is None and d.index_units_rewritten == 0
    assert report.cq_truncation  # maxPhyOffsetOfConsumeQueue >= the data end ([TruncateCQ])
    assert _queues(report) == s["consumeQueues"]
    idx = report.index
    assert idx is not None
    assert idx.files_before == s["indexFilesBefore"]
    assert idx.deleted_files == s["indexFilesDestroyedAtLoad"]
    assert idx.files_created == len(s["indexFilesCreatedDuringRecoveryOrStart"])
    after = meta["afterShutdown"]
    cp = report.checkpoint
    assert cp is not None
    assert cp.after_shutdown["physic_msg_timestamp"] == after["checkpoint"]["physicMsgTimestamp"]
    assert cp.after_shutdown["logics_msg_timestamp"] == after["checkpoint"]["logicsMsgTimestamp"]
    assert cp.after_shutdown["index_msg_timestamp"] == after["checkpoint"]["indexMsgTimestamp"]
    persisted = dl.encode_checkpoint(
        d.checkpoint_after_shutdown["committed_index"], d.checkpoint_after_shutdown["end_index"]
    )
    assert persisted.decode().splitlines() == after["dledgerCheckpointFile"]["lines"]
    assert len(persisted) == after["dledgerCheckpointFile"]["size"]
    assert report.lost_messages.count == 0 and not report.loses_data


def test_apply_to_leaves_what_the_broker_left(
    meta: dict[str, Any], dledger_clean_store: Path, tmp_path: Path
) -> None:
    """``--apply-to`` leaves the files the broker left after start() and shutdown(), with the
    same DLedger checkpoint and currterm (and the .bak the election wrote); a restart there
    changes nothing."""
    from rmqinspect.analysis.recovery import RecoverOptions, apply_recovery

    dest = tmp_path / "after"
    with Store.open(dledger_clean_store) as store:
        _, applied = apply_recovery(store, dest, RecoverOptions())
    assert applied.verification_noop, applied.verification_differences
    after = meta["afterShutdown"]
    got = {
        p.relative_to(dest).as_posix(): p.stat().st_size
        for p in dest.rglob("*")
        if p.is_file() and not p.relative_to(dest).as_posix().startswith("config/")
    }
    assert got == {f["path"]: f["size"] for f in after["filesExceptConfig"]}
    home = dest / "dledger-n0"
    assert (home / "checkpoint").read_text().splitlines() == after["dledgerCheckpointFile"]["lines"]
    assert (home / "currterm").read_text().splitlines() == after["dledgerCurrtermFile"]["lines"]


def test_queries_match_query_message(meta: dict[str, Any], dledger_clean_store: Path) -> None:
    """Every recorded ``queryMessage``: on disk and as after the restart, the index's first
    round, the broker's answer and the client-checked messages are the broker's."""
    from rmqinspect.analysis.lookup import KeyQuery, lookup_key, restarted_index

    assert len(meta["queries"]) > 80
    with Store.open(dledger_clean_store) as store, restarted_index(store) as restart:
        for q in meta["queries"]:
            query = KeyQuery(q["key"], (q["topic"],), q["keyKind"] == "uniq", 32)
            for result in (lookup_key(store, query), lookup_key(store, query, restart=restart)):
                assert result.index is not None
                where = (q["keyKind"], q["key"])
                assert sorted(result.index.index_offsets) == q["indexPhyOffsets"], where
                assert result.index.broker_offsets == sorted(q["queryMessageOffsets"]), where
                got = sorted(h.record.position for h in result.hits)
                assert got == sorted(set(q["queryMessageOffsets"])), where


def test_msg_id_and_queue_offset_return_the_broker_message(
    conformance_dledger_dir: Path, dledger_clean_store: Path
) -> None:
    from rmqinspect.analysis.lookup import lookup_msg_id, lookup_queue_offset
    from rmqinspect.render.lookup import hit_json

    checked = 0
    with Store.open(dledger_clean_store) as store:
        for line in jsonl(conformance_dledger_dir, SCENARIO, "messages"):
            by_id = lookup_msg_id(store, line["msgId"])
            assert len(by_id.hits) == 1, (line["msgId"], by_id.rejected)
            doc = hit_json(by_id.hits[0], BodyFormat.BASE64)
            assert_same_message(doc, line)
            assert doc["entry_position"] == line["commitLogOffset"] - dl.BODY_OFFSET
            by_queue = lookup_queue_offset(store, line["topic"], line["queueId"], line["cqIndex"])
            assert len(by_queue.hits) == 1, (line["topic"], line["cqIndex"])
            assert_same_message(hit_json(by_queue.hits[0], BodyFormat.TEXT), line)
            checked += 1
    assert checked == 1956


def test_info_shows_the_ledger(meta: dict[str, Any], dledger_clean_store: Path) -> None:
    """``info``: the DLedger state on disk as the broker's own dump shows it before the
    restart (index file units, checkpoint, currterm)."""
    doc = json.loads(run("info", dledger_clean_store, "--format", "json").stdout)
    ledger = doc["dledger"]
    raw = meta["before"]["dledgerRaw"]
    (index,) = raw["index"]["files"]
    assert ledger["index_files"] == [index["name"]]
    assert (ledger["begin_index"], ledger["end_index"]) == (
        index["firstUnit"]["index"],
        index["lastUnit"]["index"],
    )
    assert ledger["data_end"] == index["lastUnit"]["pos"] + index["lastUnit"]["size"]
    assert ledger["checkpoint_lines"] == raw["checkpointFile"]["lines"]
    assert ledger["currterm_lines"] == raw["currtermFile"]["lines"]
    assert ledger["committed_pos"] == meta["afterLoad"]["commitlog"]["dledger"]["committedPos"]
    assert [f["name"] for f in ledger["files"]] == meta["summary"]["dledgerDataFilesBefore"]
    per_file = meta["prescanSummary"]["perFile"]
    assert [f["first_index"] for f in ledger["files"]][:2] == [
        0,
        per_file[ledger["files"][0]["name"]]["validMessages"],
    ]
    assert doc["commitlog"]["max_offset"] == ledger["data_end"]
    assert [u["takes_over"] for u in doc["unsupported"]] == [["salvage"]]
