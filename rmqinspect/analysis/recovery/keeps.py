"""Which records a broker restart keeps: the one home of the rule behind ``salvage``'s and the
export's ``restart_keeps``.

A record is kept when it lies below the end the restarted broker serves, in a file the restart
keeps, and the restarted broker can serve it (it is not a ``no_queue_unit`` loss,
:mod:`.served`). The unserved records are either listed by the emulation, or judged range by
range from the post-restart state it hands over (:meth:`RestartKeeps.unserved_in`), which lets
the export's workers do that walk in parallel over the ranges they read anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from rmqinspect.analysis.recovery.emulator import run_recovery
from rmqinspect.analysis.recovery.lost import NO_QUEUE_UNIT
from rmqinspect.analysis.recovery.ranges import RangeChecker
from rmqinspect.analysis.recovery.report import RecoveryReport
from rmqinspect.analysis.recovery.served import (
    ServingState,
    TopicIds,
    forensic_scan,
    walk_unserved,
)
from rmqinspect.analysis.recovery.state import RecoverOptions
from rmqinspect.format.columns import RecordColumns
from rmqinspect.format.npbytes import I64, Mask, members
from rmqinspect.format.scan import Skipped
from rmqinspect.store.model import Store

# Above this many bytes of units written in memory by the restart's dispatch, the post-restart
# state is not shipped to every range task: the unserved records are listed once instead.
MAX_SHIPPED_OVERLAY = 64 << 20
_NONE = np.zeros(0, np.int64)


@dataclass(frozen=True, slots=True)
class RestartKeeps:
    """What the restart keeps; small enough to ship to workers (:meth:`within` cuts the listed
    unserved records to one range)."""

    broker_starts: bool
    end: int  # where the commitlog the restarted broker serves ends
    deleted_files: frozenset[str]  # commitlog files the restart (or load) deletes
    unserved: I64  # sorted physical offsets of the listed no_queue_unit losses
    serving: ServingState | None = None  # set: the unserved are judged per range instead

    def within(self, begin: int, end: int) -> RestartKeeps:
        """The same prediction for physical offsets in ``[begin, end)`` only."""
        lo, hi = np.searchsorted(self.unserved, [begin, end])
        return replace(self, unserved=self.unserved[lo:hi])

    def keeps(self, file_name: str, physical_offsets: I64, unserved: I64 | None = None) -> Mask:
        """Whether the restart keeps each record of ``file_name`` (False for all when the
        broker does not start); ``unserved``: the range's judged unserved offsets, when the
        prediction carries :attr:`serving`."""
        if not self.broker_starts or file_name in self.deleted_files:
            return np.zeros(len(physical_offsets), bool)
        kept: Mask = physical_offsets < self.end
        for lost in (self.unserved, _NONE if unserved is None else unserved):
            if len(lost):
                kept &= ~members(physical_offsets, lost)
        return kept

    def unserved_in(
        self, store: Store, file_name: str, walk_from: int, begin: int, end: int
    ) -> I64:
        """The physical offsets of the unserved messages at file positions ``[begin, end)`` of
        ``file_name``, walking the kept file as the emulation does from ``walk_from`` (a
        position that walk reaches at or before ``begin``), with :attr:`serving` bound to
        ``store``."""
        assert self.serving is not None
        check = self.serving.bind(store)
        kept = next((f for f in check.commitlog if f.name == file_name), None)
        if kept is None or begin >= kept.wrote:
            return _NONE
        scan = forensic_scan(self.serving.reput)
        found = [
            rec.position
            for rec in walk_unserved(check, store, kept, walk_from, scan, stop=end)
            if not isinstance(rec, Skipped) and begin <= rec.position - kept.start < end
        ]
        check.release()
        return np.array(sorted(found), np.int64)


class RangeJudge:
    """The unserved messages of file positions ``[begin, end)`` of ``file_name``, judged on the
    runs a reader of that range walks anyway (:meth:`run`).

    Until that walk meets damage it steps exactly as the emulation's walk would from ``begin``
    (when ``walk_from == begin``: no damage before it in the file): a record its checks accept
    the emulation's more lenient walk accepts too. Past damage (:meth:`damage`), or when the
    range starts past damage, the emulation's own walk is resumed from there."""

    def __init__(
        self,
        keeps: RestartKeeps,
        store: Store,
        file_name: str,
        walk_from: int,
        begin: int,
        end: int,
    ) -> None:
        assert keeps.serving is not None
        self.keeps, self.store, self.file_name, self.end = keeps, store, file_name, end
        self.check = keeps.serving.bind(store)
        self.kept = next((f for f in self.check.commitlog if f.name == file_name), None)
        self.found: list[int] = []
        self.walked = self.kept is None or begin >= self.kept.wrote  # nothing left to judge
        if not self.walked and walk_from != begin:
            self.damage(walk_from, begin)

    @property
    def unserved(self) -> I64:
        return np.array(sorted(self.found), np.int64)

    def close(self) -> None:
        """Release the consume-queue pages the judging mapped."""
        self.check.release()

    def run(self, cols: RecordColumns, topics: TopicIds | None = None) -> None:
        """Judge a run of the reader's walk (before any damage it met); ``topics``: its
        ``topic_ids()`` when the reader has them."""
        if self.walked or self.kept is None:
            return
        inside = cols.positions + cols.store_size <= self.kept.wrote  # the kept part of the file
        if not inside.all():
            cols, topics = cols.select(np.flatnonzero(inside)), None
        judged = self.check.unserved(cols.buf, cols.file_start, cols, topics)
        self.found += [rec.position for rec in judged]

    def damage(self, position: int, begin: int | None = None) -> None:
        """The reader's walk met damage at ``position``: the rest of the range is judged by the
        emulation's walk from there (records from ``begin``, default ``position``)."""
        if self.walked:
            return
        self.walked = True
        start = position if begin is None else begin
        found = self.keeps.unserved_in(self.store, self.file_name, position, start, self.end)
        self.found += found.tolist()


