"""``export`` with the arrow engine (no JVM): the tables against the other commands' JSON, the
manifest, the output-directory rules, hostile topic names, DuckDB, and a missing Java."""

from __future__ import annotations

import functools
import json
import queue
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import crc32c
import duckdb
import pyarrow as pa
import pytest

from rmqinspect.export import arrow_engine
from rmqinspect.export.progress import Reporter
from rmqinspect.export.schema import SCHEMAS, TOPIC_PARTITION, Table, file_schema
from rmqinspect.export.tasks import Member
from rmqinspect.export.topics import MAX_VALUE_LENGTH, partition_value
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import SMALL_OPTS, build_store, run, run_json, run_jsonl
from tests.conftest import FIXTURES
from tests.export_helpers import (
    HOSTILE_TOPICS,
    hostile_store,
    read_table,
    snapshot,
)
from tests.render_helpers import decode_body

STORES = FIXTURES / "stores"
README = Path(__file__).resolve().parent.parent / "README.md"
MESSAGE_FIELDS = (
    "store_size",
    "version",
    "topic",
    "queue_id",
    "queue_offset",
    "sys_flag",
    "transaction",
    "flag",
    "body_crc",
    "body_crc_ok",
    "born_host",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "tags",
    "keys",
    "uniq_key",
    "msg_id",
    "body_length",
    "compression",
)


def export_arrow(store: Path, out: Path, *args: str) -> dict[str, object]:
    result = run("export", store, out, "--engine", "arrow", "-F", "json", "-j", "2", *args)
    assert result.exit_code == 0, result.stderr
    manifest: dict[str, object] = json.loads(result.stdout)
    return manifest


def _ms(t: pa.Table, column: str) -> list[int | None]:
    values: list[int | None] = t.column(column).cast(pa.int64()).to_pylist()
    return values


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """torn_tail49 (crashed, its last record torn) exported once for several tests."""
    out = tmp_path_factory.mktemp("export") / "out"
    export_arrow(STORES / "torn_tail49", out, *SMALL_OPTS)
    return STORES / "torn_tail49", out


@pytest.mark.parametrize(
    "name",
    ["clean49", "clean53", "crash53", "bad_crc49", "torn_tail49", "zeroed49", "stale_tail49"],
)
def test_messages_round_trip_against_the_messages_command(name: str, tmp_path: Path) -> None:
    store = STORES / name
    manifest = export_arrow(store, tmp_path / "out", *SMALL_OPTS, "--tables", "messages")
    # messages lists skipped damage ranges among the messages: only the messages are rows
    listed = [
        m for m in run_jsonl("messages", store, "--body", "base64", expect=0) if "skipped" not in m
    ]
    table = read_table(tmp_path / "out", Table.MESSAGES)
    assert manifest["tables"] == {  # type: ignore[comparison-overlap]
        "messages": {"rows": len(listed), "path": "messages", "partitioned_by": TOPIC_PARTITION}
    }
    assert table.num_rows == len(listed) > 0
    rows = {r["physical_offset"]: r for r in table.to_pylist()}
    offsets = table.column("physical_offset").to_pylist()
    stored = dict(zip(offsets, _ms(table, "store_timestamp"), strict=True))
    born = dict(zip(offsets, _ms(table, "born_timestamp"), strict=True))
    for msg in listed:
        row = rows[msg["physical_offset"]]
        assert {k: row[k] for k in MESSAGE_FIELDS} == {k: msg[k] for k in MESSAGE_FIELDS}
        assert dict(row["properties"]) == msg["properties"]
        assert row["body"] == decode_body(msg["body_encoding"], msg["body"])
        assert stored[row["physical_offset"]] == msg["store_timestamp"]
        assert born[row["physical_offset"]] == msg["born_timestamp"]
        assert row["physical_offset_field"] == msg.get("physical_offset_field")
        assert row[TOPIC_PARTITION] == partition_value(msg["topic"])
        start = int(row["file"].rpartition("/")[2])
        assert row["file_position"] == row["physical_offset"] - start
        raw = (store / row["file"]).read_bytes()
        record = raw[row["file_position"] : row["file_position"] + row["store_size"]]
        assert row["record_crc32c"] == crc32c.crc32c(record)
        assert row["dledger_index"] is None and row["dledger_term"] is None  # a plain store


