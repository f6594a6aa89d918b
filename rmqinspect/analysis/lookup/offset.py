"""Lookups of the record at one physical offset: by offsetMsgId or by the offset itself.

Kept apart from the other lookups, with only light imports: ``lookup --msg-id`` reads one
record and should start as fast as Python does.
"""

from __future__ import annotations

from rmqinspect.analysis.lookup.result import Hit, LookupResult, Mode, Rejected, Via
from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format.host import HostAddress
from rmqinspect.format.ids import decode_offset_msg_id
from rmqinspect.store.model import Store


def lookup_phy_offset(store: Store, offset: int) -> LookupResult:
    result = LookupResult(Mode.PHY_OFFSET, {"physical_offset": offset})
    record, why = _read_at(store, offset)
    if record is not None:
        result.hits.append(Hit(record, Via.PHYSICAL_OFFSET, _record_notes(record, offset)))
    else:
        result.rejected.append(Rejected(offset, why))
    return result


def _read_at(store: Store, offset: int) -> tuple[cl.MessageRecord | None, str]:
    clq = store.commitlog
    if not clq.files:
        return None, "the store has no commitlog files"
    if store.commitlog.find(offset) is None:
        lo, hi = max(clq.min_offset, 0), clq.end_offset
        return None, f"offset is outside the commitlog files [{lo}, {hi})"
    try:
        return store.read_message(offset), ""
    except StoreError as err:
        return None, f"no message record there: {err}"


def _record_notes(record: cl.MessageRecord, offset: int) -> tuple[str, ...]:
    notes = []
    if record.physical_offset_field != offset:
        notes.append(f"the record's PHYSICALOFFSET field says {record.physical_offset_field}")
    if record.body_crc_ok is False:
        notes.append("body CRC mismatch")
    return tuple(notes)


def lookup_msg_id(store: Store, text: str) -> LookupResult:
    """Decode the offsetMsgId, read the record there and check the store host matches."""
    result = LookupResult(Mode.MSG_ID, {"msg_id": text})
    try:
        mid = decode_offset_msg_id(text.strip())
    except DecodeError as err:
        raise StoreError(f"not an offsetMsgId: {err.message} (character {err.offset})") from None
    result.query.update({"store_host": str(mid.store_host), "physical_offset": mid.physical_offset})
    record, why = _read_at(store, mid.physical_offset)
    maybe_uniq = "; a 32/56-hex id may also be a UNIQ_KEY: try --uniq-key"
    if record is None:
        result.rejected.append(Rejected(mid.physical_offset, why + maybe_uniq))
        return result
    if not _same_host(record.store_host, mid.store_host):
        result.rejected.append(
            Rejected(
                mid.physical_offset,
                f"the record there was stored by {record.store_host}, the id names "
                f"{mid.store_host}: a different broker's message{maybe_uniq}",
                record,
            )
        )
        return result
    result.hits.append(Hit(record, Via.PHYSICAL_OFFSET, _record_notes(record, mid.physical_offset)))
    return result


def _same_host(a: HostAddress, b: HostAddress) -> bool:
    return a.ip == b.ip and a.port == b.port
