"""The one commitlog record scanner: walk, gather columns, check, resynchronise.

Pure functions over one whole commitlog file given as a buffer (its end is the Java buffer
limit) and the file's first physical offset; every position is a buffer position.

* :func:`walk` follows TOTALSIZE (the only sequential part) through message headers.
* :func:`gather` reads every field of the walked records at once with numpy, each position
  derived from the layout constants of :mod:`rmqinspect.format.commitlog`.
* :func:`check_run` gives, for a run of records, the verdicts of
  :func:`~rmqinspect.format.commitlog.check_message` (the definition of truth): the fast path
  decides with numpy where the outcome is certain and asks ``check_message`` everywhere else.
* :func:`resync` finds the next record past damage by searching for magic codes;
  :func:`data_extent` measures the data before a zero tail.
* :func:`scan_file` strings these together: runs of records and the damage skipped between them.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.crc import CRC_MASK, crc32, masked_crc32
from rmqinspect.format.host import HostAddress

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
Buffer = bytes | memoryview

RUN_RECORDS = 1 << 14  # records per run: bounds the columns' memory, not the file size
_I32 = struct.Struct(">i")
_HEAD2 = struct.Struct(">ii")
_V1 = cl.MESSAGE_MAGIC_CODE
_V2 = cl.MESSAGE_MAGIC_CODE_V2
_NUMPY_CODES = {"b": "i1", "h": ">i2", "i": ">i4", "q": ">i8"}


def _record_dtype(fmt: str, names: tuple[str, ...], positions: Mapping[str, int]) -> np.dtype:
    """A numpy record type laid out exactly like the ``struct`` format of the same fields."""
    return np.dtype(
        {
            "names": list(names),
            "formats": [_NUMPY_CODES[c] for c in fmt.lstrip(">")],
            "offsets": [positions[n] for n in names],
            "itemsize": struct.calcsize(fmt),
        }
    )


_HEAD_DTYPE = _record_dtype(cl.FIXED_HEAD.format, cl.FIXED_FIELDS, cl.FIXED_POS)
_PORT_SIZE = 4  # a host is its address bytes, then an i32 port
# From the born host to the end of the mid fields (BODYLENGTH), read as one block per record.
_HOSTS_WIDTH = 2 * cl.IPV6_HOST_SIZE + cl.STORETIMESTAMP_SIZE + cl.MID_FIELDS_STRUCT.size
_HOSTS_FIELDS = ("born_port", "store_timestamp", "store_port", *cl.MID_FIELDS)


def _hosts_dtype(born_size: int, store_size: int) -> np.dtype:
    """The block's fields for one host layout (offsets from the born host)."""
    mid = born_size + cl.STORETIMESTAMP_SIZE + store_size
    return np.dtype(
        {
            "names": list(_HOSTS_FIELDS),
            "formats": [">i4", ">i8", ">i4", *(_NUMPY_CODES[c] for c in "iqi")],
            "offsets": [
                born_size - _PORT_SIZE,
                born_size,
                mid - _PORT_SIZE,
                *(mid + cl.MID_POS[name] for name in cl.MID_FIELDS),
            ],
            "itemsize": _HOSTS_WIDTH,
        }
    )


_HOST_LAYOUTS = {
    (born_v6, store_v6): _hosts_dtype(
        cl.IPV6_HOST_SIZE if born_v6 else cl.IPV4_HOST_SIZE,
        cl.IPV6_HOST_SIZE if store_v6 else cl.IPV4_HOST_SIZE,
    )
    for born_v6 in (False, True)
    for store_v6 in (False, True)
}


def windows(data: npt.NDArray[np.uint8], at: I64, width: int) -> npt.NDArray[np.uint8]:
    """The ``width`` bytes at every position of ``at``, one row each (a fresh contiguous array).

    Rows are copied whole out of a sliding-window view, far faster than indexing byte by byte.
    A position outside the buffer gives a row of whatever lies at the nearest fitting position
    (zeros for an empty buffer): callers mask those rows out.
    """
    n = len(at)
    if len(data) < width:
        out = np.zeros((n, width), np.uint8)
        out[:, : len(data)] = data
        return out
    safe = np.clip(at, 0, len(data) - width)
    rows: npt.NDArray[np.uint8] = np.lib.stride_tricks.sliding_window_view(data, width)[safe]
    return rows


