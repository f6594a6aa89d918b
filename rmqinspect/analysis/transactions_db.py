"""Where ``transactions`` keeps what it has read: every half copy, op, commit, rollback and
given-up record, every transaction and every finding is a row of the analysis's scratch database
(:mod:`rmqinspect.analysis.scratch`: on disk, outside the store, its page cache and sorts
bounded), so this process holds no entry per record or per transaction. The links the rules
make (a UNIQ_KEY's first half, the last half read at an op's queue offset or at a commit's
``preparedTransactionOffset``) are joins; the transactions and the findings come back in their
order from ordered tables, one at a time, as often as they are read (:class:`TransactionList`,
:class:`TxFindings`). Topic and producer group names are few: kept once each, in memory.

The rules themselves, and the findings' words, live in :mod:`rmqinspect.analysis.transactions`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from rmqinspect.analysis.scratch import Scratch
from rmqinspect.analysis.transactions_model import FindingKind, HalfCopy, Transaction, TxFinding

_KIND_RANK = {k: i for i, k in enumerate(sorted(FindingKind, key=lambda k: k.value))}
_BATCH = 256  # rows a call to executemany inserts (held until then: a bounded few)
_OP, _COMMIT, _ROLLBACK = 0, 1, 2  # link kinds, in the order a transaction lists them
# SQLite's page cache, and so its sorter's run, for this analysis: both fill by a 2 GB store
# with 16 MiB (scratch's default), the peak RSS then 11 MiB higher at 8 GB than at 2; with
# 4 MiB the 8 GB store's transactions took no more CPU (20.0 against 22.7 s).
_CACHE_KIB = 4 << 10

_SCHEMA = """
CREATE TABLE half(seq INTEGER PRIMARY KEY, key TEXT NOT NULL, uniq_key TEXT, position INT,
    queue_id INT, queue_offset INT, store_timestamp INT, check_times INT, topic INT,
    real_qid INT, grp INT, tx INT);
CREATE TABLE op(seq INTEGER PRIMARY KEY, position INT, queue_id INT, queue_offset INT,
    text_offset TEXT, tx INT);
CREATE TABLE tcommit(seq INTEGER PRIMARY KEY, position INT, prepared INT, queue_id INT,
    topic INT, uniq_key TEXT, tx INT);
CREATE TABLE rollback(seq INTEGER PRIMARY KEY, position INT, prepared INT, tx INT);
CREATE TABLE given_up(seq INTEGER PRIMARY KEY, position INT, uniq_key TEXT, topic INT,
    real_qid INT, grp INT, check_times INT, tx INT);
CREATE TABLE tx(id INTEGER PRIMARY KEY, key TEXT NOT NULL, uniq_key TEXT, topic INT,
    real_qid INT, grp INT, check_times INT, given_up INT, first INT);
CREATE TABLE link(seq INTEGER PRIMARY KEY, kind INT, tx INT, position INT);
CREATE TABLE finding(seq INTEGER PRIMARY KEY, position INT, rank INT, kind TEXT,
    uniq_key TEXT, detail TEXT);
"""

_INSERT = {
    "half": "INSERT INTO half(key, uniq_key, position, queue_id, queue_offset, store_timestamp,"
    " check_times, topic, real_qid, grp) VALUES (?,?,?,?,?,?,?,?,?,?)",
    "op": "INSERT INTO op(position, queue_id, queue_offset, text_offset) VALUES (?,?,?,?)",
    "tcommit": "INSERT INTO tcommit(position, prepared, queue_id, topic, uniq_key)"
    " VALUES (?,?,?,?,?)",
    "rollback": "INSERT INTO rollback(position, prepared) VALUES (?,?)",
    "given_up": "INSERT INTO given_up(position, uniq_key, topic, real_qid, grp, check_times)"
    " VALUES (?,?,?,?,?,?)",
    "finding": "INSERT INTO finding(position, rank, kind, uniq_key, detail) VALUES (?,?,?,?,?)",
}

# The link step, in SQL. A UNIQ_KEY's transaction is made by its first half read (the check's
# copies keep the original's properties, ``renewHalfMessageInner``), in the order first met.
_LINK_HALVES = """
CREATE INDEX half_at ON half(position);
CREATE INDEX half_queue ON half(queue_id, queue_offset);
INSERT INTO tx(key, uniq_key, topic, real_qid, grp, check_times, first)
    SELECT key, uniq_key, topic, real_qid, grp, 0, position FROM half
    WHERE seq IN (SELECT MIN(seq) FROM half GROUP BY key) ORDER BY seq;
