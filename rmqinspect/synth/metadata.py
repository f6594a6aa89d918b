"""What the store writer leaves besides the data files: ``checkpoint`` (§8), ``lock``, the
``abort`` markers (§9) and the ``config/`` JSON files (§11)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rmqinspect.format.checkpoint import Checkpoint, encode_checkpoint
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.format.config import (
    ConsumerOffsetTable,
    DataVersion,
    DelayOffsetTable,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
    split_topic_group,
)
from rmqinspect.format.config_encode import (
    encode_consumer_offsets,
    encode_delay_offsets,
    encode_subscription_groups,
    encode_topics,
)
from rmqinspect.format.fate import parse_retry_topic
from rmqinspect.format.javamap import java_map_order
from rmqinspect.format.profile import Profile

CHECKPOINT_NAME = "checkpoint"
LOCK_CONTENT = b"lock"
# System topics whose broker-created config has more queues than the store may show.
_SYSTEM_TOPIC_QUEUES = {SCHEDULE_TOPIC: 18}


def write_shutdown_files(
    root: Path, profile: Profile, checkpoint: Checkpoint, crash: bool, pid: int
) -> None:
    """``checkpoint``, ``lock`` and the abort markers a broker of ``profile`` leaves."""
    (root / CHECKPOINT_NAME).write_bytes(encode_checkpoint(checkpoint, profile))
    (root / "lock").write_bytes(LOCK_CONTENT)
    if profile is Profile.V4_9:
        if crash:
            (root / "abort").write_bytes(b"")
        return
    # 5.x start() creates abort empty, then MixAll.string2File writes the PID, copying the
    # empty previous content to abort.bak; a clean shutdown deletes only abort.
    (root / "abort.bak").write_bytes(b"")
    if crash:
        (root / "abort").write_bytes(str(pid).encode("ascii"))
    else:
        compaction = root / "compaction"
        compaction.mkdir()
        (compaction / "position-checkpoint").write_text('{\n  "queueOffsetMap": {}\n}')


class ConfigTables:
    """The broker's config tables as the writer will leave them: what the caller set, and
    topics and retry groups derived from the queues the messages used."""

    def __init__(self, profile: Profile, delay_table: Mapping[int, int]) -> None:
        self.profile = profile
        self.delay_table = delay_table
        self.consumer_offsets: (
            tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]] | None
        ) = None
        self.delay_offsets: tuple[dict[int, int], dict[int, int]] | None = None
        self.topic_configs: dict[str, TopicConfig] = {}
        self.groups: list[str] = []
        self.retry_max_times: dict[str, int] = {}  # groups whose retryMaxTimes is not 16
        self.used_queues: set[tuple[str, int]] = set()
        self.multi_tag_topics: set[str] = set()

    def set_consumer_offsets(
        self,
        table: Mapping[str, Mapping[int, int]],
        previous: Mapping[str, Mapping[int, int]] | None = None,
    ) -> None:
        """``consumerOffset.json`` content (``"topic@group"`` -> queue -> next offset) and the
        previous generation kept in ``.bak`` (default: the same). Entries are written in the
        order given (a broker writes its ConcurrentHashMap order, see :func:`java_map_order`)."""
        current = {k: dict(v) for k, v in table.items()}
        older = current if previous is None else {k: dict(v) for k, v in previous.items()}
        for key in current:
            pair = split_topic_group(key)
            if pair is not None and pair[1] not in self.groups:
                self.groups.append(pair[1])
        self.consumer_offsets = (current, older)

    def set_delay_offsets(
        self, table: Mapping[int, int], previous: Mapping[int, int] | None = None
    ) -> None:
        """``delayOffset.json`` content (delay level -> next offset)."""
        current = dict(table)
        self.delay_offsets = (current, current if previous is None else dict(previous))

    def declare_topic(self, config: TopicConfig) -> None:
        """Write this config for the topic in ``topics.json`` instead of a derived one."""
        self.topic_configs[config.topic_name] = config

    def set_retry_max_times(self, table: Mapping[str, int]) -> None:
        """``retryMaxTimes`` of these groups in ``subscriptionGroup.json`` (default 16)."""
        self.retry_max_times.update(table)
        self.groups += [group for group in table if group not in self.groups]

    def write(self, config: Path, last_store_timestamp: int) -> None:
        """The JSON files of ``config/`` (created here)."""
        config.mkdir()
        # 5.x tables carry a dataVersion (timestamp: the last store time); 4.9 ones do not.
        version = (
            None
            if self.profile is Profile.V4_9
            else DataVersion(counter=1, timestamp=last_store_timestamp, state_version=0)
        )
        offsets = self.consumer_offsets or ({}, {})
        for name, table in zip(
            ("consumerOffset.json", "consumerOffset.json.bak"), offsets, strict=True
        ):
            text = encode_consumer_offsets(ConsumerOffsetTable(table, None, version))
            (config / name).write_text(text, encoding="utf-8")
        levels = {level: 0 for level in self.delay_table}
        delays = self.delay_offsets or (levels, levels)
        for name, delay_table in zip(
            ("delayOffset.json", "delayOffset.json.bak"), delays, strict=True
        ):
            # ConcurrentHashMap<Integer, Long>: small integer keys iterate in ascending order.
            ordered = dict(sorted(delay_table.items()))
            text = encode_delay_offsets(DelayOffsetTable(ordered, version))
            (config / name).write_text(text, encoding="utf-8")
        topics = TopicConfigTable(self._topic_table(), version)
        (config / "topics.json").write_text(encode_topics(topics), encoding="utf-8")
        groups = SubscriptionGroupTable(
            self._group_table(), None if version is None else {}, version
        )
        (config / "subscriptionGroup.json").write_text(
            encode_subscription_groups(groups), encoding="utf-8"
        )

    def _topic_table(self) -> dict[str, TopicConfig]:
        table = dict(self.topic_configs)
        attributes: dict[str, str] | None = None if self.profile is Profile.V4_9 else {}
        queue_counts: dict[str, int] = {}
        for topic, queue_id in sorted(self.used_queues):
            queue_counts[topic] = max(queue_counts.get(topic, 1), queue_id + 1)
        for topic, count in queue_counts.items():
            if topic in table:
                continue
            queues = max(count, _SYSTEM_TOPIC_QUEUES.get(topic, 1))
            table[topic] = TopicConfig(
                topic_name=topic,
                read_queue_nums=queues,
                write_queue_nums=queues,
                topic_filter_type="MULTI_TAG" if topic in self.multi_tag_topics else "SINGLE_TAG",
                attributes=attributes,
            )
        return {name: table[name] for name in java_map_order(table, 2048)}

    def _group_table(self) -> dict[str, SubscriptionGroupConfig]:
        groups = list(self.groups)
        for topic in sorted({topic for topic, _ in self.used_queues}):
            retry = parse_retry_topic(topic, self.groups)
            # The group a retry topic is of (KeyBuilder.parseGroup: a POP retry topic's group
            # comes before its separator), as the broker created its subscription.
            if retry is not None and retry.group not in groups:
                groups.append(retry.group)
        v5 = self.profile is not Profile.V4_9
        return {
            name: SubscriptionGroupConfig(
                group_name=name,
                retry_max_times=self.retry_max_times.get(name, 16),
                consume_message_orderly=False if v5 else None,
                consume_timeout_minute=15 if v5 else None,
                group_retry_policy={"type": "CUSTOMIZED"} if v5 else None,
                group_sys_flag=0 if v5 else None,
                attributes={} if v5 else None,
            )
            for name in java_map_order(groups, 2048)
        }
