"""A process that writes into a store while rmqinspect reads it (``tests/test_live_store.py``).

``python -m tests.live_writer STORE MODE SECONDS``, run from the repository root. It takes the
broker's lock on ``STORE/lock`` (as ``FileChannel.tryLock`` does), prints ``ready``, then for
SECONDS:

* ``append``: appends records to the commitlog's last file in place, each in two writes with a
  pause between (readers see torn records), rolls to a new full-size file with a BLANK as the
  broker does, appends consume-queue units and moves the checkpoint;
* ``truncate``: truncates the last commitlog file to 0 bytes and grows it back with its
  content, again and again (no broker does this; a reader must not die of SIGBUS).

:func:`open_then_written` makes the race certain on the reading side: a store opened through
it is handed over only once the writer has changed the commitlog since, so every command reads
a store that changes under it. ``python -m tests.live_writer --read ARGS`` runs ``rmqinspect
ARGS`` that way.
"""

from __future__ import annotations

import fcntl
import os
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rmqinspect.format import commitlog as cl
from rmqinspect.format.consumequeue import encode_unit
from rmqinspect.format.encode import encode_blank, encode_message
from rmqinspect.format.host import HostAddress
from rmqinspect.format.names import offset_file_name

HOST = HostAddress(bytes([10, 0, 0, 7]), 10911)
TOPIC = "LiveTopic"


def _end_of_records(data: bytes) -> int:
    pos = 0
    while pos + 8 <= len(data):
        size, magic = struct.unpack_from(">ii", data, pos)
        if size < cl.MIN_RECORD_SIZE or magic == cl.BLANK_MAGIC_CODE or pos + size > len(data):
            break
        pos += size
    return pos


def append(root: Path, deadline: float) -> None:
    logs = root / "commitlog"
    last = sorted(logs.iterdir())[-1]
    file_size = last.stat().st_size
    start = int(last.name)
    pos = _end_of_records(last.read_bytes())
    cq_dir = root / "consumequeue" / TOPIC / "0"
    cq_dir.mkdir(parents=True, exist_ok=True)
    cq = cq_dir / offset_file_name(0)
    with open(cq, "wb") as fh:
        fh.truncate(1000)
    fd = os.open(last, os.O_RDWR)
    cq_fd = os.open(cq, os.O_RDWR)
    checkpoint = os.open(root / "checkpoint", os.O_RDWR)
    queue_offset = 0
    while time.monotonic() < deadline:
        record = encode_message(
            topic=TOPIC,
            queue_id=0,
            flag=0,
            queue_offset=queue_offset,
            physical_offset=start + pos,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            born_host=HOST,
            store_timestamp=int(time.time() * 1000),
            store_host=HOST,
            reconsume_times=0,
            prepared_transaction_offset=0,
            body=os.urandom(200),
            properties=b"KEYS\x01live-%d" % queue_offset,
        )
        if pos + len(record) + cl.END_FILE_MIN_BLANK_LENGTH > file_size:
            os.pwrite(fd, encode_blank(file_size - pos), pos)
            os.close(fd)
            start += file_size
            last = logs / offset_file_name(start)
            fd = os.open(last, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, file_size)
            pos = 0
            continue
        half = len(record) // 2
        os.pwrite(fd, record[:half], pos)
        time.sleep(0.001)
        os.pwrite(fd, record[half:], pos + half)
        if queue_offset < 50:
            os.pwrite(cq_fd, encode_unit(start + pos, len(record), 0), queue_offset * 20)
        os.pwrite(checkpoint, struct.pack(">q", int(time.time() * 1000)), 0)
        pos += len(record)
        queue_offset += 1
    for handle in (fd, cq_fd, checkpoint):
        os.close(handle)


def truncate(root: Path, deadline: float) -> None:
    last = sorted((root / "commitlog").iterdir())[-1]
    content = last.read_bytes()
    fd = os.open(last, os.O_RDWR)
    while time.monotonic() < deadline:
        os.ftruncate(fd, 0)
        time.sleep(0.005)
        os.ftruncate(fd, len(content))
        os.pwrite(fd, content, 0)
        time.sleep(0.005)
    os.close(fd)


def _commitlog_state(directory: Path) -> dict[str, tuple[int, int]]:
    state = {}
    for entry in os.scandir(directory):
        st = entry.stat()
        state[entry.name] = (st.st_size, st.st_mtime_ns)
    return state


def open_then_written(opened: Callable[..., Any]) -> Callable[..., Any]:
    """``Store.open`` (its function, ``opened``) that returns the store only once a file of its
    commitlog changed, appeared or went after the open: what the store saw at its open is then
    certainly not what it reads. Waits at most 30 s (a writer that died changes nothing)."""

    def open_then_wait(cls: Any, *args: Any, **kwargs: Any) -> Any:
        store = opened(cls, *args, **kwargs)
        seen = _commitlog_state(store.commitlog.directory)
        deadline = time.monotonic() + 30
        while _commitlog_state(store.commitlog.directory) == seen:
            if time.monotonic() > deadline:
                break
            time.sleep(0.001)
        return store

    return open_then_wait


def read(args: list[str]) -> None:
    """``rmqinspect ARGS`` in this process, every store it opens changing under it."""
    from rmqinspect.cli.app import main as rmqinspect
    from rmqinspect.store.model import Store

    Store.open = classmethod(open_then_written(Store.open.__func__))
    sys.argv = ["rmqinspect", *args]
    rmqinspect()


def main() -> None:
    if sys.argv[1] == "--read":
        read(sys.argv[2:])
        return
    root, mode, seconds = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    lock = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    (append if mode == "append" else truncate)(root, deadline)


if __name__ == "__main__":
    main()
