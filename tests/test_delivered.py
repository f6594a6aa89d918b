"""What the store proves was delivered (analysis/delivered.py), matched in its scratch
database: the schedule service's deliveries in store order, and a group's send-backs."""

from __future__ import annotations

from pathlib import Path

from rmqinspect.analysis.delivered import BY_SCHEDULE, consumed_by_groups, delivered_units
from rmqinspect.format import properties as props
from rmqinspect.format.commitlog import SCHEDULE_TOPIC
from rmqinspect.store.layout import QueueId
from rmqinspect.store.model import Store
from rmqinspect.synth.writer import MessageSpec, StoreWriter
from tests.cli_helpers import SMALL_LAYOUT

LEVEL3 = QueueId(SCHEDULE_TOPIC, 2)  # delay level 3's schedule queue


def _unit(key: str | None) -> MessageSpec:
    return MessageSpec(topic="TopicA", uniq_key=key, delay_level=3)


def _copy(key: str, times: int = 0) -> MessageSpec:
    """messageTimeup's copy in the real topic: the unit's properties string (DELAY and
    REAL_TOPIC kept), stored as it is."""
    p = {props.REAL_TOPIC: "TopicA", props.REAL_QID: "0", props.DELAY: "3", props.UNIQ_KEY: key}
    raw = props.encode_properties_map(p, trailing_separator=True)
    return MessageSpec(topic="TopicA", properties=raw, reconsume_times=times)


def test_deliveries_take_the_oldest_unit_before_them(tmp_path: Path) -> None:
    k, k2, k3 = (f"7F00000100002A9F00000000000{i}" for i in (1, 2, 3))
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        assert w.put(_unit(k)).queue_offset == 0
        w.put(_copy(k))  # takes unit 0
        w.put(_unit(k))  # 1
        w.put(_unit(k))  # 2
        w.put(_copy(k))  # takes unit 1, the oldest not taken, not 2
        w.put(_copy(k2))  # before any unit of k2: delivers nothing
        w.put(_unit(k2))  # 3
        w.put(_unit(None))  # 4: no UNIQ_KEY, cannot be matched
        w.put(_copy(k, times=1))  # another link (reconsume times): not unit 2's delivery
        w.put(_unit(k3))  # 5
        last = w.put(_copy(k3)).physical_offset
    with Store.open(tmp_path / "s") as store:
        everything = delivered_units(store, None)
        assert everything.offsets(BY_SCHEDULE, LEVEL3, 0, 10).tolist() == [0, 1, 5]
        assert everything.offsets(BY_SCHEDULE, LEVEL3, 1, 5).tolist() == [1]
        assert everything.count(BY_SCHEDULE, LEVEL3, 0, 10) == 3
        assert everything.count(BY_SCHEDULE, LEVEL3, 2, 5) == 0
        assert everything.count(BY_SCHEDULE, QueueId(SCHEDULE_TOPIC, 3), 0, 10) == 0
        assert everything.count("groupA", LEVEL3, 0, 10) == 0
        # The restart keeps the commitlog before k3's copy only: unit 5 is not delivered.
        kept = delivered_units(store, last)
        assert kept.offsets(BY_SCHEDULE, LEVEL3, 0, 10).tolist() == [0, 1]


def test_a_send_back_proves_its_origin_and_the_retry_copy_before_it(tmp_path: Path) -> None:
    """groupA consumed T/0 offset 0 (the send-back names it), then its retry copy (followed by
    a send-back with reconsume times + 1); a retry copy never sent back again proves nothing,
    nor does an ORIGIN_MESSAGE_ID that is not an offsetMsgId."""
    key, other = "7F00000100002A9F000000000001", "7F00000100002A9F000000000002"
    with StoreWriter(tmp_path / "s", SMALL_LAYOUT) as w:
        first = w.put(MessageSpec(topic="T", uniq_key=key))
        origin = f"7F00000100002A9F{first.physical_offset:016X}"
        back = MessageSpec(
            topic="%RETRY%groupA",
            uniq_key=key,
            delay_level=3,
            reconsume_times=1,
            properties={props.ORIGIN_MESSAGE_ID: origin},
        )
        w.put(back)
        w.put(MessageSpec(topic="%RETRY%groupA", uniq_key=key, reconsume_times=1))  # 0
        w.put(MessageSpec(topic="%RETRY%groupA", uniq_key=other, reconsume_times=1))  # 1
        bad = {props.ORIGIN_MESSAGE_ID: "not an id"}
        w.put(MessageSpec(topic="%DLQ%groupA", uniq_key=key, reconsume_times=2, properties=bad))
    with Store.open(tmp_path / "s") as store:
        proof = consumed_by_groups(store, {"groupA", "groupB"})
        assert proof.offsets("groupA", QueueId("T", 0), 0, 5).tolist() == [0]
        # The DLQ copy (times 2) is the send-back that follows retry copy 0 (times 1).
        assert proof.offsets("groupA", QueueId("%RETRY%groupA", 0), 0, 5).tolist() == [0]
        assert proof.count("groupB", QueueId("T", 0), 0, 5) == 0
