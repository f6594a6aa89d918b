"""Rendering of ``groups``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmqinspect.analysis.groups_model import Group, GroupsReport, MovedEvent, QueueRow
from rmqinspect.analysis.offsets import NextPull
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    print_document,
    print_table,
    to_jsonable,
    verdict_line,
    warn,
)
from rmqinspect.render.values import time_cell, with_times

if TYPE_CHECKING:
    from rich.text import Text

NO_GROUPS = "no consumer groups: no consumer offsets, retry or DLQ queues"


def groups_json(report: GroupsReport) -> dict[str, Any]:
    return with_times(
        {
            "broker_version": report.broker_version,
            "version_basis": report.version_basis,
            "view": report.view,
            "consume_from_where": report.consume_from_where,
            "files": to_jsonable(report.files),
            "restart": to_jsonable(report.restart),
            "reference_timestamp": report.reference_timestamp,
            "reference_basis": report.reference_basis,
            "moved_event_source": report.moved_event_source,
            "problems": list(report.problems),
            "groups": [_group_json(g) for g in report.groups],
        }
    )


def _group_json(g: Group) -> dict[str, Any]:
    doc = with_times({**to_jsonable(g), "flagged": g.flagged})
    doc["queues"] = [with_times({**to_jsonable(r), "flagged": r.flagged}) for r in g.queues]
    doc["moved_events"] = [with_times(to_jsonable(e)) for e in g.moved_events]
    return doc


def render_groups(report: GroupsReport, fmt: OutputFormat) -> None:
    for f in report.files:
        if f.source == "bak":
            warn(f"{f.name}: the main file is {f.main_state}; the broker loads the .bak")
        elif f.source == "none":
            warn(f"{f.name}: neither file loads; the broker starts with an empty table")
        if not f.broker_starts:
            warn(f"{f.name}: the .bak cannot be decoded: the broker refuses to start")
    for p in report.problems:
        warn(p)
    if report.restart is not None and report.restart.refusal is not None:
        warn(f"judged against the queues on disk: {report.restart.refusal}")
    if report.version_basis != "--broker-version":
        warn(f"resets predicted for a {report.broker_version} broker ({report.version_basis})")
    for g in report.groups:
        if g.replayed or g.skipped:
            warn(
                f"{g.group}: the next pulls deliver {g.replayed} message(s) again and skip "
                f"{g.skipped} ({report.view})"
            )
        if g.delivered_again:
            warn(
                f"{g.group}: {g.delivered_again} of the messages it gets next reached it before "
                "(a send-back of theirs is stored): delivered again"
            )
        if g.pop is not None and g.pop.revive_uncommitted:
            warn(
                f"{g.group}: a restart revives {g.pop.revive_uncommitted} POP message(s) again "
                "(revive_uncommitted)"
            )
    if print_document(groups_json(report), fmt):
        return
    if not report.groups:
        print(NO_GROUPS)
    for g in report.groups:
        print_table(_group_table(g, report))
    if report.groups or report.flagged:
        print_table(groups_verdict(report))


# Groups named in the verdict before it only counts them.
_NAMED_GROUPS = 5


def groups_verdict(report: GroupsReport) -> Text:
    """The last line: the flagged groups (what ``groups`` exits 1 for) and what their next
    pulls replay and skip, or that no reset, replay or skip is due."""
    flagged = [g for g in report.groups if g.flagged]
    if not flagged and not report.problems:
        return verdict_line(
            f"nothing flagged in {len(report.groups)} group(s) ({report.view}): no reset, "
            "replay or skip due",
            "good",
        )
    named = [
        f"{g.group} (replays {g.replayed}, skips {g.skipped}, {len(g.findings)} finding(s))"
        for g in flagged[:_NAMED_GROUPS]
    ]
    if len(flagged) > _NAMED_GROUPS:
        named.append(f"{len(flagged) - _NAMED_GROUPS} more")
    said = [f"{len(flagged)} of {len(report.groups)} group(s) flagged ({report.view})"]
    if named:
        said[0] += ": " + ", ".join(named)
    if report.problems:
        said.append(f"{len(report.problems)} problem(s) outside any group")
    return verdict_line("; ".join(said), "bad")


def _group_table(g: Group, report: GroupsReport) -> RowTable:
    summary = [f"lag {g.lag}", f"retry backlog {g.retry_backlog}"]
    if g.dlq_size is not None:
        oldest = ""
        if g.dlq_oldest_store_timestamp is not None:
            oldest = f", oldest stored {time_cell(g.dlq_oldest_store_timestamp)}"
            if g.dlq_oldest_age_ms is not None:
                oldest += f" ({g.dlq_oldest_age_ms // 1000} s before {report.reference_basis})"
        summary.append(f"DLQ {g.dlq_size}{oldest}")
    if g.replayed or g.skipped:
        summary.append(f"next pulls replay {g.replayed}, skip {g.skipped}")
    if g.delivered_again:
        summary.append(f"{g.delivered_again} proven delivered before")
    if g.pop is not None:
        again = g.pop.revive_uncommitted
        summary.append(
            f"POP outstanding {g.pop.outstanding}"
            + (f", {again} revived again by a restart" if again else "")
        )
    s = g.subscription
    if s is not None:
        summary.append(
            f"retryMaxTimes {s.retry_max_times}, consumeEnable {str(s.consume_enable).lower()}, "
            f"consumeBroadcastEnable {str(s.consume_broadcast_enable).lower()}"
        )
    if g.moved_events:
        summary.append(f"{len(g.moved_events)} OFFSET_MOVED_EVENT record(s)")
    # At a narrow width the last consumed time, the kind (the topic says it), the bounds and
    # the lag make way; topics, offsets and what the next pull does are never cut.
    t = RowTable(
        f"{g.group} ({report.view}): " + "; ".join(summary),
        [
            Column("topic", whole=True),
            Column("queue", whole=True),
            Column("kind", whole=True, drop=4),
            Column("offset", right=True, whole=True),
            Column("min..max", whole=True, drop=3),
            Column("lag", right=True, whole=True, drop=2),
            Column("last consumed", whole=True, drop=5),
            Column("next pull", whole=True, styles=_moved_styles(g)),
            Column("notes", fold=True, breaks="_.", least=16, styles=_flagged_styles(g)),
        ],
        caption="; ".join(g.notes) or None,
    )
    for r in g.queues:
        t.add_row(
            r.topic,
            r.queue_id,
            r.kind,
            r.offset,
            _bounds(r),
            r.lag,
            time_cell(r.last_consumed_store_timestamp),
            _pull(_judged_pull(r)),
            _notes(r),
        )
    for e in g.moved_events:
        t.add_row(*_event_cells(e))
    return t


def _judged_pull(r: QueueRow) -> NextPull | None:
    return r.next_pull_after_restart if r.min_offset_after_restart is not None else r.next_pull


def _notes(r: QueueRow) -> str:
    return "; ".join((*r.findings, *r.notes))


# A cell is styled by its text: the texts of this group's moved pulls and flagged rows.
def _moved_styles(g: Group) -> dict[str, str]:
    pulls = (_judged_pull(r) for r in g.queues)
    return {_pull(p): "bold red" for p in pulls if p is not None and p.moved}


def _flagged_styles(g: Group) -> dict[str, str]:
    return {_notes(r): "bold red" for r in g.queues if r.flagged}


def _bounds(r: QueueRow) -> str:
    disk = f"{r.min_offset}..{r.max_offset}"
    if r.min_offset_after_restart is None or r.max_offset_after_restart is None:
        return disk
    after = f"{r.min_offset_after_restart}..{r.max_offset_after_restart}"
    return disk if after == disk else f"{disk} (after restart {after})"


def _pull(p: NextPull | None) -> str:
    if p is None:
        return ""
    return p.status.value if not p.moved else f"{p.status.value} -> {p.next_offset}"


def _event_cells(e: MovedEvent) -> tuple[str, ...]:
    what = (
        f"OFFSET_MOVED_EVENT {e.event.offset_request} -> {e.event.offset_new}"
        if e.event is not None
        else str(e.problem)
    )
    where = "" if e.event is None else e.event.topic
    queue = "" if e.event is None else str(e.event.queue_id)
    return (where, queue, "event", "", "", "", time_cell(e.store_timestamp), what, "")