FINDING_FIELDS = (
    "check_id",
    "severity",
    "file",
    "file_position",
    "physical_offset",
    "topic",
    "queue_id",
    "queue_offset",
    "detail",
)


def _verify_findings(store: Path) -> list[dict[str, object]]:
    return [
        {k: f[k] for k in FINDING_FIELDS}
        for f in run_json("verify", store, *SMALL_OPTS, expect=1)["findings"]
    ]


def test_findings_are_what_verify_finds(crashed: tuple[Path, Path]) -> None:
    store, out = crashed
    findings = read_table(out, Table.FINDINGS).to_pylist()
    assert findings == _verify_findings(store)
    # verify's first commitlog finding is the record where recovery stops.
    bad = run_json("recover", store, expect=1)["commitlog"]["first_bad_record"]
    first = min(
        (f for f in findings if f["check_id"].startswith("commitlog.")),
        key=lambda f: f["physical_offset"],
    )
    assert first["physical_offset"] == bad["physical_offset"]
    assert first["file"] == bad["file"]
    assert first["file_position"] == bad["file_position"]
    assert first["severity"] == "error"


def test_body_crc_mismatch_is_a_finding_and_stays_a_message(tmp_path: Path) -> None:
    store = STORES / "bad_crc49"
    export_arrow(store, tmp_path / "out", *SMALL_OPTS, "--tables", "messages,findings")
    bad = run_json("recover", store, expect=1)["commitlog"]["first_bad_record"]
    findings = read_table(tmp_path / "out", Table.FINDINGS).to_pylist()
    assert findings == _verify_findings(store)
    crc = [f for f in findings if f["check_id"] == "commitlog.body_crc"]
    assert [f["physical_offset"] for f in crc] == [bad["physical_offset"]]
    messages = read_table(tmp_path / "out", Table.MESSAGES)
    damaged = messages.filter(
        pa.compute.equal(messages.column("physical_offset"), bad["physical_offset"])
    )
    assert damaged.column("body_crc_ok").to_pylist() == [False]


def test_restart_keeps_follows_the_recover_prediction(tmp_path: Path) -> None:
    store = STORES / "cq_missing49"  # the restart cannot serve TopicA/1: no_queue_unit losses
    export_arrow(store, tmp_path / "out", *SMALL_OPTS, "--tables", "messages")
    report = run_json("recover", store, "--lost-limit", "100000", expect=1)
    lost = {m["physical_offset"] for m in report["lost_messages"]["messages"]}
    assert lost and report["lost_messages"]["count"] == len(lost)
    table = read_table(tmp_path / "out", Table.MESSAGES)
    dropped = {
        r["physical_offset"]
        for r in table.select(["physical_offset", "restart_keeps"]).to_pylist()
        if r["restart_keeps"] is False
    }
    assert dropped == lost
    assert None not in table.column("restart_keeps").to_pylist()


def test_restart_keeps_past_the_recovered_end(crashed: tuple[Path, Path]) -> None:
    store, out = crashed
    end = run_json("recover", store, expect=1)["commitlog"]["max_offset"]
    rows = read_table(out, Table.MESSAGES).select(["physical_offset", "restart_keeps"])
    for r in rows.to_pylist():
        assert r["restart_keeps"] is (r["physical_offset"] < end)


def test_consume_queue_rows_are_the_consumequeue_units(tmp_path: Path) -> None:
    store = STORES / "cq_ahead49"
    export_arrow(store, tmp_path / "out", *SMALL_OPTS, "--tables", "consume_queue")
    table = read_table(tmp_path / "out", Table.CONSUME_QUEUE).to_pylist()
    units = run_jsonl("consumequeue", store, "TopicB", "0", "--body", "none", expect=0)
    mine = sorted(
        (r for r in table if (r["topic"], r["queue_id"]) == ("TopicB", 0)),
        key=lambda r: r["queue_offset"],
    )
    fields = ("queue_offset", "physical_offset", "size", "tags_code", "tags_code_kind", "status")
    assert [{k: r[k] for k in fields} for r in mine] == [{k: u[k] for k in fields} for u in units]
    assert {"found", "no_record"} <= {r["status"] for r in mine}  # units past the end
    assert all(r["file"].startswith("consumequeue/TopicB/0/") for r in mine)


