"""Rendering of ``synth``: the summary of the written store, as a table or as JSON."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from rich.table import Table

from rmqinspect.render.output import OutputFormat, json_text, print_table
from rmqinspect.render.values import printable
from rmqinspect.synth import damage
from rmqinspect.synth.layout import FateSummary, TimerSummary
from rmqinspect.synth.writer import StoreSummary


def render_synth(
    summary: StoreSummary, seconds: float, damages: list[damage.Damage], fmt: OutputFormat
) -> None:
    """JSON as asked; else a table on a terminal and plain ``what: value`` lines when piped (a
    summary for a person: a script asks for -F json)."""
    if fmt is not OutputFormat.TABLE:
        indent = 2 if fmt is OutputFormat.JSON else None
        sys.stdout.write(json_text(synth_json(summary, seconds, damages), indent) + "\n")
    elif sys.stdout.isatty():
        print_table(synth_table(summary, seconds, damages))
    else:
        lines = [synth_title(summary)]
        lines += [f"{what}: {value}" for what, value in synth_rows(summary, seconds, damages)]
        sys.stdout.write("".join(printable(line) + "\n" for line in lines))


def synth_json(summary: StoreSummary, seconds: float, damages: list[damage.Damage]) -> Any:
    cp = summary.checkpoint
    return {
        "root": str(summary.root),
        "profile": str(summary.profile),
        "messages": summary.messages,
        "dispatched": summary.dispatched,
        "commitlog_files": list(summary.commitlog_files),
        "commitlog_end": summary.commitlog_end,
        "data_bytes": summary.data_bytes,
        "consume_queues": summary.consume_queues,
        "index_files": list(summary.index_files),
        "index_entries": summary.index_entries,
        "checkpoint": {
            "physic_msg_timestamp": cp.physic_msg_timestamp,
            "logics_msg_timestamp": cp.logics_msg_timestamp,
            "index_msg_timestamp": cp.index_msg_timestamp,
        },
        "crashed": summary.crashed,
        "dledger": None
        if summary.dledger is None
        else {
            "home": summary.dledger.home,
            "entries": summary.dledger.entries,
            "term": summary.dledger.term,
            "committed_index": summary.dledger.committed_index,
        },
        "fate": None if summary.fate is None else fate_json(summary.fate),
        "timers": None if summary.timers is None else timers_json(summary.timers),
        "damage": [
            {
                "kind": d.kind,
                "description": d.description,
                "ranges": [[r.path, r.start, r.end] for r in d.ranges],
                "removed": list(d.removed),
                "created": list(d.created),
                "details": dict(d.details),
            }
            for d in damages
        ],
        "seconds": round(seconds, 3),
    }


def timers_json(timers: TimerSummary) -> Any:
    """Counts of what ``--timers`` placed, by class and by the state ``timers`` gives it."""
    return {
        "messages": len(timers.timers),
        "by_kind": dict(sorted(Counter(t.kind for t in timers.timers).items())),
        "by_state": dict(sorted(Counter(t.state for t in timers.timers).items())),
        "timerlog_units": timers.timerlog_units,
        "wheel_slots": len(timers.slots),
        "last_read_timestamp": timers.last_read_ms,
        "timer_queue_offset": timers.timer_queue_offset,
    }


def fate_json(fate: FateSummary) -> Any:
    group, topic, queue_id, committed, max_offset = fate.offset_ahead
    return {
        "chains": fate.chains,
        "copies": {
            "schedule": fate.schedule,
            "scheduled_delivery": fate.scheduled_delivery,
            "retry_schedule": fate.retry_schedule,
            "retry": fate.retry,
            "dlq": fate.dlq,
            "pop_retry": fate.pop_retry,
            "trace": fate.trace_messages,
        },
        "pending_delays": fate.pending_delays,
        "transactions": dict(fate.transactions),
        "half_checks": fate.half_checks,
        "op_records": fate.op_records,
        "commit_records": fate.commit_records,
        "offset_ahead": {
            "group": group,
            "topic": topic,
            "queue_id": queue_id,
            "offset": committed,
            "max_offset": max_offset,
        },
        "examples": dict(fate.examples),
        "pop": _pop_counts(fate) if fate.pop else None,
    }


def _pop_counts(fate: FateSummary) -> dict[str, int]:
    """``--pop``: the checkpoints written, acked, and still only in the timer at the end."""
    return {
        "checkpoints": len(fate.pop),
        "acked": sum(t.acked for t in fate.pop),
        "in_timer": sum(t.ck_revive_position is None for t in fate.pop),
    }


def synth_table(summary: StoreSummary, seconds: float, damages: list[damage.Damage]) -> Table:
    table = Table(title=synth_title(summary), show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    for what, value in synth_rows(summary, seconds, damages):
        table.add_row(what, value)
    return table


def synth_title(summary: StoreSummary) -> str:
    return f"synthetic {summary.profile} store at {summary.root}"


def synth_rows(
    summary: StoreSummary, seconds: float, damages: list[damage.Damage]
) -> list[tuple[str, str]]:
    """The summary as (what, value) pairs: the table's rows, or plain lines when piped."""
    rows: list[tuple[str, str]] = []

    def add(what: str, value: str) -> None:
        rows.append((what, value))

    rate = summary.data_bytes / seconds / 2**20 if seconds > 0 else 0.0
    add("messages", f"{summary.messages} ({summary.dispatched} dispatched)")
    add(
        "commitlog" if summary.dledger is None else f"DLedger ({summary.dledger.home}/data)",
        f"{len(summary.commitlog_files)} files, end {summary.commitlog_end}, "
        f"{summary.data_bytes} bytes written",
    )
    if summary.dledger is not None:
        ledger = summary.dledger
        add(
            "DLedger entries",
            f"0..{ledger.entries - 1} in term {ledger.term}; checkpoint committedIndex "
            f"{ledger.committed_index}",
        )
    add(
        "consume queues",
        f"{len(summary.consume_queues)} queues, {sum(summary.consume_queues.values())} units",
    )
    add("index", f"{len(summary.index_files)} files, {summary.index_entries} entries")
    cp = summary.checkpoint
    add(
        "checkpoint",
        f"physic {cp.physic_msg_timestamp}, logics {cp.logics_msg_timestamp}, "
        f"index {cp.index_msg_timestamp}",
    )
    add("shutdown", "crash (abort left)" if summary.crashed else "clean")
    fate = summary.fate
    if fate is not None:
        add(
            "fate",
            f"{fate.chains} retried messages: {fate.retry_schedule} retry schedule copies, "
            f"{fate.retry} retry copies, {fate.dlq} DLQ, {fate.pop_retry} POP retry; "
            f"{fate.schedule} delayed sends, {fate.scheduled_delivery} delivered, "
            f"{fate.pending_delays} schedule units pending",
        )
        if fate.pop:
            pop = _pop_counts(fate)
            add(
                "POP",
                f"{pop['checkpoints']} checkpoints, {pop['acked']} acked, {pop['in_timer']} "
                "still in the timer",
            )
        states = ", ".join(f"{n} {state}" for state, n in fate.transactions.items())
        add("transactions", f"{states}; {fate.half_checks} check copies")
        group, topic, queue_id, committed, max_offset = fate.offset_ahead
        add("offset ahead", f"{topic}@{group} queue {queue_id}: {committed} > max {max_offset}")
    if summary.timers is not None:
        timer_states = Counter(t.state for t in summary.timers.timers)
        add(
            "timers",
            ", ".join(f"{n} {state}" for state, n in sorted(timer_states.items()))
            + f"; {summary.timers.timerlog_units} timerlog units",
        )
    for d in damages:
        add("damage", d.description)
    add("time", f"{seconds:.2f} s ({rate:.0f} MiB/s)")
    return rows
