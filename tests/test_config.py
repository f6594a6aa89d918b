"""Typed config models: conformance semantics, exact re-encoding, shape errors and problems."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmqinspect.errors import DecodeError
from rmqinspect.format.config import (
    ConsumerOffsetRow,
    ConsumerOffsetTable,
    DataVersion,
    DelayOffsetTable,
    TopicConfig,
    delay_level_to_queue_id,
    parse_consumer_offsets,
    parse_delay_offsets,
    parse_subscription_groups,
    parse_topics,
    parse_untyped,
    queue_id_to_delay_level,
    split_topic_group,
)
from rmqinspect.format.config_encode import (
    encode_consumer_offsets,
    encode_delay_offsets,
    encode_subscription_groups,
    encode_topics,
)
from rmqinspect.format.fastjson import loads

# expected/empty_store.json and single_message.json repeat clean's configFilesSemantics, but the
# consumerOffset.json(.bak) in those stores hold all-zero offsets (nothing was ever consumed).
STALE_CONSUMER_SEMANTICS = {"empty_store", "single_message"}


def _scenarios(corpus: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    out = []
    for expected in sorted((corpus / "expected").glob("*.json")):
        scenario = expected.stem
        semantics = json.loads(expected.read_text())["configFilesSemantics"]
        out.append((scenario, corpus / "stores" / scenario / "config", semantics))
    assert out
    return out


def _as_semantics(table: ConsumerOffsetTable | DelayOffsetTable) -> dict[str, Any]:
    if isinstance(table, DelayOffsetTable):
        return {str(level): offset for level, offset in table.offset_table.items()}
    return {
        key: {str(queue_id): offset for queue_id, offset in queues.items()}
        for key, queues in table.offset_table.items()
    }


def _shape_error(parse: Any, text: str) -> str:
    with pytest.raises(DecodeError) as info:
        parse(loads(text))
    return info.value.message


@pytest.mark.parametrize("suffix", ["", ".bak"])
def test_conformance_semantics_and_exact_reencoding(
    conformance_dir: Path, conformance5_dir: Path, suffix: str
) -> None:
    clean_semantics = json.loads((conformance_dir / "expected" / "clean.json").read_text())[
        "configFilesSemantics"
    ]
    checked = 0
    for scenario, config, semantics in _scenarios(conformance_dir) + _scenarios(conformance5_dir):
        consumer_name = "consumerOffset.json" + suffix
        delay_name = "delayOffset.json" + suffix
        consumer_bytes = (config / consumer_name).read_bytes()
        delay_bytes = (config / delay_name).read_bytes()
        consumer = parse_consumer_offsets(loads(consumer_bytes))
        delay = parse_delay_offsets(loads(delay_bytes))

        assert consumer.problems == () and delay.problems == ()
        assert _as_semantics(delay) == semantics[delay_name], scenario
        if scenario in STALE_CONSUMER_SEMANTICS:
            assert semantics == clean_semantics
            zeroed = {k: dict.fromkeys(v, 0) for k, v in semantics[consumer_name].items()}
            assert _as_semantics(consumer) == zeroed, scenario
        else:
            assert _as_semantics(consumer) == semantics[consumer_name], scenario

        assert encode_consumer_offsets(consumer).encode() == consumer_bytes, scenario
        assert encode_delay_offsets(delay).encode() == delay_bytes, scenario
        checked += 1
    assert checked == 11


def test_consumer_offset_rows(conformance_dir: Path) -> None:
    path = conformance_dir / "stores" / "clean" / "config" / "consumerOffset.json"
    table = parse_consumer_offsets(loads(path.read_bytes()))
    rows = list(table.rows())
    assert len(rows) == 9
    assert rows[0] == ConsumerOffsetRow("TopicA", "groupX", 0, 265)
    assert ConsumerOffsetRow("%RETRY%groupX", "groupX", 0, 152) in rows
    assert rows[-1] == ConsumerOffsetRow("RMQ_SYS_TRANS_HALF_TOPIC", "CID_RMQ_SYS_TRANS", 0, 40)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("T@g", ("T", "g")),
        ("%RETRY%g@g", ("%RETRY%g", "g")),
        ("T", None),
        ("T@g@x", None),
        ("@g", None),
        ("T@", None),
    ],
)
def test_split_topic_group(key: str, expected: tuple[str, str] | None) -> None:
    assert split_topic_group(key) == expected


def test_malformed_offset_key_is_kept_and_reported() -> None:
    text = '{\n\t"offsetTable":{\n\t\t"NoSeparator":{0:1\n\t\t},\n\t\t"T@g":{2:3\n\t\t}\n\t}\n}'
    table = parse_consumer_offsets(loads(text))
    assert table.offset_table == {"NoSeparator": {0: 1}, "T@g": {2: 3}}
    assert table.problems == ('offsetTable.NoSeparator: key does not split into "topic@group"',)
    assert list(table.rows()) == [ConsumerOffsetRow("T", "g", 2, 3)]
    assert encode_consumer_offsets(table) == text


def test_5x_consumer_offsets_with_data_version_and_group_topic_map() -> None:
    text = (
        '{"dataVersion":{"counter":7,"stateVersion":2,"timestamp":1700000000000},'
        '"groupTopicMap":{"g":["T"]},"offsetTable":{"T@g":{0:10}}}'
    )
    table = parse_consumer_offsets(loads(text))
    assert table.data_version == DataVersion(counter=7, timestamp=1700000000000, state_version=2)
    assert table.offset_table == {"T@g": {0: 10}}
    # groupTopicMap is derived by the broker and ignored on load, so it is not re-emitted.
    assert encode_consumer_offsets(table) == (
        '{\n\t"dataVersion":{\n\t\t"counter":7,\n\t\t"stateVersion":2,\n\t\t"timestamp":1700000000000'
        '\n\t},\n\t"offsetTable":{\n\t\t"T@g":{0:10\n\t\t}\n\t}\n}'
    )


def test_lmq_offset_table() -> None:
    text = '{"lmqOffsetTable":{"%LMQ%q@%LMQ%g":12,"bad":1},"offsetTable":{"T@g":{1:2}}}'
    table = parse_consumer_offsets(loads(text))
    assert table.lmq_offset_table == {"%LMQ%q@%LMQ%g": 12, "bad": 1}
    assert table.problems == ('lmqOffsetTable.bad: key does not split into "topic@group"',)
    assert list(table.rows())[-1] == ConsumerOffsetRow("%LMQ%q", "%LMQ%g", 0, 12)
    assert parse_consumer_offsets(loads(encode_consumer_offsets(table))) == table


def test_consumer_offsets_accept_what_fastjson_casts() -> None:
    # A strict-JSON writer quotes integer keys; fastjson casts them (and numeric strings) back.
    table = parse_consumer_offsets(loads('{"offsetTable":{"T@g":{"0":"5","1":6}},"x":[1]}'))
    assert table.offset_table == {"T@g": {0: 5, 1: 6}}


def test_empty_and_null_documents_give_empty_tables() -> None:
    assert parse_consumer_offsets(loads("{}")) == ConsumerOffsetTable({})
    assert parse_consumer_offsets(loads("null")) == ConsumerOffsetTable({})
    assert parse_consumer_offsets(loads('{"offsetTable":null}')) == ConsumerOffsetTable({})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"offsetTable":{"TopicA@g":{0:"x"}}}',
            'offsetTable."TopicA@g".0: expected an integer, got "x"',
        ),
        ('{"offsetTable":{"T@g":{0:1.5}}}', 'offsetTable."T@g".0: expected an integer, got 1.5'),
        ('{"offsetTable":{"T@g":{0:true}}}', 'offsetTable."T@g".0: expected an integer, got true'),
        ('{"offsetTable":{"T@g":{x:1}}}', 'offsetTable."T@g".x: expected an integer key, got "x"'),
        (
            '{"offsetTable":{"T@g":{2147483648:1}}}',
            'offsetTable."T@g".2147483648: 2147483648 does not fit a Java int',
        ),
        (
            '{"offsetTable":{"T@g":{0:"9223372036854775808"}}}',
            'offsetTable."T@g".0: 9223372036854775808 does not fit a Java long',
        ),
        (
            '{"offsetTable":{"T@g":{{"q":1}:2}}}',
            'offsetTable."T@g".{"q":1}: expected an integer key, got an object',
        ),
        ('{"offsetTable":{"T@g":[1]}}', 'offsetTable."T@g": expected an object, got an array'),
        ('{"offsetTable":[]}', "offsetTable: expected an object, got an array"),
        ('{"offsetTable":{{"a":1}:{}}}', "offsetTable: expected string keys, got an object"),
        ("[1]", "top level: expected an object, got an array"),
        ('{"dataVersion":{"counter":"c"}}', 'dataVersion.counter: expected an integer, got "c"'),
    ],
)
def test_consumer_offset_shape_errors_name_the_path(text: str, message: str) -> None:
    assert _shape_error(parse_consumer_offsets, text) == message


def test_delay_offsets_and_level_mapping() -> None:
    text = '{\n\t"offsetTable":{1:4,3:9,18:0\n\t}\n}'
    table = parse_delay_offsets(loads(text))
    assert table.offset_table == {1: 4, 3: 9, 18: 0}
    assert table.queue_offsets() == {0: 4, 2: 9, 17: 0}
    assert delay_level_to_queue_id(3) == 2
    assert queue_id_to_delay_level(2) == 3
    assert encode_delay_offsets(table) == text


def test_delay_level_below_one_is_a_problem_not_an_error() -> None:
    table = parse_delay_offsets(loads('{"offsetTable":{0:5,2:1}}'))
    assert table.problems == ("offsetTable.0: delay level below 1 has no schedule queue",)
    assert table.queue_offsets() == {1: 1}
    message = _shape_error(parse_delay_offsets, '{"offsetTable":{"one":1}}')
    assert message == 'offsetTable.one: expected an integer key, got "one"'


TOPICS_49 = """{
	"dataVersion":{
		"counter":3,
		"timestamp":1700000000000
	},
	"topicConfigTable":{
		"TopicA":{
			"order":false,
			"perm":6,
			"readQueueNums":4,
			"topicFilterType":"SINGLE_TAG",
			"topicName":"TopicA",
			"topicSysFlag":0,
			"writeQueueNums":4
		},
		"%RETRY%groupX":{
			"order":true,
			"perm":2,
			"readQueueNums":1,
			"topicFilterType":"MULTI_TAG",
			"topicName":"%RETRY%groupX",
			"topicSysFlag":1,
			"writeQueueNums":1
		}
	}
}"""

TOPICS_5X = """{
	"dataVersion":{
		"counter":1,
		"stateVersion":0,
		"timestamp":1700000000001
	},
	"topicConfigTable":{
		"BatchTopic":{
			"attributes":{
				"queue.type":"BatchCQ",
				"message.type":"NORMAL"
			},
			"order":false,
			"perm":7,
			"readQueueNums":8,
			"topicFilterType":"SINGLE_TAG",
			"topicName":"BatchTopic",
			"topicSysFlag":0,
			"writeQueueNums":8
		}
	}
}"""


def test_topics_49_parse_and_reencode() -> None:
    table = parse_topics(loads(TOPICS_49))
    assert table.problems == ()
    assert table.data_version == DataVersion(counter=3, timestamp=1700000000000)
    topic = table.topic_config_table["TopicA"]
    assert topic == TopicConfig("TopicA", 4, 4, 6, "SINGLE_TAG", 0, False, None)
    assert topic.perm_text == "RW-"
    retry = table.topic_config_table["%RETRY%groupX"]
    assert (retry.order, retry.perm_text, retry.topic_sys_flag) == (True, "-W-", 1)
    assert encode_topics(table) == TOPICS_49


def test_topics_5x_attributes_reencode() -> None:
    table = parse_topics(loads(TOPICS_5X))
    topic = table.topic_config_table["BatchTopic"]
    assert topic.attributes == {"queue.type": "BatchCQ", "message.type": "NORMAL"}
    assert topic.perm_text == "RWX"
    assert table.data_version is not None and table.data_version.state_version == 0
    assert encode_topics(table) == TOPICS_5X


def test_topic_defaults_unknown_fields_and_problems() -> None:
    text = (
        '{"topicConfigTable":{"A":{"topicName":"B","topicFilterType":"ODD","future":[1]},'
        '"C":{"readQueueNums":null}}}'
    )
    table = parse_topics(loads(text))
    a, c = table.topic_config_table["A"], table.topic_config_table["C"]
    assert a.extra == {"future": [1]}
    assert a.topic_name == "B"
    assert (c.topic_name, c.read_queue_nums, c.write_queue_nums, c.perm) == ("C", 16, 16, 6)
    assert table.problems == (
        'topicConfigTable.A: topicName "B" differs from its key',
        'topicConfigTable.A: unknown topicFilterType "ODD"',
        "topicConfigTable.C: no topicName; using the table key",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"topicConfigTable":{"A":{"readQueueNums":"x"}}}',
            'topicConfigTable.A.readQueueNums: expected an integer, got "x"',
        ),
        (
            '{"topicConfigTable":{"A":{"order":1}}}',
            "topicConfigTable.A.order: expected true or false, got 1",
        ),
        (
            '{"topicConfigTable":{"A":{"attributes":{"k":1}}}}',
            "topicConfigTable.A.attributes.k: expected a string, got 1",
        ),
        ('{"topicConfigTable":{"A":3}}', "topicConfigTable.A: expected an object, got 3"),
    ],
)
def test_topic_shape_errors(text: str, message: str) -> None:
    assert _shape_error(parse_topics, text) == message


GROUPS_49 = """{
	"dataVersion":{
		"counter":2,
		"timestamp":1700000000000
	},
	"subscriptionGroupTable":{
		"groupX":{
			"brokerId":0,
			"consumeBroadcastEnable":true,
			"consumeEnable":true,
			"consumeFromMinEnable":true,
			"groupName":"groupX",
			"notifyConsumerIdsChangedEnable":true,
			"retryMaxTimes":16,
			"retryQueueNums":1,
			"whichBrokerWhenConsumeSlowly":1
		}
	}
}"""

GROUPS_5X = """{
	"dataVersion":{
		"counter":5,
		"stateVersion":1,
		"timestamp":1700000000002
	},
	"forbiddenTable":{
		"groupY":{
			"TopicB":1
		}
	},
	"subscriptionGroupTable":{
		"groupY":{
			"attributes":{},
			"brokerId":0,
			"consumeBroadcastEnable":true,
			"consumeEnable":false,
			"consumeFromMinEnable":true,
			"consumeMessageOrderly":true,
			"consumeTimeoutMinute":15,
			"groupName":"groupY",
			"groupRetryPolicy":{
				"type":"CUSTOMIZED"
			},
			"groupSysFlag":0,
			"notifyConsumerIdsChangedEnable":true,
			"retryMaxTimes":3,
			"retryQueueNums":1,
			"subscriptionDataSet":[{
				"expressionType":"TAG",
				"topic":"TopicB"
			}],
			"whichBrokerWhenConsumeSlowly":1
		}
	}
}"""


def test_subscription_groups_49_parse_and_reencode() -> None:
    table = parse_subscription_groups(loads(GROUPS_49))
    group = table.subscription_group_table["groupX"]
    assert (group.group_name, group.retry_max_times, group.consume_enable) == ("groupX", 16, True)
    assert group.consume_message_orderly is None and group.attributes is None
    assert table.forbidden_table is None
    assert encode_subscription_groups(table) == GROUPS_49


def test_subscription_groups_5x_parse_and_reencode() -> None:
    table = parse_subscription_groups(loads(GROUPS_5X))
    group = table.subscription_group_table["groupY"]
    assert group.consume_enable is False
    assert group.consume_message_orderly is True
    assert group.group_retry_policy == {"type": "CUSTOMIZED"}
    assert group.subscription_data_set == [{"expressionType": "TAG", "topic": "TopicB"}]
    assert table.forbidden_table == {"groupY": {"TopicB": 1}}
    assert encode_subscription_groups(table) == GROUPS_5X


def test_subscription_group_defaults_and_extra() -> None:
    table = parse_subscription_groups(loads('{"subscriptionGroupTable":{"g":{"newField":1}}}'))
    group = table.subscription_group_table["g"]
    assert group.group_name == "g"
    assert (group.retry_queue_nums, group.broker_id, group.which_broker_when_consume_slowly) == (
        1,
        0,
        1,
    )
    assert group.extra == {"newField": 1}
    assert table.problems == ("subscriptionGroupTable.g: no groupName; using the table key",)
    message = _shape_error(
        parse_subscription_groups, '{"subscriptionGroupTable":{"g":{"consumeEnable":"yes"}}}'
    )
    assert message == 'subscriptionGroupTable.g.consumeEnable: expected true or false, got "yes"'


def test_untyped_config_keeps_the_document() -> None:
    assert parse_untyped(loads('{"filterDataByTopic":{}}')).document == {"filterDataByTopic": {}}
    with pytest.raises(DecodeError):
        parse_untyped(loads("[]"))
