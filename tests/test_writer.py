"""The store writer: records decode as the broker checks them, BLANK rolling, consume queues and
index files agree with the records, the broker's append-path rules, markers and checkpoint."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqinspect.format import fastjson
from rmqinspect.format import properties as props
from rmqinspect.format.checkpoint import decode_checkpoint
from rmqinspect.format.commitlog import (
    BLANK_MAGIC_CODE,
    MULTI_TAGS_FLAG,
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CheckOptions,
    MessageRecord,
    check_message,
    read_prop_crc,
)
from rmqinspect.format.config import parse_consumer_offsets, parse_topics
from rmqinspect.format.consumequeue import (
    PRE_BLANK_UNIT,
    decode_unit,
    units_array,
    valid_prefix,
)
from rmqinspect.format.encode import encode_message
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import decode_offset_msg_id
from rmqinspect.format.index import (
    IndexGeometry,
    IndexHeader,
    query_offsets,
)
from rmqinspect.format.javahash import (
    java_hash,
)
from rmqinspect.format.profile import Profile
from rmqinspect.synth.dispatch import utc_index_name
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import (
    MessageColumns,
    MessageSpec,
    StoreLayout,
    StoreWriter,
)
from tests.index_reference import ReferenceIndexService

SMALL = {"commitlog_file_size": 4096, "cq_file_size": 100, "index_slot_num": 7, "index_num": 9}
SMALL_GEOMETRY = IndexGeometry(SMALL["index_slot_num"], SMALL["index_num"])
V4 = HostAddress(bytes([10, 1, 2, 3]), 10911)
V6 = HostAddress(bytes(range(16)), 30911)


def layout(profile: Profile = Profile.V4_9, **overrides: object) -> StoreLayout:
    values: dict[str, object] = {"profile": profile, **SMALL, **overrides}
    return StoreLayout(**values)  # type: ignore[arg-type]


@dataclass
class Walked:
    records: list[MessageRecord]
    blanks: list[int]  # physical offsets of BLANK records


def walk(root: Path, profile: Profile, *, prop_crc: bool = False) -> Walked:
    """Check every record with the broker's own verdict and the file-layout invariants."""
    options = CheckOptions(profile=profile, force_verify_prop_crc=prop_crc)
    files = sorted((root / "commitlog").iterdir())
    out = Walked([], [])
    expected_start = None
    for path in files:
        data = path.read_bytes()
        start = int(path.name)
        assert expected_start is None or start == expected_start
        expected_start = start + len(data)
        pos = 0
        while pos < len(data):
            result = check_message(data, pos, start, options)
            if result.is_blank:
                assert result.store_size == len(data) - pos  # BLANK reaches the file end
                out.blanks.append(start + pos)
                break
            if not result.is_message:
                assert not any(data[pos:])  # only zeros after the last record
                assert path == files[-1]
                break
            assert result.record is not None
            assert result.record.physical_offset_field == start + pos
            assert len(data) - (pos + result.size) >= 8  # room for a BLANK always remains
            out.records.append(result.record)
            pos += result.size
    return out


def file_of(root: Path, record: MessageRecord) -> bytes:
    return (root / "commitlog" / f"{record.physical_offset_field // 4096 * 4096:020d}").read_bytes()


def cq_units(root: Path, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    units = []
    for path in sorted((root / "consumequeue" / topic / str(queue_id)).iterdir()):
        valid = units_array(path.read_bytes())
        units += valid[: valid_prefix(valid)].tolist()
    return units


def index_files(root: Path) -> list[tuple[IndexHeader, bytes]]:
    return [
        (IndexHeader.decode(data), data)
        for data in (p.read_bytes() for p in sorted((root / "index").iterdir()))
    ]


# --- hypothesis: arbitrary messages -------------------------------------------------------------

_SAFE_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)
_hosts = st.one_of(
    st.builds(HostAddress, st.binary(min_size=4, max_size=4), st.integers(0, 65535)),
    st.builds(HostAddress, st.binary(min_size=16, max_size=16), st.integers(0, 65535)),
)
_topics = st.sampled_from(["TopicA", "T", "%RETRY%g1", "主题", "TopicV2-" + "x" * 122, "Y" * 200])
_keys = st.lists(st.sampled_from(["k1", "K-2", "订单-3", "k1", ""]), max_size=4).map(" ".join)


