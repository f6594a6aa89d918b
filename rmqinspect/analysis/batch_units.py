"""What a BatchConsumeQueue unit says of its record (docs/batch-consume-queue.md): the one rule
``consumequeue`` and ``verify`` apply beyond the unit rule of analysis/units.py.

The reput sets a unit's msgBaseOffset and batchSize from the record's ``INNER_BASE`` and
``INNER_NUM`` properties when it has both (``CommitLog.setBatchSizeIfNeeded``, parsed with
``Long.parseLong`` and ``Short.parseShort``); the broker puts ``INNER_NUM`` on an inner-batch
record when it receives it (``SendMessageProcessor``, the count of the messages in its body)
and ``INNER_BASE`` when it assigns the queue offset (``BatchConsumeQueue.assignQueueOffset``).
"""

from __future__ import annotations

from rmqinspect.format import commitlog as cl
from rmqinspect.format import properties as props
from rmqinspect.format.javamath import java_parse_int, java_parse_long

_SHORT_MAX = 0x7FFF


def batch_mismatch(record: cl.MessageRecord, base: int, batch_size: int) -> str | None:
    """Why the unit (``base``, ``batch_size``) is not what the reput writes for ``record``;
    None when it is, or when the record carries neither property (the count cannot be
    checked)."""
    p = record.properties
    num_text, base_text = p.get(props.INNER_NUM), p.get(props.INNER_BASE)
    if num_text is None and base_text is None:
        return None
    if num_text is None or base_text is None:
        missing = props.INNER_BASE if base_text is None else props.INNER_NUM
        return f"the record has no {missing}: the reput would not have written this unit"
    num = java_parse_int(num_text)
    if num is None or not -_SHORT_MAX - 1 <= num <= _SHORT_MAX:
        return f"{props.INNER_NUM} {num_text[:40]!r} is not a short: the reput fails on it"
    if num != batch_size:
        return f"batchSize {batch_size} but the record's {props.INNER_NUM} is {num}"
    if java_parse_long(base_text) != base:
        return f"msgBaseOffset {base} but the record's {props.INNER_BASE} is {base_text[:40]!r}"
    return None
