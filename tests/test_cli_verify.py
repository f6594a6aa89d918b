"""The verify command: exit codes, the three formats, --fail-on, --no-crc, --hexdump, --jobs,
and the README documenting every check id."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rmqinspect.analysis.verify import CHECKS
from tests.cli_helpers import run
from tests.conftest import FIXTURES, ROOT

STORES = FIXTURES / "stores"


def test_clean_store_exits_0_with_an_empty_findings_list() -> None:
    result = run("verify", STORES / "clean53_propcrc", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["findings"] == []
    summary = doc["summary"]
    assert summary["records"] > 0 and summary["findings_by_check"] == {}
    assert summary["first_store_time"].endswith("Z")
    assert {t["topic"] for t in summary["topics"]} >= {"TopicA", "TopicB", "TopicC"}
    assert sum(t["records"] for t in summary["topics"]) == summary["records"]
    assert sum(f["records"] for f in summary["files"]) == summary["records"]


def test_damage_exits_1_and_names_the_offset() -> None:
    result = run("verify", STORES / "torn_tail49", "--format", "json")
    assert result.exit_code == 1
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding == {
        "check_id": "commitlog.body_crc",
        "severity": "error",
        "file": "commitlog/00000000000000065536",
        "detail": finding["detail"],
        "file_position": 27623,
        "physical_offset": 93159,
        "topic": None,
        "queue_id": None,
        "queue_offset": None,
        "hexdump": [],
    }


def test_fail_on_warning_turns_a_crash_store_red() -> None:
    assert run("verify", STORES / "crash49", "--format", "json").exit_code == 0
    assert (
        run("verify", STORES / "crash49", "--format", "json", "--fail-on", "warning").exit_code == 1
    )
    # An info finding never fails a run: --help offers only what the command takes.
    assert run("verify", STORES / "crash49", "--fail-on", "info").exit_code == 2
    shown = run("verify", "--help").stdout
    assert "<error|warning>" in shown and "info" not in shown.split("--fail-on", 1)[1][:120]


def test_no_crc_skips_the_body_crc() -> None:
    result = run("verify", STORES / "bad_crc49", "--no-crc", "--format", "json")
    assert result.exit_code == 0, result.stdout
    assert json.loads(result.stdout)["summary"]["crc_checked"] is False


def test_jsonl_is_findings_then_the_summary() -> None:
    result = run("verify", STORES / "stale_tail49", "--format", "jsonl", "--hexdump")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["check_id"] for line in lines[:-1]] == ["commitlog.physical_offset"] * 3
    assert all(line["hexdump"] for line in lines[:-1])
    assert set(lines[-1]) == {"summary"}


def test_table_ends_with_the_summary(wide_console: None) -> None:
    result = run("verify", STORES / "zeroed49", "--format", "table", "--hexdump")
    assert result.exit_code == 1
    out = result.stdout
    assert (
        out.index("Findings")
        < out.index("commitlog.body_crc at commitlog/")
        < out.index("Records per topic")
    )
    assert "Findings by check" in out and "Commitlog files" in out
    # The dump's lines are lines, not one string with its newlines escaped.
    assert "\\x0a" not in out
    dump = out[out.index("commitlog.body_crc at commitlog/") :].splitlines()
    assert all(re.match(r"\d{10}: [0-9a-f]{4} ", line) for line in dump[1:5])


def test_jobs_do_not_change_the_output() -> None:
    one = run("verify", STORES / "zeroed49", "--format", "json", "--jobs", "1")
    two = run("verify", STORES / "zeroed49", "--format", "json", "--jobs", "2")
    assert one.stdout == two.stdout and one.exit_code == two.exit_code == 1


def test_unreadable_input_exits_2(tmp_path: Path) -> None:
    result = run("verify", tmp_path / "missing")
    assert result.exit_code == 2 and "no such directory" in result.stderr


def test_readme_documents_every_check_id() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("### `rmqinspect verify STORE`")
    section = readme[start : readme.index("\n### ", start + 1)]
    documented = set(
        re.findall(
            r"`((?:commitlog|dledger|consumequeue|batchcq|index|checkpoint|config|offsets|store|timer)\.[a-z_]+)`",
            section,
        )
    )
    assert documented == set(CHECKS)


def test_delay_levels_are_the_brokers(conformance_consume_dir: Path) -> None:
    """The consumption corpus's broker ran with its own messageDelayLevel: with the default
    table every delay unit's tagsCode looks wrong (and the finding says what to give); with
    the broker's, verify finds nothing."""
    store = conformance_consume_dir / "stores" / "consume_clean"
    default = run("verify", store, "--format", "json")
    assert default.exit_code == 1
    findings = json.loads(default.stdout)["findings"]
    assert {(f["check_id"], f["topic"]) for f in findings} == {
        ("consumequeue.tags_code", "SCHEDULE_TOPIC_XXXX")
    }
    assert all(f["detail"].endswith("--delay-levels?") for f in findings)
    levels = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 10s 20s"
    given = run("verify", store, "--delay-levels", levels, "--format", "json")
    assert given.exit_code == 0, given.stderr
    assert json.loads(given.stdout)["findings"] == []
    bad = run("verify", store, "--delay-levels", "1s 5x")
    assert bad.exit_code == 2 and "bad messageDelayLevel element '5x'" in bad.stderr
