"""A fleet export (several stores, one dataset under ``broker=NAME``) and the driver's share of an
export: it plans the commitlog from file lengths and reads no commitlog byte; each file's plan
walks that file only, and the restart emulation reads the files from its recovery start file on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from rmqinspect.export import arrow_engine
from rmqinspect.export.plan import StoreRef, file_ranges, plan_chunks, plan_commitlog
from rmqinspect.export.progress import Reporter
from rmqinspect.export.schema import BROKER_PARTITION, Table
from rmqinspect.export.tasks import Member, plan_file, predict_restart, range_keeps
from rmqinspect.format.host import HostAddress
from rmqinspect.store.files import MappedFiles, StoreFile
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import SMALL_LAYOUT, SMALL_OPTS, build_store, run, run_json
from tests.conftest import FIXTURES
from tests.export_helpers import broker_rows, read_table, sorted_rows

STORES = FIXTURES / "stores"
FLEET = {"a": STORES / "clean49", "b": STORES / "crash53"}  # 4.9 clean, 5.3 crashed


@pytest.fixture(scope="module")
def singles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("singles")
    outs = {}
    for name, store in FLEET.items():
        outs[name] = base / name
        run_json("export", store, outs[name], "--engine", "arrow", "-j", "2", *SMALL_OPTS, expect=0)
    return outs


def test_a_fleet_export_is_each_store_export_under_its_broker(
    tmp_path: Path, singles: dict[str, Path]
) -> None:
    out = tmp_path / "fleet"
    pairs = [f"{name}={store}" for name, store in FLEET.items()]
    manifest = run_json("export", *pairs, "--out", out, "--engine", "arrow", *SMALL_OPTS, expect=0)
    assert manifest["broker_partition"] == BROKER_PARTITION
    assert [s["broker"] for s in manifest["stores"]] == list(FLEET)
    for entry, (name, store) in zip(manifest["stores"], FLEET.items(), strict=True):
        single = json.loads((singles[name] / "_manifest.json").read_text())
        assert entry["store"] == single["store"] == str(store.resolve())
        assert entry["directory"] == f"{BROKER_PARTITION}={name}"
        assert entry["profile"] == single["profile"]
        assert entry["source_files"] == single["source_files"]
        assert entry["rows"] == {t: info["rows"] for t, info in single["tables"].items()}
    for table in Table:
        total = 0
        for name in FLEET:
            want = sorted_rows(read_table(singles[name], table))
            got = sorted_rows(broker_rows(out, table, name))
            assert got.equals(want), (table, name)
            total += want.num_rows
        assert manifest["tables"][table.value]["rows"] == total
    assert (out / Table.MESSAGES.value / f"{BROKER_PARTITION}=b").is_dir()
    shown = run("export", *pairs, "-o", tmp_path / "again", "--engine", "arrow", "-F", "table")
    assert shown.exit_code == 0, shown.stderr
    assert "in 2 stores (a, b)" in shown.stdout


def _host_store(root: Path, last: int) -> Path:
    layout = replace(SMALL_LAYOUT, store_host=HostAddress(bytes([10, 0, 0, last]), 10911))
    return build_store(root, [MessageSpec(topic="T", body=b"x" * 10) for _ in range(5)], layout)


def test_unnamed_stores_of_a_fleet_are_named_by_their_store_host(tmp_path: Path) -> None:
    one, two = _host_store(tmp_path / "one", 1), _host_store(tmp_path / "two", 2)
    out = tmp_path / "out"
    manifest = run_json(
        "export", one, two, out, "--engine", "arrow", "--tables", "messages", expect=0
    )
    assert [s["broker"] for s in manifest["stores"]] == ["10.0.0.1:10911", "10.0.0.2:10911"]
    assert (out / "messages" / "broker=10.0.0.1%3A10911").is_dir()  # ':' escaped as Hive does
    assert broker_rows(out, Table.MESSAGES, "10.0.0.2:10911").num_rows == 5


@pytest.mark.parametrize(
    ("why", "args"),
    [
        ("both broker '10.0.0.1:10911'", lambda s, o: (s["one"], s["same"], o)),
        ("both broker 'x'", lambda s, o: (f"x={s['one']}", f"x={s['two']}", o)),
        ("must be outside", lambda s, o: (s["one"], s["two"], s["two"] / "out")),
        ("give STORE and OUT", lambda s, o: (s["one"],)),
    ],
)
def test_a_fleet_refuses_ambiguous_names_and_out_in_any_store(
    tmp_path: Path, why: str, args: object
) -> None:
    stores = {
        "one": _host_store(tmp_path / "one", 1),
        "same": _host_store(tmp_path / "same", 1),
        "two": _host_store(tmp_path / "two", 2),
    }
    assert callable(args)
    done = run("export", *args(stores, tmp_path / "out"), "--engine", "arrow")
    assert done.exit_code == 2
    assert why in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "two" / "out").exists()


# --- what the driver reads --------------------------------------------------------------------


OPTIONS = StoreOptions(commitlog_file_size=4096, index_slot_num=64, index_num=400)


@pytest.fixture
def mapped(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The commitlog files this process maps (a walk of one maps it whole)."""
    names: list[str] = []
    view = MappedFiles.view

    def counted(self: MappedFiles, f: StoreFile) -> memoryview:
        if f.path.parent.name == "commitlog":
            names.append(f.name)
        return view(self, f)

    monkeypatch.setattr(MappedFiles, "view", counted)
    yield names


