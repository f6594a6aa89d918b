"""A store file that shrinks while it is mapped: the read finishes over zeros and the store
layer raises :class:`StoreError` naming the file, instead of the process dying by SIGBUS; any
other SIGBUS still ends the process. The CLI's side (one error line, exit 2, every command) is in
the bad-input catalogue (``test_a_file_truncated_while_mapped_is_one_line``)."""

from __future__ import annotations

import mmap
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from rmqinspect.analysis.indexes import open_index_files
from rmqinspect.errors import StoreError
from rmqinspect.export import tasks
from rmqinspect.export.plan import StoreRef, commitlog_file
from rmqinspect.export.schema import Table
from rmqinspect.export.tables import read_part
from rmqinspect.export.tasks import plan_ranges, predict_restart, range_keeps
from rmqinspect.format.scan import WalkPolicy
from rmqinspect.store import mapguard
from rmqinspect.store.files import MappedFiles, StoreFile
from rmqinspect.store.model import Store, StoreOptions
from tests.conftest import FIXTURES, ROOT

# Truncating a file is what a live broker's writer does: the warning is expected.
pytestmark = pytest.mark.filterwarnings("ignore::rmqinspect.errors.LiveStoreWarning")
FIRST_FILE = "00000000000000000000"
SMALL = StoreOptions(index_slot_num=64, index_num=400)
guarded = pytest.mark.skipif(
    not mapguard.compiled(), reason="the _mapguard C extension is not built"
)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(FIXTURES / "stores" / "clean49", root)
    return root


def shrunk(err: pytest.ExceptionInfo[StoreError], path: Path) -> int:
    """The first missing byte the error names, after checking it names ``path``."""
    assert err.value.path == str(path)
    assert mapguard.SHRANK in str(err.value)
    assert err.value.offset is not None
    return err.value.offset


@guarded
def test_a_walk_over_a_shrunken_commitlog_file_raises(store: Path) -> None:
    with Store.open(store) as s:
        first = s.commitlog.files[0]  # not the last: mapped, never copied
        s.view(first).release()
        os.truncate(first.path, 0)
        with pytest.raises(StoreError) as err:
            for _ in s.scan(policy=WalkPolicy.FORENSIC):
                pass
        assert shrunk(err, first.path) == 0


@guarded
def test_an_index_file_shrunk_after_mapping_raises(store: Path) -> None:
    with Store.open(store) as s:
        f = s.index_files[0]
        s.maps.read(f, 0, 40)
        os.truncate(f.path, 100)  # the header stays; the slots and entries are gone
        with pytest.raises(StoreError) as err:
            open_index_files(s)
        assert shrunk(err, f.path) >= mmap.PAGESIZE  # the page holding the header stayed


@guarded
def test_numpy_and_arrow_finish_over_zeros_and_the_check_raises(store: Path) -> None:
    with Store.open(store) as s:
        f = s.commitlog.files[0]  # not the last: mapped, never copied
        view = s.view(f)
        assert bytes(view[4:8]) == b"\xda\xa3\x20\xa7"  # the first record's magic
        os.truncate(f.path, 0)
        records = np.frombuffer(view, np.uint8).copy()  # faults inside numpy's copy
        total = pc.sum(pa.array(np.frombuffer(view, np.uint8))).as_py()
        view.release()
        assert not records.any() and total == 0  # zeros, not the records that were there
        with pytest.raises(StoreError) as err:
            s.maps.check()
        assert shrunk(err, f.path) == 0


@guarded
def test_a_fault_outlives_the_map(store: Path) -> None:
    """Closing the store unmaps the file; the fault is still reported to whoever started
    before it (the CLI checks when the command ends)."""
    since = mapguard.mark()
    with Store.open(store) as s:
        f = s.commitlog.files[0]
        view = s.view(f)
        os.truncate(f.path, 0)
        assert view[5000] == 0
        view.release()
    with pytest.raises(StoreError) as err:
        mapguard.check(since)
    assert shrunk(err, f.path) == 5000
    mapguard.check(mapguard.mark())  # later units start clean


def test_without_the_extension_a_file_found_shorter_is_the_error(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mapguard, "_mapguard", None)
    path = store / "commitlog" / "00000000000000000000"
    f = StoreFile(path, 0, path.stat().st_size)
    with MappedFiles() as maps:
        assert maps.read(f, 0, 4) != b""
        os.truncate(path, 1000)
        with pytest.raises(StoreError) as err:
            maps.read(f, 0, 4)  # refused before the map is read
        assert shrunk(err, path) == 1000


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


# A child that maps one store file through MappedFiles: the handler is installed.
_GUARD_ONE = """
import mmap, os
from pathlib import Path
from rmqinspect.store.files import MappedFiles, StoreFile
path = Path({path!r})
maps = MappedFiles()
maps.read(StoreFile(path, 0, path.stat().st_size), 0, 4)
"""


@guarded
@pytest.mark.parametrize(
    "then",
    [
        "os.kill(os.getpid(), 7)",  # SIGBUS sent by a process
        # a fault in a map rmqinspect did not register
        "fd = os.open(other, os.O_RDONLY); m = mmap.mmap(fd, 4096, access=mmap.ACCESS_READ); "
        "os.truncate(other, 0); m[0]",
    ],
)
def test_any_other_sigbus_still_ends_the_process(store: Path, then: str) -> None:
    other = store / "index" / "20260101000004798"
    code = _GUARD_ONE.format(path=str(store / "commitlog" / FIRST_FILE))
    result = _child(f"{code}\nother = {str(other)!r}\n{then}\nprint('survived')")
    assert result.returncode == -signal.SIGBUS, (result.returncode, result.stderr)
    assert "survived" not in result.stdout


@guarded
def test_an_export_part_read_from_a_shrunken_file_is_not_written(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task an export worker runs: the error instead of part files."""
    with Store.open(store, SMALL) as s:
        ref = StoreRef.of(s)
        part = plan_ranges(s, (Table.MESSAGES,))[0]
        keeps = range_keeps(s, part, predict_restart(ref))
    path = store / "commitlog" / part.file

    def shrinking(worker_store: Store, *args: object) -> Iterator[tuple[Table, pa.RecordBatch]]:
        worker_store.view(commitlog_file(worker_store, part.file)).release()  # mapped
        os.truncate(path, 0)
        yield from read_part(worker_store, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(tasks, "read_part", shrinking)
    out = tmp_path / "out"
    with pytest.raises(StoreError) as err:
        tasks.run_part(ref, str(out), part, (Table.MESSAGES,), keeps, "shrinking")
    shrunk(err, path)
    assert not [p for p in out.rglob("*") if p.is_file()]
