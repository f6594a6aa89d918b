"""``recover --jobs``: the recovery scan's records checked by byte ranges (cut at arbitrary
bytes: into damage, inside records, past the last record) and stitched in the broker's order
give the serial emulation's report, field for field, on damaged and crashed stores; the
export's restart prediction takes those checks from its pool's tasks."""

from __future__ import annotations

import json
import pickle
import shutil
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from rmqinspect.analysis.ranges import plan_ranges
from rmqinspect.analysis.recovery import RangeChecker, RecoverOptions, index_service, run_recovery
from rmqinspect.analysis.recovery import commitlog as recovery_commitlog
from rmqinspect.analysis.recovery import fields as recovery_fields
from rmqinspect.analysis.recovery import lost as lost_module
from rmqinspect.analysis.recovery import ranges as recovery_ranges
from rmqinspect.analysis.recovery.keeps import RestartKeeps
from rmqinspect.analysis.recovery.ranges import RangeCheck, WalkEnds, check_range
from rmqinspect.analysis.recovery.report import RecoveryReport
from rmqinspect.analysis.recovery.state import RecordChecks
from rmqinspect.export.plan import StoreRef
from rmqinspect.export.tasks import Prechecked, plan_restart_checks, predict_restart
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store
from tests.cli_helpers import run
from tests.damage_matrix import records
from tests.test_verify_checks import RECIPES, patch_record
from tests.test_verify_ranges import OPTIONS

# Each breaks the commitlog so that the scan stops (or a range's cut lands) somewhere else:
# a bad magic, size, CRC, property CRC, length, DELAY, position, BLANK, trailing bytes.
CASES = sorted(c for c in RECIPES if c.startswith("commitlog.") and c != "commitlog.file_name")
SPLITS = (997, 2999)  # bytes: a 64 KiB file becomes 66 or 22 ranges
NOW = 1_800_000_000.0  # new index files are named by the clock: the same for every run


def _store(tmp_path: Path, check: str) -> Path:
    source, recipe = RECIPES[check]
    root = tmp_path / "store"
    shutil.copytree(source, root)
    recipe(root)
    return root


def _recover(store: Store, last_exit_ok: bool, checker: RangeChecker | None) -> RecoveryReport:
    options = RecoverOptions(last_exit_ok=last_exit_ok, read_timer=True)
    return run_recovery(store, options, checker=checker).report


@pytest.fixture(autouse=True)
def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_service.time, "time", lambda: NOW)


@pytest.mark.parametrize("last_exit_ok", [False, True], ids=["crash", "clean"])
@pytest.mark.parametrize("check", CASES)
def test_ranges_give_the_serial_report(
    tmp_path: Path, check: str, last_exit_ok: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan's checks and the loss search (past the end, in deleted files, in the kept
    commitlog) by ranges give the serial report. The loss search walks no range again here,
    except where records do not name their own position (a file whose name leaves a gap, a
    changed PHYSICALOFFSET): no resync lands on them, so the stitch walks those itself."""
    with Store.open(_store(tmp_path, check), OPTIONS) as store:
        serial = _recover(store, last_exit_ok, None)
        walked_again = _count_walks_here(monkeypatch)
        for split in SPLITS:
            assert len(plan_ranges(store, split)) > len(store.commitlog.files)  # cut
            with RangeChecker(store, 1, split) as checker:
                assert _recover(store, last_exit_ok, checker) == serial, split
        unnamed = check in ("commitlog.file_gap", "commitlog.physical_offset")
        assert bool(walked_again) is unnamed


def _count_walks_here(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The parts of the loss search this process walks itself from now on (none is given to a
    range's worker): where and from which position."""
    walked: list[tuple[str, int]] = []
    judge = lost_module._judge

    def counted(*args: Any) -> Any:
        part = args[2]
        if not part.shipped:
            walked.append((part.where, part.begin))
        return judge(*args)

    monkeypatch.setattr(lost_module, "_judge", counted)
    return walked


def test_a_cut_at_the_bad_record(tmp_path: Path) -> None:
    """A range that begins with the record the scan stops at: its check fails at once."""
    with Store.open(_store(tmp_path, "commitlog.body_crc"), OPTIONS) as store:
        serial = _recover(store, False, None)
        bad = serial.commitlog.first_bad_record if serial.commitlog else None
        assert bad is not None and bad.reason == "body_crc_mismatch"
        with RangeChecker(store, 1, bad.file_position) as checker:
            assert _recover(store, False, checker) == serial


def test_workers_give_the_serial_report(tmp_path: Path) -> None:
    with Store.open(_store(tmp_path, "commitlog.intact_after_damage"), OPTIONS) as store:
        serial = _recover(store, False, None)
        assert serial.lost_messages.count > 0
        with RangeChecker(store, 2, SPLITS[1]) as checker:
            assert _recover(store, False, checker) == serial


def _json(*args: str | Path) -> Any:
    result = run("recover", *args, "--format", "json")
    assert result.exit_code == 1, result.stderr  # the crash loses messages
    return json.loads(result.stdout)


