"""``lookup``: find messages by offsetMsgId, UNIQ_KEY, key, queue offset, physical offset or time.

Key and UNIQ_KEY lookups reproduce the broker's query path (``IndexService.queryOffset`` inside
``DefaultMessageStore.queryMessage``'s three rounds) on the index files as they are on disk,
touching only the hash slot and its chain of each file (mmap). Hits are then re-checked the way
the client does (``MQAdminImpl.queryMessage``): the index matches on a 32-bit hash, so
collisions are reported and dropped. The commitlog tail after the index's last entry (what the
broker would index on its next start) is scanned too. When the index is missing or broken the
result says so and suggests ``--scan``, a full commitlog walk.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rmqinspect.analysis import Progress
    from rmqinspect.analysis.lookup.direct import (
        lookup_queue_offset,
        lookup_time,
        parse_queue_ref,
    )
    from rmqinspect.analysis.lookup.index import RestartedIndex, restarted_index
    from rmqinspect.analysis.lookup.keys import (
        KeyQuery,
        default_max_num,
        known_topics,
        lookup_key,
    )
    from rmqinspect.analysis.lookup.offset import lookup_msg_id, lookup_phy_offset
    from rmqinspect.analysis.lookup.result import (
        LONG_MAX,
        Hit,
        IndexReport,
        LookupResult,
        Mode,
        Rejected,
        Via,
    )

# Each name's module, imported on first use (PEP 562): ``lookup --msg-id`` needs none of the
# index, queue and scan machinery (numpy), and starts without it.
_HOMES = {
    "Progress": "rmqinspect.analysis",
    "lookup_queue_offset": "rmqinspect.analysis.lookup.direct",
    "lookup_time": "rmqinspect.analysis.lookup.direct",
    "parse_queue_ref": "rmqinspect.analysis.lookup.direct",
    "RestartedIndex": "rmqinspect.analysis.lookup.index",
    "restarted_index": "rmqinspect.analysis.lookup.index",
    "KeyQuery": "rmqinspect.analysis.lookup.keys",
    "default_max_num": "rmqinspect.analysis.lookup.keys",
    "known_topics": "rmqinspect.analysis.lookup.keys",
    "lookup_key": "rmqinspect.analysis.lookup.keys",
    "lookup_msg_id": "rmqinspect.analysis.lookup.offset",
    "lookup_phy_offset": "rmqinspect.analysis.lookup.offset",
    "LONG_MAX": "rmqinspect.analysis.lookup.result",
    "Hit": "rmqinspect.analysis.lookup.result",
    "IndexReport": "rmqinspect.analysis.lookup.result",
    "LookupResult": "rmqinspect.analysis.lookup.result",
    "Mode": "rmqinspect.analysis.lookup.result",
    "Rejected": "rmqinspect.analysis.lookup.result",
    "Via": "rmqinspect.analysis.lookup.result",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "LONG_MAX",
    "Hit",
    "IndexReport",
    "KeyQuery",
    "LookupResult",
    "Mode",
    "Progress",
    "Rejected",
    "RestartedIndex",
    "Via",
    "default_max_num",
    "known_topics",
    "lookup_key",
    "lookup_msg_id",
    "lookup_phy_offset",
    "lookup_queue_offset",
    "lookup_time",
    "parse_queue_ref",
    "restarted_index",
]
