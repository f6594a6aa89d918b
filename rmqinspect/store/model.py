"""The read-only store model: what is in a broker's ``store/`` directory and where.

:class:`Store` discovers every file family, maps physical offsets to commitlog files, iterates the
commitlog lazily across files, opens consume queues and index files, reads the checkpoint and
detects the version profile. It never opens anything for writing.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from rmqinspect.errors import DecodeError, LiveStoreWarning, StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format.markers import (
    MARKER_READ_LIMIT,
    AbortMarker,
    LockMarker,
    decode_abort,
    decode_lock,
)
from rmqinspect.format.names import parse_offset_name
from rmqinspect.format.profile import Profile
from rmqinspect.store.files import (
    FileQueue,
    LayoutProblem,
    Listing,
    MappedFiles,
    SmallFile,
    StoreFile,
    dledger_homes,
    list_directory,
    list_family,
    read_small,
)
from rmqinspect.store.layout import (
    QueueId,
    StorePart,
    UnsupportedLayout,
    detect_unsupported,
    discover_queues,
    is_plain_name,
    layout_name,
    list_index,
    rocksdb_queue_dir,
    small_file_problems,
)
from rmqinspect.store.live import Fingerprint, live_evidence, lock_holder
from rmqinspect.store.profile_detect import ProfileDetection, detect_profile, looks_like

if TYPE_CHECKING:
    from rmqinspect.format.scan import FileEvent, WalkPolicy
    from rmqinspect.store.batch_queue import BatchQueue
    from rmqinspect.store.dledger import DLedgerStore
    from rmqinspect.store.rocksdb_queue import RocksConsumeQueues

# The scanner, the consume-queue and checkpoint codecs (numpy) are imported where they are used:
# a command that reads one record (``lookup --msg-id``) starts without them.


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Broker settings that cannot be read from the files; None means "infer from the files"."""

    commitlog_file_size: int | None = None
    cq_file_size: int | None = None
    index_slot_num: int | None = None
    index_num: int | None = None
    profile: Profile | None = None
    delay_levels: str | None = None  # messageDelayLevel; None: the broker's default
    # The commitlog files to read, by name; None: all those listed. A task that reopens a store
    # its driver opened names the driver's files: a live broker may have added more since.
    commitlog_files: tuple[str, ...] | None = None


