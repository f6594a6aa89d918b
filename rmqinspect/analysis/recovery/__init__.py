"""Predict what a broker restart does to a store: the emulation of
``DefaultMessageStore.load()/start()`` (rocketmq-store-format.md §10), step by step, per profile.

Modules: :mod:`.report` (the report types), :mod:`.state` (the restarting broker's in-memory
state and ``load()``'s file checks), :mod:`.index_service` (index load and rebuild),
:mod:`.commitlog` (start-file rules and the scan loop), :mod:`.ranges` (its record checks in
worker processes), :mod:`.dispatch` (dispatch and reput), :mod:`.lost` (what the restart
destroys), :mod:`.emulator` (the steps in order), :mod:`.outcome` (what the restart leaves
behind) and :mod:`.apply` (``--out``). Consume queues are
:class:`rmqinspect.store.consume_queue.ConsumeQueue`, shared with every other analysis.
"""

from rmqinspect.analysis.recovery.apply import ApplyRefused, ApplyReport, apply_recovery
from rmqinspect.analysis.recovery.emulator import analyze_recovery, run_recovery
from rmqinspect.analysis.recovery.outcome import QueueAfter, QueueFileAfter, RecoveryOutcome
from rmqinspect.analysis.recovery.ranges import RangeChecker
from rmqinspect.analysis.recovery.report import (
    SCHEMA_VERSION,
    LostMessage,
    QueueReport,
    RecoveryPath,
    RecoveryReport,
)
from rmqinspect.analysis.recovery.state import RecoverOptions

__all__ = [
    "SCHEMA_VERSION",
    "ApplyRefused",
    "ApplyReport",
    "LostMessage",
    "QueueAfter",
    "QueueFileAfter",
    "QueueReport",
    "RangeChecker",
    "RecoverOptions",
    "RecoveryOutcome",
    "RecoveryPath",
    "RecoveryReport",
    "analyze_recovery",
    "apply_recovery",
    "run_recovery",
]
