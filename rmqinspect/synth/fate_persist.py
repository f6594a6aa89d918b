"""What the broker of a fate run (:class:`rmqinspect.synth.fate.FateSimulator`) persisted, and
the run's summary.

``consumerOffset.json`` holds each group's progress as persisted (every 5 s, and at a clean
shutdown), ``delayOffset.json`` each level's (every 10 s); ``.bak`` the generation before. One
committed offset is set past its queue's end (the ``offset_ahead`` case).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmqinspect.format import properties as props
from rmqinspect.format.fate import CHECK_GROUP, HALF_TOPIC, RETRY_PREFIX
from rmqinspect.format.javamap import java_map_order
from rmqinspect.format.pop import REVIVE_GROUP
from rmqinspect.synth.fate_model import (
    GROUP_OK,
    GROUP_POP,
    INF,
    MAX_RECONSUME_TIMES,
    TX_CHECK_INTERVAL_MS,
    TX_TIMEOUT_MS,
    fate_record,
)
from rmqinspect.synth.layout import FateSummary
from rmqinspect.synth.pop import REVIVE_TOPIC

if TYPE_CHECKING:
    from rmqinspect.synth.fate import FateSimulator

OFFSET_AHEAD_BY = 1000  # the committed offset set past the queue's max
_CONSUMER_PERSIST_MS = 5_000  # BrokerConfig.flushConsumerOffsetInterval
_DELAY_PERSIST_MS = 10_000  # MessageStoreConfig.flushDelayOffsetInterval
# A push consumer commits to the broker every persistConsumerOffsetInterval (5 s): what the
# broker persists is that much behind what was consumed (taken as half of it).
_CLIENT_COMMIT_LAG_MS = 2_500
_CONSUMER_OFFSET_TABLE_SLOTS = 1024


def _persist_times(sim: FateSimulator, interval: int, lag: int = 0) -> tuple[int, int]:
    """What the table last persisted had seen, and the generation before (the ``.bak``);
    ``lag``: how far behind the broker's copy is (a client's commit interval)."""
    periodic = sim.stop_at - (sim.stop_at - sim.start_ms) % interval
    if sim.crash:
        return periodic - lag, periodic - interval - lag
    # A clean shutdown persists once more; .bak is the last periodic generation.
    return sim.stop_at, periodic if periodic < sim.stop_at else periodic - interval


def retry_max_times(sim: FateSimulator) -> dict[str, int]:
    """``subscriptionGroup.json``'s ``retryMaxTimes`` for the failing groups: set to the
    consumers' maxReconsumeTimes, as ``updateSubGroup`` would (a 4.9 broker takes the
    client's header value anyway; 5.x POP revives read the group's)."""
    return {g: MAX_RECONSUME_TIMES for g in sim.subscriptions if g != GROUP_OK}


def consumer_offsets(
    sim: FateSimulator, topics: list[str]
) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]]:
    """``consumerOffset.json`` and its ``.bak``: each group's persisted progress (consumed
    in queue order), the check service's, and one offset past its queue's max."""
    tables: list[dict[str, dict[int, int]]] = []
    for at in _persist_times(sim, _CONSUMER_PERSIST_MS, _CLIENT_COMMIT_LAG_MS):
        table: dict[str, dict[int, int]] = {}
        for (group, topic, queue_id), times in sorted(sim.consumed.items()):
            done = next((n for n, t in enumerate(times) if t > at), len(times))
            table.setdefault(f"{topic}@{group}", {})[queue_id] = done
        for group in sim.subscriptions:
            if group != GROUP_POP:  # a push consumer registers its retry topic at 0
                table.setdefault(f"{RETRY_PREFIX}{group}@{group}", {0: 0})
        if sim.txs:
            table[f"{HALF_TOPIC}@{CHECK_GROUP}"] = {0: _check_offset(sim, at)}
        if sim.pop is not None and sim.pop.done:
            # The revive service commits on the broker: no client lag.
            revived_at = _persist_times(sim, _CONSUMER_PERSIST_MS)[len(tables)]
            table[f"{REVIVE_TOPIC}@{REVIVE_GROUP}"] = sim.pop.revive_offsets(revived_at)
        group, topic, queue_id, ahead, _ = offset_ahead(sim, topics)
        table.setdefault(f"{topic}@{group}", {})[queue_id] = ahead
        tables.append({k: table[k] for k in java_map_order(table, _CONSUMER_OFFSET_TABLE_SLOTS)})
    return tables[0], tables[1]


def offset_ahead(sim: FateSimulator, topics: list[str]) -> tuple[str, str, int, int, int]:
    """The ``offset_ahead`` case: groupOK's committed offset of TopicA queue 1 (0 with one
    queue) past the queue's end, as if taken from another broker or edited."""
    queues = sorted(q for g, t, q in sim.consumed if g == GROUP_OK and t == topics[0])
    queue_id = 1 if 1 in queues else 0
    end = len(sim.consumed.get((GROUP_OK, topics[0], queue_id), []))
    return GROUP_OK, topics[0], queue_id, end + OFFSET_AHEAD_BY, end


