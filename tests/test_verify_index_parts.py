"""verify takes the index parts' results as the workers finish them: in order, a file's first
part (its slots and chains, the longest) held every later part's key fingerprints in this
process until it was done (91 MB of a 8 GiB store's)."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

import numpy as np

from rmqinspect.analysis.ranges import worker_settings
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.indexes import IndexPart
from rmqinspect.analysis.verify.run import Mapper, Verifier, _IndexParts, run_unit
from rmqinspect.export.findings import OPTIONS, write_findings
from rmqinspect.export.schema import Table
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.synth.writer import MessageSpec, StoreLayout, StoreWriter
from tests.cli_helpers import build_store


def _first_waits_for_the_second(_ctx: Context, arg: tuple[str, int]) -> tuple[int, bool]:
    """The first unit is done only once the second's result was taken (or after 30 s)."""
    marker, number = arg
    if number == 0:
        for _ in range(3000):
            if os.path.exists(marker):
                return number, True
            time.sleep(0.01)
        return number, False
    return number, True


def test_results_are_taken_as_the_workers_finish_them(tmp_path: Path) -> None:
    root = build_store(tmp_path / "store", [MessageSpec("T", b"x")])
    marker = tmp_path / "second-taken"
    taken = []
    with Store.open(root) as store, Verifier(store, jobs=2) as verifier:
        for number, (unit, waited) in verifier._as_done(
            _first_waits_for_the_second, [(str(marker), 0), (str(marker), 1)]
        ):
            taken.append((number, unit, waited))
            marker.touch()
    assert taken == [(1, 1, True), (0, 0, True)]


def test_parts_taken_out_of_order_are_read_in_order_and_spilled_as_taken() -> None:
    args: list[tuple[int, int, int, int, str | None]] = [
        (0, 0, 10, 0, None),
        (0, 10, 20, 0, None),
        (1, 0, 10, 0, None),
    ]
    parts = [
        IndexPart(entries=n, fingerprints=[np.array([n << 32 | n], np.int64)]) for n in (1, 2, 3)
    ]
    arrived = iter([(2, parts[2]), (1, parts[1]), (0, parts[0])])
    with _IndexParts(args, arrived) as results:
        by_file = results.by_file()
        assert by_file == {0: [parts[0], parts[1]], 1: [parts[2]]}
        assert all(p.fingerprints == [] for p in parts)  # the spill holds them
        assert results.keys[0].shared_hashes().tolist() == []


# The index geometry given (as --index-slots/--index-entries): a writer's files do not tell it.
GEOMETRY = StoreOptions(index_slot_num=64, index_num=400)


def _collision_store(root: Path) -> Path:
    layout = StoreLayout(
        commitlog_file_size=1 << 16, cq_file_size=1000, index_slot_num=64, index_num=400
    )
    with StoreWriter(root, layout) as w:
        for key in ("Aa", "BB"):  # String.hashCode("Aa") == String.hashCode("BB")
            w.put(MessageSpec("TopicA", b"body", keys=key))
    return root


def _in_process(store: Store) -> Mapper:
    """The units as an engine's worker runs them (``run_unit``), here."""
    unit = functools.partial(run_unit, "t", str(store.root), worker_settings(store), OPTIONS)
    return lambda work, args: [unit(work, a) for a in args]


def test_parts_that_write_their_keys_to_files_find_the_same_collisions(tmp_path: Path) -> None:
    root = _collision_store(tmp_path / "store")
    keys_dir = tmp_path / "keys"
    keys_dir.mkdir()
    with Store.open(root, GEOMETRY) as store:
        with Verifier(store, OPTIONS) as verifier:
            alone = verifier.run().findings
        with Verifier(store, OPTIONS, mapper=_in_process(store), keys_dir=keys_dir) as verifier:
            filed = verifier.run().findings
    assert [f.check for f in alone] == ["index.hash_collision"]
    assert filed == alone
    (written,) = keys_dir.iterdir()  # the one part's keys: two, sorted
    assert len(np.fromfile(written, np.int64)) == 2


def test_the_findings_table_removes_the_parts_key_files(tmp_path: Path) -> None:
    root = _collision_store(tmp_path / "store")
    out = tmp_path / "out"
    with Store.open(root, GEOMETRY) as store:
        result = write_findings(store, out, _in_process(store))
    assert result.rows[Table.FINDINGS] == 1
    assert [p.name for p in (out / "findings").iterdir()] == [Path(result.files[0]).name]
