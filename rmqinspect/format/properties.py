"""Message properties: ``name 0x01 value 0x02`` pairs (MessageDecoder.string2messageProperties)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# Property names the store and the inspector rely on (MessageConst).
KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
DELAY = "DELAY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
WAIT = "WAIT"
DUP_INFO = "DUP_INFO"
INNER_NUM = "INNER_NUM"
INNER_BASE = "INNER_BASE"
CRC32 = "__CRC32#"
KEY_SEPARATOR = " "


def parse_properties(text: str) -> dict[str, str]:
    """Parse exactly as the broker does.

    Entries with an empty name or value are dropped, only the first 0x01 of an entry splits
    (and it is searched for in the rest of the string), and a later duplicate name wins.
    """
    result: dict[str, str] = {}
    n = len(text)
    i = 0
    while i < n:
        j = text.find(PROPERTY_SEPARATOR, i)
        if j < 0:
            j = n
        # Java checks ``j - i >= 3`` first; with a non-empty name and value it always holds.
        k = text.find(NAME_VALUE_SEPARATOR, i)
        if i < k < j - 1:
            result[text[i:k]] = text[k + 1 : j]
        i = j + 1
    return result


def encode_properties(pairs: Iterable[tuple[str, str]], trailing_separator: bool) -> str:
    """``messageProperties2String``: ``trailing_separator`` is the ≤4.9.0 / ≥5.2.0 form."""
    text = "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in pairs)
    if text and not trailing_separator:
        text = text[:-1]
    return text


def split_keys(keys: str | None) -> list[str]:
    """``KEYS`` split on single spaces, empty elements dropped (as the index does)."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]


# --- whole columns (the Parquet export) -------------------------------------------------------

PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
KEYS_TYPE = pa.list_(pa.field("element", pa.string()))  # Parquet's name for list items


def utf8_column(raw: pa.Array) -> pa.Array:
    """Binary to string, decoding invalid UTF-8 with replacement characters as Java does."""
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()],
            pa.string(),
        )


def properties_column(raw: pa.Array) -> pa.Array:
    """:func:`parse_properties` for a binary column of raw properties: a map column.

    The same rules, applied to all rows at once: entries split on 0x02, the name ends at the
    entry's first 0x01, entries with an empty name or value are dropped and a later duplicate
    name wins. Splitting the bytes before decoding equals decoding first, because 0x01 and 0x02
    never belong to a multi-byte UTF-8 sequence.
    """
    entries = pc.split_pattern(raw, pattern=PROPERTY_SEPARATOR.encode())
    rows = pc.list_parent_indices(entries).to_numpy()
    pairs = pc.split_pattern(
        pc.list_flatten(entries), pattern=NAME_VALUE_SEPARATOR.encode(), max_splits=1
    )
    bounds = pairs.offsets.to_numpy()
    first = bounds[:-1]
    names = pairs.values.take(pa.array(first))
    # An entry without 0x01 has no value; it is dropped like an empty one.
    values = pairs.values.take(pa.array(first + 1, mask=np.diff(bounds) != 2))
    keep = pc.and_kleene(
        pc.greater(pc.binary_length(names), 0), pc.greater(pc.binary_length(values), 0)
    )
    valid = pc.fill_null(keep, False)
    names, values, rows = (
        names.filter(valid),
        values.filter(valid),
        rows[valid.to_numpy(zero_copy_only=False)],
    )
    last = _last_of_each_name(names, rows)
    rows = rows[last]
    mask = pa.array(last)
    offsets = np.zeros(len(raw) + 1, np.int32)
    np.cumsum(np.bincount(rows, minlength=len(raw)), out=offsets[1:])
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        utf8_column(names.filter(mask)),
        utf8_column(values.filter(mask)),
        type=PROPERTIES_TYPE,
    )


def _last_of_each_name(names: pa.Array, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """False for an entry whose name comes again later in the same row (the later one wins).

    Writers never repeat a name, so rows are only inspected one by one where the cheap test
    (distinct names per row fewer than entries per row) says a repeat exists.
    """
    keep = np.ones(len(names), np.bool_)
    if not len(names):
        return keep
    encoded = pc.dictionary_encode(names)
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    starts = np.flatnonzero(np.diff(rows, prepend=-1))  # rows come in order, entries together
    total = np.diff(starts, append=len(rows))
    if len(encoded.dictionary) <= 64:
        seen_bits = np.bitwise_or.reduceat(
            np.left_shift(np.uint64(1), codes.astype(np.uint64)), starts
        )
        distinct = np.unpackbits(seen_bits.view(np.uint8)).reshape(-1, 64).sum(axis=1)
    else:
        pairs = np.unique(rows * len(encoded.dictionary) + codes) // len(encoded.dictionary)
        distinct = np.bincount(pairs, minlength=int(rows.max()) + 1)[rows[starts]]
    for first, count in zip(starts[distinct < total], total[distinct < total], strict=True):
        at = np.arange(first, first + count)
        seen: set[int] = set()
        for i in at[::-1]:
            keep[i] = int(codes[i]) not in seen
            seen.add(int(codes[i]))
    return keep


def keys_column(keys: pa.Array) -> pa.Array:
    """:func:`split_keys` for a string column (null for a message without KEYS)."""
    pieces = pc.split_pattern(pc.fill_null(keys, ""), pattern=KEY_SEPARATOR)
    rows = pc.list_parent_indices(pieces).to_numpy()
    flat = pc.list_flatten(pieces)
    mask = pc.greater(pc.binary_length(flat), 0)
    rows = rows[mask.to_numpy(zero_copy_only=False)]
    offsets = np.zeros(len(keys) + 1, np.int32)
    np.cumsum(np.bincount(rows, minlength=len(keys)), out=offsets[1:])
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), flat.filter(mask), type=KEYS_TYPE
    )
