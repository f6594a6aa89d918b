"""DLedger stores built by the writer (``synth --dledger``): round trips through every command,
and the restart behaviours the real 4.9.8 + DLedger 0.3.1.2 code showed
(dledger-store-format.md §7-§8): a torn entry whose header survives is kept and served, the max
offset after ``load()`` is the committed position and the rest is dispatched after the
election, and an abnormal start destroys the last index file while nothing re-indexes what the
reput had already passed."""

from __future__ import annotations

import itertools
import json
import os
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from rmqinspect.analysis.lookup import KeyQuery, lookup_key, lookup_queue_offset, restarted_index
from rmqinspect.analysis.messages import (
    MessageFilter,
    SkippedRange,
    one_by_one,
    stream_messages,
)
from rmqinspect.analysis.recovery import (
    ApplyReport,
    RecoverOptions,
    RecoveryReport,
    apply_recovery,
    run_recovery,
)
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.store.layout import StorePart
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.synth import damage
from rmqinspect.synth.writer import MessageSpec, PutResult, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT, SMALL_OPTS, run, run_json, run_jsonl

LAYOUT = replace(SMALL_LAYOUT, enable_dledger_commitlog=True)  # 64 KiB data files
T0 = 1_790_000_000_000
STEP_MS = 10


def specs(n: int, dispatched: int | None = None) -> list[MessageSpec]:
    return [
        MessageSpec(
            topic=("TopicA", "TopicB")[i % 2],
            queue_id=(i // 2) % 2,
            body=f"message {i} ".encode() * (5 + i % 30),
            tags="TagA" if i % 3 else None,
            keys=f"K{i}",
            uniq_key=f"{i:032X}",
            store_timestamp=T0 + STEP_MS * i,
            dispatch=dispatched is None or i < dispatched,
        )
        for i in range(n)
    ]


def write(
    root: Path, n: int, *, dispatched: int | None = None, crash: bool = False, lag_ms: int = 0
) -> list[PutResult]:
    with StoreWriter(root, LAYOUT, crash=crash, flush_lag_ms=lag_ms) as w:
        return [w.put(spec) for spec in specs(n, dispatched)]


def open_store(root: Path) -> Store:
    return Store.open(root, StoreOptions(index_slot_num=64, index_num=400))


def recover(root: Path) -> RecoveryReport:
    with open_store(root) as store:
        return run_recovery(store, RecoverOptions()).report


def entry_end(put: PutResult) -> int:
    return put.physical_offset + put.size


# --- round trips ---------------------------------------------------------------------------------


def test_writer_round_trips_through_the_store_model(tmp_path: Path) -> None:
    root = tmp_path / "store"
    puts = write(root, 600)
    assert not (root / "commitlog").exists()
    with open_store(root) as store:
        assert store.dledger is not None and store.dledger.self_id == "n0"
        assert not store.problems
        assert [(u.kind, u.takes_over) for u in store.unsupported] == [
            ("dledger", StorePart.SALVAGE)  # only salvage does not read entries
        ]
        records = [
            e
            for e in one_by_one(stream_messages(store, MessageFilter()))
            if isinstance(e, cl.MessageRecord)
        ]
        assert [r.position for r in records] == [p.physical_offset for p in puts]
        assert [r.physical_offset_field for r in records] == [p.physical_offset for p in puts]
        assert [(r.entry.index, r.entry.term) for r in records if r.entry] == [
            (i, 0) for i in range(600)
        ]
        assert all(r.entry and r.entry.pos + 48 == r.position for r in records)
        assert all(r.body_crc_ok for r in records)
        # Every index unit names its entry.
        units = store.dledger.index_units(store.maps, 0, 601)
        assert [int(p) + 48 for p in units["pos"][:600]] == [p.physical_offset for p in puts]
        assert units["magic"][600] == 0
        # Entry i's record through its index unit.
        assert store.dledger.physical_offset_of(store.maps, 321) == puts[321].physical_offset
    doc = run_json("info", root, *SMALL_OPTS, expect=0)
    ledger = doc["dledger"]
    assert (ledger["begin_index"], ledger["end_index"]) == (0, 599)
    assert ledger["data_end"] == entry_end(puts[-1]) == doc["commitlog"]["max_offset"]
    assert ledger["committed_pos"] == entry_end(puts[-1])
    assert ledger["checkpoint_committed_index"] == 599 and ledger["vote_leader"] == "n0"
    assert [f["name"] for f in doc["families"][:2]] == ["dledger_data", "dledger_index"]
    files = ledger["files"]
    assert files[0]["first_index"] == 0 and files[-1]["last_index"] == 599
    assert all(a["last_index"] + 1 == b["first_index"] for a, b in itertools.pairwise(files))


def test_commands_answer_on_a_dledger_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    puts = write(root, 300)
    target = puts[123]
    msg_id = next(
        d["msg_id"]
        for d in run_jsonl("messages", root, *SMALL_OPTS, expect=0)
        if d["physical_offset"] == target.physical_offset
    )
    found = run_json("lookup", root, "--msg-id", msg_id, *SMALL_OPTS, expect=0)
    assert found["found"] and found["messages"][0]["entry_index"] == 123
    assert found["messages"][0]["entry_position"] == target.physical_offset - 48
    by_key = run_json(
        "lookup", root, "--key", "K123", "--topic", target.topic, *SMALL_OPTS, expect=0
    )
    assert [m["physical_offset"] for m in by_key["messages"]] == [target.physical_offset]
    ref = f"{target.topic}:{target.queue_id}:{target.queue_offset}"
    assert run_json("lookup", root, "--queue-offset", ref, *SMALL_OPTS, expect=0)["found"]
    units = run_jsonl(
        "consumequeue", root, target.topic, str(target.queue_id), *SMALL_OPTS, expect=0
    )
    assert {u["status"] for u in units} == {"found"}
    decoded = run_json("decode-id", msg_id, expect=0)
    assert decoded["offset_msg_id"]["physical_offset"] == target.physical_offset
    assert run("index", root, *SMALL_OPTS).exit_code == 0
    from_entry = run_jsonl(
        "messages", root, "--from", str(target.physical_offset - 48), *SMALL_OPTS, expect=0
    )
    assert from_entry[0]["physical_offset"] == target.physical_offset


def test_synth_cli_writes_a_dledger_store(tmp_path: Path) -> None:
    out = tmp_path / "store"
    result = run(
        "synth",
        out,
        "--dledger",
        "--messages",
        "500",
        "--commitlog-file-size",
        "65536",
        "--crash",
        "--damage",
        "torn-tail",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["dledger"]["home"] == "dledger-n0"
    assert summary["dledger"]["entries"] == 500
    assert summary["dledger"]["committed_index"] < 499
    assert summary["damage"][0]["kind"] == "torn_tail"
    assert (out / "dledger-n0" / "currterm").read_text() == "voteLeader=n0\ncurrTerm=0\n"


# --- the restart ---------------------------------------------------------------------------------


def test_clean_restart_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    puts = write(root, 400)
    report = recover(root)
    d = report.dledger
    assert d is not None and report.commitlog is not None
    assert report.recovery_path == "normal" and report.broker_starts
    assert report.commitlog.max_offset == d.data_end == entry_end(puts[-1])
    assert d.after_load.max_offset == d.after_start.max_offset
    assert d.after_load.committed_index == d.after_start.committed_index == 399
    assert report.reput is not None and report.reput.dispatched_records == 0
    assert not d.kept_damage and d.index_rebuilt_from is None
    assert not report.loses_data and report.index is not None and not report.index.deleted_files


def test_crash_max_offset_after_load_is_the_committed_position(tmp_path: Path) -> None:
    """The DLedger checkpoint lags the data: RocketMQ's max offset after load() is where the
    committed entry ends; the rest is dispatched once the node is leader again."""
    root = tmp_path / "store"
    n, dispatched = 400, 340
    puts = write(root, n, dispatched=dispatched, crash=True, lag_ms=1000)
    committed = int(
        dl.parse_properties_text((root / "dledger-n0" / "checkpoint").read_text())["committedIndex"]
    )
    assert committed == n - 1 - 1000 // STEP_MS
    report = recover(root)
    d, c = report.dledger, report.commitlog
    assert d is not None and c is not None
    assert report.recovery_path == "abnormal"
    assert c.max_offset == d.after_load.max_offset == entry_end(puts[committed])
    assert d.after_load.committed_index == committed and d.after_load.role == "CANDIDATE"
    assert d.after_start.max_offset == d.data_end == entry_end(puts[-1])
    assert (d.after_start.committed_index, d.after_start.role) == (n - 1, "LEADER")
    assert d.undispatched_at_load == d.after_start.max_offset - c.max_offset > 0
    # No dispatch during load(): everything after the consume queues' end comes from the reput.
    assert all(q.units_written_at_load == 0 for q in report.consume_queues)
    assert report.reput is not None
    assert report.reput.start_offset == entry_end(puts[dispatched - 1])
    assert report.reput.dispatched_records == n - dispatched
    per_queue: dict[tuple[str, int], int] = {}
    for p in puts:
        per_queue[(p.topic, p.queue_id)] = per_queue.get((p.topic, p.queue_id), 0) + 1
    assert {(q.topic, q.queue_id): q.max_offset_after_dispatch for q in report.consume_queues} == (
        per_queue
    )
    cp = report.checkpoint
    assert cp is not None  # DLedger mode: the consume-queue dispatch moves physicMsgTimestamp
    assert cp.after_shutdown["physic_msg_timestamp"] == puts[-1].store_timestamp
    assert d.checkpoint_after_shutdown == {"committed_index": n - 1, "end_index": n - 1}
    assert not report.loses_data


def test_abnormal_start_loses_the_keys_the_reput_had_passed(tmp_path: Path) -> None:
    """The crash deletes the last index file (its endTimestamp is past the checkpoint's
    indexMsgTimestamp); the reput rebuilds index entries only from the consume queues' end."""
    root = tmp_path / "store"
    n, dispatched = 1000, 900
    puts = write(root, n, dispatched=dispatched, crash=True, lag_ms=1500)
    report = recover(root)
    idx = report.index
    assert idx is not None and report.reput is not None
    assert idx.deleted_files == [idx.files_before[-1]]
    reput_from = report.reput.start_offset
    [gone] = idx.unfindable_ranges
    assert gone.last_offset < reput_from <= idx.new_files[0].begin_phy_offset
    lost = next(p for p in puts if gone.first_offset <= p.physical_offset <= gone.last_offset)
    rebuilt = puts[-1]
    key = KeyQuery(f"K{puts.index(lost)}", (lost.topic,), False, 32)
    with open_store(root) as store:
        on_disk = lookup_key(store, key)
        assert [h.record.position for h in on_disk.hits] == [lost.physical_offset]
        with restarted_index(store) as restart:
            assert not lookup_key(store, key, restart=restart).hits
            again = lookup_key(
                store, KeyQuery(f"K{n - 1}", (rebuilt.topic,), False, 32), restart=restart
            )
            assert [h.record.position for h in again.hits] == [rebuilt.physical_offset]
            assert restart.end == entry_end(puts[-1])  # the leader serves every kept entry
        assert lookup_key(store, key, scan=True).hits


def test_torn_entry_whose_header_survives_is_kept_and_served(tmp_path: Path) -> None:
    """DLedger checks no CRC: the torn entry stays, its consume-queue unit stays, and the
    broker serves its bytes; rmqinspect says the record is damaged."""
    root = tmp_path / "store"
    puts = write(root, 300, crash=True)
    torn = damage.torn_tail(root)
    last = puts[-1]
    assert torn.details["new_valid_end"] == entry_end(last)
    report = recover(root)
    d = report.dledger
    assert d is not None and report.commitlog is not None
    assert d.data_end == entry_end(last) and d.end_reason == "end_of_data"
    assert not d.data_files_deleted and report.lost_messages.count == 0
    assert [b.physical_offset for b in d.kept_damage] == [last.physical_offset - 48]
    assert d.kept_damage[0].reason == cl.CheckReason.TOTAL_SIZE_MISMATCH.value
    q = next(
        q for q in report.consume_queues if (q.topic, q.queue_id) == (last.topic, last.queue_id)
    )
    assert q.units_truncated == 0 and q.max_offset_after_dispatch == last.queue_offset + 1
    with open_store(root) as store:
        events = list(one_by_one(stream_messages(store, MessageFilter())))
        skipped = [e for e in events if isinstance(e, SkippedRange)]
        assert [(s.physical_offset, s.length) for s in skipped] == [
            (last.physical_offset - 48, last.size + 48)
        ]
        assert sum(isinstance(e, cl.MessageRecord) for e in events) == 299
        served = lookup_queue_offset(store, last.topic, last.queue_id, last.queue_offset)
        assert not served.hits and "DLedger keeps this entry" in served.rejected[0].reason
    # The same tear in a plain store is cut by the restart.
    plain = tmp_path / "plain"
    with StoreWriter(plain, SMALL_LAYOUT, crash=True) as w:
        plain_last = [w.put(spec) for spec in specs(300)][-1]
    damage.torn_tail(plain)
    plain_report = recover(plain)
    assert plain_report.commitlog is not None
    assert plain_report.commitlog.max_offset == plain_last.physical_offset


def test_torn_entry_the_reput_had_not_reached_is_skipped(tmp_path: Path) -> None:
    """After a crash the reput meets the torn record: its length disagrees with its fields, so
    the reput skips it ("[BUG]read total count ...") without a consume-queue unit."""
    root = tmp_path / "store"
    puts = write(root, 300, dispatched=280, crash=True)
    damage.torn_tail(root)
    report = recover(root)
    assert report.reput is not None and report.dledger is not None
    assert report.reput.dispatched_records == 19 and report.reput.skipped_records == 1
    last = puts[-1]
    q = next(
        q for q in report.consume_queues if (q.topic, q.queue_id) == (last.topic, last.queue_id)
    )
    assert q.max_offset_after_dispatch == last.queue_offset  # no unit for the torn message


def test_torn_entry_header_ends_the_data(tmp_path: Path) -> None:
    """A header DLedger rejects ends its data: the entry and what follows are cut, and the
    consume-queue unit that pointed at it is truncated."""
    root = tmp_path / "store"
    puts = write(root, 300, crash=True)
    torn = damage.torn_entry_header(root)
    last = puts[-1]
    report = recover(root)
    d, c = report.dledger, report.commitlog
    assert d is not None and c is not None
    assert d.data_end == last.physical_offset - 48 == torn.details["entry_offset"]
    assert d.end_reason == cl.CheckReason.POS_FIELD_MISMATCH.value
    assert d.first_bad_entry is not None and d.first_bad_entry.physical_offset == d.data_end
    assert d.after_load.ledger_end_index == 298 and d.index_end == 299 * 32
    assert c.max_offset == d.data_end == d.after_start.max_offset
    assert report.cq_truncation
    assert sum(q.units_truncated for q in report.consume_queues) == 1
    assert report.lost_messages.damaged_records == 1 and report.loses_data
    assert c.last_file is not None and c.last_file.wrote_position == d.data_end - int(
        c.last_file.name
    )


def _patch(path: Path, at: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, at)
    finally:
        os.close(fd)


def test_index_units_that_disagree_are_rewritten_and_move_the_start_file(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write(root, 800)
    with open_store(root) as store:
        assert store.dledger is not None
        files = store.dledger.first_entries(store.maps)
    assert len(files) >= 5
    index_file = root / "dledger-n0" / "index" / f"{0:020d}"
    start = files[len(files) - 3][1].header
    assert start is not None
    _patch(index_file, start.index * 32, bytes(32))  # the start file's first unit
    report = recover(root)
    d = report.dledger
    assert d is not None and report.start_file is not None
    earlier = files[len(files) - 4][1].header
    assert earlier is not None
    assert report.start_file.index == len(files) - 4 and d.start_entry_index == earlier.index
    assert not report.start_file.candidates[0].matched
    assert d.index_rebuilt_from == start.index
    assert d.index_units_rewritten == 800 - start.index
    assert report.commitlog is not None and d.data_end == report.commitlog.max_offset


def test_checkpoint_missing_or_ahead(tmp_path: Path) -> None:
    root = tmp_path / "store"
    puts = write(root, 200)
    checkpoint = root / "dledger-n0" / "checkpoint"
    checkpoint.write_bytes(dl.encode_checkpoint(5000, 5000))
    d = recover(root).dledger
    assert d is not None and d.after_load.committed_index == 199  # clamped to the ledger end
    assert d.after_load.committed_pos == entry_end(puts[-1])
    checkpoint.unlink()
    report = recover(root)
    d = report.dledger
    assert d is not None and report.commitlog is not None
    assert (d.after_load.committed_index, d.after_load.committed_pos) == (-1, -1)
    assert report.commitlog.max_offset == 0  # getMaxOffset: no committed position, file 0 at 0
    assert d.after_start.max_offset == entry_end(puts[-1])
    checkpoint.write_text("committedIndex=abc\n")
    refused = recover(root)
    assert not refused.broker_starts and refused.load_failures[0].kind == "exception"


def test_broker_refuses_files_of_the_wrong_size(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write(root, 600)
    data = sorted((root / "dledger-n0" / "data").iterdir())
    assert len(data) > 2  # so the files on disk still tell the configured size
    os.truncate(data[0], 1000)
    report = recover(root)
    assert not report.broker_starts
    assert [f.kind for f in report.load_failures] == ["dledger_exit"]
    result = run("recover", root, *SMALL_OPTS, "--format", "json")
    assert result.exit_code == 1 and json.loads(result.stdout)["verdict"] == "refuses_to_start"


def test_data_ending_more_than_a_file_early_makes_dledger_exit(tmp_path: Path) -> None:
    root = tmp_path / "store"
    puts = write(root, 800)
    with open_store(root) as store:
        assert store.dledger is not None
        files = store.dledger.first_entries(store.maps)
    start_file = files[len(files) - 3][0]
    inside = next(p for p in puts if p.physical_offset - 48 > start_file.start + 1000)
    _patch(start_file.path, inside.physical_offset - 48 - start_file.start + 24, bytes(8))
    report = recover(root)
    assert not report.broker_starts
    assert "System.exit" in report.load_failures[0].message


def test_a_plain_commitlog_beside_dledger_data_is_not_decoded(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write(root, 50)
    (root / "commitlog").mkdir()
    (root / "commitlog" / f"{0:020d}").write_bytes(bytes(65536))
    with open_store(root) as store:
        assert [u.kind for u in store.unsupported] == ["dledger_mixed"]
        assert "switched" in store.unsupported[0].note


def test_damage_in_an_entry_header_is_skipped_and_the_walk_resumes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    puts = write(root, 300)
    victim = puts[150]
    data_file = root / "dledger-n0" / "data" / f"{victim.physical_offset // 65536 * 65536:020d}"
    at = victim.physical_offset - 48 - int(data_file.name)
    _patch(data_file, at + 24, struct.pack(">q", 7))  # the pos field
    with open_store(root) as store:
        events = list(one_by_one(stream_messages(store, MessageFilter())))
    skipped = [e for e in events if isinstance(e, SkippedRange)]
    assert [(s.physical_offset, s.reason) for s in skipped] == [
        (victim.physical_offset - 48, cl.CheckReason.POS_FIELD_MISMATCH.value)
    ]
    listed = [e.position for e in events if isinstance(e, cl.MessageRecord)]
    assert listed == [p.physical_offset for p in puts if p is not victim]


def test_the_trimmed_corpus_index_makes_dledger_exit(conformance_dledger_dir: Path) -> None:
    """The corpus keeps its index file trimmed; DLedger would exit on it, and recover says so
    (the inspection commands still read it)."""
    store_dir = conformance_dledger_dir / "stores" / "dledger_clean"
    with Store.open(store_dir) as store:
        report = run_recovery(store).report
        assert not report.broker_starts
        assert report.load_failures[0].kind == "dledger_exit"
        assert (
            sum(
                isinstance(e, cl.MessageRecord)
                for e in one_by_one(stream_messages(store, MessageFilter()))
            )
            == 2000
        )


def _apply(root: Path, dest: Path) -> tuple[RecoveryReport, ApplyReport]:
    with open_store(root) as store:
        return apply_recovery(store, dest, RecoverOptions())


def test_apply_to_materialises_the_restart(tmp_path: Path) -> None:
    """After a crash: the DLedger checkpoint commits every kept entry (the old one in .bak),
    the reput's units and index entries are written; a second restart changes nothing."""
    root = tmp_path / "store"
    puts = write(root, 500, dispatched=450, crash=True, lag_ms=800)
    report, applied = _apply(root, tmp_path / "after")
    assert applied.verification_noop, applied.verification_differences
    home = tmp_path / "after" / "dledger-n0"
    assert (home / "checkpoint").read_bytes() == dl.encode_checkpoint(499, 499)
    assert (home / "checkpoint.bak").read_bytes() == (
        root / "dledger-n0" / "checkpoint"
    ).read_bytes()
    again = recover(tmp_path / "after")
    assert again.dledger is not None and again.reput is not None
    assert again.recovery_path == "normal" and again.reput.dispatched_records == 0
    assert again.dledger.after_load.max_offset == entry_end(puts[-1])
    assert {(q.topic, q.queue_id): q.max_offset_after_dispatch for q in again.consume_queues} == {
        (q.topic, q.queue_id): q.max_offset_after_dispatch for q in report.consume_queues
    }


def test_apply_to_after_a_torn_header_cuts_data_and_index(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write(root, 300, crash=True)
    torn = damage.torn_entry_header(root, keep=4)
    _, applied = _apply(root, tmp_path / "after")
    assert applied.verification_noop, applied.verification_differences
    end = int(torn.details["entry_offset"])
    data = tmp_path / "after" / "dledger-n0" / "data" / f"{end // 65536 * 65536:020d}"
    assert not any(data.read_bytes()[end % 65536 :])
    index = (tmp_path / "after" / "dledger-n0" / "index" / f"{0:020d}").read_bytes()
    assert index[298 * 32 : 299 * 32] != bytes(32) and not any(index[299 * 32 : 301 * 32])


def test_apply_to_rewrites_index_units_that_disagreed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write(root, 800)
    index_file = root / "dledger-n0" / "index" / f"{0:020d}"
    good = index_file.read_bytes()[: 800 * 32]
    _patch(index_file, 790 * 32 + 4, struct.pack(">q", 12345))  # a unit's pos field
    report, applied = _apply(root, tmp_path / "after")
    assert report.dledger is not None and report.dledger.index_rebuilt_from == 790
    assert applied.verification_noop, applied.verification_differences
    after = tmp_path / "after" / "dledger-n0" / "index" / f"{0:020d}"
    assert after.read_bytes()[: 800 * 32] == good


@pytest.mark.usefixtures("wide_console")
def test_tables_and_checkpoint_say_what_dledger_holds(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write(root, 300, dispatched=250, crash=True, lag_ms=500)
    info = run("info", root, *SMALL_OPTS, "--format", "table")
    assert info.exit_code == 0, info.stderr
    assert "DLedger data files" in info.stdout and "committedIndex 249" in info.stdout
    rec = run("recover", root, *SMALL_OPTS, "--format", "table")
    assert rec.exit_code == 0, rec.stderr
    for phrase in ("max offset after load (committed position)", "CANDIDATE", "LEADER, leader n0"):
        assert phrase in rec.stdout
    notes = run_json("checkpoint", root, expect=0)["notes"]
    assert any("dledger-n0/checkpoint says: committedIndex=249; endIndex=249" in n for n in notes)
    lost = run("recover", root, *SMALL_OPTS, "--format", "jsonl")
    assert lost.exit_code == 0 and lost.stdout == ""
