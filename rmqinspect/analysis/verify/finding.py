"""What ``verify`` finds, as data: :class:`Finding`, the registry of check ids, and the capped
collector every check writes into.

Every check has a stable dotted id (``family.what``) and one severity, listed in :data:`CHECKS`
(the README documents the same list; a test keeps them equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Higher is worse: compare with a ``--fail-on`` threshold."""
        return _RANK[self]


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


@dataclass(frozen=True, slots=True)
class Check:
    id: str
    severity: Severity
    summary: str  # what a finding of this check means, in one line


def _checks(*rows: tuple[str, Severity, str]) -> Mapping[str, Check]:
    return MappingProxyType({id_: Check(id_, sev, text) for id_, sev, text in rows})


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741

CHECKS = _checks(
    # commitlog files, every file from its first byte
    ("commitlog.file_name", E, "a commitlog entry that is not a 20-digit offset file"),
    ("commitlog.file_gap", E, "consecutive file names differ by more than the file size"),
    ("commitlog.file_size", E, "a file whose length differs from the configured file size"),
    ("commitlog.magic", E, "no known magic code where a record must start"),
    ("commitlog.size_bounds", E, "TOTALSIZE below the minimum record or past the end of the file"),
    ("commitlog.body_crc", E, "BODYCRC does not match the body"),
    (
        "commitlog.body_compression",
        E,
        "a body its sysFlag says is compressed does not decompress (its consumers cannot read it)",
    ),
    ("commitlog.prop_crc", E, "the 5.x __CRC32# property does not match the record"),
    ("commitlog.total_size", E, "the fields add up to a length other than TOTALSIZE"),
    ("commitlog.parse", E, "the broker's record check fails otherwise (e.g. a non-integer DELAY)"),
    ("commitlog.physical_offset", E, "PHYSICALOFFSET differs from where the record sits"),
    (
        "commitlog.blank",
        E,
        "BLANK rules: its TOTALSIZE is not the rest of the file, a record "
        "leaves fewer than 8 bytes, or a file followed by data ends without a BLANK",
    ),
    ("commitlog.timestamp_backwards", W, "a STORETIMESTAMP earlier than the record before it"),
    ("commitlog.trailing_bytes", W, "non-zero bytes after the last record of the log"),
    (
        "commitlog.intact_after_damage",
        W,
        "intact records after a bad one: the restart discards them, salvage recovers them",
    ),
    # DLedger data, index, checkpoint and currterm (dledger-store-format.md)
    ("dledger.entry_magic", E, "an entry header whose magic is neither 1 nor the -1 blank"),
    ("dledger.entry_pos", E, "an entry header whose pos field is not the entry's position"),
    (
        "dledger.entry_size",
        E,
        "an entry size of 44 or less, past the end of the file, not body size + 48, "
        "or 0 (no data) while entries follow",
    ),
    ("dledger.entry_index", E, "an entry index that does not follow the previous entry's"),
    ("dledger.entry_term", E, "an entry term below the previous entry's"),
    ("dledger.body_size", E, "an entry body size other than the TOTALSIZE of its record"),
    ("dledger.index_unit", E, "an index unit that disagrees with the entry header it points to"),
    (
        "dledger.index_missing",
        W,
        "an entry without its index unit (DLedger's recovery rewrites the index from the data)",
    ),
    ("dledger.index_past_end", W, "non-zero index units after the last entry in the data"),
    ("dledger.file_name", E, "a DLedger index entry that is not a 20-digit offset file"),
    ("dledger.file_gap", E, "DLedger index file names that are not contiguous"),
    ("dledger.file_size", E, "a DLedger index file other than 160 MiB (DLedger exits at load)"),
    (
        "dledger.checkpoint",
        E,
        "a DLedger checkpoint whose committedIndex is not a number, beyond endIndex, "
        "or beyond the last entry",
    ),
    ("dledger.checkpoint_missing", W, "no DLedger checkpoint while the data holds entries"),
    ("dledger.currterm", E, "currTerm not a number, or below the term of the last entry"),
    # consume queues, both directions
    ("consumequeue.file_name", E, "a consume-queue entry that is not a 20-digit offset file"),
    ("consumequeue.file_gap", E, "consume-queue files are missing between two files"),
    ("consumequeue.file_size", E, "a consume-queue file of another length than the others"),
    (
        "consumequeue.invalid_unit",
        E,
        "a unit inside the queue's range that is not valid "
        "(offset < 0 or size <= 0) and not a pre-blank placeholder; "
        "consecutive ones in a file are one finding",
    ),
    ("consumequeue.points_past_end", E, "a unit pointing at or past the end of the commitlog"),
    ("consumequeue.no_record", E, "no message record where a unit points"),
    ("consumequeue.size_mismatch", E, "the record's TOTALSIZE differs from the unit's size"),
    ("consumequeue.wrong_queue", E, "the record belongs to another topic or queue id"),
    ("consumequeue.queue_offset_mismatch", E, "the record's QUEUEOFFSET differs from the unit's"),
    (
        "consumequeue.tags_code",
        E,
        "tagsCode differs from the tag hash (or, in SCHEDULE_TOPIC_XXXX, the delivery time)",
    ),
    ("consumequeue.units_after_end", W, "non-zero units after the queue's last valid unit"),
    # BatchConsumeQueue (analysis/verify/batch_queues.py)
    (
        "batchcq.base_offset",
        E,
        "a BatchConsumeQueue unit whose msgBaseOffset does not follow the unit before's batch",
    ),
    (
        "batchcq.batch_size",
        E,
        "a BatchConsumeQueue unit whose batchSize or msgBaseOffset is not its record's "
        "INNER_NUM or INNER_BASE",
    ),
    ("batchcq.torn_unit", W, "a BatchConsumeQueue file ending inside a 46-byte unit"),
    (
        "consumequeue.missing_queue",
        E,
        "records on disk for a queue whose directory is missing, "
        "and the restart does not rebuild it",
    ),
    (
        "consumequeue.missing_unit",
        E,
        "a record its queue does not serve, and the restart does not rebuild the unit",
    ),
    (
        "consumequeue.lagging",
        W,
        "records after the queue's last unit (a killed broker's "
        "dispatch lag); the restart rebuilds their units",
    ),
    # index files
    ("index.geometry", W, "the slot/entry counts of an index file cannot be told: not checked"),
    ("index.header", E, "the header disagrees with the entries"),
    ("index.slot", E, "a hash slot pointing outside the entries, or at an entry of another slot"),
    ("index.chain_link", E, "a prev link outside the entries, to a newer entry or to another slot"),
    ("index.chain_cycle", E, "a hash chain that loops"),
    ("index.points_past_end", E, "an entry pointing at or past the end of the commitlog"),
    ("index.no_record", E, "no message record where an entry points"),
    ("index.key_hash", E, "the record an entry points to has no key with the entry's hash"),
    ("index.hash_collision", I, "distinct keys share one hash (harmless: the client filters)"),
    ("index.below_commitlog", I, "entries pointing below the commitlog's first file (retention)"),
    # checkpoint, config and offsets
    ("checkpoint.missing", W, "no checkpoint file (the broker starts from zeros)"),
    ("checkpoint.size", W, "a checkpoint file other than 4096 bytes"),
    ("checkpoint.ahead", E, "a checkpoint time or offset ahead of the data"),
    (
        "config.parse",
        E,
        "a config file the broker cannot load: it starts without the table or refuses to start",
    ),
    ("config.bak_fallback", W, "the broker loads the .bak copy of a config file"),
    ("config.tmp_left", I, "a .tmp config file left by a 4.9 broker that died mid-write"),
    ("offsets.above_max", W, "a consumer or delay offset above its queue's max offset"),
    (
        "offsets.below_min",
        I,
        "a consumer or delay offset below its queue's min offset (the broker corrects it)",
    ),
    ("offsets.no_queue", W, "an offset for a queue that has no consume queue on disk"),
    # the 5.x timer store (analysis/verify/timer.py)
    (
        "timer.log",
        E,
        "a timerlog the broker's recovery cuts short: a unit of bad size or magic, a file of "
        "another length, units ending inside a file or before timercheck's flush position",
    ),
    ("timer.chain", E, "a wheel slot's chain that loops, leaves the log or enters another slot"),
    ("timer.slot", E, "a wheel slot whose stored time is not its own, or a wheel of bad length"),
    (
        "timer.points_past_end",
        E,
        "a timerlog unit pointing past the end of the commitlog (apache/rocketmq#10668)",
    ),
    ("timer.no_record", E, "no timer-topic record of the unit's size where a timerlog unit points"),
    (
        "timer.checkpoint",
        W,
        "timercheck missing, unreadable, or past the timer queue's max offset",
    ),
    ("store.unsupported", I, "a layout verify does not check yet (compaction, ...)"),
)

