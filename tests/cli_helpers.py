"""Shared helpers of the CLI tests: invoke the real typer app and build small real stores."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from rmqinspect.cli.app import app
from rmqinspect.format.host import HostAddress
from rmqinspect.format.profile import Profile
from rmqinspect.synth.writer import MessageSpec, StoreLayout, StoreWriter

SMALL_LAYOUT = StoreLayout(
    profile=Profile.V4_9,
    commitlog_file_size=64 * 1024,
    cq_file_size=50 * 20,
    index_slot_num=64,
    index_num=400,
)
SMALL_OPTS = ["--index-slots", "64", "--index-entries", "400"]


def run(*args: str | Path) -> Result:
    """``rmqinspect ARGS`` through typer's runner; stdout and stderr stay separate."""
    return CliRunner().invoke(app, [str(a) for a in args])


def run_json(*args: str | Path, expect: int) -> Any:
    """``rmqinspect ARGS --format json``, which must exit ``expect``; its parsed document."""
    result = run(*args, "--format", "json")
    assert result.exit_code == expect, (result.exit_code, result.stderr)
    return json.loads(result.stdout)


def run_jsonl(*args: str | Path, expect: int) -> list[Any]:
    """``rmqinspect ARGS --format jsonl``, which must exit ``expect``; its parsed lines."""
    result = run(*args, "--format", "jsonl")
    assert result.exit_code == expect, (result.exit_code, result.stderr)
    return [json.loads(line) for line in result.stdout.splitlines() if line]


def build_store(
    root: Path,
    specs: Sequence[MessageSpec],
    layout: StoreLayout = SMALL_LAYOUT,
    *,
    crash: bool = False,
    consumer_offsets: dict[str, dict[int, int]] | None = None,
    previous_offsets: dict[str, dict[int, int]] | None = None,
) -> Path:
    with StoreWriter(root, layout, crash=crash) as w:
        for spec in specs:
            w.put(spec)
        if consumer_offsets is not None:
            w.set_consumer_offsets(consumer_offsets, previous_offsets)
    return root


def read_from_disk(path: Path) -> None:
    """Drop ``path``'s pages from the page cache (written out first), so that a test's reads
    fault from disk: pages written just now may sit in the page cache as folios of any size,
    which a fault maps whole, and a count of mapped pages would count them."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def orders(n: int, topic: str = "Orders", queues: int = 2) -> list[MessageSpec]:
    """``n`` messages spread over ``queues`` queues, each with a key, a tag and a UNIQ_KEY."""
    return [
        MessageSpec(
            topic=topic,
            queue_id=i % queues,
            body=f"order {i}".encode(),
            tags="TagA" if i % 2 else "TagB",
            keys=f"ORDER-{i}",
            uniq_key=f"0A000001{i:024X}",
            born_host=HostAddress(bytes([192, 168, 0, 1]), 40000 + i),
        )
        for i in range(n)
    ]


def escaping_topics(absolute: Path) -> tuple[str, ...]:
    """Record topics that, joined into ``consumequeue/<topic>/<queueId>`` as the broker joins
    them, leave the store: up and out, up, itself, a NUL, an absolute path (``absolute``)."""
    return ("../../bait", "..", ".", "a\0b", "x/../../../bait", str(absolute))


def escaping_store(root: Path, absolute: Path) -> Path:
    """A crashed 4.9 store (the SMALL layout) whose tail the reput service has not reached:
    ordinary orders, then one record of each :func:`escaping_topics` topic, which the
    restart's dispatch would give a consume queue. The writer itself never makes a
    directory from them."""
    tail = [MessageSpec(topic=t, body=b"escape", dispatch=False) for t in escaping_topics(absolute)]
    return build_store(root, [*orders(20), *tail], crash=True)


def tree_state(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root`` (links not followed): a file's SHA-256, size and mtime (ns), a
    directory's mtime (a file created and removed inside it still moves it)."""
    state: dict[str, tuple[object, ...]] = {}
    for path in sorted([root, *root.rglob("*")]):
        st = os.lstat(path)
        key = path.relative_to(root).as_posix()
        if stat.S_ISREG(st.st_mode):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            state[key] = ("file", digest, st.st_size, st.st_mtime_ns)
        else:
            state[key] = (stat.S_IFMT(st.st_mode), st.st_mtime_ns)
    return state


def delays_exit(doc: dict[str, Any]) -> int:
    """What ``delays`` exits with for its JSON: 1 for a flagged level or a config file in error."""
    errors = doc["file"] is not None and bool(doc["file"]["errors"])
    return 1 if errors or any(level["flagged"] for level in doc["levels"]) else 0
