"""``trace`` and ``groups`` fact by fact on ``synth --fate`` stores (4.9 and 5.3, clean and
crashed): the fate model knows every record it stored, every delivery it made and what each
listener returned, every trace message and each transaction's end (``FateSummary``'s truth);
the analyses, reading only the store, must find the same."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from rmqinspect.analysis.groups import groups_report
from rmqinspect.analysis.groups_model import GroupsReport
from rmqinspect.analysis.offsets import PullStatus, next_pull, parse_broker_version
from rmqinspect.analysis.trace import Chain, TraceQuery, TraceReport, trace_report
from rmqinspect.format.encode import encode_trace_data
from rmqinspect.format.fastjson import loads
from rmqinspect.format.fate import DLQ_PREFIX, RETRY_PREFIX, Role, parse_retry_topic
from rmqinspect.format.profile import Profile
from rmqinspect.format.trace_data import TraceRecord, decode_trace_data
from rmqinspect.store.model import Store
from rmqinspect.synth.fate import GROUP_POP, GROUP_RETRY
from rmqinspect.synth.layout import FateRecord, FateSummary
from rmqinspect.synth.workload import WorkloadConfig, write_workload
from rmqinspect.synth.writer import StoreLayout
from tests.cli_helpers import run

# profile, crash, seed, messages, topics, queues. The last is ``make demo``'s workload without
# its damage: long enough that groups consume copies after the last persisted offset before the
# crash (its chains are sampled more thinly: each traced seed costs an index lookup, which reads
# every queue's bounds).
CASES = {
    "4.9-clean": (Profile.V4_9, False, 11, 1500, 2, 2),
    "4.9-crash": (Profile.V4_9, True, 12, 1500, 2, 2),
    "5.3-clean": (Profile.V5_3, False, 13, 1500, 2, 2),
    "5.3-crash": (Profile.V5_3, True, 14, 1500, 2, 2),
    "4.9-crash-demo": (Profile.V4_9, True, 7, 5000, 3, 4),
}
GROUPS = ("groupOK", GROUP_RETRY, GROUP_POP)


@dataclass(frozen=True)
class Built:
    root: Path
    fate: FateSummary
    crashed: bool
    by_identity: dict[str, list[FateRecord]]
    committed: dict[tuple[str, str, int], int]  # (group, topic, queue) -> consumerOffset.json
    bak: dict[tuple[str, str, int], int]  # ... -> consumerOffset.json.bak
    trace: TraceReport
    groups: GroupsReport


@pytest.fixture(scope="module", params=list(CASES))
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    profile, crash, seed, messages, topics, queues = CASES[request.param]
    root = tmp_path_factory.mktemp("fate") / "store"
    layout = StoreLayout(profile=profile, commitlog_file_size=1 << 20, cq_file_size=6000)
    config = WorkloadConfig(
        messages=messages,
        topics=topics,
        queues=queues,
        body_size=100,
        seed=seed,
        crash=crash,
        fate=True,
    )
    summary = write_workload(root, config, layout)
    fate = summary.fate
    assert fate is not None
    by_identity: dict[str, list[FateRecord]] = defaultdict(list)
    for r in fate.records:
        if r.role not in (Role.TRACE, Role.OP):
            by_identity[r.identity].append(r)
    committed, bak = (_offsets(root / "config" / name) for name in _OFFSET_FILES)
    # Every message with a UNIQ_KEY and more than a plain record (delayed, retried, dead-lettered,
    # transactional), and every 16th plain one, traced in one walk (each seed costs an index
    # lookup, which reads every queue's bounds: all 1500 would take seconds); the long run's
    # every 5th, and the example consumed past the persisted offset.
    uniq = sorted(k for k in by_identity if len(k) in (32, 56) and not _is_offset_id(k, fate))
    plain = [k for k in uniq if [r.role for r in by_identity[k]] == [Role.ORIGINAL]]
    uniq = sorted(set(uniq) - set(plain) | set(plain[::16]))
    if messages > 1500:
        uniq = sorted(set(uniq[::5]) | {fate.examples["consumed_past_commit"] or uniq[0]})
    with Store.open(root) as st:
        trace = trace_report(st, TraceQuery(uniq_keys=tuple(uniq)))
        groups = groups_report(st, parse_broker_version("4.9.8"), "4.9.8", "--broker-version")
    return Built(root, fate, crash, dict(by_identity), committed, bak, trace, groups)


_OFFSET_FILES = ("consumerOffset.json", "consumerOffset.json.bak")


def _offsets(path: Path) -> dict[tuple[str, str, int], int]:
    table = loads(path.read_bytes())["offsetTable"]
    return {
        (key.split("@")[1], key.split("@")[0], int(q)): int(v)
        for key, queues in table.items()
        for q, v in queues.items()
    }


def _is_offset_id(key: str, fate: FateSummary) -> bool:
    """An identity that is a first copy's offsetMsgId (a message without UNIQ_KEY)."""
    return any(r.origin_message_id == key for r in fate.records)


