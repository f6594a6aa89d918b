"""The recovery scan's fast path over runs of records (a stop-gap until the shared scanner in
:mod:`rmqinspect.format.scan` replaces it)."""

from __future__ import annotations

import functools
import re
import struct
import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.analysis.recovery.state import DispatchedRecord
from rmqinspect.format import commitlog as cl

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_FAST_HEAD = struct.Struct(">iiiiiqqi")  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QOFFSET PHY SYSFLAG
_I16 = struct.Struct(">h")
_MIN_RECORD = 91
_CRC_MASK = 0x7FFFFFFF
SCHEDULE_BYTES = cl.SCHEDULE_TOPIC.encode()


@functools.lru_cache(maxsize=4096)
def topic_name(raw: bytes) -> str:
    """Topics decode as Java does (replacement characters); a store holds few of them."""
    return raw.decode("utf-8", "replace")


def fast_check(
    buf: memoryview, pos: int, limit: int, check_crc: bool, accept_v2: bool
) -> DispatchedRecord | None:
    """The common case of ``checkMessageAndReturnSize``: a well-formed message record that fits
    its buffer, whose fields add up to TOTALSIZE and whose body CRC matches, outside the
    schedule topic. Such a record gets ``(TOTALSIZE, true)`` from the broker in every profile
    (the 5.3.2 bounds checks pass because it fits). Anything else returns None and the caller
    asks :func:`cl.check_message` for the exact verdict."""
    if pos + _MIN_RECORD > limit:
        return None
    total, magic, body_crc, queue_id, _flag, queue_offset, phy, sys_flag = _FAST_HEAD.unpack_from(
        buf, pos
    )
    end = pos + total
    if total < _MIN_RECORD or end > limit:
        return None
    v2 = magic == cl.MESSAGE_MAGIC_CODE_V2
    if magic != cl.MESSAGE_MAGIC_CODE and not (v2 and accept_v2):
        return None
    born = 20 if sys_flag & cl.BORNHOST_V6_FLAG else 8
    body_len_at = pos + 68 + born + (20 if sys_flag & cl.STOREHOSTADDRESS_V6_FLAG else 8)
    body_len = _I32.unpack_from(buf, body_len_at)[0]
    body_at = body_len_at + 4
    topic_len_at = body_at + body_len
    if body_len < 0 or topic_len_at + 2 > end:
        return None
    if v2:
        topic_len = _I16.unpack_from(buf, topic_len_at)[0]
        topic_at = topic_len_at + 2
    else:
        topic_len = buf[topic_len_at]
        if topic_len > 127:
            return None
        topic_at = topic_len_at + 1
    props_len_at = topic_at + topic_len
    if topic_len < 0 or props_len_at + 2 > end:
        return None
    props_len = _I16.unpack_from(buf, props_len_at)[0]
    props_at = props_len_at + 2
    if props_at + max(props_len, 0) != end:
        return None
    if check_crc and body_len > 0 and zlib.crc32(buf[body_at:topic_len_at]) & _CRC_MASK != body_crc:
        return None
    topic_b = bytes(buf[topic_at:props_len_at])
    if topic_b == SCHEDULE_BYTES:
        return None
    topic = topic_name(topic_b)
    return DispatchedRecord(
        topic,
        queue_id,
        queue_offset,
        phy,
        total,
        sys_flag,
        _I64.unpack_from(buf, pos + 48 + born)[0],
        bytes(buf[props_at:end]) if props_len > 0 else b"",
    )


_V2 = cl.MESSAGE_MAGIC_CODE_V2
_RUN_RECORDS = 1 << 14
I64N = npt.NDArray[np.int64]


@dataclass(slots=True)
class Run:
    """Consecutive records from one position that pass :func:`fast_check`'s conditions (the
    schedule topic included: its DELAY is judged later), as numpy columns."""

    count: int
    end: int  # buffer position after the accepted records
    complete: bool  # the walk stopped only because it reached its record limit
    positions: I64N
    sizes: I64N
    queue_ids: I64N
    queue_offsets: I64N
    phys: I64N
    sys_flags: I64N
    store_ts: I64N
    topic_at: I64N
    topic_len: I64N
    props_at: I64N
    props_len: I64N


def _gather(data: npt.NDArray[np.uint8], at: I64N, dtype: str) -> I64N:
    """Big-endian integers of ``dtype`` read at every offset in ``at``."""
    width = np.dtype(dtype).itemsize
    raw = data[at[:, None] + np.arange(width)]
    return np.ascontiguousarray(raw).view(dtype).reshape(-1).astype(np.int64)


