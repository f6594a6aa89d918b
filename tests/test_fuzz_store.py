"""The store model and every analysis over mutated store directories (a bounded hypothesis run;
``benchmarks/campaign.py`` runs the CLI over hundreds of such stores).

Each example copies a fixture store, applies a few hostile changes to its files and directory
entries, then opens it and runs every analysis the commands run. Only the documented bad-input
errors (:class:`StoreError`, :class:`DecodeError`) may come out, and the copy is left as the
changes made it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqinspect.analysis.indexes import index_reports, iter_entries
from rmqinspect.analysis.inventory import build_inventory
from rmqinspect.analysis.lookup import KeyQuery, lookup_key, lookup_msg_id, lookup_time
from rmqinspect.analysis.messages import MessageFilter, stream_messages
from rmqinspect.analysis.offsets import offsets_report
from rmqinspect.analysis.queue_listing import list_units, queue_listing
from rmqinspect.analysis.recovery import (
    ApplyRefused,
    RecoverOptions,
    apply_recovery,
    run_recovery,
)
from rmqinspect.analysis.verify import verify_store
from rmqinspect.errors import DecodeError, StoreError
from rmqinspect.store.model import Store, StoreOptions
from tests.conftest import FIXTURES

BASES = ("clean49", "crash49", "crash53", "retention49")
OPTIONS = StoreOptions(index_slot_num=64, index_num=400)
GIB = 1 << 30
# Bad input (one line at the CLI), and --apply-to on a store the broker would refuse.
DOCUMENTED = (StoreError, DecodeError, ApplyRefused)

change = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("word"), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.integers(0, 70_000)),
    st.tuples(st.just("sparse"), st.integers(0, 10**6), st.sampled_from([1 << 20, 64 * GIB])),
    st.tuples(st.just("replace"), st.integers(0, 10**6), st.integers(0, 4)),
    st.tuples(st.just("rename"), st.integers(0, 10**6), st.integers(0, 4)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.just(0)),
)
NAMES = ("x", "9223372036854775807", "０" * 20, "00000000000000000001", "a\nb")
WORDS = (0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 91)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _apply(root: Path, kind: str, which: int, value: int) -> None:
    files = _files(root)
    if not files:
        return
    path = files[which % len(files)]
    size = path.stat().st_size
    if kind in ("flip", "word") and size:
        with open(path, "r+b") as fh:
            fh.seek(value % size)
            if kind == "flip":
                byte = fh.read(1)[0]
                fh.seek(value % size)
                fh.write(bytes([byte ^ 0x5A]))
            else:
                fh.write(WORDS[value % len(WORDS)].to_bytes(4, "big"))
    elif kind == "truncate":
        os.truncate(path, value % (size + 1))
    elif kind == "sparse":
        os.truncate(path, size + value)
    elif kind == "replace":
        path.unlink()
        if value == 0:
            os.mkfifo(path)
        elif value == 1:
            path.mkdir()
        elif value == 2:
            path.symlink_to(path.name)
        elif value == 3:
            path.symlink_to("/dev/zero")
        else:
            path.symlink_to(Path(__file__))
    elif kind == "rename":
        with contextlib.suppress(OSError):
            path.rename(path.with_name(NAMES[value]))
    elif kind == "delete":
        path.unlink()


def _digest(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        st_ = os.lstat(path)
        key = str(path.relative_to(root))
        if path.is_file() and not path.is_symlink() and st_.st_size < 1 << 24:
            out[key] = (st_.st_size, st_.st_mtime_ns, hashlib.sha256(path.read_bytes()).digest())
        else:
            out[key] = (st_.st_mode, st_.st_size, st_.st_mtime_ns)
    return out


def _analyses(root: Path, out: Path) -> None:
    """What the commands run, each allowed to fail only with a bad-input error."""
    with Store.open(root, OPTIONS) as store:
        steps = [
            lambda: build_inventory(store),
            lambda: list(stream_messages(store, MessageFilter(limit=500))),
            lambda: offsets_report(store),
            lambda: [list(iter_entries(store, r.info))[:50] for r in index_reports(store)],
            lambda: run_recovery(store, RecoverOptions(lost_limit=20)),
            lambda: apply_recovery(store, out, RecoverOptions(lost_limit=0)),
            lambda: lookup_key(store, KeyQuery("KA-0", ("TopicA",), False, 64)),
            lambda: lookup_msg_id(store, "0A01020300002A9F000000000000792E"),
            lambda: lookup_time(store, "TopicA", 0, 1 << 62, limit=20),
            lambda: verify_store(store),
        ]
        for qid in list(store.queue_dirs)[:2]:
            steps.append(
                lambda qid=qid: list(
                    list_units(
                        store,
                        queue_listing(store, qid.topic, qid.queue_id, None, True),
                        qid.topic,
                        qid.queue_id,
                        200,
                    )
                )
            )
        for step in steps:
            with contextlib.suppress(*DOCUMENTED):
                step()


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(base=st.sampled_from(BASES), changes=st.lists(change, min_size=1, max_size=3))
def test_every_analysis_survives_a_mutated_store(
    base: str, changes: list[tuple[str, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        shutil.copytree(FIXTURES / "stores" / base, root)
        for kind, which, value in changes:
            _apply(root, kind, which, value)
        before = _digest(root)
        with contextlib.suppress(*DOCUMENTED):  # Store.open refused it: one line at the CLI
            _analyses(root, Path(tmp) / "out")
        assert _digest(root) == before
