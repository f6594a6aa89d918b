"""What a restart leaves behind besides its report: each consume queue's files with the units the
dispatch wrote, the files it deletes and the checkpoint it persists, for ``recover --out`` to
write out (:mod:`rmqinspect.analysis.recovery.apply`) and the export's workers to judge by."""

from __future__ import annotations

from dataclasses import dataclass

from rmqinspect.analysis.recovery.report import RecoveryReport
from rmqinspect.analysis.recovery.served import ServingState
from rmqinspect.analysis.recovery.state import BrokerState


@dataclass(frozen=True, slots=True)
class QueueFileAfter:
    """One consume-queue file after the restart, and what the dispatch wrote into it."""

    name: str
    on_disk: bool  # False: a file the broker creates
    write_position: int
    written_at: int  # file position of the first byte the dispatch wrote
    written: bytes  # the units it wrote there (empty when none)


@dataclass(frozen=True, slots=True)
class QueueAfter:
    topic: str
    queue_id: int
    existed: bool  # the queue had files before the restart
    files: list[QueueFileAfter]


@dataclass
class RecoveryOutcome:
    """The report plus the post-restart state that ``--apply-to`` writes out."""

    report: RecoveryReport
    commitlog_deleted: list[str]
    queues: list[QueueAfter]
    index_deleted: list[str]
    index_written: list[str]  # files (new or continued) materialised into the index out dir
    checkpoint_after: bytes | None
    # What the restarted broker serves, for judging ranges of the commitlog elsewhere
    # (the export's workers); None when it does not start.
    serving: ServingState | None = None


def queues_after(state: BrokerState) -> list[QueueAfter]:
    """Every queue as the restart leaves it: its files, and the units the dispatch wrote."""
    return [
        QueueAfter(
            qid.topic,
            qid.queue_id,
            state.history[qid].existed,
            [
                QueueFileAfter(
                    f.name, f.disk is not None, f.wrote, f.overlay_start, bytes(f.overlay)
                )
                for f in q.files
            ],
        )
        for qid, q in state.queues.items()
    ]