def _chains(b: Built) -> dict[str, Chain]:
    out = {}
    for c in b.trace.chains:
        assert c.uniq_key is not None
        assert c.uniq_key not in out, "one chain per message"
        out[c.uniq_key] = c
    return out


def test_trace_finds_every_copy_the_model_stored(built: Built) -> None:
    chains = _chains(built)
    assert built.trace.findings == ()
    assert len(chains) > 100
    for key, chain in chains.items():
        want = sorted(built.by_identity[key], key=lambda r: r.physical_offset)
        got = [c for c in chain.copies if c.role not in (Role.TRACE, Role.OP)]
        assert [c.physical_offset for c in got] == [r.physical_offset for r in want], key
        for r, c in zip(want, got, strict=True):
            assert (c.role.value, c.topic, c.queue_id, c.queue_offset) == (
                r.role,
                r.topic,
                r.queue_id,
                r.queue_offset,
            )
            assert (c.store_timestamp, c.reconsume_times, c.delay_level, c.real_topic) == (
                r.store_timestamp,
                r.reconsume_times,
                r.delay_level,
                r.real_topic,
            )
            assert (c.offset_msg_id, c.origin_message_id) == (r.offset_msg_id, r.origin_message_id)
            if r.origin_message_id is not None:
                # The offsetMsgId of the copy the group consumed first: an earlier record of
                # the chain that a consumer gets (original, scheduled delivery).
                named = [x for x in want if x.offset_msg_id == r.origin_message_id]
                assert len(named) == 1 and named[0].physical_offset < r.physical_offset
                assert named[0].role in (Role.ORIGINAL, Role.SCHEDULED_DELIVERY)
            # No damage here: the restart keeps every record (the crash's undispatched tail
            # is dispatched by it).
            assert c.restart.value == "kept"


def _base(recs: list[FateRecord]) -> str:
    first = recs[0]
    return (
        first.real_topic or first.topic if first.role in (Role.SCHEDULE, Role.HALF) else first.topic
    )


def test_each_group_s_fate_is_what_the_model_did(built: Built) -> None:
    deliveries: dict[int, list[tuple[str, bool]]] = defaultdict(list)
    for d in built.fate.deliveries:
        deliveries[d.physical_offset].append((d.group, d.success))
    seen: dict[str, int] = defaultdict(int)
    for key, chain in _chains(built).items():
        recs = sorted(built.by_identity[key], key=lambda r: r.physical_offset)
        base = _base(recs)
        assert chain.topic == base
        named = {
            retry.group for r in recs if (retry := parse_retry_topic(r.topic, GROUPS)) is not None
        } | {r.topic[len(DLQ_PREFIX) :] for r in recs if r.topic.startswith(DLQ_PREFIX)}
        subscribed = {g for g, t, _ in built.committed if t == base}
        assert {f.group for f in chain.groups} == subscribed | named, key
        for f in chain.groups:
            got = [(g, ok) for r in recs for g, ok in deliveries[r.physical_offset] if g == f.group]
            outcome, count = _expected(built, f.group, base, recs, deliveries)
            if outcome == "pending or consumed":  # a crash cut the chain short (see below)
                assert built.crashed and f.outcome in ("pending", "consumed"), (key, f)
            else:
                assert (f.outcome, f.attempts if outcome == "dlq" else f.retries) == (
                    outcome,
                    count,
                ), (key, f)
            n = f.retries
            if f.outcome == "dlq":
                # Dead-lettered after as many deliveries as the DLQ copy counts, all failed.
                assert [ok for _, ok in got] == [False] * f.attempts
                assert f.summary == f"moved to %DLQ%{f.group} after {f.attempts} attempts"
            elif f.outcome == "consumed":
                after = f" after {n} {'retry' if n == 1 else 'retries'}" if n else ""
                assert f.summary == f"consumed by {f.group}{after}"
            elif f.outcome == "in_delay":
                assert " waits in delay level " in f.summary
            seen[f.outcome] += 1
    # (The crash comes before any chain reaches the DLQ: three retries take over 100 s.)
    want = {"consumed", "in_delay"} | (set() if built.crashed else {"dlq"})
    if built.fate.examples["consumed_past_commit"] is not None:
        want.add("pending")
    assert want <= set(seen), seen