@st.composite
def message_specs(draw: st.DrawFn) -> MessageSpec:
    user = draw(st.dictionaries(_SAFE_TEXT.filter(lambda s: " " not in s), _SAFE_TEXT, max_size=4))
    return MessageSpec(
        topic=draw(_topics),
        body=draw(st.binary(max_size=300)),
        queue_id=draw(st.integers(0, 3)),
        tags=draw(st.sampled_from([None, "TagA", "标签", ""])),
        keys=draw(st.one_of(st.none(), _keys)),
        uniq_key=draw(st.sampled_from([None, "0A0000010001AABBCCDD00000001FFFF"])),
        properties=user,
        delay_level=draw(st.sampled_from([0, 0, 0, 1, 18, 25])),
        sys_flag=draw(
            st.sampled_from(
                [
                    0,
                    0,
                    TRANSACTION_PREPARED_TYPE,
                    TRANSACTION_COMMIT_TYPE,
                    TRANSACTION_ROLLBACK_TYPE,
                    MULTI_TAGS_FLAG,
                ]
            )
        ),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        born_timestamp=draw(st.integers(0, 2**45)),
        store_timestamp=draw(st.integers(0, 2**45)),
        born_host=draw(_hosts),
        store_host=draw(_hosts),
        reconsume_times=draw(st.integers(0, 16)),
        prepared_transaction_offset=draw(st.integers(0, 2**40)),
    )


def expected_properties(spec: MessageSpec) -> dict[str, str]:
    """What the stored properties parse back to (empty values are dropped by the parser)."""
    pairs: dict[str, str] = {}
    if spec.tags:
        pairs[props.TAGS] = spec.tags
    if spec.keys:
        assert isinstance(spec.keys, str)
        pairs[props.KEYS] = spec.keys
    assert isinstance(spec.properties, dict)
    pairs.update(spec.properties)
    if spec.uniq_key:
        pairs[props.UNIQ_KEY] = spec.uniq_key
    if spec.delay_level:
        pairs[props.DELAY] = str(spec.delay_level)
    return {k: v for k, v in pairs.items() if v}


def is_delayed(spec: MessageSpec) -> bool:
    return spec.delay_level > 0 and spec.sys_flag & 0xC in (0, TRANSACTION_COMMIT_TYPE)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    specs=st.lists(message_specs(), min_size=1, max_size=25),
    profile=st.sampled_from(list(Profile)),
    prop_crc=st.booleans(),
)
def test_writer_then_decoder_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    specs: list[MessageSpec],
    profile: Profile,
    prop_crc: bool,
) -> None:
    prop_crc = prop_crc and profile is Profile.V5_3
    specs = [s for s in specs if profile.accepts_v2_magic or len(s.topic.encode()) <= 127]
    root = tmp_path_factory.mktemp("store") / "s"
    with StoreWriter(root, layout(profile, append_prop_crc=prop_crc)) as writer:
        results = [writer.put(s) for s in specs]
    walked = walk(root, profile, prop_crc=prop_crc)
    assert [r.physical_offset_field for r in walked.records] == [r.physical_offset for r in results]
    next_offsets: dict[tuple[str, int], int] = {}
    for spec, result, record in zip(specs, results, walked.records, strict=True):
        want = expected_properties(spec)
        topic, queue_id = spec.topic, spec.queue_id
        if is_delayed(spec):
            level = min(spec.delay_level, 18)
            want[props.DELAY] = str(level)
            want[props.REAL_TOPIC] = topic
            want[props.REAL_QID] = str(queue_id)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
        assert record.body_crc_ok
        if prop_crc:
            tail = read_prop_crc(
                file_of(root, record), record.physical_offset_field % 4096, record.store_size
            )
            assert tail is not None and tail.match
            want[props.CRC32] = tail.raw
        assert record.properties == want
        assert (record.topic, record.queue_id) == (topic, queue_id)
        assert (result.topic, result.queue_id) == (topic, queue_id)
        assert record.body == spec.body
        assert record.version == ("v2" if profile.accepts_v2_magic and len(topic) > 127 else "v1")
        assert (record.born_host, record.store_host) == (spec.born_host, spec.store_host)
        assert record.born_timestamp == spec.born_timestamp
        assert record.store_timestamp == spec.store_timestamp
        assert (record.flag, record.reconsume_times) == (spec.flag, spec.reconsume_times)
        assert record.prepared_transaction_offset == spec.prepared_transaction_offset
        assert record.sys_flag & ~0x30 == spec.sys_flag
        assert bool(record.sys_flag & 0x10) == spec.born_host.is_v6
        assert bool(record.sys_flag & 0x20) == spec.store_host.is_v6
        key = (topic, queue_id)
        if record.enters_consume_queue:
            assert record.queue_offset == next_offsets.get(key, 0)
            next_offsets[key] = record.queue_offset + 1
        else:
            assert record.queue_offset == 0
        trailing = record.properties_raw.endswith(b"\x02")
        assert trailing == (profile is Profile.V5_3 and bool(want))
    check_dispatch(root, profile, walked.records)


