"""``rmqinspect info``: the topics and subscription groups the broker would load from
topics.json and subscriptionGroup.json (mqadmin topicStatus / getConsumerConfig), checked field
by field against the files a real 4.9.8 broker wrote and against hand-written 5.x files."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_helpers import build_store, orders, run, run_json

TOPIC_FIELDS = {
    "topic": "topicName",
    "read_queue_nums": "readQueueNums",
    "write_queue_nums": "writeQueueNums",
    "perm": "perm",
    "topic_filter_type": "topicFilterType",
    "topic_sys_flag": "topicSysFlag",
    "order": "order",
}
GROUP_FIELDS = {
    "group": "groupName",
    "consume_enable": "consumeEnable",
    "consume_from_min_enable": "consumeFromMinEnable",
    "consume_broadcast_enable": "consumeBroadcastEnable",
    "retry_queue_nums": "retryQueueNums",
    "retry_max_times": "retryMaxTimes",
    "broker_id": "brokerId",
    "which_broker_when_consume_slowly": "whichBrokerWhenConsumeSlowly",
}


def test_info_lists_the_real_brokers_topics_and_groups(conformance_consume_dir: Path) -> None:
    store = conformance_consume_dir / "stores" / "consume_clean"
    config = store / "config"
    topics = json.loads((config / "topics.json").read_text())["topicConfigTable"]
    groups = json.loads((config / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    doc = run_json("info", store, expect=0)
    assert [t["topic"] for t in doc["topic_configs"]] == sorted(topics)
    for got in doc["topic_configs"]:
        raw = topics[got["topic"]]
        assert {k: got[k] for k in TOPIC_FIELDS} == {k: raw[v] for k, v in TOPIC_FIELDS.items()}
        assert got["attributes"] is None  # 4.9 has no topic attributes
        perm = raw["perm"]
        assert got["perm_text"] == "RW-"[:0] + "".join(
            c if perm & bit else "-" for c, bit in (("R", 4), ("W", 2), ("X", 1))
        )
    assert [g["group"] for g in doc["subscription_groups"]] == sorted(groups)
    assert {"groupRetry", "TOOLS_CONSUMER"} <= set(groups)
    for got in doc["subscription_groups"]:
        raw = groups[got["group"]]
        assert {k: got[k] for k in GROUP_FIELDS} == {k: raw[v] for k, v in GROUP_FIELDS.items()}
        assert got["group_retry_policy"] is None and got["consume_message_orderly"] is None
    assert doc["config_not_read"] == []


FIVE_TOPICS = {
    "topicConfigTable": {
        "FifoOrders": {
            "topicName": "FifoOrders",
            "readQueueNums": 8,
            "writeQueueNums": 4,
            "perm": 4,
            "topicFilterType": "MULTI_TAG",
            "topicSysFlag": 1,
            "order": True,
            "attributes": {"+message.type": "FIFO"},
        },
        "Plain": {"topicName": "Plain"},
    }
}
FIVE_GROUPS = {
    "subscriptionGroupTable": {
        "gid": {
            "groupName": "gid",
            "consumeEnable": False,
            "consumeBroadcastEnable": False,
            "retryMaxTimes": 3,
            "retryQueueNums": 2,
            "brokerId": 1,
            "whichBrokerWhenConsumeSlowly": 0,
            "consumeMessageOrderly": True,
            "groupRetryPolicy": {
                "type": "EXPONENTIAL",
                "exponentialRetryPolicy": {"initial": 1000, "max": 60000, "multiplier": 2},
            },
        }
    }
}


def test_info_shows_5x_settings_defaults_and_rocksdb_config_dirs(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(4))
    config = store / "config"
    (config / "topics.json").write_text("{ torn")  # the broker falls back to the .bak
    (config / "topics.json.bak").write_text(json.dumps(FIVE_TOPICS))
    (config / "subscriptionGroup.json").write_text(json.dumps(FIVE_GROUPS))
    (config / "topics").mkdir()  # RocksDBTopicConfigManager's directory
    (config / "topics" / "CURRENT").write_text("MANIFEST-000001\n")
    doc = run_json("info", store, expect=0)
    fifo, plain = doc["topic_configs"]
    assert fifo == {
        "topic": "FifoOrders",
        "read_queue_nums": 8,
        "write_queue_nums": 4,
        "perm": 4,
        "perm_text": "R--",
        "topic_filter_type": "MULTI_TAG",
        "topic_sys_flag": 1,
        "order": True,
        "attributes": {"+message.type": "FIFO"},
    }
    # TopicConfig's field initialisers where the file says nothing.
    assert (plain["topic"], plain["read_queue_nums"], plain["write_queue_nums"]) == (
        "Plain",
        16,
        16,
    )
    assert (plain["perm"], plain["perm_text"], plain["order"]) == (6, "RW-", False)
    (group,) = doc["subscription_groups"]
    assert group == {
        "group": "gid",
        "consume_enable": False,
        "consume_from_min_enable": True,
        "consume_broadcast_enable": False,
        "retry_queue_nums": 2,
        "retry_max_times": 3,
        "broker_id": 1,
        "which_broker_when_consume_slowly": 0,
        "consume_message_orderly": True,
        "consume_timeout_minute": None,
        "group_retry_policy": FIVE_GROUPS["subscriptionGroupTable"]["gid"]["groupRetryPolicy"],
        "group_sys_flag": None,
        "attributes": None,
    }
    assert doc["config_not_read"] == [{"path": "config/topics/", "holds": "topic configurations"}]
    table = run("info", store, "--format", "table")
    assert table.exit_code == 0
    for text in ("Topic configs", "FifoOrders", "R--", "Subscription groups", "EXPONE"):
        assert text in table.stdout, text
    assert "config/topics/" in table.stdout and "not read" in table.stdout
