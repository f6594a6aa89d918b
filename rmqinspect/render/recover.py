"""Rendering of ``recover``: the stable JSON document, or rich tables for people."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from rmqinspect.analysis.recovery import ApplyReport, LostMessage, QueueReport, RecoveryReport
from rmqinspect.analysis.recovery.report import DLedgerReport, LedgerState
from rmqinspect.analysis.recovery.timer import TimerRecoveryReport
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    cell_text,
    key_value_table,
    print_json,
    print_jsonl,
    print_table,
    to_jsonable,
    verdict_line,
    warn,
)
from rmqinspect.render.values import size_cell, time_cell, with_times


def recover_json(report: RecoveryReport, applied: ApplyReport | None = None) -> dict[str, Any]:
    """The documented JSON schema (``schema_version`` 1): the report's fields, a top-level
    ``loses_data`` verdict (the exit-code rule) and, with ``--out``, an ``apply`` section."""
    doc: dict[str, Any] = _timed(to_jsonable(report))
    doc["loses_data"] = report.loses_data
    doc["verdict"] = report.verdict
    doc["verdict_reason"] = report.verdict_reason
    doc["apply"] = to_jsonable(applied) if applied is not None else None
    return doc


def _timed(value: Any) -> Any:
    """The project's JSON time convention at every depth: each ``*_timestamp`` (epoch ms) gets
    an ISO 8601 ``*_time`` sibling."""
    if isinstance(value, dict):
        return with_times({k: _timed(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_timed(v) for v in value]
    return value


def render_recover(
    report: RecoveryReport, fmt: OutputFormat, applied: ApplyReport | None = None
) -> None:
    if fmt is OutputFormat.TABLE:
        for table in recover_tables(report, applied):
            print_table(table)
    elif fmt is OutputFormat.JSONL:
        # Only the messages go to stdout: what else decides the exit code is said on stderr.
        lost = report.lost_messages
        if not report.broker_starts or lost is None:
            warn(report.verdict_reason)
        if lost is None:
            return
        if lost.damaged_records:
            warn(f"{lost.damaged_records} damaged record(s) past the recovered end are discarded")
        if lost.truncated:
            warn(f"{lost.listed} of {lost.count} lost messages listed: raise --lost-limit")
        print_jsonl(lost_message_json(m) for m in lost.messages)
    else:
        print_json(recover_json(report, applied))


def lost_message_json(message: LostMessage) -> dict[str, Any]:
    """One ``lost_messages.messages`` element, as it stands in the JSON report."""
    doc: dict[str, Any] = _timed(to_jsonable(message))
    return doc


def _changed(q: QueueReport) -> bool:
    return (
        q.changed_by_restart
        or q.max_offset_on_disk != q.max_offset_after_dispatch
        or q.min_offset_after_start != q.min_offset_after_load
    )


def recover_tables(
    report: RecoveryReport, applied: ApplyReport | None = None
) -> list[Table | RowTable | Text]:
    """The summary, what the restart changes, what it destroys, and last the verdict (a long
    list must not scroll it away)."""
    tables: list[Table | RowTable | Text] = [_summary(report)]
    if report.dledger is not None:
        tables.append(_dledger_table(report.dledger))
    if report.timer is not None:
        tables.extend(_timer_tables(report.timer))
    if report.load_failures:
        t = Table(title="Why the broker refuses to start", title_justify="left")
        for col in ("kind", "path", "message"):
            t.add_column(col)
        for f in report.load_failures:
            t.add_row(f.kind, f.path, f.message)
        tables.append(t)
    changed = [q for q in report.consume_queues if _changed(q)]
    if report.consume_queues:
        # A store can hold thousands of queues: the row renderer draws them.
        queues = RowTable(
            f"Consume queues changed by the restart ({len(changed)} of "
            f"{len(report.consume_queues)})",
            [
                Column("queue"),
                *(
                    Column(col, right=True, whole=True)
                    for col in ("on disk", "after load", "after dispatch", "truncated", "rebuilt")
                ),
                Column("files deleted", right=True, drop=1),
                Column("files created", right=True, drop=2),
            ],
        )
        for q in changed:
            queues.add_row(
                f"{q.topic}/{q.queue_id}",
                q.max_offset_on_disk,
                f"[{q.min_offset_after_load}, {q.max_offset_after_load})",
                f"[{q.min_offset_after_start}, {q.max_offset_after_dispatch})",
                q.units_truncated + q.units_dropped_by_cq_recover,
                q.units_written_at_load + q.units_written_after_start,
                ", ".join(q.files_deleted),
                ", ".join(q.files_created),
            )
        tables.append(queues)
    if report.index is not None:
        idx = report.index
        rows: list[tuple[str, Any]] = [
            (
                "geometry",
                f"{idx.geometry['slots']} slots / {idx.geometry['entries']} entries "
                f"({idx.geometry_source})",
            ),
            ("files before", len(idx.files_before)),
            ("deleted at load", ", ".join(idx.deleted_files) or "none"),
            ("why", idx.deleted_reason),
            ("new files", f"{idx.files_created} (named by the wall clock at restart)"),
            ("entries written", idx.entries_written),
        ]
        for r in idx.unfindable_ranges:
            rows.append(
                ("keys unfindable", f"records {r.first_offset}..{r.last_offset} ({r.reason})")
            )
        for r in idx.stale_ranges:
            rows.append(
                ("stale entries", f"records {r.first_offset}..{r.last_offset} ({r.reason})")
            )
        tables.append(key_value_table("Index", rows))
    lost = report.lost_messages
    if lost is not None and lost.messages:
        lost_table = RowTable(
            f"Messages the restart destroys ({lost.listed} of {lost.count} listed)",
            [
                Column("queue"),
                Column("queue offset", whole=True),
                Column("physical offset", whole=True),
                Column("msg id", whole=True, drop=1),
                Column("keys", drop=2),
                Column("stored", whole=True),
            ],
            capped_on_terminal=True,
        )
        for m in lost.messages:
            keys = " ".join(([m.uniq_key] if m.uniq_key else []) + m.keys)
            lost_table.add_row(
                f"{m.topic}/{m.queue_id}",
                m.queue_offset,
                m.physical_offset,
                m.msg_id,
                keys,
                time_cell(m.store_timestamp),
            )
        tables.append(lost_table)
    if applied is not None:
        rows = [
            ("directory", applied.directory),
            ("files copied", f"{applied.copied_files} ({size_cell(applied.copied_bytes)})"),
            ("not copied (deleted by the restart)", len(applied.deleted_files)),
            ("consume-queue files written", len(applied.written_files)),
            ("index files written", ", ".join(applied.index_files_written) or "none"),
            ("abort removed", applied.abort_removed),
            ("restart of the copy is a no-op", applied.verification_noop),
        ]
        rows.extend(("difference", d) for d in applied.verification_differences)
        rows.extend(("note", n) for n in applied.notes)
        tables.append(key_value_table("Applied", rows))
    mood = {"no_loss": "good", "loss_not_computed": "doubt"}.get(report.verdict, "bad")
    tables.append(verdict_line(report.verdict_reason, mood))
    return tables


def _ledger_cell(s: LedgerState) -> str:
    leader = f", leader {s.leader_id}" if s.leader_id else ""
    return (
        f"{s.role}{leader}, term {s.current_term}; entries {s.ledger_begin_index}.."
        f"{s.ledger_end_index} (end term {s.ledger_end_term}); committed {s.committed_index} "
        f"at {s.committed_pos}; max offset {s.max_offset}"
    )


def _timer_tables(t: TimerRecoveryReport) -> list[Table | RowTable]:
    """The timer store after the restart, and the units whose records the restart cuts."""
    log = f"{t.timerlog_end} ({t.timerlog_end_reason}, {t.timerlog_units} units)"
    rows: list[tuple[str, Any]] = [
        ("timercheck read time", time_cell(t.last_read_timestamp)),
        ("timercheck flush pos", t.last_timer_log_flush_pos),
        (
            "timercheck queue offsets",
            f"{t.last_timer_queue_offset} (master {t.master_timer_queue_offset})",
        ),
        ("timerlog recovery from", t.recovery_begin_offset),
        ("timerlog end", log),
        ("units dropped", t.units_dropped),
        ("timerlog files deleted", ", ".join(t.timerlog_files_deleted) or "none"),
        ("flushed units lost", t.flushed_units_lost),
        ("slots revised", t.slots_revised),
        ("slots still past the end", t.slots_past_end),
        ("enqueue resumes at", f"{t.timer_queue_offset} ({t.queue_offset_rule})"),
        (
            "timer queue after the restart",
            f"[{cell_text(t.timer_queue_min_offset)}, {cell_text(t.timer_queue_max_offset)})",
        ),
        ("to enqueue", t.to_enqueue),
        ("enqueued again", t.enqueued_again),
        ("restart at", f"{time_cell(t.now_timestamp)} ({t.now_basis})"),
        ("wheel read resumes at", f"{time_cell(t.read_timestamp)} ({t.read_rule})"),
        ("pending skipped", t.skipped_pending),
        ("pending due at once", t.due_pending),
        ("delivered or rolled, fired again", t.fired_again),
        ("units whose record is cut", t.units_cut),
    ]
    tables: list[Table | RowTable] = [key_value_table("Timer store after the restart", rows)]
    if t.units_cut_listed:
        cut = RowTable(
            f"Timer units whose commitlog record the restart cuts ({len(t.units_cut_listed)} "
            f"of {t.units_cut} listed)",
            [
                Column("timerlog offset", right=True, whole=True),
                Column("physical offset", right=True, whole=True),
                Column("state"),
                Column("uniq key", drop=1),
                Column("slot time", drop=2),
            ],
        )
        for u in t.units_cut_listed:
            cut.add_row(
                u.timerlog_offset,
                u.physical_offset,
                u.state,
                u.uniq_key,
                time_cell(u.slot_timestamp),
            )
        tables.append(cut)
    return tables


def _dledger_table(d: DLedgerReport) -> Table:
    """DLedger's own recovery and the node's state after load and after start."""
    rows: list[tuple[str, Any]] = [
        ("home", f"{d.home} (self id {d.self_id})"),
        ("data files", f"{len(d.data_files_before)} of {d.data_file_size} bytes"),
        ("scan", f"from entry {d.start_entry_index}, {size_cell(d.scanned_bytes)}"),
        ("data end", f"{d.data_end} ({d.end_reason})"),
    ]
    if d.first_bad_entry is not None:
        b = d.first_bad_entry
        rows.append(("stopped at", f"{b.physical_offset} in {b.file}: {b.reason} {b.detail}"))
    if d.last_entry is not None:
        e = d.last_entry
        rows.append(("last entry", f"index {e.index}, term {e.term}, at {e.position}"))
    rows.append(("index end", d.index_end))
    if d.index_rebuilt_from is not None:
        rows.append(
            (
                "index rewritten",
                f"from entry {d.index_rebuilt_from} ({d.index_units_rewritten} units)",
            )
        )
    rows.append(("data files deleted", ", ".join(d.data_files_deleted) or "none"))
    if d.index_files_deleted:
        rows.append(("index files deleted", ", ".join(d.index_files_deleted)))
    rows.append(("checkpoint", "; ".join(d.checkpoint.lines) or "missing"))
    rows.append(("currterm", "; ".join(d.currterm.lines) or "missing"))
    rows.append(("committed index", d.committed_index_source))
    rows.append(("after load", _ledger_cell(d.after_load)))
    rows.append(("after start", _ledger_cell(d.after_start)))
    if d.undispatched_at_load:
        rows.append(
            ("dispatched after the election", f"{size_cell(d.undispatched_at_load)} of entries")
        )
    for b in d.kept_damage or []:
        rows.append(
            ("kept damaged entry", f"{b.physical_offset} in {b.file}: {b.reason} {b.detail}")
        )
    rows.append(("assumes", d.assumption))
    return key_value_table("DLedger", rows)


def _summary(report: RecoveryReport) -> Table:
    rows: list[tuple[str, Any]] = [
        ("profile", f"{report.profile} ({'; '.join(report.profile_reasons)})"),
        ("broker starts", "yes" if report.broker_starts else "NO"),
        (
            "last exit ok",
            f"{cell_text(report.last_exit_ok)} ({report.last_exit_source}; abort file "
            f"{'present' if report.abort_present else 'absent'})",
        ),
        ("recovery path", report.recovery_path),
    ]
    if report.start_file is not None:
        s = report.start_file
        rows.append(("start file", f"{s.name}: {s.reason}"))
    if report.max_phy_offset_of_consume_queue is not None:
        rows.append(("max CQ physical offset", report.max_phy_offset_of_consume_queue))
    c = report.commitlog
    if c is not None and c.max_offset is not None:
        end = (
            "commitlog end (max offset)"
            if report.dledger is None
            else "max offset after load (committed position)"
        )
        rows.extend(
            [
                ("commitlog min offset", c.min_offset),
                (end, f"{c.max_offset} ({c.end_reason})"),
                ("scanned", size_cell(c.scanned_bytes)),
            ]
        )
        if c.last_valid_record is not None:
            r = c.last_valid_record
            rows.append(
                (
                    "last valid record",
                    f"{r.physical_offset} ({r.store_size} B, {r.topic}/{r.queue_id} "
                    f"offset {r.queue_offset})",
                )
            )
        if c.first_bad_record is not None:
            b = c.first_bad_record
            rows.append(
                ("first bad record", f"{b.physical_offset} in {b.file}: {b.reason} {b.detail}")
            )
        rows.append(("discarded data", size_cell(c.discarded_bytes or 0)))
        rows.append(("commitlog files deleted", ", ".join(c.deleted_files) or "none"))
        if c.deleted_at_load:
            rows.append(("deleted at load (zero length)", ", ".join(c.deleted_at_load)))
        if c.last_file is not None:
            rows.append(("last file", f"{c.last_file.name} at {c.last_file.wrote_position}"))
    rows.append(("consume queues truncated to the end", report.cq_truncation))
    if report.reput is not None:
        rp = report.reput
        text = f"{rp.start_offset} -> {rp.end_offset}, {rp.dispatched_records} records ({rp.rule})"
        if rp.stop_offset is not None:
            text += f"; stopped at {rp.stop_offset}: {rp.stop_reason}"
        rows.append(("reput after start", text))
    lost = report.lost_messages
    rows.append(("messages destroyed", "not searched for" if lost is None else lost.count))
    if lost is not None and lost.damaged_records:
        rows.append(("damaged records discarded", lost.damaged_records))
        for d in lost.damaged:
            rows.append(
                ("damaged record", f"{d.physical_offset} in {d.file}: {d.reason} {d.detail}")
            )
    if report.unreachable_messages:
        rows.append(("scanned messages left without a CQ unit", report.unreachable_messages))
    if report.queues_without_consume_queue:
        rows.append(
            ("queues with no consume queue", ", ".join(report.queues_without_consume_queue))
        )
    rows.extend(("warning", w) for w in report.warnings)
    return key_value_table("Restart recovery", rows)