def test_index_entries_and_consumer_offsets_are_the_commands_rows(
    crashed: tuple[Path, Path],
) -> None:
    store, out = crashed
    listed = run_jsonl("index", store, "--entries", *SMALL_OPTS, expect=0)
    entries = read_table(out, Table.INDEX_ENTRIES)
    times = _ms(entries, "store_timestamp")
    got = [
        (r["file"], r["entry"], r["key_hash"], r["slot"], r["physical_offset"], r["prev"], t)
        for r, t in zip(entries.to_pylist(), times, strict=True)
    ]
    want = [
        (
            e["file"],
            e["entry"],
            e["key_hash"],
            e["slot"],
            e["physical_offset"],
            e["prev"],
            e["store_timestamp"],
        )
        for e in listed
    ]
    assert sorted(got) == sorted(want) and want
    offsets = run_json("offsets", store, expect=0)["offsets"]
    table = read_table(out, Table.CONSUMER_OFFSETS).to_pylist()
    keys = ("table", "group", "topic", "queue_id", "offset", "min_offset", "max_offset", "lag")
    assert sorted(tuple(r[k] for k in keys) for r in table) == sorted(
        tuple(o[k] for k in keys) for o in offsets
    )


def test_manifest_lists_every_source_file_with_its_crc32c(crashed: tuple[Path, Path]) -> None:
    store, out = crashed
    manifest = json.loads((out / "_manifest.json").read_text())
    files = {f["path"]: f for f in manifest["source_files"]}
    on_disk = {p.relative_to(store).as_posix(): p for p in store.rglob("*") if p.is_file()}
    assert set(files) == set(on_disk)
    for path, f in files.items():
        data = on_disk[path].read_bytes()
        assert (f["size"], f["crc32c"]) == (len(data), f"{crc32c.crc32c(data):08x}")
        assert f["mtime_ns"] == on_disk[path].stat().st_mtime_ns
    assert manifest["engine"] == "arrow" and manifest["master"] is None
    assert manifest["store"] == str(store.resolve())
    assert manifest["profile"]["version"] == "4.9"
    assert manifest["changed_during_export"] == []
    assert manifest["start_time"] <= manifest["end_time"]
    for name, info in manifest["tables"].items():
        assert read_table(out, Table(name)).num_rows == info["rows"]
    # Written last: nothing under OUT is newer than the manifest.
    newest = max(p.stat().st_mtime_ns for p in out.rglob("*.parquet"))
    assert (out / "_manifest.json").stat().st_mtime_ns >= newest


def test_export_never_writes_into_the_store_and_refuses_bad_outputs(tmp_path: Path) -> None:
    store = hostile_store(tmp_path / "store")
    before = snapshot(store)
    out = tmp_path / "out"
    export_arrow(store, out, *SMALL_OPTS)
    assert snapshot(store) == before
    for target in (store, store / "inside", tmp_path):
        result = run("export", store, target, "--engine", "arrow")
        assert result.exit_code == 2
        assert "OUT" in result.stderr and "Traceback" not in result.stderr
    again = run("export", store, out, "--engine", "arrow")
    assert again.exit_code == 2 and "new or empty" in again.stderr
    assert "--overwrite replaces an earlier export there" in again.stderr
    assert (out / "_manifest.json").exists()  # the refused run left the earlier export alone
    export_arrow(store, out, *SMALL_OPTS, "--overwrite", "--tables", "findings")
    assert sorted(p.name for p in out.iterdir()) == ["_manifest.json", "findings"]
    assert snapshot(store) == before


