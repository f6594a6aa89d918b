"""The 5.x timer store's files, read-only: ``timerlog/`` as ``TimerMessageStore.recoverAndRevise``
walks it, ``timerwheel``'s used slots, ``config/timercheck`` (layouts:
:mod:`rmqinspect.format.timer`).

Every file is opened through :mod:`rmqinspect.store.files` (never written, never followed through
a link) and mapped through the store's :class:`~rmqinspect.store.files.MappedFiles` (guarded
against a file that shrinks while read). Only the bytes that hold data are decoded: a timerlog
file's data ends where its last data extent does, and the wheel (38.7 MB, mostly holes) is read
extent by extent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format import timer
from rmqinspect.store.files import (
    FileQueue,
    LayoutProblem,
    StoreFile,
    data_extents,
    list_family,
    open_regular,
    read_small,
)
from rmqinspect.store.model import Store

TIMERCHECK_READ = 4096  # the page TimerCheckpoint maps; nothing past it is read


def has_timer_store(root: Path) -> bool:
    """Whether the store holds any of the timer's files."""
    return any(
        os.path.lexists(root / name) for name in ("timerwheel", "timerlog", "config/timercheck")
    )


@dataclass
class TimerLog:
    """The units the broker's recovery reads (``recoverAndRevise`` with ``checkTimerLog``): from
    the first file, unit by unit, a blank record moving to the next file, up to the first unit
    whose size is not 52 or whose magic fails ``isMagicOK``."""

    files: FileQueue
    units: npt.NDArray[np.void]  # timer.UNIT_DTYPE, copied out of the maps
    positions: npt.NDArray[np.int64]  # each unit's offset in the timerlog stream
    end: int  # where the broker's reading stops (the next unit would go here)
    end_kind: str  # "zeros", "bad_unit", "file_end" (a file cut short) or "no_files"
    # The unit that ended the log when it is neither zeros nor a blank: (size, magic, and how
    # many non-zero units follow it in its file, which the broker's truncation discards).
    bad_unit: tuple[int, int, int] | None = None
    files_after_end: int = 0  # files past the end, which truncateDirtyFiles deletes
    problems: list[LayoutProblem] = field(default_factory=list)


def read_timerlog(store: Store, file_size: int | None = None) -> TimerLog:
    files = list_family(
        store.root / "timerlog", file_size, "timerlog", timer.DEFAULT_TIMERLOG_FILE_SIZE
    )
    parts: list[npt.NDArray[np.void]] = []
    starts: list[npt.NDArray[np.int64]] = []
    end, kind = (files.files[0].start if files.files else 0), "no_files"
    bad: tuple[int, int, int] | None = None
    after = 0
    for i, f in enumerate(files.files):
        units, stop, kind, bad = _read_file(store, f)
        parts.append(units)
        starts.append(f.start + np.arange(len(units), dtype=np.int64) * timer.UNIT_SIZE)
        end = f.start + stop
        if kind != "blank":
            after = len(files.files) - i - 1
            break
        end = f.start + files.file_size  # the next unit goes into the next file
        kind = "zeros"
    merged = np.concatenate(parts) if parts else np.zeros(0, timer.UNIT_DTYPE)
    positions = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    return TimerLog(files, merged, positions, end, kind, bad, after, list(files.problems))


def _read_file(
    store: Store, f: StoreFile
) -> tuple[npt.NDArray[np.void], int, str, tuple[int, int, int] | None]:
    """One file's valid units (copied), where they stop in the file, and why: "blank" (the
    file's end record), "zeros", "bad_unit" or "file_end"."""
    data_end = store.maps.data_end(f)
    with store.view(f) as buf:
        # Past the data only zeros lie: one unit beyond it says how the log ends. Copied once,
        # so nothing outlives the map.
        limit = min(len(buf), -(-data_end // timer.UNIT_SIZE) * timer.UNIT_SIZE + timer.UNIT_SIZE)
        raw = timer.decode_units(buf[:limit]).copy()
        stop = len(raw) * timer.UNIT_SIZE
        tail = bytes(buf[stop : stop + timer.MIN_BLANK_LEN])
    ok = timer.valid_units(raw)
    k = int(np.argmin(ok)) if not ok.all() else len(raw)
    stop = k * timer.UNIT_SIZE
    bad: tuple[int, int, int] | None = None
    if k == len(raw):
        blank = (
            len(tail) == timer.MIN_BLANK_LEN
            and int.from_bytes(tail[12:16], "big", signed=True) == timer.BLANK_MAGIC_CODE
        )
        kind = "blank" if blank else "file_end"
    elif int(raw["magic"][k]) == timer.BLANK_MAGIC_CODE:
        kind = "blank"
    elif not raw[k:].tobytes().strip(b"\0"):
        kind = "zeros"
    else:
        kind = "bad_unit"
        rest = raw[k + 1 :]
        following = int(np.count_nonzero(rest["size"] | rest["magic"] | rest["prev_pos"]))
        bad = (int(raw["size"][k]), int(raw["magic"][k]), following)
    return raw[:k], stop, kind, bad


@dataclass
class Wheel:
    """The wheel's slots that hold anything (every other slot is zeros)."""

    path: Path
    size: int  # the file's length
    indices: npt.NDArray[np.int64]
    slots: npt.NDArray[np.void]  # timer.SLOT_DTYPE, copied


def read_wheel(store: Store) -> Wheel | None:
    """The used slots of ``timerwheel`` (None when there is no such file); only the file's data
    extents are read."""
    path = store.root / "timerwheel"
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        size = os.fstat(fd).st_size
        whole = size // timer.SLOT_SIZE * timer.SLOT_SIZE
        extents = [
            (
                a // timer.SLOT_SIZE * timer.SLOT_SIZE,
                min(-(-b // timer.SLOT_SIZE) * timer.SLOT_SIZE, whole),
            )
            for a, b in data_extents(fd, 0, whole)
        ]
    except OSError as err:
        raise StoreError(f"cannot read: {err.strerror or err}", str(path)) from None
    finally:
        os.close(fd)
    indices: list[npt.NDArray[np.int64]] = []
    slots: list[npt.NDArray[np.void]] = []
    if whole:
        f = StoreFile(path, 0, size)
        with store.view(f) as buf:
            for a, b in extents:
                raw = timer.decode_slots(buf[a:b])
                words = np.frombuffer(buf[a:b], ">i8", count=(b - a) // 8).reshape(-1, 4)
                used = np.flatnonzero(words.any(axis=1))
                indices.append(a // timer.SLOT_SIZE + used.astype(np.int64))
                slots.append(raw[used].copy())
                del raw, words
    return Wheel(
        path,
        size,
        np.concatenate(indices) if indices else np.zeros(0, np.int64),
        np.concatenate(slots) if slots else np.zeros(0, timer.SLOT_DTYPE),
    )


@dataclass(frozen=True, slots=True)
class TimerCheckRead:
    path: Path
    size: int | None  # None: no file
    checkpoint: timer.TimerCheckpoint | None
    error: str | None  # why the file gives no checkpoint, when it exists


def read_timercheck(store: Store) -> TimerCheckRead:
    path = store.config_dir / "timercheck"
    small = read_small(path, TIMERCHECK_READ)
    if small is None:
        return TimerCheckRead(path, None, None, None)
    try:
        return TimerCheckRead(path, small.size, timer.decode_timercheck(small.data), None)
    except DecodeError as err:
        return TimerCheckRead(path, small.size, None, err.message)
