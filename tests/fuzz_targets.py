"""Fuzz targets for every decoder in ``rmqinspect/format``: one home for the invariants that the
bounded hypothesis run in ``make test`` (``tests/test_fuzz_decoders.py``) and the long atheris
run (``fuzz/fuzz_codecs.py``, ``make fuzz``) both check.

A target takes raw bytes: the first bytes choose options and positions, the rest is the input.
It returns normally when the decoder behaved: it raised nothing but the errors it documents, its
loops ended, and its answer is consistent with the definition it must agree with (the broker's
record check, the lenient JSON reader, the property parser). Anything else raises.
"""

from __future__ import annotations

import contextlib
import re
import struct
import tempfile
from collections.abc import Callable
from datetime import UTC
from pathlib import Path

import numpy as np

from rmqinspect.errors import DecodeError
from rmqinspect.format import (
    checkpoint,
    columns,
    config,
    consumequeue,
    dledger,
    fastjson,
    ids,
    index,
    markers,
    names,
    pop,
    properties,
    scan,
)
from rmqinspect.format import commitlog as cl
from rmqinspect.format.batch import BatchDecodeError, decode_batch
from rmqinspect.format.index_build import IndexFileBuilder
from rmqinspect.format.javamath import INT_MAX, INT_MIN, java_parse_int, java_split
from rmqinspect.format.profile import Profile
from rmqinspect.synth.layout import StoreLayout
from rmqinspect.synth.writer import MessageSpec, StoreWriter

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "stores"


class Input:
    """Bytes consumed from the front: options first, then the payload."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def int(self, width: int) -> int:
        chunk = self.data[self.at : self.at + width]
        self.at += width
        return int.from_bytes(chunk.ljust(width, b"\0"), "big")

    def flag(self) -> bool:
        return bool(self.int(1) & 1)

    def rest(self) -> bytes:
        return self.data[self.at :]


def _options(inp: Input) -> cl.CheckOptions:
    bits = inp.int(1)
    return cl.CheckOptions(
        profile=(Profile.V4_9, Profile.V5_1, Profile.V5_3, Profile.V5_3)[bits & 3],
        check_crc=bool(bits & 4),
        read_body=bool(bits & 8),
        force_verify_prop_crc=bool(bits & 16),
        check_dup_info=bool(bits & 32),
        delay_levels=() if bits & 64 else cl.CheckOptions().delay_levels,
    )


# --- commitlog records ----------------------------------------------------------------------------


def commitlog_check(data: bytes) -> None:
    """``check_message`` and ``decode_message`` at any position of any buffer."""
    inp = Input(data)
    opts = _options(inp)
    pos = inp.int(2)
    buf = memoryview(inp.rest())
    pos = pos % (len(buf) + 1)
    r = cl.check_message(buf, pos, 1 << 20, opts)
    assert r.size == -1 or r.size >= 0
    if r.is_message:
        assert r.record is not None and r.size == r.store_size and pos + r.size <= len(buf)
    try:
        rec = cl.decode_message(buf, pos, 1 << 20, with_body=opts.read_body)
    except DecodeError:
        return
    assert rec.store_size >= cl.MIN_RECORD_SIZE and pos + rec.store_size <= len(buf)


def commitlog_scan(data: bytes) -> None:
    """``scan_file``'s runs agree with ``check_message`` record by record, its events move
    forward and cover the file, and ``resync`` only lands on what the check accepts."""
    inp = Input(data)
    opts = _options(inp)
    max_records = (1, 3, columns.RUN_RECORDS)[inp.int(1) % 3]
    policy = scan.WalkPolicy.BROKER if inp.flag() else scan.WalkPolicy.FORENSIC
    buf = memoryview(inp.rest())
    at = 0
    for event in scan.scan_file(buf, 0, 0, opts, policy=policy, max_records=max_records):
        if isinstance(event, scan.Skipped):
            assert at <= event.start < event.end <= len(buf)
            at = event.end
            continue
        assert event.start == at
        pos = event.start
        for i in range(len(event)):
            r = cl.check_message(buf, pos, 0, opts)
            assert r.is_message and int(event.columns.positions[i]) == pos
            assert event.columns.record(i, with_body=opts.read_body) == r.record
            pos += r.size
        assert event.end == pos <= len(buf)
        if event.stop is not None:
            assert event.stop == cl.check_message(buf, pos, 0, opts)
        at = pos
    nxt = scan.resync(buf, 0, len(buf), 0, opts)
    if nxt is not None:
        r = cl.check_message(buf, nxt, 0, opts)
        assert r.is_message or r.is_blank
    assert 0 <= scan.data_extent(buf, 0) <= len(buf)


def record_columns(data: bytes) -> None:
    """Columns of whatever the walk accepts: the per-record helpers agree with the record
    check's decoding, and the Arrow batch refuses only records that do not add up."""
    inp = Input(data)
    opts = _options(inp)
    buf = memoryview(inp.rest())
    walked = columns.walk(buf, 0, accept_v2=opts.profile.accepts_v2_magic)
    cols = columns.gather(buf, walked, 0)
    ids_, topics = cols.topic_ids()
    good = np.flatnonzero(cols.well_formed)
    for name in (properties.KEYS, properties.UNIQ_KEY, properties.TAGS):
        fast = cols.property_values(name, good)
        assert fast == [cols.properties(int(i)).get(name) for i in good], name
    crcs = cols.body_crcs()
    for i in good.tolist():
        assert topics[ids_[i]] == cols.topic_bytes(i)
        assert int(crcs[i]) == cl.body_crc(cols.body(i))
        cols.record(i)
    try:
        batch = decode_batch(cols)
    except BatchDecodeError:
        assert not cols.well_formed.all()
    else:
        assert batch.num_rows == len(cols)


