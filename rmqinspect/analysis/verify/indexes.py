"""Index file checks: the header against the entries, the hash chains, and every entry against
the record it points to.

Geometry comes from :func:`~rmqinspect.analysis.indexes.open_index_files`. Entries and slots are
read as numpy views of the file; the records they point to are read many at a time with
:func:`~rmqinspect.format.columns.gather` and their keys hashed by
:meth:`~rmqinspect.format.columns.RecordColumns.index_keys` (the index builder's own rule). A
chain can only loop through a link to a newer entry (``putKey`` links every entry to an older
one), so only those links are followed one by one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rmqinspect.analysis.verify.collisions import KeySpill
from rmqinspect.analysis.verify.context import Context
from rmqinspect.analysis.verify.finding import Findings
from rmqinspect.format import commitlog as cl
from rmqinspect.format.columns import gather
from rmqinspect.format.index import (
    ENTRY_DTYPE,
    HASH_SLOT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    IndexGeometry,
    IndexHeader,
)
from rmqinspect.format.npbytes import I64, distinct, members
from rmqinspect.format.scan import data_extent
from rmqinspect.store.files import StoreFile

_CHUNK = 1 << 16  # entries checked per gather
Report = Callable[[str, I64, str], None]  # (check, entry indices in the chunk, their detail)


PART_ENTRIES = 1 << 18  # entries per work unit: a 2 GB store's one index file keeps 16 cores busy


@dataclass
class IndexPart:
    """What checking entries ``[first, stop)`` of one index file found."""

    findings: Findings = field(default_factory=Findings)
    entries: int = 0
    fingerprints: list[I64] = field(default_factory=list)  # of the keys of the records seen
    below: int = 0  # entries pointing below the commitlog's first file
    first_below: int = 0
    keys_file: tuple[str, list[int]] | None = None  # where its fingerprints went instead


def index_parts(ctx: Context) -> list[tuple[int, int, int]]:
    """The work units of the index check: (file index, first entry, stop) ranges, the first of
    each file also checking the header, slots and chains."""
    parts = []
    for k, info in enumerate(ctx.index_files):
        count = 0
        if info.usable and info.header is not None and info.geometry is not None:
            count = min(info.header.entry_count, info.geometry.index_num - 1)
        parts += [
            (k, a, min(a + PART_ENTRIES, count)) for a in range(0, max(count, 1), PART_ENTRIES)
        ]
    return parts


def check_index_part(ctx: Context, index: int, first: int, stop: int, data_end: int) -> IndexPart:
    """Check entries ``[first, stop)`` (0-based) of the ``index``-th index file; the part that
    starts at 0 also checks the header, the slots and the chains."""
    info = ctx.index_files[index]
    part = IndexPart()
    file = ctx.rel(info.file.path)
    if info.header is None or info.geometry is None or info.error is not None:
        part.findings.add("index.geometry", file, info.error or "no usable header or geometry")
        return part
    header, geometry = info.header, info.geometry
    buf = ctx.store.view(info.file)
    try:
        entries = _entries(buf, file, header, geometry, part.findings if first == 0 else Findings())
        if first == 0:
            heads = _heads(buf, geometry)
            bytes_end = ctx.store.maps.data_end(info.file)
            _check_header(buf, bytes_end, file, header, geometry, entries, heads, part.findings)

            def drop() -> None:
                ctx.store.maps.release(info.file, 0, info.file.length)

            slot = _slot_of(entries, geometry, lambda a, b: ctx.store.maps.release(info.file, a, b))

            _check_slots(file, header, geometry, heads, len(entries), slot, part.findings, drop)
            # Pages the chain checks read go chunk by chunk: they read the whole file.
            _check_links(file, geometry, entries, slot, part.findings, drop)
            del heads
        mine = entries[first:stop]
        for a in range(0, len(mine), _CHUNK):
            chunk = mine[a : a + _CHUNK]
            number = first + a + 1
            prints, low = _check_chunk(ctx, file, geometry, chunk, number, data_end, part.findings)
            part.fingerprints += prints
            if len(low) and not part.below:
                part.first_below = int(low[0])
            part.below += len(low)
        part.entries = len(mine)
        del entries, mine
    finally:
        buf.release()
        # The chains read entries all over the file: drop them (a full file is 400 MB).
        ctx.store.maps.release(info.file, 0, info.file.length)
    return part


def finish_index_file(
    ctx: Context, index: int, parts: list[IndexPart], keys: KeySpill, findings: Findings
) -> None:
    """What needs all parts of a file: entries below the commitlog, and hash collisions (among
    the ``keys`` of every part, which :meth:`KeySpill.add` took from them)."""
    info = ctx.index_files[index]
    file = ctx.rel(info.file.path)
    below = sum(p.below for p in parts)
    if below and info.geometry is not None:
        first = next(p.first_below for p in parts if p.below)
        findings.add(
            "index.below_commitlog",
            file,
            f"{below} entries point below the commitlog's first file (from entry {first}): "
            "their records were deleted by retention",
            file_position=info.geometry.entry_position(first),
        )
    _report_collisions(file, keys.shared_hashes(), findings)


def _entries(
    buf: memoryview,
    file: str,
    header: IndexHeader,
    geometry: IndexGeometry,
    findings: Findings,
) -> np.ndarray:
    """Entries 1..indexCount-1 as a numpy view (as many of them as the file holds)."""
    claimed = header.entry_count
    fits = max(0, (len(buf) - geometry.entries_base) // INDEX_ENTRY_SIZE - 1)
    n = max(0, min(claimed, geometry.index_num - 1, fits))
    if header.index_count > geometry.index_num:
        findings.add(
            "index.header",
            file,
            f"indexCount {header.index_count} exceeds maxIndexNum {geometry.index_num}",
            file_position=36,
        )
    elif claimed > fits:
        findings.add(
            "index.header",
            file,
            f"indexCount {header.index_count} claims more entries than the {len(buf)}-byte file "
            "holds",
            file_position=36,
        )
    return np.frombuffer(buf, ENTRY_DTYPE, n, geometry.entry_position(1))


def _heads(buf: memoryview, geometry: IndexGeometry) -> I64:
    count = max(0, min(geometry.slot_num, (len(buf) - INDEX_HEADER_SIZE) // HASH_SLOT_SIZE))
    heads: I64 = np.frombuffer(buf, ">i4", count, INDEX_HEADER_SIZE).astype(np.int64)
    return heads


def _check_header(
    buf: memoryview,
    bytes_end: int,
    file: str,
    header: IndexHeader,
    geometry: IndexGeometry,
    entries: np.ndarray,
    heads: I64,
    findings: Findings,
) -> None:
    """``putKey`` keeps the header in step with the entries: begin/end physical offsets are the
    first and last entry's, begin time is not after end time, hashSlotCount counts the used
    slots, and nothing is written past entry indexCount - 1."""
    problems = []
    if len(entries):
        first, last = int(entries["phy_offset"][0]), int(entries["phy_offset"][-1])
        if header.begin_phy_offset != first:
            problems.append(f"beginPhyOffset {header.begin_phy_offset}, entry 1 points to {first}")
        if header.end_phy_offset != last:
            problems.append(
                f"endPhyOffset {header.end_phy_offset}, the last entry points to {last}"
            )
        if header.begin_timestamp > header.end_timestamp:
            problems.append(
                f"beginTimestamp {header.begin_timestamp} is after endTimestamp "
                f"{header.end_timestamp}"
            )
        used = int(np.count_nonzero((heads > 0) & (heads <= len(entries))))
        if header.hash_slot_count != used:
            problems.append(f"hashSlotCount {header.hash_slot_count}, {used} slots are in use")
    written_to = geometry.entry_position(header.loaded_index_count)
    # ``bytes_end``: past it the file is holes, which the search for bytes never reads.
    if written_to < len(buf) and data_extent(buf, written_to, bytes_end):
        problems.append(
            f"bytes are written past entry {header.loaded_index_count - 1}, the last one "
            "indexCount counts"
        )
    for problem in problems:
        findings.add("index.header", file, problem, file_position=0)


def _slot_of(
    entries: np.ndarray,
    geometry: IndexGeometry,
    drop: Callable[[int, int], None] = lambda _a, _b: None,
) -> Callable[[I64], I64]:
    """The slot of the entries at 0-based ``rows`` (-1 for a negative key hash), read from
    the file when asked (an array of every entry's slot grew with the file), in file order a
    window of entries at a time, ``drop`` (its byte range) after each: the rows of one chunk of
    slots or links lie all over the file, and reading them at once kept every entry page
    resident (68 MB of a 2 GB store's index file, 400 MB of a full one)."""
    hashes = entries["key_hash"]
    slots = geometry.slot_num

    def slot(rows: I64) -> I64:
        if not len(rows):
            return np.zeros(0, np.int64)
        order = np.argsort(rows, kind="stable")
        window = rows[order] // _CHUNK
        cuts = [0, *(np.flatnonzero(window[1:] != window[:-1]) + 1).tolist(), len(rows)]
        h = np.empty(len(rows), np.int32)
        for a, b in itertools.pairwise(cuts):
            h[order[a:b]] = hashes[rows[order[a:b]]]
            first = int(window[a]) * _CHUNK
            drop(geometry.entry_position(first + 1), geometry.entry_position(first + _CHUNK + 1))
        if not 0 < slots <= 0xFFFFFFFF:
            out: I64 = np.where(h >= 0, h.astype(np.int64) % slots, -1)
            return out
        # A non-negative int32 is its uint32: the 32-bit remainder is the cheaper one.
        out = (h.view(np.uint32) % np.uint32(slots)).astype(np.int64)
        out[h < 0] = -1
        return out

    return slot


def _check_slots(
    file: str,
    header: IndexHeader,
    geometry: IndexGeometry,
    heads: I64,
    n: int,
    slot: Callable[[I64], I64],
    findings: Findings,
    drop: Callable[[], None],
) -> None:
    """Every used slot holds an entry of the file whose key hash belongs to it. A chunk of
    slots at a time (``drop`` after each: their entries are read all over the file); the
    findings in the order of the checks: slots outside the entries, then slots whose entry
    belongs elsewhere."""
    outside, elsewhere = _Entries(findings.limit), _Entries(findings.limit)
    for a in range(0, len(heads), _CHUNK):
        chunk = heads[a : a + _CHUNK]
        used = np.flatnonzero(chunk)
        held = chunk[used]
        outside.take(used[(held < 1) | (held > n)] + a)
        good = used[(held >= 1) & (held <= n)]
        elsewhere.take(good[slot(chunk[good] - 1) != good + a] + a)
        drop()
    for s in outside.listed():
        findings.add(
            "index.slot",
            file,
            f"slot {s} holds entry {int(heads[s])}; entries are 1..{header.loaded_index_count - 1}",
            file_position=geometry.slot_position(s),
        )
    findings.count_more("index.slot", file, outside.count - len(outside.listed()))
    listed = elsewhere.listed()
    owners = slot(heads[np.array(listed, np.int64)] - 1).tolist() if listed else []
    for s, owner in zip(listed, owners, strict=True):
        findings.add(
            "index.slot",
            file,
            f"slot {s} holds entry {int(heads[s])}, whose key hash belongs to slot {owner}",
            file_position=geometry.slot_position(s),
        )
    findings.count_more("index.slot", file, elsewhere.count - len(listed))


@dataclass
class _Entries:
    """Entries a link check found, over the chunks: the first ``keep`` (0-based) and how many."""

    keep: int | None  # None: all of them
    rows: list[I64] = field(default_factory=list)
    count: int = 0

    def take(self, rows: I64) -> None:
        room = len(rows) if self.keep is None else max(0, self.keep - self.count)
        if room:
            self.rows.append(rows[:room])
        self.count += len(rows)

    def listed(self) -> list[int]:
        return np.concatenate(self.rows).tolist() if self.rows else []


def _check_links(
    file: str,
    geometry: IndexGeometry,
    entries: np.ndarray,
    slot: Callable[[I64], I64],
    findings: Findings,
    drop: Callable[[], None],
) -> None:
    """Every prev link goes to an older entry of the same slot, or is 0. Checked a chunk of
    entries at a time (whole-file arrays were 8 bytes per entry each; ``drop`` lets go of the
    file's pages after each), the findings reported
    in the order of the checks: links outside the entries, to the entry itself, to newer
    entries (each followed: a loop or not), to another slot's entry."""
    n = len(entries)
    prev_all = entries["prev"]
    limit = findings.limit  # past it a check's findings are only counted
    outside_rows, self_rows, forward_rows, other_rows = (
        _Entries(limit),
        _Entries(limit),
        _Entries(None),  # each is followed, to tell a loop from a link
        _Entries(limit),
    )
    for a in range(0, n, _CHUNK):
        prev = prev_all[a : a + _CHUNK].astype(np.int64)
        number = np.arange(a + 1, a + 1 + len(prev), dtype=np.int64)
        outside = (prev < 0) | (prev > n)
        outside_rows.take(np.flatnonzero(outside) + a)
        self_rows.take(np.flatnonzero(prev == number) + a)
        forward_rows.take(np.flatnonzero(~outside & (prev > number)) + a)
        older = np.flatnonzero(~outside & (prev > 0) & (prev < number))
        other_rows.take(older[slot(prev[older] - 1) != slot(older + a)] + a)
        drop()

    def add(check: str, i: int, detail: str) -> None:
        findings.add(
            check,
            file,
            f"entry {i + 1}: {detail}",
            file_position=geometry.entry_position(i + 1) + 16,
        )

    def prev_of(i: int) -> int:
        return int(prev_all[i])

    for i in outside_rows.listed():
        add("index.chain_link", i, f"prev {prev_of(i)} is outside the entries 1..{n}")
    findings.count_more("index.chain_link", file, outside_rows.count - len(outside_rows.listed()))
    for i in self_rows.listed():
        add("index.chain_cycle", i, "prev links the entry to itself")
    findings.count_more("index.chain_cycle", file, self_rows.count - len(self_rows.listed()))
    for i in forward_rows.listed():
        if _loops(prev_all, i + 1):
            add("index.chain_cycle", i, f"prev {prev_of(i)} leads back to entry {i + 1}")
        else:
            add("index.chain_link", i, f"prev {prev_of(i)} is a newer entry")
    listed = other_rows.listed()
    if listed:
        rows = np.array(listed, np.int64)
        theirs = slot(prev_all[rows].astype(np.int64) - 1).tolist()
        for i, s, own in zip(listed, theirs, slot(rows).tolist(), strict=True):
            add("index.chain_link", i, f"prev {prev_of(i)} is an entry of slot {s}, not {own}")
    findings.count_more("index.chain_link", file, other_rows.count - len(listed))


def _loops(prev: np.ndarray, start: int) -> bool:
    """Whether following prev links from entry ``start`` comes back to it."""
    seen = {start}
    at = int(prev[start - 1])
    while 0 < at <= len(prev):
        if at in seen:
            return at == start
        seen.add(at)
        at = int(prev[at - 1])
    return False


def _check_chunk(
    ctx: Context,
    file: str,
    geometry: IndexGeometry,
    chunk: np.ndarray,
    first_number: int,
    data_end: int,
    findings: Findings,
) -> tuple[list[I64], I64]:
    """Entries ``first_number..`` of the file against their records: the key fingerprints of
    :func:`_check_records`, and the numbers of the entries pointing below the commitlog."""
    clq = ctx.store.commitlog
    phy = chunk["phy_offset"].astype(np.int64)
    hashes = chunk["key_hash"].astype(np.int64)

    def report(check: str, entries: I64, detail: str) -> None:
        # Past the listing limit only the count is kept: a file of entries pointing at
        # copies of one record yields one finding per entry.
        listed = entries[: findings.room(check, file)].tolist()
        for i in listed:
            number = first_number + i
            findings.add(
                check,
                file,
                f"entry {number} ({int(hashes[i])}, {int(phy[i])}): {detail}",
                file_position=geometry.entry_position(number),
                physical_offset=int(phy[i]),
            )
        findings.count_more(check, file, len(entries) - len(listed))

    past = phy >= data_end
    report(
        "index.points_past_end", np.flatnonzero(past), f"the commitlog's data ends at {data_end}"
    )
    low = ~past & (phy < max(clq.min_offset, 0))
    rest = np.flatnonzero(~past & ~low)
    starts = np.array([f.start for f in clq.files], np.int64)
    which = np.searchsorted(starts, phy[rest], side="right") - 1
    prints = [
        _check_records(ctx, clq.files[k], rest[which == k], phy, hashes, report)
        for k in distinct(which).tolist()
    ]
    return prints, np.flatnonzero(low) + first_number


def _check_records(
    ctx: Context,
    f: StoreFile,
    sel: I64,
    phy: I64,
    hashes: I64,
    report: Report,
) -> I64:
    """The entries ``sel`` pointing into commitlog file ``f``; returns (hash, fingerprint of
    the key) of every key of the records they point to, for the collision report."""
    rel = phy[sel] - f.start
    outside = rel > f.length - cl.MIN_RECORD_SIZE
    report("index.no_record", sel[outside], f"no record fits there in {f.name}")
    sel, rel = sel[~outside], rel[~outside]
    empty = np.zeros(0, np.int64)
    if not len(sel):
        return empty
    buf = ctx.store.view(f)
    try:
        uniq, inverse = _unique(rel)
        cols = gather(buf, uniq, f.start)
        magic = cols.magic[inverse]
        v2 = (magic == cl.MESSAGE_MAGIC_CODE_V2) & ctx.profile.accepts_v2_magic
        header = (magic == cl.MESSAGE_MAGIC_CODE) | v2
        report("index.no_record", sel[~header], "no message record starts there")
        # A record the file's end cuts off reads as zeros past it and can look well formed;
        # its key spans would lie outside the file.
        cut = header & (uniq + cols.store_size > len(buf))[inverse]
        report("index.no_record", sel[cut], f"the record there runs past the end of {f.name}")
        whole = cols.well_formed & (uniq + cols.store_size <= len(buf))
        rows = np.flatnonzero(whole)
        if not len(rows):
            return empty
        keys = cols.index_keys(rows)
        owner = rows[keys.owners]
        record_keys = (owner << 32) | keys.hashes
        has_keys = np.zeros(len(cols), bool)
        has_keys[owner] = True
        checked = header & whole[inverse]
        entry_keys = (inverse << 32) | (hashes[sel] & 0xFFFFFFFF)
        missing = checked & ~members(entry_keys, record_keys)
        for n in np.flatnonzero(missing).tolist():
            report(
                "index.key_hash",
                sel[n : n + 1],
                "none of the record's keys has this hash"
                if has_keys[inverse[n]]
                else "the record has no indexed key",
            )
        out: I64 = distinct((keys.hashes << 32) | (keys.prints & 0xFFFFFFFF))
        del cols
        return out
    finally:
        buf.release()
        # Entries point all over the file: drop what was read (see units._found).
        ctx.store.maps.release(f, 0, f.length)


def _unique(values: I64) -> tuple[I64, I64]:
    """``np.unique(values, return_inverse=True)``; without sorting where the values ascend
    already (an index's entries follow the log)."""
    if not bool((values[1:] >= values[:-1]).all()):
        uniq, inverse = np.unique(values, return_inverse=True)
        return uniq, inverse
    new = np.ones(len(values), bool)
    new[1:] = values[1:] != values[:-1]
    first: I64 = np.cumsum(new) - 1
    return values[new], first


def _report_collisions(file: str, shared: I64, findings: Findings) -> None:
    """Distinct keys (told apart by a fingerprint of the string) sharing one hash: one finding
    per file."""
    if len(shared):
        examples = ", ".join(str(h) for h in shared[:5].tolist())
        findings.add(
            "index.hash_collision",
            file,
            f"{len(shared)} key hashes are shared by distinct keys (e.g. {examples}): a query for "
            "one key also returns the others' messages, which the client filters out",
        )
