"""A seeded, deterministic workload that looks like the real-broker conformance stores.

The mix follows the corpus generator (``conformance/README.md`` "Workload"): topics ``TopicA``..
with several queues, keys ``K<x>-<seq>`` alone, with ``ORD-<n>``, with ``HOT`` or after a Chinese
key, tags including an absent and a non-ASCII one, ``UNIQ_KEY`` in the real client layout (32 hex
characters for an IPv4 producer, 56 for IPv6), bodies of several kinds (text, Chinese, binary,
empty), IPv6 born and store hosts, delay messages, transactional half, PREPARED, COMMIT and
ROLLBACK records, retries in ``%RETRY%<group>`` and, on 5.x, topics longer than 127 characters.

Random choices come from the raw output of numpy's PCG64 bit generator, whose stream numpy keeps
stable across releases, turned into choices by plain integer arithmetic: the same seed gives the
same bytes on every machine. Draws are made a batch at a time and every body is taken from a
small pre-built pool, so the per-message Python work stays small (a 1 GiB store takes seconds).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from rmqinspect.format import properties as props
from rmqinspect.format.commitlog import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import encode_offset_msg_id
from rmqinspect.format.profile import Profile
from rmqinspect.synth.writer import (
    DEFAULT_CLOCK_START_MS,
    IndexNamer,
    MessageSpec,
    StoreLayout,
    StoreSummary,
    StoreWriter,
    java_map_order,
)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TX_TOPIC = "TopicTx"
TX_PRODUCER_GROUP = "PID_TX"
TX_CHECK_GROUP = "CID_RMQ_SYS_TRANS"
RETRY_GROUP = "groupX"
DEFAULT_CRASH_FLUSH_LAG_MS = 4500
_BATCH = 4096
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


def _kind_table(special: bool, v2: bool) -> bytes:
    """Message kind for each 16-bit roll (a lookup instead of a search per message)."""
    table = bytearray(65536)
    if special:
        low = 0
        for kind, threshold in _KIND_THRESHOLDS:
            if kind != _V2 or v2:  # without V2 topics those rolls stay plain messages
                table[low:threshold] = bytes([kind]) * (threshold - low)
            low = threshold
    return bytes(table)


_TAGS = ("TagA", "TagB", "TagC", "标签甲", None)
_DELAY_LEVELS = (17, 18)
_CARRIED = (props.TAGS, props.KEYS, props.UNIQ_KEY)


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """What to generate. ``special=False`` writes only plain messages to ``TopicA``...;
    ``crash`` stops dispatch before the last burst and leaves the store as a killed broker
    does (``abort``, a lagging checkpoint, the pre-allocated next commitlog file)."""

    messages: int = 2000
    body_size: int = 512
    topics: int = 3
    queues: int = 4
    seed: int = 42
    crash: bool = False
    special: bool = True
    start_ms: int = DEFAULT_CLOCK_START_MS
    burst: int = 200
    burst_pause_ms: int = 1500
    flush_lag_ms: int | None = None  # None: 4.5 s when crashed, 0 after a clean shutdown

    def __post_init__(self) -> None:
        if self.messages < 0 or self.body_size < 0:
            raise ValueError("messages and body size must not be negative")
        if not 1 <= self.topics <= 702 or not 1 <= self.queues <= 1024:
            raise ValueError("topics must be 1..702 and queues 1..1024")
        if self.burst < 1:
            raise ValueError("burst must be at least 1")

    @property
    def checkpoint_lag_ms(self) -> int:
        if self.flush_lag_ms is not None:
            return self.flush_lag_ms
        return DEFAULT_CRASH_FLUSH_LAG_MS if self.crash else 0


def topic_name(index: int) -> str:
    """TopicA .. TopicZ, TopicAA .. TopicZZ (spreadsheet column letters)."""
    letters = ""
    n = index + 1
    while n:
        n, rem = divmod(n - 1, 26)
        letters = chr(ord("A") + rem) + letters
    return f"Topic{letters}"


def _month_start_ms(ms: int) -> int:
    day = datetime.fromtimestamp(ms // 1000, UTC)
    return int(datetime(day.year, day.month, 1, tzinfo=UTC).timestamp()) * 1000


@dataclass(slots=True)
class _Producer:
    """``MessageClientIDSetter``: a fixed prefix (ip, pid, class loader hash), then the time
    since the start of the month and a wrapping counter; the month is taken in UTC here."""

    prefix: str
    counter: int = 0
    month_start: int = 0
    month_end: int = -1

    def next_id(self, born_ms: int) -> str:
        if not self.month_start <= born_ms < self.month_end:
            self.month_start = _month_start_ms(born_ms)
            self.month_end = _month_start_ms(self.month_start + 32 * 86_400_000)
        uid = f"{self.prefix}{born_ms - self.month_start:08X}{self.counter:04X}"
        self.counter = (self.counter + 1) & 0xFFFF
        return uid


@dataclass(slots=True)
class _Recent:
    """The last plain message, which a retry copies (keys, UNIQ_KEY and tags travel along)."""

    topic: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    store_host: HostAddress | None = None
    offset: int = 0


@dataclass(slots=True)
class _State:
    half_offsets: list[int] = field(default_factory=list)
    recent: _Recent = field(default_factory=_Recent)


class _Draws:
    """Random words from PCG64's raw stream, a batch at a time."""

    def __init__(self, seed: int) -> None:
        self._bits = np.random.PCG64(seed)

    def words(self, count: int, columns: int) -> list[list[int]]:
        raw = self._bits.random_raw(count * columns).reshape(count, columns)
        return [col.tolist() for col in raw.T]

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


