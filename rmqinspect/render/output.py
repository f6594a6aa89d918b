"""One output sink for every command: rich tables on a terminal, JSON/JSON Lines for machines.

Data goes to stdout; warnings, errors and progress go to stderr.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import enum
import functools
import json
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

import orjson

# The table is rowtable's; the commands take it from here, with the rest of the sink.
from rmqinspect.render.rowtable import TERMINAL_ROWS as TERMINAL_ROWS
from rmqinspect.render.rowtable import Column as Column
from rmqinspect.render.rowtable import RowTable as RowTable
from rmqinspect.render.rowtable import Styler
from rmqinspect.render.rowtable import cell_text as cell_text
from rmqinspect.render.values import capped, encodable, printable, unencodable

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.progress import Progress
    from rich.table import Table
    from rich.text import Text

# rich is imported where a table, a bar or a console is made: JSON output starts without it.


class OutputFormat(enum.StrEnum):
    TABLE = "table"
    JSON = "json"
    JSONL = "jsonl"


def resolve_format(requested: OutputFormat | None) -> OutputFormat:
    """The default is a table on a terminal and JSON when stdout is piped."""
    if requested is not None:
        return requested
    return OutputFormat.TABLE if sys.stdout.isatty() else OutputFormat.JSON


def stdout_console() -> Console:
    from rich.console import Console

    class _StdoutConsole(Console):
        """The console of stdout. It shows every string it renders (cells, titles, captions)
        with control characters escaped: store data must not drive the terminal (an ESC
        sequence in a topic name) or split a row; JSON output is exact and escapes them. A
        string longer than a table cell shows is cut there, saying how much is not shown."""

        def render_str(self, text: str, **kwargs: Any) -> Text:
            return super().render_str(printable(capped(text)), **kwargs)

        def on_broken_pipe(self) -> None:
            # rich exits 1 here, which the exit codes reserve for findings; the reader going
            # away (``| head``) is handled, for every format alike, by the CLI's error handler.
            self.quiet = True
            raise BrokenPipeError

    # No markup: cells and titles hold store data (keys, tags, bodies, topic names), and a
    # "[...]" there is text to show, not a style to apply or a tag that fails to close.
    return _StdoutConsole(soft_wrap=False, highlight=False, markup=False)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def warn(message: str) -> None:
    """One warning line on stderr (control characters escaped, so it stays one line)."""
    print(f"rmqinspect: warning: {printable(message)}", file=sys.stderr)


_PLAIN = frozenset({str, int, float, bool, type(None)})
_BY_VALUE: set[type] = set()  # enum classes met (flags aside): a member is shown as its value


@functools.cache
def _field_names(cls: type) -> tuple[str, ...] | None:
    """A dataclass's field names; None for any other class."""
    if not dataclasses.is_dataclass(cls):
        return None
    return tuple(f.name for f in dataclasses.fields(cls))


def to_jsonable(value: Any) -> Any:
    """Plain JSON types from dataclasses, enums, paths, bytes (base64) and mappings."""
    # Plain values first, without a call for a plain field, and what a class is found once per
    # class: reports of 800,000 rows (offsets, findings) spent most of their time in this
    # function's checks.
    cls: type = type(value)
    if cls in _PLAIN:
        return value
    names = _field_names(cls)
    if names is not None:
        out = {}
        for name in names:
            v = getattr(value, name)
            kind = type(v)
            out[name] = v if kind in _PLAIN else v.value if kind in _BY_VALUE else to_jsonable(v)
        return out
    if isinstance(value, enum.Flag):
        return [(m.name or "").lower() for m in value]  # the members set, by name
    if isinstance(value, enum.Enum):
        _BY_VALUE.add(cls)
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    return value


def print_json(data: Any) -> None:
    print_plain_json(to_jsonable(data))


def print_plain_json(data: Any) -> None:
    """A document of plain JSON types (:func:`to_jsonable`'s output) as JSON."""
    sys.stdout.write(json_text(data) + "\n")


