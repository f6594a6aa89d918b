"""The record scanner against ``check_message``, the definition of truth.

Logs are built by the store writer (5.3 layout, one with the property CRC appended); the
hypothesis tests flip bytes in them and require every record the scanner accepts, and the
verdict that stops it, to be exactly what ``check_message`` says at that position.
"""

from __future__ import annotations

import itertools
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqinspect.format import columns, encode, scan, speedups
from rmqinspect.format import commitlog as cl
from rmqinspect.format.host import HostAddress
from rmqinspect.format.profile import Profile
from rmqinspect.synth.layout import DEFAULT_BORN_HOST
from rmqinspect.synth.writer import MessageSpec, StoreLayout, StoreWriter

PROFILES = [Profile.V4_9, Profile.V5_1, Profile.V5_3]
CL_SIZE = 8 * 1024  # the writer rolls to a second file: the first ends in a BLANK
START = 3 * CL_SIZE  # the file's first physical offset
T0 = 1_790_000_000_000
V6 = HostAddress(bytes(range(16)), 10912)
SCHEDULE = cl.SCHEDULE_TOPIC


_BAD_DELAY = b"DELAY\x01?\x02TAGS\x01bad"  # the writer refuses it: "?" is patched in after


def _specs() -> list[MessageSpec]:
    specs = [
        MessageSpec(topic="TopicD", body=b"", keys="K", store_timestamp=T0),
        MessageSpec(topic="TopicA", body=b"delayed", delay_level=3, store_timestamp=T0 + 1),
        MessageSpec(topic="T" * 140, body=b"v2 when allowed", store_timestamp=T0 + 2),
        MessageSpec(topic=SCHEDULE, body=b"good", properties=b"DELAY\x012\x02TAGS\x01x"),
        MessageSpec(topic=SCHEDULE, body=b"bad", properties=_BAD_DELAY.replace(b"?", b"7")),
        MessageSpec(topic=SCHEDULE, body=b"twice", properties=b"DELAY\x011\x02DELAY\x01-3"),
        MessageSpec(topic="TopicB", body=b"dup", properties={"DUP_INFO": "1_2_3"}),
        MessageSpec(topic="TopicC", body=b"z" * 600, store_host=V6),
    ]
    specs += [
        MessageSpec(
            topic=f"Topic{'ABC'[i % 3]}",
            queue_id=i % 2,
            body=(f"body-{i}-" * (5 + i % 20)).encode(),
            tags=("TagA", "TagB", None)[i % 3],
            keys=f"K{i}",
            uniq_key=f"{i:032X}",
            store_timestamp=T0 + i,
            born_host=V6 if i % 7 == 3 else DEFAULT_BORN_HOST,
            properties={"DUP_INFO": "1_2"} if i % 5 else None,
        )
        for i in range(40)
    ]
    return specs


FIRST_REGULAR = 7  # index in _positions(): the bad-DELAY record is not among them


def _log(root: Path, prop_crc: bool) -> bytes:
    layout = StoreLayout(
        profile=Profile.V5_3,
        commitlog_file_size=CL_SIZE,
        commitlog_start_offset=START,
        append_prop_crc=prop_crc,
    )
    with StoreWriter(root, layout) as w:
        for s in _specs():
            w.put(s)
    log = (root / "commitlog" / f"{START:020d}").read_bytes()
    return log.replace(_BAD_DELAY.replace(b"?", b"7"), _BAD_DELAY)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, bytes]:
    base = tmp_path_factory.mktemp("scan")
    return {crc: _log(base / str(crc), crc) for crc in (False, True)}


