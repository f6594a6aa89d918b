"""The POP record decoders (``format.pop``): ``PopCheckPoint``, ``AckMsg`` and ``BatchAckMsg``
bodies in both the ``@JSONField`` short names and the long names older builds wrote."""

from __future__ import annotations

import pytest

from rmqinspect.errors import DecodeError
from rmqinspect.format import pop

CK = pop.CheckPoint(10, 1_700_000_000_000, 60_000, 0b101, 3, 2, "T", "g", 7, (0, 2, 5), "b", "1")


def test_checkpoint_round_trip_in_fastjson_order() -> None:
    body = pop.encode_checkpoint(CK)
    # JSON.toJSONString: keys sorted, no spaces, nulls left out, every getter's value written
    # (getReviveTime too, as the real 5.3.3 broker's checkpoints show).
    assert body == (
        b'{"bm":5,"bn":"b","c":"g","d":[0,2,5],"it":60000,"n":3,"pt":1700000000000,"q":2,'
        b'"reviveTime":1700000060000,"ro":7,"rp":"1","so":10,"t":"T"}'
    )
    assert pop.decode_checkpoint(body) == CK
    assert CK.revive_time == 1_700_000_060_000
    # ackOffsetByIndex / indexOfAck with queueOffsetDiff, and without (an old checkpoint).
    assert [CK.offset_at(i) for i in range(3)] == [10, 12, 15]
    assert (CK.index_of(12), CK.index_of(11), CK.index_of(9)) == (1, -1, -1)
    old = pop.CheckPoint(10, 0, 0, 0, 3, 0, "T", "g", 0, None, None, None)
    assert (old.index_of(12), old.index_of(13)) == (2, -1)
    assert old.merge_key == "Tg0100null"  # Java's concatenation writes a null as "null"


def test_long_names_are_read() -> None:
    body = (
        b'{"startOffset":10,"popTime":1700000000000,"invisibleTime":60000,"bitMap":5,"num":3,'
        b'"queueId":2,"topic":"T","cid":"g","reviveOffset":7,"queueOffsetDiff":[0,2,5],'
        b'"brokerName":"b","rePutTimes":1,"rt":1700000060000}'
    )
    assert pop.decode_checkpoint(body) == CK
    ack = pop.decode_ack(
        b'{"ackOffset":12,"startOffset":10,"consumerGroup":"g","topic":"T","queueId":2,'
        b'"popTime":1700000000000,"brokerName":"b"}',
        batch=False,
    )
    assert ack == pop.Ack((12,), 10, "g", "T", 2, 1_700_000_000_000, "b", False)
    assert ack.merge_key == CK.merge_key
    batch = pop.decode_ack(
        b'{"ackOffsetList":[10,15],"so":10,"c":"g","t":"T","q":2,"pt":1700000000000}', batch=True
    )
    assert batch.ack_offsets == (10, 15) and batch.broker_name is None


def test_ack_round_trip_and_unique_ids() -> None:
    ack = pop.Ack((12,), 10, "g", "T", 2, 5, "b", False)
    assert pop.decode_ack(pop.encode_ack(ack), batch=False) == ack
    back = pop.Ack((10, 12), 10, "g", "T", 2, 5, "b", True)
    assert pop.decode_ack(pop.encode_ack(back), batch=True) == back
    assert pop.ack_unique_id(ack) == "T@2@12@g@5@b@ack"
    assert pop.ck_unique_id(CK) == "T@2@10@g@1700000000000@b@ck"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"", "no JSON"),
        (b'{"so":1', "no JSON"),
        (b"[1]", "no object"),
        (b'{"pt":1,"it":1,"n":1,"q":0,"t":"T","c":"g"}', "no 'so'"),
        (b'{"so":1,"pt":1,"it":1,"n":1,"q":0,"t":"T","c":"g","bm":4294967296}', "'bm'"),
        (b'{"so":1,"pt":1,"it":1,"n":200,"q":0,"t":"T","c":"g"}', "'n'"),
        (b'{"so":true,"pt":1,"it":1,"n":1,"q":0,"t":"T","c":"g"}', "'so'"),
        (b'{"so":1,"pt":1,"it":1,"n":1,"q":0,"t":5,"c":"g"}', "'t'"),
        (b'{"so":1,"pt":1,"it":1,"n":1,"q":0,"t":"T","c":"g","d":[0,"x"]}', "'d'"),
        (b'{"so":1,"pt":1,"it":1,"n":1,"q":0,"t":"T","c":"g","d":{}}', "'d'"),
        (b"[" * 100_000, "no JSON"),
    ],
)
def test_hostile_checkpoints_raise_decode_errors(body: bytes, says: str) -> None:
    with pytest.raises(DecodeError, match=says):
        pop.decode_checkpoint(body)


def test_cancel_bodies() -> None:
    assert pop.is_cancel(b"3-120") and not pop.is_cancel(b'{"so":1}')