def _be(data: npt.NDArray[np.uint8], at: I64, width: int) -> I64:
    """The big-endian signed integer of ``width`` (1, 2 or 4) bytes at every position of
    ``at`` (positions outside the buffer read meaningless values, see :func:`windows`).
    Narrow fields are read a byte column at a time: cheaper than copying rows."""
    if len(data) < width:
        return np.zeros(len(at), np.int64)
    safe = np.clip(at, 0, len(data) - width)
    value = data[safe].astype(np.int64)
    for k in range(1, width):
        value = (value << 8) | data[safe + k]
    sign = 1 << (8 * width - 1)
    out: I64 = (value ^ sign) - sign
    return out


def _u64(data: npt.NDArray[np.uint8], at: I64) -> npt.NDArray[np.uint64]:
    """The eight bytes at every position of ``at`` as one big-endian unsigned integer."""
    out: npt.NDArray[np.uint64] = windows(data, at, 8).view(">u8").reshape(-1).astype(np.uint64)
    return out


def _first_false(ok: Mask) -> int:
    return len(ok) if ok.all() else int(np.argmin(ok))


# --- walking ------------------------------------------------------------------------------------


class WalkStop(StrEnum):
    """Why a walk ended: a BLANK, its record limit, a magic that is no message's, or a TOTALSIZE
    that cannot be a record (below the minimum or past the buffer)."""

    BLANK = "blank"
    LIMIT = "limit"
    BAD_MAGIC = "bad_magic"
    BAD_SIZE = "bad_size"


@dataclass(frozen=True, slots=True, eq=False)
class Walk:
    """Record starts of a run and their TOTALSIZE, and where and why the run ended."""

    positions: I64
    sizes: I64
    end: int  # buffer position after the last record of the run
    stop: WalkStop

    def __len__(self) -> int:
        return len(self.positions)


def walk(
    buf: Buffer, pos: int = 0, *, accept_v2: bool = True, max_records: int = RUN_RECORDS
) -> Walk:
    """Follow TOTALSIZE from ``pos`` through headers whose magic is a message magic (V2 only
    with ``accept_v2``) and whose size is plausible (at least ``MIN_RECORD_SIZE``, inside the
    buffer), for at most ``max_records`` records. Checksums and inner lengths are not looked at.

    The loop reads only TOTALSIZE, the sequential part; magic and bounds are then checked for
    the whole chain with numpy, and the chain is cut at the first header that fails them.
    """
    limit = len(buf)
    unpack = _I32.unpack_from
    min_size = cl.MIN_RECORD_SIZE
    starts: list[int] = []
    append = starts.append
    at = pos
    try:
        for _ in range(max_records):
            (size,) = unpack(buf, at + cl.TOTALSIZE_POS)
            if size < min_size:
                break
            append(at)
            at += size
    except struct.error:
        pass  # fewer than 4 bytes left at ``at``: the chain ran off the buffer
    p = np.array(starts, np.int64)
    data = np.frombuffer(buf, np.uint8)
    sizes = _be(data, p + cl.TOTALSIZE_POS, 4)
    ok = p + sizes <= limit  # and so the magic is inside the buffer
    magic = _be(data, p + cl.MAGIC_POS, 4)
    ok &= (magic == _V1) | ((magic == _V2) & accept_v2)
    k = _first_false(ok)
    if k < len(starts):
        end = starts[k]
    elif len(starts) == max_records:
        return Walk(p, sizes, at, WalkStop.LIMIT)
    else:
        end = at
    return Walk(p[:k], sizes[:k], end, _stop_reason(buf, end, accept_v2))


def _stop_reason(buf: Buffer, at: int, accept_v2: bool) -> WalkStop:
    if at + 8 > len(buf):
        return WalkStop.BAD_SIZE
    _, magic = _HEAD2.unpack_from(buf, at)
    if magic == _V1 or (accept_v2 and magic == _V2):
        return WalkStop.BAD_SIZE
    return WalkStop.BLANK if magic == cl.BLANK_MAGIC_CODE else WalkStop.BAD_MAGIC


