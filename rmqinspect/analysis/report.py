"""``report``: the incident on one page, as plain data gathered from the analyses the JSON
commands run (one home for every number): ``verify``'s findings and per-file statistics,
``recover``'s restart prediction with every lost message, ``groups --after-restart``'s replays,
the queues' bounds on disk (:func:`queue_bounds`) and, optionally, the counts a ``salvage``
directory's ``report.json`` holds."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from rmqinspect.analysis import Progress
from rmqinspect.analysis.groups import groups_report
from rmqinspect.analysis.groups_model import Group, GroupsReport
from rmqinspect.analysis.offsets import BrokerVersion
from rmqinspect.analysis.queues import queue_bounds
from rmqinspect.analysis.recovery import QueueReport, RecoveryReport, analyze_recovery
from rmqinspect.analysis.salvage import SalvageReport
from rmqinspect.analysis.verify import RESTART_OPTIONS, Severity, VerifyReport
from rmqinspect.errors import StoreError
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store

SALVAGE_REPORT = "report.json"  # what ``salvage --out DIR`` writes beside the messages
# The counts read from it: SalvageReport's own integer fields, by their names.
_SALVAGE_COUNTS = tuple(
    f.name for f in fields(SalvageReport) if f.type in ("int", int) and f.name != "commitlog_files"
)


@dataclass(frozen=True, slots=True)
class SalvageCounts:
    """What an earlier ``salvage --out DIR`` found, from its ``report.json``."""

    directory: str
    counts: dict[str, int]  # SalvageReport's counts (messages, intact, restart_keeps, ...)
    damaged_ranges: int


@dataclass(frozen=True, slots=True)
class QueueView:
    """One consume queue on disk and after the restart, with the groups' committed offsets."""

    topic: str
    queue_id: int
    min_offset: int  # on disk, as the broker loads it unchanged
    max_offset: int
    min_offset_after_restart: int | None  # None: the broker does not start
    max_offset_after_restart: int | None
    changed_by_restart: bool
    offsets: tuple[tuple[str, int, bool], ...]  # (group, committed offset, next pull resets)


@dataclass(frozen=True, slots=True)
class MapFile:
    """One commitlog (or DLedger data) file on the map: verify's walk of it, and whether the
    restart deletes it."""

    file: str  # relative to the store, as verify names it
    start: int  # its first physical offset
    length: int
    data: int  # bytes of records and damage from its start (the rest up to the zeros)
    records: int
    damaged_bytes: int
    end: str  # how verify's walk ended: blank | zeros | damage | empty
    damage: tuple[int, ...]  # physical offsets of verify's commitlog error findings in it
    deleted: bool


@dataclass(frozen=True, slots=True)
class IncidentReport:
    store: str
    profile: str
    files: tuple[MapFile, ...]
    verify: VerifyReport
    recovery: RecoveryReport
    groups: GroupsReport
    queues: tuple[QueueView, ...]
    salvage: SalvageCounts | None

    @property
    def lost_by_topic(self) -> dict[str, int]:
        """Lost messages per topic (every one is listed: the report asks for all)."""
        out: dict[str, int] = {}
        lost = self.recovery.lost_messages
        for m in lost.messages if lost is not None else ():
            out[m.topic] = out.get(m.topic, 0) + 1
        return dict(sorted(out.items()))

    @property
    def replaying(self) -> tuple[Group, ...]:
        """The groups whose next pulls deliver messages again."""
        return tuple(g for g in self.groups.groups if g.replayed)

    @property
    def flagged(self) -> bool:
        """``recover``'s exit rule (data lost, or no start) or an error ``verify`` fails on."""
        r = self.recovery
        return (
            not r.broker_starts or bool(r.loses_data) or bool(self.verify.failing(Severity.ERROR))
        )

    @property
    def verdict(self) -> str:
        """The page's first sentence: what the restart discards, and who replays."""
        r = self.recovery
        if not r.broker_starts:
            return r.verdict_reason
        lost = r.lost_messages
        parts: list[str] = []
        if lost is not None and lost.count:
            parts.append(f"{_n(lost.count, 'message')} of {_n(len(self.lost_by_topic), 'topic')}")
        if lost is not None and lost.damaged_records:
            parts.append(f"{_n(lost.damaged_records, 'damaged record')} past the recovered end")
        head = (
            "the restart will discard " + " and ".join(parts)
            if parts
            else "the restart discards nothing"
        )
        replaying = self.replaying
        if replaying:
            replayed = sum(g.replayed for g in replaying)
            tail = f"{_n(len(replaying), 'group')} will replay {_n(replayed, 'message')}"
        else:
            tail = "no group replays messages"
        return f"{head}; {tail}"