def check_dispatch(
    root: Path,
    profile: Profile,
    records: list[MessageRecord],
    geometry: IndexGeometry = SMALL_GEOMETRY,
) -> None:
    """Consume queues hold exactly the NOT/COMMIT records with the broker's tagsCode, and the
    index answers every key of every non-ROLLBACK record."""
    options = CheckOptions(profile=profile, check_crc=False, read_body=False)
    by_queue: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for rec in records:
        if rec.enters_consume_queue:
            code = check_message(
                file_of(root, rec), rec.physical_offset_field % 4096, 0, options
            ).tags_code
            by_queue.setdefault((rec.topic, rec.queue_id), []).append(
                (rec.physical_offset_field, rec.store_size, code)
            )
    for (topic, queue_id), units in by_queue.items():
        assert cq_units(root, topic, queue_id) == units
    queue_dirs = {(p.parent.name, int(p.name)) for p in (root / "consumequeue").glob("*/*")}
    assert queue_dirs == set(by_queue)
    files = index_files(root)
    for rec in records:
        if not rec.is_indexed:
            continue
        for key in rec.index_keys():
            hits = query_offsets(files, geometry, f"{rec.topic}#{key}", 64, 0, 2**63 - 1)
            assert rec.physical_offset_field in hits or len(hits) == 64


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    specs=st.lists(message_specs(), min_size=1, max_size=40),
    geometry=st.tuples(st.integers(1, 9), st.integers(2, 12)),
)
def test_index_matches_the_reference_put_key(
    tmp_path_factory: pytest.TempPathFactory,
    specs: list[MessageSpec],
    geometry: tuple[int, int],
) -> None:
    """The vectorised index build equals the reference (one ``IndexFile.putKey`` at a time)
    byte for byte, rollover, empty rolled files and file naming included."""
    specs = [s for s in specs if len(s.topic.encode()) <= 127]
    slots, entries = geometry
    root = tmp_path_factory.mktemp("store") / "s"
    names: list[tuple[int, int]] = []

    def namer(ts: int, seq: int) -> str:
        names.append((ts, seq))
        return f"{seq:017d}"

    store_layout = layout(Profile.V4_9, index_slot_num=slots, index_num=entries)
    with StoreWriter(root, store_layout, index_namer=namer) as writer:
        results = [writer.put(s) for s in specs]
    reference = ReferenceIndexService(IndexGeometry(slots, entries))
    records = walk(root, Profile.V4_9).records
    for record in records:
        reference.dispatch_keys(
            record.topic,
            record.physical_offset_field,
            record.store_timestamp,
            record.sys_flag,
            record.uniq_key,
            record.properties.get(props.KEYS),
        )
    assert [r.store_timestamp for r in results] == [r.store_timestamp for r in records]
    got = [p.read_bytes() for p in sorted((root / "index").iterdir())]
    assert got == [f.to_bytes() for f in reference.files]
    assert names == [(ts, n) for n, ts in enumerate(reference.triggers)]


