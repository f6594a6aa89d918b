"""The store-setting options, declared once in ``cli/options.py``, reach every command that
opens a store, and only those."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer

from rmqinspect.cli.app import app
from rmqinspect.cli.options import with_store_options
from rmqinspect.store.model import StoreOptions
from tests.cli_helpers import build_store, orders, run, run_json

STORE_SETTINGS = {
    "--commitlog-file-size",
    "--cq-file-size",
    "--index-slots",
    "--index-entries",
    "--profile",
}
OPENS_A_STORE = ("info", "messages", "consumequeue", "index", "offsets", "lookup", "recover")


def _options(command: str) -> dict[str, str | None]:
    """Each option of ``command`` by its long name, with its help panel."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    params = group.commands[command].params
    return {
        name: getattr(p, "rich_help_panel", None)
        for p in params
        for name in p.opts
        if name.startswith("--")
    }


@pytest.mark.parametrize("command", OPENS_A_STORE)
def test_every_store_command_has_the_store_settings_once(command: str) -> None:
    options = _options(command)
    assert {o: options.get(o) for o in STORE_SETTINGS} == dict.fromkeys(
        STORE_SETTINGS, "Store settings"
    )
    assert "--format" in options


@pytest.mark.parametrize("command", ["checkpoint", "decode-id"])
def test_commands_that_open_no_store_have_none(command: str) -> None:
    assert not STORE_SETTINGS & set(_options(command))


def test_settings_reach_the_store(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(4))
    inferred = run_json("info", store, expect=0)
    given = run_json("info", store, "--commitlog-file-size", str(32 * 1024), expect=0)
    sizes = [
        next(f["file_size"] for f in doc["families"] if f["name"] == "commitlog")
        for doc in (inferred, given)
    ]
    assert sizes == [64 * 1024, 32 * 1024]
    index = run_json("index", store, "--index-slots", "64", "--index-entries", "400", expect=0)
    assert index["files"][0]["geometry"]["basis"] == "given"


@pytest.mark.parametrize("command", ["info", "recover"])
def test_profile_auto_detects_and_a_version_is_explicit(command: str, tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(4))

    def reasons(*args: str) -> list[str]:
        result = run(command, store, *args, "--format", "json")
        assert result.exit_code == 0, result.stderr
        doc = json.loads(result.stdout)
        got: list[str] = (
            doc["profile_reasons"] if command == "recover" else doc["profile"]["reasons"]
        )
        return got

    assert reasons("--profile", "auto") == reasons() != ["given explicitly"]
    assert reasons("--profile", "5.1") == ["given explicitly"]
    bad = run(command, store, "--profile", "6.0")
    assert bad.exit_code == 2 and "'6.0' is not one of" in bad.stderr


def test_the_decorator_hands_over_one_store_options() -> None:
    seen: list[StoreOptions] = []

    def command(store: Path, *, store_options: StoreOptions) -> None:
        seen.append(store_options)

    wrapped = with_store_options(command)
    wrapped(Path("x"), cq_file_size=1000, profile=None)
    assert seen == [StoreOptions(cq_file_size=1000)]

    def no_settings(store: Path) -> None:
        raise AssertionError("never called")

    with pytest.raises(TypeError, match="no store_options parameter"):
        with_store_options(no_settings)


@pytest.mark.parametrize(
    ("args", "listed"),
    [
        (["info", ".", "-F", "xml"], "'xml' is not one of 'table', 'json', 'jsonl'."),
        (["messages", ".", "--body", "rot13"], "'rot13' is not one of 'text', 'hex', 'base64'"),
        (["info", ".", "--profile", "6"], "'6' is not one of '4.9', '5.1', '5.3', 'auto'."),
        (["synth", "x", "--profile", "auto"], "'auto' is not one of '4.9', '5.1', '5.3'."),
        (["synth", "x", "--damage", "fire"], "'fire' is not one of 'torn-tail', 'flip-body'"),
    ],
)
def test_a_wrong_choice_lists_the_choices(args: list[str], listed: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    said = " ".join(result.stderr.replace("│", " ").split())
    assert listed in said and "Value error" not in said


def test_choices_are_case_insensitive(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(2))
    assert json.loads(run("info", store, "-F", "JSON").stdout)["profile"]["version"] == "4.9"


def _help_texts() -> list[tuple[str, str]]:
    """(command, text) for every command's description and option help."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    out = []
    for name, command in group.commands.items():
        out.append((name, command.help or ""))
        out.extend((name, getattr(p, "help", None) or "") for p in command.params)
    return out


def test_help_shows_bracketed_text_literally(wide_console: None) -> None:
    # Help is rendered as rich markup: an unescaped "[min, max]" vanished from offsets --help.
    checked = 0
    for name, text in _help_texts():
        for inner in re.findall(r"\\?\[([^\]]*)\]", text):
            shown = " ".join(run(name, "--help").stdout.replace("│", " ").split())
            assert f"[{inner}]" in shown, (name, inner)
            checked += 1
    assert checked > 0
