"""Small 5.x timer stores for tests, written through the synth timer writer
(:class:`rmqinspect.synth.timer.TimerFiles`, ``TimerMessageStore.doEnqueue``'s write side) with
hand-picked slots; and the hostile variants ``timers`` and ``verify`` report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rmqinspect.format import properties as props
from rmqinspect.format import timer
from rmqinspect.format.profile import Profile
from rmqinspect.synth.timer import TimerFiles
from rmqinspect.synth.timer_damage import chain_cycle, chain_into_other_slot
from rmqinspect.synth.writer import MessageSpec, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT

LAYOUT = replace(SMALL_LAYOUT, profile=Profile.V5_3)
T0 = 1_800_000_000_000  # whole seconds: the writer's currWriteTimeMs
DAY = 86_400_000


class TimerStore:
    """A store whose timer messages sit in slots the test names: each one's record in
    rmq_sys_wheel_timer, its timerlog unit in its slot's chain, the wheel and timercheck."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.w = StoreWriter(root, LAYOUT)
        self.files = TimerFiles(self.w)
        self.timer_records = 0

    def add(
        self,
        uniq: str,
        fire: int,
        *,
        slot: int | None = None,
        rolls: bool = False,
        roll_times: int | None = None,
        recall: str | None = None,
    ) -> int:
        """A timer message (or, with ``recall``, a recall marker) and its unit; its offset."""
        p = {props.REAL_TOPIC: "Orders", props.REAL_QID: "1", timer.TIMER_OUT_MS: str(fire)}
        if roll_times is not None:
            p[timer.TIMER_ROLL_TIMES] = str(roll_times)
            self.files.count("Orders", -1, T0)  # the roll dequeued the previous unit
        if recall is not None:
            p[timer.TIMER_DEL_UNIQKEY] = recall
        put = self.w.put(
            MessageSpec(topic=timer.TIMER_TOPIC, uniq_key=uniq, properties=p, store_timestamp=T0)
        )
        self.timer_records += 1
        magic = timer.MAGIC_DEFAULT | (timer.MAGIC_ROLL if rolls else 0)
        magic |= timer.MAGIC_DELETE if recall is not None else 0
        self.files.add_unit(put, "Orders", T0, fire if slot is None else slot, magic)
        return put.physical_offset

    def deliver(self, uniq: str) -> None:
        p = {timer.TIMER_ENQUEUE_MS: str(T0), timer.TIMER_DEQUEUE_MS: str(T0 + 1)}
        self.w.put(
            MessageSpec(
                topic="Orders", queue_id=1, uniq_key=uniq, properties=p, store_timestamp=T0 + 1
            )
        )
        self.files.count("Orders", -1, T0 + 1)  # the dequeue

    def close(
        self,
        last_read: int,
        *,
        units: Callable[[list[dict[str, int]]], None] | None = None,
        slots: Callable[[dict[int, list[int]]], None] | None = None,
        flush_pos: int | None = None,
        padding: int = 4 * timer.UNIT_SIZE,
    ) -> Path:
        self.w.close()
        if units is not None:
            units(self.files.units)
        if slots is not None:
            slots(self.files.slots)
        self.files.write(last_read, self.timer_records, flush_pos=flush_pos, padding=padding)
        return self.root


def _wrong_slot_time(slots: dict[int, list[int]]) -> None:
    slots[T0 + 60_000][3] = timer.slot_index(T0 + 61_000)  # T0+60 s's slot, one slot on


def _bad_magic(rows: list[dict[str, int]]) -> None:
    rows[1]["magic"] = 0x10


def hostile_timer_store(root: Path, variant: str) -> Path:
    """Timers A and B at T0+60 s, C at T0+90 s (read time T0), an Orders record before them,
    and one kind of damage: ``cycle``, ``chain_into_other_slot``, ``slot_time_mismatch``,
    ``past_commitlog_end``, ``not_timer_record``, ``truncated_flush``, ``truncated_file`` or
    ``bad_unit``."""
    s = TimerStore(root)
    other = s.w.put(MessageSpec(topic="Orders", queue_id=0, body=b"not a timer" * 40))
    s.add("A", T0 + 60_000)
    s.add("B", T0 + 60_000)
    s.add("C", T0 + 90_000)
    if variant == "cycle":  # A points back at B: B -> A -> B -> ...
        chain_cycle(s.close(T0))
        return root
    if variant == "chain_into_other_slot":  # C's chain runs into B, in A and B's slot
        chain_into_other_slot(s.close(T0))
        return root
    if variant == "slot_time_mismatch":
        return s.close(T0, slots=_wrong_slot_time)
    if variant == "past_commitlog_end":
        return s.close(T0, units=lambda rows: rows[2].update(physical_offset=10**9))
    if variant == "not_timer_record":
        # An Orders record where the unit's timer record was: a commitlog written again.
        at = other.physical_offset
        return s.close(T0, units=lambda rows: rows[2].update(physical_offset=at))
    if variant == "truncated_flush":
        return s.close(T0, flush_pos=10 * timer.UNIT_SIZE)
    if variant == "truncated_file":
        return s.close(T0, padding=0)
    assert variant == "bad_unit"
    return s.close(T0, units=_bad_magic, flush_pos=timer.UNIT_SIZE)