# --- columns ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _decode_text(raw: bytes) -> str:
    """Java decodes with replacement characters; so do we (cached: a log holds few topics)."""
    return raw.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True, eq=False)
class RecordColumns:
    """Every field of many records as numpy columns, read from ``buf``.

    Values are meaningful only where ``well_formed`` holds: the hosts, body, topic and properties
    are inside the record and add up to its TOTALSIZE (``calMsgLength``). The ``*_at`` columns
    are buffer positions; the helpers slice ``buf``, so use them while the buffer is alive.
    """

    buf: Buffer
    file_start: int
    positions: I64
    sizes: I64  # TOTALSIZE
    magic: I64
    body_crc: I64
    queue_id: I64
    flag: I64
    queue_offset: I64
    physical_offset: I64  # the PHYSICALOFFSET field as stored
    sys_flag: I64
    born_timestamp: I64
    born_host_at: I64
    born_port: I64
    store_timestamp: I64
    store_host_at: I64
    store_port: I64
    reconsume_times: I64
    prepared_transaction_offset: I64
    body_at: I64
    body_length: I64  # the BODYLENGTH field (the body occupies max(0, body_length) bytes)
    topic_at: I64
    topic_length: I64
    properties_at: I64
    properties_length: I64  # the PROPERTIESLENGTH field (max(0, it) bytes follow)
    well_formed: Mask

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def ends(self) -> I64:
        return self.positions + self.sizes

    @property
    def end(self) -> int:
        """Buffer position after the last record (0 for no record)."""
        return int(self.positions[-1] + self.sizes[-1]) if len(self) else 0

    @property
    def version(self) -> I64:
        """1 or 2, by magic code."""
        return np.where(self.magic == _V2, 2, 1)

    def select(self, rows: slice | I64 | Mask) -> RecordColumns:
        """The records at ``rows`` (a slice, indices or a mask), as columns over the same buffer."""
        return RecordColumns(
            self.buf,
            self.file_start,
            *(getattr(self, name)[rows] for name in _ARRAY_FIELDS),
        )

    @staticmethod
    def concat(parts: Sequence[RecordColumns], buf: Buffer, file_start: int) -> RecordColumns:
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return gather(buf, np.zeros(0, np.int64), file_start)
        return RecordColumns(
            buf,
            file_start,
            *(np.concatenate([getattr(p, name) for p in parts]) for name in _ARRAY_FIELDS),
        )

    # per-record helpers (they decode exactly as ``check_message`` does)

    def _slice(self, at: I64, length: I64, i: int) -> bytes:
        start = int(at[i])
        return bytes(self.buf[start : start + max(int(length[i]), 0)])

    def topic_bytes(self, i: int) -> bytes:
        return self._slice(self.topic_at, self.topic_length, i)

    def topic(self, i: int) -> str:
        return _decode_text(self.topic_bytes(i))

    def properties_raw(self, i: int) -> bytes:
        return self._slice(self.properties_at, self.properties_length, i)

    def properties(self, i: int) -> dict[str, str]:
        if self.properties_length[i] <= 0:
            return {}
        return props.parse_properties(self.properties_raw(i).decode("utf-8", "replace"))

    def body(self, i: int) -> bytes:
        return self._slice(self.body_at, self.body_length, i)

    def _host(self, at: I64, port: I64, v6_flag: int, i: int) -> HostAddress:
        size = cl.IPV6_HOST_SIZE if int(self.sys_flag[i]) & v6_flag else cl.IPV4_HOST_SIZE
        start = int(at[i])
        return HostAddress(bytes(self.buf[start : start + size - _PORT_SIZE]), int(port[i]))

    def born_host(self, i: int) -> HostAddress:
        return self._host(self.born_host_at, self.born_port, cl.BORNHOST_V6_FLAG, i)

    def store_host(self, i: int) -> HostAddress:
        return self._host(self.store_host_at, self.store_port, cl.STOREHOSTADDRESS_V6_FLAG, i)

    def record(self, i: int, *, with_body: bool = True) -> cl.MessageRecord:
        """Record ``i`` as the :class:`~rmqinspect.format.commitlog.MessageRecord`
        ``check_message`` builds (``with_body`` is its ``read_body``)."""
        properties_raw = self.properties_raw(i) if self.properties_length[i] > 0 else b""
        return cl.MessageRecord(
            position=self.file_start + int(self.positions[i]),
            store_size=int(self.sizes[i]),
            magic=int(self.magic[i]),
            body_crc=int(self.body_crc[i]),
            queue_id=int(self.queue_id[i]),
            flag=int(self.flag[i]),
            queue_offset=int(self.queue_offset[i]),
            physical_offset=int(self.physical_offset[i]),
            sys_flag=int(self.sys_flag[i]),
            born_timestamp=int(self.born_timestamp[i]),
            born_host=self.born_host(i),
            store_timestamp=int(self.store_timestamp[i]),
            store_host=self.store_host(i),
            reconsume_times=int(self.reconsume_times[i]),
            prepared_transaction_offset=int(self.prepared_transaction_offset[i]),
            body_length=int(self.body_length[i]),
            body=self.body(i) if with_body else None,
            topic=self.topic(i),
            properties_raw=properties_raw,
            properties=self.properties(i),
        )

    def records(
        self, rows: Sequence[int] | I64, *, with_body: bool = True
    ) -> list[cl.MessageRecord]:
        return [self.record(int(i), with_body=with_body) for i in rows]

    def tags_code(self, i: int, delay_levels: Mapping[int, int]) -> int | None:
        """The tagsCode ``check_message`` computes for dispatch (``cl.dispatch_tags_code``);
        None where a schedule record's DELAY makes the check fail."""
        if self.properties_length[i] <= 0:
            return 0
        p = self.properties(i)
        tags = p.get(props.TAGS)
        topic = self.topic(i)
        if topic != cl.SCHEDULE_TOPIC:
            return _tag_hash(tags)
        return cl.dispatch_tags_code(
            topic, tags, p.get(props.DELAY), int(self.store_timestamp[i]), delay_levels
        )

    def body_crcs(self) -> I64:
        """The masked CRC-32 of every record's body (0 for an empty body, as for ``b""``)."""
        buf = self.buf
        out = np.zeros(len(self), np.int64)
        has = np.flatnonzero(self.body_length > 0)
        if len(has):
            at = self.body_at[has].tolist()
            stop = (self.body_at[has] + self.body_length[has]).tolist()
            out[has] = [crc32(buf[a:b]) for a, b in zip(at, stop, strict=True)]
            out &= CRC_MASK
        return out

    def topic_ids(self) -> tuple[I64, list[bytes]]:
        """Each record's topic as an index into a short list of distinct topic byte strings.

        Records are grouped by a hash of (length, first 8 bytes, last 8 bytes) with numpy; a
        group whose members all hold the same bytes (compared in full) gets one id, any other
        group is resolved record by record. No bytes object per record.
        """
        n = len(self)
        ids = np.zeros(n, np.int64)
        names: dict[bytes, int] = {}
        if not n:
            return ids, []
        data = np.frombuffer(self.buf, np.uint8)
        at, length = self.topic_at, np.maximum(self.topic_length, 0)
        every = ~np.uint64(0)
        # Keep only the bytes inside the topic, so what surrounds a short topic cannot split it.
        shift = (8 * np.minimum(length, 7)).astype(np.uint64)
        head = _u64(data, at) & np.where(length >= 8, every, ~(every >> shift))
        tail = np.where(length >= 8, _u64(data, at + length - 8), np.uint64(0))
        with np.errstate(over="ignore"):
            key = (
                head * np.uint64(0x9E3779B97F4A7C15)
                ^ tail
                ^ (length.astype(np.uint64) << np.uint64(48))
            )
        order = np.argsort(key, kind="stable")
        bounds = np.flatnonzero(np.diff(key[order])) + 1
        for members in np.split(order, bounds):
            first = int(members[0])
            size = int(length[first])
            rows = data[np.minimum(at[members], len(data) - size)[:, None] + np.arange(size)]
            if (length[members] == size).all() and (rows == rows[0]).all():
                ids[members] = names.setdefault(self.topic_bytes(first), len(names))
            else:  # a hash collision between different topics: resolve one by one
                for j in members.tolist():
                    ids[j] = names.setdefault(self.topic_bytes(j), len(names))
        return ids, list(names)

    def topic_mask(self, wanted: Sequence[str]) -> Mask:
        """Records whose (decoded) topic is one of ``wanted``."""
        ids, topics = self.topic_ids()
        hit = [i for i, t in enumerate(topics) if _decode_text(t) in wanted]
        return np.isin(ids, hit)


