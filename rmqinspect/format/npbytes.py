"""numpy over byte buffers: rows of bytes at many positions, big-endian integers read many
at a time, and spans grouped by content. The building blocks of the columnar record decoder
(:mod:`rmqinspect.format.columns`) and the checks built on it."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
Buffer = bytes | memoryview


def windows(data: npt.NDArray[np.uint8], at: I64, width: int) -> npt.NDArray[np.uint8]:
    """The ``width`` bytes at every position of ``at``, one row each (a fresh contiguous array).

    Each row is copied whole, as one ``width``-byte item of a strided view of ``data``, far
    faster than indexing byte by byte (or a sliding-window view). A position outside the buffer
    gives a row of whatever lies at the nearest fitting position (zeros for an empty buffer):
    callers mask those rows out.
    """
    n = len(at)
    if len(data) < width or width == 0:
        out = np.zeros((n, width), np.uint8)
        out[:, : len(data)] = data[:width]
        return out
    safe = np.clip(at, 0, len(data) - width)
    items = np.ndarray((len(data) - width + 1,), f"V{width}", buffer=data, strides=(1,))
    rows: npt.NDArray[np.uint8] = items[safe].view(np.uint8).reshape(n, width)
    return rows


def zero_filled_windows(data: npt.NDArray[np.uint8], at: I64, width: int) -> npt.NDArray[np.uint8]:
    """:func:`windows` where bytes outside the buffer read as zeros (the few rows that reach
    past an end are copied one by one)."""
    rows = windows(data, at, width)
    for i in np.flatnonzero((at < 0) | (at > len(data) - width)).tolist():
        start = int(at[i])
        lo, hi = max(start, 0), max(min(start + width, len(data)), 0)
        rows[i] = 0
        if hi > lo:
            rows[i, lo - start : hi - start] = data[lo:hi]
    return rows


def be_ints(data: npt.NDArray[np.uint8], at: I64, width: int, zero_filled: bool = False) -> I64:
    """The big-endian signed integer of ``width`` (1, 2 or 4) bytes at every position of
    ``at`` (positions outside the buffer read meaningless values, see :func:`windows`, or
    with ``zero_filled`` zeros for the bytes outside). Narrow fields are read a byte column at
    a time: cheaper than copying rows."""
    if zero_filled and ((at < 0) | (at > len(data) - width)).any():
        rows = zero_filled_windows(data, at, width).astype(np.int64)
        value = rows[:, 0]
        for k in range(1, width):
            value = (value << 8) | rows[:, k]
    elif len(data) < width:
        return np.zeros(len(at), np.int64)
    else:
        safe = np.clip(at, 0, len(data) - width)
        value = data[safe].astype(np.int64)
        for k in range(1, width):
            value = (value << 8) | data[safe + k]
    sign = 1 << (8 * width - 1)
    out: I64 = (value ^ sign) - sign
    return out


def be_u64(data: npt.NDArray[np.uint8], at: I64) -> npt.NDArray[np.uint64]:
    """The eight bytes at every position of ``at`` as one big-endian unsigned integer."""
    out: npt.NDArray[np.uint64] = windows(data, at, 8).view(">u8").reshape(-1).astype(np.uint64)
    return out


def first_false(ok: Mask) -> int:
    """The index of the first False in ``ok`` (its length when all hold)."""
    return len(ok) if ok.all() else int(np.argmin(ok))


def span_ids(buf: Buffer, at: I64, length: I64) -> tuple[I64, list[bytes]]:
    """Each span ``buf[at:at+length]`` as an index into a list of the distinct byte strings.

    Spans are grouped by a hash of (length, first 8 bytes, last 8 bytes) with numpy; a group
    whose members all hold the same bytes (compared in full) gets one id, any other group is
    resolved span by span. No bytes object per span: meant for values a run repeats (topics,
    tags). Spans inside ``buf`` are numbered alike in one C pass where the extension is built.
    """
    n = len(at)
    ids = np.zeros(n, np.int64)
    names: dict[bytes, int] = {}
    if not n:
        return ids, []
    if (at >= 0).all() and (length >= 0).all() and (at + length <= len(buf)).all():
        from rmqinspect.format import speedups  # imports this module

        found = speedups.span_ids(buf, at, length)
        if found is not None:
            return found
    data = np.frombuffer(buf, np.uint8)
    every = ~np.uint64(0)
    # Keep only the bytes inside the span, so what surrounds a short span cannot split it.
    shift = (8 * np.minimum(length, 7)).astype(np.uint64)
    head = be_u64(data, at) & np.where(length >= 8, every, ~(every >> shift))
    tail = np.where(length >= 8, be_u64(data, at + length - 8), np.uint64(0))
    with np.errstate(over="ignore"):
        key = (
            head * np.uint64(0x9E3779B97F4A7C15)
            ^ tail
            ^ (length.astype(np.uint64) << np.uint64(48))
        )
    order = np.argsort(key, kind="stable")
    bounds = np.flatnonzero(np.diff(key[order])) + 1

    def span(j: int) -> bytes:
        return bytes(buf[int(at[j]) : int(at[j] + length[j])])

    for members in np.split(order, bounds):
        first = int(members[0])
        size = int(length[first])
        rows = data[np.minimum(at[members], len(data) - size)[:, None] + np.arange(size)]
        if (length[members] == size).all() and (rows == rows[0]).all():
            ids[members] = names.setdefault(span(first), len(names))
        else:  # a hash collision between different values: resolve one by one
            for j in members.tolist():
                ids[j] = names.setdefault(span(j), len(names))
    return ids, list(names)


def spans_equal(data: npt.NDArray[np.uint8], at: I64, length: I64, wanted: bytes) -> Mask:
    """Which spans ``data[at:at+length]`` hold exactly ``wanted`` (a span at -1 is none)."""
    same: Mask = (at >= 0) & (length == len(wanted))
    rows = np.flatnonzero(same)
    if wanted and len(rows):
        hit = windows(data, at[rows], len(wanted)) == np.frombuffer(wanted, np.uint8)
        same[rows[~hit.all(axis=1)]] = False
    return same


def split_spans(
    data: npt.NDArray[np.uint8], starts: I64, lengths: I64, separator: int
) -> tuple[I64, I64, I64]:
    """The parts of each span ``data[start:start+length]`` between ``separator`` bytes (spans
    ascending and disjoint), empty parts included: (part starts, part lengths, index of the
    span each part belongs to), in position order, like ``bytes.split`` on each span."""
    n = len(starts)
    total = int(lengths.sum())
    first = np.cumsum(lengths) - lengths
    at = np.repeat(starts - first, lengths) + np.arange(total, dtype=np.int64)
    cuts = at[data[at] == separator]
    cut_owner = np.searchsorted(starts, cuts, side="right") - 1
    part_starts = np.concatenate([starts, cuts + 1])
    part_ends = np.concatenate([cuts, starts + lengths])
    owners = np.concatenate([np.arange(n, dtype=np.int64), cut_owner])
    order = np.argsort(part_starts, kind="stable")
    ends = np.sort(part_ends, kind="stable")
    return part_starts[order], ends - part_starts[order], owners[order]


_MAX_VECTOR_SPAN = 512  # longer spans are few: hashed one by one


def span_polynomials(
    data: npt.NDArray[np.uint8], starts: I64, lengths: I64, multiplier: int, dtype: type
) -> tuple[npt.NDArray[np.generic], Mask]:
    """Horner's ``h = h * multiplier + byte`` over each span, wrapping in ``dtype`` (an unsigned
    numpy integer type), spans grouped by length so each step is one numpy operation; and
    whether each span is ASCII (its bytes are then its UTF-16 code units). Spans longer than
    ``_MAX_VECTOR_SPAN`` are left 0 and not ASCII: callers handle them one by one."""
    values: npt.NDArray[np.generic] = np.zeros(len(starts), dtype)
    ascii_ = np.zeros(len(starts), bool)
    m = dtype(multiplier)
    order = np.argsort(lengths, kind="stable")
    bounds = np.flatnonzero(np.diff(lengths[order])) + 1
    for group in np.split(order, bounds):
        if not len(group):
            continue
        size = int(lengths[group[0]])
        if size > _MAX_VECTOR_SPAN:
            continue
        rows = windows(data, starts[group], size) if size else np.zeros((len(group), 0), np.uint8)
        h: npt.NDArray[np.generic] = np.zeros(len(group), dtype)
        with np.errstate(over="ignore"):
            for column in np.ascontiguousarray(rows.T):
                h = h * m + column.astype(dtype)
        values[group] = h
        ascii_[group] = (rows < 0x80).all(axis=1)
    return values, ascii_


_PRINT_MULTIPLIER = 0x100000001B3


def span_fingerprints(data: npt.NDArray[np.uint8], starts: I64, lengths: I64) -> I64:
    """A 64-bit fingerprint of each span's bytes (to tell distinct values apart without
    building them): Horner's polynomial of the bytes modulo 2**64, xor the length, as the C
    index key loop computes it (long spans one by one, with the powers of the multiplier)."""
    prints, _ = span_polynomials(data, starts, lengths, _PRINT_MULTIPLIER, np.uint64)
    for j in np.flatnonzero(lengths > _MAX_VECTOR_SPAN).tolist():
        a, n = int(starts[j]), int(lengths[j])
        powers = np.ones(n, np.uint64)  # array products wrap modulo 2**64
        powers[1:] = np.cumprod(np.full(n - 1, _PRINT_MULTIPLIER, np.uint64))
        prints[j] = np.sum(data[a : a + n][::-1].astype(np.uint64) * powers, dtype=np.uint64)
    out: I64 = prints.astype(np.uint64).view(np.int64) ^ lengths
    return out


def distinct(values: I64) -> I64:
    """The sorted distinct values (``np.unique`` by sorting: numpy 2.4's hash-based unique is
    far slower for many distinct int64 values)."""
    s = np.sort(values)
    out: I64 = s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s
    return out


def members(values: I64, within: I64) -> Mask:
    """``np.isin(values, within)`` by sorting and binary search (see :func:`distinct`)."""
    s = np.sort(within)
    if not len(s):
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(s, values), len(s) - 1)
    found: Mask = s[at] == values
    return found
