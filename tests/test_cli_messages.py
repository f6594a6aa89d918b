"""``rmqinspect messages``: filters, body encodings and damaged records, on writer-built stores."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties_text
from rmqinspect.synth import damage
from rmqinspect.synth.writer import MessageSpec
from tests.cli_helpers import build_store, orders, run, run_json, run_jsonl
from tests.render_helpers import decode_body, run_in_terminal


def test_filters_by_topic_queue_and_limit(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(20) + orders(5, topic="Other", queues=1))
    docs = run_jsonl("messages", store, "--topic", "Orders", "--queue-id", "1", expect=0)
    assert [d["queue_offset"] for d in docs] == list(range(10))
    assert {(d["topic"], d["queue_id"]) for d in docs} == {("Orders", 1)}
    assert len(run_jsonl("messages", store, "--limit", "3", expect=0)) == 3
    others = run_jsonl("messages", store, "--topic", "Other", expect=0)
    assert [d["body"] for d in others] == [f"order {i}" for i in range(5)]


def test_physical_and_time_ranges(tmp_path: Path) -> None:
    specs = [
        MessageSpec(topic="T", body=f"m{i}".encode(), store_timestamp=1_700_000_000_000 + i * 1000)
        for i in range(10)
    ]
    store = build_store(tmp_path / "s", specs)
    docs = run_jsonl("messages", store, expect=0)
    third = docs[3]["physical_offset"]
    sixth = docs[6]["physical_offset"]
    ranged = run_jsonl("messages", store, "--from", str(third), "--to", str(sixth), expect=0)
    assert [d["body"] for d in ranged] == ["m3", "m4", "m5"]
    # A --from inside a record starts at the next record boundary.
    inside = run_jsonl("messages", store, "--from", str(third + 1), "--limit", "1", expect=0)
    assert inside[0]["body"] == "m4"
    timed = run_jsonl(
        "messages", store, "--since", "2023-11-14T22:13:22Z", "--until", "1700000004000", expect=0
    )
    assert [d["body"] for d in timed] == ["m2", "m3", "m4"]


def test_body_encodings_recover_the_exact_bytes(tmp_path: Path) -> None:
    raw = bytes(range(256))
    store = build_store(
        tmp_path / "s",
        [MessageSpec(topic="B", body=raw), MessageSpec(topic="B", body="é中".encode())],
    )
    for fmt in ("text", "hex", "base64"):
        docs = run_jsonl("messages", store, "--body", fmt, expect=0)
        assert decode_body(docs[0]["body_encoding"], docs[0]["body"]) == raw
        assert decode_body(docs[1]["body_encoding"], docs[1]["body"]) == "é中".encode()
    text = run_jsonl("messages", store, "--body", "text", expect=0)
    assert text[0]["body_encoding"] == "base64"  # not UTF-8: never lossy
    assert text[1] == text[1] | {"body_encoding": "text", "body": "é中"}
    none = run_jsonl("messages", store, "--body", "none", expect=0)
    assert none[0]["body"] is None and none[0]["body_encoding"] == "none"


def _split(stdout: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """JSON Lines of ``messages``: (message objects, skipped ranges)."""
    lines = [json.loads(line) for line in stdout.splitlines()]
    return [d for d in lines if "skipped" not in d], [d["skipped"] for d in lines if "skipped" in d]


def test_a_corrupt_record_is_reported_on_stderr_and_the_rest_still_listed(tmp_path: Path) -> None:
    specs = [MessageSpec(topic="T", body=b"y" * 30000) for _ in range(6)]
    store = build_store(tmp_path / "s", specs)
    docs = run_jsonl("messages", store, expect=0)
    victim = docs[0]["physical_offset"]
    first = sorted((store / "commitlog").iterdir())[0]
    data = bytearray(first.read_bytes())
    data[victim + 4 : victim + 8] = b"\0\0\0\0"  # wipe the magic code
    first.write_bytes(bytes(data))
    result = run("messages", store, "--format", "jsonl")
    assert result.exit_code == 0
    after, skipped = _split(result.stdout)
    assert victim not in {d["physical_offset"] for d in after}
    assert after == docs[1:]  # the walk resynchronises at the record after it, same file
    assert [(s["physical_offset"], s["length"]) for s in skipped] == [
        (victim, docs[1]["physical_offset"] - victim)
    ]
    assert f"byte {victim}" in result.stderr and "bad_magic" in result.stderr


def test_a_crc_mismatch_is_shown_not_hidden(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", [MessageSpec(topic="T", body=b"hello world")])
    doc = run_jsonl("messages", store, expect=0)[0]
    first = sorted((store / "commitlog").iterdir())[0]
    data = bytearray(first.read_bytes())
    data[data.index(b"hello world")] ^= 0xFF
    first.write_bytes(bytes(data))
    bad = run_jsonl("messages", store, expect=0)[0]
    assert bad["body_crc_ok"] is False and bad["body_crc"] == doc["body_crc"]


def test_json_is_an_array_and_tables_render(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(3))
    docs = run_json("messages", store, expect=0)
    assert isinstance(docs, list) and len(docs) == 3
    assert {"physical_offset", "msg_id", "uniq_key", "keys", "properties"} <= set(docs[0])
    table = run("messages", store, "--format", "table")
    assert table.exit_code == 0 and "ORDER-1" in table.stdout
    empty = run_json("messages", store, "--topic", "none", expect=1)  # nothing found, as in lookup
    assert empty == []


def test_time_filters_skip_whole_files_without_losing_messages(tmp_path: Path) -> None:
    specs = [
        MessageSpec(topic="T", body=bytes([i]) * 9000, store_timestamp=5_000_000 + i * 10)
        for i in range(40)
    ]
    store = build_store(tmp_path / "s", specs)
    assert len(list((store / "commitlog").iterdir())) >= 5
    everything = run_jsonl("messages", store, "--body", "none", expect=0)
    for since, until in ((5_000_095, 5_000_215), (5_000_000, 5_000_005), (5_000_385, 9_999_999)):
        want = [d for d in everything if since <= d["store_timestamp"] <= until]
        got = run_jsonl(
            "messages",
            store,
            "--body",
            "none",
            "--since",
            str(since),
            "--until",
            str(until),
            expect=0,
        )
        assert got == want and want


# --- resynchronising past damage ---------------------------------------------------------------


def _damaged_store(tmp_path: Path, n: int = 600) -> tuple[Path, list[dict[str, Any]]]:
    store = build_store(tmp_path / "s", orders(n))
    return store, run_jsonl("messages", store, "--body", "hex", expect=0)


def _file_of(store: Path, offset: int) -> tuple[str, int]:
    starts = sorted(int(p.name) for p in (store / "commitlog").iterdir())
    start = max(s for s in starts if s <= offset)
    return f"commitlog/{start:020d}", start  # relative to the store, as every report says


def _scribble(store: Path, at: int, seed: int, length: int = 64) -> None:
    noise = np.random.default_rng(seed).integers(0, 256, length, np.uint8).tobytes()
    damage.overwrite_region(store, at, noise)


def test_messages_list_every_message_but_the_scribbled_one(tmp_path: Path) -> None:
    store, docs = _damaged_store(tmp_path)
    assert len({_file_of(store, d["physical_offset"])[1] for d in docs}) > 1
    for k in (17, 250):  # records in the middle of different files
        offset = docs[k]["physical_offset"]
        _scribble(store, offset + cl.MAGIC_POS, seed=k)  # from the magic code on
    result = run("messages", store, "--format", "jsonl", "--body", "hex")
    listed, skipped = _split(result.stdout)
    assert listed == [d for i, d in enumerate(docs) if i not in (17, 250)]
    expected = []
    for k in (17, 250):
        path, start = _file_of(store, docs[k]["physical_offset"])
        expected.append(
            {
                "file": path,
                "file_position": docs[k]["physical_offset"] - start,
                "physical_offset": docs[k]["physical_offset"],
                "length": docs[k + 1]["physical_offset"] - docs[k]["physical_offset"],
                "reason": "bad_magic",
            }
        )
    assert [{k: v for k, v in s.items() if k != "detail"} for s in skipped] == expected
    # One stderr line per range: the file, where, how many bytes, why.
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2
    for line, want in zip(lines, expected, strict=True):
        assert (
            f"{want['file']}: byte {want['file_position']}: skipped {want['length']} bytes" in line
        )
        assert "bad_magic" in line
    # JSON keeps the array of message objects, with the ranges where they occur.
    array = run_json("messages", store, "--body", "hex", expect=0)
    assert [d for d in array if "skipped" not in d] == listed
    assert [d["skipped"] for d in array if "skipped" in d] == skipped


@pytest.mark.parametrize("seed", range(6))
def test_skipped_ranges_cover_exactly_the_damaged_records(tmp_path: Path, seed: int) -> None:
    """64 random bytes anywhere (across a record boundary too): every message they miss is
    listed unchanged, and every skipped range runs from a damaged record's start to the next
    record that is listed (or to the end of its file's records)."""
    store, docs = _damaged_store(tmp_path, 300)
    rng = np.random.default_rng(seed)
    k = int(rng.integers(5, len(docs) - 5))
    at = docs[k]["physical_offset"] + int(rng.integers(0, docs[k]["store_size"]))
    _scribble(store, at, seed)
    hit = {
        d["physical_offset"]
        for d in docs
        if d["physical_offset"] < at + 64 and at < d["physical_offset"] + d["store_size"]
    }
    listed, skipped = _split(run("messages", store, "--format", "jsonl", "--body", "hex").stdout)
    by_offset = {d["physical_offset"]: d for d in listed}
    assert [d for d in docs if d["physical_offset"] not in hit] == [
        d for d in listed if d["physical_offset"] not in hit
    ]
    assert set(by_offset) <= {d["physical_offset"] for d in docs}
    ends = {d["physical_offset"] + d["store_size"] for d in docs}
    for s in skipped:
        start, end = s["physical_offset"], s["physical_offset"] + s["length"]
        assert start in hit and start not in by_offset
        assert end in by_offset or (end in ends and end not in {d["physical_offset"] for d in docs})
        lost = [o for o in hit if start <= o < end]
        assert lost and not any(start <= o < end for o in by_offset)
    # Every damaged record is either still readable (damage in its body) or skipped.
    assert all(
        o in by_offset
        or any(s["physical_offset"] <= o < s["physical_offset"] + s["length"] for s in skipped)
        for o in hit
    )


def test_damage_in_a_files_last_record_skips_up_to_its_blank(tmp_path: Path) -> None:
    store, docs = _damaged_store(tmp_path)
    first_file = _file_of(store, docs[0]["physical_offset"])[1]
    last = max(
        i for i, d in enumerate(docs) if _file_of(store, d["physical_offset"])[1] == first_file
    )
    offset = docs[last]["physical_offset"]
    _scribble(store, offset + cl.MAGIC_POS, seed=3, length=8)
    listed, skipped = _split(run("messages", store, "--format", "jsonl", "--body", "hex").stdout)
    assert listed == docs[:last] + docs[last + 1 :]
    assert [(s["physical_offset"], s["length"]) for s in skipped] == [
        (offset, docs[last]["store_size"])  # the BLANK follows the record
    ]


def test_from_inside_a_record_starts_at_the_next_one_past_damage(tmp_path: Path) -> None:
    store, docs = _damaged_store(tmp_path)
    offset = docs[30]["physical_offset"]
    _scribble(store, offset + cl.MAGIC_POS, seed=5)
    for start, first in ((offset + 1, 31), (docs[33]["physical_offset"] + 7, 34), (offset, 31)):
        listed, skipped = _split(
            run("messages", store, "--from", str(start), "--limit", "2", "--format", "jsonl").stdout
        )
        assert [d["physical_offset"] for d in listed] == [
            docs[first]["physical_offset"],
            docs[first + 1]["physical_offset"],
        ]
        # Where --from lands there is no readable record: the walk starts at the next one.
        assert skipped == []


def test_table_on_a_terminal_leaves_no_stale_progress_bar(conformance_dir: Path) -> None:
    # The bar (stderr) is drawn while the table (stdout) is printed in batches on the same
    # terminal: printing must not leave a copy of the bar among or after the rows.
    store = conformance_dir / "stores" / "clean"
    code, screen = run_in_terminal("messages", str(store), "--body", "none")
    assert code == 0
    rows = [line for line in screen if re.match(r"│ +\d+ │", line)]
    assert len(rows) == 2000
    assert [line for line in screen if "scanning commitlog" in line] == []
    assert [line for line in screen if re.search(r"\d%", line)] == []


def test_reversed_ranges_are_usage_errors(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(3))
    for what, args in {
        "--since/--until": ["--since", "2024-05-01T10:05", "--until", "2024-05-01T10:00"],
        "--from/--to": ["--from", "500", "--to", "100"],
    }.items():
        result = run("messages", store, *args)
        assert result.exit_code == 2 and f"{what}: the start" in result.stderr, what
    # An empty range is no usage error: it finds nothing (exit 1).
    assert run_jsonl("messages", store, "--from", "100", "--to", "100", expect=1) == []


def _filter_store(tmp_path: Path) -> Path:
    """Messages whose tags, keys, UNIQ_KEY, properties and transaction state the filters
    select on; bodies name them."""
    tx = {
        "not": cl.TRANSACTION_NOT_TYPE,
        "prep": cl.TRANSACTION_PREPARED_TYPE,
        "commit": cl.TRANSACTION_COMMIT_TYPE,
        "rollback": cl.TRANSACTION_ROLLBACK_TYPE,
    }
    specs = [
        MessageSpec(topic="T", body=b"a", tags="TagA", keys="K1 K2", uniq_key="U1"),
        MessageSpec(topic="T", body=b"b", tags="TagB", keys=["K2", "K3"], uniq_key="U2"),
        MessageSpec(topic="T", body=b"zh", tags="标签", keys="订单 AK1", uniq_key="U3"),
        MessageSpec(topic="T", body=b"k1", keys="K1", properties={"color": "red"}),
        MessageSpec(topic="U", body=b"u", tags="TagA", keys="K1", properties={"color": "blue"}),
        # Raw properties: the last non-empty entry wins, an empty value is no entry.
        MessageSpec(
            topic="T", body=b"raw", properties=b"color\x01blue\x02color\x01red\x02TAGS\x01"
        ),
        MessageSpec(topic="T", body=b"keys-sp", properties=b"KEYS\x01 K1  K4 \x02"),
        *(
            MessageSpec(topic="X", body=name.encode(), tags="TagA", sys_flag=flag)
            for name, flag in tx.items()
        ),
    ]
    return build_store(tmp_path / "s", specs)


def _bodies(store: Path, *args: str, expect: int = 0) -> list[str]:
    return [d["body"] for d in run_jsonl("messages", store, *args, expect=expect)]


@pytest.mark.parametrize("entries", ["C", "joined text"])
def test_content_filters_select_the_records_placed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: str
) -> None:
    if entries == "joined text":  # PropertiesText's way without the C entry parser
        monkeypatch.setattr(properties_text, "property_entries", lambda *_: None)
    store = _filter_store(tmp_path)
    assert _bodies(store, "--tag", "TagA") == ["a", "u", "not", "prep", "commit", "rollback"]
    assert _bodies(store, "--tag", "标签") == ["zh"]
    assert _bodies(store, "--key", "K1") == ["a", "k1", "u", "keys-sp"]  # not AK1
    assert _bodies(store, "--key", "K2") == ["a", "b"]
    assert _bodies(store, "--key", "K4") == ["keys-sp"]
    assert _bodies(store, "--key", "订单") == ["zh"]
    assert _bodies(store, "--uniq-key", "U2") == ["b"]
    assert _bodies(store, "--property", "color=red") == ["k1", "raw"]
    assert _bodies(store, "--property", "color=blue") == ["u"]
    assert _bodies(store, "--property", "TAGS=TagB") == ["b"]
    assert _bodies(store, "--tx-type", "prepared") == ["prep"]
    assert _bodies(store, "--tx-type", "rollback") == ["rollback"]
    assert _bodies(store, "--tx-type", "commit") == ["commit"]
    assert _bodies(store, "--tx-type", "not", "--topic", "X") == ["not"]
    assert _bodies(store, "--sys-flag", str(cl.TRANSACTION_COMMIT_TYPE)) == ["commit", "rollback"]
    assert _bodies(store, "--sys-flag", "12", "--tag", "TagA") == ["rollback"]
    # Combined: every filter holds.
    assert _bodies(store, "--tag", "TagA", "--key", "K1") == ["a", "u"]
    assert _bodies(store, "--tag", "TagA", "--key", "K1", "--topic", "T") == ["a"]
    assert _bodies(store, "--key", "K1", "--property", "color=blue", "--property", "TAGS=TagA") == [
        "u"
    ]
    assert _bodies(store, "--tag", "TagA", "--tx-type", "commit", "--limit", "1") == ["commit"]


