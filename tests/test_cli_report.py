"""``rmqinspect report``: the page of every conformance store and of damaged synth stores says
what the JSON of ``verify``, ``recover`` and ``groups --after-restart`` says (files on the map,
lost-message rows, finding groups, the verdict sentence), in a real headless Chromium too; the
page fetches nothing; its table is capped whatever the loss; it never lands in the store."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rmqinspect.analysis.recovery.report import LostMessage
from rmqinspect.analysis.report import incident_report
from rmqinspect.analysis.verify import Verifier, VerifyOptions
from rmqinspect.render.report import PageMeta, page
from rmqinspect.render.report.sections import MAX_FINDINGS_PER_CHECK, MAX_LOST_ROWS
from rmqinspect.store.model import Store, StoreOptions
from tests.cli_helpers import build_store, orders, run, run_json, tree_state
from tests.conftest import corpus_store_options, restore_trimmed_store
from tests.corpus import input_store, scenarios

CHROMIUM = shutil.which("chromium")
# .ci/run installs Debian's chromium and sets this: there the browser tests must run.
REQUIRED = os.environ.get("RMQINSPECT_REQUIRE_CHROMIUM") == "1"
LOST_LIMIT = "1000000"  # every lost message, as the report lists them


# --- the page, parsed --------------------------------------------------------------------------


class Page(HTMLParser):
    """The elements (tag, attributes) of a page and the text of each element with an id."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: dict[str, str] = {}
        self._open: list[tuple[str, str | None]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if tag not in ("meta", "input", "br", "link", "img"):
            self._open.append((tag, a.get("id")))
            if a.get("id"):
                self.text[a["id"]] = ""

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, id_ in self._open:
            if id_:
                self.text[id_] += data

    def having(self, tag: str, css: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and css in a.get("class", "").split()]

    def counts(self) -> dict[str, Any]:
        """What the test compares: files on the map, lost rows, finding groups, the verdict."""
        return {
            "files": [a["data-file"] for a in self.having("g", "cl-file")],
            "lost_rows": len(self.having("tr", "lost")),
            "finding_groups": [a["data-check"] for a in self.having("details", "finding-group")],
            "verdict": " ".join(self.text.get("verdict", "").split()),
            "hexdumps": len([t for t, _ in self.elements if t == "pre"]),
            "complete": "end" in self.text,
        }


def _n(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def expected_verdict(recovered: dict[str, Any], groups: dict[str, Any]) -> str:
    """The sentence the page must open with, from recover's and groups' JSON alone."""
    if not recovered["broker_starts"]:
        return str(recovered["verdict_reason"])
    lost = recovered["lost_messages"]
    parts = []
    if lost["count"]:
        topics = {m["topic"] for m in lost["messages"]}
        parts.append(f"{_n(lost['count'], 'message')} of {_n(len(topics), 'topic')}")
    if lost["damaged_records"]:
        parts.append(f"{_n(lost['damaged_records'], 'damaged record')} past the recovered end")
    head = (
        "the restart will discard " + " and ".join(parts)
        if parts
        else "the restart discards nothing"
    )
    replayed = [g["replayed"] for g in groups["groups"] if g["replayed"]]
    tail = (
        f"{_n(len(replayed), 'group')} will replay {_n(sum(replayed), 'message')}"
        if replayed
        else "no group replays messages"
    )
    return f"{head}; {tail}"


def chromium_dom(html: Path, *flags: str) -> str:
    """The DOM a headless Chromium builds from ``html`` (scripts run), serialised."""
    if CHROMIUM is None:
        if REQUIRED:
            pytest.fail("chromium is not installed (.ci/run installs it)")
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            *flags,
            "--dump-dom",
            html.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


# --- the stores ----------------------------------------------------------------------------------

CORPORA = {
    "conformance": "conformance_dir",
    "conformance5": "conformance5_dir",
    "conformance-consume": "conformance_consume_dir",
}
# The pages a real browser renders too (a clean, a torn, a consumed and a DLedger store, and
# the damaged synth ones): the rest are parsed here only, to keep the file fast.
IN_BROWSER = {
    "conformance/torn_tail",
    "conformance-consume/consume_clean",
    "dledger_clean",
    "synth/zero-region",
}


def _corpus_stores(corpus: Path) -> list[Path]:
    return sorted({input_store(corpus, s) for s in scenarios(corpus)})


def _options(store: Path) -> list[str]:
    levels = corpus_store_options(store).delay_levels
    return [] if levels is None else ["--delay-levels", levels]


def _synth(dest: Path, damage: str) -> Path:
    result = run(
        "synth",
        dest,
        "--messages",
        "600",
        "--topics",
        "2",
        "--queues",
        "2",
        "--crash",
        "--seed",
        "5",
        "--fate",
        "--commitlog-file-size",
        str(256 * 1024),
        "--damage",
        damage,
        "--quiet",
    )
    assert result.exit_code == 0, result.stderr
    return dest


def _hexdumps_shown(findings: list[dict[str, Any]]) -> int:
    """The hexdumps of the findings the page lists: the first MAX_FINDINGS_PER_CHECK per check."""
    shown: dict[str, int] = {}
    dumps = 0
    for f in findings:
        shown[f["check_id"]] = shown.get(f["check_id"], 0) + 1
        dumps += shown[f["check_id"]] <= MAX_FINDINGS_PER_CHECK and bool(f["hexdump"])
    return dumps


def check_report(
    store: Path, out: Path, options: list[str], browser: bool, version: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Render ``store``'s report and hold the page against the commands' JSON; returns the
    command's own JSON. ``version``: groups' --broker-version, which report takes too."""
    verified = run("verify", store, "--hexdump", *options, "--format", "json")
    recovered = run("recover", store, "--lost-limit", LOST_LIMIT, *options, "--format", "json")
    groups = run("groups", store, "--after-restart", *version, *options, "--format", "json")
    v, r, g = (json.loads(x.stdout) for x in (verified, recovered, groups))
    assert verified.exit_code == (1 if v["summary"]["findings_by_severity"]["error"] else 0)
    assert recovered.exit_code == (1 if r["loses_data"] or not r["broker_starts"] else 0)
    result = run("report", store, "--out", out, *version, *options, "--format", "json")
    flagged = recovered.exit_code == 1 or verified.exit_code == 1
    assert result.exit_code == (1 if flagged else 0), result.stderr
    doc = json.loads(result.stdout)
    html = out.read_text(encoding="utf-8")
    assert doc["bytes"] == len(html.encode("utf-8"))
    lost = r["lost_messages"]
    want = {
        "files": [f["file"] for f in v["summary"]["files"]],
        "lost_rows": min(lost["count"], MAX_LOST_ROWS),
        "finding_groups": list(v["summary"]["findings_by_check"]),
        "verdict": expected_verdict(r, g),
        "hexdumps": _hexdumps_shown(v["findings"]),
        "complete": True,
    }
    assert len(want["files"]) == v["summary"]["commitlog_files"]
    assert Page(html).counts() == want
    assert doc["verdict"] == want["verdict"]
    assert doc["lost_messages"] == lost["count"]
    assert doc["findings_by_check"] == v["summary"]["findings_by_check"]
    if browser:
        assert Page(chromium_dom(out)).counts() == want
    return dict(doc)


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_every_conformance_store_report_says_what_verify_and_recover_say(
    request: pytest.FixtureRequest, tmp_path: Path, corpus: str
) -> None:
    root = request.getfixturevalue(CORPORA[corpus])
    stores = _corpus_stores(root)
    assert stores
    for store in stores:
        name = f"{corpus}/{store.name}"
        check_report(store, tmp_path / f"{store.name}.html", _options(store), name in IN_BROWSER)


def test_trimmed_corpus_stores_dledger_and_timer(
    dledger_clean_store: Path, conformance_timer_dir: Path, tmp_path: Path
) -> None:
    """The DLedger store's map rows are its data files; the timer store's wheel is verified."""
    doc = check_report(dledger_clean_store, tmp_path / "d.html", [], True)
    assert doc["commitlog_files"] >= 1
    timer = restore_trimmed_store(conformance_timer_dir, "timer_clean", tmp_path / "timer")
    check_report(timer, tmp_path / "t.html", [], False)


@pytest.mark.parametrize("damage", ["zero-region", "flip-body", "missing-cq", "torn-tail"])
def test_damaged_synth_store_report(tmp_path: Path, damage: str) -> None:
    store = _synth(tmp_path / "store", damage)
    # Before 4.9.4 an offset past its queue resets to 0 (#4215): the cut makes groups replay.
    version = ("--broker-version", "4.9.3")
    doc = check_report(store, tmp_path / "r.html", [], f"synth/{damage}" in IN_BROWSER, version)
    assert doc["flagged"] is True
    if damage == "zero-region":
        # The cut is on the map: the data past the recovered end, drawn as discarded.
        html = Page((tmp_path / "r.html").read_text(encoding="utf-8"))
        assert html.having("rect", "cut") and html.having("line", "end")
        assert doc["lost_messages"] > 0 and doc["replaying_groups"]


def test_clean_store_gets_a_short_calm_page(tmp_path: Path, wide_console: None) -> None:
    store = build_store(tmp_path / "s", orders(20))
    doc = run_json("report", store, "--out", tmp_path / "r.html", expect=0)
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    p = Page(html)
    assert doc["verdict"] == "the restart discards nothing; no group replays messages"
    assert p.text["verdict"] == doc["verdict"] and p.having("p", "good") == [
        {"id": "verdict", "class": "good"}
    ]
    assert p.text["calm"] == "No damage: a restart keeps every message."
    assert not p.having("tr", "lost") and not p.having("details", "finding-group")
    assert len(html) < 40_000
    table = run("report", store, "--out", tmp_path / "r.html", "--format", "table")
    assert table.exit_code == 0 and doc["verdict"] in table.stdout
    lines = run("report", store, "--out", tmp_path / "r.html", "--format", "jsonl")
    assert [json.loads(line) for line in lines.stdout.splitlines()] == [
        {**doc, "bytes": json.loads(lines.stdout)["bytes"]}
    ]


# --- no network ----------------------------------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    """A proxy that answers nothing and remembers every request Chromium sends it."""

    seen: ClassVar[list[str]] = []

    def _record(self) -> None:
        self.seen.append(self.requestline)
        self.send_error(502)

    do_GET = do_POST = do_HEAD = do_CONNECT = _record

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def recording_proxy() -> Iterator[tuple[str, list[str]]]:
    seen: ClassVar[list[str]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


URL_ATTRIBUTES = ("src", "href", "xlink:href", "action", "srcset", "poster", "data", "formaction")


def _page_requests(seen: list[str]) -> list[str]:
    """The requests a page made: all but Chromium's own background calls to Google's hosts
    (time, updates, accounts), which it sends whatever it loads."""
    own = (".google.com", ".gvt1.com", ".googleapis.com", ".gstatic.com")
    hosts = [(line, line.split()[1].split("://")[-1].split("/")[0].split(":")[0]) for line in seen]
    return [line for line, host in hosts if not host.endswith(own)]


def test_the_page_requests_nothing_from_the_network(
    tmp_path: Path, recording_proxy: tuple[str, list[str]]
) -> None:
    """With every request Chromium makes sent to a recording proxy that answers none (the
    network is off), it loads the page to its last element and the page asks for nothing; a
    page with one remote image, loaded the same way, is seen asking: the proxy would tell."""
    store = _synth(tmp_path / "store", "zero-region")
    out = tmp_path / "r.html"
    run_json("report", store, "--out", out, expect=1)
    html = out.read_text(encoding="utf-8")
    address, seen = recording_proxy
    offline = (f"--proxy-server=http://{address}", "--proxy-bypass-list=<-loopback>")
    dom = Page(chromium_dom(out, *offline))
    assert dom.counts()["complete"] and dom.having("g", "cl-file")
    assert _page_requests(seen) == []
    for p in (Page(html), dom):
        urls = [a[k] for _, a in p.elements for k in URL_ATTRIBUTES if k in a]
        assert all(u.startswith("#") for u in urls), urls
        assert not [t for t, _ in p.elements if t in ("link", "img", "iframe", "object", "embed")]
    attributes = "".join(v for _, a in Page(html).elements for v in a.values())
    assert "url(" not in html and "@import" not in html and "http" not in attributes
    control = tmp_path / "control.html"
    control.write_text('<html><body><img src="http://rmqinspect.example.com/x.png"></body></html>')
    chromium_dom(control, *offline)
    assert [r for r in _page_requests(seen) if "rmqinspect.example.com" in r], seen


# --- size, escaping, where it is written ------------------------------------------------------


def test_a_hundred_thousand_lost_messages_make_a_page_of_a_few_mb(tmp_path: Path) -> None:
    """The page of a real report whose loss is 100,000 messages lists the first MAX_LOST_ROWS,
    says the count, and stays under 3 MB."""
    store = _synth(tmp_path / "store", "zero-region")
    with Store.open(store, StoreOptions()) as st:
        with Verifier(st, VerifyOptions(hexdump=True)) as verifier:
            verified = verifier.run(None)
        report = incident_report(st, verified, (4, 9, 8), "4.9.8", "test")
    lost = report.recovery.lost_messages
    assert lost is not None and lost.messages
    one = lost.messages[0]
    many = [
        dataclasses.replace(one, queue_offset=i, physical_offset=i * 200, keys=[f"K-{i}"])
        for i in range(100_000)
    ]
    recovery = dataclasses.replace(
        report.recovery, lost_messages=dataclasses.replace(lost, count=100_000, messages=many)
    )
    big = page(dataclasses.replace(report, recovery=recovery), PageMeta("t", "now", {}))
    p = Page(big)
    assert len(big.encode("utf-8")) < 3_000_000
    assert len(p.having("tr", "lost")) == MAX_LOST_ROWS
    assert p.text["lost-count"].startswith("100,000 intact messages are lost; the first 2,000")
    assert p.text["verdict"].startswith("the restart will discard 100,000 messages of 1 topic")
    assert isinstance(many[0], LostMessage)


def test_hostile_names_are_text_not_markup(tmp_path: Path) -> None:
    """A topic, key and body that look like markup are shown as text: the page keeps its one
    script, and the lost row names the topic."""
    evil = "<script>alert(1)</script>"
    specs = orders(10)
    specs += [
        dataclasses.replace(s, topic=evil, keys=f'"><img src=x>{i}', dispatch=False)
        for i, s in enumerate(orders(3))
    ]
    store = build_store(tmp_path / "s", specs, crash=True)
    doc = run_json("report", store, "--out", tmp_path / "r.html", expect=0)
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    p = Page(html)
    assert [t for t, _ in p.elements].count("script") == 1
    assert not [t for t, _ in p.elements if t == "img"]
    assert doc["verdict"] == p.text["verdict"]


def test_the_page_is_never_written_into_the_store(tmp_path: Path) -> None:
    store = build_store(tmp_path / "store", orders(10))
    (tmp_path / "link").symlink_to(store / "commitlog")
    before = tree_state(store)
    (tmp_path / "into.html").symlink_to(store / "x.html")
    for out in (
        store / "r.html",
        store / "commitlog" / "r.html",
        tmp_path / "link" / "r.html",
        tmp_path / "into.html",
        tmp_path,
    ):
        result = run("report", store, "--out", out)
        assert result.exit_code == 2, out
        assert result.stderr.startswith("rmqinspect: error: ") and result.stderr.count("\n") == 1
    # A link where the page goes is replaced, not written through.
    (tmp_path / "page.html").symlink_to(tmp_path / "elsewhere.html")
    run_json("report", store, "--out", tmp_path / "page.html", expect=0)
    assert not (tmp_path / "page.html").is_symlink() and not (tmp_path / "elsewhere.html").exists()
    assert tree_state(store) == before


def test_salvage_counts_come_from_the_salvage_directory(tmp_path: Path) -> None:
    store = _synth(tmp_path / "store", "zero-region")
    salvaged = run_json("salvage", store, "--out", tmp_path / "lost", expect=0)
    doc = run_json(
        "report", store, "--out", tmp_path / "r.html", "--salvage", tmp_path / "lost", expect=1
    )
    for key in ("messages", "intact", "restart_keeps", "intact_restart_discards"):
        assert doc["salvage"][key] == salvaged[key], key
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert f"<th>intact restart discards</th><td>{salvaged['intact_restart_discards']:,}" in html
    bad = run("report", store, "--out", tmp_path / "r2.html", "--salvage", tmp_path)
    assert bad.exit_code == 2 and "report.json" in bad.stderr and bad.stderr.count("\n") == 1


def test_a_store_the_broker_refuses_opens_with_the_refusal(tmp_path: Path) -> None:
    """A directory among the commitlog files: 4.9's load() fails, the page's first sentence is
    recover's reason, and the queues say the broker does not start."""
    store = build_store(tmp_path / "s", orders(40))
    (store / "commitlog" / f"{99999999:020d}").mkdir()
    doc = check_report(store, tmp_path / "r.html", [], False)
    assert doc["broker_starts"] is False and doc["flagged"] is True
    assert doc["verdict"].startswith("the broker refuses to start: ")
    assert "broker does not start" in (tmp_path / "r.html").read_text(encoding="utf-8")
    bad = run("report", store, "--out", tmp_path / "x.html", "--broker-version", "x")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "--broker-version" in bad.stderr
