"""The record codec against what the real 4.9.8 and 5.3.3 brokers did with the same bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rmqinspect.format import commitlog as cl
from rmqinspect.format.profile import Profile
from rmqinspect.format.scan import CheckedRun, WalkPolicy
from rmqinspect.store.model import Store
from tests.corpus import expected, input_store, jsonl, scenarios

CORPORA = {"conformance": Profile.V4_9, "conformance5": Profile.V5_3}


def _prescan(store_dir: Path, profile: Profile, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Walk every file from position 0 with the broker's check, as the corpus prescan did."""
    # Before load() 4.9.8 has not parsed its delay levels yet, so schedule tagsCode is a tag hash.
    levels = () if profile is Profile.V4_9 else cl.CheckOptions().delay_levels
    opts = cl.CheckOptions(
        profile=profile,
        delay_levels=levels,
        force_verify_prop_crc=meta["storeConfig"].get("forceVerifyPropCRC", False),
    )
    out: list[dict[str, Any]] = []
    with Store.open(store_dir) as store:
        for f in store.commitlog.files:
            for _, event in store.scan(f.start, opts, policy=WalkPolicy.BROKER, files=[f]):
                assert isinstance(event, CheckedRun)  # the broker's walk skips nothing: it stops
                cols = event.columns
                for i in range(len(event)):
                    rec = cols.record(i, with_body=opts.read_body)
                    out.append(
                        {
                            "file": f.name,
                            "offset": rec.position,
                            "kind": "msg",
                            "totalSize": rec.store_size,
                            "magic": cl.magic_name(rec.magic),
                            "topic": rec.topic,
                            "queueId": rec.queue_id,
                            "queueOffset": rec.queue_offset,
                            "sysFlag": rec.sys_flag,
                            "tagsCode": event.tags_code(i),
                            "storeTimestamp": rec.store_timestamp,
                            "keys": rec.properties.get("KEYS"),
                            "uniqKey": rec.uniq_key,
                            "physicOffsetField": rec.physical_offset_field,
                        }
                    )
                r = event.stop
                if r is None:
                    continue
                row: dict[str, Any] = {"file": f.name, "offset": f.start + event.end}
                if r.is_blank:
                    row.update(
                        kind="blank", totalSize=r.store_size, magic=cl.magic_name(r.magic or 0)
                    )
                else:
                    row.update(kind="stop", reason=r.reason.value)
                out.append(row)
    return out


def _cases() -> list[tuple[str, str]]:
    from tests.conftest import SHARED

    return [
        (corpus, s)
        for corpus in CORPORA
        if (SHARED / corpus / "expected").is_dir()
        for s in scenarios(SHARED / corpus)
    ]


@pytest.mark.parametrize(("corpus", "scenario"), _cases() or [("conformance", "missing")])
def test_prescan_verdicts_match_broker(corpus: str, scenario: str) -> None:
    from tests.conftest import SHARED

    root = SHARED / corpus
    if not (root / "expected").is_dir():
        pytest.skip(f"real-broker corpus not found at {root}")
    meta = expected(root, scenario)
    mine = _prescan(input_store(root, scenario), CORPORA[corpus], meta)
    theirs = list(jsonl(root, scenario, "prescan"))
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs, strict=True):
        for key, value in a.items():
            if key == "keys" and value is None:
                assert b.get(key) in (None, ""), (a, b)
            else:
                assert b[key] == value, (key, a, b)


def _host(h: Any) -> dict[str, Any]:
    return {"addrHex": h.ip.hex(), "port": h.port, "v6": h.is_v6}


@pytest.mark.parametrize(("corpus", "scenario"), _cases() or [("conformance", "missing")])
def test_messages_decode_like_get_message(corpus: str, scenario: str) -> None:
    """Every message the broker served through its consume queues decodes to equal fields."""
    from tests.conftest import SHARED

    root = SHARED / corpus
    if not (root / "expected").is_dir():
        pytest.skip(f"real-broker corpus not found at {root}")
    checked = 0
    with Store.open(input_store(root, scenario)) as store:
        for line in jsonl(root, scenario, "messages"):
            if not line["retrievable"]:
                continue
            rec = store.read_message(line["cqPhyOffset"])
            assert rec.body is not None
            assert rec.queue_offset == line["queueOffset"]
            assert rec.physical_offset_field == line["commitLogOffset"]
            assert rec.store_size == line["storeSize"] == line["cqSize"]
            assert rec.sys_flag == line["sysFlag"]
            assert rec.flag == line["flag"]
            assert rec.body_crc == line["bodyCRC"]
            assert cl.body_crc(rec.body) == line["bodyCrcComputed"]
            assert rec.body_length == line["bodyLen"]
            assert rec.body[:16].hex() == line["bodyHead"]
            assert rec.born_timestamp == line["bornTimestamp"]
            assert rec.store_timestamp == line["storeTimestamp"]
            assert _host(rec.born_host) == {
                k: line["bornHost"][k] for k in ("addrHex", "port", "v6")
            }
            assert _host(rec.store_host) == {
                k: line["storeHost"][k] for k in ("addrHex", "port", "v6")
            }
            assert rec.reconsume_times == line["reconsumeTimes"]
            assert rec.prepared_transaction_offset == line["preparedTransactionOffset"]
            assert rec.uniq_key == line["uniqKey"]
            assert rec.properties.get("KEYS") == line["keys"]
            assert rec.tags == line["tags"]
            assert dict(sorted(rec.properties.items())) == line["properties"]
            assert rec.topic == line["topic"] and rec.queue_id == line["queueId"]
            if "version" in line:
                assert rec.version.upper() == line["version"]
            checked += 1
    summary = expected(root, scenario)["summary"]
    assert checked == summary.get("retrievableMessagesAfterStart", checked)
