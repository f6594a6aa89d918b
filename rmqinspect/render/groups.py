"""Rendering of ``groups``."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from rmqinspect.analysis.groups import Group, GroupsReport, MovedEvent, QueueRow
from rmqinspect.analysis.offsets import NextPull
from rmqinspect.render.output import OutputFormat, print_document, print_table, to_jsonable, warn
from rmqinspect.render.values import time_cell, with_times

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
    if print_document(groups_json(report), fmt):
        return
    if not report.groups:
        print(NO_GROUPS)
        return
    for g in report.groups:
        print_table(_group_table(g, report))


def _group_table(g: Group, report: GroupsReport) -> Table:
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
    s = g.subscription
    if s is not None:
        summary.append(
            f"retryMaxTimes {s.retry_max_times}, consumeEnable {str(s.consume_enable).lower()}, "
            f"consumeBroadcastEnable {str(s.consume_broadcast_enable).lower()}"
        )
    if g.moved_events:
        summary.append(f"{len(g.moved_events)} OFFSET_MOVED_EVENT record(s)")
    t = Table(
        title=f"{g.group} ({report.view}): " + "; ".join(summary),
        title_justify="left",
        caption="; ".join(g.notes) or None,
        caption_justify="left",
    )
    for col in (
        "topic",
        "queue",
        "kind",
        "offset",
        "min..max",
        "lag",
        "last consumed",
        "next pull",
    ):
        t.add_column(col, justify="right" if col in ("offset", "lag") else "left")
    t.add_column("notes")
    for r in g.queues:
        t.add_row(
            r.topic,
            str(r.queue_id),
            r.kind,
            "" if r.offset is None else str(r.offset),
            _bounds(r),
            "" if r.lag is None else str(r.lag),
            time_cell(r.last_consumed_store_timestamp)
            if r.last_consumed_store_timestamp is not None
            else "",
            _pull(
                r.next_pull_after_restart if r.min_offset_after_restart is not None else r.next_pull
            ),
            Text("; ".join((*r.findings, *r.notes)), style="bold red" if r.flagged else ""),
        )
    for e in g.moved_events:
        t.add_row(*_event_cells(e))
    return t


def _bounds(r: QueueRow) -> str:
    disk = f"{r.min_offset}..{r.max_offset}"
    if r.min_offset_after_restart is None or r.max_offset_after_restart is None:
        return disk
    after = f"{r.min_offset_after_restart}..{r.max_offset_after_restart}"
    return disk if after == disk else f"{disk} (after restart {after})"


def _pull(p: NextPull | None) -> Text:
    if p is None:
        return Text("")
    text = p.status.value if not p.moved else f"{p.status.value} -> {p.next_offset}"
    return Text(text, style="bold red" if p.moved else "")


def _event_cells(e: MovedEvent) -> tuple[str, ...]:
    what = (
        f"OFFSET_MOVED_EVENT {e.event.offset_request} -> {e.event.offset_new}"
        if e.event is not None
        else str(e.problem)
    )
    where = "" if e.event is None else e.event.topic
    queue = "" if e.event is None else str(e.event.queue_id)
    return (where, queue, "event", "", "", "", time_cell(e.store_timestamp), what, "")
