"""Rendering of ``pop``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmqinspect.analysis.pop import PopReport, PopState
from rmqinspect.analysis.pop_records import INCONSISTENT, FindingKind
from rmqinspect.format.pop import REVIVE_GROUP
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    kind_findings_table,
    print_document,
    print_line,
    print_table,
    to_jsonable,
    verdict_line,
    warn,
)
from rmqinspect.render.values import time_cell, with_times

if TYPE_CHECKING:
    from rich.text import Text

NO_POP = "no POP checkpoints or acks"


def pop_json(report: PopReport) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "source": report.source,
        "reference_timestamp": report.reference_timestamp,
        "reference_basis": report.reference_basis,
        "stuck_after_ms": report.stuck_after_ms,
        "caveat": report.caveat,
        "undelivered": report.undelivered,
        "revive_queues": to_jsonable(report.revive_queues),
        "groups": [with_times(g) for g in to_jsonable(report.groups)],
        "checkpoints": [with_times(c) for c in to_jsonable(report.checkpoints)],
        "messages": [with_times(m) for m in to_jsonable(report.messages)],
        "findings": to_jsonable(report.findings),
        "skipped": to_jsonable(report.skipped),
    }
    return with_times(doc)


def render_pop(report: PopReport, fmt: OutputFormat) -> None:
    if report.skipped:
        lost = sum(s.length for s in report.skipped)
        warn(f"{len(report.skipped)} damaged range(s), {lost} bytes, stepped over: not read")
    if print_document(pop_json(report), fmt):
        return
    if report.empty:
        print(NO_POP)
        return
    print_line(
        f"{len(report.checkpoints)} checkpoint(s), {len(report.messages)} popped message(s) "
        f"({report.source}), now: {time_cell(report.reference_timestamp)} "
        f"({report.reference_basis})"
    )
    if any(report.undelivered.values()):
        held = ", ".join(f"{n} {what}(s)" for what, n in report.undelivered.items())
        print_line(f"still in the timer, not yet in a revive queue: {held}")
    print_line(f"caveat: {report.caveat}")
    if report.groups:
        t = RowTable(
            "POP groups",
            [
                Column("group", whole=True),
                Column("topics", whole=True, breaks=","),
                Column("in flight", right=True, whole=True),
                Column("awaiting revive", right=True, whole=True),
                Column("acked", right=True, whole=True),
                Column("revived", right=True, whole=True),
                Column("retry copies", right=True, whole=True, drop=1),
                Column("revived N times", whole=True, drop=2),
            ],
        )
        for g in report.groups:
            t.add_row(
                g.group,
                ",".join(g.topics),
                g.counts[PopState.IN_FLIGHT.value],
                g.counts[PopState.AWAITING_REVIVE.value],
                g.counts[PopState.ACKED.value],
                g.counts[PopState.REVIVED.value],
                g.retry_copies,
                " ".join(f"{n}x:{m}" for n, m in g.revived_messages.items()),
            )
        print_table(t)
    if report.revive_queues:
        q = RowTable(
            f"Revive queues ({REVIVE_GROUP} progress)",
            [
                Column("topic:queue", whole=True),
                Column("ck", right=True, whole=True),
                Column("ack", right=True, whole=True),
                Column("max offset", right=True, whole=True),
                Column("progress", right=True, whole=True),
            ],
        )
        for r in report.revive_queues:
            q.add_row(
                f"{r.topic}:{r.queue_id}", r.checkpoints, r.acks, r.max_offset,
                "none" if r.progress is None else r.progress,
            )  # fmt: skip
        print_table(q)
    waiting = [m for m in report.messages if m.state is not PopState.ACKED]
    if waiting:
        w = RowTable(
            "Popped, not acked",
            [
                Column("group", whole=True),
                Column("topic:queue", whole=True),
                Column("offset", right=True, whole=True),
                Column("state", whole=True),
                Column("invisible until", whole=True),
                Column("revived", right=True, whole=True, drop=1),
                Column("UNIQ_KEY", whole=True, drop=2),
            ],
            capped_on_terminal=True,
        )
        for m in waiting:
            w.add_row(
                m.group, f"{m.topic}:{m.queue_id}", m.queue_offset, m.state.value.replace("_", " "),
                time_cell(m.invisible_until), m.revived, m.uniq_key,
            )  # fmt: skip
        print_table(w)
    if report.findings:
        errors = {k.value for k in INCONSISTENT}
        f = kind_findings_table((k.value for k in FindingKind), errors, "group")
        for x in report.findings:
            f.add_row(x.kind.value, x.position, x.group, x.detail)
        print_table(f)
    print_table(pop_verdict(report))


def pop_verdict(report: PopReport) -> Text:
    """The last line: inconsistencies and overdue messages (what ``pop`` exits 1 for), else
    what is outstanding and what a restart revives again."""
    bad = sum(f.kind in INCONSISTENT for f in report.findings)
    overdue = sum(f.kind is FindingKind.OVERDUE for f in report.findings)
    if bad or overdue:
        return verdict_line(
            f"{bad} inconsistenc{'y' if bad == 1 else 'ies'}, {overdue} overdue message(s)", "bad"
        )
    outstanding = sum(g.outstanding for g in report.groups)
    again = sum(f.kind is FindingKind.REVIVE_UNCOMMITTED for f in report.findings)
    if outstanding or again:
        parts = [f"{outstanding} message(s) outstanding"] if outstanding else []
        parts += [f"{again} revived again by a restart"] if again else []
        return verdict_line(f"nothing inconsistent or overdue; {', '.join(parts)}", "doubt")
    return verdict_line("nothing inconsistent, overdue or outstanding", "good")
