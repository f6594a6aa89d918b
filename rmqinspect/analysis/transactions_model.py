"""What ``transactions`` (:mod:`rmqinspect.analysis.transactions`) reports: each transaction,
its half copies and the findings; the rules live in that module."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class TxState(StrEnum):
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    PENDING = "pending"
    GIVEN_UP = "given_up"


class FindingKind(StrEnum):
    OP_NOT_NUMBER = "op_not_number"  # an op body token that is no decimal offset
    OP_POINTS_NOWHERE = "op_points_nowhere"  # an op offset no half on disk has
    OP_OTHER_TAG = "op_other_tag"  # an op record whose tag is not "d"
    COMMIT_WITHOUT_HALF = "commit_without_half"  # preparedTransactionOffset names no half
    COMMIT_WITHOUT_OP = "commit_without_op"  # committed, op record missing: it will be checked
    COMMIT_ELSEWHERE = "commit_elsewhere"  # commit record not in the half's REAL_TOPIC/REAL_QID
    COMMIT_REPEATED = "commit_repeated"  # more than one commit record for one transaction
    ROLLBACK_AND_COMMIT = "rollback_and_commit"
    GIVEN_UP_AND_RESOLVED = "given_up_and_resolved"
    HALF_WITHOUT_REAL_TOPIC = "half_without_real_topic"
    PASSED_BY_CHECK = "passed_by_check"  # below the check offset, unresolved, no newer copy
    STUCK = "stuck"  # pending longer than the threshold


# What is inconsistent on disk (exit 1), as opposed to what only waits.
INCONSISTENT = frozenset(FindingKind) - {FindingKind.STUCK, FindingKind.PASSED_BY_CHECK}


@dataclass(frozen=True, slots=True)
class TxFinding:
    kind: FindingKind
    position: int  # the record the finding is about (physical offset)
    uniq_key: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class HalfCopy:
    """One stored half: the original or a copy a check stored again."""

    position: int
    queue_id: int
    queue_offset: int
    store_timestamp: int
    check_times: int


@dataclass(slots=True)
class Transaction:
    """One transaction: its half copies (linked by UNIQ_KEY) and what resolved it."""

    uniq_key: str | None
    real_topic: str | None
    real_queue_id: int | None
    producer_group: str | None
    state: TxState = TxState.PENDING
    halves: list[HalfCopy] = field(default_factory=list)
    check_times: int = 0  # the most any copy says
    first_store_timestamp: int | None = None
    age_ms: int | None = None  # to the newest record of the commitlog, while pending
    op_positions: list[int] = field(default_factory=list)
    commit_positions: list[int] = field(default_factory=list)
    rollback_positions: list[int] = field(default_factory=list)
    given_up_position: int | None = None
    checked_past: bool = False  # the check service's offset is past its newest copy