_HEAD_DTYPE = np.dtype(
    {
        "names": ["total", "magic", "crc", "qid", "qoff", "phy", "sys"],
        "formats": [">i4", ">i4", ">i4", ">i4", ">i8", ">i8", ">i4"],
        "offsets": [0, 4, 8, 12, 20, 28, 36],
        "itemsize": 48,
    }
)
_HEAD2 = struct.Struct(">ii")


def _walk(buf: memoryview, pos: int, accept_v2: bool) -> tuple[list[int], bool]:
    """Follow TOTALSIZE from ``pos`` through message headers (magic and size plausible):
    the record starts, and whether the record limit (not a header) ended the walk."""
    limit = len(buf)
    unpack = _HEAD2.unpack_from
    v1 = cl.MESSAGE_MAGIC_CODE
    v2 = _V2 if accept_v2 else v1
    positions: list[int] = []
    append = positions.append
    for _ in range(_RUN_RECORDS):
        if pos + _MIN_RECORD > limit:
            return positions, False
        size, magic = unpack(buf, pos)
        if (magic != v1 and magic != v2) or size < _MIN_RECORD or pos + size > limit:
            return positions, False
        append(pos)
        pos += size
    return positions, True


def fast_run(buf: memoryview, pos: int, check_crc: bool, accept_v2: bool) -> Run:
    """:func:`fast_check` for a whole run at once: the TOTALSIZE chain is walked in Python
    (it is sequential), every other condition is checked with numpy, the CRCs in one pass."""
    starts, complete = _walk(buf, pos, accept_v2)
    p = np.array(starts, np.int64)
    n = len(p)
    data = np.frombuffer(buf, np.uint8)
    head = np.ascontiguousarray(data[p[:, None] + np.arange(48)]).view(_HEAD_DTYPE).reshape(-1)
    ends = p + head["total"].astype(np.int64)
    sys_flag = head["sys"].astype(np.int64)
    born = np.where(sys_flag & cl.BORNHOST_V6_FLAG, 20, 8)
    body_len_at = p + 68 + born + np.where(sys_flag & cl.STOREHOSTADDRESS_V6_FLAG, 20, 8)
    ok = body_len_at + 4 <= ends
    body_len = _gather(data, np.where(ok, body_len_at, p), ">i4")
    body_at = body_len_at + 4
    topic_len_at = body_at + body_len
    ok &= (body_len >= 0) & (topic_len_at + 2 <= ends)
    safe = np.where(ok, topic_len_at, p)
    v2 = head["magic"] == _V2
    short = data[safe].astype(np.int8).astype(np.int64)
    topic_len = np.where(v2, _gather(data, safe, ">i2"), short)
    topic_at = topic_len_at + np.where(v2, 2, 1)
    props_len_at = topic_at + topic_len
    ok &= (topic_len >= 0) & (props_len_at + 2 <= ends)
    props_len = _gather(data, np.where(ok, props_len_at, p), ">i2")
    ok &= props_len_at + 2 + np.maximum(props_len, 0) == ends
    k = n if ok.all() else int(np.argmin(ok))
    if check_crc and k:
        stored = head["crc"][:k].tolist()
        at, lengths = body_at[:k].tolist(), body_len[:k].tolist()
        crc32 = zlib.crc32
        for i in range(k):
            length = lengths[i]
            if length and crc32(buf[at[i] : at[i] + length]) & _CRC_MASK != stored[i]:
                k = i
                break
    first = p[:k]
    return Run(
        k,
        int(ends[k - 1]) if k else pos,
        k == n and complete,
        first,
        ends[:k] - first,
        head["qid"][:k].astype(np.int64),
        head["qoff"][:k].astype(np.int64),
        head["phy"][:k].astype(np.int64),
        sys_flag[:k],
        _gather(data, first + 48 + born[:k], ">i8"),
        topic_at[:k],
        topic_len[:k],
        props_len_at[:k] + 2,
        np.maximum(props_len[:k], 0),
    )