def record_round_trip(data: bytes) -> None:
    """A record encoded from arbitrary field values is accepted by the check and decodes to
    those values."""
    from rmqinspect.format.encode import encode_message
    from rmqinspect.format.host import HostAddress

    inp = Input(data)
    length = 1 + inp.int(1) % 200
    topic = inp.data[inp.at : inp.at + length].decode("utf-8", "replace")
    inp.at += length
    v6 = inp.flag()
    host = HostAddress(bytes(16) if v6 else bytes(4), inp.int(2))
    props = properties.encode_properties(
        [("KEYS", "k"), ("TAGS", str(inp.int(2)))], trailing_separator=inp.flag()
    )
    body = inp.rest()[:5000]
    rec = encode_message(
        topic=topic,
        queue_id=inp.int(4) - (1 << 31),
        flag=0,
        queue_offset=inp.int(8) >> 1,
        physical_offset=0,
        sys_flag=0,
        born_timestamp=1,
        born_host=host,
        store_timestamp=2,
        store_host=host,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=body,
        properties=props.encode(),
        version=2 if len(topic.encode()) > 127 else 1,
    )
    r = cl.check_message(rec, 0, 0, cl.CheckOptions(profile=Profile.V5_3))
    assert r.is_message and r.record is not None
    assert r.record.topic == topic and r.record.body == body


