"""``rmqinspect index STORE [FILE]``: index file headers, slot occupancy, chain lengths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import typer

from rmqinspect.analysis.indexes import IndexEntryRow, index_reports, iter_entries
from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import (
    FormatOpt,
    LimitOpt,
    StoreOrFileArg,
    open_store,
    with_store_options,
)
from rmqinspect.render.indexes import render_index
from rmqinspect.render.output import resolve_format, warn
from rmqinspect.store.layout import StorePart
from rmqinspect.store.loose import LooseFile, LooseKind
from rmqinspect.store.model import StoreOptions

LOOSE = LooseFile(LooseKind.INDEX)  # STORE may be one index file


@handle_errors
@with_store_options
def index(
    store: StoreOrFileArg,
    file: Annotated[
        str | None, typer.Argument(help="One index file (name under index/); default: all.")
    ] = None,
    entries: Annotated[
        bool, typer.Option("--entries", help="Also list the entries, in write order.")
    ] = False,
    limit: LimitOpt = None,
    format: FormatOpt = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Header of each index file with slot occupancy and hash-chain statistics.

    STORE may be one index file on its own (its geometry from its size, or --index-slots and
    --index-entries).

    Example: rmqinspect index STORE 20240501100000000 --entries --limit 50
    """
    fmt = resolve_format(format)
    with open_store(store, store_options, "index", StorePart.INDEX, LOOSE) as st:
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
