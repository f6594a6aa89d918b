"""The store as a map: one SVG row per commitlog (or DLedger data) file, its width the file's
length, on which verify's data and damage and the restart's start, end and cut are drawn."""

from __future__ import annotations

from dataclasses import dataclass

from rmqinspect.analysis.recovery import RecoveryReport
from rmqinspect.analysis.report import IncidentReport, MapFile
from rmqinspect.render.report.text import esc, num, when

LABEL = 210  # px left of the bars, for the file names
WIDTH = 760  # px of one file's bar
ROW = 22  # px per file
TOP = 8


@dataclass(frozen=True, slots=True)
class Marker:
    """A position the restart or the checkpoint names on the physical-offset axis."""

    offset: int
    css: str
    label: str


def markers(recovery: RecoveryReport) -> list[Marker]:
    """The recovery's positions, each from ``recover``'s JSON fields of the same name."""
    out: list[Marker] = []
    c = recovery.commitlog
    if c is not None and c.scan_start_offset is not None:
        out.append(Marker(c.scan_start_offset, "start", "recovery scan starts (start file)"))
    if recovery.max_phy_offset_of_consume_queue is not None:
        out.append(
            Marker(
                recovery.max_phy_offset_of_consume_queue,
                "cqmax",
                "consume queues reach (maxPhyOffsetOfConsumeQueue)",
            )
        )
    if c is not None and c.confirm_offset is not None:
        out.append(Marker(c.confirm_offset, "confirm", "checkpoint confirmPhyOffset"))
    d = recovery.dledger
    if d is not None:
        out.append(Marker(d.data_end, "end", "DLedger data end after its recovery"))
        if d.after_load.committed_pos >= 0:
            out.append(Marker(d.after_load.committed_pos, "confirm", "DLedger committed position"))
    elif c is not None and c.max_offset is not None:
        out.append(Marker(c.max_offset, "end", "recovered end: the restart keeps what is before"))
    return out


def store_map(report: IncidentReport) -> str:
    """The map's SVG (with a legend), or a sentence when the store has no commitlog file."""
    files = report.files
    if not files:
        return '<p class="calm">No commitlog file.</p>'
    marks = markers(report.recovery)
    end = report.recovery.end_after_start
    height = TOP + ROW * len(files) + 8
    owned = {id(f): [m for m in marks if _owner(files, m) is f] for f in files}
    span = _span_shown(files, owned)
    rows = [_row(i, f, owned[id(f)], end, span) for i, f in enumerate(files)]
    legend = "".join(
        f'<span class="key {css}"></span>{text} '
        for css, text in (
            ("data", "records"),
            ("zeros", "zeros / blank"),
            ("damage", "damage (verify)"),
            ("cut", "discarded by the restart"),
            ("deleted", "file deleted by the restart"),
        )
    )
    length = max(f.length for f in files)
    scale = (
        f"<p>Each row is one file; it shows the first {num(span)} bytes of the "
        f"{num(length)}: beyond them every file holds zeros only.</p>"
        if span < length
        else "<p>Each row is one file, from its first byte to its last.</p>"
    )
    if report.recovery.dledger is not None:
        scale += (
            "<p>The rows are DLedger data files: a message's physical offset is its entry's "
            "position + 48, so the positions above fall inside their entries.</p>"
        )
    lines = "".join(
        f'<li><span class="key {m.css}"></span>{esc(m.label)}: {num(m.offset)}</li>' for m in marks
    )
    cp = report.recovery.checkpoint
    if cp is not None and cp.present:
        # The checkpoint holds times, not offsets (but 5.x's confirm offset, drawn above).
        lines += (
            f"<li>checkpoint: physicMsgTimestamp {when(cp.physic_msg_timestamp)}, "
            f"logicsMsgTimestamp {when(cp.logics_msg_timestamp)}, indexMsgTimestamp "
            f"{when(cp.index_msg_timestamp)}</li>"
        )
    return (
        f'{scale}<p class="legend">{legend}</p>'
        f'<svg class="map" width="{LABEL + WIDTH + 10}" height="{height}" '
        f'viewBox="0 0 {LABEL + WIDTH + 10} {height}" role="img" '
        f'aria-label="commitlog files">{"".join(rows)}</svg>'
        f'<ul class="markers">{lines}</ul>'
    )


def _owner(files: tuple[MapFile, ...], m: Marker) -> MapFile | None:
    """The file a position lies in: the last one starting at or before it, when it reaches it
    (the end of a full file is drawn at that file's right edge)."""
    owner = None
    for f in files:
        if f.start <= m.offset <= f.start + f.length:
            owner = f
    return owner


def _span_shown(files: tuple[MapFile, ...], owned: dict[int, list[Marker]]) -> int:
    """The bytes of each file the rows show: all of them, unless every file's data and marks
    lie in its first tenth (a 1 GiB file holding a few MB would be a sliver otherwise)."""
    length = max(f.length for f in files)
    reach = max(max([f.data, *(m.offset - f.start for m in owned[id(f)])]) for f in files)
    shown = 1 << max(reach * 5 // 4, 1).bit_length()  # a round power of two past the data
    return length if shown * 10 > length else shown


def _x(f: MapFile, offset: int, span: int) -> float:
    return LABEL + WIDTH * min(max(offset - f.start, 0), span) / max(span, 1)


def _row(i: int, f: MapFile, marks: list[Marker], end: int | None, span: int) -> str:
    y = TOP + i * ROW
    h = ROW - 6
    data_end = f.start + f.data
    parts = [
        f'<text x="{LABEL - 6}" y="{y + h - 3}" class="name">{esc(f.file.rsplit("/", 1)[-1])}'
        "</text>",
        f'<rect class="zeros" x="{LABEL}" y="{y}" width="{WIDTH}" height="{h}"/>',
    ]
    if f.data:
        parts.append(_span("data", f, f.start, data_end, y, h, span))
    if end is not None and data_end > end:
        parts.append(_span("cut", f, max(end, f.start), data_end, y, h, span))
    for at in f.damage:
        x = _x(f, at, span)
        parts.append(
            f'<rect class="damage" x="{x:.1f}" y="{y}" width="3" height="{h}">'
            f"<title>damage at {num(at)}</title></rect>"
        )
    if f.deleted:
        parts.append(_span("deleted", f, f.start, f.start + f.length, y, h, span))
    for m in marks:
        x = _x(f, m.offset, span)
        parts.append(
            f'<line class="mark {m.css}" x1="{x:.1f}" x2="{x:.1f}" y1="{y - 3}" '
            f'y2="{y + h + 3}"><title>{esc(m.label)}: {num(m.offset)}</title></line>'
        )
    title = (
        f"{f.file}: starts at {f.start:,}, {f.records:,} records, {f.data:,} bytes of data, "
        f"{f.damaged_bytes:,} damaged, walk ended with {f.end}"
        + ("; deleted by the restart" if f.deleted else "")
    )
    return (
        f'<g class="cl-file" data-file="{esc(f.file)}" data-start="{f.start}">'
        f"<title>{esc(title)}</title>{''.join(parts)}</g>"
    )


def _span(css: str, f: MapFile, a: int, b: int, y: int, h: int, span: int) -> str:
    x0, x1 = _x(f, a, span), _x(f, b, span)
    return f'<rect class="{css}" x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1):.1f}" height="{h}"/>'
