"""One export from start to manifest, whichever engine writes the tables.

OUT is prepared by :func:`prepare_output_dir` (never STORE, never inside it, empty unless
``--overwrite`` names an earlier export whose manifest lists what it may delete), the tables
are written under it, and ``OUT/_manifest.json`` is written last, by
rename: a manifest means a complete export.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from rmqinspect import __version__
from rmqinspect.analysis.stats import store_stats
from rmqinspect.errors import StoreError
from rmqinspect.export.arrow_engine import run_arrow
from rmqinspect.export.plan import source_files
from rmqinspect.export.progress import Reporter
from rmqinspect.export.schema import BROKER_PARTITION, PARTITION_COLUMN, Table
from rmqinspect.export.spark_engine import (
    MIN_JAVA,
    SUBMITTED,
    java_major,
    require_java,
    require_master,
    run_spark,
)
from rmqinspect.export.tasks import EngineResult, Member
from rmqinspect.render.output import json_text
from rmqinspect.render.stats import stats_json
from rmqinspect.store.model import Store, StoreOptions
from rmqinspect.store.output import prepare_output_dir

MANIFEST = "_manifest.json"
MANIFEST_VERSION = 1
TOOL_NAME = "rmqinspect"


class Engine(StrEnum):
    AUTO = "auto"  # spark where it can run, else arrow: see chosen_engine
    SPARK = "spark"
    ARROW = "arrow"


DEFAULT_MASTER = "local[*]"


def chosen_engine(engine: Engine, master: str) -> tuple[Engine, str | None]:
    """The engine ``AUTO`` stands for, and why when it is not spark: spark under spark-submit,
    for a master other than the local default, or where Java it can run is found; else arrow,
    which writes the same tables on this machine (a demo or a CI host without Java)."""
    if engine is not Engine.AUTO:
        return engine, None
    if SUBMITTED in os.environ or master != DEFAULT_MASTER:
        return Engine.SPARK, None
    major = java_major()
    if major is not None and major >= MIN_JAVA:
        return Engine.SPARK, None
    found = "no Java was found (JAVA_HOME, PATH)" if major is None else f"Java {major} is too old"
    return Engine.ARROW, (
        f"{found}: the arrow engine writes the tables (the same rows); "
        f"--engine spark needs Java {MIN_JAVA} or newer"
    )


@dataclass(frozen=True)
class ExportOptions:
    tables: tuple[Table, ...] = tuple(Table)
    engine: Engine = Engine.SPARK
    master: str = DEFAULT_MASTER
    conf: tuple[tuple[str, str], ...] = ()
    jobs: int | None = None  # arrow engine: worker processes (default: one per CPU)
    overwrite: bool = False
    store: StoreOptions = field(default_factory=StoreOptions)


def export_store(
    root: Path,
    out: Path,
    options: ExportOptions,
    reporter: Reporter | None = None,
    spark: Any = None,
) -> dict[str, Any]:
    """Export ``root`` into ``out``; returns the manifest (also written to ``out``).

    The spark engine starts a context on ``options.master`` unless ``spark`` is a session to
    use (it is left running). The arrow engine's worker processes come from a fork server (or
    are spawned): a script calling this needs the ``if __name__ == "__main__":`` guard of
    :mod:`multiprocessing`.
    """
    with Store.open(root, options.store) as store:
        store.read_rocksdb_queues()
        return export_opened(store, out, options, reporter, spark)


def export_opened(
    store: Store,
    out: Path,
    options: ExportOptions,
    reporter: Reporter | None = None,
    spark: Any = None,
) -> dict[str, Any]:
    """:func:`export_store` of a store already open (with ``options.store``), which the caller
    closes: the command keeps the store it checked open across the export, so that one store,
    the one open across every read, says whether it looked live."""
    return export_members([Member(store)], out, options, reporter, spark)


def export_members(
    members: Sequence[Member],
    out: Path,
    options: ExportOptions,
    reporter: Reporter | None = None,
    spark: Any = None,
) -> dict[str, Any]:
    """Export the stores of ``members`` (open, closed by the caller) into one dataset under
    ``out``: one store as :func:`export_opened`, several (each with a broker name) as a fleet,
    every store's parts in one pool or one Spark job per stage."""
    engine = chosen_engine(options.engine, options.master)[0]
    report = reporter or Reporter()
    started = _now()
    if engine is Engine.SPARK and spark is None and SUBMITTED not in os.environ:
        require_java()  # before OUT is touched
        require_master(options.master)
    fleet = len(members) > 1 or members[0].broker is not None
    prepare_output_dir(  # OUT is neither any store nor inside one, nor holds one
        out,
        "OUT",
        members[0].store.root,
        removable=earlier_export if options.overwrite else None,
        hint=" (--overwrite replaces an earlier export there)",
        also=[m.store.root for m in members[1:]],
    )
    before = [dict(_stat_files(m.store.root)) for m in members]
    if engine is Engine.ARROW:
        results, master = run_arrow(members, out, options.tables, options.jobs, report), None
    else:
        results, master = run_spark(
            members, out, options.tables, options.master, options.conf, report.tasks, spark
        )
    stores = [
        _store_entry(m, result, earlier, options.tables)
        for m, result, earlier in zip(members, results, before, strict=True)
    ]
    totals = {t: sum(r.rows[t] for r in results) for t in options.tables}
    manifest: dict[str, Any] = {
        "schema_version": MANIFEST_VERSION,
        "tool": {"name": TOOL_NAME, "version": __version__},
    }
    if not fleet:
        manifest |= {k: stores[0][k] for k in ("store", "profile")}
    manifest |= {
        "engine": engine.value,
        "master": master,
        "tables": {
            t.value: {
                "rows": totals[t],
                "path": t.value,
                "partitioned_by": PARTITION_COLUMN[t],
            }
            for t in options.tables
        },
    }
    if fleet:
        # Every table's first partition level: the store's broker name.
        manifest |= {"broker_partition": BROKER_PARTITION, "stores": stores}
    else:
        manifest |= {k: stores[0][k] for k in ("stats", "source_files", "changed_during_export")}
    manifest |= {"start_time": started, "end_time": _now()}
    write_manifest(out, manifest)
    return manifest


