"""``rmqinspect export STORE... OUT``: the stores' tables as Parquet datasets (one store, or a
fleet with a broker partition)."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer

from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import open_store, with_store_options
from rmqinspect.export import Engine, ExportOptions, Table
from rmqinspect.export.fleet import fleet_members, split_pair
from rmqinspect.export.run import DEFAULT_MASTER, chosen_engine, export_members
from rmqinspect.render.export import ExportFormat, export_progress, render_export
from rmqinspect.render.output import OutputFormat, resolve_format, warn
from rmqinspect.store.layout import ALL_PARTS, StorePart
from rmqinspect.store.model import StoreOptions


def _tables(text: str) -> tuple[Table, ...]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    known = {t.value: t for t in Table}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise typer.BadParameter(
            f"unknown table {', '.join(unknown) or '(none)'}; choose from {', '.join(known)}",
            param_hint="--tables",
        )
    return tuple(known[n] for n in names)


def _conf(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r} is not key=value", param_hint="--conf")
        out.append((key.strip(), value))
    return tuple(out)


@handle_errors
@with_store_options
def export(
    stores: Annotated[
        list[str],
        typer.Argument(
            metavar="STORE... [OUT]",
            help="Store directories (storePathRootDir), or NAME=STORE pairs; without --out the "
            "last is OUT. Several stores make one dataset with a broker partition (NAME, else "
            "the store host address in the records).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="New or empty directory for the Parquet datasets (outside every STORE).",
            show_default=False,
        ),
    ] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            case_sensitive=False,
            help="spark: a PySpark job (needs Java 17+); arrow: pyarrow only, this machine; "
            "auto: spark where Java 17+ is found or --master is given, else arrow.",
        ),
    ] = Engine.AUTO,
    tables: Annotated[
        str,
        typer.Option(
            "--tables",
            help="Comma-separated tables: " + ",".join(t.value for t in Table) + ".",
        ),
    ] = ",".join(t.value for t in Table),
    master: Annotated[
        str, typer.Option("--master", help="Spark master URL (spark engine).")
    ] = DEFAULT_MASTER,
    conf: Annotated[
        list[str] | None,
        typer.Option("--conf", help="Extra Spark setting key=value (repeatable)."),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help="Worker processes (arrow engine; default: CPUs)."),
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace an earlier export in OUT (only what its manifest lists is deleted).",
        ),
    ] = False,
    format: Annotated[
        ExportFormat | None,
        typer.Option(
            "--format",
            "-F",
            case_sensitive=False,
            help="table or json summary (default: table on a terminal, json when piped).",
        ),
    ] = None,
    *,
    store_options: StoreOptions,
) -> None:
    """Export messages, consume queue units, index entries, consumer offsets and findings to
    Parquet under OUT, then write OUT/_manifest.json (present only when the export is
    complete). STORE is only read.

    Example: rmqinspect export /data/rocketmq/store /tmp/export --engine arrow

    A fleet: rmqinspect export a=/data/broker-a/store b=/data/broker-b/store --out /tmp/fleet
    """
    if out is None:
        if len(stores) < 2:
            raise typer.BadParameter("give STORE and OUT, or --out OUT", param_hint="OUT")
        *stores, last = stores
        out = Path(last)
    pairs = [split_pair(text) for text in stores]
    engine, why = chosen_engine(engine, master)
    if why is not None:
        warn(why)
    options = ExportOptions(
        tables=_tables(tables),
        engine=engine,
        master=master,
        conf=_conf(conf or []),
        jobs=jobs,
        overwrite=overwrite,
        store=store_options,
    )
    fmt = resolve_format(None if format is None else OutputFormat(format.value))
    person = fmt is OutputFormat.TABLE and sys.stdout.isatty()
    # A layout the export cannot read is refused before any work starts; the store stays open
    # across the export, the one store that says whether it looked live.
    with ExitStack() as stack:
        reads = ALL_PARTS | StorePart.EXPORT
        opened = [
            (name, stack.enter_context(open_store(path, store_options, "export", reads)))
            for name, path in pairs
        ]
        try:
            members = fleet_members(opened)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="STORE") from None
        reporter = stack.enter_context(export_progress(person))
        manifest = export_members(members, out, options, reporter)
    render_export(manifest, out, fmt)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
