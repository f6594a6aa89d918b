"""verify's units-to-records check takes as found the units the commitlog walk already saw
leading to their record (its position, TOTALSIZE, topic, queue id and queue offset), instead of
reading those records again from the queue side, where they lie all over the log: the reports
are the same, field for field, with and without that shortcut, on every store that breaks a
commitlog or consume-queue check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmqinspect.analysis import units
from rmqinspect.analysis.verify import VerifyOptions, VerifyReport, context, verify_store
from rmqinspect.analysis.verify.queues import QueueCoverage
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store, StoreOptions
from tests.cli_helpers import build_store, orders
from tests.test_verify_checks import RECIPES, broken_store

CASES = sorted(c for c in RECIPES if c.startswith(("commitlog.", "consumequeue.")))
OPTIONS = StoreOptions(index_slot_num=64, index_num=400)


def _none_proven(self: QueueCoverage, qid: QueueId) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64)


def _reports(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[VerifyReport, VerifyReport]:
    """verify, then verify reading every unit's record (that byte ranges give the same report
    as whole files, proofs and all, is tests/test_verify_ranges.py's)."""
    with Store.open(root, OPTIONS) as store:
        proven = verify_store(store, VerifyOptions())
    with monkeypatch.context() as m:
        m.setattr(QueueCoverage, "proven_runs", _none_proven)
        with Store.open(root, OPTIONS) as store:
            read = verify_store(store, VerifyOptions())
    return proven, read


@pytest.mark.parametrize("check", CASES)
def test_proven_units_change_no_finding(
    tmp_path: Path, check: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = broken_store(tmp_path / "store", check)
    proven, read = _reports(root, monkeypatch)
    assert any(f.check == check for f in read.findings)
    assert proven == read


def test_a_clean_stores_units_are_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every unit of a clean store is proven by the walk: the queue side gathers no record;
    a unit whose size lies is not, and is read and reported."""
    root = build_store(tmp_path / "store", orders(40, queues=4))
    reads: list[int] = []
    found = units._found

    def counting(*args: object, **kwargs: object) -> object:
        reads.append(len(args[4]))  # type: ignore[arg-type]
        return found(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(units, "_found", counting)
    with Store.open(root) as store:
        report = verify_store(store, VerifyOptions())
    assert report.summary.units_checked == 40 and not report.findings
    assert reads == []
    unit = root / "consumequeue" / "Orders" / "1" / f"{0:020d}"
    data = bytearray(unit.read_bytes())
    data[8:12] = (int.from_bytes(data[8:12], "big") + 1).to_bytes(4, "big")  # unit 0's size
    unit.write_bytes(bytes(data))
    with Store.open(root) as store:
        report = verify_store(store, VerifyOptions())
    assert reads == [1]
    assert [f.check for f in report.findings] == ["consumequeue.size_mismatch"]


def test_units_read_ahead_are_the_units_at_those_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records-to-units check reads each queue's units ahead (a run holds a few records of
    each queue): what it gets is ``units_at`` of the offsets asked, read ahead or again, with
    the queues read ahead beyond the bound dropped."""
    monkeypatch.setattr(context, "_READ_AHEAD", 8)
    monkeypatch.setattr(context, "_UNITS_HELD", 10)
    root = build_store(tmp_path / "store", orders(60, queues=3))
    with Store.open(root) as store:
        ctx = context.Context(store, VerifyOptions())
        asks = [[0, 1, 2], [3, 7], [5, 8, 9], [19], [0], [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
        for offsets in asks:
            for queue_id in range(3):
                qid = QueueId("Orders", queue_id)
                q = ctx.queue(qid)
                assert q is not None and q.max_offset_in_queue == 20
                at = np.array(offsets, np.int64)
                got = ctx.units_at(qid, q, at)
                assert got.tobytes() == q.units_at(at).tobytes()
                assert (got["phy_offset"] >= 0).all()
        assert ctx._units_held <= 10 + 11  # the last read is kept whatever its size
