"""The store writer's model: the broker configuration that shapes the files, messages as a
producer describes them (:class:`MessageSpec`) or in stored form as columns
(:class:`MessageColumns`), and what the writer reports back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from rmqinspect.format.checkpoint import Checkpoint
from rmqinspect.format.commitlog import (
    DEFAULT_COMMITLOG_FILE_SIZE,
    DEFAULT_DELAY_LEVELS,
    END_FILE_MIN_BLANK_LENGTH,
    parse_delay_levels,
)
from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE, DEFAULT_CQ_FILE_SIZE, cq_file_size
from rmqinspect.format.host import HostAddress
from rmqinspect.format.index import DEFAULT_INDEX_NUM, DEFAULT_SLOT_NUM, IndexGeometry
from rmqinspect.format.profile import Profile
from rmqinspect.format.trace_data import TraceRecord

if TYPE_CHECKING:
    from rmqinspect.synth.pop import PopTruth

DEFAULT_STORE_HOST = HostAddress(bytes([10, 0, 0, 1]), 10911)
DEFAULT_BORN_HOST = HostAddress(bytes([10, 0, 0, 2]), 50001)


@dataclass(frozen=True, slots=True)
class StoreLayout:
    """Broker configuration that shapes the files (the ``MessageStoreConfig`` values)."""

    profile: Profile = Profile.V4_9
    commitlog_file_size: int = DEFAULT_COMMITLOG_FILE_SIZE
    cq_file_size: int = DEFAULT_CQ_FILE_SIZE  # rounded up to whole 20-byte units
    index_slot_num: int = DEFAULT_SLOT_NUM
    index_num: int = DEFAULT_INDEX_NUM
    message_index_enable: bool = True
    append_prop_crc: bool = False  # enabledAppendPropCRC, 5.3 only
    auto_message_version_on_topic_len: bool = True  # 5.x: V2 magic for topics over 127 chars
    store_host: HostAddress = DEFAULT_STORE_HOST
    delay_levels: str = DEFAULT_DELAY_LEVELS
    commitlog_start_offset: int = 0  # first file's offset (older files deleted by retention)
    enable_dledger_commitlog: bool = False  # the DLedger commitlog in dledger-<selfId>/
    dledger_self_id: str = "n0"  # dLegerSelfId

    def __post_init__(self) -> None:
        if self.commitlog_file_size <= END_FILE_MIN_BLANK_LENGTH:
            raise ValueError(f"commitlog file size {self.commitlog_file_size} is too small")
        if self.cq_file_size < CQ_STORE_UNIT_SIZE:
            raise ValueError(f"consume queue file size {self.cq_file_size} is below one unit")
        if self.index_num < 2:
            raise ValueError("maxIndexNum must be at least 2 for an index file to hold an entry")
        IndexGeometry(self.index_slot_num, self.index_num)
        if self.append_prop_crc and not self.profile.supports_prop_crc:
            raise ValueError(f"property CRC needs profile 5.3, not {self.profile}")
        if (
            self.commitlog_start_offset % self.commitlog_file_size
            or self.commitlog_start_offset < 0
        ):
            raise ValueError("commitlog start offset must be a non-negative multiple of the size")
        if self.enable_dledger_commitlog and self.commitlog_start_offset:
            raise ValueError("a DLedger commitlog starts at position 0 (expiry is not written)")
        if self.enable_dledger_commitlog and not self.dledger_self_id:
            raise ValueError("a DLedger node needs a self id")
        parse_delay_levels(self.delay_levels)

    @property
    def cq_unit_file_size(self) -> int:
        return cq_file_size(self.cq_file_size)

    @property
    def index_geometry(self) -> IndexGeometry:
        return IndexGeometry(self.index_slot_num, self.index_num)


@dataclass(slots=True)
class MessageSpec:
    """One message as a producer (or, for round trips, the stored record) describes it.

    ``properties`` is either user properties (merged with ``tags``/``keys``/``uniq_key``/
    ``delay_level`` and laid out in Java ``HashMap`` order, as ``messageProperties2String``
    does) or the raw stored properties bytes, written verbatim. The IPv6 sysFlag bits are
    derived from the hosts; ``sys_flag`` carries the transaction type, compression and
    multi-tag bits.
    """

    topic: str
    body: bytes = b""
    queue_id: int = 0
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    uniq_key: str | None = None
    properties: Mapping[str, str] | bytes | None = None
    delay_level: int = 0
    sys_flag: int = 0
    flag: int = 0
    born_timestamp: int | None = None  # None: the store timestamp
    store_timestamp: int | None = None  # None: the writer's clock
    born_host: HostAddress = DEFAULT_BORN_HOST
    store_host: HostAddress | None = None  # None: the layout's store host
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    dispatch: bool = True  # False: the reput service has not reached this message (crash)


class PutResult(NamedTuple):
    """Where :meth:`StoreWriter.put` stored a message."""

    physical_offset: int
    size: int
    topic: str  # as stored (SCHEDULE_TOPIC_XXXX for a rewritten delay message)
    queue_id: int
    queue_offset: int
    store_timestamp: int
    version: int  # 1 or 2 (magic 0xDAA320AB)
    blank_offset: int | None  # where a BLANK closed the previous file to make room, if one did


@dataclass(frozen=True, slots=True)
class LedgerSummary:
    """The DLedger state :meth:`StoreWriter.close` left (entries ``0 .. entries - 1``)."""

    home: str  # dledger-<selfId>
    entries: int
    term: int
    committed_index: int  # what the DLedger checkpoint says (behind the last entry after a crash)


@dataclass(frozen=True, slots=True)
class FateRecord:
    """A record the fate model stored, or a workload record it followed: what it is by
    construction (a :class:`rmqinspect.format.fate.Role` value) and where it went. The truth the
    tests hold ``trace`` and ``groups`` to; never written to the store."""

    role: str
    identity: str  # the message across its copies: UNIQ_KEY, else the first copy's offsetMsgId
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    reconsume_times: int
    delay_level: int | None  # the DELAY property
    real_topic: str | None  # REAL_TOPIC: where a schedule unit or half goes
    origin_message_id: str | None
    offset_msg_id: str
    dispatched: bool  # False: stored in the crash's undispatched tail


@dataclass(frozen=True, slots=True)
class FateDelivery:
    """One delivery of a stored copy to a group's listener, and what it returned."""

    group: str
    physical_offset: int
    time: int
    success: bool