def test_cli_jobs_give_the_same_json(tmp_path: Path) -> None:
    """A crashed synth store without its checkpoint (the scan starts at file 0) and a body
    CRC broken in its middle: workers check the files, this process stitches and dispatches."""
    store = tmp_path / "store"
    cmd = ["synth", store, "--quiet", "--messages", "3000", "--body-size", "100", "--crash"]
    assert run(*cmd, "--commitlog-file-size", str(64 << 10)).exit_code == 0
    (store / "checkpoint").unlink()
    bad = records(store)[2000]
    patch_record(store, bad, 88, b"\xff")
    whole = _json(store, "-j", "1")
    assert len(whole["commitlog"]["files_before"]) > 4
    assert whole["commitlog"]["first_bad_record"]["physical_offset"] == bad.offset
    assert _json(store, "-j", "3") == whole


def _same(a: RestartKeeps, b: RestartKeeps) -> bool:
    return pickle.dumps(a) == pickle.dumps(b)


def test_the_exports_prediction_takes_the_pools_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver plans the emulation's checks from the file its scan starts at; the
    prediction task given their results checks no record itself and predicts the same."""
    with Store.open(_store(tmp_path, "commitlog.intact_after_damage"), OPTIONS) as store:
        ref = StoreRef.of(store)
        serial = predict_restart(ref)
        assert serial.broker_starts and serial.end > 0
        opts, ranges, wanted = plan_restart_checks(store)
        assert [r.file for r in ranges] == list(range(len(store.commitlog.files)))

        def refused(*_: object, **__: object) -> RangeCheck:
            raise AssertionError("the prediction checked a range itself")

        for lean in (False, True):  # the export's tasks send lean checks
            checks = [check_range(store, r, opts, True, lean, wanted) for r in ranges]
            assert all(p.lean is lean for c in checks for p in c.records)
            checked = Prechecked(opts, ranges, checks, wanted)
            with monkeypatch.context() as m:
                m.setattr(recovery_ranges, "check_range", refused)
                assert _same(predict_restart(ref, checked), serial)
        # Planned for another start (the store changed): the emulation checks them itself.
        assert _same(predict_restart(ref, Prechecked(opts, ranges[1:], checks[1:], wanted)), serial)


def test_a_range_that_starts_elsewhere_is_checked_again(tmp_path: Path) -> None:
    """A range whose resync found a boundary the walk before it did not reach (bytes in a body
    that look like a record at their own position) says nothing about the walk: the stitch
    checks it again from where the range before stopped."""
    with Store.open(_store(tmp_path, "commitlog.intact_after_damage"), OPTIONS) as store:
        f = store.commitlog.files[0]
        opts = RecordChecks.of(store, RecoverOptions()).recover
        ranges = [r for r in plan_ranges(store, SPLITS[0]) if r.file == 0]
        checks = [check_range(store, r, opts, True) for r in ranges]
        truth = _walked(WalkEnds(store, ranges, iter(checks), opts, True), f)
        k = 1
        assert checks[k].start == checks[k - 1].stop  # a range the stitch takes as it is
        bogus = (checks[k].records[0],)
        wrong = [*checks[:k], RangeCheck(checks[k].start + 1, 0, True, bogus), *checks[k + 1 :]]
        walk = _walked(WalkEnds(store, ranges, iter(wrong), opts, True), f)
        assert walk[0] == truth[0] > ranges[k].begin
        for got, want in zip(walk[1], truth[1], strict=True):
            assert got.tolist() == want.tolist()


_FIELDS = ("positions", "queue_offset", "store_timestamp", "topic_ids", "codes", "hashes")


def _walked(ends: WalkEnds, f: StoreFile) -> tuple[int, list[npt.NDArray[np.int64]]]:
    """Where the stitched walk of ``f`` stops, and its records' fields, file-wide."""
    checks = list(ends.walk(f))
    parts = [p for c in checks for p in c.records]
    fields = [np.concatenate([getattr(p, name) for p in parts]) for name in _FIELDS]
    return checks[-1].stop, fields


