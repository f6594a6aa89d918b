"""Typed models of the broker's metadata JSON files (spec 11.3-11.6) over :func:`fastjson.loads`.

``parse_*`` take the parsed document and raise :class:`DecodeError` naming the JSON path when its
shape is one the broker's own decode would reject. Oddities the broker accepts (a consumer-offset
key that is not ``topic@group``, a delay level below 1, ...) are kept and listed in ``problems``.
Like fastjson, the parsers ignore unknown keys, treat a ``null`` field as absent, and accept a
decimal string where a number is expected (``TypeUtils.castToLong``).

The encoders are :mod:`rmqinspect.format.config_encode`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from rmqinspect.errors import DecodeError
from rmqinspect.format.fastjson import FrozenKey, dumps, quote

TOPIC_GROUP_SEPARATOR = "@"

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1

TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")

_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_DECIMAL = re.compile(r"-?[0-9]{1,19}")
_PLAIN_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_Path = tuple[Any, ...]
_T = TypeVar("_T")


# --- models -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataVersion:
    """``DataVersion``; ``state_version`` exists from 5.x on (None: not in the file)."""

    counter: int = 0
    timestamp: int = 0
    state_version: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumerOffsetRow:
    topic: str
    group: str
    queue_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class ConsumerOffsetTable:
    """``consumerOffset.json`` / ``lmqConsumerOffset.json``.

    ``offset_table`` is keyed by the raw ``"topic@group"`` string (so a malformed key survives a
    re-encode) and maps queue id to the next offset to consume. ``lmq_offset_table`` is None when
    the file has no ``lmqOffsetTable``.
    """

    offset_table: dict[str, dict[int, int]]
    lmq_offset_table: dict[str, int] | None = None
    data_version: DataVersion | None = None
    problems: tuple[str, ...] = ()

    def rows(self) -> Iterator[ConsumerOffsetRow]:
        """Flat (topic, group, queue_id, offset) rows, ``offsetTable`` first, then the LMQ table
        (queue 0). Keys that do not split into ``topic@group`` are skipped; see ``problems``."""
        for key, queues in self.offset_table.items():
            pair = split_topic_group(key)
            if pair is not None:
                for queue_id, offset in queues.items():
                    yield ConsumerOffsetRow(pair[0], pair[1], queue_id, offset)
        for key, offset in (self.lmq_offset_table or {}).items():
            pair = split_topic_group(key)
            if pair is not None:
                yield ConsumerOffsetRow(pair[0], pair[1], 0, offset)


@dataclass(frozen=True, slots=True)
class DelayOffsetTable:
    """``delayOffset.json``: delay level (1-based) to the next offset of its schedule queue."""

    offset_table: dict[int, int]
    data_version: DataVersion | None = None
    problems: tuple[str, ...] = ()

    def queue_offsets(self) -> dict[int, int]:
        """The same offsets keyed by ``SCHEDULE_TOPIC_XXXX`` queue id (levels below 1 dropped)."""
        return {
            delay_level_to_queue_id(level): offset
            for level, offset in self.offset_table.items()
            if level >= 1
        }


@dataclass(frozen=True, slots=True)
class TimerMetric:
    count: int  # timers pending for the topic (TimerMetrics.Metric: enqueued minus dequeued)
    timestamp: int  # when the count last changed (``timeStamp``)


@dataclass(frozen=True, slots=True)
class TimerMetricsTable:
    """``config/timermetrics`` (5.x): ``TimerMetrics.TimerMetricsSerializeWrapper``, the timer's
    pending count per real topic, persisted with the timer checkpoint."""

    timing_count: dict[str, TimerMetric]
    data_version: DataVersion | None = None


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One ``TopicConfig``; defaults are the Java field initialisers. ``attributes`` is None for
    4.x files (no such property); ``extra`` keeps properties this model does not know."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] | None = None
    extra: dict[Any, Any] = field(default_factory=dict)

    @property
    def perm_text(self) -> str:
        """``PermName.perm2String``: ``R``/``W``/``X`` (inherit) or ``-`` per position."""
        return (
            ("R" if self.perm & PERM_READ else "-")
            + ("W" if self.perm & PERM_WRITE else "-")
            + ("X" if self.perm & PERM_INHERIT else "-")
        )


@dataclass(frozen=True, slots=True)
class TopicConfigTable:
    """``topics.json``."""

    topic_config_table: dict[str, TopicConfig]
    data_version: DataVersion | None = None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """One ``SubscriptionGroupConfig`` (spec 11.6). The 4.9 fields default to the Java field
    initialisers; the 5.x-only fields are None when absent from the file."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool | None = None
    consume_timeout_minute: int | None = None
    group_retry_policy: dict[Any, Any] | None = None
    group_sys_flag: int | None = None
    subscription_data_set: list[Any] | None = None
    attributes: dict[str, str] | None = None
    extra: dict[Any, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SubscriptionGroupTable:
    """``subscriptionGroup.json``; ``forbidden_table`` (group -> topic -> flags) is 5.x only."""

    subscription_group_table: dict[str, SubscriptionGroupConfig]
    forbidden_table: dict[str, dict[str, int]] | None = None
    data_version: DataVersion | None = None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetMovedEvent:
    """The body of a 4.9 ``OFFSET_MOVED_EVENT`` record (``OffsetMovedEvent``, written by
    ``PullMessageProcessor.generateOffsetMovedEvent`` through fastjson): a pull the broker
    answered ``PULL_OFFSET_MOVED``, from ``offset_request`` to ``offset_new``."""

    consumer_group: str
    topic: str
    queue_id: int
    broker_name: str | None
    offset_request: int
    offset_new: int


@dataclass(frozen=True, slots=True)
class UntypedConfig:
    """A recognised config file this package does not model (e.g. ``consumerFilter.json``)."""

    document: dict[Any, Any]


# --- helpers the broker applies to these values ---------------------------------------------------


def split_topic_group(key: str) -> tuple[str, str] | None:
    """``topic@group`` -> (topic, group); None unless it splits into exactly two non-empty parts."""
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return parts[0], parts[1]


def delay_level_to_queue_id(level: int) -> int:
    """``ScheduleMessageService.delayLevel2QueueId``: level L lives in schedule queue L - 1."""
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1


# --- parsing --------------------------------------------------------------------------------------


def parse_data_version(obj: Any, path: _Path = ("dataVersion",)) -> DataVersion:
    doc = _object(obj, path)
    state = doc.get("stateVersion")
    return DataVersion(
        counter=_long(doc.get("counter", 0), (*path, "counter")),
        timestamp=_long(doc.get("timestamp", 0), (*path, "timestamp")),
        state_version=None if state is None else _long(state, (*path, "stateVersion")),
    )


def parse_consumer_offsets(obj: Any) -> ConsumerOffsetTable:
    """``consumerOffset.json`` or ``lmqConsumerOffset.json``; ``groupTopicMap`` is ignored (a
    derived getter the broker writes but never reads)."""
    doc = _root(obj)
    problems: list[str] = []
    offset_table: dict[str, dict[int, int]] = {}
    for key, queues in _table(doc, "offsetTable").items():
        path = ("offsetTable", key)
        name = _string_key(key, ("offsetTable",), problems, topic_group=True)
        offset_table[name] = {
            _int_key(queue_id, (*path, queue_id)): _long(offset, (*path, queue_id))
            for queue_id, offset in _object(queues, path).items()
        }
    lmq_offset_table: dict[str, int] | None = None
    if doc.get("lmqOffsetTable") is not None:
        lmq_offset_table = {
            _string_key(key, ("lmqOffsetTable",), problems, topic_group=True): _long(
                offset, ("lmqOffsetTable", key)
            )
            for key, offset in _table(doc, "lmqOffsetTable").items()
        }
    return ConsumerOffsetTable(
        offset_table, lmq_offset_table, _data_version_of(doc), tuple(problems)
    )


def parse_delay_offsets(obj: Any) -> DelayOffsetTable:
    doc = _root(obj)
    problems: list[str] = []
    offset_table: dict[int, int] = {}
    for key, offset in _table(doc, "offsetTable").items():
        level = _int_key(key, ("offsetTable", key))
        if level < 1:
            problems.append(f"offsetTable.{level}: delay level below 1 has no schedule queue")
        offset_table[level] = _long(offset, ("offsetTable", key))
    return DelayOffsetTable(offset_table, _data_version_of(doc), tuple(problems))


def parse_timer_metrics(obj: Any) -> TimerMetricsTable:
    doc = _root(obj)
    counts: dict[str, TimerMetric] = {}
    problems: list[str] = []
    for key, metric in _table(doc, "timingCount").items():
        path = ("timingCount", key)
        topic = _string_key(key, path, problems)
        entry = _object(metric, path)
        counts[topic] = TimerMetric(
            _long(entry.get("count", 0), (*path, "count")),
            _long(entry.get("timeStamp", 0), (*path, "timeStamp")),
        )
    return TimerMetricsTable(counts, _data_version_of(doc))


_TOPIC_FIELDS = frozenset(
    {
        "attributes",
        "order",
        "perm",
        "readQueueNums",
        "topicFilterType",
        "topicName",
        "topicSysFlag",
        "writeQueueNums",
    }
)


def _own_name(cfg: dict[Any, Any], field: str, key: str, path: _Path, problems: list[str]) -> str:
    """The entry's own name field, which should repeat its table key; the key wins if absent."""
    own = _opt(cfg, field, path, _string)
    if own is None:
        problems.append(f"{_fmt_path(path)}: no {field}; using the table key")
        return key
    if own != key:
        problems.append(f"{_fmt_path(path)}: {field} {quote(own)} differs from its key")
    return own


def parse_topics(obj: Any) -> TopicConfigTable:
    doc = _root(obj)
    problems: list[str] = []
    table: dict[str, TopicConfig] = {}
    for key, value in _table(doc, "topicConfigTable").items():
        name = _string_key(key, ("topicConfigTable",), problems)
        path: _Path = ("topicConfigTable", name)
        cfg = _object(value, path)
        topic_name = _own_name(cfg, "topicName", name, path, problems)
        filter_type = _opt(cfg, "topicFilterType", path, _string)
        if filter_type is not None and filter_type not in TOPIC_FILTER_TYPES:
            problems.append(f"{_fmt_path(path)}: unknown topicFilterType {quote(filter_type)}")
        table[name] = TopicConfig(
            topic_name=topic_name,
            read_queue_nums=_field(cfg, "readQueueNums", path, _int, 16),
            write_queue_nums=_field(cfg, "writeQueueNums", path, _int, 16),
            perm=_field(cfg, "perm", path, _int, PERM_READ | PERM_WRITE),
            topic_filter_type="SINGLE_TAG" if filter_type is None else filter_type,
            topic_sys_flag=_field(cfg, "topicSysFlag", path, _int, 0),
            order=_field(cfg, "order", path, _bool, False),
            attributes=_opt(cfg, "attributes", path, _string_map),
            extra=_extra(cfg, _TOPIC_FIELDS),
        )
    return TopicConfigTable(table, _data_version_of(doc), tuple(problems))


_GROUP_FIELDS = frozenset(
    {
        "attributes",
        "brokerId",
        "consumeBroadcastEnable",
        "consumeEnable",
        "consumeFromMinEnable",
        "consumeMessageOrderly",
        "consumeTimeoutMinute",
        "groupName",
        "groupRetryPolicy",
        "groupSysFlag",
        "notifyConsumerIdsChangedEnable",
        "retryMaxTimes",
        "retryQueueNums",
        "subscriptionDataSet",
        "whichBrokerWhenConsumeSlowly",
    }
)


def parse_subscription_groups(obj: Any) -> SubscriptionGroupTable:
    doc = _root(obj)
    problems: list[str] = []
    table: dict[str, SubscriptionGroupConfig] = {}
    for key, value in _table(doc, "subscriptionGroupTable").items():
        name = _string_key(key, ("subscriptionGroupTable",), problems)
        path: _Path = ("subscriptionGroupTable", name)
        cfg = _object(value, path)
        group_name = _own_name(cfg, "groupName", name, path, problems)
        table[name] = SubscriptionGroupConfig(
            group_name=group_name,
            consume_enable=_field(cfg, "consumeEnable", path, _bool, True),
            consume_from_min_enable=_field(cfg, "consumeFromMinEnable", path, _bool, True),
            consume_broadcast_enable=_field(cfg, "consumeBroadcastEnable", path, _bool, True),
            retry_queue_nums=_field(cfg, "retryQueueNums", path, _int, 1),
            retry_max_times=_field(cfg, "retryMaxTimes", path, _int, 16),
            broker_id=_field(cfg, "brokerId", path, _long, 0),
            which_broker_when_consume_slowly=_field(
                cfg, "whichBrokerWhenConsumeSlowly", path, _long, 1
            ),
            notify_consumer_ids_changed_enable=_field(
                cfg, "notifyConsumerIdsChangedEnable", path, _bool, True
            ),
            consume_message_orderly=_opt(cfg, "consumeMessageOrderly", path, _bool),
            consume_timeout_minute=_opt(cfg, "consumeTimeoutMinute", path, _int),
            group_retry_policy=_opt(cfg, "groupRetryPolicy", path, _object),
            group_sys_flag=_opt(cfg, "groupSysFlag", path, _int),
            subscription_data_set=_opt(cfg, "subscriptionDataSet", path, _array),
            attributes=_opt(cfg, "attributes", path, _string_map),
            extra=_extra(cfg, _GROUP_FIELDS),
        )
    forbidden: dict[str, dict[str, int]] | None = None
    if doc.get("forbiddenTable") is not None:
        forbidden = {}
        for key, topics in _table(doc, "forbiddenTable").items():
            group = _string_key(key, ("forbiddenTable",), problems)
            path = ("forbiddenTable", group)
            forbidden[group] = {
                _string_key(topic, path, problems): _int(flags, (*path, topic))
                for topic, flags in _object(topics, path).items()
            }
    return SubscriptionGroupTable(table, forbidden, _data_version_of(doc), tuple(problems))


def parse_offset_moved_event(obj: Any) -> OffsetMovedEvent:
    """An ``OFFSET_MOVED_EVENT`` body as :func:`fastjson.loads` returns it; DecodeError names
    the field that is missing or of the wrong kind."""
    doc = _object(obj, ())
    queue = _object(_required(doc, "messageQueue", ()), ("messageQueue",))
    broker = _opt(queue, "brokerName", ("messageQueue",), _string)
    return OffsetMovedEvent(
        consumer_group=_string(_required(doc, "consumerGroup", ()), ("consumerGroup",)),
        topic=_string(_required(queue, "topic", ("messageQueue",)), ("messageQueue", "topic")),
        queue_id=_int(_required(queue, "queueId", ("messageQueue",)), ("messageQueue", "queueId")),
        broker_name=broker,
        offset_request=_long(_required(doc, "offsetRequest", ()), ("offsetRequest",)),
        offset_new=_long(_required(doc, "offsetNew", ()), ("offsetNew",)),
    )


def _required(cfg: dict[Any, Any], name: str, path: _Path) -> Any:
    value = cfg.get(name)
    if value is None:
        raise DecodeError(f"{_fmt_path((*path, name))}: missing")
    return value


def parse_untyped(obj: Any) -> UntypedConfig:
    return UntypedConfig(_root(obj))


def _root(obj: Any) -> dict[Any, Any]:
    # A document that is just ``null`` decodes to no object; the broker then keeps its empty table.
    return {} if obj is None else _object(obj, ())


def _table(doc: dict[Any, Any], name: str) -> dict[Any, Any]:
    value = doc.get(name)
    return {} if value is None else _object(value, (name,))


def _data_version_of(doc: dict[Any, Any]) -> DataVersion | None:
    value = doc.get("dataVersion")
    return None if value is None else parse_data_version(value)


def _string_key(key: Any, path: _Path, problems: list[str], *, topic_group: bool = False) -> str:
    """A key of a ``Map<String, ...>``: fastjson turns a number key into its decimal text."""
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)
    if not isinstance(key, str):
        _fail(path, "string keys", key)
    if topic_group and split_topic_group(key) is None:
        problems.append(f'{_fmt_path((*path, key))}: key does not split into "topic@group"')
    return key


