"""Every check id of verify fires: one recipe per check breaks a copy of an undamaged store in
exactly the way the check is about, and the finding names the right place."""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from rmqinspect.analysis.verify import CHECKS, Finding, VerifyOptions, verify_store
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.format.consumequeue import CQ_STORE_UNIT_SIZE, decode_unit, encode_unit
from rmqinspect.format.index import INDEX_HEADER_SIZE, IndexGeometry, IndexHeader
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.synth.writer import MessageSpec, PutResult, StoreLayout, StoreWriter
from tests.batch_helpers import batch_store, queue_file, set_base, set_batch_size
from tests.conftest import FIXTURES
from tests.damage_matrix import Record, records
from tests.timer_helpers import T0, hostile_timer_store

STORES = FIXTURES / "stores"
FILE = 64 * 1024
GEOMETRY = IndexGeometry(64, 400)
CLEAN = STORES / "clean49"


def patch(path: Path, position: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, position)
    finally:
        os.close(fd)


def commitlog(root: Path, offset: int) -> tuple[Path, int]:
    """The file holding a physical offset, and the position in it."""
    start = offset - offset % FILE
    return root / "commitlog" / f"{start:020d}", offset - start


def patch_record(root: Path, rec: Record, at: int, data: bytes) -> None:
    path, pos = commitlog(root, rec.offset)
    patch(path, pos + at, data)


def cq_file(root: Path, topic: str = "TopicA", queue_id: int = 0) -> Path:
    return root / "consumequeue" / topic / str(queue_id) / f"{0:020d}"


def first_index(root: Path) -> Path:
    return sorted((root / "index").iterdir())[0]


def write_json(root: Path, name: str, text: str) -> None:
    (root / "config" / name).write_text(text, encoding="utf-8")


def _schedule_record(root: Path) -> Record:
    return next(r for r in records(root) if cl.SCHEDULE_TOPIC.encode() in r.data)


# --- recipes: (check, store to copy, how to break it, what the finding must name) ----------------

Recipe = Callable[[Path], None]


def _gap(root: Path) -> None:
    src = root / "commitlog" / f"{FILE:020d}"
    src.rename(root / "commitlog" / f"{2 * FILE:020d}")


def _bad_blank(root: Path) -> None:
    recs = [r for r in records(root) if r.offset < FILE]
    path, pos = commitlog(root, recs[-1].end)
    patch(path, pos, struct.pack(">i", 16))


def _timestamp(root: Path) -> None:
    recs = records(root)
    patch_record(root, recs[20], cl.store_timestamp_pos(0), struct.pack(">q", 1000))


def _trailing(root: Path) -> None:
    last = records(root)[-1]
    path, pos = commitlog(root, last.end)
    patch(path, pos, b"\x11" * 64)


def _delay(root: Path) -> None:
    rec = _schedule_record(root)
    at = rec.data.index(b"DELAY\x01") + len("DELAY\x01")
    patch_record(root, rec, at, b"x")


def _zero_unit(root: Path) -> None:
    patch(cq_file(root), 5 * CQ_STORE_UNIT_SIZE, bytes(CQ_STORE_UNIT_SIZE))


def _unit(root: Path, n: int, change: Callable[[int, int, int], tuple[int, int, int]]) -> None:
    path = cq_file(root)
    u = decode_unit(path.read_bytes(), n * CQ_STORE_UNIT_SIZE)
    patch(path, n * CQ_STORE_UNIT_SIZE, encode_unit(*change(u.phy_offset, u.size, u.tags_code)))


def _other_queue(root: Path) -> None:
    other = decode_unit(cq_file(root, "TopicB", 0).read_bytes(), 0)
    _unit(root, 3, lambda _p, _s, t: (other.phy_offset, other.size, t))


def _record_queue_offset(root: Path) -> None:
    u = decode_unit(cq_file(root).read_bytes(), 3 * CQ_STORE_UNIT_SIZE)
    rec = next(r for r in records(root) if r.offset == u.phy_offset)
    patch_record(root, rec, cl.QUEUEOFFSET_POS, struct.pack(">q", 999))


def _entry(root: Path, n: int, field_at: int, fmt: str, value: int) -> None:
    patch(first_index(root), GEOMETRY.entry_position(n) + field_at, struct.pack(fmt, value))


def _slot(root: Path) -> None:
    path = first_index(root)
    data = path.read_bytes()
    used = next(s for s in range(64) if struct.unpack_from(">i", data, 40 + 4 * s)[0])
    patch(path, GEOMETRY.slot_position(used), struct.pack(">i", 9999))


