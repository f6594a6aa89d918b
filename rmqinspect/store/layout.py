"""What a store directory holds, found from its listing before any file is read: the consume
queues and index files as the broker's loaders find them, small files that are not regular
files, and the layouts rmqinspect recognises but does not read (each takes over the
:class:`StorePart` whose answers it would make wrong).
"""

from __future__ import annotations

import enum
import operator
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rmqinspect.errors import StoreError
from rmqinspect.format.javamath import java_parse_int
from rmqinspect.format.names import is_index_name
from rmqinspect.store.files import FileQueue, LayoutProblem, StoreFile, list_directory

if TYPE_CHECKING:
    from rmqinspect.store.dledger import DLedgerStore

_SMALL_FILES = ("checkpoint", "abort", "lock")


class StorePart(enum.Flag):
    """What an answer is read from. A command refuses a store (see :meth:`Store.refusal`) when
    a layout there takes over a part its answer reads."""

    COMMITLOG = enum.auto()
    CONSUME_QUEUES = enum.auto()
    INDEX = enum.auto()
    RESTART = enum.auto()  # the restart emulation, which reads every part
    EXPORT = enum.auto()  # the Parquet export's record ranges (export/records.py)
    SALVAGE = enum.auto()  # salvage's resynchronising walk over bare records
    VERIFY = enum.auto()  # verify's units against the commitlog (analysis/verify/queues.py)


ALL_PARTS = StorePart.COMMITLOG | StorePart.CONSUME_QUEUES | StorePart.INDEX | StorePart.RESTART


@dataclass(frozen=True, slots=True)
class UnsupportedLayout:
    """A layout rmqinspect recognises but does not decode yet, and the parts whose answers it
    makes wrong (none: it keeps its own files beside ones that are read correctly)."""

    kind: str  # compaction, dledger, dledger_mixed, dledger_homes
    path: str
    note: str
    takes_over: StorePart


# The one table of refusals: per layout, its name in a sentence and the parts it takes over.
# Supporting a layout means emptying its parts; nothing else refuses.
#  - DLedger itself is read (store/dledger.py) by every command but salvage: its candidates
#    are bare records found anywhere, and its "what a restart keeps" is the plain
#    commitlog's; inside entries DLedger keeps what the scan keeps. A plain commitlog beside
#    DLedger data (a store switched over: reads below the divide go to the old log) and
#    several DLedger homes (which one is the node's is not on disk) are not read: every part
#    depends on which log answers.
#  - (BatchConsumeQueues and RocksDB consume queues are read by every command, their restart
#    included: store/batch_queue.py, store/batch_restart.py, store/rocksdb_queue.py,
#    store/rocksdb_restart.py; they are no longer listed here.)
#  - (The 5.x timer store is read by `timers`, `verify`, `recover`, `trace` and the export's
#    timers table, store/timer.py; `info` lists its files as families.)
#  - Compaction: its own files beside an ordinary commitlog, consume queues and index; what is
#    read from those is right, and the restart of those is unchanged; listed here so that
#    `info` says it is not decoded.
_LAYOUTS: dict[str, tuple[str, StorePart]] = {
    "dledger": ("DLedger", StorePart.SALVAGE),
    "dledger_mixed": (
        "a plain commitlog beside DLedger data",
        ALL_PARTS | StorePart.EXPORT | StorePart.SALVAGE,
    ),
    "dledger_homes": (
        "several DLedger homes",
        ALL_PARTS | StorePart.EXPORT | StorePart.SALVAGE,
    ),
    "compaction": ("the compaction store", StorePart(0)),
}


