"""The row renderer of long tables (render/output.RowTable): drawn as rich draws a table, fast,
escaped and capped; ``--body`` in tables; lists capped on a terminal; colour; 80 columns."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.table import Table

from rmqinspect.format.message_json import BodyFormat
from rmqinspect.render.message import message_detail_table, messages_table
from rmqinspect.render.output import (
    TERMINAL_ROWS,
    Column,
    RowTable,
    print_table,
    print_table_batches,
)
from rmqinspect.render.values import MAX_CELL_CHARS
from rmqinspect.synth import damage
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import SMALL_LAYOUT, build_store, run
from tests.render_helpers import run_in_terminal
from tests.test_render_message import record

T0 = 1_714_557_600_000
ROWS = [("0", "TopicA", "标签甲", "a few words here"), ("1410", "订单", "", "x")]


def printed(table: object, capsys: pytest.CaptureFixture[str]) -> str:
    print_table(table)
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", [120, 40])
def test_rows_are_drawn_as_rich_draws_them(
    columns: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same box, header, title and cells, wide (CJK) characters counted two cells; at 40
    # columns rich and the renderer both wrap the widest column at its spaces.
    monkeypatch.setenv("COLUMNS", str(columns))
    rich_table = Table(title="Rows", title_justify="left")
    ours = RowTable("Rows", [Column("n", right=True), Column("t"), Column("tag"), Column("w")])
    for col, justify in (("n", "right"), ("t", "left"), ("tag", "left"), ("w", "left")):
        rich_table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for row in ROWS:
        rich_table.add_row(*row)
        ours.add_row(*row)
    expected = printed(rich_table, capsys)
    assert printed(ours, capsys) == expected
    if columns == 40:
        assert "│ a few words │" in expected


def test_cells_are_escaped_capped_and_flags_read_yes_no(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "2000")
    table = RowTable("Key K\x1b[31m", [Column("a"), Column("b"), Column("c")])
    table.add_row("T\x1b[2JA", "x" * (MAX_CELL_CHARS + 10), True)
    out = printed(table, capsys)
    assert "\x1b" not in out and "T\\x1b[2JA" in out
    assert out.startswith("Key K\\x1b[31m ")
    assert f"… ({MAX_CELL_CHARS + 10:,} chars; 10 not shown)" in out
    assert "│ yes │" in out


def test_messages_at_80_columns_keep_times_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    records = [record(i * 200, body=b"b" * 60) for i in range(3)]
    lines = printed(messages_table(records, "Messages"), capsys).splitlines()
    assert all(cell_len(line) <= 80 for line in lines)
    # The body made way first; headers wrap at their spaces; offsets and times are whole.
    assert lines[2:4] == [
        "┃     phy ┃ topic  ┃ queue ┃       q ┃ store time               ┃ tags ┃ keys  ┃",
        "┃  offset ┃        ┃       ┃  offset ┃                          ┃      ┃       ┃",
    ]
    assert lines[7] == (
        "│     400 │ TopicA │     3 │      17 │ 2024-05-01T10:00:00.000Z │ TagA │ K1 K2 │"
    )


def test_verify_at_80_columns_never_cuts_a_check_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = build_store(tmp_path / "s", [MessageSpec(topic="T", body=b"x" * 50) for _ in range(4)])
    damage.flip_body_byte(store, message_index=1)
    monkeypatch.setenv("COLUMNS", "80")
    result = run("verify", store, "-F", "table")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert all(cell_len(line) <= 80 for line in lines)
    # It ends with its verdict: the errors and warnings it found.
    assert lines[-1] == "verdict: 1 error, 2 warnings"
    findings = lines[: lines.index(next(line for line in lines if line.startswith("└")))]
    cells = [c.strip() for line in findings for c in line.split("│")[2:3]]
    # A check id wraps only after its dot: each piece is a whole part of an id.
    assert "commitlog.body_crc" in cells
    assert all(re.fullmatch(r"([a-z_]+\.?)*", c) for c in cells), cells


@pytest.mark.parametrize(
    ("body", "header", "cell"),
    [
        (BodyFormat.TEXT, "body", "hello"),
        (BodyFormat.HEX, "body (hex)", "68656c6c6f"),
        (BodyFormat.BASE64, "body (base64)", "aGVsbG8="),
    ],
)
def test_tables_show_the_body_as_asked(
    body: BodyFormat,
    header: str,
    cell: str,
    capsys: pytest.CaptureFixture[str],
    wide_console: None,
) -> None:
    out = printed(messages_table([record()], "M", body), capsys)
    assert re.search(f"┃ {re.escape(header)} +┃", out) and re.search(f"│ {cell} +│", out)
    detail = printed(message_detail_table(record(), "M", body), capsys)
    assert f"│ {cell}" in detail


def test_tables_leave_the_body_out_with_body_none(
    capsys: pytest.CaptureFixture[str], wide_console: None
) -> None:
    out = printed(messages_table([record()], "M", BodyFormat.NONE), capsys)
    assert "body" not in out and "hello" not in out
    assert "hello" not in printed(message_detail_table(record(), "M", BodyFormat.NONE), capsys)


def test_long_hex_body_preview_is_cut_with_an_ellipsis(
    capsys: pytest.CaptureFixture[str], wide_console: None
) -> None:
    out = printed(messages_table([record(body=bytes(range(100)))], "M", BodyFormat.HEX), capsys)
    assert "│ " + bytes(range(24)).hex() + "… │" in out


def test_messages_cli_honours_body_in_a_table(tmp_path: Path, wide_console: None) -> None:
    store = build_store(tmp_path / "s", [MessageSpec(topic="T", body=b"hello")], SMALL_LAYOUT)
    hexed = run("messages", store, "-F", "table", "--body", "hex")
    assert hexed.exit_code == 0 and "68656c6c6f" in hexed.stdout
    assert "hello" not in run("messages", store, "-F", "table", "--body", "none").stdout


def _numbered(n: int, capped: bool) -> RowTable:
    table = RowTable("L", [Column("n", right=True)], capped_on_terminal=capped)
    for i in range(n):
        table.add_row(i)
    return table


def _terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)


def test_long_lists_are_capped_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], wide_console: None
) -> None:
    n = TERMINAL_ROWS + 5
    piped = printed(_numbered(n, True), capsys)
    assert f"│ {n - 1} │" in piped and "showing" not in piped  # piped: every row
    _terminal(monkeypatch)
    out = printed(_numbered(n, True), capsys).splitlines()
    assert out[-1] == f"showing {TERMINAL_ROWS} of {n}, use -F json for all"
    assert out[-3] == f"│ {TERMINAL_ROWS - 1} │" and f"│ {TERMINAL_ROWS} │" not in out
    # A list that is not a report's (a stream the user asked for) is never capped.
    assert f"│ {n - 1} │" in printed(_numbered(n, False), capsys)
    # Batches: the rows past the cap are counted, not shown.
    count = print_table_batches(
        range(n), lambda rows, first: _rows_table(rows), capped_on_terminal=True
    )
    out = capsys.readouterr().out.splitlines()
    assert count == n and out[-1] == f"showing {TERMINAL_ROWS} of {n}, use -F json for all"


def _rows_table(rows: list[int]) -> RowTable:
    table = RowTable(None, [Column("n")])
    for i in rows:
        table.add_row(i)
    return table


def _finding_table(capsys: pytest.CaptureFixture[str]) -> str:
    table = RowTable("F", [Column("severity", styles={"error": "bold red"}), Column("check")])
    table.add_row("error", "commitlog.body_crc")
    table.add_row("info", "x")
    return printed(table, capsys)


def test_severity_is_coloured_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b" not in _finding_table(capsys)  # piped
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    coloured = _finding_table(capsys)
    assert "\x1b[1;31merror   \x1b[0m" in coloured  # the cell, padded, in bold red
    assert "\x1b[1m" in coloured  # the header, bold as rich's
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _finding_table(capsys)
    assert "31m" not in plain and "\x1b[1merror" in plain  # still bold, no colour


def test_recover_ends_with_its_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [MessageSpec(topic="T", body=b"x" * 50, store_timestamp=T0 + i) for i in range(6)]
    store = build_store(tmp_path / "s", specs)
    damage.flip_body_byte(store, message_index=2)
    monkeypatch.setenv("COLUMNS", "120")
    result = run("recover", store, "-F", "table")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert "Messages the restart destroys" in result.stdout
    assert lines[-1].startswith("verdict: the restart loses data")
    assert sum("verdict" in line for line in lines) == 1


def test_recover_on_a_terminal_keeps_its_verdict_in_view(tmp_path: Path) -> None:
    # 60 messages, the third damaged: the restart loses the 57 after it, more than a terminal
    # is shown; the list stops at TERMINAL_ROWS and says so, and the verdict comes last.
    specs = [MessageSpec(topic="T", body=b"x" * 50, store_timestamp=T0 + i) for i in range(60)]
    store = build_store(tmp_path / "s", specs)
    damage.flip_body_byte(store, message_index=2)
    code, screen = run_in_terminal("recover", str(store), columns=160)
    assert code == 1
    text = [line for line in screen if line]
    assert text[-1].startswith("verdict: the restart loses data: 57 intact messages")
    assert text[-2] == f"showing {TERMINAL_ROWS} of 57, use -F json for all"
    lost_rows = [line for line in screen if re.search(r"│ [0-9A-F]{32} +│", line)]
    assert len(lost_rows) == TERMINAL_ROWS


def test_index_entries_at_80_columns_keep_the_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = [MessageSpec(topic="T", body=b"x", keys=[f"K{i}"]) for i in range(3)]
    store = build_store(tmp_path / "s", specs)
    monkeypatch.setenv("COLUMNS", "80")
    result = run("index", store, "--entries", "-F", "table")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert all(cell_len(line) <= 80 for line in lines)
    # The slot and the key hash made way; the entry, what it points at and its chain stay.
    # A header may wrap (the file column holds paths relative to the store): join its lines.
    start = next(i for i, line in enumerate(lines) if line.startswith("┃") and "entry" in line)
    stop = next(i for i in range(start, len(lines)) if not lines[i].startswith("┃"))
    header = [line.strip("┃").split("┃") for line in lines[start:stop]]
    cells = [
        " ".join(part.strip() for part in col if part.strip()) for col in zip(*header, strict=True)
    ]
    assert cells == ["file", "entry", "phy offset", "store time", "prev"]
    monkeypatch.setenv("COLUMNS", "200")
    wide = run("index", store, "--entries", "-F", "table").stdout
    assert "┃ keyHash ┃" in wide and "slot ┃" in wide


@pytest.mark.parametrize("columns", [120, 30])
def test_caption_is_drawn_as_rich_draws_it(
    columns: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Under the table, wrapped at its width (groups' notes).
    monkeypatch.setenv("COLUMNS", str(columns))
    caption = "consumes TopicA: its retry/DLQ copies' RETRY_TOPIC names it"
    rich_table = Table(title="G", title_justify="left", caption=caption, caption_justify="left")
    ours = RowTable("G", [Column("topic"), Column("queue")], caption=caption)
    for col in ("topic", "queue"):
        rich_table.add_column(col)
    rich_table.add_row("TopicA", "0")
    ours.add_row("TopicA", 0)
    expected = printed(rich_table, capsys)
    assert printed(ours, capsys) == expected
    assert "consumes TopicA" in expected


def _groups_table(least: int) -> RowTable:
    table = RowTable(
        None,
        [
            Column("offset", whole=True, drop=1),
            Column("groups", whole=True, least=least),
            Column("topic", whole=True),
        ],
    )
    table.add_row(12345678, "groupA: consumed, groupB: pending", "TopicA")
    return table


def test_an_identifier_list_keeps_its_least_width_before_others_go(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A whole column with ``least`` (trace's group list) is not squeezed below it while a
    # droppable column is left: the droppable one goes. Without, the list wraps at each space.
    monkeypatch.setenv("COLUMNS", "40")
    lines = printed(_groups_table(20), capsys).splitlines()
    assert lines[1] == "┃ groups                      ┃ topic  ┃"
    assert lines[3:5] == [
        "│ groupA: consumed, groupB:   │ TopicA │",
        "│ pending                     │        │",
    ]
    lines = printed(_groups_table(0), capsys).splitlines()
    assert lines[1] == "┃ offset   ┃ groups           ┃ topic  ┃"
    assert lines[3] == "│ 12345678 │ groupA:          │ TopicA │"
    # Where even its least does not fit, it wraps at its spaces, no token cut.
    monkeypatch.setenv("COLUMNS", "30")
    lines = printed(_groups_table(20), capsys).splitlines()
    assert lines[3:5] == ["│ groupA: consumed, │ TopicA │", "│ groupB: pending   │        │"]