def test_hostile_topic_names_stay_inside_out_and_apart(tmp_path: Path) -> None:
    store = hostile_store(tmp_path / "store")
    out = tmp_path / "out"
    export_arrow(store, out, *SMALL_OPTS, "--tables", "messages")
    outside = {p for p in tmp_path.iterdir()} - {store, out}
    assert not outside
    directories = sorted((out / "messages").iterdir())
    assert all(d.is_dir() and d.name.startswith(f"{TOPIC_PARTITION}=") for d in directories)
    assert all(len(d.name.encode()) <= 255 for d in directories)
    table = read_table(out, Table.MESSAGES)
    by_dir: dict[str, set[str]] = {}
    for r in table.select(["topic", TOPIC_PARTITION]).to_pylist():
        by_dir.setdefault(r[TOPIC_PARTITION], set()).add(r["topic"])
    assert all(len(topics) == 1 for topics in by_dir.values())  # no two topics share one
    assert {t for topics in by_dir.values() for t in topics} == {"TopicA", *HOSTILE_TOPICS}
    assert len(directories) == len(by_dir)


def test_partition_values_are_safe_and_distinct() -> None:
    names = [*HOSTILE_TOPICS, "", "TopicA", "topica", "a" * 5000, "a" * 4999 + "b"]
    values = [partition_value(n) for n in names]
    assert len(set(values)) == len(values)
    for v in values:
        assert v and len(v) <= MAX_VALUE_LENGTH
        assert re.fullmatch(r"[A-Za-z0-9_~-]+", v), v
    assert partition_value("TopicA") == "TopicA"
    assert partition_value("%RETRY%g") == "~25RETRY~25g"


def test_duckdb_reads_messages_with_hive_partitioning_and_the_documented_schema(
    crashed: tuple[Path, Path],
) -> None:
    _, out = crashed
    con = duckdb.connect()
    glob = str(out / "messages" / "**" / "*.parquet")
    rel = con.sql(f"SELECT * FROM read_parquet('{glob}', hive_partitioning = true)")
    types = dict(zip(rel.columns, (str(t) for t in rel.types), strict=True))
    assert list(types) == [f.name for f in SCHEMAS[Table.MESSAGES]]
    assert types["properties"] == "MAP(VARCHAR, VARCHAR)"
    assert types["keys"] == "VARCHAR[]"
    assert types["body"] == "BLOB"
    assert types["store_timestamp"] == "TIMESTAMP WITH TIME ZONE"
    assert types["restart_keeps"] == "BOOLEAN"
    count = con.sql(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = true)")
    assert count.fetchall() == [(read_table(out, Table.MESSAGES).num_rows,)]
    topics = con.sql(
        f"SELECT DISTINCT topic, {TOPIC_PARTITION} FROM read_parquet('{glob}', "
        "hive_partitioning = true, hive_types = {'topic_partition': VARCHAR})"
    ).fetchall()
    assert all(partition_value(t) == p for t, p in topics)


def test_readme_documents_every_column() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### `rmqinspect export") :]
    section = section[: section.index("\n## ", 1)]
    for table in Table:
        names = [f.name for f in SCHEMAS[table]]
        line = next(line for line in section.splitlines() if line.startswith(f"- `{table.value}`"))
        documented = re.findall(r"`([a-z0-9_]+)`", line.split(":", 1)[1])
        assert documented == names, table
    assert file_schema(Table.MESSAGES).names == SCHEMAS[Table.MESSAGES].names[:-1]


def _fake_java(root: Path, version_line: str) -> Path:
    java = root / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return root


