"""Rendering of ``trace``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmqinspect.analysis.trace import Chain, Copy, Restart, TraceReport
from rmqinspect.format.times import iso_ms
from rmqinspect.format.trace_data import TraceRecord
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    print_document,
    print_line,
    print_table,
    to_jsonable,
    verdict_line,
    warn,
)
from rmqinspect.render.values import with_times

if TYPE_CHECKING:
    from rich.text import Text

NOT_FOUND = "no message matches"


def _copy_json(c: Copy) -> dict[str, Any]:
    doc = with_times(to_jsonable(c))
    doc["traces"] = [to_jsonable(t) for t in c.traces]
    return doc


def _chain_json(chain: Chain) -> dict[str, Any]:
    doc: dict[str, Any] = to_jsonable(chain)
    doc["copies"] = [_copy_json(c) for c in chain.copies]
    return doc


def trace_json(report: TraceReport) -> dict[str, Any]:
    return {
        "query": report.query,
        "search": report.search.value,
        "found": report.found,
        "notes": list(report.notes),
        "broker_starts": report.broker_starts,
        "restart_end": report.restart_end,
        "chains": [_chain_json(c) for c in report.chains],
        "findings": to_jsonable(report.findings),
        "skipped": to_jsonable(report.skipped),
    }


def _delay_cell(c: Copy) -> str:
    """A schedule copy's level and due time; a timer copy's slot, timerlog unit and state."""
    if c.timer is not None:
        u = c.timer
        late = f" ({u.late.replace('_', ' ')})" if u.late else ""
        slot = iso_ms(u.slot_timestamp) or u.slot_timestamp
        return f"timer slot {slot}, unit {u.timerlog_offset}: {u.state.replace('_', ' ')}{late}"
    if c.delay_level is None or c.delay_level <= 0:
        return ""
    if c.due_timestamp is None:
        return str(c.delay_level)
    state = {True: "delivered", False: "pending", None: "no delayOffset.json entry"}[c.delivered]
    return f"{c.delay_level}: due {iso_ms(c.due_timestamp) or c.due_timestamp}, {state}"


def _groups_cell(c: Copy) -> str:
    return ", ".join(f"{g.group}: {'consumed' if g.consumed else 'pending'}" for g in c.groups)


def _trace_words(t: TraceRecord) -> str:
    """One decoded trace record, in a few words."""
    if t.trace_type == "Pub":
        return f"Pub by {t.group}: {'sent' if t.success else 'send failed'}"
    if t.trace_type == "SubBefore":
        return f"SubBefore {t.group}: reconsume {t.retry_times}"
    if t.trace_type == "SubAfter":
        return f"SubAfter: {'consumed' if t.success else 'failed'} in {t.cost_time} ms"
    check = " (check)" if t.from_transaction_check else ""
    return f"EndTransaction by {t.group}: {t.transaction_state}{check}"


def _chain_table(chain: Chain) -> RowTable:
    """One row per copy. At a narrow width the reconsume count, the delay, the store time and
    the queue offset make way (the physical offset names the copy); topics, offsets, times and
    group names are never cut."""
    t = RowTable(
        f"Copies of {chain.uniq_key or '(no UNIQ_KEY)'}",
        [
            Column("role", whole=True),
            Column("topic:queue", whole=True),
            Column("queue offset", right=True, whole=True, drop=3),
            Column("physical offset", right=True, whole=True),
            Column("stored", whole=True, drop=4),
            Column("reconsume", right=True, whole=True, drop=6),
            Column("delay", whole=True, drop=5),
            Column("groups / trace records", whole=True, least=20),
            Column("restart", whole=True, styles=_RESTART_STYLES),
        ],
    )
    for c in chain.copies:
        t.add_row(
            c.role.value,
            f"{c.topic}:{c.queue_id}",
            c.queue_offset,
            c.physical_offset,
            iso_ms(c.store_timestamp) or str(c.store_timestamp),
            c.reconsume_times,
            _delay_cell(c),
            "; ".join(_trace_words(r) for r in c.traces) if c.traces else _groups_cell(c),
            c.restart.value,
        )
    return t


# What the restart does to a copy, coloured where it destroys it.
_RESTART_STYLES = {
    Restart.CUT.value: "bold red",
    Restart.QUEUE_ENTRY_LOST.value: "bold red",
    Restart.BROKER_DOES_NOT_START.value: "bold red",
}

# A group's fate, as a verdict's mood: consumed is good news, a wait a doubt, the rest bad.
_FATE_MOODS = {"consumed": "good", "pending": "doubt", "in_delay": "doubt"}


def render_trace(report: TraceReport, fmt: OutputFormat) -> None:
    for note in report.notes:
        warn(note)
    if report.skipped:
        lost = sum(s.length for s in report.skipped)
        warn(f"{len(report.skipped)} damaged range(s), {lost} bytes, stepped over: not read")
    if print_document(trace_json(report), fmt):
        return
    if not report.found:
        print(NOT_FOUND)
        return
    print(f"found by {report.search.value}; {len(report.chains)} message(s)")
    for chain in report.chains:
        # Store data (topics, keys, group names) is escaped: it cannot drive the terminal.
        print_line(f"{chain.uniq_key or '(no UNIQ_KEY)'} sent to {chain.topic or '?'}:")
        print_table(_chain_table(chain))
        # What became of it, per group, under its copies: each line in its fate's colour.
        moods = {f.summary: _FATE_MOODS.get(f.outcome, "bad") for f in chain.groups}
        for line in chain.summary:
            print_line(f"  - {line}", moods.get(line))
    if report.findings:
        f = RowTable(
            "Findings",
            [
                Column("kind", whole=True),
                Column("at", right=True, whole=True),
                Column("detail", fold=True, least=30),
            ],
            capped_on_terminal=True,
        )
        for x in report.findings:
            f.add_row(x.kind.value, x.physical_offset, x.detail)
        print_table(f)
    print_table(trace_verdict(report))


def trace_verdict(report: TraceReport) -> Text:
    """The last line: each group's fate counted over the messages found (red when one ended in
    the DLQ, undelivered or lost by the restart; yellow when one still waits)."""
    counts: dict[str, int] = {}
    for chain in report.chains:
        for fate in chain.groups:
            counts[fate.outcome] = counts.get(fate.outcome, 0) + 1
    moods = {_FATE_MOODS.get(outcome, "bad") for outcome in counts}
    mood = "bad" if "bad" in moods else "doubt" if "doubt" in moods else "good"
    fates = ", ".join(f"{n} {outcome.replace('_', ' ')}" for outcome, n in counts.items())
    said = f"{len(report.chains)} message(s); per group: {fates or 'no group consumes them'}"
    if report.findings:
        said += f"; {len(report.findings)} finding(s)"
        mood = "bad"
    return verdict_line(said, mood)