_ARRAY_FIELDS = tuple(
    name for name in RecordColumns.__dataclass_fields__ if name not in ("buf", "file_start")
)


@functools.lru_cache(maxsize=4096)
def _tag_hash(tags: str | None) -> int:
    """``cl.dispatch_tags_code`` outside the schedule topic depends on TAGS only: cached."""
    return cl.dispatch_tags_code("", tags, None, 0, {}) or 0


def gather(buf: Buffer, positions: I64 | Walk, file_start: int = 0) -> RecordColumns:
    """Read every field of the records starting at ``positions`` (message headers that fit the
    buffer, such as a :class:`Walk`'s) with a few numpy gathers, and say which are well formed."""
    p = positions.positions if isinstance(positions, Walk) else positions
    data = np.frombuffer(buf, np.uint8)
    head = windows(data, p, _HEAD_DTYPE.itemsize).view(_HEAD_DTYPE).reshape(-1)
    sizes = head["total_size"].astype(np.int64)
    ends = p + sizes
    sys_flag = head["sys_flag"].astype(np.int64)
    magic = head["magic"].astype(np.int64)
    born_v6 = (sys_flag & cl.BORNHOST_V6_FLAG) != 0
    store_v6 = (sys_flag & cl.STOREHOSTADDRESS_V6_FLAG) != 0
    born_host_at = p + cl.BORNHOST_POS
    block = windows(data, born_host_at, _HOSTS_WIDTH)
    hosts = {name: np.zeros(len(p), np.int64) for name in _HOSTS_FIELDS}
    for (b6, s6), dtype in _HOST_LAYOUTS.items():
        rows = (born_v6 == b6) & (store_v6 == s6)
        if rows.any():
            values = block.view(dtype).reshape(-1)
            for name in _HOSTS_FIELDS:
                got = values[name].astype(np.int64)
                hosts[name] = got if rows.all() else np.where(rows, got, hosts[name])
    born_size = np.where(born_v6, cl.IPV6_HOST_SIZE, cl.IPV4_HOST_SIZE)
    store_size = np.where(store_v6, cl.IPV6_HOST_SIZE, cl.IPV4_HOST_SIZE)
    store_host_at = born_host_at + born_size + cl.STORETIMESTAMP_SIZE
    mid_at = store_host_at + store_size
    # Up to STORETIMESTAMP every record fits (TOTALSIZE >= MIN_RECORD_SIZE); IPv6 hosts in a
    # short record can put the mid fields past its end.
    ok = mid_at + cl.MID_FIELDS_STRUCT.size <= ends
    body_length = np.where(ok, hosts["body_length"], 0)
    body_at = mid_at + cl.BODY_REL
    topic_length_at = body_at + np.maximum(body_length, 0)
    v2 = magic == _V2
    topic_length_size = np.where(v2, 2, 1)
    ok &= topic_length_at + topic_length_size <= ends
    topic_length = np.where(
        ok, np.where(v2, _be(data, topic_length_at, 2), _be(data, topic_length_at, 1)), 0
    )
    topic_at = topic_length_at + topic_length_size
    ok &= topic_length >= 0
    properties_length_at = topic_at + np.maximum(topic_length, 0)
    ok &= properties_length_at + 2 <= ends
    properties_length = np.where(ok, _be(data, properties_length_at, 2), 0)
    properties_at = properties_length_at + 2
    ok &= properties_at + np.maximum(properties_length, 0) == ends
    return RecordColumns(
        buf,
        file_start,
        positions=p,
        sizes=sizes,
        magic=magic,
        body_crc=head["body_crc"].astype(np.int64),
        queue_id=head["queue_id"].astype(np.int64),
        flag=head["flag"].astype(np.int64),
        queue_offset=head["queue_offset"].astype(np.int64),
        physical_offset=head["physical_offset"].astype(np.int64),
        sys_flag=sys_flag,
        born_timestamp=head["born_timestamp"].astype(np.int64),
        born_host_at=born_host_at,
        born_port=hosts["born_port"],
        store_timestamp=hosts["store_timestamp"],
        store_host_at=store_host_at,
        store_port=np.where(ok, hosts["store_port"], 0),
        reconsume_times=np.where(ok, hosts["reconsume_times"], 0),
        prepared_transaction_offset=np.where(ok, hosts["prepared_transaction_offset"], 0),
        body_at=body_at,
        body_length=body_length,
        topic_at=topic_at,
        topic_length=topic_length,
        properties_at=properties_at,
        properties_length=properties_length,
        well_formed=ok,
    )