def topic_ids(buf: memoryview, at: I64N, length: I64N) -> tuple[I64N, list[bytes]]:
    """Topic of every record as an index into a list of distinct topic byte strings.

    Records are grouped by a hash of (length, first 8 bytes, last 8 bytes) with numpy; a group
    whose members all have the same length and bytes (checked in full) gets one id, any other
    group is resolved record by record. A run holds few topics: no bytes object per record."""
    n = len(at)
    data = np.frombuffer(buf, np.uint8)
    tids = np.empty(n, np.int64)
    topics: list[bytes] = []
    ids: dict[bytes, int] = {}
    if not n:
        return tids, topics
    span = np.arange(8)
    # Bytes outside the topic (short topics) are masked to zero so they cannot split a group.
    head_bytes = data[at[:, None] + span] * (span < length[:, None])
    tail_at = at + length - 8
    tail_bytes = data[np.maximum(tail_at, 0)[:, None] + span] * (
        span >= -tail_at[:, None] + at[:, None]
    )
    head = np.ascontiguousarray(head_bytes.astype(np.uint8)).view(">u8").reshape(-1)
    tail = np.ascontiguousarray(tail_bytes.astype(np.uint8)).view(">u8").reshape(-1)
    with np.errstate(over="ignore"):
        key = (
            (head * np.uint64(0x9E3779B97F4A7C15))
            ^ tail.astype(np.uint64)
            ^ (length.astype(np.uint64) << np.uint64(48))
        )
    order = np.argsort(key, kind="stable")
    bounds = np.flatnonzero(np.diff(key[order])) + 1
    for members in np.split(order, bounds):
        i = int(members[0])
        size = int(length[i])
        rows = data[at[members][:, None] + np.arange(size)]
        if (length[members] == size).all() and (rows == rows[0]).all():
            tids[members] = ids.setdefault(bytes(rows[0]), len(ids))
        else:  # a hash collision between different topics: resolve one by one
            for j in members.tolist():
                a = int(at[j])
                tids[j] = ids.setdefault(bytes(buf[a : a + int(length[j])]), len(ids))
    topics.extend(ids)
    return tids, topics


MESSAGE_MAGICS = (cl.MESSAGE_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE_V2)
MAGIC_RE_V1 = re.compile(re.escape(struct.pack(">i", cl.MESSAGE_MAGIC_CODE)))
MAGIC_RE_ANY = re.compile(
    re.escape(struct.pack(">i", cl.MESSAGE_MAGIC_CODE))
    + b"|"
    + re.escape(struct.pack(">i", cl.MESSAGE_MAGIC_CODE_V2))
)


def read_length(buf: memoryview, pos: int, r: cl.CheckResult) -> int:
    """How far the Java buffer moved over a length-mismatch record: the length its fields add
    up to (``calMsgLength``), not TOTALSIZE."""
    rec = r.record
    if rec is None:
        return max(r.size, 1)
    born = 20 if rec.sys_flag & cl.BORNHOST_V6_FLAG else 8
    store = 20 if rec.sys_flag & cl.STOREHOSTADDRESS_V6_FLAG else 8
    at = pos + 72 + born + store + max(rec.body_length, 0)  # TOPICLENGTH
    v2 = rec.magic == cl.MESSAGE_MAGIC_CODE_V2
    if at + (2 if v2 else 1) > len(buf):
        return max(r.size, 1)
    topic_len = struct.unpack_from(">h" if v2 else ">b", buf, at)[0]
    return cl.calc_msg_length(
        rec.sys_flag, rec.body_length, topic_len, len(rec.properties_raw), 2 if v2 else 1
    )


def data_extent(buf: memoryview, begin: int) -> int:
    """Bytes from ``begin`` to the last non-zero byte (inclusive), scanning back in chunks."""
    step = 1 << 22
    end = len(buf)
    while end > begin:
        lo = max(begin, end - step)
        chunk = np.frombuffer(buf[lo:end], np.uint8)
        nz = np.flatnonzero(chunk)
        if nz.size:
            return lo + int(nz[-1]) + 1 - begin
        end = lo
    return 0


def resync(
    buf: memoryview,
    pos: int,
    stop: int,
    file_start: int,
    magic_re: re.Pattern[bytes],
    opts: cl.CheckOptions,
) -> int | None:
    """The next position in ``(pos, stop)`` holding an intact record whose PHYSICALOFFSET field
    names that very position (a record that cannot be stale bytes of another file)."""
    while True:
        m = magic_re.search(buf, pos + 4, stop)
        if m is None:
            return None
        cand = m.start() - 4
        r = cl.check_message(buf, cand, file_start, opts)
        if r.is_message and r.record is not None and r.record.physical_offset == file_start + cand:
            return cand
        pos = cand + 1