def _many_files(root: Path) -> Path:
    layout = replace(SMALL_LAYOUT, commitlog_file_size=OPTIONS.commitlog_file_size)
    specs = [MessageSpec(topic=f"T{i % 3}", body=b"y" * 200) for i in range(120)]
    return build_store(root, specs, layout)


def test_the_driver_maps_no_commitlog_file(tmp_path: Path, mapped: list[str]) -> None:
    """Before, the driver walked every file's headers to cut the ranges (plan_commitlog): every
    file mapped. Now it plans from lengths; the walks run in the pool's processes."""
    root = _many_files(tmp_path / "s")
    out = tmp_path / "out"
    out.mkdir()
    with Store.open(root, OPTIONS) as store:
        assert len(store.commitlog.files) > 6
        mapped.clear()  # opening looks at the last file's tail
        plan_commitlog(store)
        assert sorted(set(mapped)) == sorted(f.name for f in store.commitlog.files)  # before
        mapped.clear()
        wanted = (Table.MESSAGES, Table.MESSAGE_COPIES)
        (result,) = arrow_engine.run_arrow([Member(store)], out, wanted, 2, Reporter())
    assert mapped == []
    assert result.rows[Table.MESSAGES] == 120


def test_a_file_plan_walks_its_file_and_the_emulation_its_last_files(
    tmp_path: Path, mapped: list[str]
) -> None:
    root = _many_files(tmp_path / "s")
    with Store.open(root, OPTIONS) as store:
        ref = StoreRef.of(store)
        files = [f.name for f in store.commitlog.files]
        mapped.clear()  # opening looks at the last file's tail
        chunks = plan_chunks(store, 1000)
        assert mapped == []  # planned from lengths
        for first in (c for c in chunks if c.index == 0):
            mapped.clear()
            ranges = plan_file(ref, first)
            assert set(mapped) == {first.file}
            f = next(f for f in store.commitlog.files if f.name == first.file)
            want = list(file_ranges(store, f, 1000, first.directory))
            assert [(r.begin, r.end, r.walk_from) for r in ranges] == [
                (r.begin, r.end, r.walk_from) for r in want
            ]
            assert len(ranges) <= sum(c.file == first.file for c in chunks)
        mapped.clear()
        prediction = predict_restart(ref)
        # A clean 4.9 store: recoverNormally starts at the third file from the end.
        assert set(mapped) <= set(files[-3:])
        assert prediction.broker_starts
        range_keeps(store, chunks[0], prediction)
