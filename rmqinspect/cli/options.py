"""Options shared by the inspection commands, declared once: output format and store settings."""

from __future__ import annotations

import enum
import functools
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from rmqinspect.analysis import Progress
from rmqinspect.analysis.lookup import known_topics
from rmqinspect.analysis.offsets import ConsumeFromWhere
from rmqinspect.cli.common import EXIT_FINDINGS, fail
from rmqinspect.errors import DecodeError
from rmqinspect.format.commitlog import DEFAULT_DELAY_LEVELS, parse_delay_levels
from rmqinspect.format.javamath import INT_MAX, LONG_MAX, LONG_MIN
from rmqinspect.format.message_json import BodyFormat
from rmqinspect.format.profile import Profile
from rmqinspect.format.sizes import (
    CQ_STORE_UNIT_SIZE,
    HASH_SLOT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
)
from rmqinspect.render.output import OutputFormat, progress_bar, warn
from rmqinspect.render.values import printable
from rmqinspect.store.layout import ALL_PARTS, StorePart, layout_name
from rmqinspect.store.loose import LooseFile, is_loose, open_loose
from rmqinspect.store.model import Store, StoreOptions

R = TypeVar("R")
E = TypeVar("E", bound=enum.Enum)


def choice_parser(kind: type[E], extra: tuple[str, ...] = ()) -> Callable[[str], E]:
    """Parse one of ``kind``'s values (any case). A wrong value is a usage error that lists the
    choices (typer's own enum conversion prefixes its message with "Value error,"); ``extra``
    names choices the caller handles before parsing, such as ``auto``."""

    def parse(text: str | E) -> E:
        if isinstance(text, kind):
            return text  # a default typer passes through
        for member in kind:
            if str(member.value).casefold() == str(text).casefold():
                return member
        choices = ", ".join(f"'{c}'" for c in (*(m.value for m in kind), *extra))
        raise typer.BadParameter(f"{text!r} is not one of {choices}.")

    return parse


def choice_metavar(kind: type[enum.Enum], extra: tuple[str, ...] = ()) -> str:
    return f"<{'|'.join((*(str(m.value) for m in kind), *extra))}>"


ConsumeFromWhereOpt = Annotated[
    ConsumeFromWhere,
    typer.Option(
        "--consume-from-where",
        parser=choice_parser(ConsumeFromWhere),
        metavar=choice_metavar(ConsumeFromWhere),
        help="The consumers' ConsumeFromWhere, for queues without a committed offset: first, "
        "last or timestamp (the broker answers 0 first where a queue's min is 0); default "
        "unknown: such a queue's start is not predicted (a %RETRY% queue starts at 0).",
    ),
]
FormatOpt = Annotated[
    OutputFormat | None,
    typer.Option(
        "--format",
        "-F",
        parser=choice_parser(OutputFormat),
        metavar=choice_metavar(OutputFormat),
        help="table, json or jsonl (default: table on a terminal, json when piped).",
    ),
]
StoreArg = Annotated[
    Path,
    # readable=False: an unreadable store is reported by Store.open, as one line.
    typer.Argument(
        help="The broker's store directory (storePathRootDir).",
        show_default=False,
        readable=False,
    ),
]
StoreOrFileArg = Annotated[
    Path,
    typer.Argument(
        help="The broker's store directory (storePathRootDir), or one of its files read on its "
        "own (geometry from the file's name and length, or the store settings).",
        show_default=False,
        readable=False,
    ),
]
_AUTO = ("auto",)


def _parse_profile(text: str) -> Profile | None:
    """A profile, or None for ``auto`` (detect it from the store, as when the option is absent)."""
    if text == "auto":
        return None
    return choice_parser(Profile, _AUTO)(text)


def _parse_delay_levels(text: str) -> str:
    """``messageDelayLevel`` as the broker's config takes it ("1s 5s 10s 30s 1m ... 2h")."""
    try:
        parse_delay_levels(text)
    except DecodeError as err:
        raise typer.BadParameter(err.message) from None
    return text