def _expected(
    b: Built,
    group: str,
    base: str,
    recs: list[FateRecord],
    deliveries: dict[int, list[tuple[str, bool]]],
) -> tuple[str, int]:
    """(outcome, retries; attempts for a DLQ) from what the model stored, delivered and
    persisted."""
    dlq = [r for r in recs if r.topic == DLQ_PREFIX + group]
    if dlq:
        return "dlq", dlq[-1].reconsume_times
    done = [r for r in recs if any(g == group and ok for g, ok in deliveries[r.physical_offset])]
    if done:
        last = done[-1]
        offset = b.committed.get((group, last.topic, last.queue_id), -1)
        return ("consumed" if offset > last.queue_offset else "pending"), last.reconsume_times
    # Not consumed yet: a schedule unit bound for the group that nothing delivered since.
    bound = (base, RETRY_PREFIX + group)
    for s in (r for r in recs if r.role == Role.SCHEDULE and r.real_topic in bound):
        if not any(
            d.physical_offset > s.physical_offset
            and d.reconsume_times == s.reconsume_times
            and d.role in (Role.RETRY, Role.SCHEDULED_DELIVERY)
            for d in recs
        ):
            return "in_delay", s.reconsume_times
    # Crashed before its delivery, or failed with the send-back lost with the broker.
    return "pending or consumed", 0


def _roundtrip(r: TraceRecord) -> TraceRecord:
    """What a reader decodes of a record the client wrote (Java writes null as "null")."""
    records, problems = decode_trace_data(encode_trace_data([r]))
    assert problems == [] and len(records) == 1
    return records[0]


def test_trace_records_join_their_chain_decoded(built: Built) -> None:
    written: dict[int, tuple[TraceRecord, ...]] = {
        t.physical_offset: tuple(_roundtrip(r) for r in t.records) for t in built.fate.traces
    }
    assert written and built.fate.trace_messages == len(written)
    kinds: set[str] = set()
    for key, chain in _chains(built).items():
        want = [(at, r) for at in sorted(written) for r in written[at] if r.msg_id == key]
        got = [(c.physical_offset, t) for c in chain.copies for t in c.traces]
        assert got == want, key
        assert all(c.linked_by == "trace_keys" for c in chain.copies if c.role is Role.TRACE)
        kinds |= {t.trace_type for _, t in got}
        # The consumer's records say what the model's listener returned, in order.
        subs = [t for _, t in got if t.trace_type == "SubAfter"]
        returned = [
            ok
            for r in sorted(built.by_identity[key], key=lambda r: r.physical_offset)
            for d in built.fate.deliveries
            if d.physical_offset == r.physical_offset and d.group == GROUP_RETRY
            for ok in (d.success,)
        ]
        # (A crash loses the records the client had not sent yet: the latest.)
        assert [t.success for t in subs] == returned[: len(subs)], key
        if not built.crashed:
            assert len(subs) == len(returned), key
        # One Pub per send of the traced producers (TopicA's, PID_TX's halves), naming the
        # record the send stored; none for the others. (The crash comes 70 s after the last
        # send: every Pub was flushed.)
        recs = sorted(built.by_identity[key], key=lambda r: r.physical_offset)
        pubs = [(t.group, t.msg_type, t.offset_msg_id) for _, t in got if t.trace_type == "Pub"]
        sent = recs[0]
        if sent.role == Role.HALF:
            assert pubs == [("PID_TX", 1, sent.offset_msg_id)], key
        elif "TopicA" in (sent.topic, sent.real_topic):
            assert pubs == [("PID_TRACED", 3 if sent.delay_level else 0, sent.offset_msg_id)]
        else:
            assert pubs == [], key
        ends = [
            (t.transaction_state, t.from_transaction_check)
            for _, t in got
            if t.trace_type == "EndTransaction"
        ]
        state = built.fate.transaction_states.get(key)
        if state in ("committed", "rolled_back"):
            assert ends == [
                ("COMMIT_MESSAGE" if state == "committed" else "ROLLBACK_MESSAGE", False)
            ]
        elif state is not None:
            # Left unknown: UNKNOW at the send, then the answer to each check (a half copy
            # each); a crash loses the answers not sent yet.
            checks = sum(r.role == Role.HALF for r in recs) - 1
            full = [("UNKNOW", False)] + [("UNKNOW", True)] * checks
            assert ends == full[: len(ends)] and (built.crashed or ends == full), key
        else:
            assert ends == []
    assert {"Pub", "SubBefore", "SubAfter", "EndTransaction"} <= kinds


