"""Commitlog records as numpy columns: walking TOTALSIZE and gathering every field.

Pure functions over one whole commitlog file given as a buffer and the file's first physical
offset; every position is a buffer position. :func:`walk` follows TOTALSIZE (the only
sequential part) through message headers; :func:`gather` reads every field of the walked
records at once, each position derived from the layout constants of
:mod:`rmqinspect.format.commitlog`, into :class:`RecordColumns`. The verdicts on those records
are :mod:`rmqinspect.format.scan`'s.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format import speedups
from rmqinspect.format.crc import CRC_MASK
from rmqinspect.format.host import HostAddress

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
Buffer = bytes | memoryview

RUN_RECORDS = 1 << 14  # records per run: bounds the columns' memory, not the file size
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
    return speedups.rows(data, at, width)


def _be(data: npt.NDArray[np.uint8], at: I64, width: int) -> I64:
    """The big-endian signed integer of ``width`` (1, 2 or 4) bytes at every position of
    ``at`` (positions outside the buffer read meaningless values, see :func:`windows`)."""
    if len(data) < width:
        return np.zeros(len(at), np.int64)
    out: I64 = windows(data, at, width).view(_NUMPY_CODES["bhi"[width >> 1]]).reshape(-1)
    return out.astype(np.int64)


def _u64(data: npt.NDArray[np.uint8], at: I64) -> npt.NDArray[np.uint64]:
    """The eight bytes at every position of ``at`` as one big-endian unsigned integer."""
    out: npt.NDArray[np.uint64] = windows(data, at, 8).view(">u8").reshape(-1).astype(np.uint64)
    return out


def first_false(ok: Mask) -> int:
    """The index of the first False in ``ok`` (its length when all hold)."""
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

    The chain is followed by :func:`rmqinspect.format.speedups.walk_chain` (in C when built).
    """
    magics = (_V1, _V2) if accept_v2 else (_V1,)
    p, sizes, end = speedups.walk_chain(buf, pos, max_records, cl.MIN_RECORD_SIZE, magics)
    if len(p) == max_records:
        return Walk(p, sizes, end, WalkStop.LIMIT)
    return Walk(p, sizes, end, _stop_reason(buf, end, accept_v2))


def _stop_reason(buf: Buffer, at: int, accept_v2: bool) -> WalkStop:
    if at + 8 > len(buf):
        return WalkStop.BAD_SIZE
    _, magic = _HEAD2.unpack_from(buf, at)
    if magic == _V1 or (accept_v2 and magic == _V2):
        return WalkStop.BAD_SIZE
    return WalkStop.BLANK if magic == cl.BLANK_MAGIC_CODE else WalkStop.BAD_MAGIC


# --- columns ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def decode_text(raw: bytes) -> str:
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
        return decode_text(self.topic_bytes(i))

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
        properties = self.properties(i)
        position, size = int(self.positions[i]), int(self.sizes[i])
        prop_crc = cl.record_prop_crc(self.buf, position, size, properties) if with_body else None
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
            properties=properties,
            prop_crc=prop_crc,
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
        """The masked CRC-32 of every record's body (0 for an empty body, as for ``b""``, and
        for a record that is not well formed)."""
        lengths = np.where(self.well_formed, np.maximum(self.body_length, 0), 0)
        out: I64 = speedups.crc32_many(self.buf, self.body_at, lengths) & CRC_MASK
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

    def property_values(self, name: str, rows: I64) -> list[str | None]:
        """``properties(i).get(name)`` for each record of ``rows`` (ascending), found by one
        search over the buffer instead of parsing every record's properties: the last entry
        named ``name`` that starts an entry and has a non-empty value (as
        :func:`rmqinspect.format.properties.property_value` rules, for one record)."""
        out: list[str | None] = [None] * len(rows)
        if not len(rows):
            return out
        at = self.properties_at[rows]
        end = at + np.maximum(self.properties_length[rows], 0)
        needle = name.encode("utf-8") + b"\x01"
        buf = self.buf
        lo, hi = int(at[0]), int(end.max())
        hits = np.array([m.start() for m in re.finditer(re.escape(needle), buf[lo:hi])], np.int64)
        if not len(hits):
            return out
        hits += lo
        owner = np.searchsorted(at, hits, side="right") - 1
        keep = owner >= 0
        owner, hits = owner[keep], hits[keep]
        inside = hits + len(needle) <= end[owner]
        data = np.frombuffer(buf, np.uint8)
        starts_entry = (hits == at[owner]) | (data[np.maximum(hits - 1, 0)] == _SEPARATOR)
        keep = inside & starts_entry
        for k, h in zip(owner[keep].tolist(), hits[keep].tolist(), strict=True):
            rest = bytes(buf[h + len(needle) : int(end[k])])
            sep = rest.find(b"\x02")
            value = rest if sep < 0 else rest[:sep]
            if value:  # an empty value is no entry: an earlier one stands
                out[k] = value.decode("utf-8", "replace")
        return out

    def topic_mask(self, wanted: Sequence[str]) -> Mask:
        """Records whose (decoded) topic is one of ``wanted``."""
        ids, topics = self.topic_ids()
        hit = [i for i, t in enumerate(topics) if decode_text(t) in wanted]
        return np.isin(ids, hit)


_ARRAY_FIELDS = tuple(
    name for name in RecordColumns.__dataclass_fields__ if name not in ("buf", "file_start")
)


_SEPARATOR = ord(props.PROPERTY_SEPARATOR)


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
