"""``pop``: 5.x POP consumption as the broker's own records tell it: per POP group, the messages
in flight, awaiting revive, acked and revived, merged the way ``PopReviveService`` merges them.

The records (:mod:`rmqinspect.format.pop`): checkpoints (``ck``) and acks (``ack``, ``bAck``) in
``rmq_sys_REVIVE_LOG_<cluster>``, read both where the timer still holds them
(``rmq_sys_wheel_timer`` with ``REAL_TOPIC`` the revive topic) and where it delivered them; the
same checkpoint or ack in both places counts once (by merge key, and ack offset). A popped
message is:

- ``acked``: its bit is set in the checkpoint's bitmap or an ack names it
  (``PopReviveService.consumeReviveMessage``: ``setBit(indexOfAck(ao))``);
- ``in_flight``: not acked, its revive time (pop time + invisible time) is after now (``--now``,
  else the newest store timestamp of the commitlog);
- ``revived``: not acked, due, and the revive service's progress (``CID_RMQ_SYS_REVIVE_GROUP``
  in ``consumerOffset.json``, per revive queue) is past the checkpoint's revive-queue offset:
  ``reviveRetry`` stored it again in the POP retry topic (copies counted by UNIQ_KEY, with
  ``1ST_POP_TIME``);
- ``awaiting_revive``: not acked, due, not yet passed by the revive service (or still in the
  timer); ``overdue`` once due for longer than the threshold.

What disk cannot say: ``PopBufferMergeService`` (``enablePopBufferMerge``) merges acks into
checkpoints in memory and writes a checkpoint only when its acks do not complete it, so a
crash loses acks never written; and a POP group's ``consumerOffset.json`` offset moves at pop
time, so it understates the group's outstanding work (in flight + awaiting revive).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum

from rmqinspect.analysis import Progress
from rmqinspect.analysis.messages import SkippedRange
from rmqinspect.analysis.pop_records import (
    INCONSISTENT,
    Checkpoint,
    FindingKind,
    PopFinding,
    QueueCounts,
    Stored,
    ck_position,
    decode,
    merge,
    walk,
)
from rmqinspect.analysis.queues import unit_at
from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import pop
from rmqinspect.format.config import ConsumerOffsetTable
from rmqinspect.format.fate import retry_topic_kind
from rmqinspect.format.times import iso_ms
from rmqinspect.store.configfiles import load_config_file
from rmqinspect.store.model import Store

# PopReviveService reads a revive queue in rounds (reviveInterval 1 s, a round's scan up to
# reviveScanTime 10 s) and waits for a later record before it passes a due checkpoint: a minute
# past its revive time is already late.
DEFAULT_STUCK_AFTER_MS = 60_000

CAVEAT = (
    "enablePopBufferMerge merges acks into checkpoints in the broker's memory "
    "(PopBufferMergeService): acks it held are never written, so a crash can revive messages "
    "that were acked; and a POP group's consumerOffset.json offset advances at pop time, so "
    "it understates the group's outstanding messages"
)


class PopState(StrEnum):
    IN_FLIGHT = "in_flight"
    AWAITING_REVIVE = "awaiting_revive"
    ACKED = "acked"
    REVIVED = "revived"


@dataclass(frozen=True, slots=True)
class PopMessage:
    """One popped message: a checkpoint's index."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    pop_time: int
    invisible_until: int  # the checkpoint's revive time
    state: PopState
    uniq_key: str | None
    revived: int  # copies of it in the group's POP retry topics (by UNIQ_KEY)
    checkpoint_position: int
    # Revived (a copy stored at or after its revive time) though the revive service's persisted
    # progress is not past its checkpoint: a restart reads the checkpoint again and revives it
    # a second time (apache/rocketmq#7724's duplicate).
    revive_uncommitted: bool = False


