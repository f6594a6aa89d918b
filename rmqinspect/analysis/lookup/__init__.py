"""``lookup``: find messages by offsetMsgId, UNIQ_KEY, key, queue offset, physical offset or time.

Key and UNIQ_KEY lookups reproduce the broker's query path (``IndexService.queryOffset`` inside
``DefaultMessageStore.queryMessage``'s three rounds) on the index files as they are on disk,
touching only the hash slot and its chain of each file (mmap). Hits are then re-checked the way
the client does (``MQAdminImpl.queryMessage``): the index matches on a 32-bit hash, so
collisions are reported and dropped. The commitlog tail after the index's last entry (what the
broker would index on its next start) is scanned too. When the index is missing or broken the
result says so and suggests ``--scan``, a full commitlog walk.
"""

from rmqinspect.analysis import Progress
from rmqinspect.analysis.lookup.direct import (
    lookup_msg_id,
    lookup_phy_offset,
    lookup_queue_offset,
    lookup_time,
    parse_queue_ref,
)
from rmqinspect.analysis.lookup.index import RestartedIndex, restarted_index
from rmqinspect.analysis.lookup.keys import KeyQuery, default_max_num, known_topics, lookup_key
from rmqinspect.analysis.lookup.result import (
    LONG_MAX,
    Hit,
    IndexReport,
    LookupResult,
    Mode,
    Rejected,
    Via,
)

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