CREATE INDEX tx_key ON tx(key);
UPDATE half SET tx = (SELECT id FROM tx WHERE tx.key = half.key);
"""
# ``resolveDiscardMsg`` copies the half's properties: the UNIQ_KEY links a given-up record.
# One whose half is gone (retention) makes a transaction of its own, in given-up order, that
# later given-up records of its UNIQ_KEY join; each transaction keeps the last one's position.
# A key names the transaction made last with it, as a dict of keys filled in this order would.
_LINK_GIVEN_UP = """
CREATE INDEX given_up_key ON given_up(uniq_key);
UPDATE given_up SET tx = (SELECT id FROM tx WHERE tx.key = given_up.uniq_key)
    WHERE uniq_key IS NOT NULL;
INSERT INTO tx(key, uniq_key, topic, real_qid, grp, check_times, first)
    SELECT COALESCE(uniq_key, '@' || position), uniq_key, topic, real_qid, grp, check_times, -1
    FROM given_up g WHERE tx IS NULL AND (uniq_key IS NULL OR seq = (
        SELECT MIN(seq) FROM given_up o WHERE o.uniq_key = g.uniq_key))
    ORDER BY seq;
UPDATE given_up SET tx = (SELECT id FROM tx WHERE tx.key = COALESCE(given_up.uniq_key,
    '@' || given_up.position) ORDER BY id DESC LIMIT 1) WHERE tx IS NULL;
CREATE INDEX given_up_tx ON given_up(tx, seq);
UPDATE tx SET given_up = (SELECT position FROM given_up WHERE given_up.tx = tx.id
    ORDER BY seq DESC LIMIT 1) WHERE id IN (SELECT tx FROM given_up);
"""
# Where several half copies share a queue offset or a position, the last read has it.
_LINK_RECORDS = """
UPDATE op SET tx = (SELECT tx FROM half WHERE half.queue_id = op.queue_id
    AND half.queue_offset = op.queue_offset ORDER BY seq DESC LIMIT 1)
    WHERE queue_offset >= 0;
UPDATE tcommit SET tx = (SELECT tx FROM half WHERE half.position = tcommit.prepared
    ORDER BY seq DESC LIMIT 1);
UPDATE rollback SET tx = (SELECT tx FROM half WHERE half.position = rollback.prepared
    ORDER BY seq DESC LIMIT 1);
INSERT INTO link(kind, tx, position) SELECT 0, tx, position FROM op
    WHERE tx IS NOT NULL ORDER BY seq;
INSERT INTO link(kind, tx, position) SELECT 1, tx, position FROM tcommit
    WHERE tx IS NOT NULL ORDER BY seq;
INSERT INTO link(kind, tx, position) SELECT 2, tx, position FROM rollback
    WHERE tx IS NOT NULL ORDER BY seq;
"""
# The transactions in their order (by their first half's position, those without a half first,
# ties in the order first met), and each one's halves (in the order read) and links (in the
# order linked) in tables clustered by that order, so that reading them is a merge of scans.
_ORDER = """
CREATE TABLE txo(ord INTEGER PRIMARY KEY, id INT, uniq_key TEXT, topic INT, real_qid INT,
    grp INT, check_times INT, given_up INT);
INSERT INTO txo(id, uniq_key, topic, real_qid, grp, check_times, given_up)
    SELECT id, uniq_key, topic, real_qid, grp, check_times, given_up FROM tx ORDER BY first, id;
CREATE TABLE txmap(id INTEGER PRIMARY KEY, ord INT);
INSERT INTO txmap SELECT id, ord FROM txo;
CREATE TABLE halfo(ord INT, seq INT, position INT, queue_id INT, queue_offset INT,
    store_timestamp INT, check_times INT, PRIMARY KEY (ord, seq)) WITHOUT ROWID;
INSERT INTO halfo SELECT m.ord, h.seq, h.position, h.queue_id, h.queue_offset,
    h.store_timestamp, h.check_times FROM half h JOIN txmap m ON m.id = h.tx ORDER BY 1, 2;
CREATE TABLE linko(ord INT, kind INT, seq INT, position INT,
    PRIMARY KEY (ord, kind, seq)) WITHOUT ROWID;
INSERT INTO linko SELECT m.ord, l.kind, l.seq, l.position FROM link l
    JOIN txmap m ON m.id = l.tx ORDER BY 1, 2, 3;
