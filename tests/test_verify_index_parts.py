"""verify takes the index parts' results as the workers finish them: in order, a file's first
part (its slots and chains, the longest) held every later part's key fingerprints in this
process until it was done (91 MB of a 8 GiB store's)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.indexes import IndexPart
from rmqinspect.analysis.verify.run import Verifier, _IndexParts
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec
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
    args = [(0, 0, 10, 0), (0, 10, 20, 0), (1, 0, 10, 0)]
    parts = [
        IndexPart(entries=n, fingerprints=[np.array([n << 32 | n], np.int64)]) for n in (1, 2, 3)
    ]
    arrived = iter([(2, parts[2]), (1, parts[1]), (0, parts[0])])
    with _IndexParts(args, arrived) as results:
        by_file = results.by_file()
        assert by_file == {0: [parts[0], parts[1]], 1: [parts[2]]}
        assert all(p.fingerprints == [] for p in parts)  # the spill holds them
        assert results.keys[0].shared_hashes().tolist() == []
