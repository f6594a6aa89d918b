"""Seeded mutation campaign: every command over hundreds of broken and hostile store copies.

Usage::

    python benchmarks/campaign.py [--seed 1] [--stores 300] [--jobs 2] [--timeout 30]
                                  [--workdir DIR] [--only N ...] [--keep] [--verify]

Bases are the real-broker corpora (``../shared/conformance*``), the committed fixture stores
and a few stores written by ``synth``. Each campaign store is a copy of one base with 1-3 random
mutations (bit flips, zeroed or random ranges, truncations, extreme size and count fields,
renamed files, broken config JSON, sparse-extended files, deleted files, FIFOs, symlinks to
devices, outside the store or in loops, directories where files should be, control characters in
names). Every command (``COMMANDS``) then runs on it in a child process with
``RMQINSPECT_DEBUG=1`` (so nothing hides behind the catch-all error line), a timeout and a data
memory limit (``RLIMIT_DATA``), and the store is digested before and after (bytes of every data
extent, sizes, mtimes, entries).

It prints the counts of tracebacks (and deaths by signal), hangs, runs above 2 GiB of peak RSS,
evidence changes and errors that are not one line, then one reproducer line per failure. A
store is rebuilt exactly by ``--only N --keep`` with the same seed. Children are forked from
this process after rmqinspect is imported (fast); ``--verify`` re-runs each failure in a fresh
``python -m rmqinspect`` to rule out artefacts of forking.

Not part of ``make test``: a few hundred stores take some minutes on two cores.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # children are forked: no BLAS thread pool

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from campaign_mutations import MUTATIONS  # noqa: E402

from rmqinspect.cli.app import app  # noqa: E402
from rmqinspect.format import commitlog as cl  # noqa: E402
from rmqinspect.format.ids import msg_id  # noqa: E402
from rmqinspect.format.profile import Profile  # noqa: E402
from rmqinspect.format.scan import CheckedRun, WalkPolicy  # noqa: E402
from rmqinspect.store.model import Store  # noqa: E402
from rmqinspect.synth import damage  # noqa: E402
from rmqinspect.synth.workload import WorkloadConfig, write_workload  # noqa: E402
from rmqinspect.synth.writer import StoreLayout  # noqa: E402

SHARED = ROOT.parent / "shared"
GIB = 1 << 30
RSS_LIMIT = 2 * GIB  # a run above this is a failure
DATA_LIMIT = 4 * GIB  # RLIMIT_DATA in each child: the machine's safety net
TRACEBACK = "Traceback (most recent call last)"


# --- bases ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Probe:
    """Values to query a base store with (taken from its first readable record)."""

    topic: str = "TopicA"
    queue_id: int = 0
    msg_id: str = "0A01020300002A9F0000000000000000"
    uniq_key: str = "C00002022F9B5FFD2B27683B968C0633"
    key: str = "K0-0"
    phy_offset: int = 0
    timestamp: int = 1_767_225_600_000


def _probe(root: Path) -> Probe:
    try:
        with Store.open(root) as store:
            opts = cl.CheckOptions(profile=Profile.V5_3, check_crc=False)
            for _, event in store.scan(None, opts, policy=WalkPolicy.BROKER):
                if isinstance(event, CheckedRun) and len(event):
                    rec = event.columns.record(0)
                    return Probe(
                        rec.topic,
                        rec.queue_id,
                        msg_id(rec),
                        rec.uniq_key or Probe.uniq_key,
                        rec.keys[0] if rec.keys else Probe.key,
                        rec.position,
                        rec.store_timestamp,
                    )
    except Exception:  # a base without readable records still gets probed with defaults
        pass
    return Probe()


def _synth_bases(into: Path) -> list[Path]:
    small = {"commitlog_file_size": 64 * 1024, "cq_file_size": 1000}
    out = []
    for name, profile, crash, kinds in (
        ("synth49_crash", Profile.V4_9, True, ("torn",)),
        ("synth51", Profile.V5_1, False, ()),
        ("synth53_crash", Profile.V5_3, True, ("stale",)),
        ("synth53_default_index", Profile.V5_3, False, ()),
    ):
        root = into / name
        if not root.exists():
            layout = StoreLayout(profile=profile, **small)
            if name.endswith("default_index"):
                layout = StoreLayout(profile=profile, **small, index_slot_num=500, index_num=2000)
            else:
                layout = StoreLayout(profile=profile, **small, index_slot_num=64, index_num=400)
            config = WorkloadConfig(messages=400, body_size=100, seed=11, crash=crash, burst=80)
            write_workload(root, config, layout)
            if "torn" in kinds:
                damage.torn_tail(root)
            if "stale" in kinds:
                damage.stale_bytes_past_write_position(root)
        out.append(root)
    return out


def bases(workdir: Path) -> list[Path]:
    found = []
    for corpus in ("conformance", "conformance5"):
        stores = SHARED / corpus / "stores"
        if stores.is_dir():
            found.extend(sorted(p for p in stores.iterdir() if p.is_dir()))
    fixtures = ROOT / "fixtures" / "stores"
    found.extend(sorted(p for p in fixtures.iterdir() if p.is_dir()))
    found.extend(_synth_bases(workdir / "bases"))
    return found


OPTION_SETS: tuple[tuple[str, ...], ...] = (
    (),
    (),
    (),
    ("--index-slots", "64", "--index-entries", "400"),
    ("--index-entries", "2147483647"),
    ("--index-slots", "2147483647"),
    ("--index-slots", "1", "--index-entries", "2"),
    ("--commitlog-file-size", "1"),
    ("--commitlog-file-size", "9223372036854775807"),
    ("--cq-file-size", "20"),
    ("--profile", "5.3"),
    ("--profile", "4.9"),
)

HOSTILE_TEXT = ("²", "１２", "9" * 5000, "\x1b[31mred\n", "a\nb", "", " ", "..", "-1", "1e400")


def commands(store: Path, out: Path, probe: Probe, rng: random.Random) -> list[list[str]]:
    """Every command on ``store`` (``out``: a fresh recover --out directory per run)."""
    s = str(store)
    t = probe.topic
    text = rng.choice(HOSTILE_TEXT)
    return [
        ["info", s],
        ["messages", s],
        ["messages", s, "--topic", t, "--since", str(probe.timestamp), "--body", "hex"],
        ["consumequeue", s, t, str(probe.queue_id), "--all", "--body", "text"],
        ["index", s, "--entries", "--limit", "500"],
        ["checkpoint", s],
        ["offsets", s],
        ["lookup", s, "--msg-id", probe.msg_id],
        ["lookup", s, "--uniq-key", probe.uniq_key],
        ["lookup", s, "--key", probe.key, "--topic", t],
        ["lookup", s, "--key", probe.key, "--topic", t, "--as-recovered"],
        ["lookup", s, "--queue-offset", f"{t}:{probe.queue_id}:1"],
        ["lookup", s, "--physical-offset", str(probe.phy_offset)],
        ["lookup", s, "--until", str(probe.timestamp + 5000), "--topic", t],
        ["recover", s],
        ["recover", s, "--out", str(out)],
        ["verify", s, "--hexdump"],
        ["salvage", s, "--out", str(out.with_name(out.name + "-salvage"))],
        ["export", s, str(out.with_name(out.name + "-export")), "--engine", "arrow", "--jobs", "1"],
        ["decode-id", probe.msg_id, "--reference", text],
        ["messages", s, "--until", text, "--topic", text],
    ]


# --- evidence ------------------------------------------------------------------------------------


def _extents_digest(path: Path) -> str:
    """SHA-256 of (offset, bytes) of every data extent: holes cost nothing to digest."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            h.update(start.to_bytes(8, "big"))
            at = start
            while at < end:
                chunk = os.pread(fd, min(1 << 22, end - at), at)
                if not chunk:
                    break
                h.update(chunk)
                at += len(chunk)
            pos = end
    finally:
        os.close(fd)
    return h.hexdigest()