def assert_agrees(
    buf: memoryview, opts: cl.CheckOptions, max_records: int, starts: list[int]
) -> int:
    """Walk ``buf`` with :func:`scan.check_run` and compare every step with ``check_message``;
    after a failure go on at the next of ``starts`` (the clean log's record starts: flipped
    bytes do not move records). Returns how many records were accepted."""
    pos = 0
    count = 0
    while True:
        run = scan.check_run(buf, pos, START, opts, max_records=max_records)
        assert run.start == pos
        cols = run.columns
        for i in range(len(run)):
            assert int(cols.positions[i]) == pos
            r = cl.check_message(buf, pos, START, opts)
            assert r.is_message and r.size == int(cols.store_size[i]), (pos, r.reason, r.detail)
            assert cols.record(i, with_body=opts.read_body) == r.record
            assert run.tags_code(i) == r.tags_code
            pos += r.size
            count += 1
        assert run.end == pos
        if run.stop is None:
            assert len(run) == max_records
            continue
        assert run.stop == cl.check_message(buf, pos, START, opts)
        assert not run.stop.is_message
        later = [p for p in starts if p > pos]
        if run.stop.is_blank or not later:
            return count
        pos = later[0]


@pytest.fixture(scope="module")
def starts(logs: dict[bool, bytes]) -> dict[bool, list[int]]:
    return {crc: _starts(log) for crc, log in logs.items()}


def _starts(log: bytes) -> list[int]:
    """Record starts of a clean log, by TOTALSIZE (the schedule record with a bad DELAY too)."""
    out = [0]
    while True:
        size, magic = struct.unpack_from(">ii", log, out[-1])
        if magic == cl.BLANK_MAGIC_CODE:
            return out
        out.append(out[-1] + size)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    flips=st.lists(
        st.tuples(st.integers(0, 60), st.integers(0, 1000), st.integers(1, 255)), max_size=4
    ),
    profile=st.sampled_from(PROFILES),
    check_crc=st.booleans(),
    read_body=st.booleans(),
    prop_crc=st.booleans(),
    force_verify_prop_crc=st.booleans(),
    check_dup_info=st.booleans(),
    max_records=st.sampled_from([1, 4, columns.RUN_RECORDS]),
)
def test_check_run_never_disagrees_with_check_message(
    logs: dict[bool, bytes],
    starts: dict[bool, list[int]],
    flips: list[tuple[int, int, int]],
    profile: Profile,
    check_crc: bool,
    read_body: bool,
    prop_crc: bool,
    force_verify_prop_crc: bool,
    check_dup_info: bool,
    max_records: int,
) -> None:
    data = bytearray(logs[prop_crc])
    records = starts[prop_crc]
    for record, offset, xor in flips:
        # Spread over the records, header and body alike (the BLANK and zeros after it too).
        at = records[record % len(records)]
        data[at + offset % (len(data) - at)] ^= xor
    opts = cl.CheckOptions(
        profile=profile,
        check_crc=check_crc,
        read_body=read_body,
        force_verify_prop_crc=force_verify_prop_crc,
        check_dup_info=check_dup_info,
    )
    assert_agrees(memoryview(bytes(data)), opts, max_records, starts[prop_crc])


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("prop_crc", [False, True])
def test_clean_logs_stop_where_the_broker_does(
    logs: dict[bool, bytes], starts: dict[bool, list[int]], profile: Profile, prop_crc: bool
) -> None:
    """Without flips the stops are the planted ones: the bad DELAY, the bad DUP_INFO, the V2
    record in 4.9, the property CRC a log without it lacks."""
    buf = memoryview(logs[prop_crc])
    every = len(starts[prop_crc]) - 1  # but the BLANK
    wrong = 1 + (profile is Profile.V4_9)  # the bad DELAY; V2 magic before 5.x
    for opts in (
        cl.CheckOptions(profile=profile),
        cl.CheckOptions(profile=profile, read_body=False, check_crc=False),
    ):
        assert assert_agrees(buf, opts, columns.RUN_RECORDS, starts[prop_crc]) == every - wrong
    # Only records written with the property CRC pass when it is enforced.
    opts = cl.CheckOptions(profile=profile, force_verify_prop_crc=True)
    accepted = assert_agrees(buf, opts, columns.RUN_RECORDS, starts[prop_crc])
    assert accepted == (every - wrong if prop_crc else 0)
    # Records without a two-part DUP_INFO fail when it is checked.
    opts = cl.CheckOptions(profile=profile, check_dup_info=True)
    assert 0 < assert_agrees(buf, opts, columns.RUN_RECORDS, starts[prop_crc]) < every - wrong


