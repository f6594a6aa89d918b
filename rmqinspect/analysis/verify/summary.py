"""The store's statistics as ``verify`` saw them (in the spirit of ``pg_waldump --stats``):
records and bytes per topic and per file, the store-time range, and findings by check."""

from __future__ import annotations

from dataclasses import dataclass, field

from rmqinspect.analysis.verify.commitlog import FileResult, TopicCount
from rmqinspect.analysis.verify.finding import Findings, severity_counts


@dataclass(frozen=True, slots=True)
class TopicSummary:
    topic: str
    records: int
    bytes: int


@dataclass(frozen=True, slots=True)
class FileSummary:
    file: str
    start: int
    records: int
    bytes: int  # bytes the records occupy
    damaged_bytes: int  # bytes no record could be read from (before the zero tail)
    intact_after_damage: int
    end: str  # blank | zeros | damage | empty
    first_store_timestamp: int | None
    last_store_timestamp: int | None


@dataclass(frozen=True, slots=True)
class Summary:
    store: str
    profile: str
    crc_checked: bool
    records: int
    bytes: int
    damaged_bytes: int
    intact_after_damage: int
    first_store_timestamp: int | None
    last_store_timestamp: int | None
    data_end: int  # where the commitlog's data ends (physical offset)
    commitlog_files: int
    consume_queues: int
    units_checked: int
    index_files: int
    index_entries_checked: int
    restart_predicted: bool  # the restart was emulated to judge records without units
    findings: int
    findings_listed: int  # the rest exceed the per check and file listing limit
    findings_by_severity: dict[str, int]
    findings_by_check: dict[str, int]
    topics: list[TopicSummary] = field(default_factory=list)
    files: list[FileSummary] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Coverage:
    """How much of the consume queues and index files was checked."""

    consume_queues: int
    units_checked: int
    index_files: int
    index_entries_checked: int
    restart_predicted: bool


def summarize(
    store: str,
    profile: str,
    crc_checked: bool,
    results: list[FileResult],
    data_end: int,
    coverage: Coverage,
    findings: Findings,
) -> Summary:
    topics: dict[str, TopicCount] = {}
    for r in results:
        for name, c in r.topics.items():
            t = topics.setdefault(name, TopicCount())
            t.records += c.records
            t.bytes += c.bytes
    firsts = [r.first_store_timestamp for r in results if r.first_store_timestamp is not None]
    lasts = [r.last_store_timestamp for r in results if r.last_store_timestamp is not None]
    by_check = findings.by_check()
    return Summary(
        store=store,
        profile=profile,
        crc_checked=crc_checked,
        records=sum(r.records for r in results),
        bytes=sum(r.bytes for r in results),
        damaged_bytes=sum(r.damaged_bytes for r in results),
        intact_after_damage=sum(r.intact_after_damage for r in results),
        first_store_timestamp=min(firsts, default=None),
        last_store_timestamp=max(lasts, default=None),
        data_end=data_end,
        commitlog_files=len(results),
        consume_queues=coverage.consume_queues,
        units_checked=coverage.units_checked,
        index_files=coverage.index_files,
        index_entries_checked=coverage.index_entries_checked,
        restart_predicted=coverage.restart_predicted,
        findings=sum(by_check.values()),
        findings_listed=len(findings.listed),
        findings_by_severity=severity_counts(by_check),
        findings_by_check=by_check,
        topics=[
            TopicSummary(name, t.records, t.bytes)
            for name, t in sorted(topics.items(), key=lambda kv: (-kv[1].records, kv[0]))
        ],
        files=[
            FileSummary(
                r.file,
                r.start,
                r.records,
                r.bytes,
                r.damaged_bytes,
                r.intact_after_damage,
                r.end,
                r.first_store_timestamp,
                r.last_store_timestamp,
            )
            for r in results
        ],
    )