@dataclass(frozen=True, slots=True)
class FateTrace:
    """A trace message the model stored: where, and the records its body holds."""

    physical_offset: int
    records: tuple[TraceRecord, ...]


@dataclass(frozen=True, slots=True)
class FateSummary:
    """What ``--fate`` wrote: copies by role, transactions by state, and one example of each
    case a reader will look for (UNIQ_KEY, or ``None`` where the run had none)."""

    chains: int  # messages a group failed at least once
    schedule: int  # delayed sends stored in SCHEDULE_TOPIC_XXXX
    scheduled_delivery: int  # their copies in the real topic
    retry_schedule: int  # send-back copies through SCHEDULE_TOPIC_XXXX
    retry: int  # copies in %RETRY%<group>
    dlq: int
    pop_retry: int
    pending_delays: int  # schedule units not delivered at the end (either kind)
    transactions: dict[str, int]
    half_checks: int  # half copies stored again by a check
    op_records: int
    commit_records: int
    offset_ahead: tuple[str, str, int, int, int]  # group, topic, queue, committed, max
    examples: dict[str, str | None]
    trace_messages: int = 0  # records stored in RMQ_SYS_TRACE_TOPIC
    # The truth, for tests (not in the JSON summary): every record followed, every delivery,
    # every trace message, and the transactions' end states by UNIQ_KEY.
    records: tuple[FateRecord, ...] = ()
    deliveries: tuple[FateDelivery, ...] = ()
    traces: tuple[FateTrace, ...] = ()
    pop: tuple[PopTruth, ...] = ()  # --pop: each pop and what became of it
    transaction_states: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlacedTimer:
    """One timer message as ``synth --timers`` left it (:mod:`rmqinspect.synth.timer`).
    ``state`` is the state ``timers`` gives its first unit: delivered, pending, recalled or
    rolled (a roll copy carries it on)."""

    key: str  # KEYS: <kind>-<i>
    kind: str  # short, mid, hours, roll, rolled, recalled
    uniq_key: str
    real_topic: str
    real_queue_id: int
    fire_ms: int  # TIMER_OUT_MS
    state: str
    physical_offset: int  # the record in rmq_sys_wheel_timer
    queue_offset: int  # in rmq_sys_wheel_timer
    timerlog_offset: int
    slot_ms: int  # the slot its unit sits in
    magic: int
    delivered_offset: int | None = None  # the copy in the real topic
    roll_offset: int | None = None  # the roll copy in rmq_sys_wheel_timer
    roll_timerlog_offset: int | None = None
    recall_offset: int | None = None  # the delete marker
    recall_timerlog_offset: int | None = None


@dataclass(frozen=True, slots=True)
class TimerSummary:
    """The truth of ``synth --timers``: every timer message, the checkpoint, the wheel."""

    timers: tuple[PlacedTimer, ...]
    timerlog_units: int
    last_read_ms: int  # timercheck's lastReadTimeMs: where the stop left the wheel
    timer_queue_offset: int  # one past the last rmq_sys_wheel_timer offset the timer enqueued
    slots: dict[int, tuple[int, int, int]]  # slot time -> (firstPos, lastPos, num)
    metrics: dict[str, int]  # TimerMetrics' count per real topic