def test_fast_encoder_matches_encode_message(tmp_path: Path) -> None:
    body = bytes(range(256)) * 3
    spec = MessageSpec(
        topic="TopicA",
        body=body,
        queue_id=2,
        properties=b"a\x01b\x02c\x01d",
        flag=7,
        born_timestamp=1,
        store_timestamp=2,
        born_host=V6,
        store_host=V4,
        reconsume_times=3,
        prepared_transaction_offset=99,
        sys_flag=TRANSACTION_COMMIT_TYPE,
    )
    for profile, crc in ((Profile.V4_9, False), (Profile.V5_3, True)):
        root = tmp_path / f"{profile}-{crc}"
        with StoreWriter(root, layout(profile, append_prop_crc=crc)) as writer:
            result = writer.put(spec)
        data = (root / "commitlog" / f"{0:020d}").read_bytes()
        assert data[: result.size] == encode_message(
            topic="TopicA",
            queue_id=2,
            flag=7,
            queue_offset=0,
            physical_offset=0,
            sys_flag=TRANSACTION_COMMIT_TYPE,
            born_timestamp=1,
            born_host=V6,
            store_timestamp=2,
            store_host=V4,
            reconsume_times=3,
            prepared_transaction_offset=99,
            body=body,
            properties=b"a\x01b\x02c\x01d",
            append_prop_crc=crc,
        )


# --- file rolling and consume queues ------------------------------------------------------------


def test_blank_and_roll_when_record_plus_eight_does_not_fit(tmp_path: Path) -> None:
    root = tmp_path / "s"
    spec = MessageSpec(topic="T", body=bytes(900), store_timestamp=1)
    with StoreWriter(root, layout()) as writer:
        results = [writer.put(spec) for _ in range(9)]
    size = results[0].size
    per_file = (4096 - 8) // size  # msgLen + 8 must fit
    assert [r.blank_offset for r in results].count(None) == 9 - 2
    assert results[per_file].physical_offset == 4096
    assert results[per_file].blank_offset == per_file * size
    blank = (root / "commitlog" / f"{0:020d}").read_bytes()[per_file * size :]
    assert struct.unpack_from(">ii", blank) == (4096 - per_file * size, BLANK_MAGIC_CODE)
    assert not any(blank[8:])
    assert sorted(p.name for p in (root / "commitlog").iterdir()) == [
        f"{n * 4096:020d}" for n in range(3)
    ]
    assert all(p.stat().st_size == 4096 for p in (root / "commitlog").iterdir())


def test_record_exactly_filling_minus_eight_stays(tmp_path: Path) -> None:
    root = tmp_path / "s"
    base = MessageSpec(topic="T", store_timestamp=1)
    with StoreWriter(root, layout()) as writer:
        overhead = writer.put(base).size
        filler = writer.put(MessageSpec(topic="T", body=bytes(4096 - 8 - 2 * overhead)))
    assert filler.blank_offset is None and filler.physical_offset == overhead
    assert filler.physical_offset + filler.size == 4096 - 8


def test_record_too_large_for_a_file_changes_nothing(tmp_path: Path) -> None:
    with StoreWriter(tmp_path / "s", layout()) as writer:
        with pytest.raises(ValueError, match="fit"):
            writer.put(MessageSpec(topic="T", body=bytes(4096)))
        assert writer.put(MessageSpec(topic="T")).queue_offset == 0
        assert writer.message_count == 1


