"""What the benchmark scripts share: building a store, the references, and timing a child.

Every figure a script prints is measured in the same run as its reference (``cat`` of the same
bytes, ``python -c pass``), so a busy machine shifts both. A child command is timed by wall
clock and by CPU (user + system, from ``wait4``); its peak resident set (mapped store pages
included) is the kernel's high-water mark of the executed program or of its largest worker
process (``VmHWM``, sampled: ``wait4``'s ``ru_maxrss`` also counts what the child shared
with this process between fork and exec, and this process may hold a big store writer); its
peak anonymous memory is sampled too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rmqinspect.synth.workload import WorkloadConfig, write_workload

BODY = 1000
RECORD = BODY + 250  # about what a synth record with its properties takes
RMQ = [sys.executable, "-m", "rmqinspect"]


def synth(root: Path, gib: float, *, crash: bool = False, seed: int = 1) -> int:
    """A store of about ``gib`` GiB of 1000-byte bodies; returns the message count."""
    messages = int(gib * (1 << 30)) // RECORD
    t0 = time.perf_counter()
    write_workload(root, WorkloadConfig(messages=messages, body_size=BODY, seed=seed, crash=crash))
    kind = "crashed " if crash else ""
    print(f"synth: {kind}store of {messages} messages in {time.perf_counter() - t0:.1f} s")
    return messages


def commitlog_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def data_bytes(root: Path) -> int:
    """Bytes of the commitlog files that hold data (files are preallocated and sparse)."""
    return sum(os.stat(p).st_blocks * 512 for p in commitlog_files(root))


def cat_seconds(files: list[Path]) -> float:
    """``cat files > /dev/null`` with a warm page cache, the best of three."""
    cmd = ["cat", *map(str, files)]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - t0)
    return best


@dataclass(frozen=True)
class Run:
    wall: float  # seconds
    cpu: float  # user + system seconds of the child
    max_rss: int  # bytes: the program's peak resident set, mapped file pages included
    max_anon: int  # bytes: the child's peak anonymous memory (sampled every 20 ms)
    code: int


def _memory(pid: int) -> tuple[int, int]:
    """(high-water mark of the resident set, resident anonymous memory) of ``pid`` in bytes."""
    hwm = anon = 0
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
    except OSError:
        pass
    return hwm, anon


def _descendants(pid: int) -> list[int]:
    """``pid``'s worker processes, their workers and so on."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                kids = [int(c) for c in fh.read().split()]
        except OSError:
            continue
        for kid in kids:
            out += [kid, *_descendants(kid)]
    return out


def run(cmd: list[str], *, ok: tuple[int, ...] = (0,), stdout: int | None = None) -> Run:
    """Run ``cmd`` to completion (stdout to /dev/null unless given) and measure it: the peaks
    are those of the largest of the program and its worker processes (each is a process of
    its own, with its own maps)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL if stdout is None else stdout)
    peak = [0, 0]
    done = threading.Event()
    command_line = "\0".join(cmd).encode() + b"\0"

    def sample() -> None:
        while not done.wait(0.02):
            try:  # before exec the child is still a copy of this process: not its figures
                with open(f"/proc/{proc.pid}/cmdline", "rb") as fh:
                    if fh.read() != command_line:
                        continue
            except OSError:
                continue
            for pid in (proc.pid, *_descendants(proc.pid)):
                hwm, anon = _memory(pid)
                peak[0], peak[1] = max(peak[0], hwm), max(peak[1], anon)

    thread = threading.Thread(target=sample, daemon=True)
    t0 = time.perf_counter()
    thread.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    thread.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited with {proc.returncode}")
    return Run(wall, usage.ru_utime + usage.ru_stime, peak[0], peak[1], proc.returncode)


def best_of(n: int, cmd: list[str], *, ok: tuple[int, ...] = (0,)) -> Run:
    """The fastest (by wall time) of ``n`` runs."""
    return min((run(cmd, ok=ok) for _ in range(n)), key=lambda r: r.wall)


def python_pass_seconds(n: int = 10) -> float:
    return best_of(n, [sys.executable, "-c", "pass"]).wall


def mib(n: int) -> str:
    return f"{n / 2**20:.0f}"