def test_transaction_states(built: Built) -> None:
    chains = _chains(built)
    states = built.fate.transaction_states
    assert set(states.values()) >= {"committed", "rolled_back", "pending"}
    checked = 0
    for key, state in states.items():
        if key in chains:  # all of them but in the thinly sampled long run
            assert chains[key].transaction_state == state, key
            checked += 1
    assert checked >= len(states) // 5 > 0


# --- groups -----------------------------------------------------------------------------------


def test_groups_per_queue(built: Built) -> None:
    """Committed offset, max, lag per group and queue; the offset past its queue's end resets
    (OFFSET_OVERFLOW_BADLY) to the max; DLQ size and retry backlog as the model left them."""
    dispatched: dict[tuple[str, int], int] = defaultdict(int)
    stamps: dict[tuple[str, int, int], int] = {}
    for r in built.fate.records:
        if r.dispatched:
            dispatched[(r.topic, r.queue_id)] += 1
            stamps[(r.topic, r.queue_id, r.queue_offset)] = r.store_timestamp
    by_name = {g.group: g for g in built.groups.groups}
    ahead_group, ahead_topic, ahead_queue, ahead, ahead_max = built.fate.offset_ahead
    delivered_to = {(d.group, d.physical_offset) for d in built.fate.deliveries}
    at_queue_offset = {
        (r.topic, r.queue_id, r.queue_offset): r.physical_offset
        for r in built.fate.records
        if r.dispatched
    }

    def delivered_pending(group: str, topic: str, queue_id: int, offset: int) -> int:
        """The model's deliveries to ``group`` of the queue's messages at ``offset`` and on."""
        return sum(
            (group, at) in delivered_to
            for (t, q, o), at in at_queue_offset.items()
            if (t, q) == (topic, queue_id) and o >= offset
        )

    rows = 0
    for (group, topic, queue_id), offset in built.committed.items():
        row = next(
            r
            for r in by_name[group].queues
            if (r.topic, r.queue_id) == (topic, queue_id) and r.offset is not None
        )
        top = dispatched.get((topic, queue_id), 0)
        if topic.startswith(("Topic", RETRY_PREFIX)):  # every record there is the model's
            assert row.max_offset == top, (group, topic, queue_id)
        assert (row.offset, row.lag) == (offset, row.max_offset - offset)
        # mqadmin's lastTimestamp: the store time of the message at offset - 1.
        assert row.last_consumed_store_timestamp == stamps.get((topic, queue_id, offset - 1))
        assert row.next_pull is not None
        assert row.next_pull == next_pull(offset, row.min_offset, row.max_offset, _V498)
        if (group, topic, queue_id) == (ahead_group, ahead_topic, ahead_queue):
            assert (offset, row.max_offset) == (ahead, ahead_max)
            assert row.next_pull.status is PullStatus.OFFSET_OVERFLOW_BADLY
            assert row.next_pull.next_offset == row.max_offset and row.next_pull.replayed == 0
            assert any("OFFSET_OVERFLOW_BADLY" in f for f in row.findings)
        else:
            assert offset <= row.max_offset
            # A pending message the store proves reached the group before (a send-back of it
            # is stored) is delivered again: never more than the model delivered.
            proven = row.delivered_before or 0
            assert proven <= delivered_pending(group, topic, queue_id, offset)
            assert row.findings == (
                *(
                    f"consumerOffset.json.bak disagrees: {row.bak_note}"
                    for _ in range(row.bak_note is not None)
                ),
                *(f for f in row.findings if proven and "delivered again" in f),
            )
            assert sum("delivered again" in f for f in row.findings) == (proven > 0)
        # The generation before, where it differs (a crash: one persist behind).
        bak = built.bak.get((group, topic, queue_id))
        assert row.bak_offset == (bak if bak != offset else None)
        rows += 1
    assert rows == len(built.committed)
    for name in (GROUP_RETRY, GROUP_POP):
        if name not in by_name:
            continue
        g = by_name[name]
        dlq = dispatched.get((DLQ_PREFIX + name, 0))
        assert g.dlq_size == dlq  # None: no DLQ queue
        backlog = sum(
            max(dispatched.get((r.topic, r.queue_id), 0) - (r.offset or 0), 0)
            for r in g.queues
            if r.kind in ("retry", "pop_retry")
        )
        assert g.retry_backlog == backlog
        if not built.crashed:
            assert backlog == 0  # every chain ended and was committed at the clean shutdown
    assert built.crashed or by_name[GROUP_RETRY].dlq_size
    # After the restart every record is in its queue: the crash's undispatched tail too.
    stored: dict[tuple[str, int], int] = defaultdict(int)
    for r in built.fate.records:
        stored[(r.topic, r.queue_id)] += 1
    with Store.open(built.root) as st:
        after = groups_report(
            st, _V498, "4.9.8", "--broker-version", group=GROUP_RETRY, after_restart=True
        )
    assert after.view == "after restart"
    for r in after.groups[0].queues:
        if r.topic.startswith(("Topic", RETRY_PREFIX)):
            assert r.max_offset_after_restart == stored[(r.topic, r.queue_id)], r
            assert built.crashed or r.max_offset_after_restart == r.max_offset
    # Before 4.9.4 the offset past the end resets to 0 when the queue's min is 0 (#4215): the
    # whole queue again.
    with Store.open(built.root) as st:
        old = groups_report(st, parse_broker_version("4.9.3"), "4.9.3", "--broker-version")
    (row,) = [
        r
        for g in old.groups
        for r in g.queues
        if (g.group, r.topic, r.queue_id, r.offset)
        == (ahead_group, ahead_topic, ahead_queue, ahead)
    ]
    assert row.min_offset == 0 and row.next_pull is not None
    assert (row.next_pull.status, row.next_pull.next_offset, row.next_pull.replayed) == (
        PullStatus.OFFSET_OVERFLOW_BADLY,
        0,
        ahead_max,
    )