def _header(root: Path) -> None:
    patch(first_index(root), 24, struct.pack(">q", 123))


def _geometry(root: Path) -> None:
    with open(first_index(root), "r+b") as fh:
        fh.truncate(5001)


def _mark_compressed(root: Path, rec: Record) -> None:
    """sysFlag bit 0 on a record whose body is plain text: no zlib stream."""
    at = cl.SYSFLAG_POS + 3  # the flag's low byte (big-endian)
    patch_record(root, rec, at, bytes([rec.data[at] | cl.COMPRESSED_FLAG]))


def _layout(cq_file_size: int) -> StoreLayout:
    return StoreLayout(
        commitlog_file_size=FILE, cq_file_size=cq_file_size, index_slot_num=64, index_num=400
    )


def _collision(root: Path) -> None:
    layout = StoreLayout(
        commitlog_file_size=FILE, cq_file_size=1000, index_slot_num=64, index_num=400
    )
    with StoreWriter(root, layout) as w:
        for key in ("Aa", "BB"):  # String.hashCode("Aa") == String.hashCode("BB")
            w.put(MessageSpec("TopicA", b"body", keys=key))


def _below(root: Path) -> None:
    (root / "commitlog" / f"{0:020d}").unlink()


def _checkpoint_ahead(root: Path) -> None:
    patch(root / "checkpoint", 0, struct.pack(">q", 2**60))


def _invalid_unit(root: Path) -> None:
    layout = StoreLayout(
        commitlog_file_size=FILE, cq_file_size=100, index_slot_num=64, index_num=400
    )
    with StoreWriter(root, layout) as w:
        for i in range(40):
            w.put(MessageSpec("TopicA", b"m%d" % i))
    # three units in a row: one finding names them all
    patch(cq_file(root), 2 * CQ_STORE_UNIT_SIZE, bytes(3 * CQ_STORE_UNIT_SIZE))


def _fresh(build: Recipe) -> Recipe:
    """A recipe that writes its own store instead of breaking a copy."""
    build.fresh = True  # type: ignore[attr-defined]
    return build


# --- DLedger: a writer-built store (64 KiB data files), broken at entry 10 ---------------------

LEDGER_ENTRIES = 300


def _ledger_store(root: Path) -> list[PutResult]:
    layout = replace(_layout(1000), enable_dledger_commitlog=True)
    with StoreWriter(root, layout) as w:
        return [
            w.put(MessageSpec(("TopicA", "TopicB")[i % 2], b"message %d " % i * (5 + i % 30)))
            for i in range(LEDGER_ENTRIES)
        ]


def ledger_entry(root: Path, put: PutResult) -> tuple[Path, int]:
    """The data file holding ``put``'s entry, and the entry's position in it."""
    at = put.physical_offset - dl.BODY_OFFSET
    return root / "dledger-n0" / "data" / f"{at - at % FILE:020d}", at % FILE


def ledger_index(root: Path) -> Path:
    return root / "dledger-n0" / "index" / f"{0:020d}"


def _ledger(change: Callable[[Path, list[PutResult]], object]) -> Recipe:
    def build(root: Path) -> None:
        change(root, _ledger_store(root))

    return _fresh(build)


def _entry_field(at: int, fmt: str, value: int) -> Recipe:
    """Entry 10's header field at byte ``at`` set to ``value``."""
    return _ledger(
        lambda r, puts: patch(*_at(ledger_entry(r, puts[10]), at), struct.pack(fmt, value))
    )


def _at(where: tuple[Path, int], at: int) -> tuple[Path, int]:
    return where[0], where[1] + at


def _unit_field(at: int, data: bytes, entry: int = 10) -> Recipe:
    return _ledger(lambda r, _p: patch(ledger_index(r), entry * dl.INDEX_UNIT_SIZE + at, data))


def _index_gap(root: Path) -> None:
    _ledger_store(root)
    with open(root / "dledger-n0" / "index" / f"{2 * dl.INDEX_FILE_SIZE:020d}", "wb") as fh:
        fh.truncate(dl.INDEX_FILE_SIZE)


def _unchain(root: Path) -> None:
    """The cycle's store with a sound timerlog (its units as written) and no timercheck."""
    (root / "config" / "timercheck").unlink()
    log = root / "timerlog" / f"{0:020d}"
    with open(log, "r+b") as fh:
        fh.seek(4)
        fh.write(struct.pack(">q", -1))  # unit 0 ends its slot's chain again


