"""Where ``transactions`` keeps what it has read, in memory that does not grow with the store's
records by more than a few words each: the half copies, op, commit and rollback links as arrays
of numbers, each transaction as an index into per-transaction columns, and the findings (with
their text) in a temporary file outside the store. Transactions and findings are made again, one
at a time, as they are read (:class:`TransactionList`, :class:`TxFindings`): as objects, a 2 GB
crashed synth store's 34,000 transactions took 1.1 KB each and its 58,000 findings their text."""

from __future__ import annotations

import os
import tempfile
import weakref
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Protocol

import numpy as np
import orjson

from rmqinspect.analysis.transactions_model import FindingKind, HalfCopy, Transaction, TxFinding

NONE = -(2**63)  # an absent int (REAL_QID, the given-up position) in an int64 column
_KIND_RANK = {k: i for i, k in enumerate(sorted(FindingKind, key=lambda k: k.value))}


class FindingSink(Protocol):
    def append(self, f: TxFinding, /) -> None: ...


class _Discard:
    """Where findings go when transactions are made again for their output: the first making
    kept them."""

    def append(self, f: TxFinding, /) -> None:
        """Dropped: the report holds this finding already."""


class FindingSpill:
    """Findings as they are made, written to a temporary file (the system's temporary directory,
    unlinked at once: never inside the store); only their sort keys stay in memory."""

    def __init__(self) -> None:
        # Open as long as the report's findings are read (closed by TxFindings' finalizer).
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="rmqinspect-tx-")  # noqa: SIM115
        self._position = array("q")
        self._rank = array("b")
        self._at = array("q")
        self._end = 0
        self._kinds: Counter[FindingKind] = Counter()

    def append(self, f: TxFinding, /) -> None:
        data = orjson.dumps((f.kind.value, f.position, f.uniq_key, f.detail))
        self._file.write(data)
        self._position.append(f.position)
        self._rank.append(_KIND_RANK[f.kind])
        self._at.append(self._end)
        self._end += len(data)
        self._kinds[f.kind] += 1

    def close(self) -> None:
        self._file.close()

    def sorted(self) -> TxFindings:
        """By (position, kind), those equal in the order they were made, as a sort of the
        objects ordered them."""
        self._file.flush()
        position = np.frombuffer(self._position, dtype=np.int64)
        order = np.lexsort((np.frombuffer(self._rank, dtype=np.int8), position))
        at = np.frombuffer(self._at, dtype=np.int64)
        ends = np.append(at[1:], self._end) if len(at) else at
        return TxFindings(self._file, at[order], ends[order], self._kinds)


class TxFindings:
    """The findings in their order, read from the spill file each time they are iterated."""

    def __init__(
        self, file: IO[bytes], starts: np.ndarray, ends: np.ndarray, kinds: Counter[FindingKind]
    ) -> None:
        self._file, self._starts, self._ends, self._kinds = file, starts, ends, kinds
        # Closed (and so gone: it has no name) once the findings are no longer read.
        weakref.finalize(self, file.close)

    def __len__(self) -> int:
        return len(self._starts)

    def __bool__(self) -> bool:
        return len(self._starts) > 0

    def count(self, kinds: Iterable[FindingKind]) -> int:
        return sum(self._kinds[k] for k in kinds)

    def __iter__(self) -> Iterator[TxFinding]:
        fd = self._file.fileno()
        for start, end in zip(_ints(self._starts), _ints(self._ends), strict=True):
            kind, position, uniq_key, detail = orjson.loads(os.pread(fd, end - start, start))
            yield TxFinding(FindingKind(kind), position, uniq_key, detail)


def _ints(a: np.ndarray) -> Iterator[int]:
    """The elements as Python ints, a slice at a time (a list of them all grows with them)."""
    for at in range(0, len(a), 256):
        yield from a[at : at + 256].tolist()