@pytest.fixture(scope="module")
def unserved_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A crashed synth store of 64 KiB files whose recovery starts late (its checkpoint
    kept), with a queue's files gone (its messages before the start file are served by no
    unit) and a bad magic early in the kept commitlog, which the loss search's walk steps
    over."""
    store = tmp_path_factory.mktemp("unserved") / "store"
    cmd = ["synth", store, "--quiet", "--messages", "3000", "--body-size", "100", "--crash"]
    assert run(*cmd, "--commitlog-file-size", str(64 << 10)).exit_code == 0
    shutil.rmtree(store / "consumequeue" / "TopicB" / "1")
    bad = records(store)[40]
    patch_record(store, bad, 4, b"\0\0\0\0")
    return store


@pytest.mark.parametrize("limit", [5, None])
def test_the_loss_search_by_ranges(
    unserved_store: Path, limit: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept commitlog's unserved messages found by ranges (cut into the damage, inside
    records, past the last record) and merged in order are the whole walk's: the same
    listing, counts per queue and queues without a consume queue, the first few or all;
    each range's walk is taken as it is (none is walked again in this process)."""
    options = RecoverOptions(read_timer=True, lost_limit=limit)
    with Store.open(unserved_store) as store:
        serial = run_recovery(store, options).report
        walked_again = _count_walks_here(monkeypatch)
        lost, commitlog = serial.lost_messages, serial.commitlog
        assert lost is not None and commitlog is not None and commitlog.scan_start_offset
        unserved = lost.by_where["no_queue_unit"]
        assert unserved == serial.unreachable_messages > 5
        assert lost.truncated is (limit is not None)
        assert len(lost.messages) == (limit or lost.count)
        for split in SPLITS:
            with RangeChecker(store, 1, split) as checker:
                assert run_recovery(store, options, checker=checker).report == serial, split
        with RangeChecker(store, 2, 1 << 14) as checker:
            assert run_recovery(store, options, checker=checker).report == serial
    assert not walked_again


def test_a_loss_range_that_starts_elsewhere_is_walked_again(
    unserved_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A range of the loss search whose resync found a boundary the walk before it did not
    reach says nothing: its findings are dropped and the range is walked again from where the
    one before stopped."""
    options = RecoverOptions(read_timer=True)
    real = lost_module._judge_in_worker
    wrong: list[int] = []

    def elsewhere(store: Store, task: Any) -> Any:
        found = real(store, task)
        if task.sync and found.start is not None and found.per_queue and not wrong:
            wrong.append(found.start)
            nothing = lost_module._Listing(None)
            return replace(found, start=found.start + 1, per_queue={}, listing=nothing)
        return found

    with Store.open(unserved_store) as store:
        serial = run_recovery(store, options).report
        monkeypatch.setattr(lost_module, "_judge_in_worker", elsewhere)
        with RangeChecker(store, 1, SPLITS[1]) as checker:
            assert run_recovery(store, options, checker=checker).report == serial
    assert wrong  # a range with unserved messages was answered wrongly


def test_the_scan_dispatches_what_the_ranges_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ranges, this process dispatches the fields their checks sent: it neither walks a
    file itself nor reads an accepted record's bytes again."""
    with Store.open(_store(tmp_path, "commitlog.intact_after_damage"), OPTIONS) as store:
        serial = _recover(store, False, None)

        def refused(*_: object) -> None:
            raise AssertionError("this process read records the ranges had sent")

        monkeypatch.setattr(recovery_commitlog, "RunRecords", refused)
        monkeypatch.setattr(recovery_fields, "gather", refused)
        with RangeChecker(store, 1, SPLITS[1]) as checker:
            assert _recover(store, False, checker) == serial


def test_the_ranges_send_tags_codes_and_keys_only_where_the_dispatch_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers hash tags and index keys only for the records the dispatch can put: here
    the queues and the kept index file already hold every record the scan accepts, so none
    but the run's first record (whose dispatch creates the new index file) is hashed, and
    the report is the serial one. Their fields go between processes as int32 where the values
    fit, and come back as the same int64 values."""
    with Store.open(_store(tmp_path, "commitlog.intact_after_damage"), OPTIONS) as store:
        serial = _recover(store, False, None)
        hashed: dict[str, int] = {"tags": 0, "keys": 0}
        tags, keys = recovery_fields.RunRecords.tags_codes, recovery_fields.RunRecords.index_keys

        def counted_tags(self: recovery_fields.RunRecords, rows: Any) -> Any:
            hashed["tags"] += len(rows)
            return tags(self, rows)

        def counted_keys(self: recovery_fields.RunRecords, rows: Any) -> Any:
            hashed["keys"] += len(rows)
            return keys(self, rows)

        monkeypatch.setattr(recovery_fields.RunRecords, "tags_codes", counted_tags)
        monkeypatch.setattr(recovery_fields.RunRecords, "index_keys", counted_keys)
        with RangeChecker(store, 1, SPLITS[1]) as checker:
            assert _recover(store, False, checker) == serial
        assert serial.commitlog is not None and serial.commitlog.scanned_bytes > 1000
        assert hashed == {"tags": 0, "keys": 1}

        ranges = plan_ranges(store, SPLITS[1])
        opts = RecordChecks.of(store, RecoverOptions()).recover
        sent = [p for r in ranges for p in check_range(store, r, opts, True).records if len(p)]
        assert sent
        for part in sent:
            wire = pickle.dumps(part)
            wide = [getattr(part, f.name) for f in fields(part)]
            assert len(wire) < len(pickle.dumps(wide))
            back = pickle.loads(wire)
            for name in ("positions", "store_size", "queue_id", "physical_offset_field", "codes"):
                got, want = getattr(back, name), getattr(part, name)
                assert got.dtype == np.int64 and got.tolist() == want.tolist()
