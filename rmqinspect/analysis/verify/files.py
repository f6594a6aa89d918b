"""Commitlog checks that need every file's result at once (:func:`.commitlog.check_file` gives
them): the file list's layout, files that end without a BLANK while later files hold data, the
bytes after the log's last record, and store times across files."""

from __future__ import annotations

from rmqinspect.analysis.verify.commitlog import FileResult
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.finding import Findings, layout_check
from rmqinspect.store.files import LayoutProblem


def check_files(
    ctx: Context, results: list[FileResult], problems: list[LayoutProblem], findings: Findings
) -> None:
    """What needs the whole file list: its layout, files that end without a BLANK while later
    files hold data, the bytes after the log's last record, and store times across files."""
    for p in problems:
        findings.add(layout_check("commitlog", p.kind), ctx.rel(p.path), p.message)
    with_data = [i for i, r in enumerate(results) if r.extent]
    last_data = with_data[-1] if with_data else -1
    last_ts: int | None = None
    for i, r in enumerate(results):
        if r.tail is not None:
            pos, length, why = r.tail
            if i == last_data:
                findings.add(
                    "commitlog.trailing_bytes",
                    r.file,
                    f"{length} non-zero bytes after the last record ({why}): stale bytes past "
                    "the write position, or a record the broker never finished",
                    file_position=pos,
                    physical_offset=r.start + pos,
                )
            else:
                findings.add(
                    r.tail_check,
                    r.file,
                    f"{length} unreadable bytes end the file ({why}) and later files hold data: "
                    "the restart stops here and deletes them",
                    file_position=pos,
                    physical_offset=r.start + pos,
                )
        elif r.end == "zeros" and i < last_data:
            findings.add(
                "commitlog.blank",
                r.file,
                "the file's records end without a BLANK while later files hold data: the "
                "restart stops here and deletes them",
                file_position=r.end_position,
                physical_offset=r.start + r.end_position,
            )
        if r.first_store_timestamp is not None:
            if last_ts is not None and r.first_store_timestamp < last_ts:
                findings.add(
                    "commitlog.timestamp_backwards",
                    r.file,
                    f"the file's first STORETIMESTAMP {r.first_store_timestamp} is "
                    f"{last_ts - r.first_store_timestamp} ms before the previous file's last",
                    file_position=0,
                    physical_offset=r.start,
                )
            last_ts = r.last_store_timestamp
