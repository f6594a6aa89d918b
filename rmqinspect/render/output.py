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
import re
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

import orjson

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

# The most rows of a report's list (lost messages, findings, lookup hits) a table shows on a
# terminal: the verdict printed after the list must not scroll away. Piped output keeps all.
TERMINAL_ROWS = 40

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
            lines, hidden = table.lines(console.width, _Styler(console))
            sys.stdout.write("".join(line + "\n" for line in lines))
            if hidden is not None:
                console.print(not_shown_line(len(table.rows) - hidden, len(table.rows)))
        else:
            console.print(table)
    finally:
        for bar in paused:
            bar.start()


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a :class:`RowTable`.

    ``whole``: its values are identifiers (offsets, times, check ids, file names): a narrow
    table wraps them only at their spaces, never inside a token. Other columns wrap at spaces
    too; a word too long for the column is cut with an ellipsis, as rich does, or, with
    ``fold``, continued on the next line. ``breaks``: characters after which an identifier may
    also wrap (``/`` in a path, ``.`` in a check id). ``least``: the narrowest a wrapping column
    (an identifier's too: a list of group names) is made before others are dropped. ``drop``:
    when even the narrowest layout is wider than the terminal, columns with a ``drop`` are left
    out, the highest first (0: never). ``styles``: a cell's style by its text (a severity)."""

    header: str
    right: bool = False
    whole: bool = False
    drop: int = 0
    styles: Mapping[str, str] | None = None
    fold: bool = False
    breaks: str = ""
    least: int = 0


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


# A column that wraps is kept at least this wide (or its header's longest word, or its longest
# word up to _WORD_CAP cells) before columns are dropped.
_FOLD_FLOOR = 6
_WORD_CAP = 16


class RowTable:
    """A table of many rows, drawn as rich draws its default table (the same box characters,
    header and title), at a fraction of the cost: rich measures, wraps and renders every cell
    as a renderable (about 2 ms a row); here widths are found once per table and rows are
    written as lines. Every cell is escaped (:func:`printable`) and capped (:func:`capped`) as
    the stdout console does a string: store text never drives the terminal."""

    def __init__(
        self,
        title: str | None,
        columns: Sequence[Column],
        capped_on_terminal: bool = False,
        caption: str | None = None,
    ) -> None:
        self.title = printable(capped(title or ""))  # a title can quote store text
        self.caption = printable(capped(caption or ""))  # under the table, as rich's caption
        self.columns = tuple(columns)
        self.rows: list[list[str]] = []
        # A report's list: a terminal is shown its head and how many there are.
        self.capped_on_terminal = capped_on_terminal

    def add_row(self, *cells: Any) -> None:
        self.rows.append([printable(capped(cell_text(c))) for c in cells])

    def lines(self, width: int, styler: _Styler) -> tuple[list[str], int | None]:
        """The lines for a terminal ``width`` cells wide, and how many rows were left out (None
        when every row is shown)."""
        from rich.cells import cell_len

        rows, hidden = self.rows, None
        if self.capped_on_terminal and len(rows) > TERMINAL_ROWS and sys.stdout.isatty():
            rows, hidden = rows[:TERMINAL_ROWS], len(rows) - TERMINAL_ROWS
        lens = [[cell_len(c) for c in row] for row in rows]
        kept, widths = self._layout(rows, lens, width)
        columns = [self.columns[i] for i in kept]
        out: list[str] = []
        total = sum(widths) + 3 * len(widths) + 1
        if self.title:
            for line in _wrap(self.title, total, "fold"):
                out.append(styler("italic", line + " " * (total - cell_len(line))))
        out.append("┏" + "┳".join("━" * (w + 2) for w in widths) + "┓")
        headers = [c.header for c in columns]
        bold = [styler.style("bold")] * len(columns)
        out.extend(_row_lines(headers, None, widths, columns, "┃", bold))
        out.append("┡" + "╇".join("━" * (w + 2) for w in widths) + "┩")
        styled = [(k, c.styles) for k, c in enumerate(columns) if c.styles and styler.on]
        plain: list[tuple[str, str] | None] = [None] * len(columns)
        every = len(kept) == len(self.columns)
        for row, row_lens in zip(rows, lens, strict=True):
            cells = row if every else [row[i] for i in kept]
            cell_lens = row_lens if every else [row_lens[i] for i in kept]
            shown = plain
            if styled:
                shown = list(plain)
                for k, by_text in styled:
                    shown[k] = styler.style(by_text.get(cells[k], ""))
            out.extend(_row_lines(cells, cell_lens, widths, columns, "│", shown))
        out.append("└" + "┴".join("─" * (w + 2) for w in widths) + "┘")
        if self.caption:
            for line in _wrap(self.caption, total, "fold"):
                out.append(styler("dim italic", line + " " * (total - cell_len(line))))
        return out, hidden

    def _layout(
        self, rows: list[list[str]], lens: list[list[int]], width: int
    ) -> tuple[list[int], list[int]]:
        """Which columns are shown and how wide: as wide as their widest cell where that fits;
        else columns shrink (folding columns first, then identifiers down to their longest
        token) and, where even that does not fit, the droppable ones are left out."""
        from rich.cells import cell_len

        n = len(self.columns)
        natural = [cell_len(c.header) for c in self.columns]
        for row_lens in lens:
            natural = [max(a, b) for a, b in zip(natural, row_lens, strict=True)]
        kept = list(range(n))
        if sum(natural) + 3 * n + 1 <= width:
            return kept, natural
        # The narrowest each column is ever made, which decides what is dropped: an
        # identifier's longest token; for text, its longest word up to _WORD_CAP cells (a key or
        # a tag stays whole, a body preview is cut).
        least: list[int] = []
        hard: list[int] = []  # below ``least`` only when nothing is left to drop
        for i, c in enumerate(self.columns):
            header = max(cell_len(w) for w in c.header.split(" "))
            if c.whole:
                tokens = [cell_len(t) for row in rows for t, _ in _tokens(row[i], c.breaks)]
                hard.append(max([header, *tokens]))
                least.append(max(hard[-1], min(c.least, natural[i])))
            else:
                words = (min(cell_len(w), _WORD_CAP) for row in rows for w in row[i].split(" "))
                least.append(min(natural[i], max(header, _FOLD_FLOOR, c.least, *words)))
                hard.append(least[-1])

        def room(shown: list[int]) -> int:
            return width - 3 * len(shown) - 1

        droppable = sorted((c.drop, i) for i, c in enumerate(self.columns) if c.drop)
        while droppable and sum(least[i] for i in kept) > room(kept):
            kept.remove(droppable.pop()[1])
        widths = {i: natural[i] for i in kept}
        excess = sum(widths.values()) - room(kept)
        # The widest first, as rich collapses a table: text wraps, cutting (or folding) a long
        # word (a body preview); only then do identifiers wrap at their spaces; an identifier's
        # token is never cut.
        text = [i for i in kept if not self.columns[i].whole]
        for floor, shrinking in ((least, text), (least, kept), (hard, kept)):
            while excess > 0:
                slack = [i for i in shrinking if widths[i] > floor[i]]
                if not slack:
                    break
                widest = max(slack, key=lambda i: widths[i])
                widths[widest] -= 1
                excess -= 1
        return kept, [widths[i] for i in kept]


class _Styler:
    """Styles as terminal escapes where the console shows them (a terminal; colour off with
    NO_COLOR), else nothing."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.on = console.color_system is not None
        self._escapes: dict[str, tuple[str, str] | None] = {}

    def style(self, name: str) -> tuple[str, str] | None:
        """The escapes before and after a text in style ``name`` (None: plain)."""
        if not self.on or not name:
            return None
        if name not in self._escapes:
            self._escapes[name] = self._render(name)
        return self._escapes[name]

    def _render(self, name: str) -> tuple[str, str] | None:
        from rich.text import Text

        # The console writes the escapes, as it would for its own tables (NO_COLOR included).
        with self.console.capture() as captured:
            self.console.print(Text("X", style=name), end="")
        before, _, after = captured.get().partition("X")
        return (before, after) if before else None

    def __call__(self, name: str, text: str) -> str:
        escapes = self.style(name)
        return text if escapes is None else escapes[0] + text + escapes[1]


def _row_lines(
    cells: list[str],
    cell_lens: list[int] | None,
    widths: list[int],
    columns: list[Column],
    edge: str,
    styles: list[tuple[str, str] | None],
) -> list[str]:
    """One row's lines: each cell wrapped into its width, padded, and the cells joined by the
    box's ``edge``."""
    from rich.cells import cell_len

    if cell_lens is None:
        cell_lens = [cell_len(c) for c in cells]
    if all(n <= w for n, w in zip(cell_lens, widths, strict=True)):
        wrapped = [[c] for c in cells]
        wrapped_lens = [[n] for n in cell_lens]
    else:
        wrapped = [
            [c] if n <= w else _wrap(c, w, _overflow(col), col.breaks)
            for c, n, w, col in zip(cells, cell_lens, widths, columns, strict=True)
        ]
        wrapped_lens = [
            [n] if len(parts) == 1 and n <= w else [cell_len(p) for p in parts]
            for parts, n, w in zip(wrapped, cell_lens, widths, strict=True)
        ]
    height = max(len(parts) for parts in wrapped)
    sep = f" {edge} "
    out = []
    for k in range(height):
        pieces = []
        for parts, plens, w, col, style in zip(
            wrapped, wrapped_lens, widths, columns, styles, strict=True
        ):
            text, n = (parts[k], plens[k]) if k < len(parts) else ("", 0)
            pad = " " * (w - n)
            piece = pad + text if col.right else text + pad
            pieces.append(piece if style is None else style[0] + piece + style[1])
        out.append(f"{edge} {sep.join(pieces)} {edge}")
    return out


def _overflow(column: Column) -> str:
    return "whole" if column.whole else "fold" if column.fold else "ellipsis"


def _tokens(text: str, breaks: str) -> list[tuple[str, str]]:
    """The pieces a line may break between, each with what joins it to the one before: its
    words (a space) and, with ``breaks``, their parts after each of those characters."""
    words = [(w, " ") for w in text.split(" ")]
    if not breaks:
        return words
    after = re.compile(f"(?<=[{re.escape(breaks)}])")
    return [
        (part, sep if k == 0 else "")
        for word, sep in words
        for k, part in enumerate(after.split(word))
        if part or k == 0
    ]


def _wrap(text: str, width: int, overflow: str, breaks: str = "") -> list[str]:
    """``text`` in lines at most ``width`` cells wide, broken at spaces (and after ``breaks``);
    a word wider than that is folded (``fold``), cut with an ellipsis (``ellipsis``) or, an
    identifier's token, left whole on its own line (``whole``)."""
    from rich.cells import cell_len, chop_cells, set_cell_size

    width = max(width, 1)
    lines: list[str] = []
    line = ""
    for word, sep in _tokens(text, breaks):
        joined = f"{line}{sep}{word}" if line else word
        if cell_len(joined) <= width:
            line = joined
            continue
        if line:
            lines.append(line)
        if overflow == "fold" and cell_len(word) > width:
            *full, line = chop_cells(word, width)
            lines.extend(full)
        elif overflow == "ellipsis" and cell_len(word) > width:
            line = set_cell_size(word, width - 1) + "…"
        else:
            line = word
    lines.append(line)
    return lines


def key_value_table(title: str, rows: Iterable[tuple[str, Any]]) -> Table:
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, cell_text(value))
    return table


def cell_text(value: Any) -> str:
    """A value as a table shows it: nothing for None, yes/no for a flag (JSON keeps
    true/false), else its text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


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