# --- the broker's check, many records at a time -----------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class CheckedRun:
    """Consecutive records from ``start`` that ``check_message`` accepts as messages, and the
    verdict on what ended them: a BLANK or a failure at ``end``, or None when the run stopped at
    its record limit (the next run starts at ``end``)."""

    columns: RecordColumns
    start: int
    end: int
    stop: cl.CheckResult | None
    options: cl.CheckOptions

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def failed(self) -> bool:
        """The run ended at a record the check rejects (not a BLANK, not the record limit)."""
        return self.stop is not None and not self.stop.success

    def tags_code(self, i: int) -> int:
        """The tagsCode ``check_message`` gave record ``i`` (always computable: a record whose
        DELAY makes the check fail is not in the run)."""
        code = self.columns.tags_code(i, _delay_table(self.options.delay_levels))
        assert code is not None
        return code


@functools.lru_cache(maxsize=16)
def _delay_table(levels: tuple[tuple[int, int], ...]) -> Mapping[int, int]:
    return dict(levels)


def check_run(
    buf: Buffer,
    pos: int,
    file_start: int = 0,
    options: cl.CheckOptions | None = None,
    *,
    max_records: int = RUN_RECORDS,
) -> CheckedRun:
    """The records from ``pos`` that ``cl.check_message(buf, p, file_start, options)`` accepts
    as messages, in order, up to ``max_records``, and the exact verdict that ended them.

    Runs of well-formed records are judged with numpy (lengths, CRCs, the schedule topic's
    DELAY, DUP_INFO, the property CRC); a record the fast path is not certain about is handed
    to ``check_message``, whose verdict stands.
    """
    opts = options or cl.CheckOptions()
    accept_v2 = opts.profile.accepts_v2_magic
    parts: list[RecordColumns] = []
    taken = 0
    at = pos
    stop: cl.CheckResult | None = None
    while taken < max_records:
        w = walk(buf, at, accept_v2=accept_v2, max_records=max_records - taken)
        cols = gather(buf, w.positions, file_start)
        k = _certain(cols, opts)
        if k:
            parts.append(cols.select(slice(0, k)) if k < len(cols) else cols)
            taken += k
        if k == len(cols) and w.stop is WalkStop.LIMIT:
            at = w.end
            continue
        at = int(w.positions[k]) if k < len(cols) else w.end
        result = cl.check_message(buf, at, file_start, opts)
        if not result.is_message:
            stop = result
            break
        parts.append(gather(buf, np.array([at], np.int64), file_start))
        taken += 1
        at += result.size
    return CheckedRun(RecordColumns.concat(parts, buf, file_start), pos, at, stop, opts)


