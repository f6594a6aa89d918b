"""``rmqinspect synth``: options reach the writer, output is deterministic, damage and errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from rmqinspect.cli.app import app
from rmqinspect.format.checkpoint import decode_checkpoint
from rmqinspect.format.commitlog import CheckOptions, check_message
from rmqinspect.format.profile import Profile

SMALL = [
    "--commitlog-file-size",
    "65536",
    "--cq-file-size",
    "1000",
    "--index-slots",
    "64",
    "--index-entries",
    "400",
]


def synth(*args: str | Path) -> Result:
    return CliRunner().invoke(app, ["synth", *map(str, args)])


def synth_json(*args: str | Path) -> Any:
    result = synth(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_options_shape_the_store(tmp_path: Path) -> None:
    out = tmp_path / "s"
    summary = synth_json(
        out, "--messages", "500", "--body-size", "64", "--topics", "2", "--queues", "3", *SMALL
    )
    assert summary["messages"] == summary["dispatched"] == 500
    assert not summary["crashed"]
    assert summary["commitlog_files"] == sorted(summary["commitlog_files"])
    assert all((out / "commitlog" / n).stat().st_size == 65536 for n in summary["commitlog_files"])
    plain_queues = {q for q in summary["consume_queues"] if q.startswith(("TopicA/", "TopicB/"))}
    assert plain_queues == {f"Topic{t}/{q}" for t in "AB" for q in range(3)}
    assert not (out / "consumequeue" / "TopicC").exists()
    assert all((out / "index" / n).stat().st_size == 8296 for n in summary["index_files"])
    assert summary["index_entries"] > 500
    assert not (out / "abort").exists()


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        assert (
            synth(tmp_path / name, "--messages", "200", "--seed", seed, *SMALL, "-q").exit_code == 0
        )
    a, b, c = (files(tmp_path / n) for n in "abc")
    assert a == b
    assert a[f"commitlog/{0:020d}"] != c[f"commitlog/{0:020d}"]


def test_crash_profile_and_prop_crc(tmp_path: Path) -> None:
    out = tmp_path / "s"
    summary = synth_json(
        out, "--messages", "400", "--profile", "5.3", "--prop-crc", "--crash", *SMALL
    )
    assert summary["crashed"]
    assert summary["dispatched"] == 400 - 40
    assert (out / "abort").read_bytes() == b"4242"
    cp = decode_checkpoint((out / "checkpoint").read_bytes())
    assert cp.physic_msg_timestamp < cp.logics_msg_timestamp  # the flush lags 4.5 s
    last = summary["commitlog_files"][-1]
    assert not any((out / "commitlog" / last).read_bytes())  # pre-allocated
    data = (out / "commitlog" / summary["commitlog_files"][0]).read_bytes()
    options = CheckOptions(profile=Profile.V5_3, force_verify_prop_crc=True)
    first = check_message(data, 0, 0, options)
    assert first.is_message and first.record is not None
    assert first.record.properties_raw.endswith(b"\x02")


def test_plain_has_no_special_messages(tmp_path: Path) -> None:
    summary = synth_json(tmp_path / "s", "--messages", "300", "--plain", *SMALL)
    assert all(
        q.startswith("TopicA/") or q.startswith("TopicB/") or q.startswith("TopicC/")
        for q in summary["consume_queues"]
    )


def test_damage_option(tmp_path: Path) -> None:
    out = tmp_path / "s"
    summary = synth_json(
        out, "--messages", "300", *SMALL, "--damage", "torn-tail", "--damage", "missing-cq"
    )
    kinds = [d["kind"] for d in summary["damage"]]
    assert kinds == ["torn_tail", "remove_cq_dir"]
    assert not (out / "consumequeue" / "TopicA" / "0").exists()
    (path, start, end) = summary["damage"][0]["ranges"][0]
    assert not any((out / path).read_bytes()[start:end])


def test_table_output_and_quiet(tmp_path: Path) -> None:
    result = synth(tmp_path / "t", "--messages", "50", *SMALL)
    assert result.exit_code == 0
    assert "synthetic 4.9 store" in result.stdout and "50 (50 dispatched)" in result.stdout
    quiet = synth(tmp_path / "q", "--messages", "50", *SMALL, "--quiet")
    assert quiet.exit_code == 0 and quiet.stdout == ""


def test_refuses_non_empty_directory_and_bad_settings(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("keep me")
    result = synth(tmp_path, "--messages", "1")
    assert result.exit_code == 2
    assert "not an empty directory" in result.stderr
    assert (tmp_path / "x").read_text() == "keep me"
    bad = synth(tmp_path / "n", "--prop-crc", "--profile", "4.9")
    assert bad.exit_code == 2 and "5.3" in bad.stderr
    too_small = synth(tmp_path / "m", "--commitlog-file-size", "256", "--body-size", "1000")
    assert too_small.exit_code == 2 and "fit" in too_small.stderr


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_json_names_are_snake_case_like_every_other_command(tmp_path: Path) -> None:
    summary = synth_json(tmp_path / "s", "--messages", "20", *SMALL, "--damage", "torn-tail")
    names = _keys({k: v for k, v in summary.items() if k != "consume_queues"})
    assert names >= {"commitlog_files", "commitlog_end", "physic_msg_timestamp", "ranges"}
    assert [n for n in names if n != n.lower()] == []


def test_zeroed_block_after_a_crash_lands_in_the_data(tmp_path: Path) -> None:
    # After --crash the newest commitlog file is the pre-allocated empty one: the zeroed block
    # must still fall among the records, so that the restart cuts there.
    out = tmp_path / "s"
    summary = synth_json(out, "--messages", "300", *SMALL, "--crash", "--damage", "zero-region")
    (path, start, end) = summary["damage"][0]["ranges"][0]
    file_start = int(Path(path).name)
    assert file_start + end <= summary["commitlog_end"]
    assert path != f"commitlog/{summary['commitlog_files'][-1]}"
    recovered = CliRunner().invoke(app, ["recover", str(out), "--format", "json"])
    assert recovered.exit_code == 1, recovered.stderr
    doc = json.loads(recovered.stdout)
    assert doc["commitlog"]["max_offset"] <= file_start + start
    assert doc["lost_messages"]["count"] > 0


def test_a_store_that_fails_half_way_is_not_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails after it began leaves no half store at a path this run created; an
    empty directory the user made stays."""
    import rmqinspect.cli.synth as synth_cli

    real = synth_cli.write_workload

    def failing(root: Any, *args: Any, **kwargs: Any) -> Any:
        real(root, *args, **kwargs)  # the store is on disk, then something is wrong
        raise ValueError("a late inconsistency")

    monkeypatch.setattr(synth_cli, "write_workload", failing)
    made = tmp_path / "new"
    result = synth(made, "--messages", "20", *SMALL)
    assert result.exit_code == 2 and "a late inconsistency" in result.output
    assert not made.exists()
    given = tmp_path / "given"
    given.mkdir()
    assert synth(given, "--messages", "20", *SMALL).exit_code == 2
    assert given.is_dir()
