"""verify: each damage found at its exact physical offset, nothing false on undamaged stores
(the fixtures, the real-broker corpora), crash stores warnings only, the same answer whatever
the number of worker processes."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path

import pytest

from rmqinspect.analysis.verify import Finding, Severity, VerifyOptions, VerifyReport, verify_store
from rmqinspect.analysis.verify.finding import Findings
from rmqinspect.format import dledger as dl
from rmqinspect.format.scan import WalkPolicy
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.synth import damage
from rmqinspect.synth.writer import PutResult
from tests.conftest import (
    CONFORMANCE,
    CONFORMANCE5,
    FIXTURES,
    SHARED,
    corpus_store_options,
    restore_trimmed_store,
)
from tests.damage_matrix import DAMAGES, PROFILES, commitlog_ranges, damaged, original, records
from tests.damage_matrix import touched as touched_records
from tests.test_dledger import LAYOUT as LEDGER_LAYOUT
from tests.test_dledger import open_store as open_ledger
from tests.test_dledger import write as write_ledger

STORES = FIXTURES / "stores"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text(encoding="utf-8"))["stores"]


def verify(
    root: Path, jobs: int = 1, settings: StoreOptions | None = None, **options: bool
) -> VerifyReport:
    with Store.open(root, settings) as store:
        return verify_store(store, VerifyOptions(**options), jobs=jobs)


def at_least(report: VerifyReport, severity: Severity) -> list[Finding]:
    return [f for f in report.findings if f.severity.rank >= severity.rank]


def checks(findings: Iterable[Finding]) -> set[str]:
    return {f.check for f in findings}


def offsets(report: VerifyReport, check: str) -> list[int | None]:
    return [f.physical_offset for f in report.findings if f.check == check]


# --- the project's fixture stores ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["clean49", "clean51", "clean53", "clean53_propcrc", "empty49", "retention49"]
)
def test_undamaged_fixture_has_no_finding(name: str) -> None:
    report = verify(STORES / name)
    assert report.findings == []
    assert report.summary.findings == 0


@pytest.mark.parametrize("name", ["crash49", "crash53"])
def test_killed_broker_fixture_has_warnings_only(name: str) -> None:
    report = verify(STORES / name)
    assert at_least(report, Severity.ERROR) == []
    assert checks(report.findings) == {"consumequeue.lagging"}
    assert report.summary.restart_predicted


def _manifest_detail(store: str, key: str) -> int:
    for d in MANIFEST[store]["damage"]:
        if key in d["details"]:
            return int(d["details"][key])
    raise KeyError(key)


def test_torn_tail_fixture() -> None:
    report = verify(STORES / "torn_tail49")
    (bad,) = at_least(report, Severity.WARNING)
    assert bad.check == "commitlog.body_crc"
    assert bad.physical_offset == _manifest_detail("torn_tail49", "message_offset")
    assert bad.file == "commitlog/00000000000000065536"
    assert bad.file_position == bad.physical_offset - 65536


def test_bad_crc_fixture_counts_the_intact_records_after_it() -> None:
    report = verify(STORES / "bad_crc49")
    offset = _manifest_detail("bad_crc49", "message_offset")
    assert offsets(report, "commitlog.body_crc") == [offset]
    (after,) = [f for f in report.findings if f.check == "commitlog.intact_after_damage"]
    with Store.open(STORES / "clean49") as store:
        later = [
            f.start + int(p)
            for f, ev in store.scan(policy=WalkPolicy.FORENSIC)
            if hasattr(ev, "columns")
            for p in ev.columns.positions
            if f.start + int(p) > offset
        ]
    assert after.physical_offset == later[0]
    assert after.detail.startswith(f"{len(later)} intact records")
    assert report.summary.intact_after_damage == len(later)


def test_zeroed_fixture_names_the_first_damaged_record_and_only_its_consequences() -> None:
    report = verify(STORES / "zeroed49")
    clean = records(STORES / "clean49")
    start, end = 70_000, 70_512
    hit = [r for r in clean if r.offset < end and start < r.end]
    assert offsets(report, "commitlog.body_crc") == [hit[0].offset]
    others = [f for f in at_least(report, Severity.ERROR) if f.check != "commitlog.body_crc"]
    assert checks(others) == {"consumequeue.no_record", "index.no_record"}
    assert all(f.physical_offset in {r.offset for r in hit} for f in others)


def test_missing_queue_fixture() -> None:
    report = verify(STORES / "cq_missing49")
    (missing,) = [f for f in report.findings if f.check == "consumequeue.missing_queue"]
    assert (missing.topic, missing.queue_id, missing.file) == ("TopicA", 1, "consumequeue/TopicA/1")
    assert checks(at_least(report, Severity.ERROR)) == {"consumequeue.missing_queue"}


def test_queue_ahead_fixture() -> None:
    report = verify(STORES / "cq_ahead49")
    end = _manifest_detail("cq_ahead49", "commitlog_end")
    past = [f for f in report.findings if f.check == "consumequeue.points_past_end"]
    assert [f.file_position for f in past] == [
        r[1] for r in MANIFEST["cq_ahead49"]["damage"][0]["ranges"]
    ]
    assert past[0].physical_offset == end
    assert checks(at_least(report, Severity.WARNING)) == {"consumequeue.points_past_end"}


def test_stale_copies_fixture() -> None:
    report = verify(STORES / "stale_tail49")
    clean = records(STORES / "clean49")
    valid_end = _manifest_detail("stale_tail49", "valid_end")
    expected = [valid_end, valid_end + clean[0].size, valid_end + clean[0].size + clean[1].size]
    assert offsets(report, "commitlog.physical_offset") == expected
    assert checks(at_least(report, Severity.WARNING)) == {"commitlog.physical_offset"}


def test_rewritten_tail_fixture() -> None:
    report = verify(STORES / "rewritten_tail49")
    assert offsets(report, "commitlog.magic") == [_manifest_detail("rewritten_tail49", "valid_end")]
    assert offsets(report, "commitlog.intact_after_damage") == [
        _manifest_detail("rewritten_tail49", "stale_record_offset")
    ]
    # The consume queue still holds the rewritten record's old, longer size.
    (unit,) = [f for f in report.findings if f.check == "consumequeue.size_mismatch"]
    (rewritten,) = MANIFEST["rewritten_tail49"]["damage"][0]["ranges"]
    assert unit.physical_offset == 65536 + rewritten[1]


# --- the real-broker corpora ---------------------------------------------------------------------


def _corpus_stores() -> list[Path]:
    return sorted(p for p in SHARED.glob("conformance*/stores/*") if p.is_dir())


def _mutation(store: Path) -> dict[str, object]:
    for expected in (store.parent.parent / "expected").glob("*.json"):
        doc = json.loads(expected.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("inputStore") == f"stores/{store.name}":
            mutation = doc.get("mutation") or {}
            assert isinstance(mutation, dict)
            return mutation
    return {}


@pytest.mark.parametrize(
    "store", _corpus_stores(), ids=lambda p: f"{p.parent.parent.name}/{p.name}"
)
def test_real_broker_stores(store: Path, tmp_path: Path) -> None:
    """Undamaged stores: nothing at warning or above. Killed brokers: warnings only (the
    dispatch lag). Damaged ones: the damage, at the offset the corpus names. A DLedger store
    is verified as the broker held it: its trimmed index files restored to their size."""
    mutation = _mutation(store)
    settings = corpus_store_options(store)
    if (store.parent.parent / "sizes").is_dir():
        store = restore_trimmed_store(store.parent.parent, store.name, tmp_path / store.name)
    report = verify(store, settings=settings)
    kind = mutation.get("kind")
    if "crash" in store.name:
        assert at_least(report, Severity.ERROR) == []
        assert "consumequeue.lagging" in checks(report.findings)
    elif kind in ("torn_last_message", "body_byte_flipped"):
        assert offsets(report, "commitlog.body_crc") == [mutation["messageOffset"]]
        assert checks(at_least(report, Severity.ERROR)) == {"commitlog.body_crc"}
    elif kind == "consume_queue_dir_deleted":
        (missing,) = at_least(report, Severity.ERROR)
        assert missing.check == "consumequeue.missing_queue"
        assert missing.file == mutation["deleted"]
    else:
        assert at_least(report, Severity.WARNING) == [], kind


def test_corpora_are_there(conformance_dir: Path, conformance5_dir: Path) -> None:
    assert conformance_dir == CONFORMANCE and conformance5_dir == CONFORMANCE5
    assert len(_corpus_stores()) >= 11


# --- every damage helper, every profile ----------------------------------------------------------


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("originals")


_ONE_BAD_RECORD = {
    "torn_tail",
    "flip_body",
    "flip_body_first_file",
    "zero_region",
    "overwrite_region",
}


@pytest.mark.parametrize("kind", sorted(DAMAGES))
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_damage_found_at_its_offset_and_nothing_else(
    originals: Path, tmp_path: Path, profile: str, kind: str
) -> None:
    d = damaged(originals, profile, kind, tmp_path / "store")
    report = verify(tmp_path / "store")
    clean = records(original(originals, profile))
    touched = touched_records(clean, d)
    ranges = commitlog_ranges(d)
    errors = at_least(report, Severity.ERROR)
    commitlog_errors = [f for f in errors if f.check.startswith("commitlog.")]
    if kind == "stale_copy":
        # The first records of the log, copied where the log ends: each names another place.
        end = int(d.details["valid_end"])
        sizes = [r.size for r in clean[: int(d.details["records"])]]
        expected = [end + sum(sizes[:i]) for i in range(len(sizes))]
        assert [f.physical_offset for f in commitlog_errors] == expected
        assert checks(commitlog_errors) == {"commitlog.physical_offset"}
    elif kind == "stale_rewrite":
        # The old record's remains start where the rewritten, shorter one ends. The helper
        # copies the old properties, so with property CRCs the rewritten record's __CRC32#
        # is stale too.
        rewritten = (
            {ranges[0][0]: "commitlog.prop_crc"} if PROFILES[profile].append_prop_crc else {}
        )
        found = {f.physical_offset: f.check for f in commitlog_errors}
        assert found == {int(d.details["valid_end"]): "commitlog.magic"} | rewritten
    elif kind in _ONE_BAD_RECORD:
        # The first record the damage touches, and only records it touches (a record whose
        # tail is hit and the next whose header is gone are two findings).
        found = [f.physical_offset for f in commitlog_errors]
        assert found[0] == touched[0].offset
        assert set(found) <= {r.offset for r in touched}
        assert touched[0].offset <= ranges[0][0] < touched[0].end
    else:
        assert commitlog_errors == []
    # Every other error is about a unit or entry that points into the damage, or is the damage.
    damaged_offsets = {r.offset for r in touched}
    for f in errors:
        if f.check.startswith("commitlog."):
            continue
        if kind == "cq_ahead":
            assert f.check == "consumequeue.points_past_end"
            assert (f.physical_offset or 0) >= int(d.details["commitlog_end"])
        elif kind == "missing_cq":
            assert f.check == "consumequeue.missing_queue"
            assert (f.topic, f.queue_id) == ("TopicB", 1)
        else:
            assert f.physical_offset in damaged_offsets, f
    if kind == "missing_cq":
        assert "consumequeue.missing_queue" in checks(errors)
    if kind == "cq_ahead":
        assert len([f for f in errors if f.check == "consumequeue.points_past_end"]) == 3
    if kind == "abort":
        assert at_least(report, Severity.WARNING) == []


# --- worker processes ----------------------------------------------------------------------------


def test_jobs_give_the_same_report(originals: Path, tmp_path: Path) -> None:
    damaged(originals, "4.9", "overwrite_region", tmp_path / "store")
    one = verify(tmp_path / "store", jobs=1)
    two = verify(tmp_path / "store", jobs=2, hexdump=True)
    assert one.summary.commitlog_files >= 2 and at_least(one, Severity.ERROR)
    assert all(f.hexdump for f in two.findings if f.check == "commitlog.body_crc")
    assert [dataclasses.replace(f, hexdump=()) for f in two.findings] == one.findings
    assert two.summary == one.summary


def test_findings_beyond_the_listing_limit_are_counted() -> None:
    findings = Findings(limit=2)
    for i in range(5):
        findings.add("commitlog.magic", "commitlog/0", f"bad {i}", physical_offset=i)
    findings.add("commitlog.magic", "commitlog/1", "elsewhere")
    assert [f.detail for f in findings.listed] == ["bad 0", "bad 1", "elsewhere"]
    assert findings.by_check() == {"commitlog.magic": 6}
    # Merging the findings of another work unit keeps the limit per check and file.
    merged = Findings(limit=2)
    merged.add("commitlog.magic", "commitlog/0", "first")
    merged.extend(findings)
    assert [f.detail for f in merged.listed] == ["first", "bad 0", "elsewhere"]
    assert merged.by_check() == {"commitlog.magic": 7}


# --- DLedger stores built by the writer ----------------------------------------------------------


def _ledger(tmp_path: Path) -> tuple[Path, list[PutResult]]:
    root = tmp_path / "store"
    return root, write_ledger(root, 300)


def _ledger_report(root: Path) -> VerifyReport:
    with open_ledger(root) as store:
        return verify_store(store, VerifyOptions())


def _entry_file(put: PutResult) -> tuple[str, int]:
    """The data file (relative to the store) of ``put``'s entry, and the entry's position."""
    at = put.physical_offset - dl.BODY_OFFSET
    start = at - at % LEDGER_LAYOUT.commitlog_file_size
    return f"dledger-n0/data/{start:020d}", at - start


def test_dledger_writer_store_has_no_finding(tmp_path: Path) -> None:
    root, _ = _ledger(tmp_path)
    report = _ledger_report(root)
    assert report.findings == [] and report.summary.records == 300


def test_dledger_torn_entry_is_an_error_the_broker_serves(tmp_path: Path) -> None:
    """DLedger keeps the entry (its header is whole): the record's failure, at the record."""
    root, puts = _ledger(tmp_path)
    damage.torn_tail(root)
    last = puts[-1]
    (f,) = at_least(_ledger_report(root), Severity.WARNING)
    file, entry = _entry_file(last)
    assert (f.check, f.file, f.file_position) == ("commitlog.body_crc", file, entry + 48)
    assert f.physical_offset == last.physical_offset
    assert "the broker serves this record" in f.detail


