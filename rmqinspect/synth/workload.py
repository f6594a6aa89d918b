"""A seeded, deterministic workload that looks like the real-broker conformance stores.

The mix follows the corpus generator (``conformance/README.md`` "Workload"): topics ``TopicA``..
with several queues, keys ``K<x>-<seq>`` alone, with ``ORD-<n>``, with ``HOT`` or after a Chinese
key, tags including an absent and a non-ASCII one, ``UNIQ_KEY`` in the real client layout (32 hex
characters for an IPv4 producer, 56 for IPv6), bodies of several kinds (text, Chinese, binary,
empty), IPv6 born and store hosts, delay messages, transactional half, PREPARED, COMMIT and
ROLLBACK records, retries in ``%RETRY%<group>`` and, on 5.x, topics longer than 127 characters.
Bodies of 4 KiB and more are stored compressed, as the producer of the profile's line sends them
(:mod:`rmqinspect.format.compression`).

Random choices come from the raw output of numpy's PCG64 bit generator, whose stream numpy keeps
stable across releases, turned into choices by plain integer arithmetic: the same seed gives the
same bytes on every machine. Draws are made a batch at a time and every body is taken from a
small pre-built pool, so the per-message Python work stays small (a 1 GiB store takes seconds).

What to generate, :class:`WorkloadConfig`, is :mod:`rmqinspect.synth.workload_config`'s (callers
import it from here, with :func:`write_workload`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from rmqinspect.format import properties as props
from rmqinspect.format.commitlog import (
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    parse_delay_levels,
)
from rmqinspect.format.compression import compress, compression_flags
from rmqinspect.format.encode import rewrite_delay
from rmqinspect.format.fate import CHECK_GROUP, HALF_TOPIC, RETRY_PREFIX
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.format.index_build import IndexNamer
from rmqinspect.format.javamap import java_map_order
from rmqinspect.format.profile import Profile
from rmqinspect.format.properties import encode_properties_map, properties_template
from rmqinspect.synth import fate_persist
from rmqinspect.synth.batchcq import write_batches
from rmqinspect.synth.clientid import ClientIds
from rmqinspect.synth.fate import FATE_DELAY_LEVELS, FateSimulator
from rmqinspect.synth.fate_model import TX_PRODUCER_GROUP
from rmqinspect.synth.timer import TimerWorkload
from rmqinspect.synth.workload_config import WorkloadConfig as WorkloadConfig
from rmqinspect.synth.workload_config import topic_name as topic_name
from rmqinspect.synth.writer import (
    MessageColumns,
    StoreLayout,
    StoreSummary,
    StoreWriter,
)

TX_TOPIC = "TopicTx"
RETRY_GROUP = "groupX"
_BATCH = 8192
_FIRST_BATCH = 64  # batches double up to _BATCH, so small stores still see retries of earlier ones
_CONSUMER_OFFSET_TABLE_SLOTS = 1024  # new ConcurrentHashMap<>(512) sizes its table to 1024

# Message kinds, drawn per message.
_NORMAL, _DELAY, _HALF, _PREPARED, _COMMIT, _ROLLBACK, _RETRY, _V2 = range(8)
# Cumulative thresholds out of 65536 for the special kinds (the rest is _NORMAL).
_KIND_THRESHOLDS = (
    (_RETRY, 4588),  # 7 %
    (_DELAY, 7209),  # 4 %
    (_HALF, 8520),  # 2 %
    (_PREPARED, 9830),  # 2 %
    (_COMMIT, 11469),  # 2.5 %
    (_ROLLBACK, 11796),  # 0.5 %
    (_V2, 15728),  # 6 %, 5.x only
)


# With --fate, retries come from the consumers and every transaction starts as a half; the
# standalone kinds' rolls stay plain messages.
_NOT_WITH_FATE = frozenset((_RETRY, _PREPARED, _COMMIT, _ROLLBACK))


def _kind_table(special: bool, v2: bool, fate: bool = False) -> bytes:
    """Message kind for each 16-bit roll (a lookup instead of a search per message)."""
    table = bytearray(65536)
    if special:
        low = 0
        for kind, threshold in _KIND_THRESHOLDS:
            # without V2 topics those rolls stay plain messages
            if (kind != _V2 or v2) and not (fate and kind in _NOT_WITH_FATE):
                table[low:threshold] = bytes([kind]) * (threshold - low)
            low = threshold
    return bytes(table)


_TAGS = ("TagA", "TagB", "TagC", "标签甲", None)
_DELAY_LEVELS = (17, 18)
_CARRIED = (props.TAGS, props.KEYS, props.UNIQ_KEY)
# Property names of a plain message for each shape (bit 0 TAGS, 1 KEYS, 2 WAIT, 3 traceId,
# 4 中文属性, 5 UNIQ_KEY; seq is always there), in the producer's insertion order.
_SHAPE_NAMES = [
    tuple(
        name
        for bit, name in (
            (1, props.TAGS),
            (2, props.KEYS),
            (4, props.WAIT),
            (8, "traceId"),
            (16, "中文属性"),
            (0, "seq"),
            (32, props.UNIQ_KEY),
        )
        if not bit or shape & bit
    )
    for shape in range(64)
]


@dataclass(slots=True)
class _Recent:
    """A plain message of an earlier batch, which retries copy (its keys, UNIQ_KEY and tags
    travel along; ORIGIN_MESSAGE_ID names its offset)."""

    topic: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    store_host: HostAddress | None = None
    offset: int = 0


class _Draws:
    """Random words from PCG64's raw stream, a batch at a time."""

    def __init__(self, seed: int) -> None:
        self._bits = np.random.PCG64(seed)

    def raw(self, count: int, columns: int) -> npt.NDArray[np.uint64]:
        return self._bits.random_raw(count * columns).reshape(count, columns)

    def words(self, count: int, columns: int) -> list[list[int]]:
        return [col.tolist() for col in self.raw(count, columns).T]

    def bytes(self, count: int) -> bytes:
        words = self._bits.random_raw((count + 7) // 8)
        return words.astype("<u8").tobytes()[:count]


def _body_pool(draws: _Draws, size: int) -> list[bytes]:
    """Bodies of ``size`` bytes: ASCII text, Chinese text (whole characters, space padded) and
    random binary, four of each."""
    words = ("rocketmq", "store", "commitlog", "queue", "offset", "index", "broker", "message")
    pool: list[bytes] = []
    for variant in range(4):
        text = " ".join(words[(variant + i) % len(words)] for i in range(size // 6 + 1))
        pool.append(text.encode("ascii")[:size])
        chinese = ("消息内容第" + str(variant) + "号，中文正文。") * (size // 20 + 1)
        encoded = chinese.encode("utf-8")[:size]
        encoded = encoded.decode("utf-8", "ignore").encode("utf-8")
        pool.append(encoded + b" " * (size - len(encoded)))
        pool.append(draws.bytes(size))
    return pool


def _v2_topic(length: int) -> str:
    head = f"TopicV2-{length}-"
    return head + "x" * (length - len(head))


def _field(word: npt.NDArray[np.uint64], shift: int, bits: int) -> npt.NDArray[np.int64]:
    return ((word >> np.uint64(shift)) & np.uint64((1 << bits) - 1)).astype(np.int64)


class _Generator:
    """Turns draws into batches of :class:`MessageColumns` for the writer.

    Retries and transaction commits refer to messages of earlier batches, whose offsets the
    writer has returned (a retry or a commit comes after its original anyway).
    """

    def __init__(self, config: WorkloadConfig, layout: StoreLayout) -> None:
        self.config = config
        self.trailing = layout.profile.properties_trailing_separator
        self.max_delay_level = max(parse_delay_levels(layout.delay_levels), default=0)
        self.draws = _Draws(config.seed)
        prefix = self.draws.words(1, 4)
        pid, loader = prefix[0][0] & 0xFFFF, prefix[1][0] & 0xFFFFFFFF
        tail = f"{pid:04X}{loader:08X}"
        self.producers = (
            ClientIds("0A000002" + tail),
            ClientIds("FD000000000000000000000000000002" + tail),
        )
        self.topics = [topic_name(i) for i in range(config.topics)]
        # Topic table: the plain topics, then the special ones (ids fixed by position).
        self.v2_enabled = config.special and layout.profile.accepts_v2_magic
        self.topic_table = [
            *self.topics,
            HALF_TOPIC,
            TX_TOPIC,
            RETRY_PREFIX + RETRY_GROUP,
            SCHEDULE_TOPIC,
            *((_v2_topic(128), _v2_topic(200)) if self.v2_enabled else ()),
        ]
        self.topic_ids = {name: n for n, name in enumerate(self.topic_table)}
        # Host table: born IPv4, born IPv6, store IPv4, store IPv6.
        self.hosts = (
            HostAddress(bytes([10, 0, 0, 2]), 50001),
            HostAddress(bytes.fromhex("fd000000000000000000000000000002"), 50002),
            HostAddress(bytes([10, 0, 0, 1]), 10911),
            HostAddress(bytes.fromhex("fd000000000000000000000000000001"), 10911),
        )
        size = config.body_size
        # Body table: the empty body, then pools of the full, half and one-and-a-half size.
        pools = [_body_pool(self.draws, n) for n in (size, size // 2, size + size // 2)]
        sent = [b"", *pools[0], *pools[1], *pools[2]]
        # Stored as the producer sends them: compressed from compressMsgBodyOverHowmuch on,
        # with the sysFlag bits saying so (a retry, a delay or a transaction keeps them).
        flags = compression_flags(config.compress_type, layout.profile is not Profile.V4_9)
        compressed = [len(b) >= config.compress_over for b in sent]
        self.bodies = [
            compress(b, config.compress_type) if c else b
            for b, c in zip(sent, compressed, strict=True)
        ]
        self.body_flags = np.array([flags if c else 0 for c in compressed], np.int64)
        self.pool_size = len(pools[0])
        self.kinds = _kind_table(config.special, self.v2_enabled, config.fate)
        self.fate: FateSimulator | None = None
        if config.fate:
            self.fate = FateSimulator(
                config.seed,
                layout.profile,
                self.topics,
                parse_delay_levels(layout.delay_levels),
                layout.store_host,
                config.start_ms,
                config.crash,
                config.pop,
            )
        self.templates: dict[int, tuple[str, Callable[[Sequence[str]], tuple[str, ...]]]] = {}
        self.recent = _Recent()
        self.half_offsets: list[int] = []
        self.clock = config.start_ms

    def write(self, writer: StoreWriter) -> None:
        config = self.config
        total = config.messages
        fate = self.fate
        # With fate (or timers) the crash comes later, its undispatched tail is the fate's
        # (the timers') last records.
        crashed = config.crash and fate is None and not config.timers
        undispatched_from = total - min(config.burst, total // 10) if crashed else total
        base = 0
        batch = _FIRST_BATCH
        while base < total:
            count = min(batch, total - base)
            columns, normal_rows = self._batch(base, count, undispatched_from)
            if fate is None:
                offsets = writer.put_columns(columns).physical_offset
            else:
                offsets = fate.put_batch(writer, columns)
            self._remember(columns, offsets, normal_rows)
            base += count
            batch = min(batch * 2, _BATCH)
        if fate is not None:
            fate.finish(writer)

    def _remember(
        self,
        columns: MessageColumns,
        offsets: npt.NDArray[np.int64],
        normal_rows: list[tuple[int, tuple[str, ...], list[str]]],
    ) -> None:
        half = self.topic_ids[HALF_TOPIC]
        self.half_offsets += offsets[np.asarray(columns.topic) == half].tolist()
        if normal_rows:
            row, names, values = normal_rows[-1]
            recent = self.recent
            recent.topic = columns.topics[int(columns.topic[row])]
            recent.properties = dict(zip(names, values, strict=True))
            recent.store_host = columns.hosts[int(columns.store_host[row])]
            recent.offset = int(offsets[row])

    def _batch(
        self, base: int, count: int, undispatched_from: int
    ) -> tuple[MessageColumns, list[tuple[int, tuple[str, ...], list[str]]]]:
        """``count`` messages from sequence number ``base``: every random choice is drawn with
        numpy for the whole batch; only the properties are built message by message."""
        config = self.config
        raw = self.draws.raw(count, 4)
        w0, w1, w2, w3 = (raw[:, k] for k in range(4))
        seqs = np.arange(base, base + count, dtype=np.int64)
        pause = np.where((seqs % config.burst == 0) & (seqs > 0), config.burst_pause_ms, 0)
        store_ts = self.clock + np.cumsum(1 + _field(w0, 16, 1) + pause)
        self.clock = int(store_ts[-1])
        born_ts = store_ts - _field(w0, 17, 2)
        special = config.special
        kinds = np.frombuffer(self.kinds, dtype=np.uint8)[_field(w0, 0, 16)]
        topic = _field(w0, 20, 16) % config.topics
        queue_id = _field(w0, 36, 16) % config.queues
        body_roll = _field(w2, 0, 8)
        pool_pick = _field(w2, 8, 8) % self.pool_size
        body = np.where(
            body_roll < 3,
            0,
            1
            + pool_pick
            + self.pool_size * np.where(body_roll < 13, 1, np.where(body_roll < 23, 2, 0)),
        )
        born_host = ((_field(w2, 16, 8) < 38) & special).astype(np.int64)
        store_host = 2 + ((_field(w2, 24, 8) < 26) & special).astype(np.int64)
        flag = np.where(_field(w2, 48, 8) < 26, _field(w2, 32, 16), 0)
        sys_flag = self.body_flags[body]
        reconsume = np.zeros(count, dtype=np.int64)
        prepared = np.zeros(count, dtype=np.int64)

        kind_of = kinds.tolist()
        topic_of = topic.tolist()
        key_rolls = _field(w1, 0, 8).tolist()
        tag_index = (_field(w1, 8, 8) % len(_TAGS)).tolist()
        waits = (_field(w1, 16, 8) < 205).tolist()
        traces = (_field(w1, 24, 8) < 77).tolist()
        chinese = (_field(w1, 32, 8) < 26).tolist()
        uniq_rolls = _field(w1, 40, 8).tolist()
        words = w3.tolist()
        born_of = born_ts.tolist()
        topics, producers = self.topics, self.producers
        properties: list[bytes] = []
        tags_of: list[str | None] = []
        delays: list[str | None] = []
        keys: list[str] = []
        key_owner: list[int] = []
        normal_rows: list[tuple[int, tuple[str, ...], list[str]]] = []
        trailing = self.trailing
        templates = self.templates
        fate = self.fate is not None
        for k in range(count):
            seq = base + k
            letter = topics[topic_of[k]][5:]
            key_roll = key_rolls[k]
            tags = _TAGS[tag_index[k]]
            # Names in a producer's insertion order: TAGS and KEYS (Message constructor), user
            # properties, then UNIQ_KEY at send time; the shape bits say which are present.
            values: list[str] = []
            shape = 0
            if tags is not None:
                values.append(tags)
                shape = 1
            if key_roll < 166:
                if key_roll < 64:
                    owned = [f"K{letter}-{seq}"]
                elif key_roll < 115:
                    owned = [f"K{letter}-{seq}", f"ORD-{seq // 7}"]
                elif key_roll < 140:
                    owned = [f"K{letter}-{seq}", f"ORD-{seq // 7}", "HOT"]
                else:
                    owned = [f"订单-{seq}", f"K{letter}-{seq}"]
                values.append(" ".join(owned))
                shape |= 2
            else:
                owned = []
            if waits[k]:
                values.append("true")
                shape |= 4
            if traces[k]:
                values.append(f"tr-{seq}")
                shape |= 8
            if chinese[k]:
                values.append(f"值{seq % 100}")
                shape |= 16
            values.append(str(seq))
            uniq_roll = uniq_rolls[k]
            # With fate a transaction always has a UNIQ_KEY (its copies are linked by it).
            if not special or uniq_roll >= 52 or (fate and kind_of[k] == _HALF):
                uniq = producers[0].next_id(born_of[k])
            elif uniq_roll >= 26:
                uniq = producers[1].next_id(born_of[k])
            else:
                uniq = ""
            if uniq:
                values.append(uniq)
                shape |= 32
                owned.insert(0, uniq)
            names = _SHAPE_NAMES[shape]
            kind = kind_of[k]
            delay = None
            if kind == _NORMAL:
                template = templates.get(shape)
                if template is None:
                    template = templates[shape] = properties_template(names, trailing)
                fmt, order = template
                properties.append((fmt % order(values)).encode("utf-8"))
                normal_rows.append((k, names, values))
            else:
                user = dict(zip(names, values, strict=True))
                delay = self._special(
                    k, kind, words[k], user, topic, queue_id, sys_flag, reconsume, prepared
                )
                properties.append(encode_properties_map(user, trailing))
                tags = user.get("TAGS")
                carried = user.get("UNIQ_KEY")
                owned = [carried] if carried else []
                owned += props.split_keys(user.get("KEYS"))
            tags_of.append(tags)
            delays.append(delay)
            keys += owned
            key_owner += [k] * len(owned)
        columns = MessageColumns(
            topics=self.topic_table,
            topic=topic,
            queue_id=queue_id,
            properties=properties,
            tags=tags_of,
            delay=delays,
            keys=keys,
            key_owner=np.array(key_owner, dtype=np.int64),
            bodies=self.bodies,
            body=body,
            hosts=self.hosts,
            born_host=born_host,
            store_host=store_host,
            born_timestamp=born_ts,
            store_timestamp=store_ts,
            sys_flag=sys_flag,
            flag=flag,
            reconsume_times=reconsume,
            prepared_offset=prepared,
            dispatch=seqs < undispatched_from,
        )
        return columns, normal_rows

    def _special(
        self,
        k: int,
        kind: int,
        word: int,
        user: dict[str, str],
        topic: npt.NDArray[np.int64],
        queue_id: npt.NDArray[np.int64],
        sys_flag: npt.NDArray[np.int64],
        reconsume: npt.NDArray[np.int64],
        prepared: npt.NDArray[np.int64],
    ) -> str | None:
        """Turn message ``k`` into a special kind; returns its ``DELAY`` if it has one."""
        ids = self.topic_ids
        if kind == _DELAY:
            if self.fate is None:
                level = str(_DELAY_LEVELS[word & 1])
            else:  # levels delivered within the run, and ones still pending at its end
                level = str(FATE_DELAY_LEVELS[(word >> 1) % len(FATE_DELAY_LEVELS)])
                user[props.WAIT] = "true"  # the Message constructor's default
            user["DELAY"] = level
            name = self.topic_table[int(topic[k])]
            new_topic, new_queue = rewrite_delay(
                user, name, int(queue_id[k]), level, self.max_delay_level
            )
            topic[k], queue_id[k] = ids[new_topic], new_queue
            return user["DELAY"]
        if kind == _HALF:
            topic[k], queue_id[k] = ids[HALF_TOPIC], 0
            user[props.TRAN_MSG] = "true"
            user[props.REAL_TOPIC] = TX_TOPIC
            user[props.REAL_QID] = "0"
            user[props.PGROUP] = TX_PRODUCER_GROUP
        elif kind in (_PREPARED, _COMMIT, _ROLLBACK):
            topic[k], queue_id[k] = ids[TX_TOPIC], 0
            user[props.TRAN_MSG] = "true"
            user[props.PGROUP] = TX_PRODUCER_GROUP
            if kind == _PREPARED:
                sys_flag[k] |= TRANSACTION_PREPARED_TYPE
            elif kind == _ROLLBACK:
                sys_flag[k] |= TRANSACTION_ROLLBACK_TYPE
            else:
                sys_flag[k] |= TRANSACTION_COMMIT_TYPE
                halves = self.half_offsets
                if halves:
                    prepared[k] = halves[(word >> 8) % len(halves)]
        elif kind == _RETRY:
            recent = self.recent
            topic[k], queue_id[k] = ids[RETRY_PREFIX + RETRY_GROUP], 0
            reconsume[k] = 1 + (word & 3) % 3
            # A retry is a copy: the original's tags, keys and UNIQ_KEY travel with it.
            for name in _CARRIED:
                user.pop(name, None)
            original = recent.properties
            user.update((name, original[name]) for name in _CARRIED if name in original)
            user[props.RETRY_TOPIC] = recent.topic or self.topics[0]
            user[props.ORIGIN_MESSAGE_ID] = encode_offset_msg_id(
                recent.store_host or self.hosts[2], recent.offset
            )
            user[props.MAX_RECONSUME_TIMES] = "16"
        elif kind == _V2:
            length = 128 if word & 1 else 200
            topic[k] = ids[_v2_topic(length)]
            queue_id[k] = (word >> 1) & 1 if length == 200 else 0
        return None


def _consumer_offsets(
    writer: StoreWriter, config: WorkloadConfig, draws: _Draws
) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]]:
    """Plausible progress: each subscribed queue a few messages behind its end; the ``.bak``
    generation five more behind."""
    ends = writer.next_queue_offsets()
    subscriptions: dict[str, dict[int, int]] = {}
    for (topic, queue_id), end in sorted(ends.items()):
        if topic.startswith("Topic") and topic != TX_TOPIC and not topic.startswith("TopicV2"):
            group = "groupX" if (ord(topic[-1]) - ord("A")) % 2 == 0 else "groupY"
        elif topic == RETRY_PREFIX + RETRY_GROUP:
            group = RETRY_GROUP
        elif topic == HALF_TOPIC:
            group = CHECK_GROUP
        else:
            continue
        subscriptions.setdefault(f"{topic}@{group}", {})[queue_id] = end
    lags = draws.words(max(1, sum(map(len, subscriptions.values()))), 1)[0]
    current: dict[str, dict[int, int]] = {}
    previous: dict[str, dict[int, int]] = {}
    n = 0
    for key in java_map_order(subscriptions, _CONSUMER_OFFSET_TABLE_SLOTS):
        current[key], previous[key] = {}, {}
        for queue_id, end in sorted(subscriptions[key].items()):
            offset = max(0, end - int(lags[n] % 9))
            n += 1
            current[key][queue_id] = offset
            previous[key][queue_id] = max(0, offset - 5)
    return current, previous


def write_workload(
    root: str | os.PathLike[str],
    config: WorkloadConfig,
    layout: StoreLayout | None = None,
    *,
    index_namer: IndexNamer | None = None,
) -> StoreSummary:
    """Generate ``config`` into the new store directory ``root``."""
    layout = layout or StoreLayout()
    generator = _Generator(config, layout)
    with StoreWriter(
        root,
        layout,
        index_namer=index_namer,
        crash=config.crash,
        flush_lag_ms=config.checkpoint_lag_ms,
    ) as writer:
        if config.batch_records:
            # first: a crash stops dispatch at the workload's last burst, after which the
            # writer takes no dispatched record
            write_batches(
                writer, config.batch_records, config.queues, config.body_size, config.start_ms
            )
        generator.write(writer)
        timers = None
        if config.timers:
            start = writer.last_store_timestamp
            timers = TimerWorkload(
                writer, topic_name(0), config.queues, config.timers, start, crash=config.crash
            )
            timers.run()
        fate = generator.fate
        if fate is None:
            current, previous = _consumer_offsets(writer, config, generator.draws)
            writer.set_consumer_offsets(current, previous)
            summary = writer.close()
        else:
            writer.set_consumer_offsets(*fate_persist.consumer_offsets(fate, generator.topics))
            writer.set_delay_offsets(*fate_persist.delay_offsets(fate))
            writer.set_retry_max_times(fate_persist.retry_max_times(fate))
            summary = replace(writer.close(), fate=fate_persist.summary(fate, generator.topics))
        if timers is None:
            return summary
        return replace(summary, timers=timers.write())
