"""``export``: the progress bar while it runs and the summary (or the manifest) afterwards."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from rmqinspect.export.progress import Reporter
from rmqinspect.render.output import (
    OutputFormat,
    print_json,
    print_table,
    stderr_console,
    stdout_console,
)
from rmqinspect.render.values import size_cell


class ExportFormat(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


class _BarReporter(Reporter):
    """Files and bytes for the arrow engine, the job's tasks for the spark engine."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.bytes_task: TaskID | None = None
        self.files = 0
        self.total_files = 0
        self.job_tasks: dict[str, TaskID] = {}

    def planned(self, total_bytes: int, total_files: int) -> None:
        self.total_files = total_files
        self.bytes_task = self.bar.add_task(self._files_text(), total=total_bytes)

    def advanced(self, nbytes: int, files: int) -> None:
        if self.bytes_task is not None:
            self.files += files
            self.bar.update(self.bytes_task, advance=nbytes, description=self._files_text())

    def tasks(self, job: str, done: int, total: int) -> None:
        if job not in self.job_tasks:
            self.job_tasks[job] = self.bar.add_task(f"{job} (Spark tasks)", total=total)
        self.bar.update(self.job_tasks[job], completed=done, total=total)

    def _files_text(self) -> str:
        return f"exporting: {self.files}/{self.total_files} files"


@contextmanager
def export_progress(enabled: bool) -> Iterator[Reporter]:
    """A bar on stderr when ``enabled`` and stderr is a terminal; otherwise a silent reporter."""
    console = stderr_console()
    if not enabled or not console.is_terminal:
        yield Reporter()
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        MofNCompleteColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        yield _BarReporter(bar)


def render_export(manifest: dict[str, Any], out: Path, fmt: OutputFormat) -> None:
    """The manifest as JSON, or a short table of what was written."""
    if fmt is not OutputFormat.TABLE:
        print_json(manifest)
        return
    table = Table(title=f"exported to {out}", title_justify="left")
    for col in ("table", "rows", "directory"):
        table.add_column(col, justify="right" if col == "rows" else "left")
    fleet = manifest.get("stores")  # a fleet export: each store under broker=NAME
    for name, info in manifest["tables"].items():
        where = str(out / info["path"])
        if fleet:
            where += f"/{manifest['broker_partition']}=…"
        if info["partitioned_by"]:
            where += f"/{info['partitioned_by']}=…"
        table.add_row(name, str(info["rows"]), where)
    print_table(table)
    stores = fleet or [manifest]
    files = [f for s in stores for f in s["source_files"]]
    size = sum(f["size"] for f in files)
    engine = manifest["engine"] + (f" on {manifest['master']}" if manifest["master"] else "")
    profiles = ", ".join(sorted({s["profile"]["version"] for s in stores}))
    source = f"source: {len(files)} files, {size_cell(size)}"
    if fleet:
        source += f" in {len(fleet)} stores ({', '.join(s['broker'] for s in fleet)})"
    lines = [
        f"engine: {engine}; profile {profiles}",
        source,
        f"manifest: {out / '_manifest.json'} ({manifest['start_time']} .. {manifest['end_time']})",
    ]
    changed = sum(len(s["changed_during_export"]) for s in stores)
    if changed:
        lines.append(f"warning: {changed} store files changed while they were read")
    console = stdout_console()
    for line in lines:  # one print a line: the console escapes a newline inside a string
        console.print(line, markup=False)  # names and paths are not markup
