"""What a lookup answers: the hits, the candidates rejected and why, how the index was used."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from rmqinspect.format import commitlog as cl

if TYPE_CHECKING:
    # Only walks fill it: ``lookup --msg-id`` imports this module without numpy.
    from rmqinspect.analysis.messages import SkippedRange

LONG_MAX = 2**63 - 1
QUERY_ROUNDS = 3  # DefaultMessageStore.queryMessage
DEFAULT_KEY_MAX_NUM = 64  # mqadmin queryMsgByKey asks for 64 (capped by maxMsgsNumBatch)


class Mode(StrEnum):
    MSG_ID = "msg_id"
    UNIQ_KEY = "uniq_key"
    KEY = "key"
    QUEUE_OFFSET = "queue_offset"
    PHY_OFFSET = "physical_offset"
    TIME = "time"


class Via(StrEnum):
    INDEX = "index"
    TAIL_SCAN = "tail_scan"  # commitlog after the index's last entry
    SCAN = "scan"  # full commitlog walk (--scan)
    CONSUME_QUEUE = "consume_queue"
    PHYSICAL_OFFSET = "physical_offset"


@dataclass(frozen=True, slots=True)
class Hit:
    record: cl.MessageRecord
    via: Via
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rejected:
    """A candidate that is not an answer, and why (hash collision, unreadable, ...)."""

    physical_offset: int
    reason: str
    record: cl.MessageRecord | None = None


@dataclass
class IndexReport:
    """How the index was used for one key (all topics tried, for a UNIQ_KEY without --topic)."""

    files_total: int = 0
    files_used: int = 0
    unusable: list[str] = field(default_factory=list)
    chain_problems: list[str] = field(default_factory=list)
    covered_from: int | None = None  # smallest beginPhyOffset of a usable non-empty file
    covered_to: int | None = None  # largest endPhyOffset (start of the last indexed record)
    index_offsets: list[int] = field(default_factory=list)  # IndexService.queryOffset, round 1
    broker_offsets: list[int] = field(default_factory=list)  # what queryMessage returned
    rounds: int = 0
    keys_queried: list[str] = field(default_factory=list)

    @property
    def state(self) -> str:
        """missing, broken (no usable file), damaged (some files or chains bad), or ok."""
        if self.files_total == 0:
            return "missing"
        if self.files_used == 0:
            return "broken"
        if self.unusable or self.chain_problems:
            return "damaged"
        return "ok"


@dataclass
class LookupResult:
    mode: Mode
    query: dict[str, object]
    hits: list[Hit] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    index: IndexReport | None = None
    scanned: bool = False
    tail_scanned: tuple[int, int] | None = None  # [start, end) walked after the index
    skipped: list[SkippedRange] = field(default_factory=list)  # damage a walk stepped over
    warnings: list[str] = field(default_factory=list)
    suggest_scan: bool = False
    truncated: bool = False  # more match than listed: --limit, or --max-num (see warnings)

    @property
    def found(self) -> bool:
        return bool(self.hits)


def sort_hits(result: LookupResult) -> None:
    result.hits.sort(key=lambda h: (h.record.store_timestamp, h.record.position))


def keep_limit(result: LookupResult, limit: int | None) -> None:
    """``--limit``: the first ``limit`` hits, oldest first."""
    if limit is not None and len(result.hits) > limit:
        del result.hits[limit:]
        result.truncated = True
        result.warnings.append("more messages match: raise --limit to see them")