def encodable_json(value: Any) -> Any:
    """A plain JSON value with every string, keys too, as :func:`encodable` writes it: JSON
    output is UTF-8, and a lone surrogate (an undecodable byte of a file name, a ``\\ud800``
    escape in config JSON) is not UTF-8."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, dict):
        return {
            encodable(k) if isinstance(k, str) else k: encodable_json(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [encodable_json(v) for v in value]
    return value


_ORJSON_INDENT = {2: orjson.OPT_INDENT_2, None: 0}


def json_text(value: Any, indent: int | None = 2) -> str:
    """Plain JSON values as a JSON document (``indent=None``: compact) that is valid UTF-8: the
    one encoder of every JSON document rmqinspect writes, to stdout or to a file. orjson
    writes it where it can (Python's indenting encoder spent 10 s on a verify report of 15,000
    findings); a value it refuses (a lone surrogate, an integer beyond 64 bits, a key that is
    not a string) goes through the json module."""
    option = _ORJSON_INDENT.get(indent)
    if option is not None:
        with contextlib.suppress(TypeError):
            return orjson.dumps(value, option=option).decode()
    separators = None if indent is not None else (",", ":")
    text = json.dumps(value, indent=indent, separators=separators, ensure_ascii=False)
    # Only strings carry characters: one search of the text finds any lone surrogate.
    if not unencodable(text):
        return text
    return json.dumps(
        encodable_json(value), indent=indent, separators=separators, ensure_ascii=False
    )


def print_document(doc: Any, fmt: OutputFormat) -> bool:
    """A one-document report as JSON, or as its one JSON Lines line; False for a table, which
    the caller draws."""
    if fmt is OutputFormat.JSON:
        print_json(doc)
        return True
    if fmt is OutputFormat.JSONL:
        print_jsonl([doc])
        return True
    return False


def print_jsonl(rows: Iterable[Any]) -> int:
    """Write one JSON object per line as rows arrive; returns the count."""
    return print_plain_jsonl(to_jsonable(row) for row in rows)


def dumps(row: Any) -> bytes:
    """One compact JSON value as UTF-8: the encoder of every streamed row (orjson: a scan can
    emit millions). A value orjson refuses (a lone surrogate, an integer beyond 64 bits) is
    written by :func:`json_text` instead."""
    try:
        return orjson.dumps(row)
    except TypeError:
        return json_text(row, indent=None).encode()


JSONL_SEPARATOR = b"\n"


def array_separator(indent: str = "") -> bytes:
    """What follows each element of a streamed JSON array whose own indentation is
    ``indent`` (one compact element per line)."""
    return f",\n{indent}  ".encode()


def print_plain_jsonl(rows: Iterable[dict[str, Any]]) -> int:
    """JSON Lines of rows that are already plain JSON types (no conversion pass: a scan can
    emit millions of rows)."""
    n = 0

    def blocks() -> Iterator[bytes]:
        nonlocal n
        for row in rows:
            n += 1
            yield dumps(row) + JSONL_SEPARATOR

    print_jsonl_blocks(blocks())
    return n


def print_jsonl_blocks(blocks: Iterable[bytes | memoryview]) -> None:
    """JSON Lines already encoded: blocks of rows, each row followed by ``JSONL_SEPARATOR``."""
    out = _stdout_bytes()
    for block in blocks:
        out.write(block)


def _stdout_bytes() -> BinaryIO:
    """stdout for bytes, after whatever was written to it as text."""
    sys.stdout.flush()
    return sys.stdout.buffer


def print_json_array_blocks(blocks: Iterable[bytes | memoryview], indent: str = "") -> None:
    """A JSON array written as it arrives (a scan can be far larger than memory), one compact
    element per line: blocks of elements, each followed by ``array_separator(indent)``;
    ``indent`` is the array's own indentation."""
    separator = array_separator(indent)
    out = _stdout_bytes()
    out.write(b"[")
    wrote = False
    for block in blocks:
        if block:
            # The separator before an element, not after it: the last one needs none.
            out.write((separator if wrote else separator[1:]) + block[: -len(separator)])
            wrote = True
    out.write(f"\n{indent}]".encode() if wrote else b"]")
    out.flush()


def print_json_array(rows: Iterable[dict[str, Any]]) -> int:
    """A streamed JSON array of plain rows; returns the count."""
    n = _print_rows_array(rows, "")
    sys.stdout.write("\n")
    return n


def _print_rows_array(rows: Iterable[Any], indent: str) -> int:
    n = 0
    separator = array_separator(indent)

    def blocks() -> Iterator[bytes]:
        nonlocal n
        for row in rows:
            n += 1
            yield dumps(row) + separator

    print_json_array_blocks(blocks(), indent)
    return n


def print_json_with_array(head: dict[str, Any], key: str, rows: Iterable[dict[str, Any]]) -> int:
    """The JSON object ``head``, pretty-printed like every JSON document, with one more member,
    ``key``: a streamed array of plain rows (the head is small, the array may not be); returns
    the row count."""
    return print_json_with_arrays(head, {key: rows})[0]


def print_json_with_arrays(head: dict[str, Any], arrays: Mapping[str, Iterable[Any]]) -> list[int]:
    """:func:`print_json_with_array` with several streamed arrays (at least one), members
    after ``head``'s in ``arrays``' order; returns each array's row count."""
    counts: list[int] = []
    for key, rows in arrays.items():
        if counts:
            sys.stdout.write(f",\n  {json_text(key, indent=None)}: ")
        else:
            sys.stdout.write(json_text(head | {key: None}).removesuffix("null\n}"))
        counts.append(_print_rows_array(rows, "  "))
    sys.stdout.write("\n}\n")
    return counts


def print_jsonl_with_arrays(head: dict[str, Any], arrays: Mapping[str, Iterable[Any]]) -> None:
    """The same object as :func:`print_json_with_arrays` as one JSON Lines line, its arrays
    written as they arrive."""
    out = _stdout_bytes()
    out.write(dumps(head)[:-1])  # the head's members, the object left open
    comma = b"," if head else b""
    for key, rows in arrays.items():
        out.write(comma + dumps(key) + b":[")
        between = b""
        for row in rows:
            out.write(between + dumps(row))
            between = b","
        out.write(b"]")
        comma = b","
    out.write(b"}" + JSONL_SEPARATOR)
    out.flush()


