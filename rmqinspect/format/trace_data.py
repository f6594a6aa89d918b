"""Message-trace bodies: the records a tracing client stores in ``RMQ_SYS_TRACE_TOPIC``.

``TraceDataEncoder.encoderFromContextBean`` (client/.../trace/, 4.9.8 and 5.3.3): one record per
traced message, its fields separated by ``CONTENT_SPLITOR`` (0x01) and ended by
``FIELD_SPLITOR`` (0x02); ``AsyncTraceDispatcher`` packs several records into one body and sets
the trace message's KEYS to the traced msgIds (UNIQ_KEYs) and keys. The field lists, as
``decoderFromTraceDataString`` reads them:

- ``Pub``: timestamp, regionId, groupName, topic, msgId, tags, keys, storeHost, bodyLength,
  costTime, msgType, then offsetMsgId and success (14 fields; 13 without offsetMsgId in old
  clients; a 15th, clientHost, in newer ones);
- ``SubBefore``: timestamp, regionId, groupName, requestId, msgId, retryTimes, keys;
- ``SubAfter``: requestId, msgId, costTime, success, keys, then contextCode and timestamp when
  the client writes them;
- ``EndTransaction``: timestamp, regionId, groupName, topic, msgId, tags, keys, storeHost,
  msgType, transactionId, transactionState, fromTransactionCheck.

The client's decoder throws on a short or non-numeric record; here such a record is a
:class:`TraceProblem` and the rest of the body is still read.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTENT_SPLITOR = "\x01"  # TraceConstants.CONTENT_SPLITOR
FIELD_SPLITOR = "\x02"  # TraceConstants.FIELD_SPLITOR
TRACE_TYPES = ("Pub", "SubBefore", "SubAfter", "EndTransaction")  # TraceType


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One decoded trace record; fields a type does not carry are None."""

    trace_type: str
    msg_id: str  # the traced message's UNIQ_KEY (the client's msgId)
    timestamp: int | None = None
    region_id: str | None = None
    group: str | None = None
    topic: str | None = None
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = None
    body_length: int | None = None
    cost_time: int | None = None
    msg_type: int | None = None
    offset_msg_id: str | None = None
    success: bool | None = None
    client_host: str | None = None
    request_id: str | None = None
    retry_times: int | None = None
    context_code: int | None = None
    transaction_id: str | None = None
    transaction_state: str | None = None
    from_transaction_check: bool | None = None


@dataclass(frozen=True, slots=True)
class TraceProblem:
    index: int  # the record's position in the body
    detail: str


class _Bad(Exception):
    """One record of a body that cannot be read: a problem of that record, not of the body."""


def _int(text: str, what: str) -> int:
    """``Long.parseLong`` (``Integer.parseInt`` fields are a subset the client would read too)."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    value = int(text) if digits and digits.isascii() and digits.isdigit() else None
    if value is None or not -(2**63) <= value < 2**63:
        raise _Bad(f"{what} {text[:40]!r} is not a number")
    return value


def _bool(text: str) -> bool:
    return text.lower() == "true"  # Boolean.parseBoolean


def _need(line: list[str], n: int, kind: str) -> None:
    if len(line) < n:
        raise _Bad(f"{kind} record with {len(line)} fields, at least {n} expected")


def _decode_one(line: list[str]) -> TraceRecord:
    kind = line[0]
    if kind == "Pub":
        _need(line, 13, kind)
        offset_msg_id, success = (line[12], line[13]) if len(line) >= 14 else (None, line[12])
        return TraceRecord(
            kind,
            line[5],
            timestamp=_int(line[1], "timestamp"),
            region_id=line[2],
            group=line[3],
            topic=line[4],
            tags=line[6],
            keys=line[7],
            store_host=line[8],
            body_length=_int(line[9], "bodyLength"),
            cost_time=_int(line[10], "costTime"),
            msg_type=_int(line[11], "msgType"),
            offset_msg_id=offset_msg_id,
            success=_bool(success),
            client_host=line[14] if len(line) >= 15 else None,
        )
    if kind == "SubBefore":
        _need(line, 8, kind)
        return TraceRecord(
            kind,
            line[5],
            timestamp=_int(line[1], "timestamp"),
            region_id=line[2],
            group=line[3],
            request_id=line[4],
            retry_times=_int(line[6], "retryTimes"),
            keys=line[7],
        )
    if kind == "SubAfter":
        _need(line, 6, kind)
        return TraceRecord(
            kind,
            line[2],
            request_id=line[1],
            cost_time=_int(line[3], "costTime"),
            success=_bool(line[4]),
            keys=line[5],
            context_code=_int(line[6], "contextCode") if len(line) >= 7 else None,
            timestamp=_int(line[7], "timestamp") if len(line) >= 8 else None,
        )
    # EndTransaction
    _need(line, 13, kind)
    return TraceRecord(
        kind,
        line[5],
        timestamp=_int(line[1], "timestamp"),
        region_id=line[2],
        group=line[3],
        topic=line[4],
        tags=line[6],
        keys=line[7],
        store_host=line[8],
        msg_type=_int(line[9], "msgType"),
        transaction_id=line[10],
        transaction_state=line[11],
        from_transaction_check=_bool(line[12]),
    )


def decode_trace_data(body: bytes) -> tuple[list[TraceRecord], list[TraceProblem]]:
    """Every record of a trace body, and why the others could not be read. A record of an
    unknown type is skipped, as the client's decoder does, and said."""
    records: list[TraceRecord] = []
    problems: list[TraceProblem] = []
    text = body.decode("utf-8", "replace")
    for i, context in enumerate(text.split(FIELD_SPLITOR)):
        if not context:
            continue  # the separator ends every record: the last split is empty
        line = context.split(CONTENT_SPLITOR)
        if line[0] not in TRACE_TYPES:
            problems.append(TraceProblem(i, f"unknown trace type {line[0][:40]!r}"))
            continue
        try:
            records.append(_decode_one(line))
        except _Bad as err:
            problems.append(TraceProblem(i, str(err)))
    return records, problems


# Each type's fields after the type name, as encoderFromContextBean writes them (4.9.8).
FIELD_ORDER: dict[str, tuple[str, ...]] = {
    "Pub": (
        "timestamp",
        "region_id",
        "group",
        "topic",
        "msg_id",
        "tags",
        "keys",
        "store_host",
        "body_length",
        "cost_time",
        "msg_type",
        "offset_msg_id",
        "success",
    ),
    "SubBefore": ("timestamp", "region_id", "group", "request_id", "msg_id", "retry_times", "keys"),
    "SubAfter": (
        "request_id",
        "msg_id",
        "cost_time",
        "success",
        "keys",
        "context_code",
        "timestamp",
    ),
    "EndTransaction": (
        "timestamp",
        "region_id",
        "group",
        "topic",
        "msg_id",
        "tags",
        "keys",
        "store_host",
        "msg_type",
        "transaction_id",
        "transaction_state",
        "from_transaction_check",
    ),
}
