"""Where the restart of a store whose consume queues RocksDB holds differs from a file store's
(docs/rocksdb-consume-queue.md §5): the queues' max physical offset is the database's dispatch
checkpoint, it picks the abnormal recovery's start file, and only a recovered end below it
truncates. The queues themselves are :class:`~rmqinspect.store.rocksdb_restart.RocksRestartQueue`.
"""

from __future__ import annotations

import struct

from rmqinspect.analysis.recovery.report import StartCandidate, StartFile
from rmqinspect.analysis.recovery.state import BrokerState
from rmqinspect.format import commitlog as cl

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def rocksdb_checkpoint(state: BrokerState) -> int | None:
    """``RocksDBConsumeQueueStore.getMaxPhyOffsetInConsumeQueue`` (the dispatch checkpoint, 0
    without one) for a store whose queues RocksDB holds; None for a file store."""
    db = state.store.rocksdb
    if db is None or not db.queues:
        return None
    return db.checkpoint if db.checkpoint is not None else 0


def truncates_logics(state: BrokerState, max_phy_cq: int, end: int) -> bool:
    """Whether the recovery's ``truncateDirtyLogicFiles(end)`` changes the queues: a file store
    when the queues reach the end (``CommitLog.recoverAbnormally``/``recoverNormally``); the
    RocksDB store only when its checkpoint lies past it (``RocksDBConsumeQueueStore
    .truncateDirty`` returns when ``offsetToTruncate >= getMaxPhyOffsetInConsumeQueue``)."""
    if rocksdb_checkpoint(state) is None:
        return max_phy_cq >= end
    return max_phy_cq > end


def rocksdb_abnormal_start(state: BrokerState, max_phy_cq: int) -> StartFile:
    """``CommitLog.isMappedFileMatchedRecover`` with ``enableRocksDBStore``: from the newest
    file back, the first whose first record's PHYSICALOFFSET field is at most the database's
    checkpoint (the store timestamps are not read); file 0 when none is."""
    candidates: list[StartCandidate] = []
    head = cl.PHYSICALOFFSET_POS + 8
    for i in range(len(state.commitlog) - 1, -1, -1):
        f = state.commitlog[i]
        data = state.store.maps.read_padded(f.disk, 0, head)
        magic = _I32.unpack_from(data, cl.MAGIC_POS)[0]
        if magic not in (cl.MESSAGE_MAGIC_CODE, cl.MESSAGE_MAGIC_CODE_V2):
            note = f"first record magic {cl.magic_name(magic)}"
            candidates.append(StartCandidate(f.name, None, False, note))
            continue
        phy = _I64.unpack_from(data, cl.PHYSICALOFFSET_POS)[0]
        if phy <= max_phy_cq:
            candidates.append(StartCandidate(f.name, None, True, f"{phy} <= {max_phy_cq}"))
            return StartFile(
                f.name,
                f.start,
                i,
                "rocksdb_cq_max_phy_offset",
                f"newest file whose first record's physical offset {phy} is <= the RocksDB "
                f"consume queue's checkpoint {max_phy_cq}",
                candidates,
            )
        candidates.append(StartCandidate(f.name, None, False, f"{phy} > {max_phy_cq}"))
    f = state.commitlog[0]
    return StartFile(
        f.name,
        f.start,
        0,
        "first_file",
        f"no file's first record is at or before the RocksDB consume queue's checkpoint "
        f"{max_phy_cq}; recovery starts at file 0",
        candidates,
    )
