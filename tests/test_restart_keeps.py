"""The restart prediction judged range by range agrees with the emulation's own listing.

The export's workers judge the ``no_queue_unit`` losses of their commitlog ranges from the
post-restart state the emulation hands over (``predict_keeps(per_range=True)``); salvage, DLedger
stores and big post-restart states use the emulation's listing. Both must name the same records,
however the commitlog is cut into ranges, on every fixture, damaged store and real-broker store.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmqinspect.analysis.recovery import keeps as keeps_module
from rmqinspect.analysis.recovery.keeps import RestartKeeps, predict_keeps
from rmqinspect.export.plan import commitlog_file, plan_commitlog
from rmqinspect.export.schema import Table
from rmqinspect.export.tables import read_part
from rmqinspect.format.profile import Profile
from rmqinspect.store.model import Store, StoreOptions
from tests.conftest import CONFORMANCE, CONFORMANCE5, FIXTURES
from tests.corpus import expected, input_store, scenarios
from tests.damage_matrix import DAMAGES, PROFILES, damaged
from tests.test_recover_conformance import _store_options

STORES = sorted(p for p in (FIXTURES / "stores").iterdir() if p.is_dir())


def _per_range(
    store: Store, keeps: RestartKeeps, listed: RestartKeeps, split_bytes: int
) -> set[int]:
    """The unserved records the ranges find by the emulation's walk; also checks that the
    ``restart_keeps`` column the export reads with the judged ranges equals the listing's."""
    found: set[int] = set()
    for r in plan_commitlog(store, split_bytes):
        start = commitlog_file(store, r.file).start
        own = keeps.within(start + r.begin, start + r.end)
        found |= set(own.unserved_in(store, r.file, r.walk_from, r.begin, r.end).tolist())
        for _, batch in read_part(store, r, [Table.MESSAGES], own):
            phy = batch.column("physical_offset").to_numpy()
            want = listed.keeps(r.file, phy).tolist()
            assert batch.column("restart_keeps").to_pylist() == want, (r, split_bytes)
    return found


def _agree(store: Store) -> int:
    """Assert the two ways agree for several cuts; returns the unserved count."""
    listed = predict_keeps(store)
    keeps = predict_keeps(store, per_range=True)
    assert keeps.broker_starts == listed.broker_starts
    assert (keeps.end, keeps.deleted_files) == (listed.end, listed.deleted_files)
    if not listed.broker_starts:
        return 0
    assert keeps.serving is not None and not len(keeps.unserved)
    want = set(listed.unserved.tolist())
    for split in (1 << 40, 8192, 1500):
        assert _per_range(store, keeps, listed, split) == want, split
    return len(want)


@pytest.mark.parametrize("root", STORES, ids=[p.name for p in STORES])
def test_fixture_stores(root: Path) -> None:
    with Store.open(root) as store:
        count = _agree(store)
    if root.name == "cq_missing49":  # its TopicA/1 has no consume queue: the check has work
        assert count > 0


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("keeps")


@pytest.mark.parametrize("kind", sorted(DAMAGES))
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_damaged_stores(base: Path, tmp_path: Path, profile: str, kind: str) -> None:
    damaged(base, profile, kind, tmp_path / "s")
    with Store.open(tmp_path / "s", StoreOptions(profile=PROFILES[profile].profile)) as store:
        count = _agree(store)
    if kind == "missing_cq":
        assert count > 0


@pytest.mark.parametrize("kind", ["zero_region", "overwrite_region", "flip_body", "torn_tail"])
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_damage_among_unserved_records(tmp_path: Path, base: Path, profile: str, kind: str) -> None:
    """Damage in a store where a queue is gone: the ranges after the damage resume the
    emulation's walk from it, and still name the same unserved records."""
    damaged(base, profile, kind, tmp_path / "s")
    DAMAGES["missing_cq"](tmp_path / "s")
    with Store.open(tmp_path / "s", StoreOptions(profile=PROFILES[profile].profile)) as store:
        assert _agree(store) > 0


def _conformance() -> list[tuple[Path, str, Profile]]:
    return [
        (corpus, s, profile)
        for corpus, profile in ((CONFORMANCE, Profile.V4_9), (CONFORMANCE5, Profile.V5_3))
        if (corpus / "expected").is_dir()
        for s in scenarios(corpus)
    ]


CASES = _conformance()


@pytest.mark.skipif(not CASES, reason=f"real-broker corpora not found next to {FIXTURES.parent}")
@pytest.mark.parametrize(
    ("corpus", "scenario", "profile"), CASES, ids=[f"{c.name}-{s}" for c, s, _ in CASES]
)
def test_conformance_stores(corpus: Path, scenario: str, profile: Profile) -> None:
    options = _store_options(expected(corpus, scenario), profile)
    with Store.open(input_store(corpus, scenario), options) as store:
        _agree(store)


def test_a_big_post_restart_state_is_listed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the shipping limit the emulation's workers get the listing, not the state."""
    monkeypatch.setattr(keeps_module, "MAX_SHIPPED_OVERLAY", -1)
    with Store.open(FIXTURES / "stores" / "cq_missing49") as store:
        keeps = predict_keeps(store, per_range=True)
        listed = predict_keeps(store)
    assert keeps.serving is None
    assert len(listed.unserved) and np.array_equal(keeps.unserved, listed.unserved)
