"""Property values of many records found without parsing each record's properties: their
properties joined into one string and searched once per name (:class:`PropertiesText`)."""

from __future__ import annotations

import functools
import operator
import re
from typing import TYPE_CHECKING

import numpy as np

from rmqinspect.format import properties as props
from rmqinspect.format.npbytes import I64, windows
from rmqinspect.format.speedups import property_entries

if TYPE_CHECKING:
    from rmqinspect.format.columns import RecordColumns

_VALUE_WINDOW = 128  # a property value's end is looked for in this many bytes at once
_MAX_ROW = 2048  # properties longer than this are joined one by one
_MATCH_START = operator.methodcaller("start")
_SEPARATOR = ord(props.PROPERTY_SEPARATOR)


@functools.lru_cache(maxsize=64)
def _needle(text: bytes) -> re.Pattern[bytes]:
    return re.compile(re.escape(text))


class PropertiesText:
    """The properties of some records (``rows``, ascending), to find property values of many
    records at once (:meth:`spans`): their entries parsed in C, or without the extension (or
    for text that is not UTF-8) laid out in one string, bodies left out, searched once per name.

    Each record's properties are one row of a fixed width (copied at once with numpy; what
    follows a record's properties pads its row), or, where a record's properties are long or
    sit near the end of the buffer, all are joined one by one. ``starts``/``ends`` say where
    each record's properties lie in the string.
    """

    def __init__(self, cols: RecordColumns, rows: I64) -> None:
        self.rows = rows
        self.at = cols.properties_at[rows]
        size = np.maximum(cols.properties_length[rows], 0)
        self.data = np.frombuffer(cols.buf, np.uint8)
        # The C parser gives every entry at once (None without it, or for text it leaves to
        # Java's decoding); the joined string is the way otherwise.
        self.entries = property_entries(cols.buf, self.at, size) if len(rows) else None
        if self.entries is not None:
            return
        width = int(size.max()) if len(rows) else 0
        data = self.data
        if 0 < width <= _MAX_ROW and int(self.at.max()) + width <= len(data):
            self.text = windows(data, self.at, width).tobytes()
            self.starts = np.arange(len(rows), dtype=np.int64) * width
        else:
            spans = map(slice, self.at.tolist(), (self.at + size).tolist())
            self.text = b"".join(map(cols.buf.__getitem__, spans))
            self.starts = np.cumsum(size) - size
        self.ends = self.starts + size

    def spans(self, name: str) -> tuple[I64, I64]:
        """Where ``properties(i).get(name)`` lies for each record: the buffer position and byte
        length of its value, (-1, 0) where there is none.

        One search finds every ``name`` 0x01; numpy keeps the hits that start an entry and
        finds where each value ends (the next 0x02 or the end of the record's properties). The
        last entry with a non-empty value wins, as
        :func:`rmqinspect.format.properties.property_value` rules for one record.
        """
        n = len(self.rows)
        starts, lengths = np.full(n, -1, np.int64), np.zeros(n, np.int64)
        if not n:
            return starts, lengths
        if self.entries is not None:
            # Entries as parse_properties keeps them: empty values dropped, the last one wins.
            rows, name_at, name_len, value_at, value_len = self.entries
            wanted = np.frombuffer(name.encode("utf-8"), np.uint8)
            named = np.flatnonzero(name_len == len(wanted))
            named = named[(windows(self.data, name_at[named], len(wanted)) == wanted).all(axis=1)]
            starts[rows[named]] = value_at[named]
            lengths[rows[named]] = value_len[named]
            return starts, lengths
        joined, row_starts = self.text, self.starts
        needle = name.encode("utf-8") + b"\x01"
        hits = np.fromiter(map(_MATCH_START, _needle(needle).finditer(joined)), np.int64)
        owner = np.searchsorted(row_starts, hits, side="right") - 1
        data = np.frombuffer(joined, np.uint8)
        limit = self.ends[owner]
        keep = hits + len(needle) <= limit  # the name lies inside the record's properties
        keep &= (hits == row_starts[owner]) | (data[np.maximum(hits - 1, 0)] == _SEPARATOR)
        owner, value_at, limit = owner[keep], hits[keep] + len(needle), limit[keep]
        window = windows(data, value_at, _VALUE_WINDOW) == _SEPARATOR
        sep = np.where(window.any(axis=1), window.argmax(axis=1), _VALUE_WINDOW)
        value_end = np.minimum(value_at + sep, limit)
        # Values longer than the window, or read near the end of the string: one by one.
        unsure = (sep == _VALUE_WINDOW) & (value_end < limit)
        unsure |= value_at + _VALUE_WINDOW > len(data)
        for j in np.flatnonzero(unsure).tolist():
            a, b = int(value_at[j]), int(limit[j])
            found = joined.find(b"\x02", a, b)
            value_end[j] = b if found < 0 else found
        filled = value_end > value_at  # an empty value is no entry: an earlier one stands
        owner, value_at, value_end = owner[filled], value_at[filled], value_end[filled]
        # The last entry of each record wins.
        last = len(owner) - 1 - np.unique(owner[::-1], return_index=True)[1]
        winner = owner[last]
        starts[winner] = self.at[winner] + value_at[last] - row_starts[winner]
        lengths[winner] = value_end[last] - value_at[last]
        return starts, lengths
