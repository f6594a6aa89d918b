"""Layouts rmqinspect does not read yet: a command whose answer they would make wrong refuses
the store (exit 2, one sentence), ``info`` reports them, and the rest answer as usual."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from rmqinspect.format.profile import Profile
from rmqinspect.synth.rocksdb import move_queues_to_rocksdb
from tests.cli_helpers import SMALL_LAYOUT, build_store, orders, run, run_json

# (what the refusal names, the arguments after STORE); one per answer a command gives.
# {msg_id} and {phy} are the store's first message's, so that every lookup has one to find.
COMMANDS: dict[str, list[str]] = {
    "messages": ["messages", "{store}"],
    "consumequeue": ["consumequeue", "{store}", "Orders", "0"],
    "index": ["index", "{store}"],
    "offsets": ["offsets", "{store}"],
    "offsets --at": ["offsets", "{store}", "--at", "0"],
    "groups": ["groups", "{store}", "--after-restart"],
    "lookup --msg-id": ["lookup", "{store}", "--msg-id", "{msg_id}"],
    "lookup --physical-offset": ["lookup", "{store}", "--physical-offset", "{phy}"],
    "lookup --key": ["lookup", "{store}", "--key", "ORDER-1", "--topic", "Orders"],
    "lookup --key --as-recovered": [
        "lookup",
        "{store}",
        "--key",
        "ORDER-1",
        "--topic",
        "Orders",
        "--as-recovered",
    ],
    "lookup --key --scan": ["lookup", "{store}", "--key", "ORDER-1", "--topic", "Orders", "--scan"],
    "lookup --queue-offset": ["lookup", "{store}", "--queue-offset", "Orders:0:1"],
    "lookup --since/--until": ["lookup", "{store}", "--since", "0", "--topic", "Orders"],
    "lookup --since/--until --scan": [
        "lookup",
        "{store}",
        "--since",
        "0",
        "--topic",
        "Orders",
        "--scan",
    ],
    "recover": ["recover", "{store}"],
    "delays": ["delays", "{store}"],
    "transactions": ["transactions", "{store}"],
    "trace": ["trace", "{store}", "--msg-id", "{msg_id}"],
    "timers": ["timers", "{store}"],
    "pop": ["pop", "{store}"],
    "stats": ["stats", "{store}"],
    "report": ["report", "{store}", "--out", "{store}.html"],
}


def _run(name: str, store: Path) -> tuple[int, str, str]:
    args = COMMANDS[name]
    first: dict[str, object] = {"msg_id": None, "physical_offset": None}
    if "{msg_id}" in args or "{phy}" in args:
        first = run_json("messages", store, "--limit", "1", expect=0)[0]
    values = {"store": store, "msg_id": first["msg_id"], "phy": first["physical_offset"]}
    result = run(*(a.format(**values) for a in args), "--format", "json")
    return result.exit_code, result.stdout, result.stderr


def _refusal(layout: str, where: str, name: str) -> str:
    command = name.removesuffix(" --as-recovered").removesuffix(" --scan").removesuffix(" --at")
    said = f"this store uses {layout} ({where}); `{command}` does not support it yet"
    return f"rmqinspect: error: {said}\n"


def test_dledger_store_is_answered_by_every_command_but_salvage(tmp_path: Path) -> None:
    """DLedger is read (the refusal is lifted for every command that reads it, the export
    included); salvage's resynchronising walk looks for bare records, so it alone refuses."""
    layout = dataclasses.replace(SMALL_LAYOUT, enable_dledger_commitlog=True)
    store = build_store(tmp_path / "s", orders(6), layout)
    for name in COMMANDS:
        code, out, err = _run(name, store)
        assert code == 0 and out and "does not support" not in err, (name, code, err)
    exported = run("export", store, tmp_path / "out", "--engine", "arrow")
    assert exported.exit_code == 0, exported.stderr
    salvaged = run("salvage", store, "--out", tmp_path / "lost")
    assert salvaged.exit_code == 2 and not (tmp_path / "lost").exists()
    assert salvaged.stderr == _refusal("DLedger", "dledger-n0/", "salvage")
    info = run_json("info", store, expect=0)
    assert info["unsupported"] == [
        {
            "kind": "dledger",
            "path": str(store / "dledger-n0"),
            "note": "a DLedger commitlog: every command reads it but salvage, whose "
            "resynchronising walk looks for bare records",
            "takes_over": ["salvage"],
        }
    ]
    assert run("checkpoint", store, "--format", "json").exit_code == 0