def int64s(a: array[int]) -> np.ndarray:
    """An int64 column as numpy sees it, without a copy (the column may not grow while the view
    lives)."""
    return np.frombuffer(a, dtype=np.int64) if len(a) else np.empty(0, np.int64)


class Links:
    """Pairs (transaction, position) in the order they were linked, handed back per
    transaction in that order (op, commit and rollback positions)."""

    def __init__(self) -> None:
        self.tx = array("q")
        self.position = array("q")
        self._starts: np.ndarray | None = None
        self._values: np.ndarray | None = None

    def add(self, tx: int, position: int) -> None:
        self.tx.append(tx)
        self.position.append(position)

    def extend(self, txs: np.ndarray, positions: np.ndarray) -> None:
        self.tx.extend(txs.tolist())
        self.position.extend(positions.tolist())

    def __len__(self) -> int:
        return len(self.tx)

    def group(self, n_txs: int) -> None:
        """Index them by transaction (after the last :meth:`add`)."""
        tx = int64s(self.tx)
        order = np.argsort(tx, kind="stable")
        self._starts = np.searchsorted(tx[order], np.arange(n_txs + 1))
        self._values = int64s(self.position)[order]

    def of(self, tx: int) -> list[int]:
        assert self._starts is not None and self._values is not None
        values: list[int] = self._values[self._starts[tx] : self._starts[tx + 1]].tolist()
        return values


class Halves:
    """Every half copy read, in the walk's order, as columns; transactions are indexes."""

    def __init__(self) -> None:
        self.position = array("q")
        self.queue_id = array("q")
        self.queue_offset = array("q")
        self.store_timestamp = array("q")
        self.check_times = array("q")
        self.tx = array("q")
        self._ascending = True

    def add(self, copy: HalfCopy, tx: int) -> None:
        if self.position and copy.position <= self.position[-1]:
            self._ascending = False
        self.position.append(copy.position)
        self.queue_id.append(copy.queue_id)
        self.queue_offset.append(copy.queue_offset)
        self.store_timestamp.append(copy.store_timestamp)
        self.check_times.append(copy.check_times)
        self.tx.append(tx)

    def read_at(self, position: int) -> bool | None:
        """Whether a half read so far lies at ``position`` (None: not known cheaply, the walk
        was not in position order)."""
        if not self._ascending:
            return None
        pos = int64s(self.position)
        i = int(np.searchsorted(pos, position))
        return i < len(pos) and int(pos[i]) == position


