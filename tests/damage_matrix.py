"""Stores damaged with every helper of :mod:`rmqinspect.synth.damage`, under each profile, next
to their undamaged originals: what the verify and salvage tests judge against."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rmqinspect.format.commitlog import CheckOptions
from rmqinspect.format.profile import Profile
from rmqinspect.format.scan import CheckedRun, WalkPolicy
from rmqinspect.store.model import Store
from rmqinspect.synth import damage
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import StoreLayout

FILE_SIZE = 64 * 1024
WORKLOAD = WorkloadConfig(messages=260, body_size=120, topics=3, queues=4, seed=11, burst=65)
PROFILES = {
    "4.9": StoreLayout(Profile.V4_9, FILE_SIZE, 1000, index_slot_num=64, index_num=400),
    "5.1": StoreLayout(Profile.V5_1, FILE_SIZE, 1000, index_slot_num=64, index_num=400),
    "5.3": StoreLayout(
        Profile.V5_3, FILE_SIZE, 1000, index_slot_num=64, index_num=400, append_prop_crc=True
    ),
}


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    size: int
    data: bytes

    @property
    def end(self) -> int:
        return self.offset + self.size


def records(root: Path) -> list[Record]:
    """Every record of an undamaged store, with its bytes."""
    out = []
    with Store.open(root) as store:
        opts = CheckOptions(profile=store.profile.profile)
        for f, event in store.scan(options=opts, policy=WalkPolicy.FORENSIC):
            if isinstance(event, CheckedRun):
                cols = event.columns
                for i in range(len(cols)):
                    at, size = int(cols.positions[i]), int(cols.store_size[i])
                    out.append(Record(f.start + at, size, bytes(cols.buf[at : at + size])))
    return out


def _zero_first_file(root: Path) -> damage.Damage:
    return damage.zero_region(root, 20_000, 20_300)


def _scribble_second_file(root: Path) -> damage.Damage:
    noise = random.Random(5).randbytes(400)
    return damage.overwrite_region(root, FILE_SIZE + 9_000, noise)


def _flip_first_file(root: Path) -> damage.Damage:
    return damage.flip_body_byte(root, message_index=7, byte_in_body=3)


DAMAGES: dict[str, Callable[[Path], damage.Damage]] = {
    "torn_tail": damage.torn_tail,
    "flip_body": damage.flip_body_byte,
    "flip_body_first_file": _flip_first_file,
    "zero_region": _zero_first_file,
    "overwrite_region": _scribble_second_file,
    "cq_ahead": lambda r: damage.cq_ahead_of_commitlog(r, "TopicA", 0),
    "missing_cq": lambda r: damage.remove_cq_dir(r, "TopicB", 1),
    "stale_copy": damage.stale_bytes_past_write_position,
    "stale_rewrite": lambda r: damage.stale_bytes_past_write_position(r, mode="rewrite"),
    "abort": lambda r: damage.set_abort(r, True),
}


def original(base: Path, profile: str) -> Path:
    """The undamaged store of ``profile`` (built once under ``base``)."""
    root = base / f"original-{profile}"
    if not root.exists():
        write_workload(root, WORKLOAD, PROFILES[profile])
    return root


def damaged(base: Path, profile: str, kind: str, into: Path) -> damage.Damage:
    """A copy of the original at ``into`` with the damage ``kind`` applied."""
    shutil.copytree(original(base, profile), into)
    return DAMAGES[kind](into)


def commitlog_ranges(d: damage.Damage) -> list[tuple[int, int]]:
    """The damage's byte ranges of commitlog files, as physical offsets."""
    return [
        (int(Path(r.path).name) + r.start, int(Path(r.path).name) + r.end)
        for r in d.ranges
        if r.path.startswith("commitlog/")
    ]


def touched(recs: list[Record], d: damage.Damage) -> list[Record]:
    """Original records whose bytes the damage overlaps."""
    ranges = commitlog_ranges(d)
    return [r for r in recs if any(a < r.end and r.offset < b for a, b in ranges)]