@dataclass
class Store:
    """An opened store directory. Use as a context manager so maps are released.

    In a DLedger store (``enableDLegerCommitLog``) ``dledger`` is set and ``commitlog`` is its
    data files: a record's physical offset is a position in them (its entry's + 48), so offsets
    map to files as in a plain commitlog; walks go entry by entry."""

    root: Path
    options: StoreOptions
    commitlog: FileQueue
    queue_dirs: dict[QueueId, Path]
    index_files: list[StoreFile]
    dledger: DLedgerStore | None = None
    problems: list[LayoutProblem] = field(default_factory=list)
    unsupported: list[UnsupportedLayout] = field(default_factory=list)
    maps: MappedFiles = field(default_factory=MappedFiles)
    # The RocksDB consume queue, once read_rocksdb_queues opened it (None: not read).
    rocksdb: RocksConsumeQueues | None = None
    # The one file read on its own (store/loose.py): nothing beside it is part of the store.
    loose: Path | None = None
    # The BatchConsumeQueues (batchconsumequeue/<topic>/<id>), also in queue_dirs: a topic the
    # broker serves from one has no consumequeue/ units that it reads.
    batch_dirs: dict[QueueId, Path] = field(default_factory=dict)
    _batch: dict[QueueId, BatchQueue] = field(default_factory=dict)
    _queues: dict[QueueId, FileQueue] = field(default_factory=dict)
    _listings: dict[Path, Listing] = field(default_factory=dict)  # taken by consume_queue
    _profile: ProfileDetection | None = None
    _opened: Fingerprint | None = None
    _lock_holder: int | None = None

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        options: StoreOptions | None = None,
        *,
        queue_dirs: dict[QueueId, Path] | None = None,
    ) -> Store:
        """Open the store at ``root``. ``queue_dirs``: the consume queues another opening of
        the same store found (a worker process of its run), which are then not looked for
        again; the layout problems met looking for them are that opening's to report."""
        opts = options or StoreOptions()
        path = Path(root)
        try:
            entries = {e.name for e in os.scandir(path)}
        except FileNotFoundError:
            raise StoreError("no such directory", str(path)) from None
        except NotADirectoryError:
            raise StoreError("not a directory", str(path)) from None
        except OSError as err:
            raise StoreError(f"cannot list the store: {err.strerror or err}", str(path)) from None
        markers = ("commitlog", "consumequeue", "index", "checkpoint")
        homes = dledger_homes(path)
        if not entries.intersection(markers) and not homes:
            raise StoreError(
                "not a RocketMQ store directory (none of commitlog/, consumequeue/, index/, "
                "checkpoint found)",
                str(path),
            )
        plain = list_family(
            path / "commitlog",
            opts.commitlog_file_size,
            "commitlog",
            cl.DEFAULT_COMMITLOG_FILE_SIZE,
        )
        ledger: DLedgerStore | None = None
        if len(homes) == 1:
            from rmqinspect.store.dledger import DLedgerStore

            ledger = DLedgerStore.open(homes[0], opts.commitlog_file_size)
        # A plain commitlog beside DLedger data is a switched-over ("mixed") store: refused.
        use_ledger = ledger is not None and (bool(ledger.data.files) or not plain.files)
        commitlog = ledger.data if ledger is not None and use_ledger else plain
        if opts.commitlog_files is not None:
            commitlog.files = [f for f in commitlog.files if f.name in opts.commitlog_files]
        problems = list(plain.problems if not use_ledger or ledger is None else ledger.problems)
        if queue_dirs is None:
            queue_dirs = discover_queues(path / "consumequeue", problems)
        batch_dirs = discover_queues(path / BATCH_QUEUE_DIR, problems)
        if batch_dirs:  # a sort of 100,000 queues for nothing costs tens of milliseconds
            queue_dirs = _sorted_queues({**queue_dirs, **batch_dirs})
        index_files = list_index(path / "index", problems)
        store = cls(
            root=path,
            options=opts,
            commitlog=commitlog,
            queue_dirs=queue_dirs,
            batch_dirs=batch_dirs,
            index_files=index_files,
            dledger=ledger if use_ledger else None,
            problems=problems,
            _opened=Fingerprint.take(path, commitlog.directory),
            _lock_holder=lock_holder(path / "lock"),
        )
        if commitlog.files and store._lock_holder is not None:
            # A running broker appends to this file: read it once and keep the copy (see
            # MappedFiles). Offline, where nothing holds the lock, it is mapped like the rest:
            # a copy would cost a read of up to 1 GiB in every process that opens the store.
            store.maps.snapshot_paths.add(commitlog.files[-1].path)
        store.problems.extend(small_file_problems(path))
        store.unsupported.extend(detect_unsupported(path, plain, homes, ledger))
        return store

    def close(self) -> None:
        self.maps.close()
        if self.rocksdb is not None:
            self.rocksdb.close()
        if self._opened is not None:
            evidence = live_evidence(
                self.root, self.commitlog.directory, self._opened, self._lock_holder
            )
            self._opened = None
            if evidence is not None:
                warnings.warn(evidence, LiveStoreWarning, stacklevel=2)

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- layouts rmqinspect does not read yet ------------------------------------------------

    def refusal(self, command: str, reads: StorePart) -> str | None:
        """Why ``command``, whose answer reads ``reads``, must not answer about this store (one
        sentence), or None."""
        for u in self.unsupported:
            if u.takes_over & reads:
                name = layout_name(u.kind)
                where = Path(u.path).relative_to(self.root).as_posix()
                return f"this store uses {name} ({where}/); `{command}` does not support it yet"
        return None

    # --- small files -----------------------------------------------------------------------

    @property
    def abort_path(self) -> Path:
        return self.root / "abort"

    @property
    def abort_present(self) -> bool:
        """``lastExitOK = !exists(abort)``: present means the last shutdown was not clean."""
        return self.abort_path.exists()

    def abort_content(self) -> bytes:
        """The first bytes of ``abort``: 5.x writes the broker PID, 4.9 leaves it empty. Empty
        when it cannot be read (a layout problem says why)."""
        return self._marker(self.abort_path).data

    def abort_marker(self) -> AbortMarker | None:
        if not self.abort_present:
            return None
        marker = self._marker(self.abort_path)
        return decode_abort(marker.data, marker.size)

    def lock_marker(self) -> LockMarker | None:
        path = self.root / "lock"
        if not path.is_file():
            return None
        marker = self._marker(path)
        return decode_lock(marker.data, marker.size)

    def _marker(self, path: Path) -> SmallFile:
        try:
            return read_small(path, MARKER_READ_LIMIT) or SmallFile(b"", 0)
        except StoreError:
            return SmallFile(b"", 0)

    @property
    def checkpoint_path(self) -> Path:
        return self.root / "checkpoint"

    def checkpoint_file(self) -> SmallFile | None:
        """The checkpoint's first bytes (enough for every field and a dirty tail) and its size,
        or None when it is missing (the broker then uses zeros); StoreError when it is not a
        file that can be read."""
        from rmqinspect.format.checkpoint import CHECKPOINT_READ_LIMIT

        return read_small(self.checkpoint_path, CHECKPOINT_READ_LIMIT)

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    # --- consume queues --------------------------------------------------------------------

    def read_rocksdb_queues(self) -> None:
        """Open the store's RocksDB consume queue, if it has one (docs/rocksdb-consume-queue.md),
        and add its queues to :attr:`queue_dirs` (under the database's directory), so that every
        reader of queues finds them; StoreError (one line naming the directory) when it is not
        a database RocketMQ could open. Called by the commands that read queues, so that the
        others answer about a store whatever its database holds."""
        from rmqinspect.store.rocksdb_queue import RocksConsumeQueues

        directory = rocksdb_queue_dir(self.root)
        if self.rocksdb is not None or directory is None:
            return
        self.rocksdb = RocksConsumeQueues.open(directory)
        self.problems.extend(self.rocksdb.problems)
        # A queue both in files and in the database (a CombineConsumeQueueStore's two
        # stores) is read from the database; which one such a broker serves is its
        # configuration, not on disk.
        for qid in self.rocksdb.queues:
            self.queue_dirs[qid] = directory
        self.queue_dirs = _sorted_queues(self.queue_dirs)

    def rocksdb_queue(self, qid: QueueId) -> bool:
        """Whether the queue's units are held by the RocksDB consume queue."""
        return self.rocksdb is not None and qid in self.rocksdb.queues

    def batch_queue(self, qid: QueueId) -> BatchQueue | None:
        """The queue's BatchConsumeQueue as the broker loads it (store/batch_queue.py); None
        when the queue is not one."""
        if qid not in self.batch_dirs:
            return None
        q = self._batch.get(qid)
        if q is None:
            from rmqinspect.store.batch_queue import load_batch_queue

            files = self.consume_queue_files(qid.topic, qid.queue_id)
            q = load_batch_queue(self.maps, qid, files, self.commitlog.min_offset)
            self._batch[qid] = q
        return q

    def consume_queue_files(self, topic: str, queue_id: int) -> FileQueue:
        """The files of one consume queue (empty when the directory does not exist); the
        broker's in-memory queue over them is
        :class:`~rmqinspect.store.consume_queue.ConsumeQueue`."""
        qid = QueueId(topic, queue_id)
        queue = self._queues.get(qid)
        if queue is None and self.rocksdb_queue(qid):
            # No files: its units are the database's (analysis/queues.py reads them).
            queue = FileQueue(self.rocksdb.directory if self.rocksdb else self.root, 0)
            self._queues[qid] = queue
        if queue is None and qid in self.batch_dirs:
            from rmqinspect.format.batchcq import DEFAULT_BCQ_FILE_SIZE

            queue = list_family(
                self.batch_dirs[qid], None, f"batch consume queue {qid}", DEFAULT_BCQ_FILE_SIZE
            )
            self._queues[qid] = queue
        if queue is None:
            directory = self.queue_dirs.get(qid)
            if directory is None and is_plain_name(topic):
                directory = self.root / qid.relative_dir
            if directory is None:
                # A topic that is no plain name (a record's "../x"): the broker's path for it
                # leaves consumequeue/, and nothing outside the store is read.
                queue = FileQueue(self.root / "consumequeue", self.cq_file_size)
            else:
                queue = list_family(
                    directory,
                    self.cq_file_size,
                    f"consume queue {qid}",
                    self.cq_file_size,
                    self._listings.pop(directory, None),
                )
            self._queues[qid] = queue
        return queue

    @property
    def cq_file_size(self) -> int:
        """Configured CQ file size: the override, else the most common length on disk."""
        if self.options.cq_file_size is not None:
            from rmqinspect.format.consumequeue import cq_file_size

            return cq_file_size(self.options.cq_file_size)
        return self._inferred_cq_file_size

    @functools.cached_property
    def _inferred_cq_file_size(self) -> int:
        counts: dict[int, int] = {}
        for qid, directory in self.queue_dirs.items():
            if self.rocksdb_queue(qid) or qid in self.batch_dirs:
                continue
            try:
                listing = list_directory(directory, "consume queue")
            except StoreError:
                continue  # the queue's own listing reports it
            # Kept for consume_queue, which would list the directory again: one listing per
            # queue, not two, counts with 100,000 queues.
            self._listings[directory] = listing
            for path, size in listing.files:
                if size > 0 and parse_offset_name(path.name) is not None:
                    counts[size] = counts.get(size, 0) + 1
        if not counts:
            from rmqinspect.format.consumequeue import DEFAULT_CQ_FILE_SIZE

            return DEFAULT_CQ_FILE_SIZE
        return max(counts, key=lambda s: counts[s])

    # --- commitlog -------------------------------------------------------------------------

    def view(self, file: StoreFile) -> memoryview:
        return self.maps.view(file)

    def commitlog_file(self, physical_offset: int) -> StoreFile:
        f = self.commitlog.find(physical_offset)
        if f is None:
            raise StoreError(
                f"physical offset {physical_offset} is outside the commitlog files "
                f"[{max(self.commitlog.min_offset, 0)}, {self.commitlog.end_offset})",
                str(self.commitlog.directory),
            )
        return f

    def relative(self, path: Path | str) -> str:
        """A path as every report names it: relative to the store root (as given otherwise)."""
        p = Path(path)
        try:
            return p.relative_to(self.root).as_posix()
        except ValueError:
            return p.as_posix()

    def check_at(
        self, physical_offset: int, options: cl.CheckOptions | None = None
    ) -> cl.CheckResult:
        """The broker's verdict on the bytes at one physical offset."""
        f = self.commitlog_file(physical_offset)
        buf = self.view(f)
        try:
            return cl.check_message(buf, physical_offset - f.start, f.start, options)
        finally:
            buf.release()

    def read_message(
        self, physical_offset: int, with_body: bool = True, *, accept_v2: bool = True
    ) -> cl.MessageRecord:
        """Decode the message at ``physical_offset``; StoreError names the file and offset.
        ``accept_v2``: a V2 magic is a message's (False for a version without it)."""
        f = self.commitlog_file(physical_offset)
        buf = self.view(f)
        try:
            pos = physical_offset - f.start
            if pos >= len(buf):
                raise StoreError("offset is past the end of the file on disk", str(f.path), pos)
            record = cl.decode_message(buf, pos, f.start, with_body=with_body, accept_v2=accept_v2)
        except DecodeError as err:
            raise StoreError.from_decode(err, str(f.path)) from None
        finally:
            buf.release()
        return self.with_entry(record)

    def with_entry(self, record: cl.MessageRecord) -> cl.MessageRecord:
        """In a DLedger store, ``record`` with the entry that holds it (its header 48 bytes
        before the record, when that header names its own position); unchanged otherwise."""
        if self.dledger is not None and record.entry is None:
            record.entry = self.dledger.message_entry(self.maps, record.position)
        return record

    def scan(
        self,
        start: int | None = None,
        options: cl.CheckOptions | None = None,
        *,
        policy: WalkPolicy,
        files: list[StoreFile] | None = None,
        max_records: int | None = None,
    ) -> Iterator[tuple[StoreFile, FileEvent]]:
        """Walk the commitlog from ``start`` (a record boundary; default the first file), file by
        file, as :func:`~rmqinspect.format.scan.scan_file` does: runs of checked records and,
        under :attr:`~rmqinspect.format.scan.WalkPolicy.FORENSIC`, the damage skipped between
        them, each with its file. In a DLedger store the walk goes entry by entry
        (:func:`~rmqinspect.format.dledger.scan_data_file`) from the entry whose record is at
        ``start`` (or the entry at ``start``, or the next one).

        A BLANK moves to the next file, as the broker does. Under ``WalkPolicy.BROKER`` the
        first record the check rejects ends the walk (the failed run is the last event), as it
        ends recovery; under ``WalkPolicy.FORENSIC`` the walk goes on past it in the same
        file, and a file's damage that no record follows ends that file only. Runs read the
        file's map: use their columns before asking for the next event (the pages behind an
        event are released then, so memory stays flat over any number of files).
        ``max_records`` bounds a run (default ``RUN_RECORDS``).
        """
        from rmqinspect.format.scan import CheckedRun, WalkPolicy

        opts = options or cl.CheckOptions()
        chosen = files if files is not None else self.commitlog.files
        for f in chosen:
            if start is not None and f.start + self.commitlog.file_size <= start:
                continue
            pos = start - f.start if start is not None and start > f.start else 0
            buf = self.view(f)
            try:
                events = self.scan_file(f, buf, pos, opts, policy=policy, max_records=max_records)
                for event in self.releasing(f, events, pos):
                    yield f, event
                    broker = policy is WalkPolicy.BROKER
                    if broker and isinstance(event, CheckedRun) and event.failed:
                        return
            finally:
                buf.release()

    def releasing(
        self, f: StoreFile, events: Iterable[FileEvent], pos: int = 0
    ) -> Iterator[FileEvent]:
        """``events`` of a walk of ``f`` from file position ``pos``, each dropping the pages
        behind it (up to its ``end``) when the next is asked for, and the rest of the file when
        the walk ends or is abandoned: a walk's memory stays flat however large the file."""
        released = pos
        try:
            for event in events:
                yield event
                # The caller is done with the event: drop the pages behind it.
                self.maps.release(f, released, event.end)
                released = event.end
        finally:
            # From the walk's start: a page that straddled two events' ends is dropped too.
            self.maps.release(f, pos, f.length)

    def scan_file(
        self,
        f: StoreFile,
        buf: memoryview,
        pos: int = 0,
        options: cl.CheckOptions | None = None,
        *,
        policy: WalkPolicy,
        max_records: int | None = None,
    ) -> Iterator[FileEvent]:
        """The events of one commitlog file ``f`` (mapped as ``buf``) from file position ``pos``:
        :func:`~rmqinspect.format.scan.scan_file` over bare records, or in a DLedger store
        :func:`~rmqinspect.format.dledger.scan_data_file` over entries, from the entry whose
        record is at ``pos`` (or the entry at ``pos``, or the next one). Every walk of "the
        commitlog of this store" goes through here; see :meth:`scan` for the arguments. The
        search for the end of the data stops at the file's last data extent (holes are never
        read)."""
        from rmqinspect.format.columns import RUN_RECORDS
        from rmqinspect.format.scan import scan_file

        opts = options or cl.CheckOptions()
        limit = RUN_RECORDS if max_records is None else max_records
        data_end = self.maps.data_end(f)
        if self.dledger is not None:
            from rmqinspect.format import dledger as dl

            return dl.scan_data_file(
                buf,
                f.start,
                dl.entry_boundary(buf, pos, f.start),
                opts,
                policy=policy,
                max_records=limit,
                data_end=data_end,
            )
        return scan_file(
            buf, f.start, pos, opts, policy=policy, max_records=limit, data_end=data_end
        )

    def first_records(
        self, f: StoreFile, options: cl.CheckOptions, limit: int = 1
    ) -> list[cl.MessageRecord]:
        """Up to ``limit`` records from the start of commitlog file ``f`` that the check accepts
        one after another (none when the file does not start with one), without bodies."""
        from rmqinspect.format.scan import CheckedRun, WalkPolicy

        walk = self.scan(f.start, options, policy=WalkPolicy.BROKER, files=[f], max_records=limit)
        for _, event in walk:
            if isinstance(event, CheckedRun) and len(event):
                return event.columns.records(range(len(event)), with_body=False)
            break
        return []

    # --- record checks ---------------------------------------------------------------------

    @functools.cached_property
    def delay_table(self) -> tuple[tuple[int, int], ...]:
        """``messageDelayLevel`` as (level, delay ms): a delay message's tagsCode is its
        store time plus its level's delay, and the check rejects a level past the last."""
        return tuple(cl.parse_delay_levels(self.message_delay_level).items())

    @property
    def message_delay_level(self) -> str:
        return self.options.delay_levels or cl.DEFAULT_DELAY_LEVELS

    def check_options(self, *, check_crc: bool, read_body: bool) -> cl.CheckOptions:
        """How ``checkMessageAndReturnSize`` runs on this store: its profile's format and its
        broker's delay levels, with or without the CRC and the body."""
        return cl.CheckOptions(
            profile=self.profile.profile,
            check_crc=check_crc,
            read_body=read_body,
            delay_levels=self.delay_table,
        )

    # --- profile ---------------------------------------------------------------------------

    @property
    def profile(self) -> ProfileDetection:
        if self._profile is None:
            self._profile = detect_profile(self)
        return self._profile

    def profile_mismatch(self) -> str | None:
        """When ``--profile`` was forced and the store shows another profile, says so."""
        forced = self.options.profile
        seen = looks_like(self) if forced is not None else None
        if forced is None or seen is None or seen.profile is forced:
            return None
        return (
            f"--profile {forced} is forced, but the store looks like {seen.profile} "
            f"({'; '.join(seen.reasons)}); {forced}'s format and recovery rules apply"
        )


BATCH_QUEUE_DIR = "batchconsumequeue"  # StorePathConfigHelper.getStorePathBatchConsumeQueue


def _sorted_queues(queues: dict[QueueId, Path]) -> dict[QueueId, Path]:
    return dict(sorted(queues.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id)))
