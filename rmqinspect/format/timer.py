"""The 5.x timer store's binary layouts (``store/.../timer/`` in RocketMQ 5.3.3): timerlog units,
timerwheel slots and ``config/timercheck``. Pure decoders over bytes; many units or slots per
call, as numpy structured arrays over the given buffer (big-endian, as ``ByteBuffer`` writes).

- **timerlog** (``TimerLog``): files of ``mappedFileSizeTimerLog`` bytes (100 MiB) named by their
  first offset, holding 52-byte units (``UNIT_SIZE``) written by ``TimerMessageStore.doEnqueue``:
  size (52), prevPos (the slot's previous unit, -1 ends the chain), magic (``MAGIC_*`` bits),
  currWriteTimeMs, delayedTime - currWriteTimeMs (int), offsetPy and sizePy (the commitlog
  record), hash of the real topic (``String.hashCode``), reserved (0). ``TimerLog.append`` ends a
  file that cannot take a unit plus ``MIN_BLANK_LEN`` with a 16-byte blank record: remaining size,
  a 0 long, ``BLANK_MAGIC_CODE``. ``recoverAndRevise`` reads units until a blank (next file) or
  one whose size is not 52 or whose magic fails ``isMagicOK`` (the end: dirty files are
  truncated there).
- **timerwheel** (``TimerWheel``): ``slotsTotal * 2`` slots of 32 bytes (``Slot.SIZE``),
  slotsTotal being ``TIMER_WHEEL_TTL_DAY * DAY_SECS`` whatever the precision: timeMs /
  precisionMs (long), firstPos, lastPos (long), num (int: normal units minus delete units),
  magic (int). A time's slot is
  ``timeMs / precisionMs % (slotsTotal * 2)`` (``getSlotIndex``); ``getSlot`` takes it only when
  its stored time equals the asked one (slots are never cleared). A slot's units are read from
  lastPos back through prevPos (``TimerMessageStore.dequeue``).
- **timercheck** (``TimerCheckpoint``): a page mapped whole; longs lastReadTimeMs,
  lastTimerLogFlushPos, lastTimerQueueOffset, masterTimerQueueOffset, then the data version's
  stateVersion, timestamp and counter. A file shorter than the page reads as zeros past its end,
  as the broker's read-write map extends it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import DecodeError

TIMER_TOPIC = "rmq_sys_wheel_timer"  # TimerMessageStore.TIMER_TOPIC

# MessageConst property names the timer reads and writes.
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"  # the producer's setDelayTimeSec
TIMER_DELAY_MS = "TIMER_DELAY_MS"  # the producer's setDelayTimeMs

UNIT_SIZE = 52  # TimerLog.UNIT_SIZE
MIN_BLANK_LEN = 16  # TimerLog.MIN_BLANK_LEN: size int, 0 long, BLANK_MAGIC_CODE int
# 0xBBCCDDEE ^ 1880681586 + 8 in Java (+ binds first): 0xCBD43194 as a signed int.
BLANK_MAGIC_CODE = (0xBBCCDDEE ^ (1880681586 + 8)) - (1 << 32)
DEFAULT_TIMERLOG_FILE_SIZE = 100 * 1024 * 1024  # MessageStoreConfig.mappedFileSizeTimerLog

MAGIC_DEFAULT = 1  # TimerMessageStore.MAGIC_*: bits of a unit's magic
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2

SLOT_SIZE = 32  # Slot.SIZE
TIMER_WHEEL_TTL_DAY = 7
DAY_SECS = 24 * 3600
SLOTS_TOTAL = TIMER_WHEEL_TTL_DAY * DAY_SECS  # TimerMessageStore: regardless of the precision
WHEEL_SLOTS = SLOTS_TOTAL * 2  # TimerWheel: slotsTotal * 2 slots in the file
WHEEL_FILE_SIZE = WHEEL_SLOTS * SLOT_SIZE  # 38,707,200 bytes: TimerWheel refuses another length
TIMER_BLANK_SLOTS = 60  # TimerMessageStore.TIMER_BLANK_SLOTS
DEFAULT_PRECISION_MS = 1000  # MessageStoreConfig.timerPrecisionMs

TIMERCHECK_SIZE = 56  # TimerCheckpoint.encode: seven longs

UNIT_DTYPE = np.dtype(
    [
        ("size", ">i4"),
        ("prev_pos", ">i8"),
        ("magic", ">i4"),
        ("curr_write_time_ms", ">i8"),
        ("delayed_time_offset_ms", ">i4"),
        ("physical_offset", ">i8"),  # offsetPy
        ("store_size", ">i4"),  # sizePy
        ("topic_hash", ">i4"),  # hashTopicForMetrics(REAL_TOPIC)
        ("reserved", ">i8"),
    ]
)
SLOT_DTYPE = np.dtype(
    [
        ("time", ">i8"),  # timeMs / precisionMs
        ("first_pos", ">i8"),
        ("last_pos", ">i8"),
        ("num", ">i4"),
        ("magic", ">i4"),
    ]
)
assert UNIT_DTYPE.itemsize == UNIT_SIZE and SLOT_DTYPE.itemsize == SLOT_SIZE


def decode_units(buf: bytes | memoryview) -> npt.NDArray[np.void]:
    """Every whole 52-byte unit of ``buf`` (a timerlog file's bytes from a unit boundary), as a
    structured array viewing ``buf``; the count comes from the buffer's length alone."""
    return np.frombuffer(buf, UNIT_DTYPE, count=len(buf) // UNIT_SIZE)


def magic_ok(magic: npt.NDArray[np.integer]) -> npt.NDArray[np.bool_]:
    """``TimerMessageStore.isMagicOK``: no bit above the low four."""
    ok: npt.NDArray[np.bool_] = (magic.astype(np.int64) & ~0xF) == 0
    return ok


def valid_units(units: npt.NDArray[np.void]) -> npt.NDArray[np.bool_]:
    """The units ``recoverAndRevise`` accepts: size 52, no magic bit above the low four."""
    ok: npt.NDArray[np.bool_] = (units["size"] == UNIT_SIZE) & magic_ok(units["magic"])
    return ok


def slot_times(units: npt.NDArray[np.void]) -> npt.NDArray[np.int64]:
    """The time each unit's slot stands for: currWriteTimeMs + the delayed-time offset (a roll
    unit sits at its roll time, not at the message's fire time)."""
    return units["curr_write_time_ms"].astype(np.int64) + units["delayed_time_offset_ms"].astype(
        np.int64
    )


def decode_slots(buf: bytes | memoryview) -> npt.NDArray[np.void]:
    """Every whole 32-byte slot of ``buf`` (the wheel's bytes from a slot boundary)."""
    return np.frombuffer(buf, SLOT_DTYPE, count=len(buf) // SLOT_SIZE)


def slot_index(time_ms: int, precision_ms: int = DEFAULT_PRECISION_MS) -> int:
    """``TimerWheel.getSlotIndex`` for a time at or after the epoch."""
    return time_ms // precision_ms % WHEEL_SLOTS


def slots_match(
    indices: npt.NDArray[np.int64], stored: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """Whether each slot's stored time (timeMs / precision) is one whose slot it is: the only
    slots ``getSlot`` ever returns. A negative time has no slot (the broker's index would be
    negative)."""
    ok: npt.NDArray[np.bool_] = (stored >= 0) & (stored % WHEEL_SLOTS == indices)
    return ok


def restart_read_ms(
    last_read_ms: int | None, now_ms: int, precision_ms: int = DEFAULT_PRECISION_MS
) -> int:
    """``TimerMessageStore.recover``: where a restart at ``now_ms`` resumes reading the wheel,
    timercheck's lastReadTimeMs pulled forward to at least formatTimeMs(now) - slotsTotal
    slots + TIMER_BLANK_SLOTS slots (7 days less 60 slots; no checkpoint reads as 0)."""
    floor = now_ms // precision_ms * precision_ms
    earliest = floor - (SLOTS_TOTAL - TIMER_BLANK_SLOTS) * precision_ms
    return earliest if last_read_ms is None else max(last_read_ms, earliest)


@dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    """``config/timercheck`` as ``TimerCheckpoint``'s constructor reads it."""

    last_read_time_ms: int
    last_timer_log_flush_pos: int
    last_timer_queue_offset: int
    master_timer_queue_offset: int
    state_version: int
    timestamp: int
    counter: int


def decode_timercheck(data: bytes) -> TimerCheckpoint:
    """The checkpoint's seven longs; bytes past a short file's end read as zeros (the broker maps
    a whole page read-write, which extends the file). An empty file is no checkpoint: the broker
    only reads one that exists, and a zero-length one reads as all zeros too, so it is refused
    here to be said as such by the caller."""
    if not data:
        raise DecodeError("timercheck is empty (the broker reads it as all zeros)", 0)
    padded = data[:TIMERCHECK_SIZE].ljust(TIMERCHECK_SIZE, b"\0")
    values = np.frombuffer(padded, ">i8", count=7).tolist()
    return TimerCheckpoint(*values)