@dataclass(frozen=True, slots=True)
class PopGroup:
    group: str
    topics: tuple[str, ...]
    checkpoints: int
    counts: dict[str, int]  # PopState -> popped messages
    outstanding: int  # in flight + awaiting revive
    retry_copies: int  # records in its POP retry topics with 1ST_POP_TIME
    revived_messages: dict[int, int]  # revived N times -> messages
    oldest_awaiting: PopMessage | None
    revive_uncommitted: int  # revived messages a restart revives again (PopMessage's flag)


@dataclass(frozen=True, slots=True)
class ReviveQueue:
    topic: str
    queue_id: int
    checkpoints: int
    acks: int
    cancels: int  # cancelCkTimer records
    max_offset: int  # past the highest revive-queue offset read
    progress: int | None  # CID_RMQ_SYS_REVIVE_GROUP's committed offset


@dataclass(frozen=True, slots=True)
class PopReport:
    source: str
    reference_timestamp: int | None  # "now", what due is measured against
    reference_basis: str
    stuck_after_ms: int
    undelivered: dict[str, int]  # checkpoints / acks the timer holds, not yet in a revive queue
    revive_queues: tuple[ReviveQueue, ...]
    groups: tuple[PopGroup, ...]
    checkpoints: tuple[Checkpoint, ...]
    messages: tuple[PopMessage, ...]
    findings: tuple[PopFinding, ...]
    skipped: tuple[SkippedRange, ...]
    caveat: str = CAVEAT

    @property
    def empty(self) -> bool:
        return not (self.checkpoints or self.revive_queues or self.findings)

    @property
    def inconsistent(self) -> bool:
        return any(f.kind in INCONSISTENT for f in self.findings)

    @property
    def overdue(self) -> bool:
        return any(f.kind is FindingKind.OVERDUE for f in self.findings)


def pop_report(
    store: Store,
    group: str | None = None,
    stuck_after_ms: int = DEFAULT_STUCK_AFTER_MS,
    progress: Progress | None = None,
    *,
    now: int | None = None,
    read_uniq_keys: bool = True,
) -> PopReport:
    """``now``: what due is measured against (default: the newest store time).
    ``read_uniq_keys``: read each popped message's UNIQ_KEY through its consume queue (and
    so count its revived copies); ``trace``, which matches by queue offset, does without."""
    recs = walk(store, progress)
    findings: list[PopFinding] = []
    cks, acks, queues = decode(recs.stored, findings)
    merge(cks, acks, findings)
    revive_progress = _revive_progress(store)
    if now is not None:
        basis = "--now"
    elif recs.newest is not None:
        now, basis = recs.newest, "the store's newest store time"
    else:
        basis = "no record in the commitlog"
    if group is not None:
        cks = {k: c for k, c in cks.items() if c.group == group}
        findings = [f for f in findings if f.group in (group, None)]
    copies = _retry_copies(recs.retry_copies)
    messages: list[PopMessage] = []
    for ck in cks.values():
        messages.extend(_messages(store, ck, now, revive_progress, copies, read_uniq_keys))
    for m in messages:
        if m.revive_uncommitted:
            findings.append(
                PopFinding(
                    FindingKind.REVIVE_UNCOMMITTED,
                    m.checkpoint_position,
                    m.group,
                    f"{m.topic}:{m.queue_id} offset {m.queue_offset} was revived, but "
                    f"{pop.REVIVE_GROUP}'s persisted progress is not past its checkpoint: a "
                    "restart revives it again (a duplicate delivery)",
                )
            )
        if m.state is PopState.AWAITING_REVIVE and now is not None:
            late = now - m.invisible_until
            if late > stuck_after_ms:
                findings.append(
                    PopFinding(
                        FindingKind.OVERDUE,
                        m.checkpoint_position,
                        m.group,
                        f"{m.topic}:{m.queue_id} offset {m.queue_offset} due {late / 1000:.0f} s "
                        "ago, not acked and not passed by the revive service",
                    )
                )
    ordered = sorted(cks.values(), key=ck_position)
    return PopReport(
        source="commitlog scan",
        reference_timestamp=now,
        reference_basis=basis,
        stuck_after_ms=stuck_after_ms,
        undelivered=_undelivered(ordered, acks, group),
        revive_queues=tuple(_queues(queues, revive_progress)),
        groups=tuple(_groups(ordered, messages, recs.retry_copies, group)),
        checkpoints=tuple(ordered),
        messages=tuple(sorted(messages, key=lambda m: (m.group, m.topic, m.queue_id,
                                                      m.queue_offset, m.pop_time))),
        findings=tuple(sorted(findings, key=lambda f: (f.position, f.kind))),
        skipped=tuple(recs.skipped),
    )  # fmt: skip