def test_dledger_corrupted_entry_header(tmp_path: Path) -> None:
    """The last entry's header torn after its magic and size: DLedger stops there, and the
    committed index in the checkpoint now names an entry that is gone."""
    root, puts = _ledger(tmp_path)
    damage.torn_entry_header(root)
    last = puts[-1]
    file, entry = _entry_file(last)
    report = _ledger_report(root)
    worse = at_least(report, Severity.WARNING)
    assert {
        (f.check, f.file, f.file_position) for f in worse if f.check.startswith("dledger.")
    } == {
        ("dledger.entry_pos", file, entry),
        ("dledger.checkpoint", "dledger-n0/checkpoint", None),
        ("dledger.index_past_end", "dledger-n0/index/00000000000000000000", 299 * 32),
    }
    (pos,) = [f for f in report.findings if f.check == "dledger.entry_pos"]
    assert pos.physical_offset == last.physical_offset - 48
    # The rest are what the cut means: the last record's unit and index entries point past
    # the end, the checkpoint's times are the lost record's.
    rest = [f for f in worse if not f.check.startswith("dledger.")]
    assert {f.check for f in rest} == {
        "consumequeue.points_past_end",
        "index.points_past_end",
        "checkpoint.ahead",
    }
    assert {f.physical_offset for f in rest if f.check != "checkpoint.ahead"} == {
        last.physical_offset
    }