def two_messages(**changes: object) -> MessageColumns:
    ints = np.array([0, 0], dtype=np.int64)
    values: dict[str, object] = {
        "topics": ["T"],
        "topic": ints,
        "queue_id": np.array([0, 1], dtype=np.int64),
        "properties": [b"KEYS\x01a b", b""],
        "tags": [None, None],
        "delay": [None, None],
        "keys": ["a", "b"],
        "key_owner": ints,
        "bodies": [b"x"],
        "body": ints,
        "hosts": [V4],
        "born_host": ints,
        "store_host": ints,
        "born_timestamp": ints + 5,
        "store_timestamp": ints + 5,
        "sys_flag": ints,
        "flag": ints,
        "reconsume_times": ints,
        "prepared_offset": ints,
        "dispatch": np.array([True, True]),
    }
    values.update(changes)
    return MessageColumns(**values)  # type: ignore[arg-type]


def test_put_columns(tmp_path: Path) -> None:
    with StoreWriter(tmp_path / "s", layout()) as writer:
        for bad, message in (
            ({"flag": np.zeros(3, dtype=np.int64)}, "column flag"),
            ({"key_owner": np.array([0])}, "key owners"),
            ({"key_owner": np.array([1, 0])}, "non-decreasing"),
            ({"dispatch": np.array([False, True])}, "dispatch stopped"),
        ):
            with pytest.raises(ValueError, match=message):
                writer.put_columns(two_messages(**bad))
        placed = writer.put_columns(two_messages())
        assert placed.queue_offset.tolist() == [0, 0]
        assert placed.physical_offset.tolist() == [0, placed.size[0]]
    records = walk(tmp_path / "s", Profile.V4_9).records
    assert [r.queue_id for r in records] == [0, 1]
    files = index_files(tmp_path / "s")
    assert query_offsets(files, SMALL_GEOMETRY, "T#b", 32, 0, 2**62) == [0]


