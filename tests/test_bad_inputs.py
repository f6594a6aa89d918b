"""The catalogue of bad inputs: each broken or hostile store shape and exactly what rmqinspect
does with it. Corruption becomes a finding (a layout problem, a config state, an error field);
unreadable input is one ``rmqinspect: error:`` line naming the file, with exit 2; nothing
blocks, follows a link, reads past a cap, or walks a sparse file's holes.

Every case starts from a copy of the ``clean49`` fixture (two 64 KiB commitlog files, seven
topics' consume queues, two index files, config JSON with ``.bak`` twins).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import Result

from rmqinspect.render.values import MAX_CELL_CHARS
from rmqinspect.store import mapguard
from rmqinspect.store.configfiles import MAX_CONFIG_BYTES
from rmqinspect.store.files import StoreFile
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import (
    SMALL_LAYOUT,
    SMALL_OPTS,
    build_store,
    escaping_store,
    escaping_topics,
    orders,
    run,
    tree_state,
)
from tests.conftest import FIXTURES, ROOT

GIB = 1 << 30
FIRST = "00000000000000000000"
SECOND = "00000000000000065536"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(FIXTURES / "stores" / "clean49", root)
    return root


@pytest.fixture(autouse=True)
def never_blocks() -> Iterator[None]:
    """Fail instead of hanging: an open() that blocks (a FIFO) is interrupted after 30 s."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("rmqinspect blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(30)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cli(*args: str | Path) -> Result:
    return run(*args, *SMALL_OPTS) if args[0] not in ("checkpoint", "decode-id") else run(*args)


def doc(*args: str | Path, code: int = 0) -> Any:
    result = cli(*args, "--format", "json")
    assert result.exit_code == code, result.stderr
    return json.loads(result.stdout)


def error_line(result: Result) -> str:
    """The one error line of a run that exits 2 (warnings may precede it)."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    errors = [ln for ln in result.stderr.splitlines() if not ln.startswith("rmqinspect: warning")]
    assert len(errors) == 1 and errors[0].startswith("rmqinspect: error: "), result.stderr
    return errors[0]


def problems(info: dict[str, Any], store: Path) -> set[tuple[str, str]]:
    return {(p["kind"], os.path.relpath(p["path"], store)) for p in info["problems"]}


def config(info: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in info["config_files"] if c["name"] == name)
    return found


def measured(*args: str | Path, timeout: float = 60) -> tuple[int, str, float, int]:
    """Run ``python -m rmqinspect ARGS`` in a child: exit code, stderr, seconds and peak RSS
    (bytes, from the child's own rusage)."""
    argv = [sys.executable, "-m", "rmqinspect", *map(str, args), *SMALL_OPTS, "--format", "json"]
    with tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > timeout:
                proc.kill()
                raise TimeoutError(f"rmqinspect {args} ran over {timeout} s")
            time.sleep(0.02)
        seconds = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        err.seek(0)
        return proc.returncode, err.read().decode(), seconds, usage.ru_maxrss * 1024


# --- not a store ------------------------------------------------------------------------------


def test_a_path_that_is_not_a_store(tmp_path: Path) -> None:
    assert "no such directory" in error_line(cli("info", tmp_path / "missing"))
    (tmp_path / "file").write_bytes(b"x")
    assert "not a directory" in error_line(cli("info", tmp_path / "file"))
    (tmp_path / "empty").mkdir()
    assert "not a RocketMQ store directory" in error_line(cli("messages", tmp_path / "empty"))


def test_a_store_path_that_is_a_symlink_loop(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to("loop")
    line = error_line(cli("info", tmp_path / "loop"))
    assert str(tmp_path / "loop") in line


# --- empty files and files of the wrong size -------------------------------------------------


def test_empty_last_commitlog_file(store: Path) -> None:
    os.truncate(store / "commitlog" / SECOND, 0)
    info = doc("info", store)
    assert ("zero_length", f"commitlog/{SECOND}") in problems(info, store)
    report = doc("recover", store, code=1)  # 4.9 refuses to load a zero-length last file
    assert report["broker_starts"] is False
    assert [f["kind"] for f in report["load_failures"]] == ["zero_length"]
    assert cli("messages", store, "--format", "jsonl").exit_code == 0


def test_commitlog_file_of_the_wrong_size(store: Path) -> None:
    os.truncate(store / "commitlog" / FIRST, 1000)
    size = ("--commitlog-file-size", "65536")  # two files, two sizes: nothing to infer from
    info = doc("info", store, *size)
    assert ("wrong_size", f"commitlog/{FIRST}") in problems(info, store)
    assert doc("recover", store, *size, code=1)["verdict"] == "refuses_to_start"


def test_an_index_entry_at_a_record_the_file_end_cuts(tmp_path: Path) -> None:
    """A record that starts before a truncated file's end and runs past it: the index entries
    at it are findings (verify once failed on the key spans read past the file)."""
    store = build_store(tmp_path / "s", orders(40))
    os.truncate(store / "commitlog" / FIRST, 1000)
    found = doc("verify", store, "--commitlog-file-size", "4096", code=1)["findings"]
    cut = [f for f in found if f["check_id"] == "index.no_record"]
    assert cut and all(f["physical_offset"] < 1000 for f in cut)
    assert all(f["detail"].endswith("runs past the end of " + FIRST) for f in cut)


def test_empty_checkpoint(store: Path) -> None:
    (store / "checkpoint").write_bytes(b"")
    line = error_line(cli("checkpoint", store))
    assert "checkpoint needs at least 24 bytes" in line and str(store / "checkpoint") in line
    assert "needs at least 24 bytes" in doc("info", store)["checkpoint"]["error"]


def test_truncated_checkpoint(store: Path) -> None:
    data = (store / "checkpoint").read_bytes()
    (store / "checkpoint").write_bytes(data[:30])
    report = doc("checkpoint", store)
    assert report["physic_msg_timestamp"] == int.from_bytes(data[:8], "big")
    assert report["file_size"] == 30 and report["confirm_phy_offset"] == 0  # read as zeros
    assert report["notes"][0].startswith("checkpoint is 30 bytes; fields past the end read as 0")


def test_empty_consume_queue_and_index_files(store: Path) -> None:
    queue = store / "consumequeue" / "TopicA" / "0"
    only = sorted(queue.iterdir())
    os.truncate(only[-1], 0)
    index = sorted((store / "index").iterdir())
    os.truncate(index[0], 0)
    info = doc("info", store)
    assert ("zero_length", str(only[-1].relative_to(store))) in problems(info, store)
    assert info["index_files"][0]["error"].startswith("index header needs 40 bytes")


def test_empty_config_file_falls_back_to_bak(store: Path) -> None:
    (store / "config" / "consumerOffset.json").write_bytes(b"")
    c = config(doc("info", store), "consumerOffset.json")
    assert (c["main_state"], c["source"], c["broker_starts"]) == ("empty", "bak", True)


# --- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "0000000000000000000x",  # not digits
        # digits that str.isdigit() takes and the broker does not
        "０００００００００００００００００００１",
        "9223372036854775807",  # a Java long, but not the 20 digits the broker writes
        "99999999999999999999",  # 20 digits past a Java long
        "09223372036854775807",  # a file there would end past the largest offset
        "0000000000000000\x1b[2J",  # an escape sequence
    ],
)
def test_bad_commitlog_names_are_layout_problems(store: Path, name: str) -> None:
    os.rename(store / "commitlog" / SECOND, store / "commitlog" / name)
    info = doc("info", store)
    assert ("bad_name", f"commitlog/{name}") in problems(info, store)
    assert info["families"][0]["file_count"] == 1
    assert all(p["broker_fails_to_load"] for p in info["problems"] if p["kind"] == "bad_name")
    assert doc("recover", store, code=1)["broker_starts"] is False
    table = cli("info", store, "--format", "table")
    assert table.exit_code == 0 and "\x1b" not in table.stdout


