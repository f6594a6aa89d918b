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

if TYPE_CHECKING:
    from rmqinspect.format.columns import RecordColumns

_VALUE_WINDOW = 128  # a property value's end is looked for in this many bytes at once
_MATCH_START = operator.methodcaller("start")
_SEPARATOR = ord(props.PROPERTY_SEPARATOR)


@functools.lru_cache(maxsize=64)
def _needle(text: bytes) -> re.Pattern[bytes]:
    return re.compile(re.escape(text))


class PropertiesText:
    """The properties of some records (``rows``, ascending) joined into one string, bodies
    left out, to find property values by searching it once per name (:meth:`spans`)."""

    def __init__(self, cols: RecordColumns, rows: I64) -> None:
        self.cols = cols
        self.rows = rows
        self.at = cols.properties_at[rows]
        size = np.maximum(cols.properties_length[rows], 0)
        spans = map(slice, self.at.tolist(), (self.at + size).tolist())
        self.text = b"".join(map(cols.buf.__getitem__, spans))
        self.offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(size, out=self.offsets[1:])

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
        joined, offsets = self.text, self.offsets
        needle = name.encode("utf-8") + b"\x01"
        hits = np.fromiter(map(_MATCH_START, _needle(needle).finditer(joined)), np.int64)
        owner = np.searchsorted(offsets, hits, side="right") - 1
        data = np.frombuffer(joined, np.uint8)
        limit = offsets[owner + 1]
        keep = hits + len(needle) <= limit  # the name lies inside the record's properties
        keep &= (hits == offsets[owner]) | (data[np.maximum(hits - 1, 0)] == _SEPARATOR)
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
        starts[winner] = self.at[winner] + value_at[last] - offsets[winner]
        lengths[winner] = value_end[last] - value_at[last]
        return starts, lengths
