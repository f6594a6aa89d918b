"""Options shared by the inspection commands, declared once: output format and store overrides."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from rmqinspect.format.profile import Profile
from rmqinspect.render.message import BodyFormat
from rmqinspect.render.output import OutputFormat
from rmqinspect.store.model import Store, StoreOptions

FormatOpt = Annotated[
    OutputFormat | None,
    typer.Option(
        "--format",
        "-F",
        case_sensitive=False,
        help="table, json or jsonl (default: table on a terminal, json when piped).",
    ),
]
StoreArg = Annotated[
    Path,
    typer.Argument(help="The broker's store directory (storePathRootDir).", show_default=False),
]
CommitlogSizeOpt = Annotated[
    int | None,
    typer.Option(
        "--commitlog-file-size",
        min=1,
        help="mappedFileSizeCommitLog in bytes (default: inferred from the files, else 1 GiB).",
        rich_help_panel="Store settings",
    ),
]
CqSizeOpt = Annotated[
    int | None,
    typer.Option(
        "--cq-file-size",
        min=20,
        help="mappedFileSizeConsumeQueue in bytes (default: inferred, else 6000000).",
        rich_help_panel="Store settings",
    ),
]
IndexSlotsOpt = Annotated[
    int | None,
    typer.Option(
        "--index-slots",
        min=1,
        help="maxHashSlotNum (default: inferred from the index file size).",
        rich_help_panel="Store settings",
    ),
]
IndexEntriesOpt = Annotated[
    int | None,
    typer.Option(
        "--index-entries",
        min=2,
        help="maxIndexNum (default: inferred from the index file size).",
        rich_help_panel="Store settings",
    ),
]
ProfileOpt = Annotated[
    Profile | None,
    typer.Option(
        "--profile",
        help="Broker line whose format rules apply (default: detected from the store).",
        rich_help_panel="Store settings",
    ),
]


def store_options(
    commitlog_file_size: int | None,
    cq_file_size: int | None,
    index_slots: int | None,
    index_entries: int | None,
    profile: Profile | None,
) -> StoreOptions:
    return StoreOptions(
        commitlog_file_size=commitlog_file_size,
        cq_file_size=cq_file_size,
        index_slot_num=index_slots,
        index_num=index_entries,
        profile=profile,
    )


def open_store(
    root: Path,
    commitlog_file_size: int | None = None,
    cq_file_size: int | None = None,
    index_slots: int | None = None,
    index_entries: int | None = None,
    profile: Profile | None = None,
) -> Store:
    return Store.open(
        root,
        store_options(commitlog_file_size, cq_file_size, index_slots, index_entries, profile),
    )


BodyOpt = Annotated[
    BodyFormat,
    typer.Option(
        "--body",
        case_sensitive=False,
        help="How to show bodies: text (UTF-8, else base64), hex, base64 or none.",
    ),
]
LimitOpt = Annotated[
    int | None, typer.Option("--limit", "-n", min=0, help="Stop after this many results.")
]


def parse_time(text: str, option: str) -> int:
    """Epoch milliseconds, or ISO 8601 (a time without a zone is UTC)."""
    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is neither epoch milliseconds nor an ISO 8601 time", param_hint=option
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def parse_optional_time(text: str | None, option: str) -> int | None:
    return None if text is None else parse_time(text, option)


def progress_wanted(fmt: OutputFormat) -> bool:
    """Progress bars only for humans: a table on a terminal."""
    return fmt is OutputFormat.TABLE and sys.stdout.isatty()
