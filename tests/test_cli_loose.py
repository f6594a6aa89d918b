"""One store file read on its own (``kafka-dump-log --files``): ``messages``, ``consumequeue``,
``index`` and ``checkpoint`` given a file copied out of a synth store answer what the same
command answers about that file's part of the whole store."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import SMALL_OPTS, build_store, orders, run, run_json

FILE_SIZE = 64 * 1024  # SMALL_LAYOUT's commitlog files
SECOND = f"{FILE_SIZE:020d}"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 600 orders of about 170 bytes: two commitlog files, three consume queue files per queue
    # and four index files.
    return build_store(tmp_path_factory.mktemp("loose") / "store", orders(600))


def copied(src: Path, into: Path, *parts: str) -> Path:
    """``src`` copied under ``into/parts...`` (a directory of nothing else)."""
    target = into.joinpath(*parts, src.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, target)
    return target


def test_a_commitlog_file_alone_lists_its_part_of_the_store(store: Path, tmp_path: Path) -> None:
    alone = copied(store / "commitlog" / SECOND, tmp_path)
    whole = run_json("messages", store, "--body", "base64", expect=0)
    mine = [m for m in whole if m["physical_offset"] >= FILE_SIZE]
    assert mine and len(mine) < len(whole)
    got = run_json("messages", alone, "--body", "base64", expect=0)
    assert got == mine  # the name gives the offsets, the length the file size


def test_filters_apply_to_a_commitlog_file_alone(store: Path, tmp_path: Path) -> None:
    alone = copied(store / "commitlog" / SECOND, tmp_path)
    args = ("--topic", "Orders", "--queue-id", "1", "--tag", "TagA")
    whole = run_json("messages", store, *args, "--from", str(FILE_SIZE), expect=0)
    assert whole
    assert run_json("messages", alone, *args, expect=0) == whole


def test_a_consume_queue_file_alone_lists_its_units(store: Path, tmp_path: Path) -> None:
    src = store / "consumequeue" / "Orders" / "1" / f"{1000:020d}"
    # Topic and queue id from the directories the copy sits in, as in the store.
    alone = copied(src, tmp_path, "Orders", "1")
    got = run_json("consumequeue", alone, expect=0)
    assert got["queue"]["topic"] == "Orders" and got["queue"]["queue_id"] == 1
    units = got["units"]
    assert [u["queue_offset"] for u in units] == list(range(50, 100))  # 1000 bytes: 50 units
    whole = run_json("consumequeue", store, "Orders", "1", "--from", "50", "-n", "50", expect=0)
    fields = ("queue_offset", "physical_offset", "size", "tags_code", "tags_code_kind")
    assert [{k: u[k] for k in fields} for u in units] == [
        {k: u[k] for k in fields} for u in whole["units"]
    ]
    # No commitlog beside it: said per unit, never guessed.
    assert {(u["status"], u["message"]) for u in units} == {("not_read", None)}


def test_a_consume_queue_file_outside_its_directories_needs_topic_and_queue(
    store: Path, tmp_path: Path
) -> None:
    alone = copied(store / "consumequeue" / "Orders" / "0" / f"{2000:020d}", tmp_path, "x")
    result = run("consumequeue", alone)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "give TOPIC and QUEUE_ID" in result.stderr
    got = run_json("consumequeue", alone, "Orders", "0", expect=0)
    assert (got["queue"]["topic"], got["queue"]["queue_id"]) == ("Orders", 0)
    assert [u["queue_offset"] for u in got["units"]] == list(range(100, 150))


def _index_file(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "file"}


def test_an_index_file_alone_reads_as_in_the_store(store: Path, tmp_path: Path) -> None:
    names = sorted(p.name for p in (store / "index").iterdir())
    assert len(names) == 4
    alone = copied(store / "index" / names[1], tmp_path)
    got = run_json("index", alone, "--entries", *SMALL_OPTS, expect=0)
    whole = run_json("index", store, names[1], "--entries", *SMALL_OPTS, expect=0)
    assert [_index_file(f) for f in got["files"]] == [_index_file(f) for f in whole["files"]]
    assert got["files"][0]["header"]["entries"] > 0
    entries = [{k: v for k, v in e.items() if k != "file"} for e in got["entries"]]
    assert entries == [{k: v for k, v in e.items() if k != "file"} for e in whole["entries"]]


def test_a_checkpoint_file_alone(store: Path, tmp_path: Path) -> None:
    alone = copied(store / "checkpoint", tmp_path)
    got = run_json("checkpoint", alone, expect=0)
    whole = run_json("checkpoint", store, expect=0)
    assert {k: v for k, v in got.items() if k != "path"} == {
        k: v for k, v in whole.items() if k != "path"
    }


@pytest.mark.parametrize(
    ("command", "name", "says"),
    [
        ("messages", "commitlog.bin", "20-digit offset"),
        ("consumequeue", "00000000000000000007", "whole unit"),
        ("index", "index.bin", "17 digits"),
    ],
)
def test_a_file_whose_name_cannot_be_its_kind_is_one_line(
    tmp_path: Path, command: str, name: str, says: str
) -> None:
    path = tmp_path / "Orders" / "0" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\0" * 1000)
    result = run(command, path)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.count("\n") == 1 and says in result.stderr
    assert str(path) in result.stderr


def test_commands_without_loose_files_refuse_one(store: Path) -> None:
    result = run("verify", store / "commitlog" / SECOND)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "not a directory" in result.stderr


def test_a_link_or_fifo_in_place_of_the_file_is_one_line(store: Path, tmp_path: Path) -> None:
    link = tmp_path / "link" / SECOND
    link.parent.mkdir()
    link.symlink_to(store / "commitlog" / SECOND)
    fifo = tmp_path / "fifo" / SECOND
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    for path, says in ((link, "is a symbolic link"), (fifo, "is a FIFO")):
        result = run("messages", path)
        assert result.exit_code == 2
        assert result.stderr.startswith(f"rmqinspect: error: {path}: {says}")
        assert result.stderr.count("\n") == 1


def test_an_empty_commitlog_file_holds_no_message(tmp_path: Path) -> None:
    empty = tmp_path / SECOND
    empty.write_bytes(b"")
    assert run_json("messages", empty, expect=0) == []