class PositionIndex:
    """The transaction of the half copy at a physical offset, or of a half-queue (queue id,
    queue offset); where several copies share one, the last read, as a dict filled in the
    walk's order kept it."""

    def __init__(self, halves: Halves) -> None:
        pos = int64s(halves.position)
        order = np.argsort(pos, kind="stable")
        self._pos, self._pos_tx = pos[order], int64s(halves.tx)[order]
        qid, qoff, tx = int64s(halves.queue_id), int64s(halves.queue_offset), int64s(halves.tx)
        self._queues: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for q in np.unique(qid).tolist():
            mine = np.flatnonzero(qid == q)
            by_offset = mine[np.argsort(qoff[mine], kind="stable")]
            self._queues[q] = (qoff[by_offset], tx[by_offset])
        zero = self._queues.get(0)
        self.queue0_range = None if zero is None else (int(zero[0][0]), int(zero[0][-1]))

    @staticmethod
    def _last(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        i = np.searchsorted(keys, wanted, side="right") - 1
        found = (i >= 0) & (keys[np.maximum(i, 0)] == wanted) if len(keys) else i >= 0
        return np.where(found, values[np.maximum(i, 0)] if len(keys) else -1, -1)

    def by_position(self, positions: np.ndarray) -> np.ndarray:
        """Each position's transaction, -1 where no half lies there."""
        return self._last(self._pos, self._pos_tx, positions)

    def by_queue(self, queue_ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Each (queue id, offset)'s transaction, -1 where no half has it (offsets of -1: none
        could, too large for a queue offset)."""
        out = np.full(len(offsets), -1, dtype=np.int64)
        for q, (keys, txs) in self._queues.items():
            mine = np.flatnonzero((queue_ids == q) & (offsets >= 0))
            out[mine] = self._last(keys, txs, offsets[mine])
        return out


class TxColumns:
    """Per transaction (an index, in the order they were first met): UNIQ_KEY, real topic,
    real queue id, producer group, the check count it was made with, its given-up record."""

    def __init__(self) -> None:
        self.uniq_key: list[str | None] = []
        self.real_topic: list[str | None] = []
        self.producer_group: list[str | None] = []
        self.real_queue_id = array("q")
        self.check_times = array("q")
        self.given_up = array("q")

    def add(
        self,
        uniq_key: str | None,
        real_topic: str | None,
        real_queue_id: int | None,
        producer_group: str | None,
        check_times: int,
    ) -> int:
        self.uniq_key.append(uniq_key)
        self.real_topic.append(real_topic)
        self.producer_group.append(producer_group)
        self.real_queue_id.append(NONE if real_queue_id is None else real_queue_id)
        self.check_times.append(check_times)
        self.given_up.append(NONE)
        return len(self.uniq_key) - 1

    def real(self, tx: int) -> tuple[str | None, int | None]:
        qid = self.real_queue_id[tx]
        return self.real_topic[tx], None if qid == NONE else qid

    def __len__(self) -> int:
        return len(self.uniq_key)


class TransactionList:
    """The transactions, sorted by their first half's position (those without one first), made
    from the columns as they are iterated and judged by ``judge`` each time."""

    def __init__(
        self,
        cols: TxColumns,
        halves: Halves,
        links: tuple[Links, Links, Links],
        judge: Callable[[Transaction, FindingSink], None],
    ) -> None:
        n = len(cols)
        self._cols, self._judge = cols, judge
        self._ops, self._commits, self._rollbacks = links
        for group in links:
            group.group(n)
        tx = int64s(halves.tx)
        self._half_order = np.argsort(tx, kind="stable")
        self._half_starts = np.searchsorted(tx[self._half_order], np.arange(n + 1))
        self._halves = halves
        first = np.full(n, -1, dtype=np.int64)
        has = self._half_starts[1:] > self._half_starts[:-1]
        first[has] = int64s(halves.position)[self._half_order[self._half_starts[:-1][has]]]
        self._order = np.argsort(first, kind="stable")

    def __len__(self) -> int:
        return len(self._order)

    def __bool__(self) -> bool:
        return len(self._order) > 0

    def __iter__(self) -> Iterator[Transaction]:
        return self.each(_Discard())

    def each(self, findings: FindingSink) -> Iterator[Transaction]:
        """The transactions in their order, the judge's findings to ``findings``."""
        for i in _ints(self._order):
            yield self._made(i, findings)

    def _made(self, i: int, findings: FindingSink) -> Transaction:
        c, h = self._cols, self._halves
        real_topic, real_qid = c.real(i)
        rows = self._half_order[self._half_starts[i] : self._half_starts[i + 1]].tolist()
        copies = [
            HalfCopy(
                h.position[r],
                h.queue_id[r],
                h.queue_offset[r],
                h.store_timestamp[r],
                h.check_times[r],
            )
            for r in rows
        ]
        given_up = c.given_up[i]
        tx = Transaction(
            c.uniq_key[i],
            real_topic,
            real_qid,
            c.producer_group[i],
            halves=copies,
            check_times=max([c.check_times[i], *(x.check_times for x in copies)]),
            op_positions=self._ops.of(i),
            commit_positions=self._commits.of(i),
            rollback_positions=self._rollbacks.of(i),
            given_up_position=None if given_up == NONE else given_up,
        )
        self._judge(tx, findings)
        return tx
