"""A store being written while it is read: a writer process (``tests/live_writer.py``) holds
the broker's lock and appends records, rolls files and moves the checkpoint, or truncates and
regrows the last commitlog file, while every command reads the store. No command crashes or
faults; each says the store looked live and reports one consistent snapshot."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqinspect.format.profile import Profile
from rmqinspect.synth.writer import StoreLayout
from tests.cli_helpers import build_store, orders, run
from tests.conftest import ROOT
from tests.live_writer import open_then_written

LAYOUT = StoreLayout(
    profile=Profile.V4_9,
    commitlog_file_size=128 * 1024,
    cq_file_size=1000,
    index_slot_num=64,
    index_num=400,
)
OPTS = ("--index-slots", "64", "--index-entries", "400")
COMMANDS: list[tuple[str, ...]] = [
    ("info",),
    ("messages",),
    ("recover",),
    ("lookup", "--key", "live-3", "--topic", "LiveTopic"),
    ("consumequeue", "LiveTopic", "0", "--all"),
    ("index",),
    ("offsets",),
]


def _writer(store: Path, mode: str, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.live_writer", str(store), mode, str(seconds)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    yield build_store(tmp_path / "store", orders(60), LAYOUT)


def _wait_for(store: Path, written: bytes, writer: subprocess.Popen[str]) -> None:
    """Until the commitlog holds ``written`` (the writer is still running)."""
    while not any(written in p.read_bytes() for p in (store / "commitlog").iterdir()):
        assert writer.poll() is None, "the writer stopped"
        time.sleep(0.01)


def _changed_while_read(stderr: str) -> bool:
    """The live-store warning names a commitlog file that changed while the command read it."""
    return any(
        "changed while it was read" in line and "commitlog/" in line.split("changed")[0]
        for line in stderr.splitlines()
    )


def test_commands_read_a_store_being_appended_to(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmqinspect.store.model import Store

    writer = _writer(store, "append", 60)
    try:
        # live-3 is written and its queue made before any read: the lookup has its answer.
        _wait_for(store, b"KEYS\x01live-4", writer)
        monkeypatch.setattr(Store, "open", classmethod(open_then_written(Store.open.__func__)))
        for _ in range(2):
            for command in COMMANDS:
                args = (command[0], store, *command[1:], *OPTS, "--format", "json")
                result = run(*args)
                doc = json.loads(result.stdout)  # one whole document, whatever changed meanwhile
                assert "the store looked live (process" in result.stderr, (command, result.stderr)
                assert _changed_while_read(result.stderr), (command, result.stderr)
                if command[0] != "recover":
                    assert result.exit_code == 0, (command, result.stderr)
                    continue
                # The last file is copied once, when first read: between the two writes of a
                # record, that record is cut short there, and is the one loss the restart makes.
                lost = doc["lost_messages"]
                got = (result.exit_code, doc["verdict"], lost["count"], lost["damaged_records"])
                assert got in ((0, "no_loss", 0, 0), (1, "loses_data", 0, 1)), got
        assert writer.poll() is None, "the writer must outlive the reads"
    finally:
        writer.kill()
        writer.wait()
    monkeypatch.undo()
    # Afterwards the store is quiet again, and says nothing of the kind.
    quiet = run("info", store, *OPTS, "--format", "json")
    assert quiet.exit_code == 0 and "looked live" not in quiet.stderr


def _read(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``rmqinspect ARGS`` in a child of its own, each store it opens changing under it."""
    return subprocess.run(
        [sys.executable, "-m", "tests.live_writer", "--read", *map(str, args), *OPTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_last_file_truncated_and_regrown_while_read_never_faults(store: Path) -> None:
    """Each command runs in its own process: a SIGBUS would kill it, not the test."""
    last = sorted((store / "commitlog").iterdir())[-1]
    writer = _writer(store, "truncate", 60)
    # What each command answers when it reads the file whole; the file read while it was 0
    # bytes, or short, is one of the outcomes below.
    whole = {"info": 0, "messages": 0, "recover": 0}
    try:
        for command in COMMANDS[:4]:  # the commands that read the last commitlog file
            proc = _read(command[0], store, *command[1:], "--format", "json")
            assert "unexpected" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
            if proc.returncode == 2:  # it shrank under a map: one line naming it
                errors = [ln for ln in proc.stderr.splitlines() if "warning" not in ln]
                assert len(errors) == 1 and str(last) in errors[0], proc.stderr
                assert "shrank while it was read" in errors[0], proc.stderr
                continue
            if command[0] == "lookup":
                # LiveTopic has no queue here, and the key is not in the commitlog: the topic
                # is not in the store, one line and exit 1 (the vocabulary's "not found").
                assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
                assert "no such topic: 'LiveTopic'" in proc.stderr
                continue
            doc = json.loads(proc.stdout)
            assert _changed_while_read(proc.stderr), (command, proc.stderr)
            if command[0] == "recover" and proc.returncode == 1:
                # Copied while empty or regrowing: the broker would refuse it or cut it.
                assert doc["verdict"] in ("refuses_to_start", "loses_data"), doc["verdict"]
            else:
                assert proc.returncode == whole[command[0]], (command, proc.stderr)
    finally:
        writer.kill()
        writer.wait()


def test_the_last_file_is_copied_only_while_a_broker_holds_the_lock(store: Path) -> None:
    """Offline (nobody holds ``lock``) the last commitlog file is mapped like the others; while
    a process holds the lock, as a running broker does, it is read once into a private copy."""
    from rmqinspect.analysis.recovery.ranges import RangeChecker
    from rmqinspect.analysis.verify.run import Verifier
    from rmqinspect.errors import LiveStoreWarning
    from rmqinspect.store.model import Store

    with Store.open(store) as offline:
        assert not offline.maps.snapshot_paths
        assert Verifier(offline, jobs=4).jobs == RangeChecker(offline, 4).jobs == 4
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n",
            str(store / "lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with (
            pytest.warns(LiveStoreWarning, match="holds the broker's lock"),
            Store.open(store) as live,
        ):
            last = live.commitlog.files[-1]
            assert live.maps.snapshot_paths == {last.path}
            # Workers would copy the file again at another moment: verify and recover judge
            # this process's copy alone, whatever --jobs says.
            assert Verifier(live, jobs=4).jobs == 1
            assert RangeChecker(live, 4).jobs == 1
            with live.view(last) as view:
                assert bytes(view[:8]) == (store / "commitlog" / last.name).read_bytes()[:8]
    finally:
        holder.kill()
        holder.wait()


def test_the_export_says_in_its_own_words_that_the_store_looked_live(
    store: Path, tmp_path: Path
) -> None:
    """The arrow engine's workers open the store too: none of them prints Python's raw warning
    form; the command's own store, open across all their reads, says it."""
    writer = _writer(store, "append", 60)
    try:
        out = tmp_path / "out"
        proc = _read("export", store, out, "--engine", "arrow", "--jobs", "2")
    finally:
        writer.kill()
        writer.wait()
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert all(line.startswith("rmqinspect: ") for line in lines), proc.stderr
    assert "LiveStoreWarning" not in proc.stderr
    assert _changed_while_read(proc.stderr), proc.stderr
    # Said once: by the command's one store, open across the export (it was said twice when
    # the command opened a second one to check the layout).
    assert sum("the store looked live" in line for line in lines) == 1, proc.stderr
    assert (tmp_path / "out" / "_manifest.json").is_file()
