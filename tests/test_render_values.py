"""The shared value formatters and output helpers every renderer uses."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.table import Table

from rmqinspect.format.times import iso_ms
from rmqinspect.render.output import (
    TABLE_BATCH_ROWS,
    OutputFormat,
    dumps,
    json_text,
    key_value_table,
    print_json,
    print_json_array,
    print_json_with_array,
    print_json_with_arrays,
    print_jsonl,
    print_jsonl_with_arrays,
    print_table,
    print_table_batches,
    resolve_format,
    to_jsonable,
)
from rmqinspect.render.values import (
    MAX_CELL_CHARS,
    capped,
    encodable,
    printable,
    size_cell,
    time_cell,
    with_times,
)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_714_557_600_123, "2024-05-01T10:00:00.123Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (-62135596800000, "0001-01-01T00:00:00.000Z"),
        (253402300799999, "9999-12-31T23:59:59.999Z"),
        (253402300800000, None),
        (-62135596800001, None),
        (None, None),
    ],
)
def test_iso_ms(ms: int | None, text: str | None) -> None:
    assert iso_ms(ms) == text


@given(st.integers(-62135596800000, 253402300799999))
def test_iso_ms_reads_back_to_the_same_millisecond(ms: int) -> None:
    text = iso_ms(ms)
    assert text is not None and len(text) == 24 and text.endswith("Z")
    back = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert (back - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1) == ms


def test_time_and_size_cells() -> None:
    assert time_cell(None) == ""
    assert time_cell(0) == "0 (unset)"
    assert time_cell(1_714_557_600_000) == "2024-05-01T10:00:00.000Z (1714557600000)"
    assert time_cell(2**62) == f"{2**62} (out of range)"
    assert size_cell(1023) == "1023 B"
    assert size_cell(1536) == "1.5 KiB (1536)"
    assert size_cell(3 * 2**30) == f"3.0 GiB ({3 * 2**30})"
    assert size_cell(2**50) == f"1024.0 TiB ({2**50})"


def test_with_times_adds_a_sibling_after_each_timestamp() -> None:
    doc = with_times(
        {"store_timestamp": 1000, "begin_timestamp": None, "offset": 5, "x_timestamp": "n/a"}
    )
    assert list(doc.items()) == [
        ("store_timestamp", 1000),
        ("store_time", "1970-01-01T00:00:01.000Z"),
        ("begin_timestamp", None),
        ("begin_time", None),
        ("offset", 5),
        ("x_timestamp", "n/a"),  # not epoch ms: no sibling
    ]


class Colour(enum.StrEnum):
    RED = "red"


@dataclass(frozen=True)
class Inner:
    path: Path
    raw: bytes
    colour: Colour


@dataclass(frozen=True)
class Outer:
    inner: Inner
    items: tuple[int, ...]
    table: dict[int, frozenset[str]]


def test_to_jsonable_gives_plain_json_types() -> None:
    value = Outer(Inner(Path("/s/x"), b"\x00\xff", Colour.RED), (1, 2), {7: frozenset({"a"})})
    assert to_jsonable(value) == {
        "inner": {"path": "/s/x", "raw": "AP8=", "colour": "red"},
        "items": [1, 2],
        "table": {"7": ["a"]},
    }


def test_json_and_jsonl_keep_unicode_and_escape_what_json_must(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tricky = {"text": 'é中 "quoted" \\ \n\t\x00', "bytes": b"\x01"}
    print_json(tricky)
    out = capsys.readouterr().out
    assert "é中" in out and "\\u0000" in out and "\\n" in out
    assert json.loads(out) == tricky | {"bytes": "AQ=="}
    assert print_jsonl(iter([tricky, {"n": 1}])) == 2
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [tricky | {"bytes": "AQ=="}, {"n": 1}]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("0000\udcff", "0000\\xff"),  # an undecodable byte of a name (surrogateescape)
        ("T\ud800A", "T\\ud800A"),  # a lone surrogate from a "\ud800" escape in JSON
        ("\udc80\udfff\udbff", "\\x80\\udfff\\udbff"),
        ("a\\x\udcff", "a\\\\x\\xff"),  # backslashes doubled: the escape reads back
        ("a\\xff", "a\\xff"),  # text UTF-8 can carry stays exact, backslashes too
        ("é\x1b", "é\x1b"),
    ],
)
def test_encodable_escapes_only_what_utf8_cannot_carry(text: str, shown: str) -> None:
    assert encodable(text) == shown
    shown.encode("utf-8")


def test_json_and_tables_escape_lone_surrogates_alike(capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"file\udcff": ["commitlog/0000\udcff", "T\ud800", 2**70], "n": 1}
    expected = {"file\\xff": ["commitlog/0000\\xff", "T\\ud800", 2**70], "n": 1}
    assert json.loads(dumps(doc).decode("utf-8")) == expected  # orjson refuses both
    assert json.loads(json_text(doc).encode("utf-8")) == expected
    print_json(doc)
    assert json.loads(capsys.readouterr().out.encode("utf-8")) == expected
    print_jsonl([doc])
    assert json.loads(capsys.readouterr().out.encode("utf-8")) == expected
    assert printable("\x1b\udcff") == "\\x1b\\xff"
    print_table(key_value_table("in \udcff", [("commitlog/0000\udcff", "T\ud800")]))
    out = capsys.readouterr().out
    assert "in \\xff" in out and "commitlog/0000\\xff" in out and "T\\ud800" in out


def test_tables_show_store_text_literally(capsys: pytest.CaptureFixture[str]) -> None:
    """Keys, tags and bodies may hold anything: rich markup must not eat or choke on it."""
    values = ["[order]", "a[/]b", "[bold]x[/bold]", "[link=http://x]y[/link]"]
    print_table(key_value_table("title [red]", [(v, v) for v in values] + [("none", None)]))
    out = capsys.readouterr().out
    assert "title [red]" in out
    for v in values:
        assert out.count(v) == 2, v
    assert "None" not in out


def test_resolve_format_prefers_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_format(OutputFormat.JSONL) is OutputFormat.JSONL
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert resolve_format(None) is OutputFormat.JSON
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert resolve_format(None) is OutputFormat.TABLE


def test_streamed_json_arrays(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"a": 1}, {"b": "é"}]
    assert print_json_array(iter(rows)) == 2
    # Each row is one compact line (orjson's separators), indented inside the array.
    assert capsys.readouterr().out == '[\n  {"a":1},\n  {"b":"é"}\n]\n'
    assert print_json_array(iter([])) == 0
    assert capsys.readouterr().out == "[]\n"
    head = {"queue": {"topic": "T"}, "n": 0}
    assert print_json_with_array(head, "units", iter(rows)) == 2
    out = capsys.readouterr().out
    assert out == (
        '{\n  "queue": {\n    "topic": "T"\n  },\n  "n": 0,\n  "units": [\n'
        '    {"a":1},\n    {"b":"é"}\n  ]\n}\n'
    )
    assert print_json_with_array({}, "entries", iter([])) == 0
    assert json.loads(capsys.readouterr().out) == {"entries": []}


def test_json_with_several_streamed_arrays(capsys: pytest.CaptureFixture[str]) -> None:
    """Each array streamed in turn after the head, as JSON and as one JSON Lines line: the
    same object as the document built whole."""
    head = {"n": 1, "oldest": {"t": "é"}}
    arrays = {"rows": [{"a": 1}, {"b": 2}], "none": [], "last": [3]}
    assert print_json_with_arrays(head, {k: iter(v) for k, v in arrays.items()}) == [2, 0, 1]
    out = capsys.readouterr().out
    assert out == (
        '{\n  "n": 1,\n  "oldest": {\n    "t": "é"\n  },\n  "rows": [\n    {"a":1},\n'
        '    {"b":2}\n  ],\n  "none": [],\n  "last": [\n    3\n  ]\n}\n'
    )
    assert json.loads(out) == head | arrays
    print_jsonl_with_arrays(head, {k: iter(v) for k, v in arrays.items()})
    line = capsys.readouterr().out
    assert line == '{"n":1,"oldest":{"t":"é"},"rows":[{"a":1},{"b":2}],"none":[],"last":[3]}\n'
    print_jsonl_with_arrays({}, {"rows": iter([{"a": 1}])})
    assert capsys.readouterr().out == '{"rows":[{"a":1}]}\n'


def test_table_batches_title_once_and_an_empty_table(capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[int, bool]] = []

    def table(batch: list[int], first: bool) -> Table:
        calls.append((len(batch), first))
        t = Table(title="Rows" if first else None)
        t.add_column("n")
        for n in batch:
            t.add_row(str(n))
        return t

    assert print_table_batches(range(TABLE_BATCH_ROWS * 2 + 1), table) == TABLE_BATCH_ROWS * 2 + 1
    assert calls == [(TABLE_BATCH_ROWS, True), (TABLE_BATCH_ROWS, False), (1, False)]
    assert capsys.readouterr().out.count("Rows") == 1
    calls.clear()
    assert print_table_batches([], table) == 0
    assert calls == [(0, True)] and "Rows" in capsys.readouterr().out


def test_capped_shows_the_first_chars_and_counts_the_rest() -> None:
    assert capped("x" * MAX_CELL_CHARS) == "x" * MAX_CELL_CHARS
    text = "y" * (16 << 20)
    assert capped(text) == "y" * MAX_CELL_CHARS + "… (16,777,216 chars; 16,776,192 not shown)"
    assert capped("abcdef", 4) == "abcd… (6 chars; 2 not shown)"
