"""The report commands' tables (offsets, groups, trace, delays, transactions, timers) as a person
reads them: at 80 columns no line is wider, no topic, group, offset, time or UNIQ_KEY is cut and
the least useful columns made way; wide, every column and the same cell text as the JSON; the
verdict that decides the exit code comes last, coloured on a terminal only."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from typer.testing import Result

from rmqinspect.format.profile import Profile
from rmqinspect.format.times import iso_ms
from rmqinspect.render.output import TERMINAL_ROWS
from rmqinspect.render.values import time_cell
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import StoreLayout
from tests.cli_helpers import run, run_json, run_jsonl
from tests.render_helpers import run_in_terminal
from tests.test_cli_delays import LEVELS, delay_store
from tests.test_cli_transactions import _broker_store
from tests.timer_helpers import T0 as TIMER_T0
from tests.timer_helpers import TimerStore

WIDE = 400


@pytest.fixture(scope="module")
def fate_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A crashed 4.9 store with consumers' fates: offsets, retries, delays, transactions."""
    root = tmp_path_factory.mktemp("tables") / "store"
    layout = StoreLayout(profile=Profile.V4_9, commitlog_file_size=1 << 20, cq_file_size=6000)
    config = WorkloadConfig(
        messages=600, topics=2, queues=2, body_size=100, seed=12, crash=True, fate=True
    )
    write_workload(root, config, layout)
    return root


@dataclass
class Shown:
    """A table command's output, split as a reader sees it."""

    result: Result
    lines: list[str]

    @property
    def rows(self) -> list[list[str]]:
        """Each table row's cells, stripped, a cell wrapped over lines joined with spaces (a
        line whose first cell is empty continues the row above)."""
        rows: list[list[str]] = []
        for line in self.lines:
            if not line.startswith("│"):
                continue
            cells = [c.strip() for c in line.strip("│").split("│")]
            if cells[0] or not rows or len(rows[-1]) != len(cells):
                rows.append(cells)
            else:
                rows[-1] = [
                    f"{a} {b}" if a and b else a or b for a, b in zip(rows[-1], cells, strict=True)
                ]
        return rows

    def table(self, title: str) -> Shown:
        """The table whose title line starts with ``title``, alone."""
        start = next(i for i, line in enumerate(self.lines) if line.startswith(title))
        end = next(i for i in range(start, len(self.lines)) if self.lines[i].startswith("└"))
        return Shown(self.result, self.lines[start : end + 1])

    def headers(self) -> list[str]:
        """The header words of every table (a header wrapped at a narrow width is in pieces)."""
        return [c.strip() for line in self.lines if line.startswith("┃") for c in line.split("┃")]

    def verdict(self) -> str:
        """The verdict: one, after every table and what follows them, wrapped lines joined."""
        starts = [i for i, line in enumerate(self.lines) if line.startswith("verdict: ")]
        assert len(starts) == 1, self.lines
        last_table = max(i for i, line in enumerate(self.lines) if line.startswith("└"))
        assert starts[0] > last_table
        tail = self.lines[starts[0] :]
        assert not any(ch in line for line in tail for ch in "│┃└")
        return " ".join(line.strip() for line in tail)


def shown(monkeypatch: pytest.MonkeyPatch, columns: int, expect: int, *args: str | Path) -> Shown:
    monkeypatch.setenv("COLUMNS", str(columns))
    result = run(*args, "-F", "table")
    assert result.exit_code == expect, (result.exit_code, result.stderr)
    out = result.stdout
    assert "\x1b" not in out  # piped: no colour
    lines = out.splitlines()
    if columns == 80:
        assert all(cell_len(line) <= 80 for line in lines), max(map(cell_len, lines))
        assert "…" not in out  # nothing cut with an ellipsis either
    return Shown(result, lines)


def row_starting(s: Shown, *cells: str) -> list[str]:
    """The one row whose first cells are ``cells``: identifiers found whole in their cells."""
    found = [r for r in s.rows if r[: len(cells)] == list(cells)]
    assert len(found) == 1, (cells, s.lines)
    return found[0]


