"""Message properties: ``name 0x01 value 0x02`` pairs (MessageDecoder.string2messageProperties)."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence

from rmqinspect.format.javamap import hashmap_order

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
INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"  # LMQ: the queues a record is also dispatched to
INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"  # ... and its offset in each
LMQ_PREFIX = "%LMQ%"
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


def property_value(raw: bytes, name: str) -> str | None:
    """``parse_properties(raw.decode())[name]`` without parsing the rest: the last entry whose
    name is ``name`` and whose value is not empty. Separators are ASCII, so decoding the value
    alone gives the same text as decoding the whole string (for the index keys of a dispatch,
    which would otherwise parse every record's properties)."""
    needle = name.encode("utf-8") + b"\x01"
    end = len(raw)
    while (at := raw.rfind(needle, 0, end)) >= 0:
        end = at
        if at and raw[at - 1] != 2:
            continue  # inside another entry's value, not at an entry's start
        start = at + len(needle)
        stop = raw.find(b"\x02", start)
        value = raw[start : stop if stop >= 0 else len(raw)]
        if value:
            return value.decode("utf-8", "replace")
    return None


def encode_properties(pairs: Iterable[tuple[str, str]], trailing_separator: bool) -> str:
    """``messageProperties2String``: ``trailing_separator`` is the ≤4.9.0 / ≥5.2.0 form."""
    text = "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in pairs)
    if text and not trailing_separator:
        text = text[:-1]
    return text


@functools.lru_cache(maxsize=4096)
def _hashmap_prefixes(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``(name, name + 0x01)`` in ``HashMap`` iteration order."""
    return tuple((names[i], names[i] + NAME_VALUE_SEPARATOR) for i in hashmap_order(names))


def encode_properties_map(pairs: Mapping[str, str], trailing_separator: bool) -> bytes:
    """``messageProperties2String`` of a ``HashMap`` holding ``pairs`` (inserted in order):
    :func:`encode_properties` in the map's iteration order, UTF-8 encoded. Names and values
    must not contain the separators."""
    if not pairs:
        return b""
    names = tuple(pairs)
    text = PROPERTY_SEPARATOR.join(
        [prefix + pairs[name] for name, prefix in _hashmap_prefixes(names)]
    )
    count = len(names)
    if text.count(NAME_VALUE_SEPARATOR) != count or text.count(PROPERTY_SEPARATOR) != count - 1:
        raise ValueError("property names and values cannot contain 0x01 or 0x02")
    if trailing_separator:
        text += PROPERTY_SEPARATOR
    return text.encode("utf-8")


@functools.lru_cache(maxsize=4096)
def properties_template(
    names: tuple[str, ...], trailing_separator: bool
) -> tuple[str, Callable[[Sequence[str]], tuple[str, ...]]]:
    """For bulk generators: a ``%``-format string and a getter that turn the values of
    ``names`` (given in insertion order) into what :func:`encode_properties_map` writes.
    The values are not checked for separators, so only trusted ones may be used."""
    order = hashmap_order(names)
    fmt = PROPERTY_SEPARATOR.join(
        names[i].replace("%", "%%") + NAME_VALUE_SEPARATOR + "%s" for i in order
    )
    fmt += PROPERTY_SEPARATOR if trailing_separator else ""
    if len(order) == 1:
        only = order[0]
        return fmt, lambda values: (values[only],)
    return fmt, operator.itemgetter(*order)


def delete_property(raw: bytes, name: str) -> bytes:
    """``MessageUtils.deleteProperty`` on stored bytes: drop each ``name 0x01 value`` entry and
    its separator."""
    needle = (name + NAME_VALUE_SEPARATOR).encode()
    separator = PROPERTY_SEPARATOR.encode()
    out: list[bytes] = []
    i, n = 0, len(raw)
    while i < n:
        j = raw.find(separator, i)
        stop = n if j < 0 else j + 1
        if not raw.startswith(needle, i):
            out.append(raw[i:stop])
        i = stop
    return b"".join(out)


def split_keys(keys: str | None) -> list[str]:
    """``KEYS`` split on single spaces, empty elements dropped (as the index does)."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]


def index_key_values(uniq_key: str | None, keys: str | None) -> list[str]:
    """The keys ``IndexService.buildIndex`` puts for a message, in order (§7.4): its
    ``UNIQ_KEY``, then each non-empty ``KEYS`` element (each under ``topic#``)."""
    result = split_keys(keys)
    if uniq_key is not None:
        result.insert(0, uniq_key)
    return result


def multi_dispatch_offset(dispatch: str | None, offsets: str | None, queue: str) -> int | None:
    """The queue offset a multi-dispatched (LMQ) record holds in the queue named ``queue``
    (§5.7): the ``INNER_MULTI_QUEUE_OFFSET`` element at the position of ``queue`` in the
    comma-separated ``INNER_MULTI_DISPATCH``; None when the record is not dispatched there."""
    if not dispatch or offsets is None:
        return None
    names, values = dispatch.split(","), offsets.split(",")
    if queue not in names:
        return None
    at = names.index(queue)
    value = values[at] if at < len(values) else ""
    return int(value) if value.lstrip("-").isdigit() else None