_SCHEDULE = np.frombuffer(cl.SCHEDULE_TOPIC.encode(), np.uint8)
_CRC_TAIL = (props.CRC32 + props.NAME_VALUE_SEPARATOR).encode()
_DIGITS = cl.CRC32_RESERVED_LEN - len(_CRC_TAIL) - 1  # ten digits, then 0x02
_SEPARATOR = ord(props.PROPERTY_SEPARATOR)


def _certain(cols: RecordColumns, opts: cl.CheckOptions) -> int:
    """How many leading records of ``cols`` ``check_message`` certainly accepts, each with
    ``(TOTALSIZE, true)``: well formed (so the 5.3 bounds checks and every scratch-buffer fit
    pass too), and passing each check ``opts`` enables."""
    k = _first_false(cols.well_formed)
    if not k:
        return 0
    if opts.check_dup_info:
        k = next((i for i in range(k) if not cl.dup_info_valid(cols.properties(i))), k)
    k = _schedule_ok(cols, k)
    if opts.check_crc and opts.force_verify_prop_crc:
        k = _prop_crc_ok(cols, k)
    elif opts.check_crc and opts.read_body and k:
        first = cols.select(slice(0, k))
        k = _first_false(first.body_crcs() == first.body_crc)
    return k


def _schedule_ok(cols: RecordColumns, k: int) -> int:
    """Cut at the first schedule-topic record whose DELAY makes the check fail."""
    data = np.frombuffer(cols.buf, np.uint8)
    n = len(_SCHEDULE)
    cand = np.flatnonzero((cols.topic_length[:k] == n) & (cols.properties_length[:k] > 0))
    if not len(cand):
        return k
    rows = windows(data, cols.topic_at[cand], n)
    for i in cand[(rows == _SCHEDULE).all(axis=1)].tolist():
        if not _delay_parses(cols.properties_raw(i)):
            return int(i)
    return k


