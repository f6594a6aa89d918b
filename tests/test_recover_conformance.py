"""``recover`` against what the real 4.9.8 and 5.3.3 brokers did to the same stores.

Every scenario of both corpora: the predicted report must equal the recorded outcome field by
field, and ``--apply-to`` must leave the consume queues, index headers and checkpoint the broker
left after ``start()`` and ``shutdown()``.
"""

from __future__ import annotations

import shutil
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.analysis.recovery import (
    RecoverOptions,
    RecoveryOutcome,
    RecoveryReport,
    apply_recovery,
    run_recovery,
)
from rmqinspect.format.index import IndexHeader
from rmqinspect.format.profile import Profile
from rmqinspect.store.model import Store, StoreOptions
from tests.corpus import expected, input_store, jsonl, scenarios

CORPORA = {"conformance": Profile.V4_9, "conformance5": Profile.V5_3}
BASE = {"conformance": "clean", "conformance5": "clean5"}


def _cases() -> list[tuple[str, str]]:
    from tests.conftest import SHARED

    return [
        (corpus, s)
        for corpus in CORPORA
        if (SHARED / corpus / "expected").is_dir()
        for s in scenarios(SHARED / corpus)
    ]


CASES = _cases() or [("conformance", "missing")]


def _root(corpus: str, request: pytest.FixtureRequest) -> Path:
    fixture = "conformance_dir" if corpus == "conformance" else "conformance5_dir"
    root: Path = request.getfixturevalue(fixture)
    return root


def _options(meta: dict[str, Any]) -> RecoverOptions:
    """The corpus's broker switches."""
    cfg = meta["storeConfig"]
    return RecoverOptions(
        check_crc=cfg["checkCRCOnRecover"],
        message_index_safe=cfg["messageIndexSafe"],
        force_verify_prop_crc=cfg.get("forceVerifyPropCRC", False),
    )


def _store_options(meta: dict[str, Any], profile: Profile | None) -> StoreOptions:
    """Without a profile, nothing the store itself can tell (profile, file sizes, index
    geometry) is passed, so detection and inference are tested too."""
    if profile is None:
        return StoreOptions()
    cfg = meta["storeConfig"]
    return StoreOptions(
        profile=profile,
        index_slot_num=cfg["maxHashSlotNum"],
        index_num=cfg["maxIndexNum"],
        commitlog_file_size=cfg["mappedFileSizeCommitLog"],
        cq_file_size=cfg["mappedFileSizeConsumeQueue"],
    )


def _recover(
    root: Path, scenario: str, corpus: str, meta: dict[str, Any], profile: Profile | None
) -> RecoveryOutcome:
    with Store.open(input_store(root, scenario), _store_options(meta, profile)) as store:
        return run_recovery(store, _options(meta))


def _queues(report: RecoveryReport) -> dict[str, dict[str, int]]:
    return {
        f"{q.topic}/{q.queue_id}": {
            "rawEndUnitBefore": q.max_offset_on_disk,
            "minOffsetAfterLoad": q.min_offset_after_load,
            "maxOffsetAfterLoad": q.max_offset_after_load,
            "minOffsetAfterStart": q.min_offset_after_start,
            "maxOffsetAfterStart": q.max_offset_after_dispatch,
        }
        for q in report.consume_queues
    }