def plain_name(name: str, what: str) -> str:
    """``name`` when it names one entry of a directory, or a StoreError: the one check every
    path built from store content (a record's topic, a file or directory name read from a
    listing or a config file) passes before it is joined to a directory, read or written.

    Refused: the empty name, ``.`` and ``..``, any ``/`` (so no absolute path), a NUL, and a
    name the file system cannot spell exactly (a lone surrogate that came from JSON: there
    is no byte string it stands for). Everything else is kept as it is: a name decoded from
    a record (Java's UTF-8 decoding, as rmqinspect's) encodes back to the broker's bytes, and
    a name from a listing to the bytes on disk."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise StoreError(
            f"{what} {name!r} is not a plain file name: a path built from it "
            "would leave its directory"
        )
    try:
        os.fsencode(name)
    except UnicodeEncodeError:
        raise StoreError(
            f"{what} {name!r} has no byte spelling a file system can hold", None
        ) from None
    return name


def is_plain_name(name: str) -> bool:
    """Whether :func:`plain_name` takes ``name``."""
    try:
        plain_name(name, "name")
    except StoreError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class QueueId:
    topic: str
    queue_id: int

    @property
    def relative_dir(self) -> Path:
        """``consumequeue/<topic>/<queueId>``, the directory ``ConsumeQueue`` reads and writes
        (:func:`plain_name`: a topic that is no plain name is refused, never joined)."""
        return Path("consumequeue", plain_name(self.topic, "topic"), str(self.queue_id))

    def shown_under(self, root: Path) -> Path:
        """The queue's directory under ``root`` to name in a message: ``consumequeue/`` itself
        for a topic that is no plain name."""
        return root / self.relative_dir if is_plain_name(self.topic) else root / "consumequeue"

    def __str__(self) -> str:
        return f"{self.topic}/{self.queue_id}"


def _subdirectories(
    directory: str, what: str, problems: list[LayoutProblem]
) -> list[os.DirEntry[str]]:
    """Real subdirectories (symlinks are not followed), by name; what cannot be listed is a
    problem. Entries, not paths: a store of 100,000 queues spent seconds building paths."""
    try:
        entries = sorted(os.scandir(directory), key=_entry_name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:
        problems.append(
            LayoutProblem("unreadable", directory, f"cannot list {what}: {err.strerror}")
        )
        return []
    return [e for e in entries if e.is_dir(follow_symlinks=False)]


_entry_name = operator.attrgetter("name")


def discover_queues(directory: Path, problems: list[LayoutProblem]) -> dict[QueueId, Path]:
    """``consumequeue/<topic>/<queueId>/`` as ``loadConsumeQueue`` finds them: a queue directory
    whose name does not parse as an int (``Integer.parseInt``) is skipped, and so are files among
    topics (RocksDB's). The broker then reads a queue from ``<topic>/<queueId>`` rebuilt from the
    parsed int, so a directory named otherwise ("02", "+2", "２") is listed but not read."""
    queues: dict[QueueId, Path] = {}
    for topic in _subdirectories(str(directory), "consumequeue/", problems):
        topic_dir: Path | None = None
        for qdir in _subdirectories(topic.path, f"topic {topic.name!r}", problems):
            queue_id = java_parse_int(qdir.name)
            if queue_id is None:
                continue
            if topic_dir is None:
                topic_dir = Path(topic.path)
            name = str(queue_id)
            if qdir.name != name:
                problems.append(
                    LayoutProblem(
                        "queue_name",
                        qdir.path,
                        f"the broker reads queue {queue_id} from {name!r}, not from this directory",
                    )
                )
            queues[QueueId(topic.name, queue_id)] = topic_dir / name
    return dict(sorted(queues.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id)))


def list_index(directory: Path, problems: list[LayoutProblem]) -> list[StoreFile]:
    """Files named by 17 digits, in load order (by name); anything else is a problem."""
    try:
        listing = list_directory(directory, "index/")
    except StoreError as err:
        problems.append(LayoutProblem("unreadable", str(directory), err.message))
        return []
    problems.extend(listing.problems)
    out = []
    for path, size in listing.files:
        if is_index_name(path.name):
            out.append(StoreFile(path, int(path.name), size))
        else:
            problems.append(
                LayoutProblem(
                    "bad_name", str(path), "index file name is not 17 digits (yyyyMMddHHmmssSSS)"
                )
            )
    return sorted(out, key=lambda f: f.name)


def small_file_problems(root: Path) -> list[LayoutProblem]:
    """``checkpoint``, ``abort`` and ``lock`` that exist but are not regular files."""
    problems = []
    for name in _SMALL_FILES:
        path = root / name
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            problems.append(
                LayoutProblem(
                    "not_regular",
                    str(path),
                    f"{name} is not a regular file (a link, FIFO, device or directory): not read",
                    broker_fails_to_load=name == "checkpoint",
                )
            )
    return problems


def layout_name(kind: str) -> str:
    """The layout ``kind`` as a sentence names it."""
    return _LAYOUTS[kind][0]


def _unsupported(kind: str, path: Path, note: str) -> UnsupportedLayout:
    return UnsupportedLayout(kind, str(path), note, _LAYOUTS[kind][1])


def detect_unsupported(
    root: Path, plain: FileQueue, homes: list[Path], ledger: DLedgerStore | None
) -> list[UnsupportedLayout]:
    found: list[UnsupportedLayout] = []
    log_dir = root / "compaction" / "compactionLog"
    if _has_entries(log_dir):
        found.append(_unsupported("compaction", log_dir, "compaction store is not decoded yet"))
    if len(homes) > 1:
        found.append(
            _unsupported(
                "dledger_homes",
                homes[1],
                "several dledger-* directories (which one the broker's dLegerSelfId names is "
                "not on disk): not decoded yet",
            )
        )
    elif ledger is not None and ledger.data.files and plain.files:
        found.append(
            _unsupported(
                "dledger_mixed",
                ledger.home,
                "a plain commitlog beside DLedger data (a store switched to DLedger, "
                "dledger-store-format.md §9) is not decoded yet",
            )
        )
    elif ledger is not None:
        found.append(
            _unsupported(
                "dledger",
                ledger.home,
                "a DLedger commitlog: every command reads it but salvage, whose resynchronising "
                "walk looks for bare records",
            )
        )
    return found


# Where a 5.x broker keeps a RocksDB consume queue: consumequeue/ itself
# (RocksDBConsumeQueueStore's StorePathConfigHelper.getStorePathConsumeQueue), or
# consumequeue_rocksdb/ in builds with useSeparateStorePathForRocksdbCQ
# (getStorePathRocksDBConsumeQueue); docs/rocksdb-consume-queue.md §1.
ROCKSDB_QUEUE_DIRS = ("consumequeue", "consumequeue_rocksdb")


def rocksdb_queue_dir(root: Path) -> Path | None:
    """The directory of ``root`` whose own files are RocksDB's (a ``CURRENT`` or an ``.sst``;
    whether it opens is store/rocksdb_queue.py's to say), the first of
    :data:`ROCKSDB_QUEUE_DIRS`."""
    for name in ROCKSDB_QUEUE_DIRS:
        if any(
            e.is_file(follow_symlinks=False) and (e.name == "CURRENT" or e.name.endswith(".sst"))
            for e in _entries(root / name)
        ):
            return root / name
    return None


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(directory))
    except OSError:
        return []


def _has_entries(directory: Path) -> bool:
    return directory.is_dir() and bool(_entries(directory))
