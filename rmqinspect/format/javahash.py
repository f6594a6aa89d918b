"""Java ``String.hashCode`` and the two hashes RocketMQ derives from it, one at a time and
vectorised (numpy) for bulk work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rmqinspect.format.javamath import INT_MAX

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# numpy is imported by the vectorised functions only: the scalar ones (java_hash, tags_code,
# index_key_hash) serve commands that read one record and start without numpy.

_MASK32 = 0xFFFFFFFF


def java_hash(text: str) -> int:
    """``java.lang.String.hashCode()``: 31-polynomial over UTF-16 code units, signed 32-bit."""
    h = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """Consume-queue tagsCode of a normal message: the tag hash sign-extended, 0 without tags."""
    if not tags:
        return 0
    return java_hash(tags)


def index_key_hash(key: str) -> int:
    """Index key hash: ``abs(hashCode)`` with ``Integer.MIN_VALUE`` mapped to 0 (IndexFile)."""
    h = abs(java_hash(key))
    return 0 if h > INT_MAX else h


def index_key(topic: str, key: str) -> str:
    """The string the broker indexes for a key of a message stored in ``topic``."""
    return f"{topic}#{key}"


# --- vectorised -------------------------------------------------------------------------------
# Each function imports numpy itself: the scalar hashes above are on every command's start-up
# path (record decoding), where importing numpy would cost more than the command.


def _hash_parts(strings: Sequence[str]) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]:
    """``String.hashCode`` (as uint32) and UTF-16 length of each string, vectorised.

    Strings are grouped by length, each group becomes a (count, length) array of code points,
    and Horner's rule runs over its columns in uint32, which wraps exactly like Java's int.
    Characters outside the BMP are two UTF-16 units in Java: such strings (rare) are hashed
    one by one.
    """
    import numpy as np

    count = len(strings)
    hashes = np.zeros(count, dtype=np.uint32)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=count)
    units = lengths.copy()
    if not count:
        return hashes, units
    order = np.argsort(lengths, kind="stable")
    bounds = np.flatnonzero(np.diff(lengths[order])) + 1
    thirty_one = np.uint32(31)
    for group in np.split(order, bounds):
        length = int(lengths[group[0]])
        if length == 0:
            continue
        rows = [strings[i] for i in group]
        codes = np.array(rows, dtype=f"<U{length}").view(np.uint32).reshape(len(rows), length)
        h = np.zeros(len(rows), dtype=np.uint32)
        for column in np.ascontiguousarray(codes.T):
            h *= thirty_one
            h += column
        for k in np.flatnonzero((codes > 0xFFFF).any(axis=1)):
            h[k] = java_hash(rows[k]) & _MASK32
            units[group[k]] = len(rows[k].encode("utf-16-le", "surrogatepass")) // 2
        hashes[group] = h
    return hashes, units


def _signed(hashes: npt.NDArray[np.uint32]) -> npt.NDArray[np.int64]:
    import numpy as np

    return hashes.view(np.int32).astype(np.int64)


def java_hashes(strings: Sequence[str]) -> npt.NDArray[np.int64]:
    """:func:`java_hash` of each string, vectorised."""
    return _signed(_hash_parts(strings)[0])


def _index_key_hashes(hashes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """:func:`index_key_hash` of each signed ``hashCode``."""
    import numpy as np

    result = np.abs(hashes)
    result[result > INT_MAX] = 0
    return result


def _pow31(exponents: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """31**e mod 2**32 for each exponent, by squaring over the exponents' bits."""
    import numpy as np

    result = np.ones(len(exponents), dtype=np.uint64)
    base = np.full(len(exponents), 31, dtype=np.uint64)
    e = exponents.astype(np.uint64)
    mask = np.uint64(_MASK32)
    while e.any():
        odd = (e & np.uint64(1)).astype(bool)
        result[odd] = (result[odd] * base[odd]) & mask
        base = (base * base) & mask
        e >>= np.uint64(1)
    return result


def prefixed_key_hashes(
    prefixes: Sequence[str], prefix_of: npt.NDArray[np.int64], keys: Sequence[str]
) -> npt.NDArray[np.int64]:
    """:func:`index_key_hash` of ``prefixes[prefix_of[i]] + keys[i]`` without building the
    strings: ``h(p + k) = h(p) * 31**len(k) + h(k)`` modulo 2**32 (lengths in UTF-16 units)."""
    key_hashes, key_units = _hash_parts(keys)
    return _prefixed(prefixes, prefix_of, key_hashes, key_units)


def prefixed_span_hashes(
    prefixes: Sequence[str],
    prefix_of: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """:func:`prefixed_key_hashes` of keys given as UTF-8 spans of ``data``, decoded as Java
    does: ASCII keys are hashed from their bytes with numpy, the others decoded one by one."""
    import numpy as np

    from rmqinspect.format.npbytes import span_polynomials

    key_hashes, ascii_ = span_polynomials(data, starts, lengths, 31, np.uint32)
    key_units = lengths.copy()
    other = np.flatnonzero(~ascii_)
    if len(other):
        texts = [
            data[a : a + n].tobytes().decode("utf-8", "replace")
            for a, n in zip(starts[other].tolist(), lengths[other].tolist(), strict=True)
        ]
        key_hashes[other], key_units[other] = _hash_parts(texts)
    return _prefixed(prefixes, prefix_of, key_hashes.astype(np.uint32), key_units)


def _prefixed(
    prefixes: Sequence[str],
    prefix_of: npt.NDArray[np.int64],
    key_hashes: npt.NDArray[np.uint32],
    key_units: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    import numpy as np

    prefix_hashes = _hash_parts(prefixes)[0].astype(np.uint64)[prefix_of]
    unsigned = key_hashes.astype(np.uint64) & np.uint64(_MASK32)
    combined = (prefix_hashes * _pow31(key_units) + unsigned) & np.uint64(_MASK32)
    return _index_key_hashes(_signed(combined.astype(np.uint32)))
