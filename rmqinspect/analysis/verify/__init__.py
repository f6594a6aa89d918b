"""``verify``: an amcheck for RocketMQ stores. Every check produces a :class:`Finding` (a stable
dotted ``check`` id, a severity, where, and a one-line detail).

Modules: :mod:`.finding` (the finding type and the registry of check ids), :mod:`.context`
(options and what the checks share), :mod:`.commitlog`, :mod:`.queues` (both directions),
:mod:`.indexes`, :mod:`.metadata` (checkpoint, config, offsets), :mod:`.summary` (the store's
statistics) and :mod:`.run` (the order of the checks and the worker processes).
"""

from rmqinspect.analysis.verify.commitlog import record_failures, run_failures
from rmqinspect.analysis.verify.context import Context, VerifyOptions
from rmqinspect.analysis.verify.finding import CHECKS, Check, Finding, Severity
from rmqinspect.analysis.verify.run import RESTART_OPTIONS, Verifier, VerifyReport, verify_store
from rmqinspect.analysis.verify.summary import FileSummary, Summary, TopicSummary

__all__ = [
    "CHECKS",
    "RESTART_OPTIONS",
    "Check",
    "Context",
    "FileSummary",
    "Finding",
    "Severity",
    "Summary",
    "TopicSummary",
    "Verifier",
    "VerifyOptions",
    "VerifyReport",
    "record_failures",
    "run_failures",
    "verify_store",
]
