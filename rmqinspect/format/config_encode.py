"""The broker's metadata JSON files written from their models (:mod:`rmqinspect.format.config`):
``encode_*`` write what the broker's ``persist()`` would write for the model, with bean
properties in fastjson's alphabetical order and map entries in the model's order."""

from __future__ import annotations

from typing import Any

from rmqinspect.format.config import (
    ConsumerOffsetTable,
    DataVersion,
    DelayOffsetTable,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
)
from rmqinspect.format.fastjson import dumps


def encode_consumer_offsets(table: ConsumerOffsetTable) -> str:
    doc: dict[str, Any] = {}
    if table.data_version is not None:
        doc["dataVersion"] = _data_version_doc(table.data_version)
    if table.lmq_offset_table is not None:
        doc["lmqOffsetTable"] = table.lmq_offset_table
    doc["offsetTable"] = table.offset_table
    return dumps(doc)


def encode_delay_offsets(table: DelayOffsetTable) -> str:
    doc: dict[str, Any] = {}
    if table.data_version is not None:
        doc["dataVersion"] = _data_version_doc(table.data_version)
    doc["offsetTable"] = table.offset_table
    return dumps(doc)


def encode_topics(table: TopicConfigTable) -> str:
    doc: dict[str, Any] = {}
    if table.data_version is not None:
        doc["dataVersion"] = _data_version_doc(table.data_version)
    doc["topicConfigTable"] = {
        name: _topic_doc(cfg) for name, cfg in table.topic_config_table.items()
    }
    return dumps(doc)


def encode_subscription_groups(table: SubscriptionGroupTable) -> str:
    doc: dict[str, Any] = {}
    if table.data_version is not None:
        doc["dataVersion"] = _data_version_doc(table.data_version)
    if table.forbidden_table is not None:
        doc["forbiddenTable"] = table.forbidden_table
    doc["subscriptionGroupTable"] = {
        name: _group_doc(cfg) for name, cfg in table.subscription_group_table.items()
    }
    return dumps(doc)


def _data_version_doc(version: DataVersion) -> dict[str, Any]:
    return {
        "counter": version.counter,
        "stateVersion": version.state_version,  # None: omitted, as fastjson omits nulls
        "timestamp": version.timestamp,
    }


def _topic_doc(cfg: TopicConfig) -> dict[str, Any]:
    return {
        "attributes": cfg.attributes,
        "order": cfg.order,
        "perm": cfg.perm,
        "readQueueNums": cfg.read_queue_nums,
        "topicFilterType": cfg.topic_filter_type,
        "topicName": cfg.topic_name,
        "topicSysFlag": cfg.topic_sys_flag,
        "writeQueueNums": cfg.write_queue_nums,
    }


def _group_doc(cfg: SubscriptionGroupConfig) -> dict[str, Any]:
    return {
        "attributes": cfg.attributes,
        "brokerId": cfg.broker_id,
        "consumeBroadcastEnable": cfg.consume_broadcast_enable,
        "consumeEnable": cfg.consume_enable,
        "consumeFromMinEnable": cfg.consume_from_min_enable,
        "consumeMessageOrderly": cfg.consume_message_orderly,
        "consumeTimeoutMinute": cfg.consume_timeout_minute,
        "groupName": cfg.group_name,
        "groupRetryPolicy": cfg.group_retry_policy,
        "groupSysFlag": cfg.group_sys_flag,
        "notifyConsumerIdsChangedEnable": cfg.notify_consumer_ids_changed_enable,
        "retryMaxTimes": cfg.retry_max_times,
        "retryQueueNums": cfg.retry_queue_nums,
        # A Set in Java: CollectionCodec writes it inline, which dumps() does for tuples.
        "subscriptionDataSet": None
        if cfg.subscription_data_set is None
        else tuple(cfg.subscription_data_set),
        "whichBrokerWhenConsumeSlowly": cfg.which_broker_when_consume_slowly,
    }