def _int_key(key: Any, path: _Path) -> int:
    return _number(key, path, _INT32, "an integer key", "int")


def _int(value: Any, path: _Path) -> int:
    return _number(value, path, _INT32, "an integer", "int")


def _long(value: Any, path: _Path) -> int:
    return _number(value, path, _INT64, "an integer", "long")


def _number(value: Any, path: _Path, bounds: tuple[int, int], what: str, java: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _DECIMAL.fullmatch(value):
        number = int(value)
    else:
        _fail(path, what, value)
    if not bounds[0] <= number <= bounds[1]:
        raise DecodeError(f"{_fmt_path(path)}: {number} does not fit a Java {java}")
    return number


def _bool(value: Any, path: _Path) -> bool:
    if not isinstance(value, bool):
        _fail(path, "true or false", value)
    return value


def _string(value: Any, path: _Path) -> str:
    if not isinstance(value, str):
        _fail(path, "a string", value)
    return value


def _object(value: Any, path: _Path) -> dict[Any, Any]:
    if not isinstance(value, dict):
        _fail(path, "an object", value)
    return value


def _array(value: Any, path: _Path) -> list[Any]:
    if not isinstance(value, list):
        _fail(path, "an array", value)
    return value


def _string_map(value: Any, path: _Path) -> dict[str, str]:
    return {
        _string(key, path): _string(item, (*path, key))
        for key, item in _object(value, path).items()
    }


def _opt(
    cfg: dict[Any, Any], name: str, path: _Path, convert: Callable[[Any, _Path], _T]
) -> _T | None:
    value = cfg.get(name)
    return None if value is None else convert(value, (*path, name))


def _field(
    cfg: dict[Any, Any], name: str, path: _Path, convert: Callable[[Any, _Path], _T], default: _T
) -> _T:
    value = _opt(cfg, name, path, convert)
    return default if value is None else value


def _extra(cfg: dict[Any, Any], known: frozenset[str]) -> dict[Any, Any]:
    return {key: value for key, value in cfg.items() if key not in known}


def _fail(path: _Path, expected: str, value: Any) -> NoReturn:
    raise DecodeError(f"{_fmt_path(path)}: expected {expected}, got {_describe(value)}")


def _fmt_path(path: _Path) -> str:
    if not path:
        return "top level"
    parts = []
    for segment in path:
        if isinstance(segment, str) and not _PLAIN_SEGMENT.fullmatch(segment):
            parts.append(quote(segment))
        elif isinstance(segment, FrozenKey | tuple):
            parts.append(dumps(segment).replace("\n", "").replace("\t", ""))
        else:
            parts.append(str(segment))
    return ".".join(parts)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return quote(value if len(value) <= 40 else value[:40] + "...")
    if isinstance(value, dict | FrozenKey):
        return "an object"
    return "an array"