def digest_tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root`` without following symlinks: kind, size, mtime and content."""
    state: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, names in os.walk(root):
        for n in [*dirnames, *names]:
            p = Path(dirpath) / n
            st = os.lstat(p)
            key = str(p.relative_to(root))
            if stat.S_ISREG(st.st_mode):
                state[key] = ("file", st.st_size, st.st_mtime_ns, _extents_digest(p))
            elif stat.S_ISLNK(st.st_mode):
                state[key] = ("link", os.readlink(p), st.st_mtime_ns)
            elif stat.S_ISDIR(st.st_mode):
                state[key] = ("dir", st.st_mtime_ns)
            else:
                state[key] = ("other", stat.S_IFMT(st.st_mode), st.st_mtime_ns)
    return state


# --- running -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    store: int
    args: list[str]
    code: int | None = None  # exit status; None: killed by a signal or the timeout
    signal: int | None = None
    seconds: float = 0.0
    max_rss: int = 0
    stderr: str = ""
    stdout_json_ok: bool | None = None
    timed_out: bool = False
    json_expected: bool = False


def _child(args: list[str], out: Path, err: Path) -> None:
    """In the forked child: limits, redirections, then the CLI as ``python -m rmqinspect``."""
    code = 71
    try:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))
        for fd, path in ((1, out), (2, err)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        os.environ["RMQINSPECT_DEBUG"] = "1"
        os.environ["COLUMNS"] = "160"
        sys.argv = ["rmqinspect", *args]
        try:
            app(args=args, prog_name="rmqinspect")
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 70
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def run_all(runs: list[Run], tmp: Path, jobs: int, timeout: float) -> None:
    pending = list(enumerate(runs))
    running: dict[int, tuple[int, float]] = {}
    while pending or running:
        while pending and len(running) < jobs:
            i, run = pending.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(run.args, tmp / f"{i}.out", tmp / f"{i}.err")
            running[pid] = (i, time.monotonic())
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for child, (i, started) in list(running.items()):
                if now - started > timeout and not runs[i].timed_out:
                    runs[i].timed_out = True
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child, signal.SIGKILL)
            time.sleep(0.005)
            continue
        i, started = running.pop(pid)
        run = runs[i]
        run.seconds = time.monotonic() - started
        run.max_rss = usage.ru_maxrss * 1024
        if os.WIFEXITED(status):
            run.code = os.WEXITSTATUS(status)
        elif not run.timed_out:
            run.signal = os.WTERMSIG(status)
        err = (tmp / f"{i}.err").read_text("utf-8", "replace")
        run.stderr = err[:200_000]
        out = tmp / f"{i}.out"
        if run.json_expected and run.code in (0, 1) and out.stat().st_size < 200 << 20:
            try:
                json.loads(out.read_bytes())
                run.stdout_json_ok = True
            except ValueError:
                run.stdout_json_ok = False
        for p in (out, tmp / f"{i}.err"):
            p.unlink(missing_ok=True)


# With RMQINSPECT_DEBUG=1 bad input re-raises as these: the one-line errors of a normal run.
EXPECTED_ERRORS = ("rmqinspect.errors.StoreError: ", "rmqinspect.errors.DecodeError: ")


def _expected_error(stderr: str) -> bool:
    """The last traceback ends in a bad-input error (its message may span lines)."""
    last = stderr[stderr.rfind(TRACEBACK) :] if TRACEBACK in stderr else ""
    return any(f"\n{prefix}" in last for prefix in EXPECTED_ERRORS)


def classify(run: Run) -> list[str]:
    kinds = []
    if run.timed_out:
        kinds.append("hang")
    if (TRACEBACK in run.stderr or run.code == 70) and not _expected_error(run.stderr):
        kinds.append("traceback")
    if run.signal is not None:
        kinds.append(f"signal {signal.Signals(run.signal).name}")
    if run.code not in (None, 0, 1, 2, 70):
        kinds.append(f"exit {run.code}")
    if run.max_rss > RSS_LIMIT:
        kinds.append("memory")
    if run.code == 2 and TRACEBACK not in run.stderr and not _expected_error(run.stderr):
        errors = [ln for ln in run.stderr.splitlines() if not ln.startswith("rmqinspect: warning")]
        if len(errors) != 1 or not errors[0].startswith("rmqinspect: error: "):
            kinds.append("not one line")
    if run.stdout_json_ok is False:
        kinds.append("bad json")
    return kinds


def build_store(i: int, seed: int, base_list: list[Path], stores: Path) -> tuple[Path, str, Path]:
    rng = random.Random(seed * 1_000_003 + i)
    base = rng.choice(base_list)
    dest = stores / f"{i:04d}"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(base, dest, symlinks=True)
    for dirpath, _, names in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for n in names:
            p = Path(dirpath) / n
            if not p.is_symlink():
                os.chmod(p, 0o644)
    done = []
    for _ in range(rng.randint(1, 3)):
        mutate = rng.choice(MUTATIONS)
        try:
            done.append(mutate(dest, rng))
        except OSError as err:
            done.append(f"{mutate.__name__} failed: {err}")
    return dest, f"{base.name}: " + "; ".join(done), base


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stores", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--only", type=int, nargs="*", help="build and run only these stores")
    parser.add_argument("--keep", action="store_true", help="keep the mutated stores")
    parser.add_argument("--verify", action="store_true", help="re-run failures in fresh processes")
    ns = parser.parse_args()

    workdir = ns.workdir or Path(tempfile.mkdtemp(prefix="rmqinspect-campaign-"))
    workdir.mkdir(parents=True, exist_ok=True)
    stores_dir, out_dir, tmp = workdir / "stores", workdir / "out", workdir / "tmp"
    for d in (stores_dir, out_dir, tmp):
        d.mkdir(exist_ok=True)
    base_list = bases(workdir)
    probes: dict[Path, Probe] = {}
    indices = ns.only if ns.only else list(range(ns.stores))
    started = time.monotonic()
    runs: list[Run] = []
    described: dict[int, str] = {}
    evidence: list[str] = []
    per_store = 0
    for i in indices:
        store, description, base = build_store(i, ns.seed, base_list, stores_dir)
        described[i] = description
        probe = probes.setdefault(base, _probe(base))
        rng = random.Random(ns.seed * 7_000_003 + i)
        options = list(rng.choice(OPTION_SETS))
        before = digest_tree(store)
        store_runs = []
        for n, args in enumerate(commands(store, out_dir / f"{i:04d}-{{n}}", probe, rng)):
            args = [a.replace("{n}", str(n)) for a in args]
            fmt = rng.choice(("json", "json", "table", "jsonl"))
            full = [*args, *(options if args[0] not in ("decode-id", "checkpoint") else [])]
            full += ["--format", fmt]
            store_runs.append(Run(i, full, json_expected=fmt == "json"))
        run_all(store_runs, tmp, ns.jobs, ns.timeout)
        runs.extend(store_runs)
        per_store = len(store_runs)
        after = digest_tree(store)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            evidence.append(f"store {i}: {changed[:5]}")
        for p in out_dir.iterdir():
            shutil.rmtree(p, ignore_errors=True)
        if not ns.keep:
            shutil.rmtree(store, ignore_errors=True)
        print(f"store {i:4d}: {description}", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started

    failures = [(run, classify(run)) for run in runs]
    failures = [(run, kinds) for run, kinds in failures if kinds]
    counts = Counter(
        k.split(" ")[0] if k.startswith("signal") else k for _, ks in failures for k in ks
    )
    print(
        f"seed {ns.seed}: {len(indices)} stores, {len(runs)} runs ({per_store} per store), "
        f"{elapsed:.0f} s, {ns.jobs} jobs, timeout {ns.timeout:.0f} s"
    )
    print(f"commands: {dict(Counter(r.args[0] for r in runs))}")
    print(
        f"tracebacks {counts['traceback']}, signals {counts['signal']}, hangs {counts['hang']}, "
        f"above 2 GiB {counts['memory']}, evidence changed {len(evidence)}, "
        f"not one line {counts['not one line']}, bad json {counts['bad json']}"
    )
    slowest = max(runs, key=lambda r: r.seconds, default=None)
    biggest = max(runs, key=lambda r: r.max_rss, default=None)
    if slowest is not None and biggest is not None:
        print(
            f"slowest run {slowest.seconds:.1f} s (store {slowest.store}: {slowest.args[:2]}); "
            f"peak RSS {biggest.max_rss / GIB:.2f} GiB (store {biggest.store}: {biggest.args[:2]})"
        )
    for line in evidence:
        print(f"EVIDENCE {line}")
    for run, kinds in failures:
        last = (run.stderr.strip().splitlines()[-1:] or [""])[0][:200]
        command = " ".join(_quote(a) for a in run.args)
        print(
            f"FAIL [{', '.join(kinds)}] store {run.store} ({described[run.store]}) :: "
            f"RMQINSPECT_DEBUG=1 rmqinspect {command} :: {last}"
        )
        if ns.verify and ns.keep:
            _verify(run, ns.timeout)
    print(
        f"rebuild a store: python benchmarks/campaign.py --seed {ns.seed} --only N --keep "
        f"--workdir {workdir}"
    )
    return 1 if failures or evidence else 0


def _quote(a: str) -> str:
    if len(a) > 80:
        return f'"$(python3 -c \'print({a[:1]!r} * {len(a)}, end="")\')"'
    return a if a and all(c.isalnum() or c in "-_./:,+=%@" for c in a) else repr(a)


def _verify(run: Run, timeout: float) -> None:
    env = dict(os.environ, RMQINSPECT_DEBUG="1")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "rmqinspect", *run.args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
        again = "traceback" if TRACEBACK in proc.stderr else f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        again = "hang"
    print(f"    fresh process: {again}")


if __name__ == "__main__":
    sys.exit(main())