def test_overlapping_and_missing_commitlog_files(store: Path) -> None:
    shutil.copy(store / "commitlog" / FIRST, store / "commitlog" / "00000000000000000100")
    info = doc("info", store)
    assert ("overlap", "commitlog/00000000000000000100") in problems(info, store)
    (store / "commitlog" / "00000000000000000100").unlink()
    os.rename(store / "commitlog" / SECOND, store / "commitlog" / "00000000000000196608")
    info = doc("info", store)
    assert ("gap", "commitlog") in problems(info, store)
    assert info["families"][0]["gaps"] == [[65536, 196608]]


def test_index_file_not_named_by_17_digits(store: Path) -> None:
    first = sorted((store / "index").iterdir())[0]
    os.rename(first, first.with_name("2026010100000000"))
    info = doc("info", store)
    assert ("bad_name", "index/2026010100000000") in problems(info, store)
    assert len(info["index_files"]) == 1


def test_queue_directory_names(store: Path) -> None:
    base = store / "consumequeue" / "TopicA"
    os.rename(base / "3", base / "x3")  # not an int: the broker skips it, and so do we
    # Integer.parseInt takes every Unicode digit, but the queue is then read from ".../2".
    os.rename(base / "2", base / "２")
    info = doc("info", store)
    topic = next(t for t in info["topics"] if t["topic"] == "TopicA")
    assert [q["queue_id"] for q in topic["queues"]] == [0, 1, 2]
    assert topic["queues"][2]["file_count"] == 0
    assert ("queue_name", "consumequeue/TopicA/２") in problems(info, store)
    # The restart reads queues 2 and 3 from directories that are not there: their messages
    # are left without a unit, a loss (exit 1), and the applied store restarts as a no-op.
    report = doc("recover", store, "--apply-to", store.parent / "out", code=1)
    assert report["verdict"] == "loses_data" and report["lost_messages"]["count"] > 0
    lost = {(m["topic"], m["queue_id"]) for m in report["lost_messages"]["messages"]}
    assert lost == {("TopicA", 2), ("TopicA", 3)}
    assert report["apply"]["verification_noop"] is True


# --- not a file where a file should be ---------------------------------------------------------


def test_directory_where_files_should_be(store: Path) -> None:
    (store / "commitlog" / "00000000000000131072").mkdir()
    (store / "checkpoint").unlink()
    (store / "checkpoint").mkdir()
    (store / "config" / "topics.json").unlink()
    (store / "config" / "topics.json").mkdir()
    info = doc("info", store)
    found = problems(info, store)
    assert ("directory_entry", "commitlog/00000000000000131072") in found
    assert ("not_regular", "checkpoint") in found
    assert "is a directory" in info["checkpoint"]["error"]
    assert config(info, "topics.json")["main_state"] == "unreadable"
    assert "is a directory" in error_line(cli("checkpoint", store))


def test_fifos_never_block(store: Path) -> None:
    for rel in ("config/consumerOffset.json", "config/consumerOffset.json.bak", "abort"):
        (store / rel).unlink(missing_ok=True)
        os.mkfifo(store / rel)
    (store / "checkpoint").unlink()
    os.mkfifo(store / "checkpoint")
    os.rename(store / "commitlog" / SECOND, store / "commitlog" / "moved")
    os.mkfifo(store / "commitlog" / SECOND)
    info = doc("info", store)
    c = config(info, "consumerOffset.json")
    assert (c["main_state"], c["bak_state"], c["broker_starts"]) == (
        "unreadable",
        "unreadable",
        False,
    )
    assert "is a FIFO" in c["main_error"]
    assert ("not_regular", f"commitlog/{SECOND}") in problems(info, store)
    assert info["shutdown"]["clean"] is False  # abort exists; what it holds is not read
    assert "is a FIFO" in error_line(cli("checkpoint", store))
    assert cli("offsets", store, "--format", "json").exit_code == 0
    assert cli("recover", store, "--format", "json").exit_code == 1


def test_device_where_a_file_should_be(store: Path) -> None:
    target = store / "config" / "topics.json"
    target.unlink()
    try:
        os.mknod(target, 0o600 | 0o020000, os.makedev(1, 5))  # a character device: /dev/zero
    except PermissionError:
        pytest.skip("mknod needs privileges")
    c = config(doc("info", store), "topics.json")
    assert c["main_state"] == "unreadable" and "character device" in c["main_error"]