_V498 = parse_broker_version("4.9.8")


def test_traces_of_a_message_without_uniq_key(built: Built) -> None:
    """A consumer's trace names a message without UNIQ_KEY by its offsetMsgId
    (``MessageClientExt.getMsgId``): ``trace --msg-id`` joins those records too."""
    delivered = {d.physical_offset for d in built.fate.deliveries if d.group == GROUP_RETRY}
    written = [r for t in built.fate.traces for r in t.records]
    checked = 0
    for key, recs in sorted(built.by_identity.items()):
        first = recs[0]
        if key != first.offset_msg_id or first.physical_offset not in delivered:
            continue  # has a UNIQ_KEY, or groupRetry never took it
        ids = {r.offset_msg_id for r in recs}
        want = [r for r in written if r.msg_id in ids]
        if not want:
            continue  # its trace message was lost with the crash
        with Store.open(built.root) as st:
            report = trace_report(st, TraceQuery(msg_id=key))
        (chain,) = report.chains
        got = [t for c in chain.copies for t in c.traces]
        assert got == [_roundtrip(r) for r in want], key
        checked += 1
        if checked == 3:
            break
    assert checked


def test_the_table_says_what_each_trace_record_says(built: Built, wide_console: None) -> None:
    """A trace copy's row reads its records: who sent it, how the listener returned."""
    failed = {d.physical_offset for d in built.fate.deliveries if not d.success}
    key = next(
        k
        for k, c in sorted(_chains(built).items())
        if c.topic == "TopicA" and built.by_identity[k][0].physical_offset in failed
    )
    result = run("trace", built.root, "--uniq-key", key, "-F", "table")
    assert result.exit_code == 0, result.stderr
    assert "Pub by PID_TRACED: sent" in result.stdout
    assert "SubBefore groupRetry: reconsume 0; SubAfter: failed in 4 ms" in result.stdout