def test_dledger_index_unit_that_disagrees(tmp_path: Path) -> None:
    root, puts = _ledger(tmp_path)
    unit = 123 * dl.INDEX_UNIT_SIZE
    index_file = root / "dledger-n0" / "index" / f"{0:020d}"
    with open(index_file, "r+b") as fh:
        fh.seek(unit + 4)  # the pos field
        fh.write((puts[124].physical_offset - 48).to_bytes(8, "big"))
    (f,) = _ledger_report(root).findings
    assert (f.check, f.file, f.file_position) == (
        "dledger.index_unit",
        "dledger-n0/index/00000000000000000000",
        unit,
    )
    assert f.physical_offset == puts[123].physical_offset - 48


def test_dledger_broken_checkpoint(tmp_path: Path) -> None:
    root, _ = _ledger(tmp_path)
    (root / "dledger-n0" / "checkpoint").write_bytes(dl.encode_checkpoint(299, 250))
    (f,) = _ledger_report(root).findings
    assert (f.check, f.file, f.severity) == (
        "dledger.checkpoint",
        "dledger-n0/checkpoint",
        Severity.ERROR,
    )
    assert "beyond endIndex 250" in f.detail


def test_dledger_killed_broker_has_no_error(tmp_path: Path) -> None:
    """A killed broker: the DLedger checkpoint lags the data, units lag the entries."""
    root = tmp_path / "store"
    write_ledger(root, 300, dispatched=280, crash=True, lag_ms=500)
    assert at_least(_ledger_report(root), Severity.ERROR) == []