del E, W, I


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a check found. ``file`` is relative to the store ("" for the store itself);
    the position fields are those that apply (None otherwise)."""

    check: str
    severity: Severity
    file: str
    detail: str
    file_position: int | None = None
    physical_offset: int | None = None
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    hexdump: tuple[str, ...] = ()


# A corrupt file can yield one finding per unit or record; beyond this many per check and file
# only the count is kept (the summary counts them all).
MAX_LISTED_PER_CHECK_AND_FILE = 1000


@dataclass
class Findings:
    """Findings as checks add them: the first ``limit`` per check and file are listed, all are
    counted."""

    limit: int = MAX_LISTED_PER_CHECK_AND_FILE
    listed: list[Finding] = field(default_factory=list)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    _shown: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(
        self,
        check: str,
        file: str,
        detail: str,
        *,
        file_position: int | None = None,
        physical_offset: int | None = None,
        topic: str | None = None,
        queue_id: int | None = None,
        queue_offset: int | None = None,
        hexdump: tuple[str, ...] = (),
    ) -> None:
        key = (check, file)
        self.counts[key] = self.counts.get(key, 0) + 1
        if self._shown.get(key, 0) >= self.limit:
            return  # only counted: a region of copies adds hundreds of thousands
        self._show(
            Finding(
                check,
                CHECKS[check].severity,
                file,
                detail,
                file_position,
                physical_offset,
                topic,
                queue_id,
                queue_offset,
                hexdump,
            )
        )

    def room(self, check: str, file: str) -> int:
        """How many more findings of ``check`` in ``file`` would be listed: a check that
        finds thousands lists these and :meth:`count_more` counts the rest, without a
        detail or a Finding for each."""
        return max(self.limit - self._shown.get((check, file), 0), 0)

    def count_more(self, check: str, file: str, n: int) -> None:
        """Count ``n`` more findings of ``check`` in ``file`` that are not listed (there is no
        :meth:`room` left for them)."""
        if n:
            key = (check, file)
            self.counts[key] = self.counts.get(key, 0) + n

    def _show(self, finding: Finding) -> None:
        key = (finding.check, finding.file)
        shown = self._shown.get(key, 0)
        if shown < self.limit:
            self._shown[key] = shown + 1
            self.listed.append(finding)

    def extend(self, other: Findings) -> None:
        """Append ``other``'s findings after these (the listing limit still holds per check
        and file)."""
        for finding in other.listed:
            self._show(finding)
        for key, n in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + n

    def by_check(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for (check, _), n in self.counts.items():
            out[check] = out.get(check, 0) + n
        return dict(sorted(out.items()))


def severity_counts(counts: Mapping[str, int]) -> dict[str, int]:
    out = {s.value: 0 for s in Severity}
    for c, n in counts.items():
        out[CHECKS[c].severity.value] += n
    return out


_LAYOUT = {
    "bad_name": "file_name",
    "directory_entry": "file_name",
    "wrong_size": "file_size",
    "zero_length": "file_size",
    "gap": "file_gap",
}


def layout_check(family: str, kind: str) -> str:
    """The check id of a :class:`~rmqinspect.store.files.LayoutProblem` of ``kind`` in the
    file family ``family`` (``commitlog``, ``consumequeue``, or ``dledger`` for its index files)."""
    return f"{family}.{_LAYOUT.get(kind, 'file_name')}"