@pytest.mark.parametrize("auto_profile", [False, True], ids=["explicit", "inferred"])
@pytest.mark.parametrize(("corpus", "scenario"), CASES)
def test_report_matches_broker(
    corpus: str, scenario: str, auto_profile: bool, request: pytest.FixtureRequest
) -> None:
    root = _root(corpus, request)
    meta = expected(root, scenario)
    s = meta["summary"]
    profile = None if auto_profile else CORPORA[corpus]
    outcome = _recover(root, scenario, corpus, meta, profile)
    report = outcome.report
    if auto_profile and scenario not in ("empty_store", "single_message"):
        assert report.profile == CORPORA[corpus].value
    assert report.broker_starts is s["loadResult"]
    assert report.last_exit_ok is s["lastExitOK"] is meta["lastExitOK"]
    assert report.recovery_path == s["recoveryPath"]
    assert meta["recoveryPath"].startswith(s["recoveryPath"])
    c = report.commitlog
    assert c is not None
    assert c.max_offset == s["commitlogEndOffsetAfterRecovery"]
    assert c.min_offset == s["minPhyOffset"]
    assert c.files_before == s["commitlogFilesBefore"]
    assert c.deleted_files == s["commitlogFilesDeletedByRecovery"]
    last = s["lastCommitlogFileAfterRecovery"]
    if last is None:
        assert c.last_file is None
    else:
        assert c.last_file is not None
        assert (c.last_file.name, c.last_file.wrote_position) == (
            last["name"],
            last["wrotePosition"],
        )
    loaded = meta["afterLoad"]["commitlog"]
    assert [(f.name, f.wrote_position) for f in c.files_after] == [
        (f["name"], f["wrotePosition"]) for f in loaded["mappedFiles"]
    ]
    if "confirmOffsetField" in loaded:
        assert c.confirm_offset == loaded["confirmOffsetField"]
    assert _queues(report) == s["consumeQueues"]
    by_name = {f"{q.topic}/{q.queue_id}": q for q in report.consume_queues}
    for cq in meta["afterLoad"]["consumeQueues"]:
        key = f"{cq['topic']}/{cq['queueId']}"
        if key in by_name:
            assert by_name[key].max_physic_offset_after_load == cq["maxPhysicOffset"], key
        else:  # in-memory queues the broker creates without files
            assert cq["maxPhysicOffset"] == -1 and not cq["files"], key
    idx = report.index
    assert idx is not None
    assert idx.files_before == s["indexFilesBefore"]
    assert idx.deleted_files == s["indexFilesDestroyedAtLoad"]
    assert idx.files_created == len(s["indexFilesCreatedDuringRecoveryOrStart"])
    created = [
        h
        for h in meta["afterStart"]["indexFiles"]
        if h["name"] in s["indexFilesCreatedDuringRecoveryOrStart"]
    ]
    assert [
        (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset, h.index_count)
        for h in idx.new_files
    ] == [
        (
            h["beginTimestamp"],
            h["endTimestamp"],
            h["beginPhyOffset"],
            h["endPhyOffset"],
            h["indexCount"],
        )
        for h in created
    ]
    # Kept index files whose entries reach past the end keep pointing at discarded records
    # (README: 1,107,222 to 1,126,305 in bad_crc_middle).
    stale = [
        (max(c.max_offset, h["beginPhyOffset"]), h["endPhyOffset"])
        for h in meta["before"]["indexFiles"]
        if h["name"] not in s["indexFilesDestroyedAtLoad"]
        and h["indexCount"] > 1
        and h["endPhyOffset"] >= c.max_offset
    ]
    assert [(r.first_offset, r.last_offset) for r in idx.stale_ranges] == stale
    if scenario == "bad_crc_middle":
        assert stale == [(1_107_222, 1_126_305)]
    after = meta["afterShutdown"]["checkpoint"]
    cp = report.checkpoint
    assert cp is not None
    assert cp.after_shutdown["physic_msg_timestamp"] == after["physicMsgTimestamp"]
    assert cp.after_shutdown["logics_msg_timestamp"] == after["logicsMsgTimestamp"]
    assert cp.after_shutdown["index_msg_timestamp"] == after["indexMsgTimestamp"]
    if "confirmPhyOffset" in after:
        assert cp.after_shutdown["confirm_phy_offset"] == after["confirmPhyOffset"]


