"""The page: a header that makes it evidence (tool, store, profile, when, the commands each
section's numbers come from), the verdict, then the sections. Self-contained: inline CSS and
SVG, one small inline script (the lost messages' filter), nothing fetched."""

from __future__ import annotations

from dataclasses import dataclass

from rmqinspect.analysis.report import IncidentReport
from rmqinspect.render.report.sections import (
    findings_section,
    groups_section,
    lost_section,
    queues_section,
)
from rmqinspect.render.report.storemap import store_map
from rmqinspect.render.report.text import esc, num, size, when


@dataclass(frozen=True, slots=True)
class PageMeta:
    """What the page says about its own making."""

    version: str
    generated: str  # ISO 8601, UTC
    commands: dict[str, str]  # section -> the command whose JSON gives its numbers


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;margin-top:1.6em}
#verdict{font-size:1.3em;font-weight:600;padding:.6em .8em;border-radius:6px}
#verdict.bad{background:#fde2e1;color:#8a1010}#verdict.good{background:#e3f4e1;color:#1d5e17}
#verdict.doubt{background:#fff4d6;color:#7a5600}
dl.meta{display:grid;grid-template-columns:max-content auto;gap:.1em 1em;font-size:.9em}
dl.meta dt{color:#666}dl.meta dd{margin:0}code{font-size:.9em;background:#f3f3f3;padding:0 .2em}
table{border-collapse:collapse;font-size:.9em}td,th{padding:.15em .5em;border-bottom:1px solid #eee;
text-align:left;vertical-align:top}thead th{background:#f6f6f6}
.calm{color:#1d5e17}.legend .key,.markers .key{display:inline-block;width:12px;height:12px;
margin:0 .3em 0 .8em;vertical-align:middle}
.markers{list-style:none;padding:0;font-size:.9em}
svg.map text.name{font:11px monospace;text-anchor:end;fill:#333}
.zeros{fill:#eee}.data{fill:#7cb772}.damage{fill:#d62020}.cut{fill:#f0a030;opacity:.85}
span.zeros{background:#eee}span.data{background:#7cb772}span.damage{background:#d62020}
span.cut{background:#f0a030}
.deleted{fill:none;stroke:#d62020;stroke-width:2;stroke-dasharray:4 3}
span.key.deleted{border:2px dashed #d62020;background:none}
.mark{stroke-width:2}.mark.start,span.start{stroke:#2060d0;background:#2060d0}
.mark.end,span.end{stroke:#000;background:#000}.mark.cqmax,span.cqmax{stroke:#9040c0;
background:#9040c0}.mark.confirm,span.confirm{stroke:#20a0a0;background:#20a0a0}
svg.bar .disk{fill:#aaa}svg.bar .after{fill:#4a80d0}svg.bar .offset{stroke:#000;stroke-width:2}
svg.bar .reset{stroke:#d62020;stroke-width:2}span.reset{color:#b00;font-weight:600}
tr.changed td:first-child{border-left:3px solid #f0a030}tr.replays td:first-child{
border-left:3px solid #d62020}
details.finding-group{margin:.3em 0;border:1px solid #ddd;border-radius:4px;padding:.2em .6em}
details.error summary b{color:#a00}details.warning summary b{color:#8a6000}
#lost{width:100%}#lost td{white-space:nowrap}#lost td:nth-child(5){white-space:normal;
overflow-wrap:anywhere}#lost td:nth-child(4),#lost td:nth-child(5){font:11px monospace}
#lost td:nth-child(7){white-space:normal}
pre{font-size:11px;background:#f7f7f7;padding:.4em;overflow-x:auto}
footer{margin-top:2em;color:#888;font-size:.85em}
"""

# The filter box: rows whose text lacks the typed string are hidden. No request, no library.
SCRIPT = """
document.getElementById('lost-filter')?.addEventListener('input', function (e) {
  var q = e.target.value.toLowerCase();
  document.querySelectorAll('#lost tbody tr').forEach(function (r) {
    r.hidden = q !== '' && r.textContent.toLowerCase().indexOf(q) < 0;
  });
});
"""


def mood(report: IncidentReport) -> str:
    """The verdict's colour, as ``recover`` colours its own (and red for verify's errors)."""
    if report.flagged:
        return "bad"
    return "doubt" if report.replaying or report.recovery.verdict != "no_loss" else "good"


def page(report: IncidentReport, meta: PageMeta) -> str:
    r = report.recovery
    commands = "".join(
        f"<dt>{esc(section)}</dt><dd><code>{esc(cmd)}</code></dd>"
        for section, cmd in meta.commands.items()
    )
    s = report.verify.summary
    calm = not report.flagged and not report.replaying and not s.findings
    sections = [
        _section("map", "The store as a map", store_map(report)),
        _section("queues", "Queues and committed offsets", queues_section(report)),
        _section("groups", "Consumer groups after the restart", groups_section(report)),
        _section("lost", "Lost messages", lost_section(r.lost_messages, report.salvage)),
        _section("findings", "Findings (verify)", findings_section(report.verify)),
    ]
    summary = (
        f"<p>{num(s.records)} records in {num(s.commitlog_files)} commitlog files "
        f"({size(s.bytes)}), stored {when(s.first_store_timestamp) or '-'} .. "
        f"{when(s.last_store_timestamp) or '-'}; {num(len(report.queues))} consume queues; "
        f"verify: {', '.join(f'{num(n)} {sev}' for sev, n in s.findings_by_severity.items())}."
        f" recover: {esc(r.verdict_reason)}.</p>"
    )
    if calm:
        summary += '<p class="calm" id="calm">No damage: a restart keeps every message.</p>'
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>rmqinspect report: {esc(report.store)}</title><style>{CSS}</style></head>"
        f"<body><h1>RocketMQ store incident report</h1>"
        f'<p id="verdict" class="{mood(report)}">{esc(report.verdict)}</p>{summary}'
        f'<dl class="meta"><dt>store</dt><dd>{esc(report.store)}</dd>'
        f"<dt>profile</dt><dd>{esc(report.profile)}</dd>"
        f"<dt>written</dt><dd>{esc(meta.generated)} by rmqinspect {esc(meta.version)}</dd>"
        f"{commands}</dl>{''.join(sections)}"
        '<footer id="end">rmqinspect report: every number above is the JSON of the commands '
        f"named in the header.</footer><script>{SCRIPT}</script></body></html>\n"
    )


def _section(id_: str, title: str, body: str) -> str:
    return f'<section id="{id_}"><h2>{esc(title)}</h2>{body}</section>'