def _undelivered(
    cks: list[Checkpoint], acks: list[tuple[Stored, pop.Ack]], group: str | None
) -> dict[str, int]:
    """What the timer holds and has not delivered: a delivered copy keeps the body."""
    places: dict[tuple[str, tuple[int, ...]], set[bool]] = {}
    for s, ack in acks:
        if group is None or ack.group == group:
            places.setdefault((ack.merge_key, ack.ack_offsets), set()).add(s.in_timer)
    return {
        "ck": sum(1 for c in cks if c.revive_position is None),
        "ack": sum(1 for p in places.values() if False not in p),
    }


def _revive_progress(store: Store) -> dict[tuple[str, int], int]:
    """``CID_RMQ_SYS_REVIVE_GROUP``'s committed offsets: (revive topic, queue) -> offset."""
    r = load_config_file(store.config_dir, "consumerOffset.json")
    if not isinstance(r.value, ConsumerOffsetTable):
        return {}
    out: dict[tuple[str, int], int] = {}
    for key, table in r.value.offset_table.items():
        topic, sep, group = key.rpartition("@")
        if sep and group == pop.REVIVE_GROUP and pop.is_revive_topic(topic):
            out.update({(topic, q): o for q, o in table.items()})
    return out


def _retry_copies(copies: list[cl.MessageRecord]) -> dict[str, list[tuple[str, int]]]:
    """UNIQ_KEY -> its POP retry copies (topic, store time): ``reviveRetry`` keeps the
    properties."""
    out: dict[str, list[tuple[str, int]]] = {}
    for rec in copies:
        if rec.uniq_key is not None:
            out.setdefault(rec.uniq_key, []).append((rec.topic, rec.store_timestamp))
    return out


def _uniq_key(store: Store, topic: str, queue_id: int, queue_offset: int) -> str | None:
    """The popped message's UNIQ_KEY, through its consume queue (None where it is gone)."""
    try:
        phy, _, _ = unit_at(store, topic, queue_id, queue_offset)
        return store.read_message(phy, with_body=False).uniq_key
    except (StoreError, DecodeError):
        return None


def _messages(
    store: Store,
    ck: Checkpoint,
    now: int | None,
    revive_progress: dict[tuple[str, int], int],
    copies: dict[str, list[tuple[str, int]]],
    read_uniq_keys: bool,
) -> list[PopMessage]:
    num = min(max(ck.num, 0), pop.BITMAP_BITS)
    if ck.queue_offset_diff:
        num = min(num, len(ck.queue_offset_diff))
    passed = False
    if ck.revive_topic is not None and ck.revive_queue_id is not None:
        committed = revive_progress.get((ck.revive_topic, ck.revive_queue_id))
        passed = committed is not None and committed > (ck.revive_queue_offset or 0)
    out: list[PopMessage] = []
    for index in range(num):
        offset = pop.offset_at(ck.start_offset, ck.queue_offset_diff, index)
        if (ck.merged_bit_map >> index) & 1:
            state = PopState.ACKED
        elif now is None or ck.revive_time > now:
            state = PopState.IN_FLIGHT
        elif passed:
            state = PopState.REVIVED
        else:
            state = PopState.AWAITING_REVIVE
        uniq = _uniq_key(store, ck.topic, ck.queue_id, offset) if read_uniq_keys else None
        mine = [
            at
            for topic, at in copies.get(uniq or "", ())
            if retry_topic_kind(topic, ck.group) == "pop_retry"
        ]
        uncommitted = state is PopState.AWAITING_REVIVE and any(at >= ck.revive_time for at in mine)
        if uncommitted:
            state = PopState.REVIVED
        out.append(
            PopMessage(
                ck.group, ck.topic, ck.queue_id, offset, ck.pop_time, ck.revive_time, state,
                uniq, len(mine), ck_position(ck), uncommitted,
            )
        )  # fmt: skip
    return out