@pytest.mark.parametrize(("corpus", "scenario"), CASES)
def test_lost_messages_are_the_intact_records_past_the_end(
    corpus: str, scenario: str, request: pytest.FixtureRequest
) -> None:
    """Damaged copies of the clean store lose exactly the clean store's records after the cut
    (less the damaged one); crashes and clean stores lose nothing; a deleted queue that the
    broker does not rebuild loses every message of that queue."""
    root = _root(corpus, request)
    meta = expected(root, scenario)
    report = _recover(root, scenario, corpus, meta, CORPORA[corpus]).report
    c = report.commitlog
    assert c is not None
    lost = sorted(m.physical_offset for m in report.lost_messages.messages)
    kind = meta["mutation"]["kind"]
    if kind in ("none", "process_crash"):
        assert lost == [] and report.lost_messages.damaged_records == 0
        assert report.loses_data is False
        return
    if kind == "consume_queue_dir_deleted":
        topic, queue_id = meta["mutation"]["deleted"].split("/")[1:]
        assert list(meta["afterStart"]["knownQueuesWithoutConsumeQueue"]) == [f"{topic}/{queue_id}"]
        gone = sorted(
            line["cqPhyOffset"]
            for line in jsonl(root, BASE[corpus], "messages")
            if (line["topic"], line["queueId"]) == (topic, int(queue_id))
        )
        assert lost == gone and len(gone) == 287
        assert {m.where for m in report.lost_messages.messages} == {"no_queue_unit"}
        assert report.queues_without_consume_queue == [f"{topic}/{queue_id}"]
        assert report.loses_data is True
        return
    clean = [
        line["offset"]
        for line in jsonl(root, BASE[corpus], "prescan")
        if line["kind"] == "msg" and line["offset"] > c.max_offset
    ]
    assert lost == clean
    assert report.lost_messages.count == len(clean)
    assert report.lost_messages.damaged_records == 1
    assert report.loses_data is True


def _tag_a_at(store: Path, record: dict[str, Any]) -> int | None:
    """Where the ``TagA`` value of the prescan ``record`` is in its file, if it has that tag."""
    data = (store / "commitlog" / record["file"]).read_bytes()
    start = record["offset"] - int(record["file"])
    at = data.find(b"TAGS\x01TagA\x02", start, start + record["totalSize"])
    return None if at < 0 else at + len(b"TAGS\x01")


def test_the_record_a_prop_crc_cut_stops_at_is_damaged_not_lost(
    conformance5_dir: Path, tmp_path: Path
) -> None:
    """The real 5.3.3 store written with the property CRC, two property values changed in its
    last file: with forceVerifyPropCRC the recovery cuts at the first (§7 of the corpus README:
    it truncates at the first mismatch). Both altered records are damaged, each with why, and
    never intact lost messages; the lost messages are the other records past the cut."""
    meta = expected(conformance5_dir, "clean5_propcrc")
    store = tmp_path / "store"
    shutil.copytree(input_store(conformance5_dir, "clean5_propcrc"), store)
    records = [
        r for r in jsonl(conformance5_dir, "clean5_propcrc", "prescan") if r["kind"] == "msg"
    ]
    assert all(r["propCrc"]["match"] for r in records)
    tagged = [(r, at) for r in records if r["offset"] > 1_100_000 if (at := _tag_a_at(store, r))]
    for r, at in tagged[:2]:
        # Same length: the body CRC still holds, the record's __CRC32# does not.
        path = store / "commitlog" / r["file"]
        data = bytearray(path.read_bytes())
        data[at : at + 4] = b"TagX"
        path.write_bytes(bytes(data))
    first, second = (r["offset"] for r, _ in tagged[:2])
    options = replace(_options(meta), force_verify_prop_crc=True)
    with Store.open(store, _store_options(meta, Profile.V5_3)) as opened:
        report = run_recovery(opened, options).report
    c = report.commitlog
    assert c is not None and c.first_bad_record is not None
    assert (c.max_offset, c.first_bad_record.reason) == (first, "prop_crc_mismatch")
    lost = report.lost_messages
    assert lost is not None
    assert [(d.physical_offset, d.reason) for d in lost.damaged] == [
        (first, "prop_crc_mismatch"),
        (second, "prop_crc_mismatch"),
    ]
    assert lost.damaged[0] == c.first_bad_record
    assert lost.damaged_records == 2
    intact = [r["offset"] for r in records if r["offset"] > first and r["offset"] != second]
    assert sorted(m.physical_offset for m in lost.messages) == intact
    assert lost.count == len(intact) == 254
    assert report.loses_data is True