TABLE_BATCH_ROWS = 500  # a streamed table is printed in batches so memory stays bounded

T = TypeVar("T")


def print_table_batches(
    rows: Iterable[T],
    table: Callable[[list[T], bool], RowTable | Table],
    capped_on_terminal: bool = False,
) -> int:
    """Rows as tables of at most TABLE_BATCH_ROWS rows; ``table(batch, first)`` builds one (a
    title only when ``first``). No rows still print one empty table. With
    ``capped_on_terminal``, a terminal is shown the first TERMINAL_ROWS rows and a line saying
    how many there are. Returns the row count."""
    cap = TERMINAL_ROWS if capped_on_terminal and sys.stdout.isatty() else None
    count = 0
    batch: list[T] = []
    for row in rows:
        count += 1
        if cap is not None and count > cap:
            continue  # counted for the note, not shown
        batch.append(row)
        if len(batch) >= TABLE_BATCH_ROWS:
            print_table(table(batch, count == len(batch)))
            batch = []
    if batch or not count:
        print_table(table(batch, count == len(batch)))
    if cap is not None and count > cap:
        print_table(not_shown_line(cap, count))
    return count


def not_shown_line(shown: int, total: int) -> str:
    """The line under a list a terminal was shown only the head of."""
    return f"showing {shown:,} of {total:,}, use -F json for all"


# Progress bars on the terminal now. A table printed under a live bar would be written between
# the bar's redraws and leave a stale copy of it ("10%") among its rows, so printing pauses them.
_LIVE_BARS: list[Progress] = []


def print_table(table: RowTable | RenderableType) -> None:
    """A table (or a line, or any rich renderable) on stdout."""
    paused = list(_LIVE_BARS)
    for bar in paused:
        bar.stop()  # transient: the bar is erased and the cursor put back where it began
    try:
        console = stdout_console()
        if isinstance(table, RowTable):
            lines, hidden = table.lines(console.width, Styler(console))
            sys.stdout.write("".join(line + "\n" for line in lines))
            if hidden is not None:
                console.print(not_shown_line(len(table.rows) - hidden, len(table.rows)))
        else:
            console.print(table)
    finally:
        for bar in paused:
            bar.start()


# How a finding's severity reads on a terminal: the same words, coloured.
SEVERITY_STYLES = {"error": "bold red", "warning": "yellow"}


def kind_findings_table(
    kinds: Iterable[str], errors: Collection[str], subject: str, *, first: bool | None = None
) -> RowTable:
    """The findings table of a command whose findings are kinds (``transactions``, ``pop``):
    kind, position, ``subject`` (what the finding is about) and detail. A kind's colour is its
    weight: one of ``errors`` (an inconsistency, exit 1) an error, the rest a warning. With
    ``first``, the table of one batch for :func:`print_table_batches` (titled if ``first``;
    the batches cap the list on a terminal)."""
    styles = {k: SEVERITY_STYLES["error" if k in errors else "warning"] for k in kinds}
    return RowTable(
        "Findings" if first is not False else None,
        [
            Column("kind", whole=True, styles=styles),
            Column("at", right=True, whole=True),
            Column(subject, whole=True, drop=1),
            Column("detail", fold=True, least=24),
        ],
        capped_on_terminal=first is None,
    )


# How a verdict line reads on a terminal: bad news red, doubt yellow, good news green.
VERDICT_STYLES = {"bad": "bold red", "doubt": "bold yellow", "good": "bold green"}


def verdict_line(text: str, mood: str) -> Text:
    """A command's last line, ``verdict: ...``, in its mood's colour (``bad``, ``doubt``,
    ``good``) where the console shows colour; escaped as every string of the stdout console."""
    return mood_line(f"verdict: {text}", mood)


def mood_line(text: str, mood: str | None) -> Text:
    """A line in a verdict's colour (``bad``, ``doubt``, ``good``; None: plain), escaped and
    capped: a conclusion that is one of several (trace's fate of a message per group)."""
    from rich.text import Text

    return Text(printable(capped(text)), style=VERDICT_STYLES[mood] if mood else "")


def print_line(text: str, mood: str | None = None) -> None:
    """A line of text on stdout, escaped, wrapped at the terminal's width as tables are, in a
    verdict's colour with a ``mood``."""
    print_table(mood_line(text, mood))


def key_value_table(title: str, rows: Iterable[tuple[str, Any]]) -> Table:
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, cell_text(value))
    return table


@contextmanager
def progress_bar(total: int, description: str, enabled: bool) -> Iterator[Any]:
    """A byte-progress bar on stderr when it is a terminal and ``enabled``; else a no-op.

    Yields a callable ``advance(n_bytes)``.
    """
    if not enabled or total <= 0 or not stderr_console().is_terminal:
        yield lambda _n: None
        return
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    console = stderr_console()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)
        _LIVE_BARS.append(bar)
        try:
            yield lambda n: bar.advance(task, n)
        finally:
            _LIVE_BARS.remove(bar)
