"""``rmqinspect export STORE OUT``: the store's tables as Parquet datasets."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import StoreArg, open_store, with_store_options
from rmqinspect.export import Engine, ExportOptions, Table
from rmqinspect.export.run import DEFAULT_MASTER, chosen_engine, export_opened
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
    store: StoreArg,
    out: Annotated[
        Path,
        typer.Argument(
            help="New or empty directory for the Parquet datasets (outside STORE).",
            show_default=False,
        ),
    ],
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
    """
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
    with (
        open_store(store, store_options, "export", ALL_PARTS | StorePart.EXPORT) as opened,
        export_progress(person) as reporter,
    ):
        manifest = export_opened(opened, out, options, reporter)
    render_export(manifest, out, fmt)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