def dledger_scan(data: bytes) -> None:
    """``scan_data_file`` over any bytes: its events move forward inside the buffer, every
    record it yields is one ``check_message`` accepts at the entry's body, and the properties
    text DLedger's checkpoint holds parses whatever it is."""
    inp = Input(data)
    opts = _options(inp)
    max_records = (1, 3, columns.RUN_RECORDS)[inp.int(1) % 3]
    policy = scan.WalkPolicy.BROKER if inp.flag() else scan.WalkPolicy.FORENSIC
    buf = memoryview(inp.rest())
    at = 0
    for event in dledger.scan_data_file(buf, 0, 0, opts, policy=policy, max_records=max_records):
        assert at <= event.start <= event.end <= len(buf)
        if isinstance(event, scan.Skipped):
            assert event.start < event.end
        else:
            for i in range(len(event)):
                pos = int(event.columns.positions[i])
                assert event.start + dledger.BODY_OFFSET <= pos < event.end
                assert cl.check_message(buf, pos, 0, opts).is_message
        at = event.end
    boundary = dledger.entry_boundary(buf, len(buf) // 2, 0)
    assert 0 <= boundary <= len(buf)
    with contextlib.suppress(UnicodeDecodeError):
        dledger.parse_properties_text(bytes(buf[:256]).decode())


# --- consume queue, index, checkpoint -----------------------------------------------------------


def consume_queue(data: bytes) -> None:
    inp = Input(data)
    pos = inp.int(2)
    buf = inp.rest()
    units = consumequeue.units_array(buf)
    assert 0 <= consumequeue.valid_prefix(units) <= len(units)
    for at in (pos % (len(buf) + 1), 0, max(0, len(buf) - 20)):
        try:
            unit = consumequeue.decode_unit(buf, at)
            consumequeue.tags_code_kind(unit.tags_code, cl.SCHEDULE_TOPIC)
        except DecodeError:
            pass
        with contextlib.suppress(DecodeError):
            consumequeue.decode_ext_unit(buf, at)


def _geometry(inp: Input) -> index.IndexGeometry:
    return index.IndexGeometry(1 + inp.int(1) % 64, 2 + inp.int(2) % 400)


def index_read(data: bytes) -> None:
    """Header, slots, entries, chains, queries and statistics of any bytes; every chain walk
    ends within indexCount steps and every query within max_num hits."""
    inp = Input(data)
    geometry = _geometry(inp)
    key = str(inp.int(2))
    buf = memoryview(inp.rest())
    try:
        header = index.IndexHeader.decode(buf)
    except DecodeError:
        return
    with contextlib.suppress(ValueError):
        index.IndexGeometry.infer(len(buf))
    count = header.loaded_index_count
    for slot in {0, geometry.slot_num - 1, geometry.slot_of(f"T#{key}")}:
        walk = index.walk_chain(buf, geometry, header, slot)
        steps = sum(1 for _ in walk)
        assert steps <= max(count, 1)
    hits = index.select_phy_offsets(buf, geometry, f"T#{key}", 5, 0, 1 << 62)
    assert len(hits) <= 5
    assert len(index.query_offsets([(header, buf)], geometry, "T#k", 64, 0, 1 << 62)) <= 64
    stats = index.slot_statistics(buf, geometry, header)
    assert 0 <= stats.entries < geometry.index_num and stats.used_slots <= geometry.slot_num


def index_build(data: bytes) -> None:
    """Continue any bytes as an index file, put keys into it: the file keeps its geometry."""
    inp = Input(data)
    geometry = _geometry(inp)
    keys = 1 + inp.int(1) % 40
    buf = inp.rest()
    try:
        builder = IndexFileBuilder.from_bytes(buf, geometry)
    except DecodeError:
        return
    take = min(keys, builder.room)
    if take:
        hashes = np.arange(take, dtype=np.int64) * 7919 % INT_MAX
        offsets = np.arange(take, dtype=np.int64) * 100
        builder.put(hashes, offsets, offsets + 1_700_000_000_000)
    assert len(builder.to_bytes()) == geometry.file_size


def checkpoint_file(data: bytes) -> None:
    try:
        cp = checkpoint.decode_checkpoint(data)
    except DecodeError:
        assert len(data) < checkpoint.CHECKPOINT_MIN_SIZE
        return
    cp.min_timestamp()
    cp.min_timestamp_index()
    assert cp.file_size == len(data)


def markers_and_names(data: bytes) -> None:
    markers.decode_abort(data)
    markers.decode_lock(data)
    text = data.decode("utf-8", "replace")
    start = names.parse_offset_name(text)
    assert start is None or (0 <= start < 1 << 63 and names.offset_file_name(start) == text)
    value = java_parse_int(text)
    assert value is None or INT_MIN <= value <= INT_MAX
    if re.fullmatch(r"[+-]?[0-9]{1,30}", text):  # Integer.parseInt on plain digits
        number = int(text)
        assert value == (number if INT_MIN <= number <= INT_MAX else None)
    java_split(text, "_")


# --- text formats -------------------------------------------------------------------------------


def fastjson_loads(data: bytes) -> None:
    """``loads`` raises only DecodeError (with an offset inside the document), and whatever the
    fast path reads, the lenient reader reads the same."""
    try:
        value = fastjson.loads(data)
    except DecodeError as err:
        assert err.offset is None or 0 <= err.offset <= len(data)
        return
    if len(data) <= fastjson.LENIENT_MAX_BYTES:
        assert value == fastjson._Reader(bytes(data)).document()
    for parse in (
        config.parse_consumer_offsets,
        config.parse_delay_offsets,
        config.parse_topics,
        config.parse_subscription_groups,
        config.parse_untyped,
    ):
        with contextlib.suppress(DecodeError):
            parse(value)


def property_text(data: bytes) -> None:
    """``property_value`` (one search, as dispatch uses it) agrees with the broker's parser."""
    text = data.decode("utf-8", "replace")
    parsed = properties.parse_properties(text)
    # Dispatch asks for ASCII names only (a replacement character is no name it looks up).
    for name in {"KEYS", "UNIQ_KEY", "TAGS", *(n for n in list(parsed)[:3] if n.isascii())}:
        assert properties.property_value(data, name) == parsed.get(name), name
    properties.index_key_values(parsed.get("UNIQ_KEY"), parsed.get("KEYS"))
    properties.delete_property(data, "KEYS")


def message_ids(data: bytes) -> None:
    inp = Input(data)
    reference = inp.int(8) - (1 << 63)
    text = inp.rest().decode("latin-1")
    for decode in (ids.decode_offset_msg_id, ids.decode_uniq_key, ids.id_readings):
        with contextlib.suppress(DecodeError):
            decode(text)
    uniq = ids.UniqKey(bytes(4), 1, 2, inp.int(4), 3)
    for fn in (ids.producer_time_ms, ids.nearly_time_ms):
        with contextlib.suppress(DecodeError):
            fn(uniq, reference, UTC)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def pop_bodies(data: bytes) -> None:
    """POP checkpoint and ack bodies raise only DecodeError; what decodes encodes back to the same
    record, and a checkpoint's offsets map back to their indexes."""
    with contextlib.suppress(DecodeError):
        ck = pop.decode_checkpoint(data)
        again = pop.decode_checkpoint(pop.encode_checkpoint(ck))
        # Java's UTF-8 writes an unpaired surrogate (a \ud800 escape read back) as "?".
        texts = (ck.topic, ck.group, ck.broker_name or "", ck.re_put_times or "")
        assert again == ck or not all(_utf8(t) for t in texts)
        diff = ck.queue_offset_diff
        for i in range(min(max(ck.num, 0), len(diff) if diff else 32, 32)):
            found = ck.index_of(ck.offset_at(i))
            assert found == i or (diff is not None and diff.index(diff[i]) == found), i
    for batch in (False, True):
        with contextlib.suppress(DecodeError):
            ack = pop.decode_ack(data, batch)
            back = pop.decode_ack(pop.encode_ack(ack), batch)
            texts = (ack.topic, ack.group, ack.broker_name or "")
            assert back == ack or not all(_utf8(t) for t in texts)
    pop.is_cancel(data)


TARGETS: dict[str, Callable[[bytes], None]] = {
    f.__name__: f
    for f in (
        commitlog_check,
        commitlog_scan,
        record_columns,
        record_round_trip,
        dledger_scan,
        consume_queue,
        index_read,
        index_build,
        checkpoint_file,
        markers_and_names,
        fastjson_loads,
        property_text,
        message_ids,
        pop_bodies,
    )
}


# --- seeds ----------------------------------------------------------------------------------------


def seeds(target: str) -> list[bytes]:
    """Real bytes for a target to start from (the option bytes in front are zeros)."""
    store = FIXTURES / "clean53_propcrc"
    first_log = sorted((store / "commitlog").iterdir())[0].read_bytes()
    cq = sorted((store / "consumequeue" / "TopicA" / "0").iterdir())[0].read_bytes()
    idx = sorted((store / "index").iterdir())[0].read_bytes()
    cfg = [p.read_bytes() for p in sorted((store / "config").iterdir())]
    by_target = {
        "dledger_scan": [bytes(3) + _dledger_data()[:8192]],
        "commitlog_check": [bytes(3) + first_log[:4096]],
        "commitlog_scan": [bytes(3) + first_log[:8192]],
        "record_columns": [bytes(1) + first_log[:8192]],
        "record_round_trip": [b"\x05TopicA" + bytes(20) + b"body"],
        "consume_queue": [bytes(2) + cq[:400]],
        "index_read": [struct.pack(">BH", 63, 398) + bytes(2) + idx],
        "index_build": [struct.pack(">BHB", 63, 398, 10) + idx],
        "checkpoint_file": [(store / "checkpoint").read_bytes()],
        "markers_and_names": [b"12345", b"00000000000000065536", b"-2147483648"],
        "fastjson_loads": cfg,
        "property_text": [b"KEYS\x01a b\x02TAGS\x01t\x02UNIQ_KEY\x01u"],
        "message_ids": [bytes(8) + b"0A01020300002A9F000000000000792E"],
        "pop_bodies": [
            b'{"so":1,"pt":1,"it":1,"n":1,"q":0,"t":"\\ud800","c":"g"}',
            b'{"bm":1,"bn":"broker-a","c":"g","d":[0,2],"it":20000,"n":2,"pt":1700000000000,'
            b'"q":1,"reviveTime":1700000020000,"ro":0,"so":5,"t":"TopicP"}',
            b'{"ao":7,"bn":"broker-a","c":"g","pt":1700000000000,"q":1,"so":5,"t":"TopicP"}',
            b'{"aol":[5,7],"so":5,"c":"g","t":"TopicP","q":1,"pt":1,"startOffset":4}',
        ],
    }
    return by_target[target]


def _dledger_data() -> bytes:
    """The first data file of a small DLedger store built by the writer."""
    layout = StoreLayout(commitlog_file_size=1 << 16, enable_dledger_commitlog=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        with StoreWriter(root, layout) as w:
            for n in range(40):
                w.put(MessageSpec("TopicA", f"body-{n}".encode(), queue_id=n % 2))
        return (root / "dledger-n0" / "data" / "00000000000000000000").read_bytes()