def test_consume_queue_rolls_and_pre_blank_fill(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with StoreWriter(root, layout(cq_file_size=90)) as writer:  # rounded up to 100 = 5 units
        writer.set_queue_offset("T", 1, 7)
        results = [writer.put(MessageSpec(topic="T", queue_id=1, tags="TagA")) for _ in range(6)]
        with pytest.raises(ValueError, match="already has messages"):
            writer.set_queue_offset("T", 1, 0)
    assert [r.queue_offset for r in results] == list(range(7, 13))
    files = sorted((root / "consumequeue" / "T" / "1").iterdir())
    assert [p.name for p in files] == [f"{100:020d}", f"{200:020d}"]
    first = files[0].read_bytes()
    assert first[:40] == PRE_BLANK_UNIT * 2  # offsets 5 and 6 precede the first message
    units = [decode_unit(first, pos) for pos in range(40, 100, 20)]
    assert [u.phy_offset for u in units] == [r.physical_offset for r in results[:3]]
    assert {u.tags_code for u in units} == {java_hash("TagA")}
    second = files[1].read_bytes()
    assert decode_unit(second, 40).phy_offset == results[5].physical_offset
    assert not any(second[60:])


def test_transaction_types(tmp_path: Path) -> None:
    root = tmp_path / "s"
    kinds = [0, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_COMMIT_TYPE, 0]
    with StoreWriter(root, layout()) as writer:
        results = [
            writer.put(MessageSpec(topic="Tx", sys_flag=k, keys=f"key{i}", store_timestamp=5000))
            for i, k in enumerate(kinds)
        ]
    assert [r.queue_offset for r in results] == [0, 0, 0, 1, 2]
    phys = [r.physical_offset for r in results]
    assert [u[0] for u in cq_units(root, "Tx", 0)] == [phys[0], phys[3], phys[4]]
    files = index_files(root)
    geometry = IndexGeometry(7, 9)
    for i, phy in enumerate(phys):
        hits = query_offsets(files, geometry, f"Tx#key{i}", 32, 0, 2**62)
        assert (phy in hits) == (kinds[i] != TRANSACTION_ROLLBACK_TYPE)


def test_delay_rewrite_and_deliver_time_tags_code(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with StoreWriter(root, layout()) as writer:
        moved = writer.put(
            MessageSpec(topic="TopicB", queue_id=1, delay_level=25, store_timestamp=10_000)
        )
        prepared = writer.put(
            MessageSpec(topic="TopicB", delay_level=2, sys_flag=TRANSACTION_PREPARED_TYPE)
        )
    assert (moved.topic, moved.queue_id) == (SCHEDULE_TOPIC, 17)
    assert (prepared.topic, prepared.queue_id) == ("TopicB", 0)
    record = walk(root, Profile.V4_9).records[0]
    assert record.properties == {"DELAY": "18", "REAL_TOPIC": "TopicB", "REAL_QID": "1"}
    assert cq_units(root, SCHEDULE_TOPIC, 17) == [(0, moved.size, 10_000 + 7_200_000)]


def test_corpus_property_order_is_reproduced(conformance_dir: Path, tmp_path: Path) -> None:
    """Re-encoding each real record's properties as a map gives back the stored bytes."""
    from tests.test_writer_conformance import records

    raws = [r.properties_raw for r in records(conformance_dir / "stores" / "clean")]
    root = tmp_path / "s"
    with StoreWriter(root, layout(Profile.V4_9, commitlog_file_size=1 << 16)) as writer:
        for raw in raws:
            pairs = dict(p.split("\x01", 1) for p in raw.decode().split("\x02"))
            # PREPARED: a map with DELAY would otherwise be rewritten to the schedule topic.
            writer.put(MessageSpec(topic="T", properties=pairs, sys_flag=TRANSACTION_PREPARED_TYPE))
    assert [r.properties_raw for r in walk(root, Profile.V4_9).records] == raws


def test_property_values_with_separators_are_refused(tmp_path: Path) -> None:
    with StoreWriter(tmp_path / "s", layout()) as writer:
        with pytest.raises(ValueError, match="0x01 or 0x02"):
            writer.put(MessageSpec(topic="T", properties={"a": "x\x02y"}))
        with pytest.raises(ValueError, match="raw properties"):
            writer.put(MessageSpec(topic="T", properties=b"a\x01b", tags="T"))
        with pytest.raises(ValueError, match="not an integer"):
            writer.put(MessageSpec(topic="T", properties={"DELAY": "soon"}))


def test_topic_limits(tmp_path: Path) -> None:
    with (
        StoreWriter(tmp_path / "a", layout(Profile.V4_9)) as writer,
        pytest.raises(ValueError, match="V2"),
    ):
        writer.put(MessageSpec(topic="x" * 128))
    with StoreWriter(tmp_path / "b", layout(Profile.V5_1)) as writer:
        assert writer.put(MessageSpec(topic="x" * 128)).version == 2
        assert writer.put(MessageSpec(topic="x" * 127)).version == 1
    no_auto = layout(Profile.V5_1, auto_message_version_on_topic_len=False)
    with StoreWriter(tmp_path / "c", no_auto) as writer, pytest.raises(ValueError):
        writer.put(MessageSpec(topic="x" * 128))


# --- shutdown: checkpoint, markers, index files -----------------------------------------------


def test_clean_shutdown_files(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with StoreWriter(root, layout()) as writer:
        for ts in (1000, 2000, 3000):
            writer.put(MessageSpec(topic="T", uniq_key=f"U{ts}", store_timestamp=ts))
    assert (root / "lock").read_bytes() == b"lock"
    assert not (root / "abort").exists() and not (root / "abort.bak").exists()
    cp = decode_checkpoint((root / "checkpoint").read_bytes())
    assert (root / "checkpoint").stat().st_size == 4096
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp) == (3000, 3000)
    assert cp.index_msg_timestamp == 0  # no index file is full and flushed yet
    assert sorted(p.name for p in (root / "commitlog").iterdir()) == [f"{0:020d}"]
    assert {p.name for p in (root / "config").iterdir()} == {
        "consumerOffset.json",
        "consumerOffset.json.bak",
        "delayOffset.json",
        "delayOffset.json.bak",
        "topics.json",
        "subscriptionGroup.json",
    }
    topics = parse_topics(fastjson.loads((root / "config" / "topics.json").read_bytes()))
    assert topics.topic_config_table["T"].write_queue_nums == 1


def test_crash_leaves_abort_preallocated_file_and_lagging_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with StoreWriter(root, layout(Profile.V5_3), crash=True, flush_lag_ms=1500, pid=31337) as w:
        for i, ts in enumerate((1000, 2000, 3000, 4000)):
            w.put(MessageSpec(topic="T", keys=f"k{i}", store_timestamp=ts, dispatch=i < 2))
        with pytest.raises(ValueError, match="dispatch stopped"):
            w.put(MessageSpec(topic="T"))
    assert (root / "abort").read_bytes() == b"31337"
    assert (root / "abort.bak").read_bytes() == b""
    assert not (root / "compaction").exists()
    names = sorted(p.name for p in (root / "commitlog").iterdir())
    assert names == [f"{0:020d}", f"{4096:020d}"]
    assert not any((root / "commitlog" / names[1]).read_bytes())
    cp = decode_checkpoint((root / "checkpoint").read_bytes())
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp) == (2000, 2000)
    assert len(cq_units(root, "T", 0)) == 2


def test_profile_markers_after_clean_shutdown(tmp_path: Path) -> None:
    with StoreWriter(tmp_path / "v5", layout(Profile.V5_1)):
        pass
    assert (tmp_path / "v5" / "abort.bak").read_bytes() == b""
    position = tmp_path / "v5" / "compaction" / "position-checkpoint"
    assert position.read_text() == '{\n  "queueOffsetMap": {}\n}'
    with StoreWriter(tmp_path / "v4", layout(Profile.V4_9), crash=True):
        pass
    assert (tmp_path / "v4" / "abort").read_bytes() == b""
    assert list((tmp_path / "v4" / "commitlog").iterdir()) == []  # nothing to pre-allocate


def test_empty_rolled_index_file_header(tmp_path: Path) -> None:
    """A full file is replaced as soon as the next message is dispatched, keys or not. On a
    5.x clean shutdown IndexFile.shutdown() flushes its header (indexCount 1); 4.9 leaves the
    count at 0, and so does a crash."""
    for profile, crash, count in (
        (Profile.V4_9, False, 0),
        (Profile.V5_3, False, 1),
        (Profile.V5_3, True, 0),
    ):
        root = tmp_path / f"{profile}-{crash}"
        with StoreWriter(root, layout(profile, index_num=3), crash=crash) as writer:
            writer.put(MessageSpec(topic="T", keys="a b", store_timestamp=7000))
            writer.put(MessageSpec(topic="T", store_timestamp=9000))
        files = index_files(root)
        assert len(files) == 2
        assert files[0][0].index_count == 3
        header = files[1][0]
        assert (header.begin_timestamp, header.end_timestamp) == (7000, 7000)
        assert (header.begin_phy_offset, header.end_phy_offset) == (0, 0)
        assert header.index_count == count
        cp = decode_checkpoint((root / "checkpoint").read_bytes())
        assert cp.index_msg_timestamp == 7000


def test_index_file_names(tmp_path: Path) -> None:
    assert utc_index_name(1795239921847) == "20261121054521847"
    root = tmp_path / "s"
    with StoreWriter(root, layout(index_num=2)) as writer:
        for i in range(3):
            writer.put(MessageSpec(topic="T", keys=f"k{i}", store_timestamp=1795239921847))
    # One entry per file; same millisecond, so each later name moves 1 ms on.
    assert sorted(p.name for p in (root / "index").iterdir()) == [
        "20261121054521847",
        "20261121054521848",
        "20261121054521849",
    ]
    same = layout(index_num=2)
    with (
        pytest.raises(ValueError, match="does not sort after"),
        StoreWriter(tmp_path / "t", same, index_namer=lambda ts, n: "x") as w,
    ):
        w.put(MessageSpec(topic="T", keys="a"))
        w.put(MessageSpec(topic="T", keys="b"))


def test_refuses_a_non_empty_output_directory(tmp_path: Path) -> None:
    (tmp_path / "evidence").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        StoreWriter(tmp_path, layout())
    assert (tmp_path / "evidence").read_bytes() == b"x"
    StoreWriter(tmp_path / "new", layout()).close()


def test_consumer_offsets_are_written_in_the_given_order(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with StoreWriter(root, layout()) as writer:
        writer.set_consumer_offsets({"B@g": {1: 5, 0: 4}, "A@g": {0: 1}}, {"A@g": {0: 0}})
    text = (root / "config" / "consumerOffset.json").read_text()
    assert text.index('"B@g"') < text.index('"A@g"')
    bak = parse_consumer_offsets(
        fastjson.loads((root / "config" / "consumerOffset.json.bak").read_bytes())
    )
    assert bak.offset_table == {"A@g": {0: 0}}


# --- the batched paths ------------------------------------------------------------------------


def store_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    specs=st.lists(message_specs(), min_size=1, max_size=60),
    profile=st.sampled_from(list(Profile)),
    crash_at=st.integers(0, 70),
)
def test_put_many_writes_what_put_writes(
    tmp_path_factory: pytest.TempPathFactory,
    specs: list[MessageSpec],
    profile: Profile,
    crash_at: int,
) -> None:
    """One batch of many messages (rolls, several queues, dispatch stopping mid-batch) gives
    the same bytes as one message at a time."""
    specs = [s for s in specs if profile.accepts_v2_magic or len(s.topic.encode()) <= 127]
    for n, spec in enumerate(specs):
        spec.dispatch = n < crash_at
    roots = [tmp_path_factory.mktemp("store") / "s" for _ in range(2)]
    small = layout(profile, index_num=5)
    with StoreWriter(roots[0], small, crash=crash_at < len(specs)) as writer:
        for spec in specs:
            writer.put(spec)
    with StoreWriter(roots[1], small, crash=crash_at < len(specs)) as writer:
        assert writer.put_many(specs) == len(specs)
        assert writer.message_count == len(specs)
    assert store_files(roots[0]) == store_files(roots[1])


def test_workload_columns_agree_with_their_properties(tmp_path: Path) -> None:
    """The workload hands the writer tags, delays and keys next to the properties bytes; the
    consume queues and index built from them match what the records themselves say."""
    for profile in (Profile.V4_9, Profile.V5_3):
        root = tmp_path / str(profile)
        config = WorkloadConfig(messages=700, body_size=40, seed=3, burst=100)
        write_workload(root, config, layout(profile, index_num=50, index_slot_num=17))
        records = walk(root, profile).records
        assert len(records) == 700
        kinds = {r.transaction_type for r in records}
        assert kinds == {
            0,
            TRANSACTION_PREPARED_TYPE,
            TRANSACTION_COMMIT_TYPE,
            TRANSACTION_ROLLBACK_TYPE,
        }
        assert any(r.topic == SCHEDULE_TOPIC for r in records)
        assert any(r.born_host.is_v6 for r in records) and any(r.store_host.is_v6 for r in records)
        assert any(r.version == "v2" for r in records) == (profile is Profile.V5_3)
        retries = [r for r in records if r.topic.startswith("%RETRY%")]
        assert retries and all(1 <= r.reconsume_times <= 3 for r in retries)
        by_offset = {r.physical_offset_field: r for r in records}
        for retry in retries[len(retries) // 2 :]:
            origin = decode_offset_msg_id(retry.properties[props.ORIGIN_MESSAGE_ID])
            original = by_offset[origin.physical_offset]
            assert original.uniq_key == retry.uniq_key and original.keys == retry.keys
        commits = [r for r in records if r.transaction_type == TRANSACTION_COMMIT_TYPE]
        halves = {r.physical_offset_field for r in records if r.topic == "RMQ_SYS_TRANS_HALF_TOPIC"}
        assert {c.prepared_transaction_offset for c in commits[len(commits) // 2 :]} <= halves
        check_dispatch(root, profile, records, IndexGeometry(17, 50))
