"""``recover --out DIR``: write what the broker leaves on disk after a restart, elsewhere.

The store is copied into DIR (files the restart deletes are simply not copied), then DIR is
changed the way the restarted broker changes its own store:

* commitlog files past the recovered end are not copied; in the cut file the bytes past the end
  are zeroed. The broker leaves them in place until it overwrites them (truncation only moves
  in-memory positions, §1.3) and never reads them; zeroing them keeps a second restart, and the
  other rmqinspect commands, from seeing the discarded records again (STORE keeps the evidence);
* consume queues get the units the dispatch writes, files the broker creates are created at full
  size, and the stale units past each queue's last write position are zeroed. The broker never
  reads them, but its next ``ConsumeQueue.recover`` would, and then truncate them again; zeroing
  them makes a second restart of DIR a true no-op;
* index files the dispatch writes (continued or new) are written byte for byte; new ones are named
  by the current wall clock, as the broker names them;
* the checkpoint gets what the clean shutdown after the restart persists, and ``abort`` is gone;
* in a DLedger store the data files play the commitlog's part; the index units DLedger's
  recovery rewrites are written, the index past its end is zeroed, and the DLedger checkpoint
  says what the shutdown after the election persists (every kept entry committed).

The inspected store is only read; every write goes through :mod:`rmqinspect.store.output`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from rmqinspect.analysis import Progress
from rmqinspect.analysis.recovery.emulator import analyze_recovery, run_recovery
from rmqinspect.analysis.recovery.outcome import RecoveryOutcome
from rmqinspect.analysis.recovery.ranges import RangeChecker
from rmqinspect.analysis.recovery.report import DLedgerReport, RecoveryReport
from rmqinspect.analysis.recovery.state import RecoverOptions
from rmqinspect.errors import StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format import dledger as dl
from rmqinspect.format.index_build import IndexFileBuilder
from rmqinspect.store import output
from rmqinspect.store.files import MappedFiles, StoreFile
from rmqinspect.store.layout import QueueId, is_plain_name, rocksdb_queue_dir
from rmqinspect.store.model import Store

_STAGING = ".rmqinspect-index-staging"
OPTION = "--out"


class ApplyRefused(Exception):
    """The broker would not start, so there is no post-restart state to write; ``report`` says
    why."""

    def __init__(self, message: str, report: RecoveryReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class ApplyReport:
    directory: str
    copied_files: int = 0
    copied_bytes: int = 0
    deleted_files: list[str] = field(default_factory=list)  # relative paths not copied
    written_files: list[str] = field(default_factory=list)  # files changed or created
    index_files_written: list[str] = field(default_factory=list)
    checkpoint_written: bool = False
    abort_removed: bool = False
    verification_noop: bool = False  # `recover DIR` predicts no change
    verification_differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def apply_recovery(
    opened: Store,
    dest: Path,
    options: RecoverOptions | None = None,
    progress: Progress | None = None,
    checker: RangeChecker | None = None,
) -> tuple[RecoveryReport, ApplyReport]:
    opts = options or RecoverOptions()
    store = opened.root
    if rocksdb_queue_dir(store) is not None:
        # The restart's rows would go into a RocksDB database, which rmqinspect does not
        # write (it reads one through a private copy); copying the store's would be wrong.
        raise StoreError(
            f"{OPTION}: the restart of RocksDB consume queues rewrites the database's rows, "
            "which rmqinspect does not write; run recover without --out for the prediction",
            str(rocksdb_queue_dir(store)),
        )
    if opened.batch_dirs:
        # The emulation holds a BatchConsumeQueue's units as 20-byte slots at their bases
        # (store/batch_restart.py), not as the 46-byte units its files hold.
        raise StoreError(
            f"{OPTION}: the restart of a BatchConsumeQueue rewrites its 46-byte units, which "
            "rmqinspect does not write; run recover without --out for the prediction",
            str(store / "batchconsumequeue"),
        )
    created_dest = output.prepare_output_dir(dest, OPTION, store)
    staging = dest / _STAGING
    staging.mkdir()
    try:
        outcome = run_recovery(
            opened,
            opts,
            progress,
            index_sink=lambda f: _stage_index_file(opened, staging, f),
            checker=checker,
        )
        report = outcome.report
        if not report.broker_starts:
            reasons = "; ".join(f.message for f in report.load_failures)
            raise ApplyRefused(
                f"the broker would refuse to start ({reasons}): nothing to apply", report
            )
        _refuse_queues_outside(opened, outcome)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created_dest:
            dest.rmdir()
        raise
    applied = ApplyReport(str(dest))
    data_dir = opened.commitlog.directory.relative_to(store)
    skip = _paths_deleted(outcome, data_dir, store)
    _copy_store(store, dest, skip, applied)
    _apply_queues(dest, outcome, applied)
    last = report.commitlog.last_file if report.commitlog is not None else None
    if last is not None:
        path = dest / data_dir / last.name
        if output.zero_range(path, last.wrote_position, path.stat().st_size):
            applied.written_files.append(str(path.relative_to(dest)))
            applied.notes.append(
                f"zeroed {data_dir.as_posix()}/{last.name} past position {last.wrote_position} "
                "(the recovered end); the broker leaves those bytes until it overwrites them"
            )
    if report.dledger is not None:
        _apply_ledger(dest / Path(report.dledger.home).relative_to(store), report.dledger, applied)
    for name in outcome.index_written:
        (dest / "index").mkdir(exist_ok=True)
        os.replace(staging / name, dest / "index" / name)
        applied.index_files_written.append(name)
    shutil.rmtree(staging, ignore_errors=True)
    if outcome.checkpoint_after is not None:
        checkpoint = dest / "checkpoint"
        checkpoint.unlink(missing_ok=True)
        output.write_sparse(checkpoint, outcome.checkpoint_after)
        applied.checkpoint_written = True
    applied.abort_removed = report.abort_present
    if report.index is not None and report.index.files_created:
        applied.notes.append(
            "new index files are named by this machine's clock; the broker would use its own"
        )
    _verify(dest, opened, opts, outcome, applied)
    return report, applied


def _refuse_queues_outside(opened: Store, outcome: RecoveryOutcome) -> None:
    """Refuse, before anything is copied, a restart that dispatches records into a consume
    queue whose path leaves the store: the broker joins a record's topic into
    ``consumequeue/<topic>/<queueId>`` as it is, and a crafted topic (``../x``, ``/x``) would
    have it create files elsewhere, which a copy of the store cannot hold."""
    for q in outcome.queues:
        if not q.files or is_plain_name(q.topic):
            continue
        written = next((f.written for f in q.files if f.written), b"")
        physical_offset = int.from_bytes(written[:8], "big") if written else None
        path, offset = str(opened.commitlog.directory), None
        if physical_offset is not None and (f := opened.commitlog.find(physical_offset)):
            path, offset = str(f.path), physical_offset - f.start
        raise StoreError(
            f"the restart dispatches a record of topic {q.topic!r} into a consume queue "
            "outside the store (the topic is no plain file name): nothing applied",
            path,
            offset,
        )


def _stage_index_file(opened: Store, staging: Path, f: IndexFileBuilder) -> None:
    """Write an index file the restart writes: a continued file over a copy of the store's,
    a new one over zeros (both sparse)."""
    path = staging / f.name
    if f.continues_loaded_file:
        output.copy_sparse(opened.root / "index" / f.name, path)
    else:
        output.create_sized(path, f.geometry.file_size)
    for position, data in f.writes(with_loaded=False):
        output.write_at(path, position, data)


def _paths_deleted(outcome: RecoveryOutcome, data_dir: Path, store: Path) -> set[Path]:
    """Store paths the restart deletes (relative), plus ``abort``."""
    skip = {Path("abort")}
    skip.update(data_dir / n for n in outcome.commitlog_deleted)
    ledger = outcome.report.dledger
    if ledger is not None:
        index_dir = Path(ledger.home).relative_to(store) / "index"
        skip.update(index_dir / n for n in ledger.index_files_deleted)
    skip.update(Path("index") / n for n in outcome.index_deleted)
    for q in outcome.report.consume_queues:
        if q.files_deleted:
            base = QueueId(q.topic, q.queue_id).relative_dir
            skip.update(base / n for n in q.files_deleted)
    return skip


def _copy_store(store: Path, dest: Path, skip: set[Path], applied: ApplyReport) -> None:
    """Copy the store's regular files (links not followed) but ``skip`` into ``dest``, from
    directory entries: a store of 100,000 queue directories spent seconds building paths."""
    skipped = {p.as_posix() for p in skip}
    pending = [(os.fspath(store), "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue  # as os.walk: a directory that cannot be listed has nothing to copy
        os.makedirs(os.path.join(dest, prefix), exist_ok=True)
        subdirectories = []
        for e in entries:
            rel = prefix + e.name
            # Links are neither entered nor copied, nor resolved: a link loop is just a link.
            if e.is_dir(follow_symlinks=False):
                subdirectories.append((e.path, rel + "/"))
                continue
            if rel in skipped:
                if rel != "abort" or os.path.exists(e.path):
                    applied.deleted_files.append(rel)
                continue
            if not e.is_file(follow_symlinks=False):
                continue
            target = dest / rel
            applied.copied_bytes += output.copy_sparse(Path(e.path), target)
            applied.copied_files += 1
            shutil.copymode(e.path, target)
        pending.extend(reversed(subdirectories))


def _apply_ledger(home: Path, ledger: DLedgerReport, applied: ApplyReport) -> None:
    """DLedger's part of the restart in the copy: the index units its recovery rewrites (from
    the first that disagreed, each from its entry), zeros past the index end, and the
    checkpoint the shutdown after the election persists (the old one kept as ``.bak``)."""
    index_dir = home / "index"
    if ledger.index_rebuilt_position is not None:
        with MappedFiles() as maps:
            for first, units in _entry_units(home / "data", ledger, maps):
                _write_units(index_dir, first, units, applied)
    end = ledger.index_end
    for f in sorted(index_dir.iterdir()) if index_dir.is_dir() else []:
        start = int(f.name)
        if start <= end < start + f.stat().st_size and output.zero_range(
            f, end - start, f.stat().st_size
        ):
            applied.written_files.append(f"{home.name}/index/{f.name}")
    after = ledger.checkpoint_after_shutdown
    content = dl.encode_checkpoint(after["committed_index"], after["end_index"])
    _rewrite(home, "checkpoint", content, applied)
    # The election persists the term and this node's vote again (string2File keeps the
    # previous content in currterm.bak).
    term = ledger.after_start.current_term
    _rewrite(home, "currterm", dl.encode_currterm(term or 0, ledger.self_id), applied)


def _rewrite(home: Path, name: str, content: bytes, applied: ApplyReport) -> None:
    """``IOUtils.string2File``: the previous content (if any) goes to ``.bak``."""
    path = home / name
    if path.is_file():  # our copy of the store's file: copied by extents, whatever its size
        bak = home / f"{name}.bak"
        bak.unlink(missing_ok=True)
        output.copy_sparse(path, bak)
    path.unlink(missing_ok=True)
    output.write_sparse(path, content)
    applied.written_files.append(f"{home.name}/{name}")


def _entry_units(
    data_dir: Path, ledger: DLedgerReport, maps: MappedFiles
) -> Iterator[tuple[int, bytes]]:
    """The index units of the kept entries from the first rewritten one to the data end,
    a walk at a time: (first entry index, units)."""
    at = ledger.index_rebuilt_position
    assert at is not None
    size = ledger.data_file_size
    while at is not None and at < ledger.data_end:
        start = at - at % size
        path = data_dir / f"{start:020d}"
        view = maps.view(StoreFile(path, start, path.stat().st_size))
        kept = view[: min(size, ledger.data_end - start)]
        try:
            walk = dl.walk_entries(kept, at - start, start)
        finally:
            kept.release()
            view.release()
        if len(walk):
            units = np.zeros(len(walk), dl.INDEX_DTYPE)
            units["magic"] = dl.ENTRY_MAGIC
            units["pos"] = start + walk.positions
            units["size"] = walk.sizes
            units["index"] = walk.index
            units["term"] = walk.term
            yield int(walk.index[0]), units.tobytes()
        if walk.stop is None:
            at = start + walk.end
        elif walk.stop.reason is cl.CheckReason.BLANK:
            at = start + size
        else:
            at = None


def _write_units(index_dir: Path, first: int, units: bytes, applied: ApplyReport) -> None:
    at = first * dl.INDEX_UNIT_SIZE
    view = memoryview(units)
    while view:
        start = at - at % dl.INDEX_FILE_SIZE
        path = index_dir / f"{start:020d}"
        if not path.exists():
            output.create_sized(path, dl.INDEX_FILE_SIZE)
        take = min(len(view), start + dl.INDEX_FILE_SIZE - at)
        output.write_at(path, at - start, view[:take])
        name = f"{index_dir.parent.name}/index/{path.name}"
        if name not in applied.written_files:
            applied.written_files.append(name)
        view, at = view[take:], at + take


def _apply_queues(dest: Path, outcome: RecoveryOutcome, applied: ApplyReport) -> None:
    size = int(str(outcome.report.options["cq_file_size"]))
    for q in outcome.queues:
        if not q.files and not is_plain_name(q.topic):
            continue  # nothing of it on disk, and nothing to write
        qdir = dest / QueueId(q.topic, q.queue_id).relative_dir
        if not q.files:
            if q.existed and qdir.is_dir() and not any(qdir.iterdir()):
                qdir.rmdir()  # ConsumeQueue.destroy removes the emptied directory
            continue
        for i, f in enumerate(q.files):
            path = qdir / f.name
            changed = False
            if not f.on_disk:
                qdir.mkdir(parents=True, exist_ok=True)
                output.create_sized(path, size)
                changed = True
            if f.written:
                output.write_at(path, f.written_at, f.written)
                changed = True
            if i == len(q.files) - 1 and output.zero_range(path, f.write_position, size):
                changed = True
            if changed:
                applied.written_files.append(str(path.relative_to(dest)))


def _verify(
    dest: Path,
    opened: Store,
    opts: RecoverOptions,
    outcome: RecoveryOutcome,
    applied: ApplyReport,
) -> None:
    """Run the emulation on DIR with the same settings: a restart there must change nothing."""
    before = outcome.report
    settings = replace(
        opened.options,
        profile=opened.profile.profile,
        commitlog_file_size=opened.commitlog.file_size,
        cq_file_size=opened.cq_file_size,
    )
    with Store.open(dest, settings) as again:
        after = analyze_recovery(again, replace(opts, lost_limit=0))
    diffs = noop_differences(after)
    b, a = before.commitlog, after.commitlog
    if b is not None and a is not None:
        # DLedger: the end the broker serves once it is leader again.
        want_end = before.dledger.after_start.max_offset if before.dledger else b.max_offset
        got_end = after.dledger.after_start.max_offset if after.dledger else a.max_offset
        if got_end != want_end:
            diffs.append(f"commitlog end {got_end} != {want_end}")
    want = {(q.topic, q.queue_id): q.max_offset_after_dispatch for q in before.consume_queues}
    for q in after.consume_queues:
        expected = want.get((q.topic, q.queue_id), 0)
        if q.max_offset_after_dispatch != expected:
            diffs.append(
                f"{q.topic}/{q.queue_id} max offset {q.max_offset_after_dispatch} != {expected}"
            )
    applied.verification_differences = diffs
    applied.verification_noop = not diffs


def noop_differences(report: RecoveryReport) -> list[str]:
    """What a restart of this store would change; empty for a clean no-op."""
    diffs: list[str] = []
    if not report.broker_starts:
        diffs.append("the broker would not start")
    if report.recovery_path != "normal":
        diffs.append(f"recovery path is {report.recovery_path}")
    c = report.commitlog
    if c is not None and (c.deleted_files or c.deleted_at_load):
        diffs.append(f"commitlog files deleted: {c.deleted_files + c.deleted_at_load}")
    d = report.dledger
    if d is not None and (d.index_rebuilt_from is not None or d.index_files_deleted):
        diffs.append("DLedger index units rewritten or files deleted")
    if d is not None and d.after_load.committed_index != d.after_start.committed_index:
        diffs.append("the DLedger checkpoint is behind the data")
    if report.index is not None and (report.index.deleted_files or report.index.entries_written):
        diffs.append("index files deleted or written")
    for q in report.consume_queues:
        if q.changed_by_restart:
            diffs.append(f"consume queue {q.topic}/{q.queue_id} changes")
    lost = report.lost_messages
    if lost is None:
        diffs.append("what the restart loses was not searched for")
        return diffs
    # Messages no unit serves stay unserved across restarts: only what a restart destroys counts.
    destroyed = lost.count - lost.by_where.get("no_queue_unit", 0)
    if destroyed or lost.damaged_records:
        diffs.append(f"{destroyed} messages destroyed, {lost.damaged_records} damaged records")
    return diffs
