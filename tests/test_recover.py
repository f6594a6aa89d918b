"""``recover`` on writer-built stores: every damage helper under every profile.

Expectations come from where the writer put each message (its :class:`PutResult`), what the
damage helper reports it changed, and the rules of rocketmq-store-format.md §10, never from the
emulator itself.
"""

from __future__ import annotations

import dataclasses
import shutil
import struct
from collections import Counter
from pathlib import Path

import pytest

from rmqinspect.analysis.recovery import (
    QueueReport,
    RecoverOptions,
    RecoveryReport,
    analyze_recovery,
)
from rmqinspect.format.checkpoint import decode_checkpoint
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.format.profile import Profile
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.synth import damage
from rmqinspect.synth.writer import (
    DEFAULT_STORE_HOST,
    MessageSpec,
    PutResult,
    StoreLayout,
    StoreWriter,
)

PROFILES = [Profile.V4_9, Profile.V5_1, Profile.V5_3]
CL_SIZE = 16 * 1024
CQ_SIZE = 1000
T0 = 1_790_000_000_000
N = 265
UNDISPATCHED = 25  # the crash store's tail the reput never reached (starts mid-file)


def layout(profile: Profile) -> StoreLayout:
    return StoreLayout(
        profile=profile,
        commitlog_file_size=CL_SIZE,
        cq_file_size=CQ_SIZE,
        index_slot_num=64,
        index_num=400,
    )


def recover(root: Path, profile: Profile, **kw: object) -> RecoveryReport:
    """The recovery report with the test layout's index geometry and ``kw`` as broker switches."""
    store_options = StoreOptions(profile=profile, index_slot_num=64, index_num=400)
    with Store.open(root, store_options) as opened:
        return analyze_recovery(opened, RecoverOptions(**kw))  # type: ignore[arg-type]