class _Generator:
    """Turns draws into :class:`MessageSpec` values and feeds them to a writer."""

    def __init__(self, config: WorkloadConfig, profile: Profile) -> None:
        self.config = config
        self.profile = profile
        self.draws = _Draws(config.seed)
        prefix = self.draws.words(1, 4)
        pid, loader = prefix[0][0] & 0xFFFF, prefix[1][0] & 0xFFFFFFFF
        tail = f"{pid:04X}{loader:08X}"
        self.producers = (
            _Producer("0A000002" + tail),
            _Producer("FD000000000000000000000000000002" + tail),
        )
        self.topics = [topic_name(i) for i in range(config.topics)]
        self.born_hosts = (
            HostAddress(bytes([10, 0, 0, 2]), 50001),
            HostAddress(bytes.fromhex("fd000000000000000000000000000002"), 50002),
        )
        self.store_hosts = (
            HostAddress(bytes([10, 0, 0, 1]), 10911),
            HostAddress(bytes.fromhex("fd000000000000000000000000000001"), 10911),
        )
        size = config.body_size
        self.bodies = {
            "full": _body_pool(self.draws, size),
            "half": _body_pool(self.draws, size // 2),
            "more": _body_pool(self.draws, size + size // 2),
        }
        self.v2_enabled = config.special and profile.accepts_v2_magic
        self.kinds = _kind_table(config.special, self.v2_enabled)
        self.state = _State()
        self.clock = config.start_ms

    def specs(self, writer: StoreWriter) -> Iterator[MessageSpec]:
        """Yield every message; half-message offsets are read back from ``writer``."""
        config = self.config
        total = config.messages
        undispatched_from = total - min(config.burst, total // 10) if config.crash else total
        for base in range(0, total, _BATCH):
            count = min(_BATCH, total - base)
            cols = self.draws.words(count, 4)
            for i in range(count):
                seq = base + i
                if seq and seq % config.burst == 0:
                    self.clock += config.burst_pause_ms
                spec, kind = self._spec(seq, cols[0][i], cols[1][i], cols[2][i], cols[3][i])
                spec.dispatch = seq < undispatched_from
                yield spec
                if kind == _HALF:
                    self.state.half_offsets.append(writer.last_offset)
                elif kind == _NORMAL:
                    recent = self.state.recent
                    user = spec.properties
                    assert isinstance(user, dict)
                    recent.topic, recent.store_host = spec.topic, spec.store_host
                    recent.properties = user
                    recent.offset = writer.last_offset

    def _spec(self, seq: int, w0: int, w1: int, w2: int, w3: int) -> tuple[MessageSpec, int]:
        config = self.config
        kind = self.kinds[w0 & 0xFFFF]
        self.clock += 1 + ((w0 >> 16) & 1)
        store_ts = self.clock
        born_ts = store_ts - ((w0 >> 17) & 3)
        topic_index = ((w0 >> 20) & 0xFFFF) % config.topics
        queue_id = ((w0 >> 36) & 0xFFFF) % config.queues
        topic = self.topics[topic_index]

        # Keys, tags, properties.
        key_roll = w1 & 0xFF
        letter = topic[5:]
        if key_roll < 64:
            keys: str | None = f"K{letter}-{seq}"
        elif key_roll < 115:
            keys = f"K{letter}-{seq} ORD-{seq // 7}"
        elif key_roll < 140:
            keys = f"K{letter}-{seq} ORD-{seq // 7} HOT"
        elif key_roll < 166:
            keys = f"订单-{seq} K{letter}-{seq}"
        else:
            keys = None
        tags = _TAGS[((w1 >> 8) & 0xFF) % len(_TAGS)]
        # Insertion order of a producer's message: TAGS and KEYS (Message constructor), user
        # properties, then UNIQ_KEY at send time.
        user: dict[str, str] = {}
        if tags is not None:
            user[props.TAGS] = tags
        if keys is not None:
            user[props.KEYS] = keys
        if (w1 >> 16) & 0xFF < 205:
            user[props.WAIT] = "true"
        if (w1 >> 24) & 0xFF < 77:
            user["traceId"] = f"tr-{seq}"
        if (w1 >> 32) & 0xFF < 26:
            user["中文属性"] = f"值{seq % 100}"
        user["seq"] = str(seq)
        uniq_roll = (w1 >> 40) & 0xFF
        if not config.special or uniq_roll >= 52:
            user[props.UNIQ_KEY] = self.producers[0].next_id(born_ts)
        elif uniq_roll >= 26:
            user[props.UNIQ_KEY] = self.producers[1].next_id(born_ts)

        # Body: mostly body_size bytes, some shorter, longer or empty.
        body_roll = w2 & 0xFF
        pool = self.bodies["full"]
        if body_roll < 3:
            body = b""
        else:
            if body_roll < 13:
                pool = self.bodies["half"]
            elif body_roll < 23:
                pool = self.bodies["more"]
            body = pool[((w2 >> 8) & 0xFF) % len(pool)]

        born6 = config.special and (w2 >> 16) & 0xFF < 38
        store6 = config.special and (w2 >> 24) & 0xFF < 26
        flag = ((w2 >> 32) & 0xFFFF) if (w2 >> 48) & 0xFF < 26 else 0
        spec = MessageSpec(
            topic=topic,
            body=body,
            queue_id=queue_id,
            properties=user,
            flag=flag,
            born_timestamp=born_ts,
            store_timestamp=store_ts,
            born_host=self.born_hosts[born6],
            store_host=self.store_hosts[store6],
        )
        if kind != _NORMAL:
            self._special(spec, kind, w3)
        return spec, kind

    def _special(self, spec: MessageSpec, kind: int, w3: int) -> None:
        user = spec.properties
        assert isinstance(user, dict)
        if kind == _DELAY:
            spec.delay_level = _DELAY_LEVELS[w3 & 1]
        elif kind == _HALF:
            spec.topic, spec.queue_id = HALF_TOPIC, 0
            user[props.TRAN_MSG] = "true"
            user[props.REAL_TOPIC] = TX_TOPIC
            user[props.REAL_QID] = "0"
            user[props.PGROUP] = TX_PRODUCER_GROUP
        elif kind in (_PREPARED, _COMMIT, _ROLLBACK):
            spec.topic, spec.queue_id = TX_TOPIC, 0
            user[props.TRAN_MSG] = "true"
            user[props.PGROUP] = TX_PRODUCER_GROUP
            if kind == _PREPARED:
                spec.sys_flag = TRANSACTION_PREPARED_TYPE
            elif kind == _ROLLBACK:
                spec.sys_flag = TRANSACTION_ROLLBACK_TYPE
            else:
                spec.sys_flag = TRANSACTION_COMMIT_TYPE
                halves = self.state.half_offsets
                if halves:
                    spec.prepared_transaction_offset = halves[(w3 >> 8) % len(halves)]
        elif kind == _RETRY:
            recent = self.state.recent
            spec.topic, spec.queue_id = f"%RETRY%{RETRY_GROUP}", 0
            spec.reconsume_times = 1 + (w3 & 3) % 3
            # A retry is a copy: the original's tags, keys and UNIQ_KEY travel with it.
            for name in (props.TAGS, props.KEYS, props.UNIQ_KEY):
                user.pop(name, None)
            original = recent.properties
            user.update((name, original[name]) for name in _CARRIED if name in original)
            user[props.RETRY_TOPIC] = recent.topic or self.topics[0]
            user[props.ORIGIN_MESSAGE_ID] = encode_offset_msg_id(
                recent.store_host or self.store_hosts[0], recent.offset
            )
            user[props.MAX_RECONSUME_TIMES] = "16"
        elif kind == _V2:
            length = 128 if w3 & 1 else 200
            spec.topic = _v2_topic(length)
            spec.queue_id = (w3 >> 1) & 1 if length == 200 else 0


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
        elif topic == f"%RETRY%{RETRY_GROUP}":
            group = RETRY_GROUP
        elif topic == HALF_TOPIC:
            group = TX_CHECK_GROUP
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
    generator = _Generator(config, layout.profile)
    with StoreWriter(
        root,
        layout,
        index_namer=index_namer,
        crash=config.crash,
        flush_lag_ms=config.checkpoint_lag_ms,
    ) as writer:
        writer.put_many(generator.specs(writer))
        current, previous = _consumer_offsets(writer, config, generator.draws)
        writer.set_consumer_offsets(current, previous)
        return writer.close()
