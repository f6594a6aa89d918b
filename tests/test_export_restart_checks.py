"""The export's record checks for the restart emulation hash the index keys only of the records
the emulation's dispatch can hand to the index (the :class:`Wanted` ``recover --jobs``'s workers
get), none where its scan dispatches nothing: they hashed every record's. The prediction they
make is the serial one."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from rmqinspect.analysis.recovery import fields as recovery_fields
from rmqinspect.analysis.recovery import ranges as recovery_ranges
from rmqinspect.analysis.recovery.ranges import RangeCheck
from rmqinspect.export.plan import StoreRef
from rmqinspect.export.tasks import (
    CheckFile,
    Prechecked,
    check_files,
    check_restart_range,
    plan_restart_checks,
    predict_restart,
)
from rmqinspect.format.npbytes import I64
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import build_store

MESSAGES = 400


def _keyed_and_predicted(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, bool]:
    """(records whose index keys the export's checks hashed, records they accepted, whether
    the prediction from those checks is the serial one, checking no record itself)."""
    hashed = 0
    index_keys = recovery_fields.RunRecords.index_keys

    def counted(self: recovery_fields.RunRecords, rows: I64) -> tuple[I64, I64]:
        nonlocal hashed
        hashed += len(rows)
        return index_keys(self, rows)

    def refused(*_: object, **__: object) -> RangeCheck:
        raise AssertionError("the prediction checked a range itself")

    with Store.open(root) as store:
        ref = StoreRef.of(store)
        serial = predict_restart(ref)
        opts, ranges, wanted = plan_restart_checks(store)
        assert ranges
        with monkeypatch.context() as m:
            m.setattr(recovery_fields.RunRecords, "index_keys", counted)
            checks = [check_restart_range(ref, opts, r, wanted) for r in ranges]
        accepted = sum(len(p) for c in checks for p in c.records)
        with monkeypatch.context() as m:
            m.setattr(recovery_ranges, "check_range", refused)
            predicted = predict_restart(ref, Prechecked(opts, ranges, checks, wanted))
    return hashed, accepted, pickle.dumps(predicted) == pickle.dumps(serial)


def _specs() -> list[MessageSpec]:
    return [
        MessageSpec(topic="TopicA", queue_id=i % 2, body=bytes(300), keys=f"K{i}")
        for i in range(MESSAGES)
    ]


def test_a_crashed_stores_checks_hash_only_what_the_index_can_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The killed broker's index holds every record: the restart's dispatch hands the index
    only the first record it dispatches (``getAndCreateLastIndexFile``), so of the records the
    scan accepts, at most one a run needs its keys."""
    root = build_store(tmp_path / "store", _specs(), crash=True)
    hashed, accepted, same = _keyed_and_predicted(root, monkeypatch)
    assert accepted == MESSAGES
    assert 0 < hashed < MESSAGES // 10
    assert same


def test_a_clean_stores_checks_hash_no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """4.9's ``recoverNormally`` dispatches nothing: no record needs its keys."""
    root = build_store(tmp_path / "store", _specs())
    hashed, accepted, same = _keyed_and_predicted(root, monkeypatch)
    assert accepted > 0
    assert hashed == 0
    assert same


def test_checks_written_to_files_make_the_same_prediction(tmp_path: Path) -> None:
    """A check task writes its answer under OUT and sends back only the file's name: as
    answers, every range's checks went through the engine's driver (a Spark driver's JVM too,
    twice), 8 bytes a record of the restart's scan."""
    root = build_store(tmp_path / "store", _specs(), crash=True)
    out = tmp_path / "out"
    with Store.open(root) as store:
        ref = StoreRef.of(store)
        serial = predict_restart(ref)
        opts, ranges, wanted = plan_restart_checks(store)
        with check_files(out) as into:
            filed = [check_restart_range(ref, opts, r, wanted, into) for r in ranges]
            assert all(isinstance(c, CheckFile) for c in filed)
            assert sorted(p.name for p in Path(into).iterdir()) == sorted(
                Path(c.path).name for c in filed if isinstance(c, CheckFile)
            )
            predicted = predict_restart(ref, Prechecked(opts, ranges, filed, wanted))
        assert not Path(into).exists() and list(out.iterdir()) == []
    assert pickle.dumps(predicted) == pickle.dumps(serial)