def test_symlinks_are_never_followed(store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    shutil.copy(store / "commitlog" / SECOND, outside)
    (store / "commitlog" / SECOND).unlink()
    (store / "commitlog" / SECOND).symlink_to(outside)
    (store / "config" / "topics.json").unlink()
    (store / "config" / "topics.json").symlink_to("/dev/zero")
    (store / "checkpoint").unlink()
    (store / "checkpoint").symlink_to(store / "no-such-file")
    info = doc("info", store)
    found = problems(info, store)
    assert ("symlink", f"commitlog/{SECOND}") in found
    assert ("not_regular", "checkpoint") in found
    assert info["families"][0]["file_count"] == 1
    c = config(info, "topics.json")
    assert c["main_state"] == "unreadable" and "not followed" in c["main_error"]
    assert "symbolic link" in error_line(cli("checkpoint", store))


def test_a_looping_index_symlink_costs_only_the_index(store: Path) -> None:
    (store / "index" / "20260101000009999").symlink_to("20260101000009999")
    info = doc("info", store)
    assert ("symlink", "index/20260101000009999") in problems(info, store)
    messages = cli("messages", store, "--format", "jsonl")
    assert messages.exit_code == 0 and messages.stdout.count("\n") == 300
    assert len(doc("index", store)["files"]) == 2


# --- config JSON ----------------------------------------------------------------------------------


def test_truncated_json(store: Path) -> None:
    path = store / "config" / "consumerOffset.json"
    path.write_bytes(path.read_bytes()[:40])
    c = config(doc("info", store), "consumerOffset.json")
    assert (c["main_state"], c["source"]) == ("invalid", "bak")
    assert c["main_error"].startswith(f"{path}, byte ")


def test_deeply_nested_json(store: Path) -> None:
    (store / "config" / "topics.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    c = config(doc("info", store), "topics.json")
    assert c["main_state"] == "invalid" and "nesting deeper than 512 levels" in c["main_error"]


def test_huge_json_is_not_read(store: Path) -> None:
    path = store / "config" / "consumerOffset.json.bak"
    with open(path, "ab") as fh:
        fh.truncate(5 * GIB)  # sparse: costs no disk
    started = time.monotonic()
    c = config(doc("info", store), "consumerOffset.json")
    assert time.monotonic() - started < 20
    assert (c["main_state"], c["bak_state"], c["source"]) == ("ok", "too_large", "main")
    assert f"more than the {MAX_CONFIG_BYTES}" in c["bak_error"]


def test_json_not_utf8_and_not_fastjson(store: Path) -> None:
    cfg = store / "config"
    (cfg / "topics.json").write_bytes(b'{"topicConfigTable":{"T\xff":{"topicName":"T\xff"}}}')
    (cfg / "delayOffset.json").write_bytes(b'{"offsetTable":{1:1}} trailing')
    info = doc("info", store)
    topics = config(info, "topics.json")
    assert topics["main_state"] == "ok" and topics["entries"] == 1  # decoded like Java: U+FFFD
    delay = config(info, "delayOffset.json")
    assert delay["main_state"] == "invalid" and "trailing data" in delay["main_error"]


def test_bak_newer_or_older_never_decides(store: Path) -> None:
    """ConfigManager.load reads the main file whenever it loads, whatever the mtimes."""
    cfg = store / "config"
    os.utime(cfg / "consumerOffset.json.bak", (2_000_000_000, 2_000_000_000))  # .bak newer
    c = config(doc("info", store), "consumerOffset.json")
    assert (c["source"], c["bak_differs"]) == ("main", True)
    (cfg / "consumerOffset.json").write_bytes(b"{broken")
    os.utime(cfg / "consumerOffset.json.bak", (1_000_000, 1_000_000))  # .bak older
    c = config(doc("info", store), "consumerOffset.json")
    assert (c["main_state"], c["source"], c["broker_starts"]) == ("invalid", "bak", True)
    (cfg / "consumerOffset.json").unlink()
    (cfg / "consumerOffset.json.bak").write_bytes(b"{broken")
    c = config(doc("info", store), "consumerOffset.json")
    assert (c["source"], c["broker_starts"]) == ("none", False)


# --- sparse files -------------------------------------------------------------------------------


def test_sparse_64_gib_consume_queue_file(store: Path) -> None:
    """Extended by 64 GiB of holes: the commands read its data, never its holes."""
    path = sorted((store / "consumequeue" / "TopicA" / "0").iterdir())[-1]
    with open(path, "ab") as fh:
        fh.truncate(os.path.getsize(path) + 64 * GIB)
    for command in ("info", "offsets"):
        code, stderr, seconds, rss = measured(command, store)
        assert code == 0, stderr
        assert seconds < 30 and rss < GIB // 2, (command, seconds, rss)
    code, stderr, seconds, rss = measured("consumequeue", store, "TopicA", "0", "--all")
    assert code == 0 and seconds < 30 and rss < GIB // 2, (stderr, seconds, rss)
    code, stderr, seconds, rss = measured("verify", store)  # its file size is a finding
    assert code == 1 and seconds < 30 and rss < GIB // 2, (stderr, seconds, rss)
    out = store.parent / "export"
    code, stderr, _, _ = measured("export", store, out, "--engine", "arrow", "--jobs", "1")
    assert code == 0, stderr  # the file's checksum in the manifest skips its holes


def test_sparse_100_gib_commitlog_file_and_5_gib_abort(store: Path) -> None:
    with open(store / "commitlog" / SECOND, "ab") as fh:
        fh.truncate(100 * GIB)
    with open(store / "abort", "wb") as fh:
        fh.truncate(5 * GIB)
    # A 100 GiB commitlog file is not the configured size: the broker refuses to start (recover
    # exits 1) and verify reports it (exit 1); listing and info read its data only (exit 0).
    for command, expected in (("recover", 1), ("messages", 0), ("info", 0), ("verify", 1)):
        code, stderr, seconds, rss = measured(command, store)
        assert code == expected, (command, code, stderr)
        assert seconds < 30 and rss < GIB // 2, (command, seconds, rss)
    out = store.parent / "export"
    code, stderr, _, _ = measured("export", store, out, "--engine", "arrow", "--jobs", "1")
    assert code == 0, stderr
    code, stderr, seconds, rss = measured("salvage", store, "--out", store.parent / "salvaged")
    assert code == 0 and seconds < 30 and rss < GIB // 2, (stderr, seconds, rss)
    info = doc("info", store)  # abort: what a broker never writes, and only 64 bytes of it read
    assert info["shutdown"]["clean"] is False and info["shutdown"]["abort_content"] is None


# --- hostile values -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["²", "１２", "9" * 5000, "a\nb", "1e400", " "])
def test_bad_time_arguments_are_one_line(store: Path, text: str) -> None:
    line = error_line(cli("messages", store, "--since", text))
    assert line.startswith("rmqinspect: error: --since: ")
    assert "rmqinspect: error: --reference" in error_line(
        cli("decode-id", "0A01020300002A9F000000000000792E", "--reference", text)
    )
    if text.strip():  # an empty bound of --time is an open one
        line = error_line(cli("lookup", store, "--time", f"{text}..", "--topic", "TopicA"))
        assert "--time" in line


def test_a_newline_in_an_argument_stays_on_one_line(store: Path) -> None:
    result = cli("consumequeue", store, "Topic\nA", "0")
    assert result.exit_code == 1  # a topic the store does not know: not found
    assert (
        result.stderr
        == "rmqinspect: no such topic: 'Topic\\x0aA' (no consume queue, not in topics.json)\n"
    )


def test_store_settings_outside_the_brokers_ints(store: Path) -> None:
    line = error_line(run("info", store, "--index-entries", "2147483647"))
    assert "--index-entries" in line
    line = error_line(run("recover", store, "--index-slots", "536870000", "--index-entries", "999"))
    assert "more than a Java int" in line


def test_escape_sequences_from_the_store_are_escaped_in_tables(
    store: Path, wide_console: None
) -> None:
    base = store / "consumequeue"
    os.rename(base / "TopicC", base / "Topic\x1b[2J\x1b[31mC")
    table = cli("info", store, "--format", "table")
    assert table.exit_code == 0
    assert "\x1b" not in table.stdout and "Topic\\x1b[2J\\x1b[31mC" in table.stdout
    info = doc("info", store)  # JSON keeps the exact name
    assert "Topic\x1b[2J\x1b[31mC" in {t["topic"] for t in info["topics"]}


def test_unexpected_errors_are_one_line_naming_the_command(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rmqinspect.cli.info

    def broken(*args: object) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(rmqinspect.cli.info, "build_inventory", broken)
    line = error_line(cli("info", store))
    assert line.startswith("rmqinspect: error: info: unexpected RuntimeError: boom\\x0asecond")
    monkeypatch.setenv("RMQINSPECT_DEBUG", "1")
    result = cli("info", store)
    assert isinstance(result.exception, RuntimeError)  # the traceback, for a bug report


def test_index_header_counts_at_their_extremes(store: Path) -> None:
    last = sorted((store / "index").iterdir())[-1]
    data = bytearray(last.read_bytes())
    data[32:40] = b"\xff" * 8  # hashSlotCount and indexCount: -1
    last.write_bytes(bytes(data))
    assert cli("index", store, "--entries", "--format", "json").exit_code == 0
    # Index files are not part of the restart's verdict: nothing is lost, and the key is
    # still found through the chains the header's counts do not bound.
    report = doc("recover", store, "--apply-to", store.parent / "out")
    assert report["verdict"] == "no_loss" and report["apply"]["verification_noop"] is True
    found = doc("lookup", store, "--key", "KA-0", "--topic", "TopicA", "--as-recovered")
    assert [(m["keys"][0], m["queue_offset"], m["via"]) for m in found["messages"]] == [
        ("KA-0", 0, "index")
    ]


# Run in a child: `info` on a readable store and on a missing one (importing, while the code is
# readable, every module either path needs), then, as root, become nobody for good, and `info` on
# the unreadable store. Nobody never imports from the clone, which may be unreadable to it.
_AS_ANOTHER_READER = """
import json, os, pwd, sys
from tests.cli_helpers import run
readable, unreadable = sys.argv[1:3]
assert run("info", readable).exit_code == 0
assert run("info", readable + "-missing").exit_code == 2
if os.geteuid() == 0:
    nobody = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setresgid(nobody.pw_gid, nobody.pw_gid, nobody.pw_gid)
    os.setresuid(nobody.pw_uid, nobody.pw_uid, nobody.pw_uid)
os.stat(unreadable)  # its directory is reachable: what fails is listing the store itself
assert not os.access(unreadable, os.R_OK), "the reader can still list the store"
result = run("info", unreadable)
print(json.dumps([result.exit_code, result.stderr]))
"""


def test_an_unreadable_store_is_one_line(store: Path) -> None:
    """A store directory its reader may not list. Permissions mean nothing to root, so root's
    child drops to nobody once it has imported what it runs; any other user meets its own
    mode-000 directory. No skip: wherever the clone is, and whoever may read it, this runs."""
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        home.chmod(0o711)  # nobody may pass through it, not list it
        unreadable = home / "store"
        shutil.copytree(store, unreadable)
        unreadable.chmod(0o000)
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _AS_ANOTHER_READER, str(store), str(unreadable)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])},
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            unreadable.chmod(0o700)
    assert proc.returncode == 0, proc.stderr
    code, stderr = json.loads(proc.stdout)
    assert code == 2, stderr
    assert stderr == f"rmqinspect: error: {unreadable}: cannot list the store: Permission denied\n"


