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


def test_commands_read_a_store_being_appended_to(store: Path) -> None:
    writer = _writer(store, "append", 60)
    try:
        rounds = 0
        while rounds < 2:
            for command in COMMANDS:
                args = (command[0], store, *command[1:], *OPTS, "--format", "json")
                result = run(*args)
                assert result.exit_code in (0, 1), (command, result.stderr)
                json.loads(result.stdout)  # one whole document, whatever changed meanwhile
                assert "the store looked live (process" in result.stderr, (command, result.stderr)
            rounds += 1
        assert writer.poll() is None, "the writer must outlive the reads"
    finally:
        writer.kill()
        writer.wait()
    # Afterwards the store is quiet again, and says nothing of the kind.
    quiet = run("info", store, *OPTS, "--format", "json")
    assert quiet.exit_code == 0 and "looked live" not in quiet.stderr


def test_a_last_file_truncated_and_regrown_while_read_never_faults(store: Path) -> None:
    """Each command runs in its own process: a SIGBUS would kill it, not the test."""
    writer = _writer(store, "truncate", 60)
    try:
        started = time.monotonic()
        for command in COMMANDS[:4]:  # the commands that read the last commitlog file
            args = [str(a) for a in (command[0], store, *command[1:], *OPTS, "--format", "json")]
            proc = subprocess.run(
                [sys.executable, "-m", "rmqinspect", *args],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert proc.returncode in (0, 1, 2), (command, proc.returncode, proc.stderr)
            assert "unexpected" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
            if proc.returncode == 2:  # the file vanished between listing and reading it
                assert proc.stderr.startswith("rmqinspect: "), proc.stderr
            assert time.monotonic() - started < 120
    finally:
        writer.kill()
        writer.wait()


def test_the_last_file_is_copied_only_while_a_broker_holds_the_lock(store: Path) -> None:
    """Offline (nobody holds ``lock``) the last commitlog file is mapped like the others; while
    a process holds the lock, as a running broker does, it is read once into a private copy."""
    from rmqinspect.errors import LiveStoreWarning
    from rmqinspect.store.model import Store

    with Store.open(store) as offline:
        assert not offline.maps.snapshot_paths
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
        args = ["export", str(store), str(tmp_path / "out"), "--engine", "arrow", "--jobs", "2"]
        proc = subprocess.run(
            [sys.executable, "-m", "rmqinspect", *args, *OPTS],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        writer.kill()
        writer.wait()
    lines = proc.stderr.splitlines()
    assert all(line.startswith("rmqinspect: ") for line in lines), proc.stderr
    assert "LiveStoreWarning" not in proc.stderr
    # Said once: by the command's one store, open across the export (it was said twice when
    # the command opened a second one to check the layout).
    assert sum("the store looked live" in line for line in lines) == 1, proc.stderr
    errors = [line for line in lines if line.startswith("rmqinspect: error: ")]
    if errors:  # the writer rolled a file away under a reader: one line naming it, exit 2
        assert proc.returncode == 2 and len(errors) == 1, proc.stderr
        assert str(store) in errors[0], proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "out" / "_manifest.json").is_file()
