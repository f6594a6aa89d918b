"""The table every command's rows are drawn in on a terminal: :class:`RowTable`, rich's default
table look at a fraction of its cost (:mod:`rmqinspect.render.output` prints it)."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rmqinspect.render.values import capped, printable

if TYPE_CHECKING:
    from rich.console import Console

# The most rows of a report's list (lost messages, findings, lookup hits) a table shows on a
# terminal: the verdict printed after the list must not scroll away. Piped output keeps all.
TERMINAL_ROWS = 40


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

    def lines(self, width: int, styler: Styler) -> tuple[list[str], int | None]:
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


class Styler:
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


def cell_text(value: Any) -> str:
    """A value as a table shows it: nothing for None, yes/no for a flag (JSON keeps
    true/false), else its text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