def test_a_filter_that_matches_nothing_exits_1_with_no_rows(tmp_path: Path) -> None:
    store = _filter_store(tmp_path)
    for args in (
        ("--tag", "Nope"),
        ("--key", "AK"),  # a key is matched whole
        ("--uniq-key", "U1", "--tag", "TagB"),
        ("--property", "color=green"),
        ("--property", "TAGS=TagA", "--topic", "none"),
        ("--topic", "none"),
    ):
        assert _bodies(store, *args, expect=1) == [], args
    result = run("messages", store, "--tag", "Nope")
    assert result.exit_code == 1 and "Nope" not in result.stdout
    assert len(_bodies(store)) == 11  # unfiltered: everything, exit 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--property", "color"), "NAME=VALUE"),
        (("--property", "=red"), "empty --property name"),
        (("--property", "color="), "empty --property value"),
        (("--property", "co\x01lor=red"), "separator"),
        (("--key", ""), "empty --key"),
        (("--key", "K1 K2"), "space"),
        (("--tag", ""), "empty --tag"),
        (("--tx-type", "half"), "prepared"),
        (("--sys-flag", "-4"), "--sys-flag"),
    ],
)
def test_filter_values_no_record_can_hold_are_usage_errors(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    store = build_store(tmp_path / "s", orders(2))
    result = run("messages", store, *args)
    assert result.exit_code == 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_filtered_walk_equals_filtering_the_unfiltered_output(tmp_path: Path) -> None:
    store = _filter_store(tmp_path)
    everything = run_jsonl("messages", store, expect=0)
    cases: list[tuple[tuple[str, ...], Any]] = [
        (("--tag", "TagA"), lambda d: d["tags"] == "TagA"),
        (("--key", "K1"), lambda d: "K1" in d["keys"]),
        (("--uniq-key", "U3"), lambda d: d["uniq_key"] == "U3"),
        (("--property", "color=red"), lambda d: d["properties"].get("color") == "red"),
        (("--tx-type", "rollback"), lambda d: d["transaction"] == "rollback"),
        (("--sys-flag", "4"), lambda d: d["sys_flag"] & 4 == 4),
        (
            ("--tag", "TagA", "--tx-type", "not"),
            lambda d: d["tags"] == "TagA" and d["transaction"] == "not",
        ),
    ]
    for args, keep in cases:
        wanted = [d for d in everything if keep(d)]
        assert wanted, args  # the case selects something
        assert run_jsonl("messages", store, *args, expect=0) == wanted, args


def test_filters_on_a_real_broker_store(conformance_consume_dir: Path) -> None:
    """The 4.9.8 broker's own records (retries, delays, DLQ): each filter gives exactly the
    unfiltered messages that hold the value."""
    store = conformance_consume_dir / "stores" / "consume_clean"
    everything = run_jsonl("messages", store, "--body", "none", expect=0)
    first = everything[0]
    cases: list[tuple[tuple[str, ...], Any]] = [
        (("--tag", "TagB"), lambda d: d["tags"] == "TagB"),
        (("--key", "batch-0"), lambda d: "batch-0" in d["keys"]),
        (("--uniq-key", first["uniq_key"]), lambda d: d["uniq_key"] == first["uniq_key"]),
        (("--property", "seq=1"), lambda d: d["properties"].get("seq") == "1"),
        (
            ("--tag", "TagA", "--property", "CLUSTER=DefaultCluster", "--queue-id", "0"),
            lambda d: d["tags"] == "TagA" and d["queue_id"] == 0,
        ),
    ]
    for args, keep in cases:
        wanted = [d for d in everything if keep(d)]
        assert wanted, args
        assert run_jsonl("messages", store, "--body", "none", *args, expect=0) == wanted, args