def _store_entry(
    member: Member,
    result: EngineResult,
    before: dict[str, tuple[int, int]],
    tables: Sequence[Table],
) -> dict[str, Any]:
    """What the manifest says of one store: the single-store manifest's fields, and in a
    fleet export its broker name, directory and rows."""
    store = member.store
    profile = store.profile
    after = dict(_stat_files(store.root))
    entry: dict[str, Any] = {}
    if member.broker is not None:
        entry["broker"] = member.broker
        entry["directory"] = member.prefix
    entry |= {
        "store": str(store.root.resolve()),
        "profile": {
            "version": profile.profile.value,
            "explicit": profile.explicit,
            "reasons": list(profile.reasons),
        },
        "rows": {t.value: result.rows[t] for t in tables},
        # `stats`'s numbers, by its own function: the manifest says what the tables hold.
        "stats": stats_json(store_stats(store)),
        "source_files": [
            {
                "path": path,
                "size": size,
                "mtime": _iso_ns(mtime),
                "mtime_ns": mtime,
                "crc32c": f"{crc:08x}",
            }
            for path, size, mtime, crc in result.hashes
        ],
        # Files that changed while the export read them (a live broker?): the export is not a
        # consistent copy of them.
        "changed_during_export": sorted(
            p for p in before.keys() | after.keys() if before.get(p) != after.get(p)
        ),
    }
    return entry


# A manifest lists a few tables and every source file: far below this even for a large fleet.
_MANIFEST_READ_LIMIT = 256 << 20


def earlier_export(out: Path) -> frozenset[str]:
    """The entries of ``out`` an earlier export wrote, as its manifest names them: what
    ``--overwrite`` may delete. Without a manifest rmqinspect wrote (an export that did not
    finish, or another program's directory) nothing is deleted."""
    path = out / MANIFEST
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_MANIFEST_READ_LIMIT + 1)
        manifest = json.loads(raw) if len(raw) <= _MANIFEST_READ_LIMIT else None
    except (OSError, ValueError):
        manifest = None
    tables = manifest.get("tables") if isinstance(manifest, dict) else None
    tool = manifest.get("tool") if isinstance(manifest, dict) else None
    if (
        not isinstance(tables, dict)
        or not isinstance(tool, dict)
        or tool.get("name") != "rmqinspect"
    ):
        raise StoreError(
            "--overwrite empties only an earlier rmqinspect export, and this directory has "
            f"no manifest one wrote ({MANIFEST}): empty it yourself",
            str(out),
        )
    known = {t.value for t in Table}
    paths = {t.get("path") for t in tables.values() if isinstance(t, dict)}
    return frozenset({MANIFEST, *(p for p in paths if isinstance(p, str) and p in known)})


def _stat_files(root: Path) -> list[tuple[str, tuple[int, int]]]:
    return [(path, (size, mtime)) for path, size, mtime in source_files(root)]


def write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json_text(manifest) + "\n", encoding="utf-8")
    os.replace(tmp, out / MANIFEST)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _iso_ns(ns: int) -> str:
    stamp = datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")