_DELAY_ENTRY = (props.DELAY + props.NAME_VALUE_SEPARATOR).encode()
_SURE_INT = re.compile(rb"[+-]?[0-9]{1,9}\Z")  # Integer.parseInt takes it whatever the digits


def _delay_parses(raw: bytes) -> bool:
    """Whether the properties ``raw`` certainly have no DELAY or an integer one (the only way a
    schedule record passes the check). False also where unsure (several DELAY entries, an
    unusual number): ``check_message`` then decides."""
    at = raw.find(_DELAY_ENTRY)
    if at < 0:
        return True
    if raw.find(_DELAY_ENTRY, at + 1) >= 0:
        return False
    if at > 0 and raw[at - 1] != _SEPARATOR:
        return True  # inside another entry: there is no DELAY property
    end = raw.find(_SEPARATOR, at)
    value = raw[at + len(_DELAY_ENTRY) : end if end >= 0 else len(raw)]
    return _SURE_INT.match(value) is not None


def _prop_crc_ok(cols: RecordColumns, k: int) -> int:
    """Cut at the first record whose properties do not end in the canonical ``__CRC32#`` entry
    (preceded by a separator or alone) holding the CRC of the record without its 20-byte tail.
    Anything else may still pass ``check_message`` (it parses the properties): it decides."""
    data = np.frombuffer(cols.buf, np.uint8)
    p, ends = cols.positions[:k], cols.ends[:k]
    tail_at = ends - cl.CRC32_RESERVED_LEN
    plen = cols.properties_length[:k]
    ok = plen >= cl.CRC32_RESERVED_LEN
    tail = data[np.where(ok, tail_at, p)[:, None] + np.arange(cl.CRC32_RESERVED_LEN)]
    ok &= (tail[:, : len(_CRC_TAIL)] == np.frombuffer(_CRC_TAIL, np.uint8)).all(axis=1)
    digits = tail[:, len(_CRC_TAIL) : len(_CRC_TAIL) + _DIGITS].astype(np.int64) - ord("0")
    ok &= ((digits >= 0) & (digits <= 9)).all(axis=1) & (tail[:, -1] == _SEPARATOR)
    before = data[np.maximum(tail_at - 1, 0)]
    ok &= (plen == cl.CRC32_RESERVED_LEN) | (before == _SEPARATOR)
    k = _first_false(ok)
    # The digits are written least significant first.
    stored = digits[:k] @ (10 ** np.arange(_DIGITS, dtype=np.int64))
    buf = cols.buf
    computed = [
        masked_crc32(buf[a:b]) for a, b in zip(p[:k].tolist(), tail_at[:k].tolist(), strict=True)
    ]
    return _first_false(stored == np.array(computed, np.int64))


# --- past damage ---------------------------------------------------------------------------------


