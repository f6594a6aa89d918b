"""What consume-queue units lead to: the one rule behind ``consumequeue``, ``lookup``, the
export's ``consume_queue`` table and verify's unit checks.

A unit's status is decided in this order: a fillPreBlank placeholder; invalid (the broker's
``offset >= 0 && size > 0`` fails); past the commitlog files (or past ``data_end`` when the
caller knows where the data ends); in no commitlog file (below the first one, or in a gap);
then the record there. The broker's ``getMessage`` serves whatever bytes the unit names; the
checks on the record are forensic: it decodes (with the magics the store's version knows), its
TOTALSIZE is the unit's size, and it is in the unit's queue at the unit's offset, which for a
record multi-dispatched to an LMQ queue (§5.7) is its ``INNER_MULTI_QUEUE_OFFSET`` there.

The record is judged one unit at a time by :func:`_judge` (``decode_message``: the definition
of truth). :func:`resolve_units` first gathers many records at once
(:func:`~rmqinspect.format.columns.gather`) and takes as found those that are well formed and
name the unit's queue and offset; only the rest go to :func:`_judge`, as the record scanner
leaves its failures to ``check_message``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.columns import RecordColumns, gather, headers_plausible
from rmqinspect.format.consumequeue import (
    CQ_UNIT_DTYPE,
    TagsCodeKind,
    pre_blank_mask,
    tags_code_kind,
    valid_mask,
)
from rmqinspect.format.npbytes import I64, Mask, distinct, windows
from rmqinspect.store.files import StoreFile
from rmqinspect.store.model import Store


class UnitStatus(StrEnum):
    """Why a unit does or does not lead to a message (``getMessage`` plus forensic checks)."""

    FOUND = "found"
    PRE_BLANK = "pre_blank"  # fillPreBlank placeholder
    INVALID = "invalid"  # fails offset >= 0 && size > 0: the queue ends here for the broker
    BELOW_COMMITLOG = "below_commitlog"  # the commitlog file was deleted (retention)
    BEYOND_COMMITLOG = "beyond_commitlog"  # past the last commitlog file
    NO_RECORD = "no_record"  # the bytes there are not a message record
    SIZE_MISMATCH = "size_mismatch"  # a record is there but its TOTALSIZE differs from the unit
    OTHER_QUEUE = "other_queue"  # the record belongs to another topic/queue or queue offset
    NOT_READ = "not_read"  # a consume queue file read on its own (store/loose.py): no commitlog


STATUSES = tuple(UnitStatus)  # a status code is an index into this
_CODE = {s: np.uint8(i) for i, s in enumerate(STATUSES)}


@dataclass(frozen=True, slots=True)
class UnitView:
    queue_offset: int
    phy_offset: int
    size: int
    tags_code: int
    tags_code_kind: TagsCodeKind
    status: UnitStatus
    detail: str = ""
    message: cl.MessageRecord | None = field(default=None, compare=False)
    expected_tags_code: int | None = None  # what dispatch computes from the record, if checked
    # Consecutive units this row stands for: more than 1 for a run of all-zero units (a queue
    # range over files of zeros would list each one, billions in sparse files).
    repeat: int = 1
    # A BatchConsumeQueue unit's batchSize: it serves [queue_offset, queue_offset + batch_size).
    batch_size: int | None = None

    @property
    def tags_code_ok(self) -> bool | None:
        if self.expected_tags_code is None or self.tags_code_kind is TagsCodeKind.EXT_ADDRESS:
            return None
        return self.expected_tags_code == self.tags_code


@dataclass(frozen=True, slots=True, eq=False)
class UnitResolution:
    """What many units lead to: a status code per unit (an index into :data:`STATUSES`), the
    detail of every unit that is not found, and the records judged one at a time, without
    their bodies (the units whose record is not plainly theirs: size_mismatch and other_queue
    units hold theirs).
    ``record_sizes``: the TOTALSIZE of the message header where a unit leads to one with room
    for a record in its file (a no_record unit may: a record whose fields do not add up to its
    TOTALSIZE), -1 where none was found or looked for."""

    codes: npt.NDArray[np.uint8]
    details: dict[int, str]
    records: dict[int, cl.MessageRecord]
    record_sizes: I64

    def __len__(self) -> int:
        return len(self.codes)

    def status(self, i: int) -> UnitStatus:
        return STATUSES[int(self.codes[i])]


class Placement(NamedTuple):
    """Where a record says it belongs, seen from one queue."""

    topic_ok: bool  # the record's topic is the queue's, or it was multi-dispatched (LMQ) to it
    queue_id_ok: bool
    queue_offset: int  # the record's offset in this queue (its LMQ offset when multi-dispatched)


def resolve_units(
    store: Store,
    topic: str,
    queue_id: int,
    queue_offsets: I64,
    units: npt.NDArray[np.void],
    *,
    data_end: int | None = None,
    proven: Mask | None = None,
) -> UnitResolution:
    """What each of ``units`` (``CQ_UNIT_DTYPE`` rows of queue ``topic``/``queue_id`` at
    ``queue_offsets``) leads to. ``data_end``: where the commitlog's data ends, if known; units
    at or past it are beyond the commitlog without reading what lies there. ``proven``: units
    the caller saw lead to their record (a walk of the log that read the unit of each record),
    found unless an earlier rule (an invalid unit, the data's end) says otherwise."""
    return _resolve(
        store, topic, queue_id, queue_offsets, units, data_end, fast=True, proven=proven
    )


def resolve_unit(
    store: Store,
    topic: str,
    queue_id: int,
    queue_offset: int,
    unit: tuple[int, int, int],
    *,
    check_tags: bool = False,
) -> UnitView:
    """What one unit points to: the decoded message, or why there is none (the rule of
    :func:`resolve_units`, for one unit). ``check_tags`` also recomputes the tagsCode dispatch
    would write for the record (tag hash or, for ``SCHEDULE_TOPIC_XXXX``, the delivery time)."""
    phy, size, tags = unit
    row = np.array([unit], CQ_UNIT_DTYPE)
    res = _resolve(
        store, topic, queue_id, np.array([queue_offset], np.int64), row, None, fast=False
    )
    status = res.status(0)
    message = res.records.get(0)
    kind = tags_code_kind(tags, topic)
    view = UnitView(queue_offset, phy, size, tags, kind, status, res.details.get(0, ""), message)
    if check_tags and message is not None:
        opts = store.check_options(check_crc=False, read_body=False)
        checked = store.check_at(phy, opts)
        if checked.is_message:
            return replace(view, expected_tags_code=checked.tags_code)
    return view


def placement(record: cl.MessageRecord, topic: str, queue_id: int) -> Placement:
    """Where ``record`` belongs, seen from queue ``topic``/``queue_id``."""
    same = record.topic == topic
    lmq = -1
    if not same:
        p = record.properties
        found = props.multi_dispatch_offset(
            p.get(props.INNER_MULTI_DISPATCH), p.get(props.INNER_MULTI_QUEUE_OFFSET), topic
        )
        lmq = -1 if found is None else found
    topic_ok, id_ok, offset = _placements(
        np.array([same]),
        np.array([lmq], np.int64),
        np.array([record.queue_id], np.int64),
        np.array([record.queue_offset], np.int64),
        topic,
        queue_id,
    )
    return Placement(bool(topic_ok[0]), bool(id_ok[0]), int(offset[0]))


def _placements(
    same_topic: Mask, lmq: I64, record_queue_id: I64, record_queue_offset: I64, topic: str, qid: int
) -> tuple[Mask, Mask, I64]:
    """:class:`Placement` of many records: ``lmq`` is each one's offset by multi-dispatch in
    ``topic``'s queue, -1 where it names none (a negative offset names none either)."""
    dispatched = lmq >= 0
    topic_ok = same_topic | dispatched
    queue_id_ok = record_queue_id == qid
    if topic.startswith(props.LMQ_PREFIX):
        # Dispatch puts an LMQ unit in queue 0 whatever the record's own queue id.
        queue_id_ok = np.where(dispatched, qid == 0, queue_id_ok)
    return topic_ok, queue_id_ok, np.where(dispatched, lmq, record_queue_offset)


def _resolve(
    store: Store,
    topic: str,
    queue_id: int,
    queue_offsets: I64,
    units: npt.NDArray[np.void],
    data_end: int | None,
    *,
    fast: bool,
    proven: Mask | None = None,
) -> UnitResolution:
    """:func:`resolve_units`; ``fast`` gathers records many at a time before judging the rest
    one by one."""
    phy = units["phy_offset"].astype(np.int64)
    size = units["size"].astype(np.int64)
    codes = np.full(len(units), _CODE[UnitStatus.FOUND], np.uint8)
    details: dict[int, str] = {}
    records: dict[int, cl.MessageRecord] = {}
    record_sizes = np.full(len(units), -1, np.int64)

    def mark(mask: Mask, status: UnitStatus, detail: str) -> Mask:
        codes[mask] = _CODE[status]
        if detail:
            details.update(dict.fromkeys(np.flatnonzero(mask).tolist(), detail))
        return ~mask

    pre = pre_blank_mask(units)
    left = mark(pre, UnitStatus.PRE_BLANK, "")
    left &= mark(left & ~valid_mask(units), UnitStatus.INVALID, "offset < 0 or size <= 0")
    clq = store.commitlog
    if store.loose is not None and not clq.files:
        left &= mark(left, UnitStatus.NOT_READ, "a file read on its own: no commitlog is read")
    beyond = left & (phy >= clq.end_offset)  # all of them without files (end_offset 0)
    left &= mark(beyond, UnitStatus.BEYOND_COMMITLOG, f"commitlog files end at {clq.end_offset}")
    if data_end is not None:
        cut = left & (phy >= data_end)
        left &= mark(cut, UnitStatus.BEYOND_COMMITLOG, f"the commitlog's data ends at {data_end}")
    which = clq.find_many(phy)
    nowhere = left & (which < 0)
    below = nowhere & (phy < clq.min_offset)
    mark(below, UnitStatus.BELOW_COMMITLOG, "no commitlog file holds this offset")
    mark(nowhere & ~below, UnitStatus.NO_RECORD, "no commitlog file holds this offset")
    left &= ~nowhere
    accept_v2 = store.profile.profile.accepts_v2_magic
    if proven is not None:
        known = left & proven
        left &= ~known
        record_sizes[known] = size[known]
    if fast:
        for k, sel in _windows(left, which, phy, clq.files):
            found, magic = _found(
                store, clq.files[k], (topic, queue_id), queue_offsets[sel], phy[sel], size[sel]
            )
            left[sel[found]] = False
            record_sizes[sel[found]] = size[sel[found]]
            if store.dledger is not None:
                continue  # _judge asks DLedger whether it serves these bytes as they are
            # A unit into the middle of other records (stale or copied bytes) reaches no
            # message magic: judged here by the magic read already, as _judge would judge it
            # (record size -1: no header), not by decoding each one again.
            for i, m in zip(sel[~found].tolist(), magic[~found].tolist(), strict=True):
                problem = cl.magic_problem(m, accept_v2) if m != _UNREAD else None
                if problem is not None:
                    codes[i] = _CODE[UnitStatus.NO_RECORD]
                    details[i] = problem
                    left[i] = False
    for i in np.flatnonzero(left).tolist():
        status, detail, record, record_sizes[i] = _judge(
            store,
            topic,
            queue_id,
            int(queue_offsets[i]),
            int(phy[i]),
            int(size[i]),
            accept_v2=accept_v2,
        )
        codes[i] = _CODE[status]
        if detail:
            details[i] = detail
        if record is not None:
            if fast:
                record.body = None  # a chunk's units may all name one huge record: keep no body
            records[i] = record
    return UnitResolution(codes, details, records, record_sizes)


_UNREAD = 1 << 32  # no MAGICCODE (an int32) was read for the unit
# A queue's units are read a window of its commitlog file at a time, the pages dropped after
# each (see _found): memory stays flat however large the file.
_WINDOW_BITS = 26  # 64 MiB


def _windows(
    left: Mask, which: npt.NDArray[np.intp], phy: I64, files: list[StoreFile]
) -> Iterator[tuple[int, I64]]:
    """(file index, the ``left`` units pointing into one window of that file) pairs."""
    for k in distinct(which[left]).tolist():
        in_file = np.flatnonzero(left & (which == k))
        window = (phy[in_file] - files[k].start) >> _WINDOW_BITS
        for w in distinct(window).tolist():
            yield k, in_file[window == w]


def _found(
    store: Store, f: StoreFile, queue: tuple[str, int], queue_offsets: I64, phy: I64, size: I64
) -> tuple[Mask, I64]:
    """Which units (all pointing into commitlog file ``f``) plainly lead to their record: a
    well-formed message of the unit's size in the unit's queue at its offset, and the
    MAGICCODE each points to (``_UNREAD`` where the file has no room for a record there). Not
    finding one here decides nothing: :func:`_judge` looks again."""
    topic, queue_id = queue
    accept_v2 = store.profile.profile.accepts_v2_magic
    found = np.zeros(len(phy), bool)
    magic = np.full(len(phy), _UNREAD, np.int64)
    buf = store.view(f)
    try:
        rel = phy - f.start
        fits = np.flatnonzero(rel <= len(buf) - cl.MIN_RECORD_SIZE)
        if not len(fits):
            return found, magic
        uniq, inverse = np.unique(rel[fits], return_inverse=True)
        cols = gather(buf, uniq, f.start)
        formed = headers_plausible(buf, uniq, cols.store_size, accept_v2) & cols.well_formed
        same = _same_topic(cols, formed, topic)
        lmq = _lmq_offsets(cols, formed & ~same, topic)
        topic_ok, id_ok, offset = _placements(
            same, lmq, cols.queue_id, cols.queue_offset, topic, queue_id
        )
        ok = formed & topic_ok & id_ok
        found[fits] = (
            ok[inverse]
            & (cols.store_size[inverse] == size[fits])
            & (offset[inverse] == queue_offsets[fits])
        )
        magic[fits] = cols.magic[inverse]
        del cols
    finally:
        buf.release()
        # Units point all over the file: what was read is dropped, so checking every queue
        # does not leave the whole commitlog resident.
        store.maps.release(f, 0, f.length)
    return found, magic


def _same_topic(cols: RecordColumns, rows: Mask, topic: str) -> Mask:
    """Which records of ``rows`` are in ``topic`` (its UTF-8 bytes, as Java encodes it)."""
    try:
        wanted = topic.encode()
    except UnicodeEncodeError:  # a directory name that is not UTF-8: left to _judge
        return np.zeros(len(cols), bool)
    same: Mask = rows & (cols.topic_length == len(wanted))
    if same.any() and wanted:
        data = np.frombuffer(cols.buf, np.uint8)
        found = windows(data, cols.topic_at, len(wanted))
        del data
        same &= (found == np.frombuffer(wanted, np.uint8)).all(axis=1)
    return same


def _lmq_offsets(cols: RecordColumns, rows: Mask, topic: str) -> I64:
    """For each record, the offset it holds in ``topic``'s queue by multi-dispatch (LMQ), -1
    where none (only the records of ``rows`` are looked at)."""
    out = np.full(len(cols), -1, np.int64)
    at = np.flatnonzero(rows)
    if not len(at):
        return out
    dispatch = cols.property_values(props.INNER_MULTI_DISPATCH, at)
    offsets = cols.property_values(props.INNER_MULTI_QUEUE_OFFSET, at)
    for r, d, o in zip(at.tolist(), dispatch, offsets, strict=True):
        value = props.multi_dispatch_offset(d, o, topic)
        if value is not None:
            out[r] = value
    return out


class _Judgement(NamedTuple):
    status: UnitStatus
    detail: str
    record: cl.MessageRecord | None
    record_size: int  # see UnitResolution.record_sizes


def _judge(
    store: Store,
    topic: str,
    queue_id: int,
    queue_offset: int,
    phy: int,
    size: int,
    *,
    accept_v2: bool,
) -> _Judgement:
    """The record a unit leads to, judged alone (the unit is valid and ``phy`` is inside a
    commitlog file). The body is read too: decoding without it skips a check, and a detail
    would then depend on who asks."""
    try:
        record = store.read_message(phy, accept_v2=accept_v2)
    except StoreError as err:
        detail = err.message
        if store.dledger is not None and store.dledger.message_entry(store.maps, phy):
            detail += " (DLedger keeps this entry: the broker serves these bytes as they are)"
        return _Judgement(UnitStatus.NO_RECORD, detail, None, _header_size(store, phy, accept_v2))
    if record.store_size != size:
        detail = f"record TOTALSIZE is {record.store_size}"
        return _Judgement(UnitStatus.SIZE_MISMATCH, detail, record, record.store_size)
    place = placement(record, topic, queue_id)
    if not (place.topic_ok and place.queue_id_ok and place.queue_offset == queue_offset):
        detail = f"record is {record.topic}/{record.queue_id} at queue offset {record.queue_offset}"
        if record.topic != topic and place.topic_ok:
            detail += f" (multi-dispatched here at queue offset {place.queue_offset})"
        return _Judgement(UnitStatus.OTHER_QUEUE, detail, record, size)
    return _Judgement(UnitStatus.FOUND, "", record, size)


_HEAD = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE


def _header_size(store: Store, phy: int, accept_v2: bool) -> int:
    """TOTALSIZE of the message header at ``phy`` (inside a commitlog file) when one is there
    with room for a whole record in its file; -1 otherwise."""
    f = store.commitlog_file(phy)
    buf = store.view(f)
    try:
        pos = phy - f.start
        if pos > len(buf) - cl.MIN_RECORD_SIZE:
            return -1
        store_size, magic = _HEAD.unpack_from(buf, pos)
    finally:
        buf.release()
    is_message = magic == cl.MESSAGE_MAGIC_CODE or (accept_v2 and magic == cl.MESSAGE_MAGIC_CODE_V2)
    return int(store_size) if is_message else -1
