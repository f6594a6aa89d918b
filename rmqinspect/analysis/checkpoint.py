"""``checkpoint``: the three (4.9) or five (5.x) checkpoint fields and what recovery derives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format.checkpoint import CHECKPOINT_READ_LIMIT, Checkpoint, decode_checkpoint
from rmqinspect.store.dledger import TextFile
from rmqinspect.store.files import dledger_homes, read_small


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    path: str
    checkpoint: Checkpoint
    min_timestamp: int  # getMinTimestamp: abnormal recovery starts at the file before this
    min_timestamp_index: int  # getMinTimestampIndex (messageIndexSafe=true)
    notes: tuple[str, ...]


def checkpoint_path(target: Path) -> Path:
    """A store directory means its ``checkpoint`` file; anything else is the file itself."""
    return target / "checkpoint" if target.is_dir() else target


def read_checkpoint(target: Path) -> CheckpointReport:
    path = checkpoint_path(target)
    raw = read_small(path, CHECKPOINT_READ_LIMIT)
    if raw is None:
        raise StoreError("no checkpoint file (the broker would start from all zeros)", str(path))
    try:
        cp = decode_checkpoint(raw.data, raw.size)
    except DecodeError as err:
        raise StoreError.from_decode(err, str(path)) from None
    notes: list[str] = []
    if cp.size_anomaly:
        notes.append(cp.size_anomaly)
    if cp.nonzero_tail:
        notes.append("bytes after the fields are not all zero: the broker never writes there")
    if cp.physic_msg_timestamp == 0 or cp.logics_msg_timestamp == 0:
        notes.append(
            "a zero timestamp makes getMinTimestamp 0: an abnormal recovery would check every "
            "commitlog file from the first"
        )
    if cp.index_msg_timestamp == 0:
        notes.append(
            "indexMsgTimestamp 0: after a crash every index file would be deleted at load "
            "(no index file has filled up yet, or the checkpoint was lost)"
        )
    if cp.master_flushed_offset or cp.confirm_phy_offset:
        notes.append("masterFlushedOffset/confirmPhyOffset are set: written by a 5.x broker")
    homes = dledger_homes(target) if target.is_dir() else []
    if len(homes) == 1:
        ledger = TextFile.read(homes[0] / "checkpoint")
        said = "; ".join(ledger.lines) if ledger.raw is not None else "missing"
        notes.append(
            "a DLedger store: physicMsgTimestamp is set by the consume-queue dispatch, like "
            f"logicsMsgTimestamp; DLedger's own {homes[0].name}/checkpoint says: {said}"
        )
    return CheckpointReport(
        str(path), cp, cp.min_timestamp(), cp.min_timestamp_index(), tuple(notes)
    )