DROP TABLE txmap;
DROP TABLE link;
"""


class FindingSink(Protocol):
    def append(self, f: TxFinding, /) -> None: ...


class _Discard:
    """Where findings go when transactions are made again for their output: the first making
    kept them."""

    def append(self, f: TxFinding, /) -> None:
        """Dropped: the report holds this finding already."""


class TxDb:
    """The rows of one ``transactions`` run, appended as the walk reads them and linked once
    it is done (:meth:`link`)."""

    def __init__(self) -> None:
        self.scratch = Scratch(_CACHE_KIB)
        self.db = self.scratch.db
        self.db.executescript(_SCHEMA)
        self._pending: dict[str, list[tuple[Any, ...]]] = {t: [] for t in _INSERT}
        self._name_ids: dict[str, int] = {}
        self.names: list[str] = []  # a topic or group id's name
        self.kinds: Counter[FindingKind] = Counter()
        self.half_records = self.op_records = self.commit_records = 0
        self.rollback_records = self.given_up_records = 0

    def close(self) -> None:
        self.scratch.close()

    def name_id(self, name: str | None) -> int | None:
        if name is None:
            return None
        found = self._name_ids.get(name)
        if found is None:
            found = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return found

    def name(self, name_id: int | None) -> str | None:
        return None if name_id is None else self.names[name_id]

    def _add(self, table: str, row: tuple[Any, ...]) -> None:
        rows = self._pending[table]
        rows.append(row)
        if len(rows) >= _BATCH:
            self._flush(table)

    def _flush(self, table: str) -> None:
        rows = self._pending[table]
        if rows:
            self.db.execute("BEGIN")
            self.db.executemany(_INSERT[table], rows)
            self.db.execute("COMMIT")
            rows.clear()

    def flush(self) -> None:
        for table in _INSERT:
            self._flush(table)

    def append(self, f: TxFinding, /) -> None:
        """A finding (the report's sink), kept in the order made."""
        self.kinds[f.kind] += 1
        self._add("finding", (f.position, _KIND_RANK[f.kind], f.kind.value, f.uniq_key, f.detail))

    def add_half(
        self,
        uniq_key: str | None,
        copy: HalfCopy,
        real_topic: str | None,
        real_queue_id: int | None,
        producer_group: str | None,
    ) -> None:
        self.half_records += 1
        key = uniq_key if uniq_key is not None else f"@{copy.position}"
        self._add(
            "half",
            (
                key,
                uniq_key,
                copy.position,
                copy.queue_id,
                copy.queue_offset,
                copy.store_timestamp,
                copy.check_times,
                self.name_id(real_topic),
                real_queue_id,
                self.name_id(producer_group),
            ),
        )

    def add_op_offset(self, position: int, queue_id: int, offset: int) -> None:
        """One offset an op record's body names; one past a long's range (decimal text can say
        anything) is kept as text and names no half."""
        large = offset >= 2**63
        self._add(
            "op", (position, queue_id, None if large else offset, str(offset) if large else None)
        )

    def add_commit(
        self, position: int, prepared: int, queue_id: int, topic: str, uniq_key: str | None
    ) -> None:
        self.commit_records += 1
        self._add("tcommit", (position, prepared, queue_id, self.name_id(topic), uniq_key))

    def add_rollback(self, position: int, prepared: int) -> None:
        self.rollback_records += 1
        self._add("rollback", (position, prepared))

    def add_given_up(
        self,
        position: int,
        uniq_key: str | None,
        real_topic: str | None,
        real_queue_id: int | None,
        producer_group: str | None,
        check_times: int,
    ) -> None:
        self.given_up_records += 1
        row = (position, uniq_key, self.name_id(real_topic), real_queue_id)
        self._add("given_up", (*row, self.name_id(producer_group), check_times))

    def link_halves(self) -> Iterator[tuple[int, str | None]]:
        """Make the transactions of the halves and given-up records; yields (position, UNIQ_KEY)
        of each transaction whose first half has no REAL_TOPIC, in the order made."""
        self.flush()
        self.db.executescript(_LINK_HALVES + _LINK_GIVEN_UP)
        yield from self.db.execute(
            "SELECT first, uniq_key FROM tx WHERE first >= 0 AND topic IS NULL ORDER BY id"
        )

    def queue0_range(self) -> tuple[int, int] | None:
        """The least and greatest half-queue 0 offset of a half read."""
        low, high = self.db.execute(
            "SELECT MIN(queue_offset), MAX(queue_offset) FROM half WHERE queue_id = 0"
        ).fetchone()
        return None if low is None else (low, high)

    def link_records(self) -> None:
        self.db.executescript(_LINK_RECORDS)

    def unlinked_ops(self) -> Iterator[tuple[int, int, int]]:
        """(position, queue id, offset) of each op offset no half has, in the order read."""
        rows = self.db.execute(
            "SELECT position, queue_id, COALESCE(queue_offset, text_offset) FROM op"
            " WHERE tx IS NULL ORDER BY seq"
        )
        for position, queue_id, offset in rows:
            yield position, queue_id, int(offset)

    def odd_commits(self) -> Iterator[tuple[int, int, str | None, int, str | None, Any]]:
        """Each commit record that names no half, or another topic or queue than its half's,
        in the order read: (position, preparedTransactionOffset, topic, queue id, UNIQ_KEY,
        None or its transaction's (UNIQ_KEY, real topic, real queue id))."""
        rows = self.db.execute(
            "SELECT c.position, c.prepared, c.topic, c.queue_id, c.uniq_key, c.tx, t.uniq_key,"
            " t.topic, t.real_qid FROM tcommit c LEFT JOIN tx t ON t.id = c.tx"
            " WHERE c.tx IS NULL OR t.topic IS NOT c.topic OR t.real_qid IS NOT c.queue_id"
            " ORDER BY c.seq"
        )
        for position, prepared, topic, qid, key, tx, tx_key, real_topic, real_qid in rows:
            half = None if tx is None else (tx_key, self.name(real_topic), real_qid)
            yield position, prepared, self.name(topic), qid, key, half

    def order(self, judge: Callable[[Transaction, FindingSink], None]) -> TransactionList:
        """The transactions in their order (after the last link)."""
        self.db.executescript(_ORDER)
        (n,) = self.db.execute("SELECT COUNT(*) FROM txo").fetchone()
        return TransactionList(self, n, judge)

    def findings(self) -> TxFindings:
        """The findings, once every one is made."""
        self.flush()
        self.db.execute("CREATE INDEX finding_order ON finding(position, rank)")
        return TxFindings(self, self.kinds)


class TransactionList:
    """The transactions, sorted by their first half's position (those without one first), made
    from the database's rows as they are iterated and judged by ``judge`` each time."""

    def __init__(
        self, store: TxDb, n: int, judge: Callable[[Transaction, FindingSink], None]
    ) -> None:
        self._store, self._n, self._judge = store, n, judge

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self) -> Iterator[Transaction]:
        return self.each(_Discard())

    def each(self, findings: FindingSink) -> Iterator[Transaction]:
        """The transactions in their order, the judge's findings to ``findings``."""
        s = self._store
        db = s.db
        halves = db.execute(
            "SELECT ord, position, queue_id, queue_offset, store_timestamp, check_times"
            " FROM halfo ORDER BY ord, seq"
        )
        links = db.execute("SELECT ord, kind, position FROM linko ORDER BY ord, kind, seq")
        h, link = next(halves, None), next(links, None)
        txs = db.execute(
            "SELECT ord, uniq_key, topic, real_qid, grp, check_times, given_up FROM txo"
            " ORDER BY ord"
        )
        for ord_, uniq_key, topic, real_qid, grp, check_times, given_up in txs:
            copies: list[HalfCopy] = []
            while h is not None and h[0] == ord_:
                copies.append(HalfCopy(h[1], h[2], h[3], h[4], h[5]))
                h = next(halves, None)
            positions: tuple[list[int], list[int], list[int]] = ([], [], [])
            while link is not None and link[0] == ord_:
                positions[link[1]].append(link[2])
                link = next(links, None)
            tx = Transaction(
                uniq_key,
                s.name(topic),
                real_qid,
                s.name(grp),
                halves=copies,
                check_times=max([check_times, *(x.check_times for x in copies)]),
                op_positions=positions[_OP],
                commit_positions=positions[_COMMIT],
                rollback_positions=positions[_ROLLBACK],
                given_up_position=given_up,
            )
            self._judge(tx, findings)
            yield tx


class TxFindings:
    """The findings by (position, kind), those equal in the order they were made, read from the
    database each time they are iterated."""

    def __init__(self, store: TxDb, kinds: Counter[FindingKind]) -> None:
        self._store, self._kinds = store, kinds
        self._n = sum(kinds.values())

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def count(self, kinds: Iterable[FindingKind]) -> int:
        return sum(self._kinds[k] for k in kinds)

    def __iter__(self) -> Iterator[TxFinding]:
        rows = self._store.db.execute(
            "SELECT kind, position, uniq_key, detail FROM finding ORDER BY position, rank, seq"
        )
        for kind, position, uniq_key, detail in rows:
            yield TxFinding(FindingKind(kind), position, uniq_key, detail)