# --- offsets ------------------------------------------------------------------------------------


def _offset_cells(r: dict[str, Any]) -> list[str]:
    group = r["group"] if r["group"] is not None else f"(delay level {r['delay_level']})"
    return [group, r["topic"], str(r["queue_id"]), str(r["offset"])]


def _range(low: int | None, high: int | None) -> str:
    return "" if low is None or high is None else f"{low}..{high}"


def _text(v: Any) -> str:
    return "" if v is None else str(v)


def test_offsets_table(fate_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = run_json("offsets", fate_store, expect=0)["offsets"]
    assert len(rows) > 10
    narrow = shown(monkeypatch, 80, 0, "offsets", fate_store)
    # Group, topic, queue and offset stay whole; with a restart emulated its status stays, the
    # view on disk's and the lags make way.
    assert narrow.headers()[1:7] == ["group", "topic", "queue", "offset", "status after", ""]
    for r in rows:
        assert row_starting(narrow, *_offset_cells(r)) == [
            *_offset_cells(r),
            _text(r["status_after_restart"]),
        ]
    wide = shown(monkeypatch, WIDE, 0, "offsets", fate_store)
    for r in rows:
        assert row_starting(wide, *_offset_cells(r)) == [
            *_offset_cells(r),
            _range(r["min_offset"], r["max_offset"]),
            _text(r["lag"]),
            r["status"],
            _range(r["min_offset_after_start"], r["max_offset_after_dispatch"]),
            _text(r["lag_after_restart"]),
            _text(r["status_after_restart"]),
            r["bak_note"] or "",
        ]


# --- groups -------------------------------------------------------------------------------------


def test_groups_table(fate_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = run_json("groups", fate_store, expect=1)
    flagged = [g["group"] for g in doc["groups"] if g["flagged"]]
    assert flagged and len(flagged) < len(doc["groups"])
    verdict = f"verdict: {len(flagged)} of {len(doc['groups'])} group(s) flagged (disk): "
    for columns in (80, WIDE):
        s = shown(monkeypatch, columns, 1, "groups", fate_store)
        said = s.verdict()
        assert said.startswith(verdict)
        assert all(f"{g} (replays" in said for g in flagged)
        assert not any(f"{g['group']} (" in said for g in doc["groups"] if not g["flagged"])
        for g in doc["groups"]:
            t = s.table(f"{g['group']} (disk): lag ")
            for q in g["queues"]:
                row = row_starting(t, q["topic"], str(q["queue_id"]))
                if columns == 80:
                    # The kind, the bounds, the lag and the last consumed time made way.
                    assert row[2] == _text(q["offset"])
                else:
                    assert row[2:5] == [
                        q["kind"],
                        _text(q["offset"]),
                        f"{q['min_offset']}..{q['max_offset']}",
                    ]
                    assert row[6] == time_cell(q["last_consumed_store_timestamp"])
        headers = s.headers()
        if columns == 80:
            assert "kind" not in headers and "consumed" not in headers
        else:
            assert {"kind", "min..max", "lag", "last consumed", "next pull"} <= set(headers)


def _only(monkeypatch: pytest.MonkeyPatch, store: Path) -> Shown:
    """``groups`` of one group, whose rows are all in one table."""
    return shown(monkeypatch, 80, 1, "groups", store, "--group", "groupOK")


def test_groups_notes_wrap_without_cutting_a_topic(
    fate_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A flagged row's findings are long prose: they wrap in the notes column, and the row's
    # topic, queue and offset still read whole.
    doc = run_json("groups", fate_store, "--group", "groupOK", expect=1)
    (g,) = doc["groups"]
    q = next(q for q in g["queues"] if q["flagged"])
    s = _only(monkeypatch, fate_store)
    row = row_starting(s, q["topic"], str(q["queue_id"]), _text(q["offset"]))
    # Wrapped at spaces and after "_" and ".": every character is there, in order.
    assert re.sub(r"\s", "", row[-1]).startswith(re.sub(r"\s", "", q["findings"][0]))


# --- trace --------------------------------------------------------------------------------------


def test_trace_table(fate_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    retried = run_jsonl("messages", fate_store, "--topic", "%RETRY%groupRetry", expect=0)
    last = max((m for m in retried if "topic" in m), key=lambda m: m["reconsume_times"])
    origin = last["properties"]["ORIGIN_MESSAGE_ID"]
    (chain,) = run_json("trace", fate_store, "--msg-id", origin, expect=0)["chains"]
    copies = chain["copies"]
    assert len(copies) >= 4
    fates = Counter(g["outcome"] for g in chain["groups"])
    per_group = ", ".join(f"{n} {o.replace('_', ' ')}" for o, n in fates.items())
    for columns in (80, WIDE):
        s = shown(monkeypatch, columns, 0, "trace", fate_store, "--msg-id", origin)
        for c in copies:
            where = [c["role"], f"{c['topic']}:{c['queue_id']}"]
            if columns == 80:
                row = row_starting(s, *where, str(c["physical_offset"]))
                # The queue offset, the store time, the reconsume count and the delay made way;
                # the physical offset names the copy.
                assert row[2] == str(c["physical_offset"]) and row[-1] == c["restart"]
            else:
                row = row_starting(s, *where, str(c["queue_offset"]), str(c["physical_offset"]))
                assert row[2:5] == [
                    str(c["queue_offset"]),
                    str(c["physical_offset"]),
                    iso_ms(c["store_timestamp"]),
                ]
        # What became of it per group, under its copies, then the verdict.
        tail = s.lines[max(i for i, line in enumerate(s.lines) if line.startswith("└")) :]
        joined = " ".join(line.strip() for line in tail)
        assert all(f"- {g['summary']}" in joined for g in chain["groups"])
        assert s.verdict() == f"verdict: 1 message(s); per group: {per_group}"


# --- delays -------------------------------------------------------------------------------------


def test_delays_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = delay_store(tmp_path / "s", {1: 10, 2: 1, 3: 0})
    doc = run_json("delays", store, "--delay-levels", LEVELS, expect=1)
    levels = {lv["level"]: lv for lv in doc["levels"]}
    assert levels[1]["out_of_range"] == "above_max" and levels[2]["overdue"] == 2
    assert not levels[3]["flagged"]
    for columns in (80, WIDE):
        s = shown(monkeypatch, columns, 1, "delays", store, "--delay-levels", LEVELS)
        assert s.verdict() == (
            "verdict: 2 flagged: level 1 (offset above_max), level 2 (2 overdue)"
        )
        for n, lv in levels.items():
            row = row_starting(s, str(n))
            assert str(lv["offset"]) in row and str(lv["overdue"]) in row
            assert f"{lv['offset_at_load']} ({lv['out_of_range']})" in row or not lv["out_of_range"]
            if columns == WIDE:
                # Every time whole in its own column.
                assert row[7:10] == [
                    time_cell(lv["oldest_store_timestamp"]),
                    time_cell(lv["next_due_timestamp"]),
                    time_cell(lv["last_due_timestamp"]),
                ]
        if columns == 80:
            assert "oldest" not in s.headers()  # the least useful made way


def test_delays_verdict_is_good_where_nothing_is_flagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = delay_store(tmp_path / "s", {1: 4, 2: 3, 3: 0})
    s = shown(monkeypatch, 80, 0, "delays", store, "--delay-levels", LEVELS, "--now", "0")
    assert s.verdict() == "verdict: no level overdue, out of range or undeliverable (3 level(s))"


# --- transactions -------------------------------------------------------------------------------


def test_transactions_table(fate_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = run_json("transactions", fate_store, expect=0)
    txs = doc["transactions"]
    assert len(txs) > 5 and all(len(t["uniq_key"]) == 32 for t in txs)
    pending = doc["counts"]["pending"]
    assert pending
    for columns in (80, WIDE):
        s = shown(monkeypatch, columns, 0, "transactions", fate_store)
        for t in txs:
            row = row_starting(s, t["uniq_key"], f"{t['real_topic']}:{t['real_queue_id']}")
            if columns == WIDE:
                assert row[2:6] == [
                    t["state"].replace("_", " "),
                    str(len(t["halves"])),
                    str(t["check_times"]),
                    time_cell(t["first_store_timestamp"]),
                ]
        assert s.verdict() == f"verdict: no inconsistency, nothing stuck; {pending} pending"


def test_stuck_transaction_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, at = _broker_store(tmp_path / "s", pending_age_ms=20 * 60_000)
    s = shown(monkeypatch, 80, 1, "transactions", store)
    assert row_starting(s, "stuck", str(at["U3copy"]))
    assert s.verdict() == "verdict: 0 inconsistencies, 1 stuck transaction(s)"


def test_transactions_on_a_terminal_keep_the_verdict_in_view(tmp_path: Path) -> None:
    # More transactions than a terminal is shown: the list stops at TERMINAL_ROWS, says so, and
    # the verdict comes last, in colour.
    root = tmp_path / "store"
    layout = StoreLayout(profile=Profile.V4_9, commitlog_file_size=1 << 20, cq_file_size=6000)
    config = WorkloadConfig(
        messages=3000, topics=2, queues=2, body_size=20, seed=3, crash=False, fate=True
    )
    write_workload(root, config, layout)
    total = len(run_json("transactions", root, expect=0)["transactions"])
    assert total > TERMINAL_ROWS
    code, screen = run_in_terminal("transactions", str(root), columns=80)
    assert code == 0
    text = [line for line in screen if line]
    assert text[-1].startswith("verdict: no inconsistency")
    assert text[-2] == f"showing {TERMINAL_ROWS} of {total}, use -F json for all"


# --- timers -------------------------------------------------------------------------------------


def test_timers_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = TimerStore(tmp_path / "s")
    keys = [f"{i:032X}" for i in range(3)]
    s.add(keys[0], TIMER_T0 + 1000)  # before lastReadTimeMs, not delivered: overdue
    s.add(keys[1], TIMER_T0 + 2000)  # overdue
    s.add(keys[2], TIMER_T0 + 60_000)
    store = s.close(last_read=TIMER_T0 + 30_000)
    now = str(TIMER_T0 + 120_000)
    doc = run_json("timers", store, "--now", now, expect=1)
    late = [e for e in doc["entries"] if e["late"] == "overdue"]
    assert len(late) == 2
    (topic,) = doc["topics"]
    for columns in (80, WIDE):
        shown_ = shown(monkeypatch, columns, 1, "timers", store, "--now", now)
        for e in late:
            row = row_starting(shown_, str(e["timerlog_offset"]), "overdue")
            assert e["uniq_key"] in row
            if columns == WIDE:
                assert row[2:] == [
                    e["real_topic"],
                    e["uniq_key"],
                    time_cell(e["slot_timestamp"]),
                    time_cell(e["fire_timestamp"]),
                ]
        row = row_starting(shown_, "Orders", str(topic["pending"]), str(topic["overdue"]))
        assert time_cell(topic["next_fire_timestamp"]) in row  # whole, over two lines
        assert shown_.verdict() == "verdict: 2 overdue, 0 skipped by the restart, 0 finding(s)"


# --- colour -------------------------------------------------------------------------------------


def test_verdict_and_findings_are_coloured_on_a_terminal_only(
    fate_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    assert "\x1b" not in run("groups", fate_store, "-F", "table").stdout
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    coloured = run("groups", fate_store, "-F", "table").stdout
    assert "\x1b[1;31mverdict: " in coloured  # flagged: bold red
    assert "\x1b[1;31mOFFSET_OVERFLOW_BADLY -> " in coloured  # the moved pull
    monkeypatch.setenv("NO_COLOR", "1")
    plain = run("groups", fate_store, "-F", "table").stdout
    assert "31m" not in plain and "verdict: " in plain