def _store_settings(
    commitlog_file_size: Annotated[
        int | None,
        typer.Option(
            "--commitlog-file-size",
            min=1,
            max=INT_MAX,
            help="mappedFileSizeCommitLog in bytes (default: inferred from the files, else 1 GiB).",
            rich_help_panel="Store settings",
        ),
    ] = None,
    cq_file_size: Annotated[
        int | None,
        typer.Option(
            "--cq-file-size",
            min=20,
            max=INT_MAX // CQ_STORE_UNIT_SIZE * CQ_STORE_UNIT_SIZE,
            help="mappedFileSizeConsumeQueue in bytes (default: inferred, else 6000000).",
            rich_help_panel="Store settings",
        ),
    ] = None,
    index_slots: Annotated[
        int | None,
        typer.Option(
            "--index-slots",
            min=1,
            max=(INT_MAX - INDEX_HEADER_SIZE) // HASH_SLOT_SIZE,
            help="maxHashSlotNum (default: inferred from the index file size).",
            rich_help_panel="Store settings",
        ),
    ] = None,
    index_entries: Annotated[
        int | None,
        typer.Option(
            "--index-entries",
            min=2,
            max=(INT_MAX - INDEX_HEADER_SIZE) // INDEX_ENTRY_SIZE,
            help="maxIndexNum (default: inferred from the index file size).",
            rich_help_panel="Store settings",
        ),
    ] = None,
    profile: Annotated[
        Profile | None,
        typer.Option(
            "--profile",
            parser=_parse_profile,
            metavar=choice_metavar(Profile, _AUTO),
            help="Broker line whose format and recovery rules apply: 4.9, 5.1, 5.3, or auto "
            "(the default: detected from the store).",
            rich_help_panel="Store settings",
        ),
    ] = None,
    delay_levels: Annotated[
        str | None,
        typer.Option(
            "--delay-levels",
            parser=_parse_delay_levels,
            help="messageDelayLevel, as in the broker's config (default: "
            f"{DEFAULT_DELAY_LEVELS!r}): a delay message's tagsCode is its store time plus its "
            "level's delay.",
            rich_help_panel="Store settings",
        ),
    ] = None,
) -> StoreOptions:
    """The store-setting options, declared once: this signature is what
    :func:`with_store_options` gives every command that opens a store. The bounds are the
    broker's: these settings are Java ints, and so is the index file size they make."""
    return StoreOptions(
        commitlog_file_size=commitlog_file_size,
        cq_file_size=cq_file_size,
        index_slot_num=index_slots,
        index_num=index_entries,
        profile=profile,
        delay_levels=delay_levels,
    )


_STORE_SETTINGS = tuple(inspect.signature(_store_settings, eval_str=True).parameters.values())
STORE_OPTIONS_PARAMETER = "store_options"


def with_store_options(command: Callable[..., R]) -> Callable[..., R]:
    """Give ``command`` the store-setting options and hand it their values as one
    ``store_options: StoreOptions`` argument (what sqlite-utils' ``output_options`` decorator
    does for click).

    typer reads a command's options from its signature, so the wrapper shows typer the
    command's own parameters with ``store_options`` replaced by the parameters of
    :func:`_store_settings`.
    """
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != STORE_OPTIONS_PARAMETER]
    if len(own) == len(signature.parameters):
        raise TypeError(f"{command.__name__} has no {STORE_OPTIONS_PARAMETER} parameter")
    settings = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in _STORE_SETTINGS]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        given = {p.name: kwargs.pop(p.name, p.default) for p in _STORE_SETTINGS}
        return command(*args, **kwargs, **{STORE_OPTIONS_PARAMETER: _store_settings(**given)})

    exposed = signature.replace(parameters=[*own, *settings])
    wrapper.__signature__ = exposed  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in exposed.parameters.values()}
    return wrapper


BodyOpt = Annotated[
    BodyFormat,
    typer.Option(
        "--body",
        parser=choice_parser(BodyFormat),
        metavar=choice_metavar(BodyFormat),
        help="How to show bodies: text (UTF-8, else base64), hex, base64, raw (as stored: "
        "compressed bodies not decompressed; UTF-8, else base64) or none.",
    ),
]
LimitOpt = Annotated[
    int | None, typer.Option("--limit", "-n", min=0, help="Stop after this many results.")
]

# The vocabulary (README "Vocabulary"): one spelling per concept in every command. A time
# window is --since/--until (store time), a commitlog range --from/--to (physical offsets), a
# queue range --from-queue-offset, an output directory --out/-o, a count -n/--limit, the output
# -F/--format. Old spellings stay for a release as hidden aliases (hidden_alias + merged).
SinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since", help="Store time from, inclusive (epoch ms or ISO 8601; no zone = UTC)."
    ),
]
UntilOpt = Annotated[
    str | None, typer.Option("--until", help="Store time up to, inclusive (ms or ISO 8601).")
]
FromOpt = Annotated[
    int | None, typer.Option("--from", min=0, help="First physical offset (inclusive).")
]
ToOpt = Annotated[int | None, typer.Option("--to", min=0, help="Last physical offset (exclusive).")]
FromQueueOffsetOpt = Annotated[
    int | None,
    typer.Option(
        "--from-queue-offset", min=0, help="First queue offset (default: first unit on disk)."
    ),
]
OUT_NAMES = ("--out", "-o")  # every output directory (salvage, recover's copy, export)
T = TypeVar("T")


