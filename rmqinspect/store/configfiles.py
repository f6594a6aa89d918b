"""Reading ``<store>/config/*.json`` the way the broker's ``ConfigManager.load()`` does (spec 11.1).

The broker reads ``<name>``; when it is missing, empty, unreadable or fails to decode it reads
``<name>.bak``. A ``.bak`` that is non-empty but fails to decode (or cannot be read) makes
``load()`` return false and the broker refuses to start; a missing or empty ``.bak`` lets it start
with an empty table. This module reports which file would win and why, and never raises on bad
file content. Files are only ever opened for reading, never followed through a symlink, and never
read past :data:`MAX_CONFIG_BYTES`: a larger file is ``too_large`` and left unparsed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format.config import (
    ConsumerOffsetTable,
    DelayOffsetTable,
    SubscriptionGroupTable,
    TimerMetricsTable,
    TopicConfigTable,
    UntypedConfig,
    parse_consumer_offsets,
    parse_delay_offsets,
    parse_subscription_groups,
    parse_timer_metrics,
    parse_topics,
    parse_untyped,
)
from rmqinspect.format.fastjson import loads
from rmqinspect.store.files import read_small

ConfigValue = (
    ConsumerOffsetTable
    | DelayOffsetTable
    | TopicConfigTable
    | SubscriptionGroupTable
    | TimerMetricsTable
    | UntypedConfig
)
Source = Literal["main", "bak", "none"]
FileState = Literal["missing", "empty", "unreadable", "too_large", "invalid", "ok"]

MAX_CONFIG_BYTES = 16 << 20
"""The largest config file rmqinspect parses. Brokers write these files whole from memory (a
consumer-offset table of a million queues is about 15 MiB); parsing costs tens of bytes of memory
per byte of JSON, so a larger file is reported, not read."""


@dataclass(frozen=True, slots=True)
class ConfigFileSpec:
    name: str
    description: str
    parse: Callable[[Any], ConfigValue]


CONFIG_FILES: Mapping[str, ConfigFileSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            ConfigFileSpec(
                "consumerOffset.json",
                "committed consumer offsets per topic@group and queue",
                parse_consumer_offsets,
            ),
            ConfigFileSpec(
                "delayOffset.json",
                "SCHEDULE_TOPIC_XXXX progress per delay level",
                parse_delay_offsets,
            ),
            ConfigFileSpec("topics.json", "topic configurations", parse_topics),
            ConfigFileSpec(
                "subscriptionGroup.json",
                "consumer group configurations",
                parse_subscription_groups,
            ),
            ConfigFileSpec(
                "consumerFilter.json", "consumer filter data (not modelled)", parse_untyped
            ),
            ConfigFileSpec(
                "lmqConsumerOffset.json",
                "consumer offsets with the LMQ table (enableLmq)",
                parse_consumer_offsets,
            ),
            ConfigFileSpec(
                "timermetrics",
                "the 5.x timer's pending count per real topic (TimerMetrics)",
                parse_timer_metrics,
            ),
        )
    }
)


@dataclass(frozen=True, slots=True)
class ConfigFileResult:
    """What the broker would load for one config file, plus what an investigator wants beside it.

    ``value`` is what the broker ends up with (None when it starts empty or refuses to start);
    ``bak_value`` is the parsed ``.bak`` whatever the outcome. ``main_error``/``bak_error`` are
    one-line messages naming the file (and the byte offset for syntax errors) when that file is
    ``unreadable`` or ``invalid``. ``bak_differs`` is true when both files parse to different
    values. ``tmp_present`` flags a ``<name>.tmp`` left by a 4.9 broker that died mid-persist.
    """

    name: str
    path: Path
    source: Source
    value: ConfigValue | None
    bak_value: ConfigValue | None
    main_state: FileState
    bak_state: FileState
    main_error: str | None
    bak_error: str | None
    broker_starts: bool
    bak_differs: bool
    tmp_present: bool


def load_config_file(config_dir: Path, name: str) -> ConfigFileResult:
    """Apply ``ConfigManager.load()`` to ``config_dir/name``; ``name`` must be in CONFIG_FILES."""
    spec = CONFIG_FILES.get(name)
    if spec is None:
        raise ValueError(f"unknown config file {name!r}; known: {', '.join(CONFIG_FILES)}")
    path = config_dir / name
    main_state, main_value, main_error = _load(path, spec)
    bak_state, bak_value, bak_error = _load(path.with_name(name + ".bak"), spec)

    source: Source
    if main_value is not None:
        source, value, starts = "main", main_value, True
    elif bak_value is not None:
        source, value, starts = "bak", bak_value, True
    else:
        # Only a .bak with content that cannot be loaded stops the broker.
        source, value, starts = "none", None, bak_state in ("missing", "empty")

    return ConfigFileResult(
        name=name,
        path=path,
        source=source,
        value=value,
        bak_value=bak_value,
        main_state=main_state,
        bak_state=bak_state,
        main_error=main_error,
        bak_error=bak_error,
        broker_starts=starts,
        bak_differs=main_value is not None and bak_value is not None and main_value != bak_value,
        tmp_present=path.with_name(name + ".tmp").exists(),
    )


# Where a 5.x broker with RocksDB-held metadata keeps it instead of the JSON files, each a
# RocksDB directory under config/: RocksDBTopicConfigManager.configFilePath ("topics"),
# RocksDBSubscriptionGroupManager and RocksDBConsumerOffsetManager ("subscriptionGroups",
# "consumerOffsets"), and the unified store of the config v2 managers ("metadata").
ROCKSDB_CONFIG_DIRS: Mapping[str, str] = MappingProxyType(
    {
        "topics": "topic configurations",
        "subscriptionGroups": "consumer group configurations",
        "consumerOffsets": "consumer offsets",
        "metadata": "metadata of the config v2 managers",
    }
)


def rocksdb_config_dirs(config_dir: Path) -> list[tuple[str, str]]:
    """The RocksDB config directories present under ``config_dir``: (name, what it holds).
    Their contents are not read (a RocksDB database, not the JSON the broker falls back to)."""
    return [
        (name, what) for name, what in ROCKSDB_CONFIG_DIRS.items() if (config_dir / name).is_dir()
    ]


def load_config_files(config_dir: Path) -> dict[str, ConfigFileResult]:
    """:func:`load_config_file` for every entry of CONFIG_FILES."""
    return {name: load_config_file(config_dir, name) for name in CONFIG_FILES}


def _load(path: Path, spec: ConfigFileSpec) -> tuple[FileState, ConfigValue | None, str | None]:
    try:
        # Java's File.exists() is false for a missing file and under a non-directory: None.
        read = read_small(path, MAX_CONFIG_BYTES + 1)
    except StoreError as err:
        return "unreadable", None, str(err)
    if read is None:
        return "missing", None, None
    if read.truncated or len(read.data) > MAX_CONFIG_BYTES:
        return (
            "too_large",
            None,
            f"{path}: {read.size} bytes, more than the {MAX_CONFIG_BYTES} rmqinspect parses; "
            "not read",
        )
    data = read.data
    if not data:
        return "empty", None, None
    try:
        return "ok", spec.parse(loads(data)), None
    except DecodeError as err:
        return "invalid", None, str(StoreError.from_decode(err, str(path)))