@pytest.mark.parametrize(("corpus", "scenario"), CASES)
def test_apply_to_leaves_what_the_broker_left(
    corpus: str, scenario: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The consume-queue units in [min, max) of every queue after start, the index headers and
    the checkpoint in DIR equal the broker's; a restart of DIR is then a no-op."""
    root = _root(corpus, request)
    meta = expected(root, scenario)
    dest = tmp_path / "after"
    profile = CORPORA[corpus]
    with Store.open(input_store(root, scenario), _store_options(meta, profile)) as store:
        report, applied = apply_recovery(store, dest, _options(meta))
    assert applied.verification_noop, applied.verification_differences
    cq_size = meta["storeConfig"]["mappedFileSizeConsumeQueue"]
    units: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for line in jsonl(root, scenario, "messages"):
        key = (line["topic"], line["queueId"])
        path = dest / "consumequeue" / key[0] / str(key[1])
        pos = line["cqIndex"] * 20
        data = (path / f"{pos - pos % cq_size:020d}").read_bytes()[pos % cq_size :][:20]
        units.setdefault(key, []).append(struct.unpack(">qiq", data))
        assert units[key][-1] == (line["cqPhyOffset"], line["cqSize"], line["cqTagsCode"]), line
    for cq in meta["afterStart"]["consumeQueues"]:
        where = (cq["topic"], cq["queueId"])
        qdir = dest / "consumequeue" / cq["topic"] / str(cq["queueId"])
        on_disk = sorted(p.name for p in qdir.iterdir()) if qdir.is_dir() else []
        assert on_disk == [f["name"] for f in cq["files"]], where
        for f in cq["files"]:
            data = (qdir / f["name"]).read_bytes()
            assert len(data) == f["fileSize"], (where, f["name"])
            # Nothing past the broker's write position (stale units there are zeroed).
            assert not any(data[f["wrotePosition"] :]), (where, f["name"])
    disk_cl = (
        sorted(p.name for p in (dest / "commitlog").iterdir())
        if (dest / "commitlog").is_dir()
        else []
    )
    assert disk_cl == meta["afterStart"]["commitlog"]["filesOnDisk"]
    kept = [
        n
        for n in meta["summary"]["indexFilesBefore"]
        if n not in meta["summary"]["indexFilesDestroyedAtLoad"]
    ]
    index_dir = dest / "index"
    names = sorted(p.name for p in index_dir.iterdir()) if index_dir.is_dir() else []
    assert names[: len(kept)] == kept
    headers = [IndexHeader.decode((index_dir / n).read_bytes()) for n in names]
    want = meta["afterStart"]["indexFiles"]
    assert [
        (
            h.begin_phy_offset,
            h.end_phy_offset,
            h.begin_timestamp,
            h.end_timestamp,
            h.index_count,
            h.hash_slot_count,
        )
        for h in headers
    ] == [
        (
            w["beginPhyOffset"],
            w["endPhyOffset"],
            w["beginTimestamp"],
            w["endTimestamp"],
            w["indexCount"],
            w["hashSlotCount"],
        )
        for w in want
    ]
    cp = (dest / "checkpoint").read_bytes()
    after = meta["afterShutdown"]["checkpoint"]
    assert struct.unpack_from(">qqq", cp) == (
        after["physicMsgTimestamp"],
        after["logicsMsgTimestamp"],
        after["indexMsgTimestamp"],
    )
    assert not (dest / "abort").exists()
    assert report.broker_starts