def hidden_alias(name: str, min: int | None = None) -> Any:
    """An old spelling of an option, parsed but not shown in --help (README "Changed")."""
    return typer.Option(name, hidden=True, show_default=False, min=min)


def merged(value: T | None, old: T | None, option: str, alias: str) -> T | None:
    """The option's value, given under its name or under its old spelling (not both)."""
    if value is not None and old is not None:
        raise fail(f"{alias} is the old spelling of {option}: give only {option}")
    return value if value is not None else old


_EPOCH_MS = re.compile(r"-?[0-9]+")  # ASCII digits only: str.isdigit() also takes "²"


def parse_time(text: str, option: str) -> int:
    """Epoch milliseconds (a Java long), or ISO 8601 (a time without a zone is UTC); anything
    else is a one-line usage error."""
    value = text.strip()
    shown = repr(text if len(text) <= 40 else text[:40] + "...")
    if _EPOCH_MS.fullmatch(value):
        digits = len(value.lstrip("-").lstrip("0"))
        ms = int(value) if digits <= 19 else LONG_MAX + 1
        if not LONG_MIN <= ms <= LONG_MAX:
            raise fail(f"{option}: {shown} is out of the range of epoch milliseconds")
        return ms
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return int(dt.timestamp() * 1000)
    except (ValueError, OverflowError):
        raise fail(
            f"{option}: {shown} is neither epoch milliseconds nor an ISO 8601 time"
        ) from None


def parse_optional_time(text: str | None, option: str) -> int | None:
    return None if text is None else parse_time(text, option)


def check_range(low: int | None, high: int | None, what: str) -> None:
    """A range given backwards is a usage error, not a silently empty answer."""
    if low is not None and high is not None and low > high:
        raise fail(f"{what}: the start {low} is after the end {high}")


@contextmanager
def open_store(
    path: Path,
    options: StoreOptions,
    command: str,
    reads: StorePart,
    loose: LooseFile | None = None,
) -> Iterator[Store]:
    """Open the store ``command`` answers about. A layout that takes over a part the answer
    reads is refused here (exit 2, one sentence), the one place every command passes; a forced
    ``--profile`` the store contradicts is said once on stderr. ``loose``: what a path that is
    a file, not a directory, is read as (store/loose.py); without it a file is refused."""
    opened = (
        open_loose(path, options, loose)
        if loose is not None and is_loose(path)
        else Store.open(path, options)
    )
    with opened as st:
        refusal = st.refusal(command, reads)
        if refusal is not None:
            raise fail(refusal)
        if reads & StorePart.CONSUME_QUEUES and st.loose is None:
            st.read_rocksdb_queues()
        mismatch = st.profile_mismatch()
        if mismatch is not None:
            warn(mismatch)
        try:
            yield st
        finally:
            # Malformed keys and values met while reading, each said once, whatever the exit.
            for problem in st.rocksdb.problems if st.rocksdb is not None else ():
                warn(f"{problem.path}: {problem.message}")


def no_such_topic(store: Store, topic: str | None) -> bool:
    """Whether ``--topic`` names a topic the store does not know: no consume queue and not in
    topics.json (the topics lookup's index search knows, :func:`known_topics`)."""
    return topic is not None and topic not in known_topics(store)


def topic_not_found(topic: str) -> typer.Exit:
    """Every command's answer to a topic the store does not know: not found, like grep's
    nothing (one line, exit 1), where an empty answer would read as "no messages"."""
    print(
        f"rmqinspect: no such topic: '{printable(topic)}' (no consume queue, not in topics.json)",
        file=sys.stderr,
    )
    return typer.Exit(EXIT_FINDINGS)


# Where a layout takes the restart over (RocksDB consume queues), a command whose answer
# reads the restart only in part answers without it: it opens the store with these reads
# and says so with restart_not_emulated.
WITHOUT_RESTART = ALL_PARTS & ~StorePart.RESTART


def restart_not_emulated(store: Store) -> str | None:
    """Why the restart is not emulated for this store (one clause), or None."""
    for u in store.unsupported:
        if u.takes_over & StorePart.RESTART:
            return f"the restart of {layout_name(u.kind)} is not emulated"
    return None


@contextmanager
def commitlog_progress(store: Store, description: str, fmt: OutputFormat) -> Iterator[Progress]:
    """A progress bar over the store's commitlog bytes, shown only to a person (a table on a
    terminal); yields ``advance(n_bytes)``."""
    total = sum(f.length for f in store.commitlog.files)
    with progress_bar(total, description, fmt is OutputFormat.TABLE and sys.stdout.isatty()) as bar:
        advance: Progress = bar
        yield advance