def _magic_pattern(*magics: int) -> re.Pattern[bytes]:
    return re.compile(b"|".join(re.escape(_I32.pack(m)) for m in magics))


_MAGICS_V1 = _magic_pattern(_V1, cl.BLANK_MAGIC_CODE)
_MAGICS_V2 = _magic_pattern(_V1, _V2, cl.BLANK_MAGIC_CODE)


def resync(
    buf: Buffer,
    pos: int,
    stop: int,
    file_start: int = 0,
    options: cl.CheckOptions | None = None,
    *,
    own_offset: bool = True,
) -> int | None:
    """The next position in ``(pos, stop)`` (its header before ``stop``) that holds a record
    ``check_message`` accepts as a message, or the file's closing BLANK (one whose TOTALSIZE
    is exactly the rest of the file); None when there is none.

    Candidates are found by searching for the magic codes, not by stepping through positions.
    With ``own_offset`` a message must also name its own position in its PHYSICALOFFSET field,
    which rules out stale bytes of another file (or of an earlier generation of this one).
    """
    opts = options or cl.CheckOptions()
    pattern = _MAGICS_V2 if opts.profile.accepts_v2_magic else _MAGICS_V1
    search_at = pos + 1 + cl.MAGIC_POS
    while True:
        m = pattern.search(buf, search_at, stop)
        if m is None:
            return None
        cand = m.start() - cl.MAGIC_POS
        r = cl.check_message(buf, cand, file_start, opts)
        if r.is_blank and r.total_size == len(buf) - cand:
            return cand
        if (
            r.is_message
            and r.record is not None
            and (not own_offset or r.record.physical_offset == file_start + cand)
        ):
            return cand
        search_at = m.start() + 1


_EXTENT_STEP = 1 << 22


def data_extent(buf: Buffer, begin: int) -> int:
    """Bytes from ``begin`` to the last non-zero byte of ``buf`` (inclusive), found by scanning
    back from the end in chunks: past it lie only zeros, which hold no record."""
    end = len(buf)
    while end > begin:
        lo = max(begin, end - _EXTENT_STEP)
        chunk = np.frombuffer(buf, np.uint8, end - lo, lo)
        if chunk.any():
            return end - int(np.argmax(chunk[::-1] != 0)) - begin
        end = lo
    return 0


@dataclass(frozen=True, slots=True)
class Skipped:
    """Bytes ``[start, end)`` of a file that hold no readable record: ``result`` is the check's
    verdict at ``start``; ``end`` is the next record found, or the end of the file's data."""

    start: int
    end: int
    result: cl.CheckResult

    @property
    def length(self) -> int:
        return self.end - self.start


FileEvent = CheckedRun | Skipped


def scan_file(
    buf: Buffer,
    file_start: int = 0,
    pos: int = 0,
    options: cl.CheckOptions | None = None,
    *,
    resync_damage: bool = True,
    own_offset: bool = True,
    max_records: int = RUN_RECORDS,
) -> Iterator[FileEvent]:
    """Every run of checked records of one file from ``pos``, and the damage between them.

    Each run is yielded (the last one also when it holds no record, for its ``stop``). A BLANK
    ends the file; so does a failure followed only by zeros (the end of the data). A failure
    with data after it is yielded as :class:`Skipped`: up to the next record :func:`resync`
    finds (with ``resync_damage``; ``own_offset`` as there), else up to the end of the data,
    where the file ends. Runs, skipped ranges, the BLANK and the zero tail cover the file.
    """
    opts = options or cl.CheckOptions()
    data_end: int | None = None
    while True:
        run = check_run(buf, pos, file_start, opts, max_records=max_records)
        if len(run) or run.stop is not None:
            yield run
        pos = run.end
        if run.stop is None:
            continue
        if run.stop.success:
            return
        if data_end is None:
            data_end = pos + data_extent(buf, pos)
        if pos >= data_end:
            return
        nxt = (
            resync(buf, pos, data_end, file_start, opts, own_offset=own_offset)
            if resync_damage
            else None
        )
        if nxt is None:
            yield Skipped(pos, data_end, run.stop)
            return
        yield Skipped(pos, nxt, run.stop)
        pos = nxt
