"""One vocabulary across commands (README "Vocabulary"): the same spelling and the same answer
for the same thing, and the old spellings still parse as hidden aliases."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli_helpers import build_store, orders, run, run_json, run_jsonl

NO_SUCH_TOPIC = "rmqinspect: no such topic: 'Nope' (no consume queue, not in topics.json)\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("vocab") / "store", orders(12))


@pytest.mark.parametrize(
    "args",
    [
        ("messages", "--topic", "Nope"),
        ("offsets", "--topic", "Nope"),
        ("consumequeue", "Nope", "0"),
        ("lookup", "--key", "ORDER-1", "--topic", "Nope"),
        ("lookup", "--uniq-key", "0A0000000000000000000000", "--topic", "Nope"),
        ("lookup", "--since", "0", "--topic", "Nope"),
        ("lookup", "--queue-offset", "Nope:0:0"),
        ("trace", "--key", "ORDER-1", "--topic", "Nope"),
    ],
)
def test_a_topic_the_store_does_not_know_is_not_found_in_every_command(
    store: Path, args: tuple[str, ...]
) -> None:
    """Not "nothing" (exit 0), not a usage error (exit 2), not "try --scan": one line, exit 1."""
    result = run(args[0], store, *args[1:], "--format", "jsonl")
    assert result.exit_code == 1, result.stderr
    assert result.stderr == NO_SUCH_TOPIC
    assert result.stdout == ""


def test_a_known_topic_with_nothing_matching_is_still_just_nothing(store: Path) -> None:
    result = run("messages", store, "--topic", "Orders", "--since", "1", "--until", "2")
    assert result.exit_code == 1 and "no such topic" not in result.stderr
    assert run("offsets", store, "--topic", "Orders", "-F", "json").exit_code == 0


# (new spelling, old spelling): the same command line but for the one option.
ALIASES = [
    (
        ("lookup", "--since", "1000000", "--until", "1000005", "--topic", "Orders"),
        ("lookup", "--time", "1000000..1000005", "--topic", "Orders"),
    ),
    (
        ("lookup", "--key", "ORDER-3", "--topic", "Orders", "--since", "0", "--until", "9"),
        ("lookup", "--key", "ORDER-3", "--topic", "Orders", "--begin", "0", "--end", "9"),
    ),
    (("lookup", "--physical-offset", "0"), ("lookup", "--phy-offset", "0")),
    (
        ("consumequeue", "Orders", "0", "--from-queue-offset", "1"),
        ("consumequeue", "Orders", "0", "--from", "1"),
    ),
]


@pytest.mark.parametrize(("new", "old"), ALIASES)
def test_old_spellings_are_hidden_aliases(
    store: Path, new: tuple[str, ...], old: tuple[str, ...]
) -> None:
    now = run(new[0], store, *new[1:], "-F", "json")
    before = run(old[0], store, *old[1:], "-F", "json")
    assert (now.exit_code, now.stdout) == (before.exit_code, before.stdout)
    assert now.stdout.strip() not in ("", "[]")
    shown = run(new[0], "--help").stdout
    changed = next(a for a in old if a not in new)
    assert f"{changed} " not in shown and f"{changed}\n" not in shown


def test_old_and_new_spelling_together_is_a_usage_error(store: Path) -> None:
    result = run("lookup", store, "--physical-offset", "0", "--phy-offset", "0")
    assert result.exit_code == 2
    assert "--phy-offset is the old spelling of --physical-offset" in result.stderr


def test_recover_out_and_its_old_spelling(store: Path, tmp_path: Path) -> None:
    first = run("recover", store, "--out", tmp_path / "a", "-F", "json")
    second = run("recover", store, "--apply-to", tmp_path / "b", "-F", "json")
    assert first.exit_code == second.exit_code == 0
    assert first.stdout.replace(str(tmp_path / "a"), "OUT") == second.stdout.replace(
        str(tmp_path / "b"), "OUT"
    )
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        p.name for p in (tmp_path / "b").iterdir()
    )


def test_synth_speaks_format_and_limit_like_the_rest(tmp_path: Path) -> None:
    """-F json as every command (--json hidden); -n is --limit elsewhere, so synth spells its
    count --messages (-n hidden); piped, the summary is plain lines, not a drawn table."""
    new = run("synth", tmp_path / "a", "--messages", "30", "--plain", "-F", "json")
    old = run("synth", tmp_path / "b", "-n", "30", "--plain", "--json")
    assert new.exit_code == old.exit_code == 0
    assert '"messages": 30' in new.stdout and '"messages": 30' in old.stdout
    plain = run("synth", tmp_path / "c", "--messages", "30", "--plain")
    assert plain.stdout.splitlines()[1] == "messages: 30 (30 dispatched)"
    assert "┃" not in plain.stdout and "│" not in plain.stdout
    shown = run("synth", "--help").stdout
    assert "--json" not in shown and " -n " not in shown and "--format" in shown


def test_verify_offers_only_the_fail_on_values_it_takes() -> None:
    shown = run("verify", "--help").stdout
    assert "<error|warning>" in shown and "info" not in shown.split("--fail-on", 1)[1][:60]
    assert run("verify", ".", "--fail-on", "info").exit_code == 2


BODY_LENGTH_POS = 84  # BODYLEN in a v1 record (rocketmq-store-format.md §2.1)


def test_one_damaged_record_has_one_name_in_every_report(tmp_path: Path) -> None:
    """A torn BODYLEN fails the body CRC before the sizes are compared: the walk without CRCs
    (messages) said parse_exception where verify, recover and salvage say body_crc_mismatch.
    Every report now names the record, its file (relative to the store) and its position
    alike."""
    store = build_store(tmp_path / "store", orders(12))
    docs = run_json("messages", store, "--body", "none", expect=0)
    bad = docs[5]["physical_offset"]
    log = store / "commitlog" / f"{0:020d}"
    with log.open("r+b") as fh:
        fh.seek(bad + BODY_LENGTH_POS)
        length = int.from_bytes(fh.read(4), "big")
        fh.seek(bad + BODY_LENGTH_POS)
        fh.write((length - 1).to_bytes(4, "big"))
    where = {"file": "commitlog/00000000000000000000", "file_position": bad}

    (skipped,) = [d["skipped"] for d in run_json("messages", store, expect=0) if "skipped" in d]
    assert skipped["reason"] == "body_crc_mismatch"
    assert {k: skipped[k] for k in where} == where

    findings = run_json("verify", store, expect=1)["findings"]
    (crc,) = [f for f in findings if f["physical_offset"] == bad and f["severity"] == "error"]
    assert crc["detail"].startswith("body_crc_mismatch: ")
    assert {k: crc[k] for k in where} == where

    first_bad = run_json("recover", store, expect=1)["commitlog"]["first_bad_record"]
    assert first_bad["reason"] == "body_crc_mismatch"
    assert (first_bad["physical_offset"], first_bad["file_position"]) == (bad, bad)
    assert first_bad["file"] == where["file"]

    report = run_json("salvage", store, "--out", tmp_path / "out", expect=0)
    (damaged,) = report["damaged_ranges"]
    assert damaged["reason"] == "body_crc_mismatch"
    assert {k: damaged[k] for k in where} == where


def test_a_records_position_is_physical_offset_and_files_are_relative(store: Path) -> None:
    """index entries and consume-queue units said phy_offset beside messages' physical_offset,
    and index named files by the store's path: one name, one meaning."""
    doc = run_json("index", store, "--entries", expect=0)
    (report,) = doc["files"]
    assert report["file"] == f"index/{report['name']}"
    messages = {m["physical_offset"] for m in run_json("messages", store, expect=0)}
    assert {e["file"] for e in doc["entries"]} == {report["file"]}
    assert {e["physical_offset"] for e in doc["entries"]} == messages
    units = run_jsonl("consumequeue", store, "Orders", "0", expect=0)
    assert units and all(u["physical_offset"] == u["message"]["physical_offset"] for u in units)
    assert all("phy_offset" not in u for u in units)
    first = min(messages)
    found = run_json("lookup", store, "--physical-offset", str(first), expect=0)
    assert found["mode"] == "physical_offset"
    assert [m["physical_offset"] for m in found["messages"]] == [first]


