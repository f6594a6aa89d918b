"""Rendering of ``transactions``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rmqinspect.analysis.transactions import (
    INCONSISTENT,
    FindingKind,
    Transaction,
    TransactionsReport,
    TxFinding,
    TxState,
)
from rmqinspect.format.fate import CHECK_GROUP
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    kind_findings_table,
    print_json_with_arrays,
    print_jsonl_with_arrays,
    print_line,
    print_table,
    print_table_batches,
    to_jsonable,
    verdict_line,
    warn,
)
from rmqinspect.render.values import time_cell, with_times

if TYPE_CHECKING:
    from rich.text import Text

NO_TRANSACTIONS = "no transactional messages"


def _tx_json(tx: Transaction) -> dict[str, Any]:
    doc = to_jsonable(tx)
    doc["halves"] = [with_times(h) for h in doc["halves"]]
    return with_times(doc)


def transactions_head(report: TransactionsReport) -> dict[str, Any]:
    """The JSON document's members before its arrays (:func:`transactions_arrays`)."""
    head: dict[str, Any] = {
        "source": report.source,
        "records": {
            "half": report.half_records,
            "op": report.op_records,
            "commit": report.commit_records,
            "rollback": report.rollback_records,
            "given_up": report.given_up_records,
            "prepared_outside_half_topic": report.prepared_outside_half_topic,
        },
        "check_offset": report.check_offset,
        "newest_store_timestamp": report.newest_store_timestamp,
        "counts": report.counts,
        "oldest_pending": None
        if report.oldest_pending is None
        else _tx_json(report.oldest_pending),
    }
    return with_times(head)


def transactions_arrays(report: TransactionsReport) -> dict[str, Iterator[Any]]:
    """The document's lists, each element made as it is written: a store's transactions as
    one document of dicts took 160 MB for 34,000 of them, four times the report itself."""
    return {
        "transactions": (_tx_json(t) for t in report.transactions),
        "findings": (to_jsonable(f) for f in report.findings),
        "skipped": (to_jsonable(s) for s in report.skipped),
    }


def render_transactions(report: TransactionsReport, fmt: OutputFormat) -> None:
    if report.skipped:
        lost = sum(s.length for s in report.skipped)
        warn(f"{len(report.skipped)} damaged range(s), {lost} bytes, stepped over: not read")
    if fmt is OutputFormat.JSON:
        print_json_with_arrays(transactions_head(report), transactions_arrays(report))
        return
    if fmt is OutputFormat.JSONL:
        print_jsonl_with_arrays(transactions_head(report), transactions_arrays(report))
        return
    if report.empty:
        print(NO_TRANSACTIONS)
        return
    # The head lines wrap at the terminal's width, as the tables do.
    counts = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in report.counts.items())
    print_line(
        f"{len(report.transactions)} transaction(s) from {report.half_records} half record(s), "
        f"{report.op_records} op record(s), {report.commit_records} commit record(s) "
        f"({report.source}): {counts}"
    )
    check = "none" if report.check_offset is None else str(report.check_offset)
    print_line(f"check progress ({CHECK_GROUP} in half queue 0): {check}")
    if report.prepared_outside_half_topic:
        print_line(
            f"{report.prepared_outside_half_topic} PREPARED-type record(s) in real topics "
            "(a 4.x broker never stores one there: written by hand or by a pre-4.3 broker)"
        )
    oldest = report.oldest_pending
    if oldest is not None:
        print_line(
            f"oldest pending: {oldest.uniq_key or '(no UNIQ_KEY)'} for {oldest.real_topic}, "
            f"stored {time_cell(oldest.first_store_timestamp)}, {oldest.check_times} check(s)"
        )
    # Tables of a batch of rows at a time: a table of every row held them all, as text.
    if report.transactions:
        print_table_batches(report.transactions, _transactions_table, capped_on_terminal=True)
    if report.findings:
        print_table_batches(report.findings, _findings_table, capped_on_terminal=True)
    print_table(transactions_verdict(report))


def _findings_table(batch: list[TxFinding], first: bool) -> RowTable:
    errors = {k.value for k in INCONSISTENT}
    f = kind_findings_table((k.value for k in FindingKind), errors, "UNIQ_KEY", first=first)
    for x in batch:
        f.add_row(x.kind.value, x.position, x.uniq_key, x.detail)
    return f


def transactions_verdict(report: TransactionsReport) -> Text:
    """The last line: the inconsistencies and stuck transactions (what ``transactions`` exits
    1 for), or the pending ones, or that every transaction is resolved."""
    inconsistent = report.findings.count(INCONSISTENT)
    stuck = report.findings.count([FindingKind.STUCK])
    if inconsistent or stuck:
        return verdict_line(
            f"{inconsistent} inconsistenc{'y' if inconsistent == 1 else 'ies'}, {stuck} stuck "
            "transaction(s)",
            "bad",
        )
    pending = report.counts.get(TxState.PENDING.value, 0)
    others = len(report.findings)
    if pending or others:
        said = f"no inconsistency, nothing stuck; {pending} pending"
        if others:
            said += f", {others} finding(s)"
        return verdict_line(said, "doubt")
    return verdict_line(f"no inconsistency; {len(report.transactions)} resolved", "good")


_STATE_STYLES = {
    TxState.PENDING.value: "yellow",
    TxState.GIVEN_UP.value.replace("_", " "): "bold red",
}


def _transactions_table(batch: list[Transaction], first: bool) -> RowTable:
    """One row per transaction, a terminal shown the head of a long list. At a narrow width
    the op and commit positions, the first store time, the copies and the checks make way;
    UNIQ_KEYs, topics and times are never cut."""
    t = RowTable(
        "Transactions" if first else None,
        [
            Column("UNIQ_KEY", whole=True),
            Column("real topic:queue", whole=True),
            Column("state", whole=True, styles=_STATE_STYLES),
            Column("copies", right=True, whole=True, drop=2),
            Column("checks", right=True, whole=True, drop=1),
            Column("first stored", whole=True, drop=3),
            Column("op at", whole=True, breaks=",", drop=5),
            Column("commit at", whole=True, breaks=",", drop=4),
        ],
    )
    for tx in batch:
        t.add_row(
            tx.uniq_key,
            f"{tx.real_topic}:{tx.real_queue_id}",
            tx.state.value.replace("_", " "),
            len(tx.halves),
            tx.check_times,
            time_cell(tx.first_store_timestamp),
            ",".join(map(str, tx.op_positions)),
            ",".join(map(str, tx.commit_positions)),
        )
    return t