def keeps_from_report(report: RecoveryReport) -> RestartKeeps:
    """The prediction of an emulation that listed every lost message."""
    end = report.end_after_start
    lost = report.lost_messages
    if not report.broker_starts or report.commitlog is None or end is None or lost is None:
        return RestartKeeps(False, 0, frozenset(), _NONE)
    deleted = frozenset(report.commitlog.deleted_files + report.commitlog.deleted_at_load)
    unserved = [m.physical_offset for m in lost.messages if m.where == NO_QUEUE_UNIT]
    return RestartKeeps(True, end, deleted, np.array(sorted(unserved), np.int64))


def predict_keeps(
    store: Store, *, per_range: bool = False, checker: RangeChecker | None = None
) -> RestartKeeps:
    """Run the restart emulation and keep what :class:`RestartKeeps` needs. With ``per_range``
    the unserved messages are left to :meth:`RestartKeeps.unserved_in` when the store allows
    (a plain commitlog, a post-restart state of bounded size); otherwise the emulation lists
    them. ``checker``: where the emulation's record checks run (the export's workers)."""
    ledger = store.dledger is not None
    outcome = run_recovery(
        store,
        RecoverOptions(lost_limit=None, find_lost=ledger or not per_range),
        checker=checker,
    )
    report = outcome.report
    end = report.end_after_start
    if not report.broker_starts or report.commitlog is None or end is None:
        return RestartKeeps(False, 0, frozenset(), _NONE)
    lost = report.lost_messages
    if lost is not None:
        return keeps_from_report(report)
    deleted = frozenset(report.commitlog.deleted_files + report.commitlog.deleted_at_load)
    serving = outcome.serving
    assert serving is not None
    keeps = RestartKeeps(True, end, deleted, _NONE, serving)
    if serving.overlay_bytes <= MAX_SHIPPED_OVERLAY:
        return keeps
    listed = [keeps.unserved_in(store, name, 0, 0, wrote) for name, wrote in serving.commitlog]
    return RestartKeeps(True, end, deleted, np.concatenate([_NONE, *listed]))