README = Path(__file__).resolve().parent.parent / "README.md"
TYPER_OWN = {"--help", "--install-completion", "--show-completion"}
# Every hidden option: an old spelling kept for a release, each parsed by a test above.
HIDDEN = {
    "lookup": {"--phy-offset", "--time", "--begin", "--end"},
    "consumequeue": {"--from"},
    "recover": {"--apply-to"},
    "synth": {"-n", "--json", "-q"},
}


def _options() -> dict[str, list[tuple[tuple[str, ...], bool]]]:
    """Per command, each option's spellings and whether it is hidden."""
    import typer.main

    from rmqinspect.cli.app import app

    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return {
        name: [
            (tuple(p.opts), bool(getattr(p, "hidden", False)))
            for p in command.params
            if p.param_type_name == "option" and not TYPER_OWN & set(p.opts)
        ]
        for name, command in group.commands.items()
    }


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end, text.index(start))]


def test_every_option_is_in_the_vocabulary_or_its_commands_section() -> None:
    """The rule: an option two commands take is a row of README's Vocabulary table (one
    meaning everywhere); an option of one command alone is described in README (its section).
    A short flag stands for one long option in every command."""
    text = README.read_text(encoding="utf-8")
    table = _section(text, "### Vocabulary", "Every command takes")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    takers: dict[str, set[str]] = {}
    shorts: dict[str, set[str]] = {}
    for command, options in _options().items():
        for spellings, hidden in options:
            if hidden:
                continue
            long = next(s for s in spellings if s.startswith("--"))
            takers.setdefault(long, set()).add(command)
            for short in (s for s in spellings if not s.startswith("--")):
                shorts.setdefault(short, set()).add(long)
    assert {s: longs for s, longs in shorts.items() if len(longs) > 1} == {}
    shared = {long for long, commands in takers.items() if len(commands) > 1}
    assert {
        long
        for long in shared
        if not any(_names(long, re.split(r"(?<!\\)\|", row)[1]) for row in rows)
    } == set()
    assert {long for long in takers.keys() - shared if not _names(long, text)} == set()


def _names(option: str, text: str) -> bool:
    """Whether ``text`` names ``option`` as a word (`--x`, `cmd --x Y`, `--a/--x`)."""
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def test_every_hidden_option_is_an_old_spelling_listed_as_changed() -> None:
    text = README.read_text(encoding="utf-8")
    changed = _section(text, "## Changed names and behaviour", "## For developers")
    hidden = {
        command: {s for spellings, h in options if h for s in spellings}
        for command, options in _options().items()
    }
    assert {c: h for c, h in hidden.items() if h} == HIDDEN
    for command, spellings in HIDDEN.items():
        for old in spellings:
            assert _names(old, changed), (command, old)