def _n(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def incident_report(
    store: Store,
    verified: VerifyReport,
    version: BrokerVersion,
    version_text: str,
    version_basis: str,
    salvage_dir: Path | None = None,
    progress: Progress | None = None,
    restart: RecoveryReport | None = None,
) -> IncidentReport:
    """The report of ``store`` whose ``verify`` ran already (it has its own worker processes):
    the restart (every lost message listed), the groups judged after it, the queues.
    ``restart``: the restart verify predicted (:attr:`Verifier.restart`, with the same
    options), taken over instead of emulated again."""
    recovery = restart or analyze_recovery(store, RESTART_OPTIONS, progress)
    # The groups are judged against this same emulation: the restart runs once.
    groups = groups_report(
        store,
        version,
        version_text,
        version_basis,
        after_restart=True,
        prove_deliveries=False,
        recovery=recovery,
    )
    return IncidentReport(
        str(store.root),
        recovery.profile,
        _map_files(store, verified, recovery),
        verified,
        recovery,
        groups,
        _queues(store, recovery, groups),
        None if salvage_dir is None else read_salvage(salvage_dir),
    )


def _map_files(
    store: Store, verified: VerifyReport, recovery: RecoveryReport
) -> tuple[MapFile, ...]:
    lengths = {f.start: f.length for f in store.commitlog.files}
    deleted = set(recovery.commitlog.deleted_files if recovery.commitlog is not None else ())
    if recovery.dledger is not None:
        deleted |= set(recovery.dledger.data_files_deleted)
    damage: dict[str, list[int]] = {}
    for f in verified.findings:
        family = f.check.split(".", 1)[0]
        error = family in ("commitlog", "dledger") and f.severity is Severity.ERROR
        if error and f.physical_offset is not None:
            damage.setdefault(f.file, []).append(f.physical_offset)
    size = max(lengths.values(), default=0)
    return tuple(
        MapFile(
            s.file,
            s.start,
            lengths.get(s.start, size),
            s.bytes + s.damaged_bytes,
            s.records,
            s.damaged_bytes,
            s.end,
            tuple(sorted(damage.get(s.file, ()))),
            Path(s.file).name in deleted,
        )
        for s in verified.summary.files
    )


def _queues(store: Store, recovery: RecoveryReport, groups: GroupsReport) -> tuple[QueueView, ...]:
    offsets: dict[QueueId, list[tuple[str, int, bool]]] = {}
    for g in groups.groups:
        for row in g.queues:
            if row.offset is None:
                continue
            pull = row.next_pull_after_restart or row.next_pull
            resets = pull is not None and pull.moved
            offsets.setdefault(QueueId(row.topic, row.queue_id), []).append(
                (g.group, row.offset, resets)
            )
    # Where the broker does not start the restart has no queues: those on disk are shown.
    after = {QueueId(q.topic, q.queue_id): q for q in recovery.consume_queues}
    out = []
    for qid in sorted(after.keys() | store.queue_dirs.keys(), key=lambda q: (q.topic, q.queue_id)):
        bounds = queue_bounds(store, qid)
        q = after.get(qid)
        out.append(
            QueueView(
                qid.topic,
                qid.queue_id,
                bounds.min_offset,
                bounds.max_offset,
                q.min_offset_after_start if q is not None and recovery.broker_starts else None,
                q.max_offset_after_dispatch if q is not None and recovery.broker_starts else None,
                q is not None and _changed(q),
                tuple(offsets.get(qid, ())),
            )
        )
    return tuple(out)


def _changed(q: QueueReport) -> bool:
    return q.changed_by_restart or q.max_offset_on_disk != q.max_offset_after_dispatch


def read_salvage(directory: Path) -> SalvageCounts:
    """The counts of a salvage directory's ``report.json``; a directory without a readable one
    is bad input."""
    path = directory / SALVAGE_REPORT
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise StoreError(f"--salvage: no readable {SALVAGE_REPORT} ({err})", str(path)) from None
    if not isinstance(doc, dict):
        raise StoreError(f"--salvage: {SALVAGE_REPORT} is not a salvage report", str(path))
    counts = {k: doc[k] for k in _SALVAGE_COUNTS if type(doc.get(k)) is int}
    ranges = doc.get("damaged_ranges")
    if not counts or not isinstance(ranges, list):
        raise StoreError(f"--salvage: {SALVAGE_REPORT} is not a salvage report", str(path))
    return SalvageCounts(str(directory), counts, len(ranges))