# RocksDB consume queues (tests/test_cli_rocksdb.py, tests/test_restart_rocksdb.py) and
# BatchConsumeQueues (tests/test_cli_batch_queue.py, tests/test_restart_batch_queue.py) are read
# by every command, the restart and the export included.
REFUSED_BY_QUEUE_LAYOUTS: set[str] = set()


@pytest.mark.parametrize(
    ("make", "layout", "where", "refused"),
    [
        (
            move_queues_to_rocksdb,
            "RocksDB consume queues",
            "consumequeue/",
            REFUSED_BY_QUEUE_LAYOUTS,
        ),
        (
            lambda s: _batch_queue(s),
            "BatchConsumeQueue",
            "batchconsumequeue/",
            REFUSED_BY_QUEUE_LAYOUTS,
        ),
    ],
    ids=["rocksdb", "batch"],
)
def test_queue_layouts_refuse_only_answers_read_from_the_queues(
    tmp_path: Path, make: object, layout: str, where: str, refused: set[str]
) -> None:
    store = build_store(tmp_path / "s", orders(6))
    assert callable(make)
    make(store)
    for name in COMMANDS:
        code, out, err = _run(name, store)
        if name in refused:
            assert (code, out, err) == (2, "", _refusal(layout, where, name)), name
        else:
            # Read from the commitlog and the index, which these layouts leave as they are:
            # each finds the message it asks for.
            assert code == 0 and out and "does not support" not in err, (name, code, err)


def _batch_queue(store: Path) -> None:
    directory = store / "batchconsumequeue" / "Batched" / "0"
    directory.mkdir(parents=True)
    (directory / f"{0:020d}").write_bytes(bytes(46))


@pytest.mark.parametrize("extra", ["timerwheel", "compaction/compactionLog/Orders/0"])
def test_timer_and_compaction_change_no_answer(tmp_path: Path, extra: str) -> None:
    store = build_store(tmp_path / "s", orders(6))
    path = store / extra
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(16))
    for name in COMMANDS:
        code, out, err = _run(name, store)
        # timers, recover and report (through verify and recover) read the timer store: a
        # 16-byte wheel is one the broker refuses (exit 1: TimerWheel's constructor stops it).
        findings = name in ("timers", "recover", "report") and extra == "timerwheel"
        assert code == (1 if findings else 0) and out and "does not support" not in err, (
            name,
            code,
            err,
        )
    kinds = [u["kind"] for u in run_json("info", store, expect=0)["unsupported"]]
    assert kinds == ([] if extra == "timerwheel" else ["compaction"])


def test_a_dledger_directory_beside_a_commitlog_is_refused(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(6))
    shutil.copytree(store / "commitlog", store / "dledger-n0" / "data")
    code, out, err = _run("messages", store)
    mixed = "a plain commitlog beside DLedger data"
    assert (code, out, err) == (2, "", _refusal(mixed, "dledger-n0/", "messages"))
    assert run("info", store, "--format", "json").exit_code == 0


def test_a_forced_profile_the_store_contradicts_is_said_once(tmp_path: Path) -> None:
    layout = dataclasses.replace(SMALL_LAYOUT, profile=Profile.V5_3)
    store = build_store(tmp_path / "s", orders(6), layout)
    for command in (["info"], ["messages"], ["recover"], ["lookup", "--phy-offset", "0"]):
        forced = run(command[0], store, *command[1:], "--profile", "4.9", "--format", "json")
        assert forced.exit_code == 0, forced.stderr  # a forced profile warns, never refuses
        warnings = [line for line in forced.stderr.splitlines() if "--profile 4.9" in line]
        assert len(warnings) == 1, command
        assert warnings[0].startswith(
            "rmqinspect: warning: --profile 4.9 is forced, but the store looks like 5.3 ("
        )
        assert "properties end with 0x02 (written by 5.2+)" in warnings[0]
        assert warnings[0].endswith("; 4.9's format and recovery rules apply")
        agreeing = run(command[0], store, *command[1:], "--profile", "5.3", "--format", "json")
        assert "forced" not in agreeing.stderr, command
