"""Commitlog records as numpy columns: gathering every field of walked records.

Pure functions over one whole commitlog file given as a buffer and the file's first physical
offset; every position is a buffer position. :func:`walk` (:mod:`rmqinspect.format.record_walk`)
follows TOTALSIZE (the only sequential part) through message headers; :func:`gather` reads every
field of the walked records at once, each position derived from the layout constants of
:mod:`rmqinspect.format.commitlog`, into :class:`RecordColumns`. What dispatch derives from
their properties (tagsCode, index keys) is :mod:`rmqinspect.format.record_keys`'. This module
re-exports both modules' names. The verdicts on those records are :mod:`rmqinspect.format.scan`'s.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format import record_keys, speedups
from rmqinspect.format.crc import CRC_MASK
from rmqinspect.format.host import HostAddress
from rmqinspect.format.npbytes import (
    I64,
    Buffer,
    Mask,
    be_ints,
    members,
    span_ids,
    zero_filled_windows,
)
from rmqinspect.format.properties_text import PropertiesText
from rmqinspect.format.record_keys import IndexKeys as IndexKeys
from rmqinspect.format.record_keys import decode_text as decode_text
from rmqinspect.format.record_keys import tag_hash
from rmqinspect.format.record_walk import RUN_RECORDS as RUN_RECORDS
from rmqinspect.format.record_walk import Walk as Walk
from rmqinspect.format.record_walk import WalkStop as WalkStop
from rmqinspect.format.record_walk import headers_plausible as headers_plausible
from rmqinspect.format.record_walk import stop_reason
from rmqinspect.format.record_walk import walk as walk

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


# --- columns ------------------------------------------------------------------------------------


def enters_consume_queue(sys_flag: I64) -> Mask:
    """Whether records of these SYSFLAGs are dispatched to a consume queue: NOT and COMMIT
    records are, PREPARED and ROLLBACK ones not."""
    tt = sys_flag & cl.TRANSACTION_TYPE_MASK
    out: Mask = (tt == cl.TRANSACTION_NOT_TYPE) | (tt == cl.TRANSACTION_COMMIT_TYPE)
    return out


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
    store_size: I64  # TOTALSIZE
    magic: I64
    body_crc: I64
    queue_id: I64
    flag: I64
    queue_offset: I64
    physical_offset_field: I64  # PHYSICALOFFSET as stored (``positions`` + file start: where)
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
        return self.positions + self.store_size

    @property
    def end(self) -> int:
        """Buffer position after the last record (0 for no record)."""
        return int(self.positions[-1] + self.store_size[-1]) if len(self) else 0

    @property
    def version(self) -> I64:
        """1 or 2, by magic code."""
        return np.where(self.magic == _V2, 2, 1)

    def enters_consume_queue(self) -> Mask:
        """NOT and COMMIT records are dispatched to a consume queue; PREPARED and ROLLBACK are
        not (``MessageRecord.enters_consume_queue`` for many records)."""
        return enters_consume_queue(self.sys_flag)

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
        position, size = int(self.positions[i]), int(self.store_size[i])
        prop_crc = cl.record_prop_crc(self.buf, position, size, properties) if with_body else None
        return cl.MessageRecord(
            position=self.file_start + int(self.positions[i]),
            store_size=int(self.store_size[i]),
            magic=int(self.magic[i]),
            body_crc=int(self.body_crc[i]),
            queue_id=int(self.queue_id[i]),
            flag=int(self.flag[i]),
            queue_offset=int(self.queue_offset[i]),
            physical_offset_field=int(self.physical_offset_field[i]),
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
            return tag_hash(tags)
        return cl.dispatch_tags_code(
            topic, tags, p.get(props.DELAY), int(self.store_timestamp[i]), delay_levels
        )

    def tags_codes(
        self,
        rows: I64,
        delay_levels: Mapping[int, int],
        topics: tuple[I64, Sequence[str]] | None = None,
    ) -> tuple[I64, Mask]:
        """:meth:`tags_code` of each record of ``rows`` (ascending), and whether it is known:
        :func:`rmqinspect.format.record_keys.tags_codes`."""
        return record_keys.tags_codes(self, rows, delay_levels, topics)

    def index_keys(
        self, rows: I64, topic_ids: I64 | None = None, topics: Sequence[str] | None = None
    ) -> IndexKeys:
        """The keys ``IndexService.buildIndex`` puts for the records ``rows`` (ascending, well
        formed), in order: :func:`rmqinspect.format.record_keys.index_keys`."""
        return record_keys.index_keys(self, rows, topic_ids, topics)

    def _texts(self, at: I64, length: I64) -> list[str]:
        """The spans as text (Java's decoding), built without a Python loop."""
        spans = map(slice, at.tolist(), (at + length).tolist())
        return list(map(_DECODE, map(bytes, map(self.buf.__getitem__, spans))))

    def body_crcs(self) -> I64:
        """The masked CRC-32 of every record's body (0 for an empty body, as for ``b""``, and
        for a record that is not well formed)."""
        lengths = np.where(self.well_formed, np.maximum(self.body_length, 0), 0)
        out: I64 = speedups.crc32_many(self.buf, self.body_at, lengths) & CRC_MASK
        return out

    def topic_ids(self) -> tuple[I64, list[bytes]]:
        """Each record's topic as an index into a short list of distinct topic byte strings
        (:func:`span_ids` over the topic fields)."""
        return span_ids(self.buf, self.topic_at, np.maximum(self.topic_length, 0))

    def property_spans(self, name: str, rows: I64) -> tuple[I64, I64]:
        """Where ``properties(i).get(name)`` lies for each record of ``rows`` (ascending): the
        buffer position and byte length of its value, (-1, 0) where there is none (see
        :class:`PropertiesText`; make one to look up several names)."""
        return PropertiesText(self, rows).spans(name)

    def property_values(self, name: str, rows: I64) -> list[str | None]:
        """``properties(i).get(name)`` for each record of ``rows`` (ascending), found by
        :meth:`property_spans` instead of parsing every record's properties."""
        starts, lengths = self.property_spans(name, rows)
        out = np.full(len(rows), None, object)
        present = np.flatnonzero(starts >= 0)
        out[present] = self._texts(starts[present], lengths[present])
        values: list[str | None] = out.tolist()
        return values

    def topic_mask(self, wanted: Sequence[str]) -> Mask:
        """Records whose (decoded) topic is one of ``wanted``."""
        ids, topics = self.topic_ids()
        hit = [i for i, t in enumerate(topics) if decode_text(t) in wanted]
        return members(ids, np.array(hit, np.int64))


_DECODE = operator.methodcaller("decode", "utf-8", "replace")

_ARRAY_FIELDS = tuple(
    name for name in RecordColumns.__dataclass_fields__ if name not in ("buf", "file_start")
)


def check_extension_columns(gathered: Sequence[str], message_fields: Sequence[str]) -> None:
    """Refuse an extension whose column names are not :class:`RecordColumns`' own (a build
    older or newer than this package): its gather rows fill the columns they name, every column
    after ``positions`` exactly once, and the JSON writer reads columns by name."""
    if not gathered and not message_fields:
        return  # not built: the numpy twins read the columns
    if sorted(gathered) != sorted(_ARRAY_FIELDS[1:]) or not set(message_fields) <= set(
        _ARRAY_FIELDS
    ):
        raise ImportError(
            "rmqinspect.format._speedups does not match this rmqinspect (its columns are "
            f"{', '.join(gathered)}); rebuild it (pip install -e .)"
        )


check_extension_columns(speedups.gather_columns(), speedups.message_fields())

# The layout constants the C gather reads records with, in its order.
_LAYOUT = (
    cl.TOTALSIZE_POS,
    cl.MAGIC_POS,
    cl.BODYCRC_POS,
    cl.QUEUEID_POS,
    cl.FLAG_POS,
    cl.QUEUEOFFSET_POS,
    cl.PHYSICALOFFSET_POS,
    cl.SYSFLAG_POS,
    cl.BORNTIMESTAMP_POS,
    cl.BORNHOST_POS,
    cl.IPV4_HOST_SIZE,
    cl.IPV6_HOST_SIZE,
    cl.BORNHOST_V6_FLAG,
    cl.STOREHOSTADDRESS_V6_FLAG,
    cl.STORETIMESTAMP_SIZE,
    cl.MID_POS["reconsume_times"],
    cl.MID_POS["prepared_transaction_offset"],
    cl.MID_POS["body_length"],
    cl.MID_FIELDS_STRUCT.size,
    _V2,
)


def gather(buf: Buffer, positions: I64 | Walk, file_start: int = 0) -> RecordColumns:
    """Read every field of the records starting at ``positions`` (message headers, such as a
    :class:`Walk`'s) in one pass, and say which are well formed. Bytes outside the buffer read
    as zeros (a short record at its end, or a TOTALSIZE that lies)."""
    p = positions.positions if isinstance(positions, Walk) else positions
    fields = speedups.gather_fields(buf, p, _LAYOUT)
    if fields is None:
        return py_gather(buf, p, file_start)
    arrays = dict(zip(speedups.gather_columns(), fields, strict=True))
    well_formed: Mask = arrays.pop("well_formed") != 0
    return RecordColumns(buf, file_start, positions=p, well_formed=well_formed, **arrays)


def walk_columns(
    buf: Buffer,
    pos: int = 0,
    *,
    accept_v2: bool = True,
    max_records: int = RUN_RECORDS,
    file_start: int = 0,
    with_crc: bool = False,
) -> tuple[Walk, RecordColumns, I64 | None]:
    """:func:`walk` from ``pos`` and :func:`gather` of the records walked, and with
    ``with_crc`` their :meth:`RecordColumns.body_crcs` (else None): in one C pass over the
    bytes when the extension is built (a record's bytes are read once, while in cache)."""
    magics = (_V1, _V2) if accept_v2 else (_V1,)
    found = speedups.walk_gather(
        buf, pos, max_records, cl.MIN_RECORD_SIZE, magics, _LAYOUT, with_crc
    )
    if found is None:
        w = walk(buf, pos, accept_v2=accept_v2, max_records=max_records)
        cols = gather(buf, w, file_start)
        return w, cols, cols.body_crcs() if with_crc else None
    p, fields, crcs, end = found
    stop = WalkStop.LIMIT if len(p) == max_records else stop_reason(buf, end, accept_v2)
    arrays = dict(zip(speedups.gather_columns(), fields, strict=True))
    well_formed: Mask = arrays.pop("well_formed") != 0
    cols = RecordColumns(buf, file_start, positions=p, well_formed=well_formed, **arrays)
    w = Walk(p, cols.store_size, end, stop)
    return w, cols, (crcs & CRC_MASK) if with_crc else None


def py_gather(buf: Buffer, p: I64, file_start: int = 0) -> RecordColumns:
    """:func:`gather` with numpy gathers (the C loop's twin)."""
    data = np.frombuffer(buf, np.uint8)
    head = zero_filled_windows(data, p, _HEAD_DTYPE.itemsize).view(_HEAD_DTYPE).reshape(-1)
    sizes = head["store_size"].astype(np.int64)
    ends = p + sizes
    sys_flag = head["sys_flag"].astype(np.int64)
    magic = head["magic"].astype(np.int64)
    born_v6 = (sys_flag & cl.BORNHOST_V6_FLAG) != 0
    store_v6 = (sys_flag & cl.STOREHOSTADDRESS_V6_FLAG) != 0
    born_host_at = p + cl.BORNHOST_POS
    block = zero_filled_windows(data, born_host_at, _HOSTS_WIDTH)
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
        ok,
        np.where(
            v2, be_ints(data, topic_length_at, 2, True), be_ints(data, topic_length_at, 1, True)
        ),
        0,
    )
    topic_at = topic_length_at + topic_length_size
    ok &= topic_length >= 0
    properties_length_at = topic_at + np.maximum(topic_length, 0)
    ok &= properties_length_at + 2 <= ends
    properties_length = np.where(ok, be_ints(data, properties_length_at, 2, zero_filled=True), 0)
    properties_at = properties_length_at + 2
    ok &= properties_at + np.maximum(properties_length, 0) == ends
    return RecordColumns(
        buf,
        file_start,
        positions=p,
        store_size=sizes,
        magic=magic,
        body_crc=head["body_crc"].astype(np.int64),
        queue_id=head["queue_id"].astype(np.int64),
        flag=head["flag"].astype(np.int64),
        queue_offset=head["queue_offset"].astype(np.int64),
        physical_offset_field=head["physical_offset_field"].astype(np.int64),
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