def _queues(
    queues: dict[tuple[str, int], QueueCounts], revive_progress: dict[tuple[str, int], int]
) -> list[ReviveQueue]:
    keys = sorted(set(queues) | set(revive_progress))
    out = []
    for topic, queue_id in keys:
        q = queues.get((topic, queue_id), QueueCounts())
        out.append(
            ReviveQueue(
                topic, queue_id, q.checkpoints, q.acks, q.cancels, q.max_offset,
                revive_progress.get((topic, queue_id)),
            )
        )  # fmt: skip
    return out


def _groups(
    cks: list[Checkpoint],
    messages: list[PopMessage],
    retry_copies: list[cl.MessageRecord],
    only: str | None,
) -> list[PopGroup]:
    names = sorted({c.group for c in cks} | ({only} if only and cks else set()))
    out = []
    for name in names:
        mine = [m for m in messages if m.group == name]
        counts = {s.value: sum(1 for m in mine if m.state is s) for s in PopState}
        copies = [r for r in retry_copies if retry_topic_kind(r.topic, name) == "pop_retry"]
        revived: Counter[int] = Counter()
        seen: set[str] = set()
        for m in mine:
            if m.uniq_key is not None and m.uniq_key not in seen:
                seen.add(m.uniq_key)
                if m.revived:
                    revived[m.revived] += 1
        awaiting = [m for m in mine if m.state is PopState.AWAITING_REVIVE]
        out.append(
            PopGroup(
                name,
                tuple(sorted({c.topic for c in cks if c.group == name})),
                sum(1 for c in cks if c.group == name),
                counts,
                counts[PopState.IN_FLIGHT.value] + counts[PopState.AWAITING_REVIVE.value],
                len(copies),
                dict(sorted(revived.items())),
                min(awaiting, key=lambda m: m.invisible_until) if awaiting else None,
                sum(1 for m in mine if m.revive_uncommitted),
            )
        )
    return out


def pop_outcome(group: str, pops: list[PopMessage]) -> tuple[str, str] | None:
    """What the newest pop of a copy by ``group`` says of it, for ``trace``: (outcome, words),
    or None when the group did not pop it (a push group's offset speaks for it)."""
    mine = [m for m in pops if m.group == group]
    if not mine:
        return None
    last = max(mine, key=lambda m: m.pop_time)
    where = f"{last.topic}:{last.queue_id} offset {last.queue_offset}"
    popped = f"popped {len(mine)} time(s), the last at {iso_ms(last.pop_time) or last.pop_time}"
    until = iso_ms(last.invisible_until) or last.invisible_until
    words = {
        PopState.ACKED: f"{popped}, acked",
        PopState.IN_FLIGHT: f"{popped}, not acked, invisible until {until}: in flight at {where}",
        PopState.AWAITING_REVIVE: f"{popped}, not acked, due for revive since {until}: awaiting "
        f"the revive service at {where}",
        PopState.REVIVED: f"{popped}, not acked: revived into its POP retry topic",
    }
    outcome = "consumed" if last.state is PopState.ACKED else last.state.value
    return outcome, words[last.state]
