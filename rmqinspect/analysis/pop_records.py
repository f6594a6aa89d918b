"""The POP records ``pop`` reads: checkpoints and acks found by one commitlog walk in the revive
topics and in the timer, decoded (:mod:`rmqinspect.format.pop`) and merged as
``PopReviveService.consumeReviveMessage`` merges them; what is malformed is a finding."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from rmqinspect.analysis import Progress
from rmqinspect.analysis.messages import ForensicWalk, SkippedRange
from rmqinspect.errors import DecodeError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import pop
from rmqinspect.format import properties as props
from rmqinspect.format.columns import decode_text
from rmqinspect.format.fate import RETRY_PREFIX, int_property
from rmqinspect.format.timer import TIMER_TOPIC
from rmqinspect.store.model import Store


class FindingKind(StrEnum):
    CK_MALFORMED = "ck_malformed"  # a ck body that is no PopCheckPoint
    ACK_MALFORMED = "ack_malformed"  # an ack/bAck body that is no AckMsg/BatchAckMsg
    CK_BITMAP_BEYOND_NUM = "ck_bitmap_beyond_num"  # bits set past n, or n outside 1..32
    CK_DIFF_LENGTH = "ck_diff_length"  # d (queueOffsetDiff) not n long
    ACK_WITHOUT_CK = "ack_without_ck"  # no checkpoint on disk has the ack's merge key
    ACK_OUTSIDE_CK = "ack_outside_ck"  # the ack offset is none of its checkpoint's messages
    REVIVE_TAG_UNKNOWN = "revive_tag_unknown"  # a revive-topic record tagged neither ck nor ack
    OVERDUE = "overdue"  # awaiting revive longer than the threshold
    REVIVE_UNCOMMITTED = "revive_uncommitted"  # revived, the progress not persisted past it


# What is inconsistent on disk, as opposed to what only waits too long (exit 1 for either) or
# what a restart repeats (said, not gated on: the broker's own behaviour after a crash).
INCONSISTENT = frozenset(FindingKind) - {FindingKind.OVERDUE, FindingKind.REVIVE_UNCOMMITTED}


@dataclass(frozen=True, slots=True)
class PopFinding:
    kind: FindingKind
    position: int  # the record the finding is about (physical offset)
    group: str | None
    detail: str


@dataclass(slots=True)
class Checkpoint:
    """One checkpoint (``PopCheckPoint``) as the revive service merges it."""

    group: str
    topic: str
    queue_id: int
    start_offset: int
    num: int
    pop_time: int
    invisible_time: int
    revive_time: int
    queue_offset_diff: tuple[int, ...] | None
    bit_map: int  # as stored
    merged_bit_map: int  # with the acks found on disk
    broker_name: str | None
    re_put_times: str | None
    timer_position: int | None  # its record in rmq_sys_wheel_timer
    revive_position: int | None  # its record in the revive topic (None: still in the timer)
    revive_topic: str | None
    revive_queue_id: int | None
    revive_queue_offset: int | None
    ack_positions: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Stored:
    """A ck or ack record, where it is: the revive topic, or the timer (with REAL_*)."""

    record: cl.MessageRecord
    revive_topic: str
    revive_queue_id: int
    in_timer: bool


@dataclass(slots=True)
class Records:
    stored: list[Stored] = field(default_factory=list)
    retry_copies: list[cl.MessageRecord] = field(default_factory=list)
    newest: int | None = None
    skipped: list[SkippedRange] = field(default_factory=list)


def ck_position(ck: Checkpoint) -> int:
    for p in (ck.timer_position, ck.revive_position):
        if p is not None:
            return p
    return -1


def walk(store: Store, progress: Progress | None) -> Records:
    """The revive-topic records, the timer's records bound for a revive topic and the POP retry
    copies (``%RETRY%`` records with ``1ST_POP_TIME``), in one forensic walk."""
    out = Records()
    walk = ForensicWalk()
    for cols in walk.runs(store, progress):
        ids, topics = cols.topic_ids()
        names = [decode_text(t) for t in topics]
        revive = [i for i, n in enumerate(names) if pop.is_revive_topic(n)]
        for rec in cols.records(np.flatnonzero(np.isin(ids, revive)), with_body=True):
            out.stored.append(Stored(rec, rec.topic, rec.queue_id, False))
        timer_rows = np.flatnonzero(
            np.isin(ids, [i for i, n in enumerate(names) if n == TIMER_TOPIC])
        )
        if len(timer_rows):
            real = cols.property_values(props.REAL_TOPIC, timer_rows)
            bound = timer_rows[[pop.is_revive_topic(t) for t in real]]
            for rec in cols.records(bound, with_body=True):
                qid = int_property(rec.properties, props.REAL_QID)
                out.stored.append(
                    Stored(rec, rec.properties[props.REAL_TOPIC], -1 if qid is None else qid, True)
                )
        retry_rows = np.flatnonzero(
            np.isin(ids, [i for i, n in enumerate(names) if n.startswith(RETRY_PREFIX)])
        )
        if len(retry_rows):
            first = cols.property_values(pop.FIRST_POP_TIME, retry_rows)
            popped = retry_rows[[v is not None for v in first]]
            out.retry_copies.extend(cols.records(popped, with_body=False))
    out.skipped, out.newest = walk.skipped, walk.newest
    out.stored = [
        Stored(store.with_entry(s.record), s.revive_topic, s.revive_queue_id, s.in_timer)
        for s in out.stored
    ]
    return out


@dataclass(slots=True)
class QueueCounts:
    checkpoints: int = 0
    acks: int = 0
    cancels: int = 0
    max_offset: int = 0


def decode(
    stored: list[Stored], findings: list[PopFinding]
) -> tuple[dict[str, Checkpoint], list[tuple[Stored, pop.Ack]], dict[tuple[str, int], QueueCounts]]:
    cks: dict[str, Checkpoint] = {}
    acks: list[tuple[Stored, pop.Ack]] = []
    queues: dict[tuple[str, int], QueueCounts] = {}
    for s in stored:
        rec = s.record
        q = None
        if not s.in_timer:
            q = queues.setdefault((s.revive_topic, s.revive_queue_id), QueueCounts())
            q.max_offset = max(q.max_offset, rec.queue_offset + 1)
        body = rec.body or b""
        tag = rec.tags
        try:
            if tag == pop.CK_TAG:
                if pop.is_cancel(body):
                    if q is not None:
                        q.cancels += 1
                    continue
                ck = pop.decode_checkpoint(body)
                if q is not None:
                    q.checkpoints += 1
                add_checkpoint(cks, ck, s, findings)
            elif tag in (pop.ACK_TAG, pop.BATCH_ACK_TAG):
                ack = pop.decode_ack(body, tag == pop.BATCH_ACK_TAG)
                if q is not None:
                    q.acks += 1
                acks.append((s, ack))
            elif not s.in_timer:
                findings.append(
                    PopFinding(
                        FindingKind.REVIVE_TAG_UNKNOWN,
                        rec.position,
                        None,
                        f"record in {rec.topic}:{rec.queue_id} tagged {tag!r}: the revive "
                        "service skips it",
                    )
                )
        except DecodeError as err:
            kind = FindingKind.CK_MALFORMED if tag == pop.CK_TAG else FindingKind.ACK_MALFORMED
            where = "timer record" if s.in_timer else f"{rec.topic}:{rec.queue_id}"
            findings.append(
                PopFinding(
                    kind,
                    rec.position,
                    None,
                    f"{where} offset {rec.queue_offset}: {err.message} "
                    "(the revive service drops it)",
                )
            )
    return cks, acks, queues


def add_checkpoint(
    cks: dict[str, Checkpoint], ck: pop.CheckPoint, s: Stored, findings: list[PopFinding]
) -> None:
    rec = s.record
    known = cks.get(ck.merge_key)
    if known is None:
        known = Checkpoint(
            ck.group, ck.topic, ck.queue_id, ck.start_offset, ck.num, ck.pop_time,
            ck.invisible_time, ck.revive_time, ck.queue_offset_diff, ck.bit_map, ck.bit_map,
            ck.broker_name,
            ck.re_put_times, None, None, None, None, None,
        )  # fmt: skip
        cks[ck.merge_key] = known
        check_shape(ck, rec.position, findings)
    known.merged_bit_map |= ck.bit_map
    if ck.re_put_times is not None:
        known.re_put_times = ck.re_put_times
    if s.in_timer:
        known.timer_position = rec.position
    else:
        known.revive_position = rec.position
        known.revive_topic = s.revive_topic
        known.revive_queue_id = s.revive_queue_id
        known.revive_queue_offset = rec.queue_offset


def check_shape(ck: pop.CheckPoint, position: int, findings: list[PopFinding]) -> None:
    unsigned = ck.bit_map & 0xFFFFFFFF
    if not 0 < ck.num <= pop.BITMAP_BITS or unsigned >> max(ck.num, 0):
        findings.append(
            PopFinding(
                FindingKind.CK_BITMAP_BEYOND_NUM,
                position,
                ck.group,
                f"n={ck.num}, bm={unsigned:#x}: a bitmap of {pop.BITMAP_BITS} bits covers n "
                "messages (1..32); bits past n name no message",
            )
        )
    if ck.queue_offset_diff and len(ck.queue_offset_diff) != ck.num:
        findings.append(
            PopFinding(
                FindingKind.CK_DIFF_LENGTH,
                position,
                ck.group,
                f"d holds {len(ck.queue_offset_diff)} offsets for n={ck.num} messages",
            )
        )


def merge(
    cks: dict[str, Checkpoint], acks: list[tuple[Stored, pop.Ack]], findings: list[PopFinding]
) -> None:
    """``consumeReviveMessage``: each ack sets its checkpoint's bit; the timer's copy and the
    delivered copy of one ack count once."""
    seen: set[tuple[str, int]] = set()
    for s, ack in acks:
        ck = cks.get(ack.merge_key)
        pos = s.record.position
        if ck is None:
            findings.append(
                PopFinding(
                    FindingKind.ACK_WITHOUT_CK,
                    pos,
                    ack.group,
                    f"{'bAck' if ack.batch else 'ack'} for {ack.topic}:{ack.queue_id} start "
                    f"{ack.start_offset} popped at {ack.pop_time}: no checkpoint on disk has "
                    "its merge key (lost, or merged in the broker's memory and never written)",
                )
            )
            continue
        ck.ack_positions.append(pos)
        for offset in ack.ack_offsets:
            if (ack.merge_key, offset) in seen:
                continue
            seen.add((ack.merge_key, offset))
            index = pop.index_of(ck.start_offset, ck.num, ck.queue_offset_diff, offset)
            if not 0 <= index < pop.BITMAP_BITS:
                findings.append(
                    PopFinding(
                        FindingKind.ACK_OUTSIDE_CK,
                        pos,
                        ack.group,
                        f"ack offset {offset} is none of the checkpoint's {ck.num} message(s) "
                        f"from {ck.start_offset} ({ck.topic}:{ck.queue_id})",
                    )
                )
                continue
            ck.merged_bit_map |= 1 << index


def has_pop_records(store: Store) -> bool:
    """Whether the store has a revive queue or timer queue that could hold POP records (so a
    reader may skip the walk where there is none)."""
    return any(pop.is_revive_topic(q.topic) or q.topic == TIMER_TOPIC for q in store.queue_dirs)
