"""The page's tables: the queues with the groups' offsets on one axis, the groups that replay,
the lost messages (capped, with the count said), verify's findings by check, the salvage."""

from __future__ import annotations

from rmqinspect.analysis.recovery.report import LostReport
from rmqinspect.analysis.report import IncidentReport, QueueView, SalvageCounts
from rmqinspect.analysis.verify import CHECKS, Finding, VerifyReport
from rmqinspect.format.times import iso_ms
from rmqinspect.render.report.text import esc, num

# Caps that keep the page a few MB whatever the store: the count is always said, and the
# whole lists are one JSON command away.
MAX_LOST_ROWS = 2000
MAX_QUEUE_ROWS = 1000
MAX_FINDINGS_PER_CHECK = 50
BAR = 200  # px of a queue's offset axis

WHERE = {
    "past_end": "past the recovered end",
    "deleted_file": "in a file the restart deletes",
    "no_queue_unit": "no consume-queue unit after the restart",
}


def queues_section(report: IncidentReport) -> str:
    queues = report.queues
    if not queues:
        return '<p class="calm">No consume queue.</p>'
    shown = sorted(queues, key=lambda q: (not q.changed_by_restart, not q.offsets))[:MAX_QUEUE_ROWS]
    shown.sort(key=lambda q: (q.topic, q.queue_id))
    changed = sum(q.changed_by_restart for q in queues)
    note = (
        f"<p>{num(len(queues))} queues, {num(changed)} changed by the restart"
        + (
            f"; {num(len(shown))} shown (those changed or with committed offsets first)"
            if len(shown) < len(queues)
            else ""
        )
        + ". Bars: the queue on disk (upper), after the restart (lower); ticks: committed "
        "offsets (red: the next pull resets it).</p>"
    )
    rows = "".join(_queue_row(q) for q in shown)
    return (
        f'{note}<table class="queues"><thead><tr><th>topic</th><th>queue</th>'
        "<th>on disk [min, max)</th><th>after restart [min, max)</th>"
        f"<th>committed offsets</th><th>axis</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _queue_row(q: QueueView) -> str:
    after = (
        "broker does not start"
        if q.min_offset_after_restart is None
        else f"[{num(q.min_offset_after_restart)}, {num(q.max_offset_after_restart)})"
    )
    offsets = ", ".join(
        f'<span class="{"reset" if resets else "ok"}">{esc(g)}: {num(o)}</span>'
        for g, o, resets in q.offsets
    )
    css = "queue changed" if q.changed_by_restart else "queue"
    return (
        f'<tr class="{css}"><td>{esc(q.topic)}</td><td>{q.queue_id}</td>'
        f"<td>[{num(q.min_offset)}, {num(q.max_offset)})</td><td>{after}</td>"
        f"<td>{offsets}</td><td>{_queue_bar(q)}</td></tr>"
    )


def _queue_bar(q: QueueView) -> str:
    ends = [q.max_offset, q.max_offset_after_restart or 0, *(o for _, o, _ in q.offsets)]
    scale = BAR / max(max(ends), 1)

    def x(v: int) -> float:
        return 2 + v * scale

    parts = [_bar(x(q.min_offset), x(q.max_offset), 2, "disk")]
    if q.min_offset_after_restart is not None and q.max_offset_after_restart is not None:
        parts.append(
            _bar(x(q.min_offset_after_restart), x(q.max_offset_after_restart), 10, "after")
        )
    for g, o, resets in q.offsets:
        parts.append(
            f'<line class="{"reset" if resets else "offset"}" x1="{x(o):.1f}" x2="{x(o):.1f}" '
            f'y1="0" y2="18"><title>{esc(g)}: {num(o)}</title></line>'
        )
    return f'<svg class="bar" width="{BAR + 4}" height="18">{"".join(parts)}</svg>'


def _bar(a: float, b: float, y: int, css: str) -> str:
    return f'<rect class="{css}" x="{a:.1f}" y="{y}" width="{max(b - a, 1):.1f}" height="6"/>'


def groups_section(report: IncidentReport) -> str:
    groups = report.groups.groups
    if not groups:
        return '<p class="calm">No consumer group.</p>'
    rows = "".join(
        f'<tr class="group{" replays" if g.replayed else ""}"><td>{esc(g.group)}</td>'
        f"<td>{num(g.lag)}</td><td>{num(g.replayed)}</td><td>{num(g.skipped)}</td>"
        f"<td>{num(g.retry_backlog)}</td><td>{num(g.dlq_size)}</td>"
        f"<td>{_findings_cell(g.findings)}</td></tr>"
        for g in groups
    )
    return (
        f"<p>Judged against the queues {esc(report.groups.view)}; broker "
        f"{esc(report.groups.broker_version)} ({esc(report.groups.version_basis)}).</p>"
        '<table class="groups"><thead><tr><th>group</th><th>lag</th><th>replayed</th>'
        "<th>skipped</th><th>retry backlog</th><th>DLQ</th><th>findings</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _iso(ms: int) -> str:
    return esc(iso_ms(ms) or ms)


def _findings_cell(findings: tuple[str, ...]) -> str:
    """A group's findings, folded past the first two (one per queue can be hundreds)."""
    lines = "<br>".join(esc(f) for f in findings)
    if len(findings) <= 2:
        return lines
    return f"<details><summary>{num(len(findings))} findings</summary>{lines}</details>"


def lost_section(lost: LostReport | None, salvage: SalvageCounts | None) -> str:
    out = []
    if lost is None:
        out.append('<p class="calm">The loss search did not run.</p>')
    elif not lost.count:
        out.append('<p class="calm" id="lost-count">The restart loses no intact message.</p>')
    else:
        shown = lost.messages[:MAX_LOST_ROWS]
        capped = (
            f"; the first {num(len(shown))} are shown (all: <code>rmqinspect recover STORE "
            f"-F jsonl --lost-limit {lost.count}</code>)"
            if len(shown) < lost.count
            else ""
        )
        rows = "".join(
            f'<tr class="lost"><td>{esc(m.topic)}</td><td>{m.queue_id}</td>'
            f"<td>{num(m.queue_offset)}</td><td><code>{esc(m.msg_id)}</code></td>"
            f"<td>{esc(' '.join(([m.uniq_key] if m.uniq_key else []) + m.keys))}</td>"
            f'<td title="{m.store_timestamp}">{_iso(m.store_timestamp)}</td>'
            f"<td>{esc(WHERE.get(m.where, m.where))}</td></tr>"
            for m in shown
        )
        out.append(
            f'<p id="lost-count">{num(lost.count)} intact messages are lost{capped}.</p>'
            '<p><input id="lost-filter" type="search" placeholder="filter rows" '
            'aria-label="filter the lost messages"></p>'
            '<table id="lost"><thead><tr><th>topic</th><th>queue</th><th>offset</th>'
            "<th>msgId</th><th>keys</th><th>store time</th><th>why</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    if lost is not None and lost.damaged_records:
        out.append(
            f"<p>{num(lost.damaged_records)} damaged records past the recovered end are "
            "discarded too.</p>"
        )
    if salvage is not None:
        rows = "".join(
            f"<tr><th>{esc(k.replace('_', ' '))}</th><td>{num(v)}</td></tr>"
            for k, v in salvage.counts.items()
        )
        out.append(
            f'<h3>Salvaged into {esc(salvage.directory)}</h3><table class="salvage">{rows}'
            f"<tr><th>damaged ranges</th><td>{num(salvage.damaged_ranges)}</td></tr></table>"
        )
    return "".join(out)


def findings_section(verified: VerifyReport) -> str:
    by_check = verified.summary.findings_by_check
    if not by_check:
        return '<p class="calm">verify finds nothing.</p>'
    listed: dict[str, list[Finding]] = {}
    for f in verified.findings:
        listed.setdefault(f.check, []).append(f)
    return "".join(_check_group(c, n, listed.get(c, [])) for c, n in by_check.items())


def _check_group(check: str, count: int, findings: list[Finding]) -> str:
    severity = CHECKS[check].severity.value
    shown = findings[:MAX_FINDINGS_PER_CHECK]
    more = count - len(shown)
    items = "".join(_finding(f) for f in shown)
    if more:
        items += f"<li>{num(more)} more (all: <code>rmqinspect verify STORE -F json</code>)</li>"
    return (
        f'<details class="finding-group {severity}" data-check="{esc(check)}">'
        f"<summary><b>{esc(check)}</b> {severity}: {num(count)} "
        f"&mdash; {esc(CHECKS[check].summary)}</summary><ul>{items}</ul></details>"
    )


def _finding(f: Finding) -> str:
    where = [esc(f.file)] if f.file else []
    if f.file_position is not None:
        where.append(f"byte {num(f.file_position)}")
    if f.physical_offset is not None:
        where.append(f"physical offset {num(f.physical_offset)}")
    if f.topic is not None:
        where.append(f"{esc(f.topic)}/{f.queue_id}")
    dump = "<pre>" + "\n".join(esc(line) for line in f.hexdump) + "</pre>" if f.hexdump else ""
    return f'<li class="finding">{", ".join(where)}: {esc(f.detail)}{dump}</li>'
