"""One rule for what a consume-queue unit leads to: :func:`resolve_units` (many units at once,
records gathered) says for every unit what :func:`resolve_unit` (one unit, its record decoded)
says, on every fixture and conformance store, on damaged stores and on hostile units; LMQ units
lead to their multi-dispatched records for ``lookup``, the export and verify alike."""

from __future__ import annotations

import functools
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqinspect.analysis.lookup.direct import lookup_queue_offset
from rmqinspect.analysis.queues import iter_unit_chunks
from rmqinspect.analysis.units import UnitStatus, resolve_unit, resolve_units
from rmqinspect.analysis.verify import VerifyOptions, verify_store
from rmqinspect.export.schema import Table
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.columns import gather
from rmqinspect.format.consumequeue import (
    CQ_UNIT_DTYPE,
    PRE_BLANK_SIZE,
    encode_unit,
)
from rmqinspect.format.profile import Profile
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec, StoreLayout, StoreWriter
from tests.cli_helpers import SMALL_OPTS, run
from tests.conftest import CONFORMANCE, CONFORMANCE5, CONFORMANCE_DLEDGER, FIXTURES
from tests.damage_matrix import DAMAGES, PROFILES, Record, damaged, records
from tests.export_helpers import read_table
from tests.test_verify_checks import RECIPES, broken_store, patch_record

CLEAN = FIXTURES / "stores" / "clean49"


def _stores() -> list[Path]:
    found = sorted(p for p in (FIXTURES / "stores").iterdir() if p.is_dir())
    for corpus in (CONFORMANCE, CONFORMANCE5, CONFORMANCE_DLEDGER):
        if (corpus / "stores").is_dir():
            found += sorted(p for p in (corpus / "stores").iterdir() if p.is_dir())
    return found


def assert_agree(
    store: Store, topic: str, queue_id: int, queue_offsets: np.ndarray, units: np.ndarray
) -> list[UnitStatus]:
    """resolve_units and resolve_unit say the same of every unit; returns the statuses."""
    res = resolve_units(store, topic, queue_id, queue_offsets, units)
    statuses = []
    for i, unit in enumerate(units.tolist()):
        view = resolve_unit(store, topic, queue_id, int(queue_offsets[i]), unit)
        got = (res.status(i), res.details.get(i, ""))
        assert got == (view.status, view.detail), (topic, queue_id, int(queue_offsets[i]), unit)
        statuses.append(view.status)
    return statuses


def assert_store_agrees(root: Path) -> set[UnitStatus]:
    """Every unit on disk of every queue of the store (chunks small enough to cross files)."""
    seen: set[UnitStatus] = set()
    with Store.open(root) as store:
        for qid in store.queue_dirs:
            for chunk in iter_unit_chunks(store, qid.topic, qid.queue_id, 0, None, 700):
                seen |= set(
                    assert_agree(store, qid.topic, qid.queue_id, chunk.queue_offsets, chunk.units)
                )
    return seen


