"""verify by byte ranges: the commitlog files cut at arbitrary bytes (into damage, inside
records, past the last record) and stitched give the report of one walk per file, field for
field, on every store that breaks a commitlog or consume-queue check."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqinspect.analysis.ranges import plan_ranges
from rmqinspect.analysis.verify import Verifier, VerifyOptions, VerifyReport, verify_store
from rmqinspect.store.model import Store, StoreOptions
from tests.test_verify_checks import RECIPES, broken_store

# Each store's recipe breaks what ranges could get wrong: records cut, damage a cut falls
# into, the tail, BLANKs, store times across cuts, records after damage, queue coverage.
CASES = sorted(
    c
    for c in RECIPES
    if c.startswith(("commitlog.", "consumequeue.")) and c.split(".")[1] != "file_name"
)
SPLITS = (997, 2999)  # bytes: a 64 KiB file becomes 66 or 22 ranges
OPTIONS = StoreOptions(index_slot_num=64, index_num=400)


def _store(tmp_path: Path, check: str) -> Path:
    return broken_store(tmp_path / "store", check)


def _split(store: Store, split: int) -> VerifyReport:
    with Verifier(store, VerifyOptions(), split_bytes=split) as verifier:
        return verifier.run()


@pytest.mark.parametrize("check", CASES)
def test_ranges_stitch_to_the_whole_files_report(tmp_path: Path, check: str) -> None:
    with Store.open(_store(tmp_path, check), OPTIONS) as store:
        whole = verify_store(store, VerifyOptions())
        assert any(f.check == check for f in whole.findings)
        # Also a cut exactly at the finding: a range begins with the damaged record, or with
        # the record whose predecessor is in the range before.
        at = [f.file_position for f in whole.findings if f.file.startswith("commitlog/")]
        for split in (*SPLITS, *(p for p in at[:1] if p)):
            ranges = plan_ranges(store, split)
            assert len(ranges) > len(store.commitlog.files)  # the files were cut
            assert _split(store, split) == whole, split


def test_progress_counts_every_byte_once(tmp_path: Path) -> None:
    with Store.open(_store(tmp_path, "commitlog.intact_after_damage"), OPTIONS) as store:
        seen: list[int] = []
        with Verifier(store, VerifyOptions(), split_bytes=997) as verifier:
            verifier.run(seen.append)
        assert sum(seen) == sum(f.length for f in store.commitlog.files)
        assert len(seen) == len(plan_ranges(store, 997))


def test_workers_check_ranges(tmp_path: Path) -> None:
    """Two worker processes, the default split lowered so the small files are cut."""
    with Store.open(_store(tmp_path, "commitlog.body_crc"), OPTIONS) as store:
        whole = verify_store(store, VerifyOptions())
        with Verifier(store, VerifyOptions(), jobs=2, split_bytes=4096) as verifier:
            assert verifier.run() == whole
