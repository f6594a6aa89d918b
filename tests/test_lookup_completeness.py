"""``lookup`` answers which messages exist as ``messages`` does: on every damaged store the
project has (its fixtures, the real-broker corpora, each damage helper under each profile),
``lookup --scan`` by key and by time, and ``lookup --time`` through the consume queues, return
every intact message the ``messages`` walk lists with that key or in that window, and say what
they stepped over."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rmqinspect.analysis.lookup import KeyQuery, LookupResult, lookup_key, lookup_time
from rmqinspect.analysis.messages import MessageFilter, SkippedRange, one_by_one, stream_messages
from rmqinspect.cli.app import app
from rmqinspect.format import commitlog as cl
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store
from tests.conftest import (
    CONFORMANCE,
    CONFORMANCE5,
    CONFORMANCE_CONSUME,
    CONFORMANCE_DLEDGER,
    FIXTURES,
    SHARED,
    restore_trimmed_store,
)
from tests.damage_matrix import DAMAGES, PROFILES, damaged

LONG_MAX = 2**63 - 1


def _project_stores() -> list[Path]:
    found = sorted(p for p in (FIXTURES / "stores").iterdir() if p.is_dir())
    corpora = (CONFORMANCE, CONFORMANCE5, CONFORMANCE_DLEDGER, CONFORMANCE_CONSUME)
    for corpus in (*corpora, SHARED / "conformance-timer"):
        if (corpus / "stores").is_dir():
            found += sorted(p for p in (corpus / "stores").iterdir() if p.is_dir())
    return found


@dataclass(frozen=True, slots=True)
class Walk:
    """What ``messages`` lists of a store: its intact records and the ranges it skipped."""

    records: list[cl.MessageRecord]
    skipped: list[SkippedRange]


def _messages(store: Store) -> Walk:
    records: list[cl.MessageRecord] = []
    skipped: list[SkippedRange] = []
    for ev in one_by_one(stream_messages(store, MessageFilter())):
        if isinstance(ev, SkippedRange):
            skipped.append(ev)
        else:
            records.append(ev)
    return Walk(records, skipped)


def _positions(result: LookupResult) -> list[int]:
    return sorted(h.record.position for h in result.hits)


def _windows(walk: Walk, topic: str) -> Iterator[tuple[int, int]]:
    """The topic's whole time span, and a window around each skipped range: from the last
    message stored before it to the first stored after it (where damage hides answers)."""
    times = [r.store_timestamp for r in walk.records if r.topic == topic]
    yield min(times), max(times)
    for gap in walk.skipped:
        before = [r.store_timestamp for r in walk.records if r.position < gap.physical_offset]
        after = [r.store_timestamp for r in walk.records if r.position > gap.physical_offset]
        if before and after:
            yield max(before), min(after)


def _keyed(walk: Walk, topic: str) -> list[cl.MessageRecord]:
    """A few messages of the topic to look up by key: the first, the last, and the first after
    each skipped range."""
    mine = [r for r in walk.records if r.topic == topic and r.keys]
    if not mine:
        return []
    chosen = {mine[0].position: mine[0], mine[-1].position: mine[-1]}
    for gap in walk.skipped:
        after = next((r for r in mine if r.position > gap.physical_offset), None)
        if after is not None:
            chosen[after.position] = after
    return list(chosen.values())


def assert_lookups_complete(root: Path) -> int:
    """Every lookup mode that answers which messages exist finds what ``messages`` lists;
    returns the number of lookups compared."""
    compared = 0
    with Store.open(root) as store:
        walk = _messages(store)
        topics = sorted({r.topic for r in walk.records})
        queued = {qid.topic for qid in store.queue_dirs}
        for topic in topics:
            for begin, end in _windows(walk, topic):
                want = [
                    r
                    for r in walk.records
                    if r.topic == topic and begin <= r.store_timestamp <= end
                ]
                scanned = lookup_time(store, topic, begin, end, limit=None, scan=True)
                assert _positions(scanned) == sorted(r.position for r in want), (topic, begin)
                assert set(scanned.skipped) == set(walk.skipped)
                compared += 1
                if topic not in queued:
                    continue
                served = {
                    r.position
                    for r in want
                    if r.enters_consume_queue and QueueId(topic, r.queue_id) in store.queue_dirs
                }
                queues = lookup_time(store, topic, begin, end, limit=None)
                assert served <= set(_positions(queues)), (topic, begin, end)
                compared += 1
            for rec in _keyed(walk, topic):
                key = rec.keys[0]
                want_keys = sorted(
                    r.position
                    for r in walk.records
                    if r.topic == topic and key in r.keys and r.is_indexed
                )
                query = KeyQuery(key, (topic,), False, 64)
                result = lookup_key(store, query, scan=True)
                assert _positions(result) == want_keys, (topic, key)
                assert set(result.skipped) == set(walk.skipped)
                compared += 1
                if rec.uniq_key is not None and rec.is_indexed:
                    uniq = KeyQuery(rec.uniq_key, (topic,), True, 32)
                    found = lookup_key(store, uniq, scan=True)
                    assert rec.position in _positions(found), (topic, rec.uniq_key)
                    compared += 1
    return compared


@pytest.mark.parametrize(
    "root", _project_stores(), ids=lambda p: f"{p.parent.parent.name}/{p.name}"
)
def test_lookups_find_what_messages_lists_on_every_store(root: Path, tmp_path: Path) -> None:
    corpus = root.parent.parent
    if (corpus / "sizes" / f"{root.name}.json").exists():
        root = restore_trimmed_store(corpus, root.name, tmp_path / root.name)
    with Store.open(root) as store:
        if not store.commitlog.files:
            pytest.skip("no commitlog")
    assert assert_lookups_complete(root) > 0


@pytest.mark.parametrize("kind", sorted(DAMAGES))
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_lookups_find_what_messages_lists_after_each_damage(
    tmp_path_factory: pytest.TempPathFactory, profile: str, kind: str
) -> None:
    base = tmp_path_factory.getbasetemp() / "lookup-completeness"
    base.mkdir(exist_ok=True)
    root = tmp_path_factory.mktemp("damaged") / "store"
    damaged(base, profile, kind, root)
    assert assert_lookups_complete(root) > 0


# --- the cases of the report, on `make demo`'s store ---------------------------------------------

DEMO_WINDOW = "2025-01-01T00:00:21.7..2025-01-01T00:00:22"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make demo`'s store: a crash, and one zeroed block in the last data file that unit 165
    of TopicC/1 points into."""
    root = tmp_path_factory.mktemp("demo") / "store"
    args = ["--messages", "5000", "--topics", "3", "--queues", "4", "--crash", "--seed", "7"]
    made = CliRunner().invoke(app, ["synth", str(root), *args, "--damage", "zero-region"])
    assert made.exit_code == 0, made.output
    return root