@pytest.mark.parametrize(
    ("java", "said"),
    [(None, "no Java was found"), ('java version "1.8.0_292"', "Java 8 was found")],
)
def test_spark_engine_without_java_17_says_so_in_one_line(
    java: str | None, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "jdk"
    if java is not None:
        _fake_java(home, java)
    monkeypatch.setenv("JAVA_HOME", str(home))
    for chooses_spark in (["--engine", "spark"], ["--master", "spark://127.0.0.1:1"]):
        result = run("export", STORES / "clean49", tmp_path / "out", *chooses_spark)
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0] and "--engine arrow" in lines[0]
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("java", "said"),
    [(None, "no Java was found"), ('java version "1.8.0_292"', "Java 8 is too old")],
)
def test_default_engine_without_java_17_is_arrow_and_says_why(
    java: str | None, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make demo`` on a machine without Java: the export is made by the arrow engine, with
    one line saying why, and holds the same rows as one the arrow engine was asked for."""
    home = tmp_path / "jdk"
    if java is not None:
        _fake_java(home, java)
    monkeypatch.setenv("JAVA_HOME", str(home))
    result = run("export", STORES / "clean49", tmp_path / "out", "-F", "json", "-j", "1")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "the arrow engine writes the tables" in lines[0]
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    asked = export_arrow(STORES / "clean49", tmp_path / "arrow")
    assert manifest["engine"] == "arrow"
    assert {t: v["rows"] for t, v in manifest["tables"].items()} == {
        t: v["rows"]  # type: ignore[index]
        for t, v in asked["tables"].items()  # type: ignore[attr-defined]
    }


class _CountedFuture(Future[Any]):
    """A future that counts how often its state is looked at (``concurrent.futures.wait``
    looks at every future it is given)."""

    looks = 0

    @property  # type: ignore[override]
    def _state(self) -> str:
        _CountedFuture.looks += 1
        return self._counted_state

    @_state.setter
    def _state(self, value: str) -> None:
        self._counted_state = value


class _OneAtATimeExecutor:
    """A process pool stand-in: one thread runs the tasks in order, and finishes the next
    only after the engine has taken the last one (``Reporter.advanced``) and moved on to
    waiting, so the engine learns of finished parts one at a time, as from a real pool."""

    taken = threading.Semaphore(0)

    def __init__(self, *args: object, **kwargs: object) -> None:
        self._tasks: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None]
        self._tasks = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future = _CountedFuture()
        self._tasks.put((future, functools.partial(fn, *args)))
        return future

    def _run(self) -> None:
        first = 2  # the restart prediction and the planning are not parts
        while (task := self._tasks.get()) is not None:
            future, call = task
            if first:
                first -= 1
            else:
                self.taken.acquire()
                time.sleep(0.005)  # the engine is back to waiting
            future.set_result(call())

    def __enter__(self) -> _OneAtATimeExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._tasks.put(None)
        self._thread.join()


class _Taken(Reporter):
    def advanced(self, nbytes: int, files: int) -> None:
        _OneAtATimeExecutor.taken.release()


def test_arrow_engine_takes_each_finished_part_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine learns of each finished part once: looking at every running part whenever
    one finished cost parts x parts (100,000 queues: minutes before any work)."""
    queues = 60
    specs = [MessageSpec(topic=f"T{i}", body=b"x") for i in range(queues)]
    root = build_store(tmp_path / "store", specs)
    monkeypatch.setattr(arrow_engine, "ProcessPoolExecutor", _OneAtATimeExecutor)
    _OneAtATimeExecutor.taken.release()  # the first part needs no taking before it
    _CountedFuture.looks = 0
    out = tmp_path / "out"
    out.mkdir()
    with Store.open(root) as store:
        tables = (Table.MESSAGES, Table.CONSUME_QUEUE)
        (result,) = arrow_engine.run_arrow([Member(store)], out, tables, 1, _Taken())
    assert result.rows[Table.CONSUME_QUEUE] == queues
    parts = queues + 2  # the queues, the commitlog range and the file hashes
    assert _CountedFuture.looks <= 8 * parts, _CountedFuture.looks


def test_table_summary_is_lines(tmp_path: Path, wide_console: None) -> None:
    """The summary under the table is three lines, not one string whose newlines show as
    ``\\x0a``."""
    done = run("export", STORES / "clean49", tmp_path / "out", "--engine", "arrow", "-F", "table")
    assert done.exit_code == 0, done.stderr
    assert "\\x0a" not in done.stdout
    tail = done.stdout.splitlines()[-3:]
    assert [line.split(":", 1)[0] for line in tail] == ["engine", "source", "manifest"]
