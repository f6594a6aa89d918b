"""Damage to a synthetic store's timer store (``synth --timers --damage timer-*``): the failure
modes ``timers``, ``verify`` and ``recover`` must explain. Like :mod:`rmqinspect.synth.damage`,
every helper mutates the store it is given, in place; never point one at evidence.

- :func:`chain_cycle`: a slot's oldest unit points back at the slot's newest (prevPos), so the
  dequeue's walk from lastPos never reaches -1;
- :func:`chain_into_other_slot`: a slot's oldest unit points at a unit of another slot;
- :func:`truncated_timerlog`: the timerlog file ends inside its last unit (a copy cut short);
- :func:`checkpoint_behind`: timercheck left behind the dequeue by a crash;
- :func:`commitlog_cut_under_timer`: apache/rocketmq#10668's signature, the commitlog's tail
  lost (zeroed from the last timer-topic record on) while the timerlog kept the units that
  point there.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rmqinspect.format import timer
from rmqinspect.synth.damage import ByteRange, Damage, zero_region


def _log_file(root: Path) -> Path:
    files = sorted((root / "timerlog").iterdir()) if (root / "timerlog").is_dir() else []
    if not files:
        raise ValueError(f"{root} has no timerlog file: write it with --timers")
    return files[0]


def _units(path: Path) -> np.ndarray:
    units = timer.decode_units(path.read_bytes()).copy()
    return units[timer.valid_units(units)]


def _patch_prev(root: Path, path: Path, unit: int, prev: int, kind: str, why: str) -> Damage:
    at = unit * timer.UNIT_SIZE + 4  # prevPos follows the size int
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, prev.to_bytes(8, "big", signed=True), at)
    finally:
        os.close(fd)
    rel = path.relative_to(root).as_posix()
    return Damage(
        kind,
        f"{why}: the unit at timerlog offset {unit * timer.UNIT_SIZE} now points at {prev}",
        (ByteRange(rel, at, at + 8),),
        details={"timerlog_offset": unit * timer.UNIT_SIZE, "prev_pos": prev},
    )


def _chains(units: np.ndarray) -> dict[int, list[int]]:
    """Unit indices by slot time, oldest first (the order doEnqueue appended them)."""
    slots: dict[int, list[int]] = {}
    for k, time in enumerate(timer.slot_times(units).tolist()):
        slots.setdefault(time, []).append(k)
    return slots


def chain_cycle(root: str | os.PathLike[str]) -> Damage:
    store = Path(root)
    path = _log_file(store)
    chain = next((c for c in _chains(_units(path)).values() if len(c) >= 2), None)
    if chain is None:
        raise ValueError("no wheel slot holds two units: nothing to make a cycle of")
    why = "a prevPos cycle (the slot's oldest unit points at its newest)"
    return _patch_prev(store, path, chain[0], chain[-1] * timer.UNIT_SIZE, "timer_cycle", why)


def chain_into_other_slot(root: str | os.PathLike[str]) -> Damage:
    store = Path(root)
    path = _log_file(store)
    chains = list(_chains(_units(path)).values())
    if len(chains) < 2:
        raise ValueError("the timerlog has units of one slot only")
    why = "a slot's chain runs into another slot"
    return _patch_prev(
        store, path, chains[1][0], chains[0][-1] * timer.UNIT_SIZE, "timer_cross_slot", why
    )


def truncated_timerlog(root: str | os.PathLike[str]) -> Damage:
    store = Path(root)
    path = _log_file(store)
    units = len(_units(path))
    if not units:
        raise ValueError("the timerlog holds no unit")
    cut = units * timer.UNIT_SIZE - timer.UNIT_SIZE // 2
    size = path.stat().st_size
    os.truncate(path, cut)
    return Damage(
        "timer_truncated",
        f"cut the timerlog file to {cut} bytes, inside its last unit",
        (ByteRange(path.relative_to(store).as_posix(), cut, size),),
        details={"cut": cut, "units_whole": units - 1},
    )


def commitlog_cut_under_timer(root: str | os.PathLike[str], data_end: int) -> Damage:
    """Zero the commitlog from the last timer unit's record to ``data_end`` (the records'
    end): the tail a crash lost while the timerlog, flushed on its own, kept its units."""
    store = Path(root)
    units = _units(_log_file(store))
    if not len(units):
        raise ValueError("the timerlog holds no unit")
    start = int(units["physical_offset"][-1])
    if start >= data_end:
        raise ValueError("the last timer unit's record is not in the commitlog")
    zeroed = zero_region(store, start, data_end)
    return Damage(
        "timer_commitlog_cut",
        f"zeroed the commitlog from {start} (the last timer unit's record) to {data_end}: "
        "units point past the commitlog's end (apache/rocketmq#10668)",
        zeroed.ranges,
        details={"cut": start},
    )


def checkpoint_behind(root: str | os.PathLike[str]) -> Damage:
    """timercheck as a crash soon after the sends leaves it (``timer_crash_early``): the read
    time back at the first slot a unit sits in and the flush position 0, so the restart reads
    the slots already delivered from again."""
    store = Path(root)
    units = _units(_log_file(store))
    if not len(units):
        raise ValueError("the timerlog holds no unit")
    back = int(timer.slot_times(units).min())
    path = store / "config" / "timercheck"
    data = bytearray(path.read_bytes())
    data[0:16] = back.to_bytes(8, "big", signed=True) + bytes(8)
    path.write_bytes(bytes(data))
    return Damage(
        "timer_checkpoint_behind",
        f"set timercheck's lastReadTimeMs back to {back} (the first unit's slot) and its "
        "lastTimerLogFlushPos to 0, as a crash before the checkpoint caught up leaves them",
        (ByteRange("config/timercheck", 0, 16),),
        details={"last_read_time_ms": back},
    )
