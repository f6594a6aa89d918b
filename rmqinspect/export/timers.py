"""The export's ``timers`` table: one row per unit of the 5.x timer store's timerlog, its
decoded fields beside what ``timers`` (analysis/timers.py, the one home of the rules) says of
it: the fire time, real topic and queue its timer-topic record names, and its state.

A store without a timer store gives no rows. The table is one part: ``timers_report`` judges
every unit against one walk of the commitlog, which does not split.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rmqinspect.analysis.timers import Recall, TimerEntry, timers_report
from rmqinspect.export.schema import MS_UTC, TIMERS
from rmqinspect.format.npbytes import I64
from rmqinspect.format.times import MAX_ISO_MS, MIN_ISO_MS
from rmqinspect.render.values import encodable
from rmqinspect.store.files import FileQueue
from rmqinspect.store.model import Store
from rmqinspect.store.timer import has_timer_store, read_timerlog


@dataclass(frozen=True, slots=True)
class TimersPart:
    """The timer store's files (one task: the timerlog against one walk of the commitlog)."""

    number: int = 0
    nbytes: int = 0
    source: str = "timerlog"


def plan_timers(store: Store) -> list[TimersPart]:
    """The part of the ``timers`` table: none for a store without a timer store."""
    return [TimersPart()] if has_timer_store(store.root) else []


def timers_batches(store: Store) -> Iterator[pa.RecordBatch]:
    """Every unit the broker's recovery reads from the timerlog, in log order."""
    log = read_timerlog(store)
    if not len(log.units):
        return
    report = timers_report(store)
    entries: dict[int, TimerEntry] = {e.timerlog_offset: e for e in report.entries}
    recalls: dict[int, Recall] = {r.timerlog_offset: r for r in report.recalls}
    units = log.units
    positions = log.positions.tolist()
    e = [entries.get(p) for p in positions]
    r = [recalls.get(p) for p in positions]
    files, at = _places(log.files, log.positions)
    writes = units["curr_write_time_ms"].astype(np.int64)
    slots = writes + units["delayed_time_offset_ms"].astype(np.int64)
    columns = {
        "timerlog_offset": pa.array(log.positions),
        "prev_pos": pa.array(units["prev_pos"].astype(np.int64)),
        "magic": pa.array(units["magic"].astype(np.int32)),
        "write_timestamp": _timestamps(writes.tolist()),
        "delayed_time_offset_ms": pa.array(units["delayed_time_offset_ms"].astype(np.int32)),
        "slot_timestamp": _timestamps(slots.tolist()),
        "physical_offset": pa.array(units["physical_offset"].astype(np.int64)),
        "store_size": pa.array(units["store_size"].astype(np.int32)),
        "topic_hash": pa.array(units["topic_hash"].astype(np.int32)),
        "state": pa.array([_state(en, rc) for en, rc in zip(e, r, strict=True)], pa.string()),
        "late": pa.array([None if en is None else en.late for en in e], pa.string()),
        "real_topic": pa.array(
            [_text(None if en is None else en.real_topic) for en in e], pa.string()
        ),
        "real_queue_id": pa.array(
            [None if en is None else en.real_queue_id for en in e], pa.int32()
        ),
        "uniq_key": pa.array([_text(None if en is None else en.uniq_key) for en in e], pa.string()),
        "fire_timestamp": _timestamps([None if en is None else en.fire_timestamp for en in e]),
        "queue_offset": pa.array([None if en is None else en.queue_offset for en in e], pa.int64()),
        "roll_times": pa.array([None if en is None else en.roll_times for en in e], pa.int32()),
        "recall_target": pa.array(
            [_text(None if rc is None else rc.target) for rc in r], pa.string()
        ),
        "recall_matched": pa.array([None if rc is None else rc.matched for rc in r], pa.bool_()),
        "file": pa.array(files, pa.string()),
        "file_position": pa.array(at, pa.int64()),
    }
    yield pa.RecordBatch.from_arrays([columns[f.name] for f in TIMERS], schema=TIMERS)


def _places(files: FileQueue, positions: I64) -> tuple[list[str], list[int | None]]:
    """Each unit's timerlog file (``timerlog/<name>``) and its position there."""
    names: list[str] = []
    at: list[int | None] = []
    for p in positions.tolist():
        f = files.find(p)
        names.append(f"timerlog/{f.name}" if f is not None else "timerlog")
        at.append(None if f is None else p - f.start)
    return names, at


def _state(entry: TimerEntry | None, recall: Recall | None) -> str | None:
    """``timers``' state of an entry (pending, delivered, recalled, rolled, unreadable), or
    ``recall`` for a recall marker's unit."""
    if recall is not None:
        return "recall"
    return None if entry is None else entry.state


def _timestamps(ms: list[int | None]) -> pa.Array:
    """Epoch ms as ``timestamp[ms, UTC]``; null outside years 1..9999 (a hostile unit's time
    has no date, and Spark could not hold it)."""
    kept = [v if v is not None and MIN_ISO_MS <= v <= MAX_ISO_MS else None for v in ms]
    return pa.array(kept, pa.int64()).cast(MS_UTC)


def _text(value: str | None) -> str | None:
    return None if value is None else encodable(value)
