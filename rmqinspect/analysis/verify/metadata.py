"""Checks of the small files: the checkpoint, the config JSON (with the broker's ``.bak`` rule),
committed consumer and delay offsets against their queues, and layouts verify does not read."""

from __future__ import annotations

from rmqinspect.analysis.offsets import OffsetStatus, offsets_report
from rmqinspect.analysis.recovery import RecoveryReport
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.finding import Findings
from rmqinspect.format.checkpoint import CHECKPOINT_FILE_SIZE, decode_checkpoint
from rmqinspect.store.configfiles import load_config_files
from rmqinspect.store.layout import QueueId

_CHECKPOINT = "checkpoint"
_OFFSET_FILES = {
    "consumer": "config/consumerOffset.json",
    "lmq": "config/lmqConsumerOffset.json",
    "delay": "config/delayOffset.json",
}
_OFFSET_CHECKS = {
    OffsetStatus.ABOVE_MAX: "offsets.above_max",
    OffsetStatus.BELOW_MIN: "offsets.below_min",
    OffsetStatus.NO_QUEUE: "offsets.no_queue",
}


def check_checkpoint(
    ctx: Context, data_end: int, max_store_timestamp: int | None, findings: Findings
) -> None:
    """The checkpoint exists, is one page, and claims nothing newer than the commitlog holds
    (its times against the newest store time on disk, 5.x's confirm offset against the end
    of the data)."""
    store = ctx.store
    read = store.checkpoint_file()
    if read is None:
        findings.add(
            "checkpoint.missing",
            _CHECKPOINT,
            "no checkpoint: the broker starts from zeros (after a crash it recovers from the "
            "first commitlog file and deletes every index file)",
        )
        return
    size = read.size
    if size != CHECKPOINT_FILE_SIZE:
        findings.add(
            "checkpoint.size",
            _CHECKPOINT,
            f"{size} bytes; the broker maps {CHECKPOINT_FILE_SIZE} (missing fields read as 0)",
        )
    cp = decode_checkpoint(read.data[:CHECKPOINT_FILE_SIZE].ljust(CHECKPOINT_FILE_SIZE, b"\0"))
    newest = "no record" if max_store_timestamp is None else f"{max_store_timestamp}"
    for position, name, value in (
        (0, "physicMsgTimestamp", cp.physic_msg_timestamp),
        (8, "logicsMsgTimestamp", cp.logics_msg_timestamp),
        (16, "indexMsgTimestamp", cp.index_msg_timestamp),
    ):
        if value > (max_store_timestamp if max_store_timestamp is not None else 0):
            findings.add(
                "checkpoint.ahead",
                _CHECKPOINT,
                f"{name} {value} is after the newest store time in the commitlog ({newest})",
                file_position=position,
            )
    if ctx.profile.checkpoint_has_confirm_offset and cp.confirm_phy_offset > data_end:
        findings.add(
            "checkpoint.ahead",
            _CHECKPOINT,
            f"confirmPhyOffset {cp.confirm_phy_offset} is past the end of the commitlog's data "
            f"({data_end})",
            file_position=32,
            physical_offset=cp.confirm_phy_offset,
        )


def check_config(ctx: Context, findings: Findings) -> None:
    """``ConfigManager.load()`` on every config file: a main file the broker cannot use (it
    falls back to ``.bak``, starts without the table, or refuses to start) and ``.tmp`` left
    by a 4.9 broker that died mid-write."""
    for name, r in load_config_files(ctx.store.config_dir).items():
        file = f"config/{name}"
        if r.source == "bak":
            why = r.main_error or f"{name} is {r.main_state}"
            findings.add("config.bak_fallback", file, f"{why}; the broker loads {name}.bak")
        elif r.source == "none" and not (
            r.main_state == "missing" and r.bak_state in ("missing", "empty")
        ):
            errors = "; ".join(e for e in (r.main_error, r.bak_error) if e)
            outcome = (
                "the broker refuses to start"
                if not r.broker_starts
                else "the broker starts without the table"
            )
            findings.add("config.parse", file, f"{errors or name + ' is empty'}; {outcome}")
        if r.tmp_present:
            findings.add(
                "config.tmp_left",
                f"{file}.tmp",
                "a 4.9 broker died while persisting; the broker ignores the .tmp file",
            )


def check_offsets(ctx: Context, restart: RecoveryReport | None, findings: Findings) -> None:
    """Committed consumer (and LMQ) offsets and delay offsets against their queues' bounds. An
    offset above a queue that lags the commitlog (a killed broker) is fine when the restart
    (``restart``, predicted when queues lag) rebuilds the queue past it."""
    rebuilt = {
        QueueId(q.topic, q.queue_id): q.max_offset_after_dispatch
        for q in (restart.consume_queues if restart is not None else [])
    }
    # Only the rows' disk view is read here (``restart`` speaks for the rebuilt queues): no
    # emulation of its own, and the queues as the records' check loaded them.
    report = offsets_report(ctx.store, restart=False, bounds=ctx.bounds)
    for row in report.rows:
        check = _OFFSET_CHECKS.get(row.status)
        if check is None:
            continue
        after = rebuilt.get(QueueId(row.topic, row.queue_id))
        if row.status is OffsetStatus.ABOVE_MAX and after is not None and row.offset <= after:
            continue
        owner = f"delay level {row.delay_level}" if row.table == "delay" else f"group {row.group}"
        bounds = (
            f"the queue holds {row.min_offset}..{row.max_offset}"
            if row.min_offset is not None
            else "no consume queue on disk"
        )
        findings.add(
            check,
            _OFFSET_FILES[row.table],
            f"{owner}: offset {row.offset}; {bounds}",
            topic=row.topic,
            queue_id=row.queue_id,
            queue_offset=row.offset,
        )


def check_unsupported(ctx: Context, findings: Findings) -> None:
    for u in ctx.store.unsupported:
        if u.kind in ("dledger", "timer", "batch_consume_queue"):
            continue  # verify checks these (DLedger: only other commands refuse it)
        findings.add("store.unsupported", ctx.rel(u.path), f"{u.note}; verify does not check it")