def test_the_fast_path_decides_clean_records_alone(
    logs: dict[bool, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On clean records ``check_message`` is asked only where the fast path must defer: the
    stop, and (without the C property parser, which parses as the check does and keeps the
    later DELAY) the schedule record with two DELAY entries."""
    calls: list[int] = []
    real = cl.check_message

    def counted(
        buf: bytes | memoryview, pos: int, file_start: int = 0, options: object = None
    ) -> cl.CheckResult:
        calls.append(pos)
        return real(buf, pos, file_start, options)  # type: ignore[arg-type]

    monkeypatch.setattr(cl, "check_message", counted)
    buf = memoryview(logs[True])
    for opts in (
        cl.CheckOptions(profile=Profile.V5_3),
        cl.CheckOptions(profile=Profile.V5_3, read_body=False, check_crc=False),
        cl.CheckOptions(profile=Profile.V5_3, force_verify_prop_crc=True),
    ):
        calls.clear()
        run = scan.check_run(buf, 0, START, opts)
        assert run.stop is not None and run.stop.reason is cl.CheckReason.PARSE_EXCEPTION
        assert "DELAY" in run.stop.detail
        assert calls == [run.end]
        calls.clear()
        after = scan.check_run(buf, run.end + run.stop.store_size, START, opts)  # type: ignore[operator]
        twice = int(after.columns.positions[0])
        assert after.columns.topic(0) == SCHEDULE
        if speedups.compiled():
            assert twice not in calls  # "-3", the DELAY the check reads, is an integer
        else:
            assert calls[0] == twice


def test_walk_follows_sizes_and_says_why_it_stopped() -> None:
    rec = encode.encode_message(
        topic="T", queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0,
        born_timestamp=0, born_host=V6, store_timestamp=0, store_host=V6, reconsume_times=0,
        prepared_transaction_offset=0, body=b"b", properties=b"",
    )  # fmt: skip
    w = columns.walk(rec * 2 + encode.encode_blank(8))
    assert (w.positions.tolist(), w.store_size.tolist()) == ([0, len(rec)], [len(rec)] * 2)
    assert (w.end, w.stop) == (2 * len(rec), columns.WalkStop.BLANK)
    assert columns.walk(rec + bytes(8)).stop is columns.WalkStop.BAD_MAGIC
    assert columns.walk(rec[:-1]).stop is columns.WalkStop.BAD_SIZE
    assert columns.walk(rec + rec[:50]).stop is columns.WalkStop.BAD_SIZE
    v2 = bytearray(rec)
    struct.pack_into(">i", v2, cl.MAGIC_POS, cl.MESSAGE_MAGIC_CODE_V2)
    assert len(columns.walk(bytes(v2), accept_v2=True)) == 1
    assert columns.walk(bytes(v2), accept_v2=False).stop is columns.WalkStop.BAD_MAGIC
    limited = columns.walk(rec * 3, max_records=2)
    assert (limited.stop, limited.end, len(limited)) == (columns.WalkStop.LIMIT, 2 * len(rec), 2)


def test_topic_ids_group_equal_topics_only(logs: dict[bool, bytes]) -> None:
    buf = memoryview(logs[False])
    run = scan.check_run(buf, 0, START, cl.CheckOptions(profile=Profile.V5_3))
    cols = run.columns
    ids, topics = cols.topic_ids()
    assert len(set(topics)) == len(topics)
    for i in range(len(cols)):
        assert topics[int(ids[i])] == cols.topic_bytes(i)
    mask = cols.topic_mask(["TopicA", "nothing"])
    assert [cols.topic(i) for i in np.flatnonzero(mask)] == ["TopicA"] * int(mask.sum())
    assert int(mask.sum()) == sum(cols.topic(i) == "TopicA" for i in range(len(cols)))


# --- resync, data extent, whole files ----------------------------------------------------------


def _positions(buf: memoryview) -> list[int]:
    opts = cl.CheckOptions(profile=Profile.V5_3, check_crc=False)
    out = []
    for ev in scan.scan_file(buf, START, 0, opts, policy=scan.WalkPolicy.FORENSIC):
        if isinstance(ev, scan.CheckedRun):
            out += ev.columns.positions.tolist()
    return out


def _blank(log: bytes) -> int:
    return log.rfind(struct.pack(">i", cl.BLANK_MAGIC_CODE)) - cl.MAGIC_POS


def test_resync_finds_the_next_own_record_past_damage(logs: dict[bool, bytes]) -> None:
    log = logs[False]
    positions = _positions(memoryview(log))
    opts = cl.CheckOptions(profile=Profile.V5_3)
    rec = log[positions[1] : positions[2]]
    k = next(i for i in range(FIRST_REGULAR, len(positions) - 1) if _gap(positions, i) > len(rec))
    victim, after = positions[k], positions[k + 1]
    damaged = bytearray(log)
    damaged[victim + 2 : victim + 40] = os.urandom(38)
    buf = memoryview(bytes(damaged))
    assert scan.resync(buf, victim, len(buf), START, opts) == after
    assert scan.resync(buf, victim, after + cl.MAGIC_POS, START, opts) is None
    # A copy of another record passes the check but names another position.
    stale = bytearray(log)
    stale[victim:after] = rec + bytes(after - victim - len(rec))
    sbuf = memoryview(bytes(stale))
    assert cl.check_message(sbuf, victim, START, opts).is_message
    assert scan.resync(sbuf, victim - 1, len(sbuf), START, opts) == after
    # The file's closing BLANK is found too; nothing lies past it.
    blank = _blank(log)
    assert blank > positions[-1]
    assert scan.resync(buf, positions[-1], len(buf), START, opts) == blank
    assert scan.resync(buf, blank, len(buf), START, opts) is None


def _gap(positions: list[int], i: int) -> int:
    return positions[i + 1] - positions[i]


def test_data_extent_measures_up_to_the_last_non_zero_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scan, "_EXTENT_STEP", 64)
    data = bytearray(1000)
    assert scan.data_extent(bytes(data), 0) == 0
    data[10] = 1
    assert scan.data_extent(bytes(data), 0) == 11
    assert scan.data_extent(bytes(data), 10) == 1
    assert scan.data_extent(bytes(data), 11) == 0
    data[999] = 7
    assert scan.data_extent(bytes(data), 5) == 995
    data[999] = 0
    data[700] = 3  # found in a later chunk than the one scanned first
    assert scan.data_extent(bytes(data), 0) == 701
    assert scan.data_extent(memoryview(bytes(data)), 1000) == 0


def _cover(events: list[scan.FileEvent]) -> list[tuple[int, int, str]]:
    out = []
    for ev in events:
        if isinstance(ev, scan.Skipped):
            out.append((ev.start, ev.end, "skipped"))
        elif len(ev):
            out.append((ev.start, ev.end, "run"))
    return out


def test_scan_file_skips_exactly_the_damaged_records(logs: dict[bool, bytes]) -> None:
    log = logs[False]
    p = _positions(memoryview(log))
    opts = cl.CheckOptions(profile=Profile.V5_3, check_crc=False)
    first = p[FIRST_REGULAR]
    damaged = bytearray(log)
    # Damage from record 12's TOTALSIZE into record 13's header, and the last record's magic.
    damaged[p[12] + 2 : p[13] + 20] = b"\xee" * (p[13] + 18 - p[12])
    last = p[-1]
    damaged[last + 4] ^= 0xFF
    buf = memoryview(bytes(damaged))
    events = list(scan.scan_file(buf, START, first, opts, policy=scan.WalkPolicy.FORENSIC))
    blank = _blank(log)
    assert _cover(events) == [
        (first, p[12], "run"),
        (p[12], p[14], "skipped"),
        (p[14], last, "run"),
        (last, blank, "skipped"),
    ]
    for before, ev in itertools.pairwise(events):
        if isinstance(ev, scan.Skipped):
            assert isinstance(before, scan.CheckedRun) and before.failed
            assert before.end == ev.start and before.stop == ev.result
            assert ev.result == cl.check_message(buf, ev.start, START, opts)
    end = events[-1]
    assert isinstance(end, scan.CheckedRun) and end.stop is not None and end.stop.is_blank
    # The broker's walk ends at the first damage: the failed run is its last event.
    broker = list(scan.scan_file(buf, START, first, opts, policy=scan.WalkPolicy.BROKER))
    assert _cover(broker) == [(first, p[12], "run")]
    last = broker[-1]
    assert isinstance(last, scan.CheckedRun) and last.failed and last.stop == events[1].result


def test_scan_file_ends_at_a_blank_or_a_zero_tail(logs: dict[bool, bytes]) -> None:
    log = logs[False]
    p = _positions(memoryview(log))
    opts = cl.CheckOptions(profile=Profile.V5_3, check_crc=False)
    walk = scan.scan_file(
        memoryview(log),
        START,
        p[FIRST_REGULAR],
        opts,
        max_records=7,
        policy=scan.WalkPolicy.FORENSIC,
    )
    events = list(walk)
    runs = [ev for ev in events if isinstance(ev, scan.CheckedRun)]
    assert runs == events and len(runs) > 2
    assert [r.stop for r in runs[:-1]] == [None] * (len(runs) - 1)
    assert runs[-1].stop is not None and runs[-1].stop.is_blank
    assert [r.start for r in runs[1:]] == [r.end for r in runs[:-1]]
    # The last file of a store ends in zeros: that is the end of the data, not damage.
    cut = p[20]
    tail = log[:cut] + bytes(len(log) - cut)
    events = list(
        scan.scan_file(
            memoryview(tail), START, p[FIRST_REGULAR], opts, policy=scan.WalkPolicy.FORENSIC
        )
    )
    assert len(events) == 1 and isinstance(events[0], scan.CheckedRun)
    assert events[0].end == cut and events[0].failed


@pytest.mark.parametrize(
    ("properties", "sure"),
    [
        (b"DELAY\x012", True),
        (b"TAGS\x01x\x02DELAY\x01-2147483648", False),  # ten digits: check_message decides
        (b"DELAY\x01+123456789\x02TAGS\x01x", True),
        (b"DELAY\x011\x02DELAY\x01abc", False),  # the later DELAY is the one parsed
        (b"DELAY\x01abc\x02DELAY\x015", True),
        (b"DELAY\x01+", False),
        (b"DELAY\x01\x02DELAY", True),  # empty values are dropped: no DELAY at all
        (b"XDELAY\x01abc", True),  # another name
        (b"DELAY\x01\xd9\xa3", False),  # an Arabic-Indic digit: Java parses it, unsure here
    ],
)
def test_schedule_records_the_fast_path_is_sure_of(properties: bytes, sure: bool) -> None:
    """A schedule-topic record is certain only where its DELAY (the one the check reads) is
    absent or a number Integer.parseInt takes (the C property parser is exact, the Python
    twin more cautious); whatever the fast path leaves, check_message decides."""
    record = encode.encode_message(
        topic=SCHEDULE, queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0,
        born_timestamp=0, born_host=V6, store_timestamp=0, store_host=V6, reconsume_times=0,
        prepared_transaction_offset=0, body=b"b", properties=properties,
    )  # fmt: skip
    opts = cl.CheckOptions(profile=Profile.V5_3)
    for buf in (record + bytes(16), record):  # at the buffer's very end the parser is unsure
        cols = columns.gather(buf, np.zeros(1, np.int64), 0)
        certain = bool(scan.certain_mask(cols, opts)[0])
        if speedups.compiled() and buf is not record:
            assert certain == sure
        assert sure or not certain
        if certain:
            assert cl.check_message(buf, 0, 0, opts).is_message