@dataclass(frozen=True, slots=True)
class StoreSummary:
    """What :meth:`StoreWriter.close` left on disk."""

    root: Path
    profile: Profile
    messages: int
    dispatched: int
    commitlog_files: tuple[str, ...]
    commitlog_end: int  # physical offset after the last record
    data_bytes: int  # record and BLANK bytes written to the commitlog
    consume_queues: dict[str, int]  # "topic/queueId" -> units written (pre-blank ones included)
    index_files: tuple[str, ...]
    index_entries: int
    checkpoint: Checkpoint
    crashed: bool
    dledger: LedgerSummary | None = None  # set when the commitlog is DLedger's
    fate: FateSummary | None = None  # set by the workload's --fate
    timers: TimerSummary | None = None  # set by the workload's --timers


@dataclass(slots=True)
class MessageColumns:
    """Messages in their stored form, one array per field: the bulk input of
    :meth:`StoreWriter.put_columns` (generators use it to avoid per-message objects).

    ``topics``, ``hosts`` and ``bodies`` are tables indexed by the per-message ``topic``,
    ``born_host``/``store_host`` and ``body`` arrays. ``properties`` are the stored properties
    bytes (without a 5.2+ CRC tail, which the writer appends). ``tags`` and ``delay`` (the
    ``TAGS`` and ``DELAY`` values) and ``keys`` (``UNIQ_KEY`` then the ``KEYS`` elements, owned by
    the messages ``key_owner``, in order) are what the dispatcher reads from those properties and
    must agree with them; :meth:`StoreWriter.put` derives all of them from one map.
    """

    topics: Sequence[str]
    topic: npt.NDArray[np.int64]
    queue_id: npt.NDArray[np.int64]
    properties: Sequence[bytes]
    tags: Sequence[str | None]
    delay: Sequence[str | None]
    keys: Sequence[str]
    key_owner: npt.NDArray[np.int64]
    bodies: Sequence[bytes]
    body: npt.NDArray[np.int64]
    hosts: Sequence[HostAddress]
    born_host: npt.NDArray[np.int64]
    store_host: npt.NDArray[np.int64]
    born_timestamp: npt.NDArray[np.int64]
    store_timestamp: npt.NDArray[np.int64]
    sys_flag: npt.NDArray[np.int64]  # transaction, compression, multi-tag bits; IPv6 bits derived
    flag: npt.NDArray[np.int64]
    reconsume_times: npt.NDArray[np.int64]
    prepared_offset: npt.NDArray[np.int64]
    dispatch: npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class PlacedColumns:
    """Where :meth:`StoreWriter.put_columns` stored each message."""

    physical_offset: npt.NDArray[np.int64]
    size: npt.NDArray[np.int64]
    queue_offset: npt.NDArray[np.int64]
    blank_offset: dict[int, int]  # message index -> BLANK that closed the file before it


def check_columns(c: MessageColumns, count: int) -> None:
    """Every per-message column has ``count`` values; key owners are valid and ordered."""
    per_message = (
        "queue_id",
        "properties",
        "tags",
        "delay",
        "body",
        "born_host",
        "store_host",
        "born_timestamp",
        "store_timestamp",
        "sys_flag",
        "flag",
        "reconsume_times",
        "prepared_offset",
        "dispatch",
    )
    for name in per_message:
        if len(getattr(c, name)) != count:
            raise ValueError(f"column {name} has {len(getattr(c, name))} values for {count}")
    owner = np.asarray(c.key_owner)
    if len(owner) != len(c.keys):
        raise ValueError(f"{len(c.keys)} keys but {len(owner)} key owners")
    if len(owner) and (owner.min() < 0 or owner.max() >= count or (np.diff(owner) < 0).any()):
        raise ValueError("key owners must be message indexes in non-decreasing order")


def slice_columns(c: MessageColumns, start: int, end: int) -> MessageColumns:
    """Messages ``start:end`` of ``c`` (the tables are shared)."""
    owner = np.asarray(c.key_owner)
    lo, hi = np.searchsorted(owner, [start, end], side="left").tolist()
    return MessageColumns(
        topics=c.topics,
        topic=c.topic[start:end],
        queue_id=c.queue_id[start:end],
        properties=c.properties[start:end],
        tags=c.tags[start:end],
        delay=c.delay[start:end],
        keys=c.keys[lo:hi],
        key_owner=owner[lo:hi] - start,
        bodies=c.bodies,
        body=c.body[start:end],
        hosts=c.hosts,
        born_host=c.born_host[start:end],
        store_host=c.store_host[start:end],
        born_timestamp=c.born_timestamp[start:end],
        store_timestamp=c.store_timestamp[start:end],
        sys_flag=c.sys_flag[start:end],
        flag=c.flag[start:end],
        reconsume_times=c.reconsume_times[start:end],
        prepared_offset=c.prepared_offset[start:end],
        dispatch=c.dispatch[start:end],
    )