@pytest.mark.parametrize("root", _stores(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_unit_of_every_store(root: Path) -> None:
    seen = assert_store_agrees(root)
    if (root / "consumequeue").is_dir() and any((root / "consumequeue").iterdir()):
        assert seen  # the store's units were looked at


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("originals")


@pytest.mark.parametrize("kind", sorted(DAMAGES))
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_unit_of_damaged_stores(
    originals: Path, tmp_path: Path, profile: str, kind: str
) -> None:
    damaged(originals, profile, kind, tmp_path / "store")
    assert_store_agrees(tmp_path / "store")


_BROKEN = sorted(c for c in RECIPES if c.startswith(("consumequeue.", "commitlog.")))


@pytest.mark.parametrize("check", _BROKEN)
def test_every_unit_of_the_verify_recipes(tmp_path: Path, check: str) -> None:
    """The stores verify's check tests break (bad units, bad records, missing files)."""
    root = broken_store(tmp_path / "store", check)
    assert_store_agrees(root)


@functools.cache
def _clean_records() -> list[Record]:
    return records(CLEAN)


def _hostile_units(store: Store) -> list[tuple[int, int, int]]:
    """Units for every branch of the rule, and values no broker writes."""
    recs = records(CLEAN)
    first, other = recs[3], recs[40]
    clq = store.commitlog
    end = clq.end_offset
    last = clq.files[-1]
    return [
        (0, PRE_BLANK_SIZE, 0),
        (0, PRE_BLANK_SIZE, 1),  # not quite a placeholder
        (-1, 100, 0),
        (-(2**63), 100, 0),
        (first.offset, 0, 0),
        (first.offset, -(2**31), 0),
        (2**63 - 1, 100, 0),
        (end, 100, 0),
        (end - 1, 100, 0),
        (end - cl.MIN_RECORD_SIZE, cl.MIN_RECORD_SIZE, 0),
        (last.start + last.length - 8, 100, 0),
        (first.offset, first.size, 0),
        (first.offset, first.size + 1, 0),
        (first.offset, 2**31 - 1, 0),
        (first.offset + 1, first.size, 0),
        (first.offset + 4, first.size, 0),
        (first.offset - 4, first.size, 0),
        (other.offset, other.size, 0),
        (recs[-1].end, 100, 0),  # the unwritten rest of the last file
    ]


def test_hostile_units() -> None:
    with Store.open(CLEAN) as store:
        units = np.array(_hostile_units(store), CQ_UNIT_DTYPE)
        for qid in store.queue_dirs:
            offsets = np.arange(len(units), dtype=np.int64) + 3
            assert_agree(store, qid.topic, qid.queue_id, offsets, units)
        statuses = assert_agree(
            store, "TopicA", 0, np.full(len(units), -5, np.int64), units
        )  # a hostile queue offset too
    assert set(statuses) >= {
        UnitStatus.PRE_BLANK,
        UnitStatus.INVALID,
        UnitStatus.BEYOND_COMMITLOG,
        UnitStatus.NO_RECORD,
        UnitStatus.SIZE_MISMATCH,
        UnitStatus.OTHER_QUEUE,
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_units_agree(data: st.DataObject) -> None:
    """Units near record starts (and anywhere) with sizes near the record's (and any)."""
    recs = _clean_records()
    n = data.draw(st.integers(1, 40))
    rows = []
    for _ in range(n):
        rec = recs[data.draw(st.integers(0, len(recs) - 1))]
        phy = data.draw(
            st.one_of(
                st.just(rec.offset),
                st.integers(rec.offset - 100, rec.offset + 100),
                st.integers(-(2**63), 2**63 - 1),
            )
        )
        size = data.draw(
            st.one_of(
                st.just(rec.size),
                st.integers(rec.size - 3, rec.size + 3),
                st.integers(-(2**31), 2**31 - 1),
            )
        )
        tags = data.draw(st.one_of(st.just(0), st.integers(-(2**63), 2**63 - 1)))
        rows.append((phy, size, tags))
    qoffs = np.array(data.draw(st.lists(st.integers(-5, 200), min_size=n, max_size=n)), np.int64)
    with Store.open(CLEAN) as store:
        qid = data.draw(st.sampled_from(sorted(store.queue_dirs, key=str)))
        assert_agree(store, qid.topic, qid.queue_id, qoffs, np.array(rows, CQ_UNIT_DTYPE))


# --- LMQ ------------------------------------------------------------------------------------

LMQ = "%LMQ%orders"
T0 = 1_767_225_600_000


def _lmq_store(root: Path) -> list[tuple[int, int]]:
    """TopicA messages multi-dispatched to ``LMQ`` (queue 0) at offsets 0.., as the broker
    writes them: the units of the LMQ queue lead to records of TopicA. Returns (physical
    offset, size) of each message."""
    layout = StoreLayout(Profile.V5_3, 64 * 1024, 6000, index_slot_num=64, index_num=400)
    placed = []
    with StoreWriter(root, layout) as writer:
        for i in range(30):
            spec = MessageSpec(
                topic="TopicA",
                queue_id=i % 2,
                body=f"message {i}".encode(),
                tags="TagA",
                store_timestamp=T0 + i,
                properties={
                    props.INNER_MULTI_DISPATCH: f"%LMQ%other,{LMQ}",
                    props.INNER_MULTI_QUEUE_OFFSET: f"{100 + i},{i}",
                },
            )
            put = writer.put(spec)
            placed.append((put.physical_offset, put.size))
    queue = root / "consumequeue" / LMQ / "0"
    queue.mkdir(parents=True)
    units = b"".join(encode_unit(phy, size, 0) for phy, size in placed)
    (queue / f"{0:020d}").write_bytes(units + bytes(6000 - len(units)))
    return placed


def test_lmq_units_lead_to_their_records(tmp_path: Path) -> None:
    root = tmp_path / "store"
    placed = _lmq_store(root)
    with Store.open(root) as store:
        units = np.array([(p, s, 0) for p, s in placed], CQ_UNIT_DTYPE)
        offsets = np.arange(len(units), dtype=np.int64)
        assert set(assert_agree(store, LMQ, 0, offsets, units)) == {UnitStatus.FOUND}
        # Two units swapped: each record says it holds the other offset in the LMQ queue.
        swapped = units[[1, 0]]
        statuses = assert_agree(store, LMQ, 0, offsets[:2], swapped)
        assert statuses == [UnitStatus.OTHER_QUEUE] * 2
        view = resolve_unit(store, LMQ, 0, 0, tuple(swapped.tolist()[0]))
        assert view.detail.endswith("(multi-dispatched here at queue offset 1)")
        # Not the queue of a name the record does not list, nor another queue id of it.
        assert set(assert_agree(store, "%LMQ%nope", 0, offsets, units)) == {UnitStatus.OTHER_QUEUE}
        assert set(assert_agree(store, LMQ, 1, offsets, units)) == {UnitStatus.OTHER_QUEUE}
        hit = lookup_queue_offset(store, LMQ, 0, 7)
        assert [h.record.position for h in hit.hits] == [placed[7][0]]
        report = verify_store(store, VerifyOptions())
    assert [f for f in report.findings if f.topic == LMQ] == []
    out = tmp_path / "out"
    result = run("export", root, out, "--engine", "arrow", "--tables", "consume_queue", *SMALL_OPTS)
    assert result.exit_code == 0, result.stderr
    rows = [r for r in read_table(out, Table.CONSUME_QUEUE).to_pylist() if r["topic"] == LMQ]
    assert [r["status"] for r in rows] == ["found"] * len(placed)


def test_a_record_whose_fields_do_not_add_up(tmp_path: Path) -> None:
    """A record of its unit's TOTALSIZE whose fields add up to less: no_record, with the
    header's size said (verify leaves that finding to the record's own check)."""
    root = tmp_path / "store"
    shutil.copytree(CLEAN, root)
    rec = records(root)[5]
    body_length_at = int(gather(rec.data, np.zeros(1, np.int64)).body_at[0]) - 4
    (body_length,) = struct.unpack_from(">i", rec.data, body_length_at)
    patch_record(root, rec, body_length_at, struct.pack(">i", body_length - 1))
    with Store.open(root) as store:
        units = np.array([(rec.offset, rec.size, 0)], CQ_UNIT_DTYPE)
        res = resolve_units(store, "TopicA", 0, np.zeros(1, np.int64), units)
        assert res.status(0) is UnitStatus.NO_RECORD
        assert res.details[0].startswith("corrupt record")
        assert int(res.record_sizes[0]) == rec.size
        report = verify_store(store, VerifyOptions())
    at_record = [f.check for f in report.findings if f.physical_offset == rec.offset]
    assert at_record and all(c.startswith("commitlog.") for c in at_record)


@pytest.mark.parametrize("name", ["clean49", "retention49", "empty49"])
def test_find_many_is_find(name: str) -> None:
    with Store.open(FIXTURES / "stores" / name) as store:
        clq = store.commitlog
        size = clq.file_size
        edges = [f.start + d for f in clq.files for d in (-1, 0, 1, size - 1, size, size + 1)]
        offsets = [*edges, -(2**63), -1, 0, 2**63 - 1, clq.end_offset]
        which = clq.find_many(np.array(offsets, np.int64)).tolist()
    expected = [clq.index_of(f) if (f := clq.find(o)) is not None else -1 for o in offsets]
    assert which == expected