def _check_offset(sim: FateSimulator, at: int) -> int:
    """The check service's progress through half queue 0: past every copy it had
    processed, up to the first not yet old enough at its last run before ``at``."""
    last_run = sim.start_ms + (at - sim.start_ms) // TX_CHECK_INTERVAL_MS * TX_CHECK_INTERVAL_MS
    halves: list[tuple[int, int]] = []
    for tx in sim.txs:
        halves.append((tx.half.queue_offset, tx.half.store_timestamp))
    young = [q for q, ts in halves if ts > last_run - TX_TIMEOUT_MS]
    return min(young) if young else 1 + max(q for q, _ in halves)


def delay_offsets(sim: FateSimulator) -> tuple[dict[int, int], dict[int, int]]:
    """``delayOffset.json`` and its ``.bak``: per level used, the next offset to deliver."""
    tables: list[dict[int, int]] = []
    for at in _persist_times(sim, _DELAY_PERSIST_MS):
        tables.append(
            {
                level: next((n for n, t in enumerate(times) if t > at), len(times))
                for level, times in sorted(sim.delivered.items())
            }
        )
    return tables[0], tables[1]


def summary(sim: FateSimulator, topics: list[str]) -> FateSummary:
    states = {"committed": 0, "rolled_back": 0, "pending": 0, "given_up": 0}
    pending_tx = None
    for tx in sim.txs:
        state = tx.fate if tx.done else "pending"
        states[state] += 1
        if state == "pending" and pending_tx is None and props.UNIQ_KEY in tx.half.properties:
            pending_tx = tx.half.properties.get(props.UNIQ_KEY)
    pending = sum(t == INF or t > sim.stop_at for ts in sim.delivered.values() for t in ts)
    examples = dict(sim.examples)
    examples["pending_transaction"] = pending_tx
    examples["pending_delay"] = next(
        (
            uniq
            for (level, offset), (uniq, retry) in sorted(sim.units.items(), key=lambda u: -u[0][0])
            if uniq and not retry and sim.delivered[level][offset] > sim.stop_at
        ),
        None,
    )
    examples["retried_then_consumed"] = next(
        (
            c.properties[props.UNIQ_KEY]
            for _, c, ok in sim.deliveries
            if ok and c.reconsume_times and c.topic == sim.retry_topic
        ),
        None,
    )
    # A retry or scheduled copy a group took after its last persisted offset: after the
    # crash's restart the group is handed it again (consumed twice); a retry copy first.
    committed, _ = _persist_times(sim, _CONSUMER_PERSIST_MS, _CLIENT_COMMIT_LAG_MS)
    past = sorted(
        ((c.topic != sim.retry_topic, t), c.properties[props.UNIQ_KEY])
        for t, c, _ in sim.deliveries
        if sim.crash and committed < t <= sim.stop_at
    )
    examples["consumed_past_commit"] = past[0][1] if past else None
    # A delayed send delivered after the last persisted delayOffset: the restart delivers
    # it again (a second scheduled copy).
    persisted, _ = _persist_times(sim, _DELAY_PERSIST_MS)
    examples["delivered_past_delay_offset"] = next(
        (
            uniq
            for (level, offset), (uniq, _) in sorted(sim.units.items())
            if uniq and sim.crash and persisted < sim.delivered[level][offset] <= sim.stop_at
        ),
        None,
    )
    return FateSummary(
        chains=len(sim.failed_chains),
        schedule=sim.counts["schedule"],
        scheduled_delivery=sim.counts["scheduled_delivery"],
        retry_schedule=sim.counts["retry_schedule"],
        retry=sim.counts["retry"],
        dlq=sim.counts["dlq"],
        pop_retry=sim.counts["pop_retry"],
        pending_delays=pending,
        transactions=states,
        half_checks=sim.half_checks,
        op_records=sim.op_records,
        commit_records=sim.commit_records,
        offset_ahead=offset_ahead(sim, topics),
        examples=examples,
        trace_messages=len(sim.traces.messages),
        records=tuple(fate_record(c) for c in sim.truth),
        deliveries=tuple(sim.delivery_log),
        traces=tuple(sim.traces.messages),
        pop=() if sim.pop is None else sim.pop.truths(),
        transaction_states={
            uniq: tx.fate if tx.done else "pending"
            for tx in sim.txs
            if (uniq := tx.half.properties.get(props.UNIQ_KEY)) is not None
        },
    )
