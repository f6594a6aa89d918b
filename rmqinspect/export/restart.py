"""Which records a broker restart keeps (the ``restart_keeps`` column), from ``recover``.

A record is kept when it lies below the recovered end in a file the restart keeps and the
restarted broker can serve it (it is not a ``no_queue_unit`` loss). When the broker would refuse
to start there is no post-restart store: the column is null.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rmqinspect.analysis.recovery import RecoverOptions, run_recovery
from rmqinspect.store.model import Store

NO_QUEUE_UNIT = "no_queue_unit"


@dataclass(frozen=True, slots=True)
class RestartKeeps:
    """What ``restart_keeps`` needs from the recovery report; small enough to ship to workers
    (:meth:`within` cuts it to one range)."""

    broker_starts: bool
    max_offset: int  # the recovered end
    deleted_files: frozenset[str]
    unserved: npt.NDArray[np.int64]  # sorted physical offsets of no_queue_unit losses

    def within(self, begin: int, end: int) -> RestartKeeps:
        """The same prediction for physical offsets in ``[begin, end)`` only."""
        lo, hi = np.searchsorted(self.unserved, [begin, end])
        return RestartKeeps(
            self.broker_starts, self.max_offset, self.deleted_files, self.unserved[lo:hi]
        )

    def column(self, file_name: str, physical_offsets: npt.NDArray[np.int64]) -> pa.Array:
        n = len(physical_offsets)
        if not self.broker_starts:
            return pa.nulls(n, pa.bool_())
        if file_name in self.deleted_files:
            return pa.array(np.zeros(n, np.bool_))
        kept = physical_offsets < self.max_offset
        kept &= ~np.isin(physical_offsets, self.unserved)
        return pa.array(kept)


def restart_keeps(store: Store) -> RestartKeeps:
    """Run the restart emulation (every lost message listed) and keep what the column needs."""
    report = run_recovery(store, RecoverOptions(lost_limit=None)).report
    commitlog = report.commitlog
    lost = report.lost_messages
    if (
        not report.broker_starts
        or commitlog is None
        or commitlog.max_offset is None
        or lost is None
    ):
        return RestartKeeps(False, 0, frozenset(), np.zeros(0, np.int64))
    unserved = np.sort(
        np.array(
            [m.physical_offset for m in lost.messages if m.where == NO_QUEUE_UNIT],
            np.int64,
        )
    )
    end = report.end_after_start  # a DLedger leader serves past the committed position
    assert end is not None
    return RestartKeeps(True, end, frozenset(commitlog.deleted_files), unserved)
