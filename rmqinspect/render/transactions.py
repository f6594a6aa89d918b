"""Rendering of ``transactions``."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from rmqinspect.analysis.transactions import Transaction, TransactionsReport
from rmqinspect.format.fate import CHECK_GROUP
from rmqinspect.render.output import OutputFormat, print_document, print_table, to_jsonable, warn
from rmqinspect.render.values import time_cell, with_times

NO_TRANSACTIONS = "no transactional messages"


def _tx_json(tx: Transaction) -> dict[str, Any]:
    doc = to_jsonable(tx)
    doc["halves"] = [with_times(h) for h in doc["halves"]]
    return with_times(doc)


def transactions_json(report: TransactionsReport) -> dict[str, Any]:
    doc: dict[str, Any] = {
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
        "transactions": [_tx_json(t) for t in report.transactions],
        "findings": to_jsonable(report.findings),
        "skipped": to_jsonable(report.skipped),
    }
    return with_times(doc)


def render_transactions(report: TransactionsReport, fmt: OutputFormat) -> None:
    if report.skipped:
        lost = sum(s.length for s in report.skipped)
        warn(f"{len(report.skipped)} damaged range(s), {lost} bytes, stepped over: not read")
    if print_document(transactions_json(report), fmt):
        return
    if report.empty:
        print(NO_TRANSACTIONS)
        return
    counts = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in report.counts.items())
    print(
        f"{len(report.transactions)} transaction(s) from {report.half_records} half record(s), "
        f"{report.op_records} op record(s), {report.commit_records} commit record(s) "
        f"({report.source}): {counts}"
    )
    check = "none" if report.check_offset is None else str(report.check_offset)
    print(f"check progress ({CHECK_GROUP} in half queue 0): {check}")
    if report.prepared_outside_half_topic:
        print(
            f"{report.prepared_outside_half_topic} PREPARED-type record(s) in real topics "
            "(a 4.x broker never stores one there: written by hand or by a pre-4.3 broker)"
        )
    oldest = report.oldest_pending
    if oldest is not None:
        print(
            f"oldest pending: {oldest.uniq_key or '(no UNIQ_KEY)'} for {oldest.real_topic}, "
            f"stored {time_cell(oldest.first_store_timestamp)}, {oldest.check_times} check(s)"
        )
    if report.transactions:
        _transactions_table(report)
    if report.findings:
        f = Table(title="Findings", title_justify="left")
        for col in ("kind", "at", "UNIQ_KEY", "detail"):
            f.add_column(col, justify="right" if col == "at" else "left")
        for x in report.findings:
            f.add_row(x.kind.value, str(x.position), x.uniq_key or "", x.detail)
        print_table(f)


def _transactions_table(report: TransactionsReport) -> None:
    t = Table(title="Transactions", title_justify="left")
    for col in (
        "UNIQ_KEY",
        "real topic:queue",
        "state",
        "copies",
        "checks",
        "first stored",
        "op at",
        "commit at",
    ):
        t.add_column(col, justify="right" if col in ("copies", "checks") else "left")
    for tx in report.transactions:
        t.add_row(
            tx.uniq_key or "",
            f"{tx.real_topic}:{tx.real_queue_id}",
            tx.state.value.replace("_", " "),
            str(len(tx.halves)),
            str(tx.check_times),
            time_cell(tx.first_store_timestamp),
            ",".join(map(str, tx.op_positions)),
            ",".join(map(str, tx.commit_positions)),
        )
    print_table(t)