def spec(i: int, *, topics: int = 3, dispatch: bool = True, spacing: int = 20) -> MessageSpec:
    return MessageSpec(
        topic=f"Topic{'ABC'[i % topics]}",
        queue_id=(i // topics) % 2,
        body=(f"body-{i}-" * (10 + i % 40)).encode(),
        tags=("TagA", "TagB", None)[i % 3],
        keys=f"K{i} ORD-{i // 7}",
        uniq_key=f"{i:032X}",
        store_timestamp=T0 + i * spacing,
        dispatch=dispatch,
    )


def build(
    root: Path,
    profile: Profile,
    *,
    n: int = N,
    topics: int = 3,
    crash: bool = False,
    undispatched: int = 0,
) -> list[PutResult]:
    with StoreWriter(root, layout(profile), crash=crash, flush_lag_ms=600 if crash else 0) as w:
        return [w.put(spec(i, topics=topics, dispatch=i < n - undispatched)) for i in range(n)]


class Base:
    """A built store per (profile, kind), copied per test so damage never leaks."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.cache: dict[tuple[Profile, str], tuple[Path, list[PutResult]]] = {}

    def copy(self, profile: Profile, kind: str, dest: Path) -> list[PutResult]:
        key = (profile, kind)
        if key not in self.cache:
            root = self.factory.mktemp(f"base-{profile.value}-{kind}") / "store"
            if kind == "clean":
                results = build(root, profile)
            elif kind == "crash":
                results = build(root, profile, crash=True, undispatched=UNDISPATCHED)
            elif kind == "single":
                results = build(root, profile, topics=1, n=160)
            else:
                raise ValueError(kind)
            self.cache[key] = (root, results)
        root, results = self.cache[key]
        shutil.copytree(root, dest)
        return results


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    return Base(tmp_path_factory)


def queues(report: RecoveryReport) -> dict[str, QueueReport]:
    return {f"{q.topic}/{q.queue_id}": q for q in report.consume_queues}


def counts(results: list[PutResult]) -> Counter[str]:
    return Counter(f"{r.topic}/{r.queue_id}" for r in results)


def end_of(results: list[PutResult]) -> int:
    return results[-1].physical_offset + results[-1].size


def files_of(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "commitlog").iterdir())


# --- clean and crashed stores --------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
def test_clean_restart_changes_nothing(base: Base, tmp_path: Path, profile: Profile) -> None:
    store = tmp_path / "s"
    results = base.copy(profile, "clean", store)
    report = recover(store, profile)
    files = files_of(store)
    assert len(files) >= 5
    assert report.broker_starts and report.last_exit_ok
    assert report.recovery_path == "normal"
    assert report.start_file is not None
    # 4.9/5.1 start three files from the end; 5.3 at the newest file the queues reach.
    want = files[-1] if profile is Profile.V5_3 else files[-3]
    assert report.start_file.name == want
    c = report.commitlog
    assert c is not None
    assert c.max_offset == end_of(results) and c.min_offset == 0
    assert c.deleted_files == [] and c.first_bad_record is not None
    assert c.first_bad_record.reason == "bad_magic"  # zeros after the last record
    assert {
        k: (q.min_offset_after_start, q.max_offset_after_dispatch)
        for k, q in queues(report).items()
    } == {k: (0, v) for k, v in counts(results).items()}
    assert report.lost_messages.count == 0 and not report.loses_data
    assert report.index is not None and report.index.deleted_files == []
    assert report.index.entries_written == 0
    assert report.reput is not None and report.reput.dispatched_records == 0


@pytest.mark.parametrize("profile", PROFILES)
def test_crash_redispatches_the_undispatched_tail(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    store = tmp_path / "s"
    results = base.copy(profile, "crash", store)
    before = files_of(store)
    report = recover(store, profile)
    assert report.recovery_path == "abnormal" and not report.last_exit_ok
    c = report.commitlog
    assert c is not None and c.max_offset == end_of(results)
    # The pre-allocated, all-zero next file starts past the end and is deleted.
    assert c.deleted_files == [before[-1]]
    assert c.discarded_bytes == 0
    tail = counts(results[-UNDISPATCHED:])
    for key, q in queues(report).items():
        assert q.max_offset_after_load == q.max_offset_after_dispatch == counts(results)[key]
        assert q.units_written_at_load == tail.get(key, 0), key
        assert q.units_written_after_start == 0
    assert report.lost_messages.count == 0 and not report.loses_data
    # The start file is the newest whose first record is stored at or before the checkpoint's
    # min(physic, logics) - 3 s.
    cp = decode_checkpoint((store / "checkpoint").read_bytes())
    limit = min(cp.physic_msg_timestamp, cp.logics_msg_timestamp) - 3000
    firsts: dict[int, int] = {}
    for r in results:
        firsts.setdefault(r.physical_offset // CL_SIZE, r.store_timestamp)
    chosen = max((i for i, ts in firsts.items() if ts <= limit), default=0)
    assert report.start_file is not None and report.start_file.offset == chosen * CL_SIZE
    assert report.index is not None and report.index.deleted_files
    assert report.index.files_created >= 1


@pytest.mark.parametrize("profile", PROFILES)
def test_removing_abort_from_a_crash_differs_per_version(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    """Without abort the undispatched tail is dispatched by the 4.9 reput (it starts at the
    queues' max physical offset), by 5.3's recoverNormally (records past that offset), and by
    nothing in 5.1 (no dispatch in recovery, reput from the end).

    5.3 OBSERVATION: maxPhyCQ is an end offset, and recoverNormally dispatches only records
    starting *after* it, so the first undispatched record is skipped; the next units of its
    queue are appended one slot early."""
    store = tmp_path / "s"
    results = base.copy(profile, "crash", store)
    damage.set_abort(store, present=False)
    report = recover(store, profile)
    assert report.recovery_path == "normal"
    tail = results[-UNDISPATCHED:]
    tail_counts = counts(tail)
    full = counts(results)
    dispatched_last = results[-UNDISPATCHED - 1]
    max_cq = dispatched_last.physical_offset + dispatched_last.size
    assert report.max_phy_offset_of_consume_queue == max_cq
    skipped = tail[0]
    assert skipped.physical_offset == max_cq  # no BLANK between them, so the quirk applies
    skipped_key = f"{skipped.topic}/{skipped.queue_id}"
    for key, q in queues(report).items():
        if profile is Profile.V5_1:
            assert q.max_offset_after_dispatch == full[key] - tail_counts.get(key, 0)
            assert q.unreachable_after_start == tail_counts.get(key, 0)
        elif profile is Profile.V4_9:
            assert q.max_offset_after_dispatch == full[key]
            assert q.units_written_after_start == tail_counts.get(key, 0)
        elif key == skipped_key:
            assert q.max_offset_after_dispatch == full[key] - 1
            assert q.units_written_at_load == tail_counts[key] - 1
            assert q.misplaced_units == tail_counts[key] - 1
            assert q.unreachable_after_start == 1
        else:
            assert q.max_offset_after_dispatch == full[key]
            assert q.units_written_at_load == tail_counts.get(key, 0)
    want = {Profile.V4_9: 0, Profile.V5_1: UNDISPATCHED, Profile.V5_3: 1}[profile]
    assert report.unreachable_messages == want
    # Intact messages the restarted broker cannot serve are loss (issue: "a consume queue that
    # nothing rebuilds is loss"): each is listed with where=no_queue_unit.
    unserved = [m for m in report.lost_messages.messages if m.where == "no_queue_unit"]
    assert len(unserved) == report.lost_messages.count == want
    if want:
        assert {m.physical_offset for m in unserved} <= {r.physical_offset for r in tail}
    assert report.loses_data is (want > 0)


# --- damage helpers --------------------------------------------------------------------------


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort"])
@pytest.mark.parametrize("profile", PROFILES)
def test_torn_tail(base: Base, tmp_path: Path, profile: Profile, abort: bool) -> None:
    store = tmp_path / "s"
    results = base.copy(profile, "clean", store)
    d = damage.torn_tail(store)
    damage.set_abort(store, present=abort)
    report = recover(store, profile)
    assert report.recovery_path == ("abnormal" if abort else "normal")
    c = report.commitlog
    assert (
        c is not None and c.max_offset == d.details["message_offset"] == results[-1].physical_offset
    )
    assert c.first_bad_record is not None and c.first_bad_record.physical_offset == c.max_offset
    assert c.last_valid_record is not None
    assert c.last_valid_record.physical_offset == results[-2].physical_offset
    assert report.lost_messages.count == 0 and report.lost_messages.damaged_records == 1
    assert report.loses_data
    last = results[-1]
    q = queues(report)[f"{last.topic}/{last.queue_id}"]
    assert q.units_truncated == 1
    assert q.max_offset_after_dispatch == last.queue_offset


@pytest.mark.parametrize("profile", PROFILES)
def test_flip_body_byte_in_last_file_loses_everything_after(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    store = tmp_path / "s"
    results = base.copy(profile, "clean", store)
    d = damage.flip_body_byte(store)
    damage.set_abort(store, present=True)
    report = recover(store, profile, lost_limit=5)
    cut = int(d.details["message_offset"])
    c = report.commitlog
    assert c is not None and c.max_offset == cut
    assert c.first_bad_record is not None and c.first_bad_record.reason == "body_crc_mismatch"
    after = [r for r in results if r.physical_offset > cut]
    lost = report.lost_messages
    assert lost.count == len(after) and lost.listed == 5 and lost.truncated
    first = lost.messages[0]
    r = after[0]
    i = results.index(r)
    assert (first.topic, first.queue_id, first.queue_offset, first.physical_offset) == (
        r.topic,
        r.queue_id,
        r.queue_offset,
        r.physical_offset,
    )
    assert first.msg_id == encode_offset_msg_id(DEFAULT_STORE_HOST, r.physical_offset)
    assert first.keys == [f"K{i}", f"ORD-{i // 7}"] and first.uniq_key == f"{i:032X}"
    assert first.where == "past_end"
    assert report.loses_data
    for key, q in queues(report).items():
        kept = sum(
            1 for x in results if f"{x.topic}/{x.queue_id}" == key and x.physical_offset < cut
        )
        assert q.max_offset_after_dispatch == kept, key
    # checkCRCOnRecover=false: the flip goes unnoticed and nothing is lost.
    relaxed = recover(store, profile, check_crc=False)
    assert relaxed.commitlog is not None and relaxed.commitlog.max_offset == end_of(results)
    assert relaxed.lost_messages.count == 0 and not relaxed.loses_data


@pytest.mark.parametrize("profile", PROFILES)
def test_flip_in_third_from_last_file_after_clean_shutdown(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    """4.9/5.1 scan the last three files and cut there, deleting the two newer files; 5.3
    starts at the last file and never sees the flip."""
    store = tmp_path / "s"
    results = base.copy(profile, "clean", store)
    files = files_of(store)
    third = int(files[-3])
    index = next(
        i
        for i, r in enumerate(results)
        if r.physical_offset >= third + 4096 and r.physical_offset < third + CL_SIZE
    )
    d = damage.flip_body_byte(store, message_index=index)
    report = recover(store, profile)
    c = report.commitlog
    assert c is not None
    if profile is Profile.V5_3:
        assert c.max_offset == end_of(results) and c.deleted_files == []
        assert report.lost_messages.count == 0 and not report.loses_data
    else:
        cut = int(d.details["message_offset"])
        assert c.max_offset == cut
        assert c.deleted_files == files[-2:]
        later = [r for r in results if r.physical_offset > cut]
        assert report.lost_messages.count == len(later)
        wheres = Counter(m.where for m in report.lost_messages.messages)
        assert wheres["deleted_file"] == sum(
            1 for r in later if r.physical_offset >= int(files[-2])
        )
        assert report.loses_data


@pytest.mark.parametrize("profile", PROFILES)
def test_zero_region_resynchronises_past_the_hole(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    store = tmp_path / "s"
    results = base.copy(profile, "clean", store)
    last_file = int(files_of(store)[-1])
    in_last = [r for r in results if r.physical_offset >= last_file]
    assert len(in_last) >= 8
    r3, r5 = in_last[2], in_last[4]
    damage.zero_region(store, r3.physical_offset + 20, r5.physical_offset + 10)
    report = recover(store, profile)
    c = report.commitlog
    assert c is not None and c.max_offset == r3.physical_offset
    lost = sorted(m.physical_offset for m in report.lost_messages.messages)
    assert lost == [r.physical_offset for r in in_last[5:]]
    assert report.lost_messages.damaged_records == 1  # r3 keeps its header; r4/r5 are zeros
    assert c.discarded_bytes == end_of(results) - r3.physical_offset


@pytest.mark.parametrize("profile", PROFILES)
def test_zeroed_first_record_moves_the_crash_start_file_back(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    """A file whose first record has no magic never matches isMappedFileMatchedRecover."""
    store = tmp_path / "s"
    base.copy(profile, "crash", store)
    probe = recover(store, profile)
    assert probe.start_file is not None and probe.start_file.index >= 1
    start = probe.start_file.offset
    damage.zero_region(store, start, start + 8)
    report = recover(store, profile)
    assert report.start_file is not None
    assert report.start_file.offset < start
    assert report.start_file.candidates[-2].name == probe.start_file.name
    assert not report.start_file.candidates[-2].matched
    # The scan then reaches the zeroed record and stops there: everything after is at stake.
    assert report.commitlog is not None and report.commitlog.max_offset == start
    assert report.loses_data


@pytest.mark.parametrize("profile", PROFILES)
def test_cq_ahead_of_commitlog_is_truncated(base: Base, tmp_path: Path, profile: Profile) -> None:
    store = tmp_path / "s"
    results = base.copy(profile, "clean", store)
    damage.cq_ahead_of_commitlog(store, "TopicA", 0, count=3)
    report = recover(store, profile)
    assert report.recovery_path == "normal"
    assert report.cq_truncation
    assert report.max_phy_offset_of_consume_queue is not None
    assert report.max_phy_offset_of_consume_queue > end_of(results)
    q = queues(report)["TopicA/0"]
    assert q.max_offset_on_disk == counts(results)["TopicA/0"] + 3
    assert q.units_truncated == 3
    assert q.max_offset_after_load == q.max_offset_after_dispatch == counts(results)["TopicA/0"]
    assert report.commitlog is not None and report.commitlog.max_offset == end_of(results)
    if profile is Profile.V5_3:
        assert report.start_file is not None and report.start_file.name == files_of(store)[-1]
    assert not report.loses_data


@pytest.mark.parametrize("profile", PROFILES)
def test_removed_cq_dir_is_not_rebuilt_after_clean_shutdown(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    store = tmp_path / "s"
    results = base.copy(profile, "clean", store)
    damage.remove_cq_dir(store, "TopicB", 1)
    report = recover(store, profile)
    assert "TopicB/1" not in queues(report)
    assert report.queues_without_consume_queue == ["TopicB/1"]
    # Nothing rebuilds the queue: every TopicB/1 message on disk is lost to consumers.
    mine = {r.physical_offset for r in results if (r.topic, r.queue_id) == ("TopicB", 1)}
    assert report.unreachable_messages == len(mine) == report.lost_messages.count
    lost = report.lost_messages.messages
    assert {m.physical_offset for m in lost} == mine
    assert {m.where for m in lost} == {"no_queue_unit"}
    assert report.loses_data


@pytest.mark.parametrize("profile", PROFILES)
def test_removed_cq_dir_is_partly_rebuilt_after_crash(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    """Dispatch from the start file recreates the queue with pre-blank units; 4.9's
    correctMinOffset counts the placeholders (min = file start), 5.x keeps the first real unit."""
    store = tmp_path / "s"
    results = base.copy(profile, "crash", store)
    damage.remove_cq_dir(store, "TopicB", 1)
    report = recover(store, profile)
    assert report.start_file is not None
    mine = [r for r in results if (r.topic, r.queue_id) == ("TopicB", 1)]
    rebuilt = [r for r in mine if r.physical_offset >= report.start_file.offset]
    q0 = rebuilt[0].queue_offset
    assert q0 > 0
    q = queues(report)["TopicB/1"]
    assert not q.existed
    assert q.max_offset_after_dispatch == len(mine)
    assert q.units_written_at_load == len(rebuilt)
    units_per_file = CQ_SIZE // 20
    assert q.pre_blank_units == q0 % units_per_file
    file_start = q0 - q0 % units_per_file
    assert q.files_created[0] == f"{file_start * 20:020d}"
    want_min = file_start if profile is Profile.V4_9 else q0
    assert q.min_offset_after_load == q.min_offset_after_start == want_min


@pytest.mark.parametrize("profile", PROFILES)
def test_only_queue_removed(base: Base, tmp_path: Path, profile: Profile) -> None:
    """With no consume queue left, 4.9's reput starts at the commitlog min offset and rebuilds
    everything; 5.3's recoverNormally dispatches every record past -1; 5.1 rebuilds nothing."""
    store = tmp_path / "s"
    results = base.copy(profile, "single", store)
    damage.remove_cq_dir(store, "TopicA", 0)
    damage.remove_cq_dir(store, "TopicA", 1)
    report = recover(store, profile)
    assert report.max_phy_offset_of_consume_queue == -1
    got = queues(report)
    if profile is Profile.V5_1:
        assert got == {}
        assert sorted(report.queues_without_consume_queue) == ["TopicA/0", "TopicA/1"]
        return
    assert report.start_file is not None
    if profile is Profile.V5_3:
        assert report.start_file.index == 0
    for key, n in counts(results).items():
        q = got[key]
        written = (
            q.units_written_after_start if profile is Profile.V4_9 else q.units_written_at_load
        )
        assert written == n
        assert (q.min_offset_after_start, q.max_offset_after_dispatch) == (0, n)


@pytest.mark.parametrize("profile", PROFILES)
def test_stale_copies_past_the_end_pass_the_check(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    """Copied old records pass every check the broker makes (it never compares PHYSICALOFFSET
    with the position), so recovery keeps them and the end moves past them."""
    store = tmp_path / "s"
    results = base.copy(profile, "clean", store)
    d = damage.stale_bytes_past_write_position(store, mode="copy", count=2)
    report = recover(store, profile)
    rng = d.ranges[0]
    c = report.commitlog
    assert c is not None
    assert c.max_offset == int(Path(rng.path).name) + rng.end
    assert c.max_offset == end_of(results) + results[0].size + results[1].size
    assert report.lost_messages.count == 0 and not report.loses_data
    for key, q in queues(report).items():
        assert q.max_offset_after_dispatch == counts(results)[key]


@pytest.mark.parametrize("profile", PROFILES)
def test_rewritten_tail_cuts_and_loses_the_old_last_message(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    store = tmp_path / "s"
    results = base.copy(profile, "clean", store)
    d = damage.stale_bytes_past_write_position(store, mode="rewrite")
    report = recover(store, profile)
    c = report.commitlog
    assert c is not None and c.max_offset == d.details["valid_end"]
    stale = int(d.details["stale_record_offset"])
    dropped = [r for r in results if r.physical_offset >= stale]
    assert sorted(m.physical_offset for m in report.lost_messages.messages) == [
        r.physical_offset for r in dropped
    ]
    assert report.loses_data


@pytest.mark.parametrize("profile", PROFILES)
def test_set_abort_on_a_clean_store(base: Base, tmp_path: Path, profile: Profile) -> None:
    store = tmp_path / "s"
    results = base.copy(profile, "clean", store)
    damage.set_abort(store, present=True, content=b"" if profile is Profile.V4_9 else b"4242")
    report = recover(store, profile)
    assert report.recovery_path == "abnormal"
    assert report.commitlog is not None and report.commitlog.max_offset == end_of(results)
    assert report.index is not None
    cp = decode_checkpoint((store / "checkpoint").read_bytes())
    from rmqinspect.format.index import IndexHeader

    stale = [
        p.name
        for p in sorted((store / "index").iterdir())
        if IndexHeader.decode(p.read_bytes()).end_timestamp > cp.index_msg_timestamp
    ]
    assert report.index.deleted_files == stale and stale
    assert not report.loses_data
    # Assuming a clean exit instead restores the normal path, whatever abort says.
    forced = recover(store, profile, last_exit_ok=True)
    assert forced.recovery_path == "normal" and forced.last_exit_source == "assume_clean"
    assert forced.index is not None and forced.index.deleted_files == []


def test_crash_loses_index_entries_unless_message_index_safe(tmp_path: Path) -> None:
    """After a crash the partial index file is deleted, and the rebuild starts at the commitlog
    file the checkpoint's physic/logics time picks. When that file starts after the deleted
    index file's first entry, the keys in between are never indexed again (§10.10);
    messageIndexSafe pulls the start back to indexMsgTimestamp and closes the gap."""
    store = tmp_path / "s"
    with StoreWriter(store, layout(Profile.V4_9), crash=True) as w:
        for i in range(396):  # 3 keys a message: two full index files and a nearly full one
            w.put(spec(i, spacing=40))
    from rmqinspect.format.index import IndexHeader

    names = sorted(p.name for p in (store / "index").iterdir())
    partial = IndexHeader.decode((store / "index" / names[-1]).read_bytes())
    plain = recover(store, Profile.V4_9)
    assert plain.index is not None and plain.index.deleted_files == [names[-1]]
    assert plain.start_file is not None and plain.start_file.offset > partial.begin_phy_offset
    assert [(r.first_offset, r.last_offset) for r in plain.index.unfindable_ranges] == [
        (partial.begin_phy_offset, plain.start_file.offset - 1)
    ]
    safe = recover(store, Profile.V4_9, message_index_safe=True)
    assert safe.start_file is not None and safe.start_file.offset <= partial.begin_phy_offset
    assert safe.index is not None and safe.index.unfindable_ranges == []
    assert safe.index.entries_written > plain.index.entries_written


# --- load failures -----------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
def test_zero_length_last_commitlog_file(base: Base, tmp_path: Path, profile: Profile) -> None:
    store = tmp_path / "s"
    results = base.copy(profile, "crash", store)
    last = store / "commitlog" / files_of(store)[-1]
    last.write_bytes(b"")
    report = recover(store, profile)
    if profile is Profile.V4_9:
        assert not report.broker_starts
        assert [f.kind for f in report.load_failures] == ["zero_length"]
    else:
        assert report.broker_starts
        assert report.commitlog is not None
        assert report.commitlog.deleted_at_load == [last.name]
        assert report.commitlog.max_offset == end_of(results)


@pytest.mark.parametrize("profile", PROFILES)
def test_wrong_size_file_refuses_to_start(base: Base, tmp_path: Path, profile: Profile) -> None:
    store = tmp_path / "s"
    base.copy(profile, "clean", store)
    victim = store / "commitlog" / files_of(store)[1]
    with open(victim, "r+b") as fh:
        fh.truncate(CL_SIZE // 2)
    report = recover(store, profile)
    assert not report.broker_starts
    assert report.load_failures[0].kind == "wrong_size"
    assert report.load_failures[0].path.endswith(victim.name)
    # load() fails before recovery: the verdict says why, and no end state is invented.
    assert report.recovery_path == "normal"
    assert report.verdict == "refuses_to_start"
    assert victim.name in report.verdict_reason and "bytes, expected" in report.verdict_reason
    c = report.commitlog
    assert c is not None and c.end_reason == "load_failed"
    assert c.files_before == files_of(store)
    assert (c.min_offset, c.max_offset, c.last_file, c.files_after) == (None, None, None, None)
    assert c.discarded_bytes is None and report.lost_messages.count == 0
    assert report.consume_queues == [] and report.reput is None and report.index is None


@pytest.mark.parametrize("profile", PROFILES)
def test_empty_last_cq_file_breaks_5x_correct_min_offset(
    base: Base, tmp_path: Path, profile: Profile
) -> None:
    """A queue whose last file holds no unit: 5.x correctMinOffset positions a buffer at -20
    (derived from the source), 4.9 starts normally."""
    store = tmp_path / "s"
    base.copy(profile, "clean", store)
    qdir = store / "consumequeue" / "TopicA" / "0"
    last = sorted(qdir.iterdir())[-1]
    extra = qdir / f"{int(last.name) + CQ_SIZE:020d}"
    with open(extra, "wb") as fh:
        fh.truncate(CQ_SIZE)
    data = last.read_bytes()
    fill = b"".join(
        data[:20] if data[i : i + 20] == bytes(20) else data[i : i + 20]
        for i in range(0, CQ_SIZE, 20)
    )
    last.write_bytes(fill)  # the previous file full, so the empty one is the queue's end
    report = recover(store, profile)
    if profile is Profile.V4_9:
        assert report.broker_starts
    else:
        assert not report.broker_starts
        assert report.load_failures[-1].kind == "exception"


# --- the reput's buffer drift -----------------------------------------------------------------


def test_reput_skips_a_length_mismatch_and_appends_at_current(base: Base, tmp_path: Path) -> None:
    """4.9 reput from 0 (no queue left) meets a record whose TOTALSIZE was changed: it skips it
    without dispatching, keeps parsing at the fields' length, and the next units of that queue
    are appended at the current position (one slot early)."""
    store = tmp_path / "s"
    results = base.copy(Profile.V4_9, "single", store)
    damage.remove_cq_dir(store, "TopicA", 0)
    damage.remove_cq_dir(store, "TopicA", 1)
    victim = results[5]
    path = store / "commitlog" / f"{0:020d}"
    with open(path, "r+b") as fh:
        fh.seek(victim.physical_offset)
        fh.write(struct.pack(">i", victim.size + 40))
    report = recover(store, Profile.V4_9)
    assert report.reput is not None and report.reput.skipped_records == 1
    key = f"{victim.topic}/{victim.queue_id}"
    q = queues(report)[key]
    total = counts(results)[key]
    assert q.max_offset_after_dispatch == total - 1
    assert q.misplaced_units == total - 1 - victim.queue_offset


def test_lost_limit_caps_the_list_not_the_count(base: Base, tmp_path: Path) -> None:
    store = tmp_path / "s"
    base.copy(Profile.V4_9, "clean", store)
    damage.flip_body_byte(store)
    full = recover(store, Profile.V4_9, lost_limit=None)
    capped = recover(store, Profile.V4_9, lost_limit=0)
    assert full.lost_messages.count > 10
    assert capped.lost_messages.count == full.lost_messages.count
    assert capped.lost_messages.messages == [] and capped.lost_messages.truncated
    assert full.lost_messages.listed == full.lost_messages.count


@pytest.mark.parametrize("profile", PROFILES)
def test_without_the_loss_search_the_queues_are_the_same_and_loss_is_not_computed(
    base: Base, tmp_path: Path, profile: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s"
    base.copy(profile, "crash", store)
    damage.torn_tail(store)
    full = recover(store, profile)
    assert full.loses_data  # the torn record: there is loss to find
    from rmqinspect.analysis.recovery import emulator

    def searched(*_args: object) -> None:
        raise AssertionError("the loss search ran")

    monkeypatch.setattr(emulator, "lost_messages", searched)
    quick = recover(store, profile, find_lost=False)
    assert quick.lost_messages is None and quick.loses_data is None
    assert quick.verdict == "loss_not_computed"
    assert quick.unreachable_messages is None and quick.queues_without_consume_queue is None
    assert quick.commitlog is not None and quick.commitlog.discarded_bytes is None
    assert {q.unreachable_after_start for q in quick.consume_queues} == {None}
    strip = {"unreachable_after_start": None}
    assert [dataclasses.replace(q, **strip) for q in quick.consume_queues] == [
        dataclasses.replace(q, **strip) for q in full.consume_queues
    ]
    assert quick.commitlog.max_offset == full.commitlog.max_offset  # type: ignore[union-attr]
