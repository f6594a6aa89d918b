"""salvage gives back every message the damage did not touch and nothing else, proven against
the undamaged original for every damage helper under 4.9, 5.1 and 5.3; restart_keeps is the
restart recover predicts; the output directory rules hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from rmqinspect.analysis.recovery import RecoverOptions, analyze_recovery
from rmqinspect.analysis.salvage import SalvageReport, salvage
from rmqinspect.export import salvage as export_salvage
from rmqinspect.export.salvage import SalvageWriter
from rmqinspect.format import commitlog as cl
from rmqinspect.format.message_json import BodyFormat
from rmqinspect.store.model import Store
from rmqinspect.store.output import prepare_output_dir
from tests.cli_helpers import run
from tests.conftest import FIXTURES
from tests.damage_matrix import (
    DAMAGES,
    PROFILES,
    commitlog_ranges,
    damaged,
    original,
    records,
    touched,
)


def salvaged(root: Path, out: Path) -> tuple[SalvageReport, list[dict[str, Any]]]:
    with Store.open(root) as store:
        prepare_output_dir(out, "--out", store.root)
        with SalvageWriter(out, BodyFormat.BASE64) as writer:
            report = salvage(store, writer)
            writer.write_report(report)
    lines = (out / "messages.jsonl").read_text(encoding="utf-8").splitlines()
    return report, [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("originals")


@pytest.mark.parametrize("kind", sorted(DAMAGES))
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_untouched_message_and_nothing_else(
    originals: Path, tmp_path: Path, profile: str, kind: str
) -> None:
    d = damaged(originals, profile, kind, tmp_path / "store")
    report, rows = salvaged(tmp_path / "store", tmp_path / "out")
    clean = records(original(originals, profile))
    hit = {r.offset for r in touched(clean, d)}
    untouched = {r.offset: r for r in clean if r.offset not in hit}
    intact = {row["physical_offset"]: row for row in rows if row["intact"]}
    # Every message the damage did not touch comes back intact, field for field.
    assert set(untouched) <= set(intact)
    for offset, rec in untouched.items():
        expected = cl.decode_message(rec.data, 0, offset)
        row = intact[offset]
        assert row["topic"] == expected.topic
        assert (row["queue_id"], row["queue_offset"]) == (expected.queue_id, expected.queue_offset)
        assert row["store_timestamp"] == expected.store_timestamp
        assert row["properties"] == dict(sorted(expected.properties.items()))
        assert row["body_encoding"] == "base64"
        assert row["body_crc_ok"] and row["failed"] == []
    # Nothing else: an intact record that is no untouched original was written by the damage
    # helper itself (a rewritten record), wholly inside the bytes it changed.
    ranges = commitlog_ranges(d)
    for offset, row in intact.items():
        if offset not in untouched:
            end = offset + row["store_size"]
            assert any(a <= offset and end <= b for a, b in ranges), row
    # Damaged records say what failed; the counts add up.
    for row in rows:
        assert row["intact"] == (row["failed"] == [])
    assert report.messages == len(rows)
    assert report.intact == len(intact)
    table = pq.read_table(tmp_path / "out" / "messages.parquet")
    assert table.num_rows == report.messages - report.partial
    parquet = dict(
        zip(table["physical_offset"].to_pylist(), table["intact"].to_pylist(), strict=True)
    )
    assert {o: r["intact"] for o, r in intact.items()} == {o: i for o, i in parquet.items() if i}


@pytest.mark.parametrize("kind", ["flip_body", "torn_tail", "zero_region", "abort"])
def test_restart_keeps_is_the_predicted_restart(originals: Path, tmp_path: Path, kind: str) -> None:
    damaged(originals, "4.9", kind, tmp_path / "store")
    _, rows = salvaged(tmp_path / "store", tmp_path / "out")
    with Store.open(tmp_path / "store") as store:
        restart = analyze_recovery(store, RecoverOptions(lost_limit=None))
    assert restart.commitlog is not None and restart.commitlog.max_offset is not None
    end = restart.commitlog.max_offset
    lost = {m.physical_offset for m in restart.lost_messages.messages}
    for row in rows:
        offset = row["physical_offset"]
        assert row["restart_keeps"] == (offset < end and offset not in lost), row
    discarded = [row for row in rows if row["intact"] and not row["restart_keeps"]]
    # The intact messages the restart throws away are exactly those it lists as lost.
    assert {row["physical_offset"] for row in discarded} == {
        m.physical_offset for m in restart.lost_messages.messages
    }
    if kind == "abort":
        assert discarded == []
    if kind == "flip_body":
        assert discarded  # the restart cuts the log at the flipped record; salvage has them


def test_report_json(tmp_path: Path) -> None:
    report, _ = salvaged(FIXTURES / "stores" / "zeroed49", tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert doc["messages"] == report.messages == report.intact + report.damaged
    assert doc["damaged_ranges"][0]["physical_offset"] == 69865
    assert doc["restart"]["recovered_end"] == 69865
    assert doc["intact_restart_discards"] == report.intact_restart_discards > 0
    assert doc["caveats"] and doc["files"] == ["messages.jsonl", "messages.parquet", "report.json"]


def test_messages_parquet_is_parts_of_a_bounded_number_of_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """messages.parquet is a directory of parts (the writer keeps each row group's metadata
    until its file closes); read as one table it holds the same rows in the same order
    however the parts are cut, and a salvage without records still has a part to give the
    columns."""
    store = FIXTURES / "stores" / "zeroed49"
    salvaged(store, tmp_path / "whole")
    whole = pq.read_table(tmp_path / "whole" / "messages.parquet")
    monkeypatch.setattr(export_salvage, "PART_ROW_GROUPS", 1)
    salvaged(store, tmp_path / "cut")
    parts = sorted((tmp_path / "cut" / "messages.parquet").iterdir())
    # A run before the zeroed block, the one after it, a record decoded inside it.
    assert [p.name for p in parts] == [f"part-{i:06d}.parquet" for i in range(3)]
    assert [pq.ParquetFile(p).metadata.num_row_groups for p in parts] == [1, 1, 1]
    cut = pq.read_table(tmp_path / "cut" / "messages.parquet")
    assert cut.equals(whole) and whole.num_rows == 297
    offsets = whole["physical_offset"].to_pylist()
    assert offsets == sorted(offsets)
    # min/max only where a reader can prune by them, as the export writes them.
    chunks = pq.ParquetFile(parts[0]).metadata.row_group(0)
    with_stats = {
        chunks.column(i).path_in_schema.split(".")[0]
        for i in range(chunks.num_columns)
        if chunks.column(i).is_stats_set
    }
    assert {"physical_offset", "queue_offset", "store_timestamp", "topic"} <= with_stats
    assert not with_stats & {"body", "body_stored", "properties", "body_crc"}
    (tmp_path / "empty").mkdir()
    with SalvageWriter(tmp_path / "empty"):
        pass
    (part,) = (tmp_path / "empty" / "messages.parquet").iterdir()
    assert part.name == "part-000000.parquet"
    assert pq.read_table(part).schema.equals(whole.schema)
    assert pq.read_table(part).num_rows == 0


def test_cli_writes_only_into_a_new_directory_outside_the_store(tmp_path: Path) -> None:
    store = FIXTURES / "stores" / "torn_tail49"
    ok = run("salvage", store, "--out", tmp_path / "out", "--format", "json")
    assert ok.exit_code == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["damaged"] == 1 and doc["intact"] > 0
    again = run("salvage", store, "--out", tmp_path / "out")
    assert again.exit_code == 2 and "empty" in again.stderr
    inside = run("salvage", store, "--out", store / "lost+found")
    assert inside.exit_code == 2 and "outside" in inside.stderr
    assert not (store / "lost+found").exists()
    missing = run("salvage", tmp_path / "nope", "--out", tmp_path / "out2")
    assert missing.exit_code == 2


@pytest.mark.parametrize("name", ["clean49", "clean53_propcrc"])
def test_messages_jsonl_is_the_messages_command_output(tmp_path: Path, name: str) -> None:
    """One encoder: each line of salvage's messages.jsonl is the line ``messages -F jsonl``
    writes for that record (the C writer's where it can, compact), byte for byte, with the
    three salvage keys appended; clean53_propcrc holds the property-CRC rows the C writer
    leaves to the per-record encoder."""
    store = FIXTURES / "stores" / name
    listed = run("messages", store, "--format", "jsonl")
    assert listed.exit_code == 0, listed.stderr
    out = tmp_path / "out"
    assert run("salvage", store, "--out", out, "--format", "json").exit_code == 0
    salvaged = (out / "messages.jsonl").read_bytes().splitlines()
    expected = listed.stdout_bytes.splitlines()
    assert len(salvaged) == len(expected) > 0
    for line, want in zip(salvaged, expected, strict=True):
        assert line == want[:-1] + b',"intact":true,"restart_keeps":true,"failed":[]}'


@pytest.mark.parametrize("name", ["clean49", "torn_tail49"])
def test_progress_and_scanned_bytes_are_the_bytes_walked(tmp_path: Path, name: str) -> None:
    """scanned_bytes is what the walk passed (records and damaged ranges up to where each
    file's walk ended: its BLANK, or the zeros after its data), not the preallocated zeros;
    the progress follows the walk and, with the zeros, reaches every byte once; the restart
    prediction's walk advances its own progress."""
    from rmqinspect.analysis.salvage import predict_restart
    from rmqinspect.analysis.verify import Context, VerifyOptions
    from rmqinspect.analysis.verify.commitlog import check_file

    with Store.open(FIXTURES / "stores" / name) as store:
        ctx = Context(store, VerifyOptions())
        # Where verify's walk of each file ended: past damage that ends it, the end of data.
        files = [check_file(ctx, f) for f in store.commitlog.files]
        ends = [r.extent if r.end == "damage" else r.end_position for r in files]
        assert {r.end for r in files} == (
            {"blank", "damage"} if "torn" in name else {"blank", "zeros"}
        )
        total = sum(f.length for f in store.commitlog.files)
        restart_seen: list[int] = []
        restart = predict_restart(store, restart_seen.append)
        seen: list[int] = []
        prepare_output_dir(tmp_path / "out", "--out", store.root)
        with SalvageWriter(tmp_path / "out", BodyFormat.NONE) as writer:
            report = salvage(store, writer, seen.append, restart)
    assert 0 < report.scanned_bytes == sum(ends) < total
    assert sum(seen) == total and len(seen) > len(ends) and min(seen) >= 0
    assert 0 < sum(restart_seen) <= total
