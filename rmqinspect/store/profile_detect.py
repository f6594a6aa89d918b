"""Which broker line wrote a store (:attr:`rmqinspect.store.model.Store.profile`): given with
``--profile``, else what its files show: files only 5.x writes, a PID in ``abort``, the 5.x
checkpoint fields, V2 records, and properties that end with 0x02 (5.2+)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmqinspect.errors import StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format.profile import Profile

if TYPE_CHECKING:
    from rmqinspect.store.model import Store

# Files and directories only a 5.x broker writes, and what each one says.
_FIVE_MARKERS = (
    ("abort.bak", "abort.bak exists (5.x writes the PID into abort)"),
    ("compaction", "compaction/ exists (5.x compaction store)"),
    ("timerwheel", "timerwheel exists (5.x timer)"),
    ("timerlog", "timerlog/ exists (5.x timer)"),
    ("batchconsumequeue", "batchconsumequeue/ exists (5.x)"),
    ("config/timercheck", "config/timercheck exists (5.x timer)"),
)


@dataclass(frozen=True, slots=True)
class ProfileDetection:
    profile: Profile
    explicit: bool
    reasons: tuple[str, ...]


def detect_profile(store: Store) -> ProfileDetection:
    if store.options.profile is not None:
        return ProfileDetection(store.options.profile, True, ("given explicitly",))
    return looks_like(store) or ProfileDetection(
        Profile.V4_9, False, ("no 5.x files, fields or records found",)
    )


def looks_like(store: Store) -> ProfileDetection | None:
    """The profile the files show, or None when nothing on disk tells (4.9 by default)."""
    five: list[str] = []
    markers = () if store.loose is not None else _FIVE_MARKERS
    for marker, why in markers:
        if (store.root / marker).exists():
            five.append(why)
    if store.loose is None:
        five.extend(_five_small_files(store))
    sample = _sample_records(store)
    if any(r.magic == cl.MESSAGE_MAGIC_CODE_V2 for r in sample):
        five.append("V2 records (0xDAA320AB) present (5.1+)")
    trailing = [r for r in sample if r.properties_raw]
    ending = sum(r.properties_raw.endswith(b"\x02") for r in trailing)
    # Nine in ten, not all: one damaged record among the sample must not hide the 5.2+ form.
    if trailing and ending * 10 >= len(trailing) * 9:
        return ProfileDetection(
            Profile.V5_3,
            False,
            (*five, "properties end with 0x02 (written by 5.2+)"),
        )
    if five:
        return ProfileDetection(Profile.V5_1, False, tuple(five))
    if trailing:
        reason = "properties have no trailing 0x02 and no 5.x files or fields are present"
        return ProfileDetection(Profile.V4_9, False, (reason,))
    return None


def _five_small_files(store: Store) -> list[str]:
    """What the abort marker and the checkpoint say of a 5.x broker."""
    five = []
    if store.abort_content().strip():
        five.append("abort holds a PID (5.x)")
    try:
        checkpoint = store.checkpoint_file()
    except StoreError:
        checkpoint = None  # reported where the checkpoint is read
    cp = checkpoint.data if checkpoint is not None else b""
    if len(cp) >= 40 and any(cp[24:40]):
        five.append("checkpoint has masterFlushedOffset/confirmPhyOffset (5.x)")
    return five


def _sample_records(store: Store, limit: int = 64) -> list[cl.MessageRecord]:
    """A few records from the start of the newest non-empty commitlog file."""
    opts = cl.CheckOptions(profile=Profile.V5_3, check_crc=False, read_body=False)
    for f in reversed(store.commitlog.files):
        found = store.first_records(f, opts, limit)
        if found:
            return found
    return []