def _cli(*args: str | Path, exit_code: int) -> tuple[Any, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == exit_code, result.stderr
    return json.loads(result.stdout), result.stderr


def _listed(root: Path, *filters: str) -> tuple[list[int], list[dict[str, Any]]]:
    """The physical offsets ``messages`` lists with ``filters``, and the ranges it skips."""
    doc, _ = _cli("messages", root, *filters, "--format", "json", exit_code=0)
    offsets = [m["physical_offset"] for m in doc if "skipped" not in m]
    return sorted(offsets), [m["skipped"] for m in doc if "skipped" in m]


def _found(doc: dict[str, Any]) -> list[int]:
    return sorted(m["physical_offset"] for m in doc["messages"])


def test_a_key_scan_finds_the_message_past_the_zeroed_block(demo: Path) -> None:
    listed, skipped = _listed(demo, "--topic", "TopicC")
    assert len(skipped) == 1
    doc, err = _cli(
        "lookup", demo, "--key", "KC-2501", "--topic", "TopicC", "--scan", "-F", "json", exit_code=0
    )
    assert doc["scanned"] is True
    (hit,) = doc["messages"]
    assert "KC-2501" in hit["properties"]["KEYS"].split(" ")
    assert (
        hit["physical_offset"] in listed and hit["physical_offset"] > skipped[0]["physical_offset"]
    )
    assert doc["skipped"] == skipped
    assert f"skipped {skipped[0]['length']} bytes" in err


def test_time_lookups_find_every_message_of_the_window(demo: Path) -> None:
    since, until = DEMO_WINDOW.split("..")
    listed, skipped = _listed(demo, "--topic", "TopicC", "--since", since, "--until", until)
    assert len(listed) == 37 and len(skipped) == 1
    scanned, _ = _cli(
        "lookup", demo, "--time", DEMO_WINDOW, "-t", "TopicC", "--scan", "-F", "json", exit_code=0
    )
    assert _found(scanned) == listed
    # Through the consume queues: unit 165 of TopicC/1 leads into the zeroed block, which the
    # binary search must not turn at (offset 164, stored inside the window, was left out).
    queued, err = _cli(
        "lookup", demo, "--time", DEMO_WINDOW, "-t", "TopicC", "-F", "json", exit_code=0
    )
    assert _found(queued) == listed
    assert any(m["queue_id"] == 1 and m["queue_offset"] == 164 for m in queued["messages"])
    assert "TopicC/1: queue offset 165 does not lead to a message" in err
    assert queued["skipped"] == skipped