def test_apply_to_a_store_the_broker_refuses_still_reports(store: Path) -> None:
    os.truncate(store / "commitlog" / SECOND, 0)
    out = store.parent / "out"
    result = cli("recover", store, "--apply-to", out, "--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["broker_starts"] is False and report["apply"] is None
    assert "refuse to start" in result.stderr and not out.exists()


def test_escape_sequences_in_a_record_topic(store: Path, wide_console: None) -> None:
    path = store / "commitlog" / FIRST
    data = bytearray(path.read_bytes())
    at = data.find(b"TopicA")
    data[at : at + 6] = b"T\x1b[2JA"  # same length: the record stays whole (no CRC covers it)
    path.write_bytes(bytes(data))
    table = cli("messages", store, "--limit", "5", "--format", "table")
    assert table.exit_code == 0 and "\x1b" not in table.stdout
    assert "T\\x1b[2JA" in table.stdout
    rows = [
        json.loads(line)
        for line in cli("messages", store, "--format", "jsonl").stdout.split("\n")
        if line
    ]
    assert "T\x1b[2JA" in {r.get("topic") for r in rows}


def test_apply_to_where_a_directory_holds_a_queue_file_name(tmp_path: Path) -> None:
    """5.x's file listing skips a directory among a queue's files, so the restart recreates the
    file; in the copied store the directory is still there: one line naming it, no traceback."""
    root = tmp_path / "store"
    shutil.copytree(FIXTURES / "stores" / "crash53", root)
    path = root / "consumequeue" / "%RETRY%groupX" / "0" / "00000000000000000000"
    path.unlink()
    path.mkdir()
    result = cli("recover", root, "--apply-to", tmp_path / "after")
    assert result.exit_code == 2
    line = error_line(result)
    assert "%RETRY%groupX/0/00000000000000000000" in line
    assert "something else of that name" in line
    assert path.is_dir() and not any(path.iterdir())  # the store is untouched


# --- containment: store content never names a path, OUT never reaches the store --------------


@contextlib.contextmanager
def bind_mount(source: Path, target: Path) -> Iterator[Path]:
    """``target`` as a second name of the directory ``source`` (``mount --bind``): the same
    device and inode under another path, which no comparison of resolved names sees."""
    target.mkdir(parents=True)
    proc = subprocess.run(
        ["mount", "--bind", str(source), str(target)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"mount --bind needs root and a mount namespace: {proc.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=True)


def record_listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The real path of every directory listed and every file opened from now on."""
    seen: list[str] = []
    real_scandir, real_listdir, real_open = os.scandir, os.listdir, os.open

    def note(path: Any) -> None:
        if not isinstance(path, int):  # a descriptor: its directory was noted when opened
            seen.append(os.path.realpath(path))

    def scandir(path: Any = ".") -> Any:
        note(path)
        return real_scandir(path)

    def listdir(path: Any = ".") -> Any:
        note(path)
        return real_listdir(path)

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        note(path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "open", os_open)
    return seen


def test_record_topics_never_become_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records whose topics leave ``consumequeue/`` when joined into a path (``../..``, an
    absolute path, NUL): no command reads or writes there. Bait queues wait at the paths the
    broker would build; --apply-to refuses with one line naming the first such record, before
    anything is created."""
    work = tmp_path / "work"
    absolute = tmp_path / "abs"
    store = escaping_store(work / "store", absolute)
    for bait in (work / "bait" / "0", tmp_path / "bait" / "0", absolute / "0"):
        bait.mkdir(parents=True)
        shutil.copy(store / "consumequeue" / "Orders" / "0" / FIRST, bait / FIRST)
    outs = tmp_path / "outs"
    outs.mkdir()
    before = tree_state(tmp_path)
    seen = record_listings(monkeypatch)
    expected = {
        ("messages",): 0,
        ("verify",): 0,
        ("recover",): 0,
        ("lookup", "--time", "..", "--topic", "../../bait"): 0,
        ("lookup", "--queue-offset", "../../bait:0:0"): 0,  # the dispatch's unit, from the tail
        ("consumequeue", "../../bait", "0"): 2,
        ("consumequeue", "a\0b", "0"): 2,
        ("recover", "--apply-to", outs / "after"): 2,
        ("salvage", "--out", outs / "salvaged"): 0,
        ("export", outs / "parquet", "--engine", "arrow", "--jobs", "1"): 0,
    }
    for args, code in expected.items():
        result = cli(args[0], store, *args[1:], "--format", "json")
        assert result.exit_code == code, (args, result.stderr)
        assert "Traceback" not in result.stderr and "unexpected" not in result.stderr, args
    monkeypatch.undo()
    warned = doc("recover", store)["warnings"]
    assert [w.split(",")[0] for w in warned] == [
        f"the restart dispatches into consume queue {t}/0" for t in escaping_topics(absolute)
    ]
    refused = cli("recover", store, "--apply-to", outs / "after")
    assert refused.stderr == (
        f"rmqinspect: error: {store}/commitlog/{FIRST}, byte 3380: the restart dispatches a "
        "record of topic '../../bait' into a consume queue outside the store (the topic is no "
        "plain file name): nothing applied\n"
    )
    assert not (outs / "after").exists()
    after = {k: v for k, v in tree_state(tmp_path).items() if not k.startswith("outs")}
    before = {k: v for k, v in before.items() if not k.startswith("outs")}
    assert after == before  # directories' mtimes included: nothing appeared, nothing moved
    allowed = [os.path.realpath(p) for p in (store, outs)]
    strays = {p for p in seen if not any(os.path.commonpath([a, p]) == a for a in allowed)}
    assert not {p for p in strays if "bait" in p or p.startswith(str(absolute))}, strays


@pytest.mark.parametrize("command", ["salvage", "export", "apply-to", "export-overwrite"])
def test_an_out_that_is_the_store_under_another_name_is_refused(
    store: Path, tmp_path: Path, command: str
) -> None:
    """The store bind-mounted elsewhere (and a subdirectory of it): OUT there, or below it, is
    the store; nothing is created or deleted in it."""
    with (
        bind_mount(store, tmp_path / "alias") as alias,
        bind_mount(store / "config", tmp_path / "config-alias") as config_alias,
    ):
        before = tree_state(store)
        for out in (alias, alias / "new", config_alias / "new"):
            args: tuple[str | Path, ...] = {
                "salvage": ("salvage", store, "--out", out),
                "export": ("export", store, out, "--engine", "arrow"),
                "apply-to": ("recover", store, "--apply-to", out),
                "export-overwrite": ("export", store, out, "--engine", "arrow", "--overwrite"),
            }[command]
            result = cli(*args)
            assert result.exit_code == 2, (out, result.stdout)
            assert "must be outside the inspected store" in error_line(result)
            assert tree_state(store) == before


def test_overwrite_never_deletes_what_no_export_wrote(store: Path, tmp_path: Path) -> None:
    """--overwrite replaces an earlier export only: OUT with no manifest, with something the
    manifest does not list, or with the store bind-mounted as one of the manifest's tables is
    refused and left as it was."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    line = error_line(cli("export", store, out, "--engine", "arrow", "--overwrite"))
    assert "no manifest" in line and (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    assert cli("export", store, out, "--engine", "arrow", "--tables", "findings").exit_code == 0
    (out / "notes.txt").write_text("mine")
    line = error_line(cli("export", store, out, "--engine", "arrow", "--overwrite"))
    assert "holds 'notes.txt', which no earlier rmqinspect output wrote" in line
    assert sorted(p.name for p in out.iterdir()) == ["_manifest.json", "findings", "notes.txt"]
    (out / "notes.txt").unlink()
    shutil.rmtree(out / "findings")
    before = tree_state(store)
    with bind_mount(store, out / "findings"):
        line = error_line(cli("export", store, out, "--engine", "arrow", "--overwrite"))
        assert "must not contain the inspected store" in line
        assert tree_state(store) == before
    again = cli("export", store, out, "--engine", "arrow", "--overwrite", "--tables", "messages")
    assert again.exit_code == 0, again.stderr
    assert sorted(p.name for p in out.iterdir()) == ["_manifest.json", "messages"]


# --- a file that shrinks while it is read ----------------------------------------------------

COMMITLOG = f"commitlog/{FIRST}"  # not the last file: mapped, even while the lock is held
INDEX = "index/20260101000000001"
SHRINKS = {
    "messages": (COMMITLOG, "messages"),
    "verify": (COMMITLOG, "verify"),
    "verify-jobs": (COMMITLOG, "verify", "--jobs", "2"),  # faults in a forked worker
    "recover": (COMMITLOG, "recover"),
    "consumequeue": (COMMITLOG, "consumequeue", "TopicA", "0"),
    "consumequeue-file": ("consumequeue/TopicA/0/" + FIRST, "consumequeue", "TopicA", "0"),
    "index": (INDEX, "index", "--entries"),
    "verify-index": (INDEX, "verify"),
    "lookup-key": (INDEX, "lookup", "--key", "KA-0", "--topic", "TopicA"),
}


def shrinking(store: Path, case: str, *hook: str) -> tuple[int, str, str]:
    """``rmqinspect`` in a child whose file of ``case`` is truncated to nothing as soon as it
    is mapped (tests/shrink_hook.py): its exit code (negative: killed by that signal), the
    shrunk file and the one error line."""
    file, *args = SHRINKS[case]
    argv = [sys.executable, "-m", "tests.shrink_hook", *hook, str(store / file)]
    argv += [*args[:1], str(store), *args[1:], *SMALL_OPTS, "--format", "json"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    errors = [ln for ln in proc.stderr.splitlines() if not ln.startswith("rmqinspect: warning")]
    assert len(errors) <= 1, proc.stderr
    return proc.returncode, str(store / file), "".join(errors)


@pytest.mark.skipif(not mapguard.compiled(), reason="the _mapguard C extension is not built")
@pytest.mark.parametrize("locked", [False, True], ids=["offline", "lock-held"])
@pytest.mark.parametrize("case", list(SHRINKS))
def test_a_file_truncated_while_mapped_is_one_line(store: Path, case: str, locked: bool) -> None:
    """A copy in progress or a second process truncates a file rmqinspect has mapped: reading
    past the new end used to kill the process with SIGBUS and no message (rc -7)."""
    if case == "consumequeue-file":
        # A file of a page or less is read whole, never mapped, and cannot fault: the queue
        # file as a broker preallocates it (sparse).
        os.truncate(store / SHRINKS[case][0], 6_000_000)
    with open(store / "lock", "r+b") as lock:
        if locked:
            fcntl.lockf(lock, fcntl.LOCK_EX)  # as a running broker holds it
        code, file, line = shrinking(store, case)
    assert code == 2, (code, line)
    assert line.startswith(f"rmqinspect: error: {file}, byte ")
    assert line.endswith(mapguard.SHRANK)


def test_without_the_guard_a_file_found_shorter_is_one_line(store: Path) -> None:
    """Without the C extension a file is measured again each time its map is read: one that
    shrank before that read is the same error (one that shrinks during a read still faults)."""
    code, file, line = shrinking(store, "messages", "--unguarded")
    assert (code, line) == (2, f"rmqinspect: error: {file}, byte 0: {mapguard.SHRANK}")


# --- names and config text that UTF-8 cannot carry ---------------------------------------------
# A name's undecodable byte reaches Python as a lone surrogate (surrogateescape), and so does a
# "\ud800" escape in config JSON. Every output shows 0xff as the text \xff and another lone
# surrogate as \ud800: JSON stays UTF-8 and JSON, and a table shows the same text.


def utf8_out(result: Result, code: int) -> str:
    """The stdout of a run that exited ``code`` without an internal error, decoded strictly."""
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert "unexpected" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    return result.stdout_bytes.decode("utf-8")


def utf8_json(*args: str | Path, code: int = 0) -> Any:
    """``-F json`` output as strict UTF-8 JSON whose strings are all UTF-8 (no ``\\udcff``
    escape either: a lone surrogate is refused by most JSON parsers)."""
    parsed = json.loads(utf8_out(cli(*args, "--format", "json"), code))
    json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    return parsed


def utf8_jsonl(*args: str | Path, code: int = 0) -> list[Any]:
    text = utf8_out(cli(*args, "--format", "jsonl"), code)
    rows = [json.loads(line) for line in text.splitlines()]
    json.dumps(rows, ensure_ascii=False).encode("utf-8")
    return rows


def utf8_table(*args: str | Path, code: int = 0) -> str:
    return utf8_out(cli(*args, "--format", "table"), code)


def odd_path(parent: Path, name: bytes) -> Path:
    """``parent/name`` for a name that is not UTF-8 (as Python lists it: surrogateescape)."""
    return Path(os.fsdecode(os.fsencode(parent) + b"/" + name))


def parquet_rows(table: Path) -> list[dict[str, Any]]:
    """The rows of an exported table's files, each opened by its name's bytes (pyarrow takes a
    path only as UTF-8 text)."""
    rows: list[dict[str, Any]] = []
    for path in sorted(table.glob("*.parquet")):
        with pa.OSFile(os.fsencode(path)) as f:
            rows += pq.read_table(f).to_pylist()
    return rows


def test_a_file_name_that_is_not_utf8(store: Path, wide_console: None) -> None:
    os.close(os.open(odd_path(store / "commitlog", b"0000\xff"), os.O_CREAT | os.O_WRONLY))
    name = "commitlog/0000\\xff"  # the text: a backslash, x, f, f
    refusal = f"the broker refuses to start: {store}/{name}: commitlog file name is not a 20-digit"
    info = utf8_json("info", store)
    assert ("bad_name", name) in problems(info, store)
    assert ("bad_name", name) in problems(utf8_jsonl("info", store)[0], store)
    assert f"{store}/{name}" in utf8_table("info", store)
    assert utf8_json("offsets", store)["restart"]["refusal"].startswith(refusal)
    assert utf8_json("recover", store, code=1)["verdict_reason"].startswith(refusal)
    out = store.parent / "after"
    assert utf8_json("recover", store, "--apply-to", out, code=1)["apply"] is None
    assert refusal in utf8_table("recover", store, code=1)
    found = utf8_json("verify", store, code=1)["findings"]
    assert {f["file"] for f in found if f["check_id"] == "commitlog.file_name"} == {name}
    assert {r.get("file") for r in utf8_jsonl("verify", store, code=1)} >= {name}
    assert name in utf8_table("verify", store, code=1)
    utf8_json("export", store, store.parent / "export", "--engine", "arrow", "--jobs", "1")
    assert name in {f["file"] for f in parquet_rows(store.parent / "export" / "findings")}


def test_a_store_directory_name_that_is_not_utf8(store: Path, wide_console: None) -> None:
    odd = odd_path(store.parent, b"store\xff")
    os.rename(store, odd)
    shown = f"{store.parent}/store\\xff"
    assert utf8_json("info", odd)["store"] == shown
    assert utf8_jsonl("info", odd)[0]["store"] == shown
    assert shown in utf8_table("info", odd)
    assert utf8_json("checkpoint", odd)["path"] == f"{shown}/checkpoint"
    assert shown in utf8_table("checkpoint", odd)
    index = utf8_json("index", odd, "--entries")
    assert {f["file"].rpartition("/")[0] for f in index["files"]} == {"index"}  # relative
    assert utf8_json("recover", odd)["store"] == shown
    assert utf8_json("verify", odd)["summary"]["store"] == shown
    assert utf8_jsonl("verify", odd)[-1]["summary"]["store"] == shown
    assert utf8_json("salvage", odd, "--out", store.parent / "salvaged")["store"] == shown
    report = (store.parent / "salvaged" / "report.json").read_bytes().decode("utf-8")
    assert json.loads(report)["store"] == shown
    exported = utf8_json("export", odd, store.parent / "export", "--engine", "arrow")
    assert exported["store"] == shown
    manifest = (store.parent / "export" / "_manifest.json").read_bytes().decode("utf-8")
    assert json.loads(manifest)["store"] == shown


def test_lone_surrogate_escapes_in_config_json(store: Path, wide_console: None) -> None:
    """fastjson keeps a "\\ud800" escape as a lone surrogate, as a Java String does: a key of
    topics.json and of consumerOffset.json, and a value of topics.json here."""
    topics = store / "config" / "topics.json"
    text = topics.read_bytes().replace(b'"TopicA":{', b'"Topic\\ud800A":{', 1)
    topics.write_bytes(text.replace(b'"topicName":"TopicA"', b'"topicName":"A\\ud800"', 1))
    offsets = store / "config" / "consumerOffset.json"
    offsets.write_bytes(offsets.read_bytes().replace(b'"TopicA@groupX"', b'"Topic\\ud800A@groupX"'))
    topic = "Topic\\ud800A"
    note = f'topicConfigTable."{topic}": topicName "A\\ud800" differs from its key'
    assert note in config(utf8_json("info", store), "topics.json")["problems"]
    assert note in config(utf8_jsonl("info", store)[0], "topics.json")["problems"]
    assert note in utf8_table("info", store)
    rows = utf8_json("offsets", store)["offsets"]
    assert {r["queue_id"] for r in rows if r["topic"] == topic} == {0, 1, 2, 3}
    assert topic in {r["topic"] for r in utf8_jsonl("offsets", store)}
    assert topic in utf8_table("offsets", store)
    found = utf8_json("verify", store)["findings"]
    assert {f["topic"] for f in found if f["check_id"] == "offsets.no_queue"} == {topic}
    assert f"{topic}/0 @19" in utf8_table("verify", store)
    utf8_json("export", store, store.parent / "export", "--engine", "arrow", "--jobs", "1")
    exported = parquet_rows(store.parent / "export" / "consumer_offsets")
    assert {r["queue_id"] for r in exported if r["topic"] == topic} == {0, 1, 2, 3}


def test_a_queue_directory_name_that_is_not_utf8(store: Path, wide_console: None) -> None:
    base = store / "consumequeue"
    os.rename(base / "TopicC", odd_path(base, b"Topic\xffC"))
    topic = "Topic\\xffC"
    assert topic in {t["topic"] for t in utf8_json("info", store)["topics"]}
    assert topic in utf8_table("info", store)
    queues = utf8_json("recover", store, code=1)["consume_queues"]
    assert [q["queue_id"] for q in queues if q["topic"] == topic] == [0, 1, 2, 3]
    cq = utf8_json("consumequeue", store, os.fsdecode(b"Topic\xffC"), "0", "--all")  # argv
    assert cq["queue"]["topic"] == topic and len(cq["units"]) == 18
    files = {f["file"] for f in utf8_json("verify", store, code=1)["findings"]}
    assert any(f.startswith(f"consumequeue/{topic}/") for f in files)
    utf8_json("export", store, store.parent / "export", "--engine", "arrow", "--jobs", "1")
    units = parquet_rows(store.parent / "export" / "consume_queue")
    assert {u["file"] for u in units if u["topic"] == topic} == {
        f"consumequeue/{topic}/{q}/{FIRST}" for q in range(4)
    }


def test_output_directories_named_by_bytes_that_are_not_utf8(store: Path) -> None:
    """OUT may be any name the filesystem takes: the files land there, reports show it escaped."""
    parent = odd_path(store.parent, b"out\xff")
    parent.mkdir()
    shown = f"{store.parent}/out\\xff"
    applied = utf8_json("recover", store, "--apply-to", parent / "after")["apply"]
    assert applied["directory"] == f"{shown}/after"
    assert (parent / "after" / "commitlog" / FIRST).is_file()
    assert utf8_json("salvage", store, "--out", parent / "salvaged")["out"] == f"{shown}/salvaged"
    report = (parent / "salvaged" / "report.json").read_bytes().decode("utf-8")
    assert json.loads(report)["out"] == f"{shown}/salvaged"
    utf8_json("export", store, parent / "export", "--engine", "arrow", "--jobs", "1")
    assert (parent / "export" / "_manifest.json").is_file()
    assert len(parquet_rows(parent / "export" / "consume_queue")) == 294


def test_a_huge_config_string_is_capped_in_a_table(store: Path, wide_console: None) -> None:
    """A table shows at most MAX_CELL_CHARS of one value and says how much it left out (a
    wrapped 0.75 MiB group name printed 38 MB in 16 s); JSON keeps the whole value."""
    group = "ab " * (1 << 18)
    path = store / "config" / "consumerOffset.json"
    path.write_text(path.read_text("utf-8").replace("@groupY", "@" + group), "utf-8")
    table = cli("offsets", store, "--format", "table")
    assert table.exit_code == 0, table.stderr
    assert len(table.stdout) < 4 * 8 * MAX_CELL_CHARS  # four capped cells, wrapped, bordered
    hidden = len(group) - MAX_CELL_CHARS
    squeezed = "".join(ch for ch in table.stdout if ch not in " │\n")
    assert squeezed.count(f"…({len(group):,}chars;{hidden:,}notshown)") == 4
    assert group in {row["group"] for row in doc("offsets", store)["offsets"]}


def test_a_region_of_copies_of_one_record_is_judged_once(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commitlog filled with copies of its first record (each stale: its queue serves the
    original): whether each copy is a stale copy of a served record is one look at the queue
    per distinct queue offset, not one per record (32 MiB of copies took 10x the valid time)."""
    from rmqinspect.analysis.recovery.served import ServedCheck

    path = store / "commitlog" / FIRST
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[:4], "big")
    copies = len(data) // size
    data[: copies * size] = data[:size] * copies
    path.write_bytes(bytes(data))
    looks = 0
    served_at = ServedCheck._served_at

    def counting(self: ServedCheck, *args: Any) -> list[int]:
        nonlocal looks
        looks += 1
        return served_at(self, *args)

    monkeypatch.setattr(ServedCheck, "_served_at", counting)
    report = doc("recover", store, code=1)
    assert copies > 200 and looks < 20
    lost = report["lost_messages"]["messages"]
    assert lost and all(
        m["file"] == f"commitlog/{SECOND}" for m in lost
    )  # no copy is a lost message


def test_verify_of_a_region_of_copies_builds_only_what_it_lists(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commitlog filled with copies of its first record: every consume-queue unit and
    index entry then points into the middle of a copy, and every copy is a finding. The units
    are judged by the magic they reach, not decoded one by one, and past the listing limit a
    finding is only counted (32 MiB of copies took 5x the valid time)."""
    from rmqinspect.analysis import units
    from rmqinspect.analysis.verify import finding

    path = store / "commitlog" / FIRST
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[:4], "big")
    copies = len(data) // size
    data[: copies * size] = data[:size] * copies
    path.write_bytes(bytes(data))
    # List 10 per check and file (not 1000): the fixture's 64 KiB files hold a few hundred.
    init = finding.Findings.__init__
    monkeypatch.setattr(init, "__defaults__", (10, *(init.__defaults__ or ())[1:]))
    judged = built = 0
    judge, finding_class = units._judge, finding.Finding

    def counting_judge(*args: Any, **kwargs: Any) -> Any:
        nonlocal judged
        judged += 1
        return judge(*args, **kwargs)

    def counting_finding(*args: Any) -> Any:
        nonlocal built
        built += 1
        return finding_class(*args)

    monkeypatch.setattr(units, "_judge", counting_judge)
    monkeypatch.setattr(finding, "Finding", counting_finding)
    report = doc("verify", store, "-j", "1", code=1)
    by_check = report["summary"]["findings_by_check"]
    assert by_check["commitlog.physical_offset"] == copies - 1
    assert by_check["consumequeue.no_record"] > 100
    assert judged < 20  # units that reach no message magic are not decoded again
    assert built == len(report["findings"]) == report["summary"]["findings_listed"]
    assert report["summary"]["findings"] > 2 * built  # the rest only counted


# --- costs that grow with the input -------------------------------------------------------------


@pytest.fixture
def queue_bytes_read(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Bytes copied out of consume-queue files through :meth:`MappedFiles.read` (the queue
    model's reads), counted while a test runs commands in this process."""
    from rmqinspect.store.files import MappedFiles

    counted = {"bytes": 0}
    original = MappedFiles.read

    def read(self: MappedFiles, file: StoreFile, start: int, length: int) -> bytes:
        data = original(self, file, start, length)
        if "consumequeue" in file.path.parts:
            counted["bytes"] += len(data)
        return data

    monkeypatch.setattr(MappedFiles, "read", read)
    return counted


def test_queues_in_preallocated_files_cost_their_units(
    tmp_path: Path, queue_bytes_read: dict[str, int]
) -> None:
    """The broker preallocates each queue file (6,000,000 bytes, sparse). Loading a queue
    stops at its first zero unit, which lies where the file's data ends: a store of many
    one-message queues costs their units, not a copy of each file's holes (which in thousands
    of queues filled memory with zero pages and ran for minutes)."""
    queues = 12
    layout = replace(SMALL_LAYOUT, cq_file_size=6_000_000)
    specs = [MessageSpec(topic=f"T{i}", body=b"x") for i in range(queues)]
    root = build_store(tmp_path / "store", specs, layout)
    assert os.path.getsize(root / "consumequeue" / "T0" / "0" / FIRST) == 6_000_000
    for args in (("verify", root), ("recover", root), ("offsets", root)):
        queue_bytes_read["bytes"] = 0
        result = cli(*args, "--format", "json")
        assert result.exit_code == 0, result.stderr
        # up to a file-system block per queue and step (the data's extent), never a 1.25 MiB
        # chunk of zeros
        assert queue_bytes_read["bytes"] <= queues * 64 * 1024, (args, queue_bytes_read)


def test_small_queue_files_are_opened_once_per_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store of many small queues: each queue file is read once (one open, one ``pread``) and
    its bytes kept, however many steps read it; mapped, with only 32 maps open at once, each was
    mapped and unmapped several times (about 1 ms a queue with 100,000 queues)."""
    from rmqinspect.store.files import MappedFiles

    queues = 40  # more than MappedFiles keeps mapped
    specs = [MessageSpec(topic=f"T{i}", body=b"x") for i in range(queues)]
    root = build_store(tmp_path / "store", specs, SMALL_LAYOUT)
    opened: list[Path] = []
    original = MappedFiles._open

    def counted(self: MappedFiles, path: Path) -> int:
        opened.append(path)
        return original(self, path)

    monkeypatch.setattr(MappedFiles, "_open", counted)
    for args in (("verify", root, "--jobs", "1"), ("recover", root), ("offsets", root)):
        opened.clear()
        result = cli(*args, "--format", "json")
        assert result.exit_code == 0, result.stderr
        queue_files = Counter(p for p in opened if "consumequeue" in p.parts)
        assert len(queue_files) == queues, args
        assert max(queue_files.values()) == 1, (args, queue_files.most_common(3))
