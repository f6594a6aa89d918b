"""``rmqinspect index STORE [FILE]``: index file headers, slot occupancy, chain lengths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import typer

from rmqinspect.analysis.indexes import IndexEntryRow, index_reports, iter_entries
from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import (
    CommitlogSizeOpt,
    CqSizeOpt,
    FormatOpt,
    IndexEntriesOpt,
    IndexSlotsOpt,
    LimitOpt,
    ProfileOpt,
    StoreArg,
    open_store,
)
from rmqinspect.render.indexes import render_index
from rmqinspect.render.output import resolve_format, warn


@handle_errors
def index(
    store: StoreArg,
    file: Annotated[
        str | None, typer.Argument(help="One index file (name under index/); default: all.")
    ] = None,
    entries: Annotated[
        bool, typer.Option("--entries", help="Also list the entries, in write order.")
    ] = False,
    limit: LimitOpt = None,
    format: FormatOpt = None,
    commitlog_file_size: CommitlogSizeOpt = None,
    cq_file_size: CqSizeOpt = None,
    index_slots: IndexSlotsOpt = None,
    index_entries: IndexEntriesOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Header of each index file with slot occupancy and hash-chain statistics.

    Example: rmqinspect index STORE 20240501100000000 --entries --limit 50
    """
    fmt = resolve_format(format)
    with open_store(
        store, commitlog_file_size, cq_file_size, index_slots, index_entries, profile
    ) as st:
        reports = index_reports(st, file)
        if not reports:
            warn(f"no index files under {st.root / 'index'}")
        for r in reports:
            if r.info.error:
                warn(r.info.error)

        def rows() -> Iterator[IndexEntryRow]:
            n = 0
            for r in reports:
                for row in iter_entries(st, r.info):
                    if limit is not None and n >= limit:
                        return
                    n += 1
                    yield row

        render_index(reports, rows() if entries else None, fmt)


def register(app: typer.Typer) -> None:
    app.command("index")(index)
