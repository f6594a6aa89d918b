"""The evidence stays untouched: every command, over a store with every file family, opens its
files read-only (proved by the flags of every ``os.open`` and ``mmap``, since tests run as root,
where permissions prove nothing) and leaves every byte, size, mtime and directory entry as it was.

A new command that reads a store must be added to ``INVOCATIONS``; the test fails until it is.
"""

from __future__ import annotations

import builtins
import io
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from rmqinspect.cli.app import app
from tests.cli_helpers import (
    SMALL_OPTS,
    build_store,
    escaping_store,
    orders,
    run,
    run_jsonl,
    tree_state,
)
from tests.export_helpers import hostile_store

WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
SAFE_OPEN = os.O_NONBLOCK | os.O_NOFOLLOW  # never block on a FIFO, never follow a link
NOT_FILES = ("anonymous memory", "pipe:", "socket:", "anon_inode:")


@dataclass(frozen=True)
class FileAccess:
    call: str  # open, os.open or mmap
    path: str
    writable: bool
    mode: str
    flags: int = 0


def _fd_path(fd: int) -> str:
    if fd == -1:
        return "anonymous memory"  # mmap(-1, ...) maps no file at all
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd {fd}"


def record_file_access(monkeypatch: pytest.MonkeyPatch) -> list[FileAccess]:
    """Record every ``open`` (builtin, ``io`` and so ``pathlib``), ``os.open`` and ``mmap.mmap``
    from now on, with whether the handle can write."""
    log: list[FileAccess] = []
    real_open, real_os_open, real_mmap = io.open, os.open, mmap.mmap

    def path_of(file: Any) -> str:
        return _fd_path(file) if isinstance(file, int) else os.path.realpath(os.fspath(file))

    def recording_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        log.append(FileAccess("open", path_of(file), any(c in mode for c in "wax+"), mode))
        return real_open(file, mode, *args, **kwargs)

    def recording_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        log.append(FileAccess("os.open", path_of(path), bool(flags & WRITING), oct(flags), flags))
        return real_os_open(path, flags, *args, **kwargs)

    def recording_mmap(fileno: int, length: int, *args: Any, **kwargs: Any) -> mmap.mmap:
        given = dict(zip(("flags", "prot", "access", "offset"), args, strict=False)) | kwargs
        access = given.get("access", mmap.ACCESS_DEFAULT)
        prot = given.get("prot", mmap.PROT_READ | mmap.PROT_WRITE)
        # ACCESS_COPY writes only to memory, yet a read-only tool has no use for it either.
        writable = access != mmap.ACCESS_READ and (
            access != mmap.ACCESS_DEFAULT or bool(prot & mmap.PROT_WRITE)
        )
        log.append(FileAccess("mmap", _fd_path(fileno), writable, f"access={access}"))
        return real_mmap(fileno, length, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", recording_open)
    monkeypatch.setattr(io, "open", recording_open)
    monkeypatch.setattr(os, "open", recording_os_open)
    monkeypatch.setattr(mmap, "mmap", recording_mmap)
    return log


Invocation = Callable[[Path, dict[str, Any], Path], tuple[str | Path, ...]]

# Every command that reads a store, as it is run here: (store, first message, a scratch dir).
INVOCATIONS: dict[str, list[Invocation]] = {
    "info": [lambda s, m, d: ("info", s)],
    "messages": [
        lambda s, m, d: ("messages", s),
        lambda s, m, d: ("messages", s / "commitlog" / f"{0:020d}"),  # one file on its own
    ],
    "consumequeue": [
        lambda s, m, d: ("consumequeue", s, "Orders", "0", "--all"),
        lambda s, m, d: ("consumequeue", s / "consumequeue" / "Orders" / "0" / f"{0:020d}"),
    ],
    "index": [
        lambda s, m, d: ("index", s, "--entries"),
        lambda s, m, d: ("index", min((s / "index").iterdir()), "--entries"),
    ],
    "checkpoint": [
        lambda s, m, d: ("checkpoint", s),
        lambda s, m, d: ("checkpoint", s / "checkpoint"),
    ],
    "offsets": [
        lambda s, m, d: ("offsets", s),
        lambda s, m, d: ("offsets", s, "--at", str(m["store_timestamp"]), "-g", "g1"),
    ],
    "groups": [lambda s, m, d: ("groups", s, "--after-restart")],
    "transactions": [lambda s, m, d: ("transactions", s)],
    "delays": [lambda s, m, d: ("delays", s)],
    "timers": [lambda s, m, d: ("timers", s)],
    "pop": [lambda s, m, d: ("pop", s)],
    "stats": [lambda s, m, d: ("stats", s)],
    "trace": [
        lambda s, m, d: ("trace", s, "--msg-id", m["msg_id"], *SMALL_OPTS),
        lambda s, m, d: ("trace", s, "--key", "ORDER-35", "--topic", "Orders", *SMALL_OPTS),
    ],
    "lookup": [
        lambda s, m, d: ("lookup", s, "--msg-id", m["msg_id"]),
        lambda s, m, d: ("lookup", s, "--key", "ORDER-35", "--topic", "Orders"),
        lambda s, m, d: ("lookup", s, "--uniq-key", m["uniq_key"], "--as-recovered"),
        lambda s, m, d: ("lookup", s, "--since", "0", "--topic", "Orders", "--scan"),
        lambda s, m, d: ("lookup", s, "--queue-offset", "Orders:0:17"),
        lambda s, m, d: ("lookup", s, "--physical-offset", str(m["physical_offset"])),
    ],
    "recover": [
        lambda s, m, d: ("recover", s, *SMALL_OPTS),
        lambda s, m, d: ("recover", s, *SMALL_OPTS, "--out", d / "after"),
    ],
    "verify": [lambda s, m, d: ("verify", s, "--hexdump")],
    "salvage": [lambda s, m, d: ("salvage", s, "--out", d / "salvaged")],
    "report": [lambda s, m, d: ("report", s, "--out", d / "report.html")],
    # Its workers are processes of their own: the digests, not the hooks, vouch for them.
    "export": [lambda s, m, d: ("export", s, d / "parquet", "--engine", "arrow", "--jobs", "1")],
}
NO_STORE = {"decode-id", "synth"}  # these never read a store


def _registered() -> set[str]:
    names = {c.name for c in app.registered_commands}
    assert None not in names, "every command is registered under an explicit name"
    return {n for n in names if n is not None}


def test_every_command_that_reads_a_store_is_covered() -> None:
    missing = _registered() - NO_STORE - set(INVOCATIONS)
    assert not missing, f"add an invocation of {sorted(missing)} to INVOCATIONS"


def test_store_files_are_never_opened_for_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command that reads a store, on a crashed store with every file family: every
    store file is opened with read-only, non-blocking, no-follow flags, mapped read-only, and
    not one byte, size, mtime or directory entry changes."""
    specs = orders(40)
    for spec in specs[30:]:
        spec.dispatch = False  # an unindexed tail, so that lookups scan and recover dispatches
    store = build_store(
        tmp_path / "store", specs, crash=True, consumer_offsets={"Orders@g1": {0: 3, 1: 4}}
    )
    before = tree_state(store)
    first = run_jsonl("messages", store, expect=0)[0]
    log = record_file_access(monkeypatch)
    for invocations in INVOCATIONS.values():
        for invocation in invocations:
            args = invocation(store, first, tmp_path)
            result = run(*args, "--format", "json")
            # Each finds what it asks for (the tail scan serves the unindexed messages), and
            # the restart's redispatch loses nothing: exit 0 throughout.
            assert result.exit_code == 0, (args, result.exit_code, result.stderr)
            assert result.stdout, args
    monkeypatch.undo()
    root = os.path.realpath(store)
    # Besides files: anonymous maps, and the pipes the export's workers talk through.
    unknown = [a for a in log if not os.path.isabs(a.path) and not a.path.startswith(NOT_FILES)]
    assert not unknown, unknown
    on_store = [
        a for a in log if os.path.isabs(a.path) and os.path.commonpath([root, a.path]) == root
    ]
    # The hooks saw the model's reads: every store file is opened by store.files.open_regular.
    assert {a.call for a in on_store} == {"os.open", "mmap"}
    assert [a for a in on_store if a.writable] == []
    opened = [a for a in on_store if a.call == "os.open"]
    unsafe = [a for a in opened if a.flags & SAFE_OPEN != SAFE_OPEN]
    assert opened and not unsafe, unsafe
    # The hooks do tell writes: recover --out's, into its own directory, are seen as such.
    dest = (tmp_path / "after").resolve()
    assert any(a.writable and Path(a.path).is_relative_to(dest) for a in log)
    assert tree_state(store) == before


def test_no_command_writes_into_a_store_it_is_told_to_write_to(tmp_path: Path) -> None:
    """recover --out refuses the store itself, a directory inside it and one holding it; the
    store is left exactly as it was."""
    store = build_store(tmp_path / "store", orders(10))
    before = tree_state(store)
    for dest in (store, store / "commitlog", store / "new", tmp_path):
        result = run("recover", store, *SMALL_OPTS, "--out", dest)
        assert result.exit_code == 2, dest
        assert result.stderr.startswith("rmqinspect: error: ") and result.stderr.count("\n") == 1
    assert tree_state(store) == before


# Every command that writes, into OUT (a scratch dir's "out").
WRITERS: list[Invocation] = [
    lambda s, m, d: ("recover", s, "--out", d / "out"),
    lambda s, m, d: ("salvage", s, "--out", d / "out"),
    lambda s, m, d: ("export", s, d / "out", "--engine", "arrow"),
    lambda s, m, d: ("report", s, "--out", d / "out"),
]


@pytest.mark.parametrize("store_kind", ["hostile", "escaping"])
@pytest.mark.parametrize("writer", range(len(WRITERS)))
def test_writers_create_nothing_outside_out(tmp_path: Path, store_kind: str, writer: int) -> None:
    """On stores whose records' topics are hostile (``..``, ``a/b``, NUL; as PREPARED records,
    or as an undispatched tail the restart would give consume queues): every writing command
    creates, changes and deletes nothing but OUT, in the store or anywhere beside it."""
    work = tmp_path / "work"
    if store_kind == "hostile":
        store = hostile_store(work / "store")
    else:
        store = escaping_store(work / "store", tmp_path / "abs")
    scratch = work / "scratch"
    scratch.mkdir()
    before = tree_state(tmp_path)
    args = WRITERS[writer](store, {}, scratch)
    result = run(*args, *SMALL_OPTS, "--format", "json")
    refused = store_kind == "escaping" and args[0] == "recover"
    # The hostile store's damaged record is one the restart discards: recover's exit 1 (and
    # report's, whose page says so).
    lost = store_kind == "hostile" and args[0] in ("recover", "report")
    assert result.exit_code == (2 if refused else 1 if lost else 0), result.stderr
    after = tree_state(tmp_path)
    out = "work/scratch/out"
    assert (out in after) is not refused
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    # OUT itself, what is in it, and the mtime of the scratch dir that holds it.
    assert {k for k in changed if k != out and not k.startswith(f"{out}/")} <= {"work/scratch"}


def test_command_names_resolve_for_error_lines() -> None:
    """handle_errors derives the command name from the function: it must be the registered one,
    so an unexpected error line names the command the user typed."""
    for command in app.registered_commands:
        assert command.callback is not None and command.name is not None
        name = command.callback.__name__.removesuffix("_command").replace("_", "-")
        assert name == command.name
    assert isinstance(app, typer.Typer)
