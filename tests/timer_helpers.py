"""A writer of small 5.x timer stores, as ``TimerMessageStore.doEnqueue`` writes them: each timer
message's record in rmq_sys_wheel_timer, its timerlog unit in its slot's chain, the wheel and
timercheck; and the hostile variants ``timers`` and ``verify`` report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rmqinspect.format import properties as props
from rmqinspect.format import timer
from rmqinspect.format.encode import encode_timer_slot, encode_timer_units, encode_timercheck
from rmqinspect.format.profile import Profile
from rmqinspect.synth.writer import MessageSpec, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT

LAYOUT = replace(SMALL_LAYOUT, profile=Profile.V5_3)
T0 = 1_800_000_000_000  # whole seconds: the writer's currWriteTimeMs
DAY = 86_400_000


@dataclass
class _Unit:
    fields: dict[str, int]
    slot: int  # slot time (ms)


class TimerStore:
    """Writes a store with a timer store: each timer message's record in rmq_sys_wheel_timer,
    its timerlog unit in its slot's chain (``doEnqueue``), the wheel and timercheck."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.w = StoreWriter(root, LAYOUT)
        self.units: list[_Unit] = []

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
        if recall is not None:
            p[timer.TIMER_DEL_UNIQKEY] = recall
        put = self.w.put(
            MessageSpec(topic=timer.TIMER_TOPIC, uniq_key=uniq, properties=p, store_timestamp=T0)
        )
        magic = timer.MAGIC_DEFAULT | (timer.MAGIC_ROLL if rolls else 0)
        magic |= timer.MAGIC_DELETE if recall is not None else 0
        at = fire if slot is None else slot
        self.units.append(
            _Unit(
                {
                    "magic": magic,
                    "curr_write_time_ms": T0,
                    "delayed_time_offset_ms": at - T0,
                    "physical_offset": put.physical_offset,
                    "store_size": put.size,
                    "topic_hash": 0,
                },
                at,
            )
        )
        return put.physical_offset

    def deliver(self, uniq: str) -> None:
        p = {timer.TIMER_ENQUEUE_MS: str(T0), timer.TIMER_DEQUEUE_MS: str(T0 + 1)}
        self.w.put(
            MessageSpec(
                topic="Orders", queue_id=1, uniq_key=uniq, properties=p, store_timestamp=T0 + 1
            )
        )

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
        wheel: dict[int, list[int]] = {}  # slot time -> [first, last, num, where it is written]
        rows = []
        for i, u in enumerate(self.units):
            pos = i * timer.UNIT_SIZE
            slot = wheel.setdefault(u.slot, [-1, -1, 0, timer.slot_index(u.slot)])
            rows.append({**u.fields, "prev_pos": slot[1]})
            slot[0] = pos if slot[0] == -1 else slot[0]
            slot[1] = pos
            slot[2] += -1 if u.fields["magic"] & timer.MAGIC_DELETE else 1
        if units is not None:
            units(rows)
        if slots is not None:
            slots(wheel)
        (self.root / "timerlog").mkdir()
        log = encode_timer_units(rows)
        (self.root / "timerlog" / f"{0:020d}").write_bytes(log + bytes(padding))
        with open(self.root / "timerwheel", "wb") as fh:
            fh.truncate(timer.WHEEL_FILE_SIZE)
            for time, (first, last, num, index) in wheel.items():
                fh.seek(index * timer.SLOT_SIZE)
                fh.write(encode_timer_slot(time, first, last, num))
        cp = timer.TimerCheckpoint(
            last_read, len(log) if flush_pos is None else flush_pos, 0, 0, 0, T0, 1
        )
        queue_max = sum(1 for _ in self.units)
        cp = replace(cp, last_timer_queue_offset=queue_max, master_timer_queue_offset=queue_max)
        (self.root / "config").mkdir(exist_ok=True)
        (self.root / "config" / "timercheck").write_bytes(encode_timercheck(cp).ljust(4096, b"\0"))
        return self.root


def _cycle(rows: list[dict[str, int]]) -> None:
    rows[0]["prev_pos"] = timer.UNIT_SIZE  # slot's last unit (1) -> 0 -> 1 -> ...


def _into_other_slot(rows: list[dict[str, int]]) -> None:
    rows[1]["prev_pos"] = 2 * timer.UNIT_SIZE  # unit 2 is in another slot


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
    if variant == "cycle":
        return s.close(T0, units=_cycle)
    if variant == "chain_into_other_slot":
        return s.close(T0, units=_into_other_slot)
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
