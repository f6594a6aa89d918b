"""verify's records-to-units check judges the usual case (each record served by the unit at
its own queue offset, with the dispatch's tagsCode) for all the queues of a run at once, and
checks a queue apart only where that does not hold: the reports are the same, field for field,
as checking every queue of every run apart, on every store that breaks a commitlog or
consume-queue check and on one whose runs hold many queues with a few broken."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmqinspect.analysis.verify import VerifyOptions, VerifyReport, verify_store
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.coverage import QueueCoverage
from rmqinspect.analysis.verify.finding import Findings
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE, decode_unit, encode_unit
from rmqinspect.format.javamath import wrap32
from rmqinspect.format.npbytes import I64
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store
from tests.cli_helpers import build_store, orders
from tests.test_verify_checks import RECIPES, broken_store, patch
from tests.test_verify_proven_units import OPTIONS

CASES = sorted(c for c in RECIPES if c.startswith(("commitlog.", "consumequeue.")))


def _queue_by_queue(
    self: QueueCoverage,
    ctx: Context,
    cols: RecordColumns,
    rows: I64,
    topic_ids: I64,
    topics: list[str],
    findings: Findings,
    file: str,
) -> None:
    """Every queue of the run checked apart, in the order of its key."""
    if not len(rows):
        return
    codes, _ = cols.tags_codes(rows, ctx.delay_table, (topic_ids, topics))
    keys = (topic_ids[rows] << 32) | (cols.queue_id[rows] & 0xFFFFFFFF)
    uniq, inverse = np.unique(keys, return_inverse=True)
    for g, key in enumerate(uniq.tolist()):
        group = np.flatnonzero(inverse == g)
        qid = QueueId(topics[key >> 32], wrap32(key & 0xFFFFFFFF))
        self._queue(ctx, qid, cols, rows[group], codes[group], findings, file)


def _reports(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[VerifyReport, VerifyReport]:
    with Store.open(root, OPTIONS) as store:
        together = verify_store(store, VerifyOptions())
    with monkeypatch.context() as m:
        m.setattr(QueueCoverage, "add_run", _queue_by_queue)
        with Store.open(root, OPTIONS) as store:
            apart = verify_store(store, VerifyOptions())
    return together, apart


@pytest.mark.parametrize("check", CASES)
def test_queues_together_change_no_finding(
    tmp_path: Path, check: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = broken_store(tmp_path / "store", check)
    together, apart = _reports(root, monkeypatch)
    assert any(f.check == check for f in apart.findings)
    assert together == apart


def _patch_unit(root: Path, queue: int, n: int, tags: int | None, phy: int | None) -> None:
    path = root / "consumequeue" / "Orders" / str(queue) / f"{0:020d}"
    u = decode_unit(path.read_bytes(), n * CQ_STORE_UNIT_SIZE)
    new = encode_unit(
        u.phy_offset if phy is None else phy, u.size, u.tags_code if tags is None else tags
    )
    patch(path, n * CQ_STORE_UNIT_SIZE, new)


def test_many_queues_with_a_few_broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """40 queues in each run: a clean store is judged without checking any queue apart; with
    a wrong tagsCode in one queue and a unit leading elsewhere in another, only those two
    are, and the findings are those of checking every queue apart."""
    root = build_store(tmp_path / "store", orders(400, queues=40))
    apart: list[QueueId] = []
    queue = QueueCoverage._queue

    def counted(self: QueueCoverage, ctx: Context, qid: QueueId, *args: object) -> None:
        apart.append(qid)
        queue(self, ctx, qid, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(QueueCoverage, "_queue", counted)
    with Store.open(root, OPTIONS) as store:
        clean = verify_store(store, VerifyOptions())
    assert not clean.findings and clean.summary.units_checked == 400
    assert apart == []

    _patch_unit(root, 7, 3, tags=12345, phy=None)
    _patch_unit(root, 31, 5, tags=None, phy=0)
    with Store.open(root, OPTIONS) as store:
        together = verify_store(store, VerifyOptions())
    assert {q.queue_id for q in apart} == {7, 31}
    assert {(f.check, f.queue_id) for f in together.findings} >= {
        ("consumequeue.tags_code", 7),
        ("consumequeue.missing_unit", 31),
    }
    assert together == _reports(root, monkeypatch)[1]