_TIMERLOG = f"timerlog/{0:020d}"
_WHEEL_SLOT = 32 * ((T0 + 60_000) // 1000 % 1_209_600)  # A and B's slot


RECIPES: dict[str, tuple[Path, Recipe]] = {
    "commitlog.file_name": (CLEAN, lambda r: (r / "commitlog" / "junk").write_bytes(b"")),
    "commitlog.file_gap": (CLEAN, _gap),
    "commitlog.file_size": (
        CLEAN,
        lambda r: os.truncate(r / "commitlog" / f"{FILE:020d}", FILE // 2),
    ),
    "commitlog.magic": (CLEAN, lambda r: patch_record(r, records(r)[10], 0, bytes(8))),
    "commitlog.size_bounds": (
        CLEAN,
        lambda r: patch_record(r, records(r)[10], 0, struct.pack(">i", 50)),
    ),
    "commitlog.body_crc": (CLEAN, lambda r: patch_record(r, records(r)[10], 88, b"\xff")),
    "commitlog.body_compression": (CLEAN, lambda r: _mark_compressed(r, records(r)[10])),
    "commitlog.prop_crc": (
        STORES / "clean53_propcrc",
        lambda r: patch_record(r, records(r)[10], cl.FLAG_POS, b"\x7f"),
    ),
    "commitlog.total_size": (
        CLEAN,
        lambda r: patch_record(r, records(r)[10], 0, struct.pack(">i", records(r)[10].size + 4)),
    ),
    "commitlog.parse": (CLEAN, _delay),
    "commitlog.physical_offset": (
        CLEAN,
        lambda r: patch_record(r, records(r)[10], cl.PHYSICALOFFSET_POS, struct.pack(">q", 7)),
    ),
    "commitlog.blank": (CLEAN, _bad_blank),
    "commitlog.timestamp_backwards": (CLEAN, _timestamp),
    "commitlog.trailing_bytes": (CLEAN, _trailing),
    "commitlog.intact_after_damage": (
        CLEAN,
        lambda r: patch_record(r, records(r)[10], 88, b"\xff"),
    ),
    "consumequeue.file_name": (CLEAN, lambda r: (cq_file(r).parent / "junk").write_bytes(b"")),
    "consumequeue.file_gap": (
        CLEAN,
        lambda r: (cq_file(r).parent / f"{2000:020d}").write_bytes(bytes(1000)),
    ),
    "consumequeue.file_size": (CLEAN, lambda r: os.truncate(cq_file(r), 500)),
    "consumequeue.invalid_unit": (CLEAN, _fresh(_invalid_unit)),
    "consumequeue.points_past_end": (CLEAN, lambda r: _unit(r, 2, lambda p, s, t: (10**9, s, t))),
    "consumequeue.no_record": (CLEAN, lambda r: _unit(r, 2, lambda p, s, t: (p + 1, s, t))),
    "consumequeue.size_mismatch": (CLEAN, lambda r: _unit(r, 2, lambda p, s, t: (p, s + 1, t))),
    "consumequeue.wrong_queue": (CLEAN, _other_queue),
    "consumequeue.queue_offset_mismatch": (CLEAN, _record_queue_offset),
    "consumequeue.tags_code": (CLEAN, lambda r: _unit(r, 2, lambda p, s, t: (p, s, t + 1))),
    "consumequeue.units_after_end": (CLEAN, _zero_unit),
    "consumequeue.missing_queue": (
        CLEAN,
        lambda r: shutil.rmtree(r / "consumequeue" / "TopicC" / "2"),
    ),
    "consumequeue.missing_unit": (CLEAN, _zero_unit),
    "consumequeue.lagging": (STORES / "crash49", lambda r: None),
    "index.geometry": (CLEAN, _geometry),
    "index.header": (CLEAN, _header),
    "index.slot": (CLEAN, _slot),
    "index.chain_link": (CLEAN, lambda r: _entry(r, 5, 16, ">i", 5000)),
    "index.chain_cycle": (CLEAN, lambda r: _entry(r, 5, 16, ">i", 5)),
    "index.points_past_end": (CLEAN, lambda r: _entry(r, 5, 4, ">q", 10**9)),
    "index.no_record": (CLEAN, lambda r: _entry(r, 5, 4, ">q", records(r)[3].offset + 1)),
    "index.key_hash": (CLEAN, lambda r: _entry(r, 5, 0, ">i", 12345)),
    "index.hash_collision": (CLEAN, _fresh(_collision)),
    "index.below_commitlog": (CLEAN, _below),
    "checkpoint.missing": (CLEAN, lambda r: (r / "checkpoint").unlink()),
    "checkpoint.size": (CLEAN, lambda r: os.truncate(r / "checkpoint", 24)),
    "checkpoint.ahead": (CLEAN, _checkpoint_ahead),
    "config.parse": (
        CLEAN,
        lambda r: (write_json(r, "topics.json", "{oops"), None),  # topics.json has no .bak here
    ),
    "config.bak_fallback": (CLEAN, lambda r: write_json(r, "consumerOffset.json", "{oops")),
    "config.tmp_left": (CLEAN, lambda r: write_json(r, "consumerOffset.json.tmp", "{}")),
    "offsets.above_max": (
        CLEAN,
        lambda r: write_json(r, "consumerOffset.json", '{"offsetTable":{"TopicA@g":{0:10000}}}'),
    ),
    "offsets.below_min": (
        STORES / "retention49",
        lambda r: write_json(r, "consumerOffset.json", '{"offsetTable":{"TopicA@g":{0:5}}}'),
    ),
    "offsets.no_queue": (
        CLEAN,
        lambda r: write_json(r, "consumerOffset.json", '{"offsetTable":{"TopicZ@g":{0:5}}}'),
    ),
    "dledger.entry_magic": (CLEAN, _entry_field(0, ">i", 7)),
    "dledger.entry_pos": (CLEAN, _entry_field(24, ">q", 12345)),
    "dledger.entry_size": (CLEAN, _entry_field(44, ">i", 17)),
    "dledger.entry_index": (CLEAN, _entry_field(8, ">q", 999)),
    "dledger.entry_term": (CLEAN, _entry_field(16, ">q", 5)),
    "dledger.body_size": (
        CLEAN,
        _ledger(
            lambda r, puts: patch(
                *_at(ledger_entry(r, puts[10]), dl.BODY_OFFSET),
                struct.pack(">i", puts[10].size - 4),
            )
        ),
    ),
    "dledger.index_unit": (CLEAN, _unit_field(24, struct.pack(">q", 3))),
    "dledger.index_missing": (CLEAN, _unit_field(0, bytes(dl.INDEX_UNIT_SIZE))),
    "dledger.index_past_end": (CLEAN, _unit_field(0, b"\x01", LEDGER_ENTRIES + 5)),
    "dledger.file_name": (
        CLEAN,
        _ledger(lambda r, _p: (r / "dledger-n0" / "index" / "junk").write_bytes(b"")),
    ),
    "dledger.file_gap": (CLEAN, _fresh(_index_gap)),
    "dledger.file_size": (CLEAN, _ledger(lambda r, _p: os.truncate(ledger_index(r), 64000))),
    "dledger.checkpoint": (
        CLEAN,
        _ledger(
            lambda r, _p: (r / "dledger-n0" / "checkpoint").write_bytes(
                dl.encode_checkpoint(99999, 99999)
            )
        ),
    ),
    "dledger.checkpoint_missing": (
        CLEAN,
        _ledger(lambda r, _p: (r / "dledger-n0" / "checkpoint").unlink()),
    ),
    "dledger.currterm": (
        CLEAN,
        _ledger(lambda r, _p: (r / "dledger-n0" / "currterm").write_bytes(b"currTerm=x\n")),
    ),
    "timer.log": (CLEAN, _fresh(lambda r: hostile_timer_store(r, "truncated_flush"))),
    "timer.chain": (CLEAN, _fresh(lambda r: hostile_timer_store(r, "cycle"))),
    "timer.slot": (CLEAN, _fresh(lambda r: hostile_timer_store(r, "slot_time_mismatch"))),
    "timer.points_past_end": (
        CLEAN,
        _fresh(lambda r: hostile_timer_store(r, "past_commitlog_end")),
    ),
    "timer.no_record": (CLEAN, _fresh(lambda r: hostile_timer_store(r, "not_timer_record"))),
    "timer.checkpoint": (
        CLEAN,
        _fresh(lambda r: (hostile_timer_store(r, "cycle"), _unchain(r))),
    ),
    "store.unsupported": (
        CLEAN,
        lambda r: (
            (r / "compaction" / "compactionLog" / "T" / "0").mkdir(parents=True)
            or (r / "compaction" / "compactionLog" / "T" / "0" / f"{0:020d}").write_bytes(bytes(16))
        ),
    ),
    # BatchConsumeQueue (tests/batch_helpers.py: Batched/0 and /1, 10 units a file)
    "batchcq.base_offset": (CLEAN, _fresh(lambda r: (batch_store(r), set_base(r, 0, 3, 0)))),
    "batchcq.batch_size": (
        CLEAN,
        _fresh(lambda r: (batch_store(r), set_batch_size(r, 1, 14, 3))),  # INNER_NUM 2
    ),
    "batchcq.torn_unit": (
        CLEAN,
        _fresh(lambda r: (batch_store(r), os.truncate(queue_file(r, 1, 1), 5 * 46 + 20))),
    ),
}


_BCQ0 = "batchconsumequeue/Batched/0/00000000000000000000"
_BCQ1_1 = "batchconsumequeue/Batched/1/00000000000000000460"


def test_every_check_has_a_recipe() -> None:
    assert set(RECIPES) == set(CHECKS) == set(FIRES)


Places = list[tuple[str, int | None]]

# Every finding each recipe's store gives, by check: where each fires (file, position in it), or
# for a long cascade only how often. The recipe's own check comes first; the others are the
# damage's plain consequences (a record cut short strands the intact ones after it and the unit
# that points at it), and nothing outside this table may fire.
FIRES: dict[str, dict[str, Places | int]] = {
    "checkpoint.ahead": {
        "checkpoint.ahead": [("checkpoint", 0)],
    },
    "checkpoint.missing": {
        "checkpoint.missing": [("checkpoint", None)],
    },
    "checkpoint.size": {
        "checkpoint.size": [("checkpoint", None)],
    },
    "commitlog.blank": {
        "commitlog.blank": [("commitlog/00000000000000000000", 65287)],
    },
    "commitlog.body_compression": {
        "commitlog.body_compression": [("commitlog/00000000000000000000", 3159)],
    },
    "commitlog.body_crc": {
        "commitlog.body_crc": [("commitlog/00000000000000000000", 3159)],
        "commitlog.intact_after_damage": [("commitlog/00000000000000000000", 3402)],
    },
    "commitlog.file_gap": {
        "commitlog.file_gap": [("commitlog", None)],
        "checkpoint.ahead": [("checkpoint", 0), ("checkpoint", 8)],
        "commitlog.physical_offset": 90,
        "consumequeue.no_record": 90,
        "index.no_record": 177,
    },
    "commitlog.file_name": {
        "commitlog.file_name": [("commitlog/junk", None)],
    },
    "commitlog.file_size": {
        "commitlog.file_size": [("commitlog/00000000000000065536", None)],
    },
    "commitlog.intact_after_damage": {
        "commitlog.intact_after_damage": [("commitlog/00000000000000000000", 3402)],
        "commitlog.body_crc": [("commitlog/00000000000000000000", 3159)],
    },
    "commitlog.magic": {
        "commitlog.magic": [("commitlog/00000000000000000000", 3159)],
        "commitlog.intact_after_damage": [("commitlog/00000000000000000000", 3402)],
        "consumequeue.no_record": [("consumequeue/TopicC/0/00000000000000000000", 0)],
    },
    "commitlog.parse": {
        "commitlog.parse": [("commitlog/00000000000000000000", 579)],
        "commitlog.intact_after_damage": [("commitlog/00000000000000000000", 935)],
    },
    "commitlog.physical_offset": {
        "commitlog.physical_offset": [("commitlog/00000000000000000000", 3159)],
    },
    "commitlog.prop_crc": {
        "commitlog.prop_crc": [("commitlog/00000000000000000000", 3369)],
    },
    "commitlog.size_bounds": {
        "commitlog.size_bounds": [("commitlog/00000000000000000000", 3159)],
        "commitlog.intact_after_damage": [("commitlog/00000000000000000000", 3402)],
        "consumequeue.size_mismatch": [("consumequeue/TopicC/0/00000000000000000000", 0)],
    },
    "commitlog.timestamp_backwards": {
        "commitlog.timestamp_backwards": [("commitlog/00000000000000000000", 5979)],
    },
    "commitlog.total_size": {
        "commitlog.total_size": [("commitlog/00000000000000000000", 3159)],
        "commitlog.intact_after_damage": [("commitlog/00000000000000000000", 3402)],
        "consumequeue.size_mismatch": [("consumequeue/TopicC/0/00000000000000000000", 0)],
    },
    "commitlog.trailing_bytes": {
        "commitlog.trailing_bytes": [("commitlog/00000000000000065536", 27909)],
    },
    "config.bak_fallback": {
        "config.bak_fallback": [("config/consumerOffset.json", None)],
    },
    "config.parse": {
        "config.parse": [("config/topics.json", None)],
    },
    "config.tmp_left": {
        "config.tmp_left": [("config/consumerOffset.json.tmp", None)],
    },
    "consumequeue.file_gap": {
        "consumequeue.file_gap": [("consumequeue/TopicA/0", None)],
    },
    "consumequeue.file_name": {
        "consumequeue.file_name": [("consumequeue/TopicA/0/junk", None)],
    },
    "consumequeue.file_size": {
        "consumequeue.file_size": [("consumequeue/TopicA/0/00000000000000000000", None)],
    },
    "consumequeue.invalid_unit": {
        "consumequeue.invalid_unit": [("consumequeue/TopicA/0/00000000000000000000", 40)],
        "consumequeue.missing_unit": [
            ("commitlog/00000000000000000000", 198),
            ("commitlog/00000000000000000000", 297),
            ("commitlog/00000000000000000000", 396),
        ],
    },
    "consumequeue.lagging": {
        "consumequeue.lagging": [
            ("consumequeue/%RETRY%groupX/0", None),
            ("consumequeue/SCHEDULE_TOPIC_XXXX/16", None),
            ("consumequeue/TopicA/0", None),
            ("consumequeue/TopicA/1", None),
            ("consumequeue/TopicA/2", None),
            ("consumequeue/TopicB/1", None),
            ("consumequeue/TopicB/2", None),
            ("consumequeue/TopicB/3", None),
            ("consumequeue/TopicC/0", None),
            ("consumequeue/TopicC/1", None),
            ("consumequeue/TopicC/2", None),
            ("consumequeue/TopicC/3", None),
            ("consumequeue/TopicTx/0", None),
        ],
    },
    "consumequeue.missing_queue": {
        "consumequeue.missing_queue": [("consumequeue/TopicC/2", None)],
        "offsets.no_queue": [("config/consumerOffset.json", None)],
    },
    "consumequeue.missing_unit": {
        "consumequeue.missing_unit": [("consumequeue/TopicA/0", None)],
        "consumequeue.units_after_end": [("consumequeue/TopicA/0/00000000000000000000", 120)],
        "offsets.above_max": [("config/consumerOffset.json", None)],
    },
    "consumequeue.no_record": {
        "consumequeue.no_record": [("consumequeue/TopicA/0/00000000000000000000", 40)],
        "consumequeue.missing_unit": [("commitlog/00000000000000000000", 10536)],
    },
    "consumequeue.points_past_end": {
        "consumequeue.points_past_end": [("consumequeue/TopicA/0/00000000000000000000", 40)],
        "consumequeue.missing_unit": [("commitlog/00000000000000000000", 10536)],
    },
    "consumequeue.queue_offset_mismatch": {
        "consumequeue.queue_offset_mismatch": [("consumequeue/TopicA/0/00000000000000000000", 60)],
        "consumequeue.missing_unit": [("consumequeue/TopicA/0", None)],
    },
    "consumequeue.size_mismatch": {
        "consumequeue.size_mismatch": [("consumequeue/TopicA/0/00000000000000000000", 40)],
    },
    "consumequeue.tags_code": {
        "consumequeue.tags_code": [("consumequeue/TopicA/0/00000000000000000000", 40)],
    },
    "consumequeue.units_after_end": {
        "consumequeue.units_after_end": [("consumequeue/TopicA/0/00000000000000000000", 120)],
        "consumequeue.missing_unit": [("consumequeue/TopicA/0", None)],
        "offsets.above_max": [("config/consumerOffset.json", None)],
    },
    "consumequeue.wrong_queue": {
        "consumequeue.wrong_queue": [("consumequeue/TopicA/0/00000000000000000000", 60)],
        "consumequeue.missing_unit": [("commitlog/00000000000000000000", 18129)],
    },
    "dledger.body_size": {
        "dledger.body_size": [("dledger-n0/data/00000000000000000000", 2400)],
        "commitlog.total_size": [("dledger-n0/data/00000000000000000000", 2448)],
        "consumequeue.size_mismatch": [("consumequeue/TopicA/0/00000000000000000000", 100)],
    },
    "dledger.checkpoint": {
        "dledger.checkpoint": [("dledger-n0/checkpoint", None)],
    },
    "dledger.checkpoint_missing": {
        "dledger.checkpoint_missing": [("dledger-n0/checkpoint", None)],
    },
    "dledger.currterm": {
        "dledger.currterm": [("dledger-n0/currterm", None)],
    },
    "dledger.entry_index": {
        "dledger.entry_index": [("dledger-n0/data/00000000000000000000", 2400)],
    },
    "dledger.entry_magic": {
        "dledger.entry_magic": [("dledger-n0/data/00000000000000000000", 2400)],
        "commitlog.intact_after_damage": [("dledger-n0/data/00000000000000000000", 2758)],
    },
    "dledger.entry_pos": {
        "dledger.entry_pos": [("dledger-n0/data/00000000000000000000", 2400)],
        "commitlog.intact_after_damage": [("dledger-n0/data/00000000000000000000", 2758)],
    },
    "dledger.entry_size": {
        "dledger.entry_size": [("dledger-n0/data/00000000000000000000", 2400)],
        "commitlog.intact_after_damage": [("dledger-n0/data/00000000000000000000", 2758)],
    },
    "dledger.entry_term": {
        "dledger.entry_term": [("dledger-n0/data/00000000000000000000", 2710)],
        "dledger.index_unit": [("dledger-n0/index/00000000000000000000", 320)],
    },
    "dledger.file_gap": {
        "dledger.file_gap": [("dledger-n0/index", None)],
    },
    "dledger.file_name": {
        "dledger.file_name": [("dledger-n0/index/junk", None)],
    },
    "dledger.file_size": {
        "dledger.file_size": [("dledger-n0/index/00000000000000000000", None)],
    },
    "dledger.index_missing": {
        "dledger.index_missing": [("dledger-n0/index/00000000000000000000", 320)],
    },
    "dledger.index_past_end": {
        "dledger.index_past_end": [("dledger-n0/index/00000000000000000000", 9760)],
    },
    "dledger.index_unit": {
        "dledger.index_unit": [("dledger-n0/index/00000000000000000000", 320)],
    },
    "index.below_commitlog": {
        "index.below_commitlog": [
            ("index/20260101000000001", 316),
            ("index/20260101000004798", 316),
        ],
        "consumequeue.no_record": 4,
        "offsets.below_min": 8,
    },
    "index.chain_cycle": {
        "index.chain_cycle": [("index/20260101000000001", 412)],
    },
    "index.chain_link": {
        "index.chain_link": [("index/20260101000000001", 412)],
    },
    "index.geometry": {
        "index.geometry": [("index/20260101000000001", None)],
    },
    "index.hash_collision": {
        "index.hash_collision": [("index/20250101000000000", None)],
    },
    "index.header": {
        "index.header": [("index/20260101000000001", 0)],
    },
    "index.key_hash": {
        "index.key_hash": [("index/20260101000000001", 396)],
        "index.chain_link": [("index/20260101000000001", 7192)],
    },
    "index.no_record": {
        "index.no_record": [("index/20260101000000001", 396)],
    },
    "index.points_past_end": {
        "index.points_past_end": [("index/20260101000000001", 396)],
    },
    "index.slot": {
        "index.slot": [("index/20260101000000001", 40)],
        "index.header": [("index/20260101000000001", 0)],
    },
    "offsets.above_max": {
        "offsets.above_max": [("config/consumerOffset.json", None)],
    },
    "offsets.below_min": {
        "offsets.below_min": [("config/consumerOffset.json", None)],
    },
    "offsets.no_queue": {
        "offsets.no_queue": [("config/consumerOffset.json", None)],
    },
    "store.unsupported": {
        "store.unsupported": [("compaction/compactionLog", None)],
    },
    "batchcq.base_offset": {
        # unit 3 claims offset 0 (backwards), so unit 4 skips from 3 to 8; the record of unit 3
        # is at offset 5, and offsets 0 and 5 no longer lead to the records written there
        "batchcq.base_offset": [(_BCQ0, 3 * 46), (_BCQ0, 4 * 46)],
        "consumequeue.queue_offset_mismatch": [(_BCQ0, 3 * 46)],
        "consumequeue.missing_unit": [("commitlog/00000000000000000000", None)] * 2,
    },
    "batchcq.batch_size": {
        "batchcq.batch_size": [(_BCQ1_1, 4 * 46)],
    },
    "batchcq.torn_unit": {
        "batchcq.torn_unit": [(_BCQ1_1, 5 * 46)],
        # shorter than the queue's other file: MappedFileQueue.load refuses it
        "consumequeue.file_size": [(_BCQ1_1, None)],
    },
    "timer.log": {
        "timer.log": [(_TIMERLOG, 156)],
    },
    "timer.chain": {
        "timer.chain": [("timerwheel", _WHEEL_SLOT)],
    },
    "timer.slot": {
        "timer.slot": [("timerwheel", _WHEEL_SLOT + 32)],
    },
    "timer.points_past_end": {
        "timer.points_past_end": [(_TIMERLOG, 104)],
    },
    "timer.no_record": {
        "timer.no_record": [(_TIMERLOG, 104)],
    },
    "timer.checkpoint": {
        "timer.checkpoint": [("config/timercheck", None)],
    },
}


def broken_store(root: Path, check: str) -> Path:
    """``check``'s recipe carried out at ``root``: a copy of its source store, broken, or a
    store its recipe builds broken (``_fresh``)."""
    source, recipe = RECIPES[check]
    if not getattr(recipe, "fresh", False):
        shutil.copytree(source, root)
    recipe(root)
    return root


def _findings(tmp_path: Path, check: str) -> list[Finding]:
    """Every finding of verify on ``check``'s broken store (the index geometry given, as the
    CLI's --index-slots/--index-entries would: the writer-built stores' files do not tell it)."""
    root = broken_store(tmp_path / "store", check)
    with Store.open(root, StoreOptions(index_slot_num=64, index_num=400)) as store:
        return verify_store(store, VerifyOptions()).findings


def _broken(tmp_path: Path, check: str) -> list[Finding]:
    return [f for f in _findings(tmp_path, check) if f.check == check]


@pytest.mark.parametrize("check", sorted(RECIPES))
def test_check_fires_where_the_damage_is_and_nothing_else_does(tmp_path: Path, check: str) -> None:
    findings = _findings(tmp_path, check)
    found = [f for f in findings if f.check == check]
    assert found, f"{check} did not fire"
    assert all(f.severity is CHECKS[check].severity for f in found)
    assert all(f.detail for f in found)
    fired: dict[str, Places] = {}
    for f in findings:
        fired.setdefault(f.check, []).append((f.file, f.file_position))
    expected = FIRES[check]
    assert sorted(fired) == sorted(expected), [(f.check, f.file, f.detail) for f in findings]
    for name, places in expected.items():
        got = fired[name]
        if isinstance(places, int):
            assert len(got) == places, name
        else:
            assert sorted(got, key=repr) == sorted(places, key=repr), name


def test_findings_name_the_damaged_record(tmp_path: Path) -> None:
    rec = records(CLEAN)[10]
    (f,) = _broken(tmp_path, "commitlog.body_crc")
    path, pos = commitlog(CLEAN, rec.offset)
    assert (f.physical_offset, f.file, f.file_position) == (
        rec.offset,
        f"commitlog/{path.name}",
        pos,
    )


def test_unit_findings_name_the_unit(tmp_path: Path) -> None:
    (f,) = _broken(tmp_path, "consumequeue.size_mismatch")
    assert (f.topic, f.queue_id, f.queue_offset) == ("TopicA", 0, 2)
    assert f.file == "consumequeue/TopicA/0/00000000000000000000"
    assert f.file_position == 2 * CQ_STORE_UNIT_SIZE


def test_a_run_of_invalid_units_is_one_finding(tmp_path: Path) -> None:
    """A queue range over zeros (all-zero files under the broker's max offset) would give a
    finding per unit, millions of them: a run of consecutive invalid units is one, naming the
    first unit and how many follow it."""
    (f,) = _broken(tmp_path, "consumequeue.invalid_unit")
    assert (f.queue_offset, f.file_position) == (2, 2 * CQ_STORE_UNIT_SIZE)
    assert f.detail.startswith("3 consecutive units, queue offsets 2 to 4, the first (0, 0, 0)")


def test_index_findings_name_the_entry(tmp_path: Path) -> None:
    (f,) = _broken(tmp_path, "index.key_hash")
    assert f.file_position == GEOMETRY.entry_position(5)
    header = IndexHeader.decode(first_index(CLEAN).read_bytes()[:INDEX_HEADER_SIZE])
    assert header.index_count > 5
