"""Costs that grow with a store's count of things, not its bytes: queue directories, files of one
queue, topics and config offsets (issue 26). Each is linear; this prints the figures to check it.

Usage: python benchmarks/many_queues.py [--size N] [--cases qdirs,qfiles,topics,offsets]

Each case is built at N/2 and N things from a copy of ``fixtures/stores/clean49`` (``topics``:
a synthesized store of N one-message topics), and each command that grows with it is timed at
both sizes with ``--format json``: the ratio of the two times is about 2 when the cost is linear
(4 when quadratic), and ``per item`` is the cost of one more thing. Both sizes run in the same
run, so a busy machine shifts both.

* ``qdirs``: N queue directories ``consumequeue/T<i>/0/``, half of them holding one sparse file;
* ``qfiles``: N sparse files under ``consumequeue/Orders/0/``;
* ``topics``: N records, each of its own topic (and queue);
* ``offsets``: about N offsets in ``config/consumerOffset.json``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness import RMQ, run

from rmqinspect.synth.writer import MessageSpec, StoreWriter

CLEAN = Path(__file__).resolve().parent.parent / "fixtures" / "stores" / "clean49"
CQ_FILE = 1000  # clean49's consume queue file size


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        fh.truncate(size)


def qdirs(n: int, root: Path) -> None:
    shutil.copytree(CLEAN, root)
    for i in range(n):
        directory = root / "consumequeue" / f"T{i}" / "0"
        directory.mkdir(parents=True)
        if i % 2:
            _sparse(directory / f"{0:020d}", CQ_FILE)


def qfiles(n: int, root: Path) -> None:
    shutil.copytree(CLEAN, root)
    directory = root / "consumequeue" / "Orders" / "0"
    directory.mkdir(parents=True)
    for i in range(n):
        _sparse(directory / f"{i * CQ_FILE:020d}", CQ_FILE)


def topics(n: int, root: Path) -> None:
    with StoreWriter(root) as w:
        w.put_many(MessageSpec(topic=f"T{i}", body=b"x" * 16) for i in range(n))


def offsets(n: int, root: Path) -> None:
    shutil.copytree(CLEAN, root)
    rows = ",\n".join(
        f'\t\t"Topic{"ABC"[g % 3]}@g{g}":{{0:1,1:2,2:3,3:4\n\t\t}}' for g in range(n // 4)
    )
    text = '{\n\t"offsetTable":{\n' + rows + "\n\t}\n}"
    (root / "config" / "consumerOffset.json").write_text(text)


CASES: dict[str, tuple[Callable[[int, Path], None], str, tuple[str, ...]]] = {
    "qdirs": (qdirs, "T1", ("verify", "export", "lookup", "recover", "consumequeue")),
    "qfiles": (qfiles, "Orders", ("verify", "export", "lookup", "recover", "consumequeue")),
    "topics": (topics, "T1", ("export",)),
    "offsets": (offsets, "TopicA", ("offsets", "export")),
}


def _argv(command: str, store: Path, out: Path, topic: str) -> list[str]:
    tail = ["--format", "json"]
    return {
        "verify": [*RMQ, "verify", str(store), *tail],
        "export": [*RMQ, "export", str(store), str(out), "--engine", "arrow", *tail],
        "lookup": [*RMQ, "lookup", str(store), "--since", "0", "-t", topic, *tail],
        "recover": [*RMQ, "recover", str(store), "--out", str(out), *tail],
        "consumequeue": [*RMQ, "consumequeue", str(store), topic, "0", *tail],
        "offsets": [*RMQ, "offsets", str(store), *tail],
    }[command]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases.split(","):
            build, topic, commands = CASES[name]
            stores = {}
            for n in (args.size // 2, args.size):
                stores[n] = Path(tmp, f"{name}-{n}")
                build(n, stores[n])
            for command in commands:
                seconds = {}
                for n, store in stores.items():
                    out = Path(tmp, "out")
                    shutil.rmtree(out, ignore_errors=True)
                    seconds[n] = run(_argv(command, store, out, topic), ok=(0, 1)).wall
                half, full = seconds[args.size // 2], seconds[args.size]
                per_item = (full - half) / (args.size - args.size // 2) * 1e3
                print(
                    f"{name:8} {command:13} {args.size // 2:>8}: {half:6.1f} s "
                    f"{args.size:>8}: {full:6.1f} s  ratio {full / half:4.2f}  "
                    f"per item {per_item:.3f} ms",
                    flush=True,
                )
            for store in stores.values():
                shutil.rmtree(store)


if __name__ == "__main__":
    sys.exit(main())
