"""One store file read on its own, as ``kafka-dump-log --files`` reads one segment: after a crash
people often hold a single copied commitlog, consume queue or index file and no directory around
it. :func:`open_loose` makes a :class:`Store` that holds just that file, so every command reads
it through the same model (the same walks, maps and checks) as a whole store.

The geometry comes from the name and the options: an offset-named file starts at the offset its
name spells; its configured size is the option when given, else the file's own length (a copied
file is whole), else the broker's default. A consume queue's topic and queue id are the parent
directories when they look like ``<topic>/<queueId>/``, unless given.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from rmqinspect.errors import StoreError
from rmqinspect.format import commitlog as cl
from rmqinspect.format.consumequeue import DEFAULT_CQ_FILE_SIZE, cq_file_size
from rmqinspect.format.javamath import java_parse_int
from rmqinspect.format.names import fits_offset_stream, is_index_name, parse_offset_name
from rmqinspect.format.sizes import CQ_STORE_UNIT_SIZE
from rmqinspect.store.files import FileQueue, StoreFile, open_regular
from rmqinspect.store.layout import QueueId, is_plain_name
from rmqinspect.store.model import Store, StoreOptions


class LooseKind(enum.Enum):
    COMMITLOG = "commitlog"
    CONSUME_QUEUE = "consume queue"
    INDEX = "index"


@dataclass(frozen=True, slots=True)
class LooseFile:
    """What a command reads a lone file as; for a consume queue, its topic and queue id when
    the parent directories do not say them."""

    kind: LooseKind
    topic: str | None = None
    queue_id: int | None = None


def is_loose(path: Path) -> bool:
    """Whether ``path`` names something that is not a directory (a file to read on its own;
    what it is, is :func:`open_loose`'s to check). A symlink to a directory is a directory, as
    for :meth:`Store.open`."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False  # missing: Store.open says so


def open_loose(path: Path, options: StoreOptions, loose: LooseFile) -> Store:
    """A store of the one file ``path`` (never written); StoreError names the file when its
    name or size cannot be a file of ``loose.kind``."""
    try:
        # The one check of what a store file may be (no link followed, no FIFO or device).
        fd = open_regular(path)
    except (FileNotFoundError, NotADirectoryError):
        raise StoreError("no such file", str(path)) from None
    try:
        length = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if loose.kind is LooseKind.INDEX:
        return _index_store(path, options, length)
    start = parse_offset_name(path.name)
    if start is None:
        raise StoreError(
            f"a {loose.kind.value} file is named by the 20-digit offset of its first byte "
            "(give a store directory, or the file under its own name)",
            str(path),
        )
    if loose.kind is LooseKind.COMMITLOG:
        size = options.commitlog_file_size or length or cl.DEFAULT_COMMITLOG_FILE_SIZE
        opts = dataclasses.replace(options, commitlog_file_size=size)
        queue = _family(path, start, length, size, "commitlog")
        return _store(path, opts, commitlog=queue)
    size = cq_file_size(options.cq_file_size or _whole_units(length) or DEFAULT_CQ_FILE_SIZE)
    if start % CQ_STORE_UNIT_SIZE:
        raise StoreError(
            f"a consume queue file starts at a whole unit ({CQ_STORE_UNIT_SIZE} bytes); "
            f"its name says {start}",
            str(path),
        )
    qid = _queue_of(path, loose)
    opts = dataclasses.replace(options, cq_file_size=size)
    store = _store(path, opts, queue_dirs={qid: path.parent})
    # The file alone, not its siblings: consume_queue_files answers from here.
    store._queues[qid] = _family(path, start, length, size, f"consume queue {qid}")
    return store


def _whole_units(length: int) -> int:
    return length if length % CQ_STORE_UNIT_SIZE == 0 else 0


def _family(path: Path, start: int, length: int, size: int, family: str) -> FileQueue:
    if not fits_offset_stream(start, size):
        raise StoreError(
            f"a {family} file at offset {start} would end past the largest offset (a Java "
            f"long) with files of {size} bytes",
            str(path),
        )
    return FileQueue(path.parent, size, [StoreFile(path, start, length)])


def _queue_of(path: Path, loose: LooseFile) -> QueueId:
    """The queue the file belongs to: what the caller gave, else ``<topic>/<queueId>/``."""
    parent = path.parent.resolve()
    queue_id = loose.queue_id
    if queue_id is None:
        queue_id = java_parse_int(parent.name)
    topic = loose.topic
    if topic is None and is_plain_name(parent.parent.name):
        topic = parent.parent.name
    if topic is None or queue_id is None:
        raise StoreError(
            "the file's directories are not <topic>/<queueId>/: give TOPIC and QUEUE_ID",
            str(path),
        )
    return QueueId(topic, queue_id)


def _index_store(path: Path, options: StoreOptions, length: int) -> Store:
    if not is_index_name(path.name):
        raise StoreError(
            "an index file is named by 17 digits (yyyyMMddHHmmssSSS, its creation time)",
            str(path),
        )
    return _store(path, options, index_files=[StoreFile(path, int(path.name), length)])


def _store(
    path: Path,
    options: StoreOptions,
    *,
    commitlog: FileQueue | None = None,
    queue_dirs: dict[QueueId, Path] | None = None,
    index_files: list[StoreFile] | None = None,
) -> Store:
    """The store around one file: its directory is the root, and nothing else of it is read
    (no markers, no config, no other family)."""
    return Store(
        root=path.parent,
        options=options,
        commitlog=commitlog
        or FileQueue(path.parent, options.commitlog_file_size or cl.DEFAULT_COMMITLOG_FILE_SIZE),
        queue_dirs=queue_dirs or {},
        index_files=index_files or [],
        loose=path,
    )
