"""Damage helpers for synthetic stores: the failure modes the inspector must explain.

**Every helper mutates the store directory it is given, in place.** They are meant for stores
the caller made (with :class:`~rmqinspect.synth.writer.StoreWriter`) or copied for the purpose;
never point them at evidence. Each returns a :class:`Damage` saying what changed, with the byte
ranges touched, so tests can assert against it.

The kinds mirror the conformance scenarios (``conformance/README.md``): a torn tail, a flipped
body byte, a zeroed (or overwritten) region, consume-queue units past the commitlog end, a
missing consume-queue directory, stale records after the write position, and the ``abort``
marker. In a DLedger store (``dledger-<selfId>/data`` instead of ``commitlog/``) the messages
are the records inside the entries, so a torn tail tears the last entry's record and leaves its
header whole (the torn entry DLedger keeps); :func:`torn_entry_header` tears a header instead.
"""

from __future__ import annotations

import mmap
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rmqinspect.format import columns
from rmqinspect.format import dledger as dl
from rmqinspect.format.commitlog import (
    BODYCRC_POS,
    CheckOptions,
    MessageRecord,
    body_crc,
    check_message,
)
from rmqinspect.format.consumequeue import (
    CQ_STORE_UNIT_SIZE,
    decode_unit,
    encode_unit,
    units_array,
    valid_prefix,
)
from rmqinspect.format.encode import encode_message
from rmqinspect.format.names import offset_file_name
from rmqinspect.format.profile import Profile
from rmqinspect.store.layout import QueueId

_BODY_START_V4V4 = 88  # BODY offset in a record with two IPv4 hosts
_WALK = CheckOptions(profile=Profile.V5_3, check_crc=False, read_body=True)


@dataclass(frozen=True, slots=True)
class ByteRange:
    """``[start, end)`` of ``path`` (relative to the store root) that the damage touched."""

    path: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Damage:
    kind: str
    description: str
    ranges: tuple[ByteRange, ...] = ()
    removed: tuple[str, ...] = ()  # files or directories deleted, relative to the store root
    created: tuple[str, ...] = ()
    details: dict[str, int | str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Located:
    """A message found by following TOTALSIZE (or entry sizes); decoded only when a helper
    needs its fields."""

    path: Path
    file_start: int
    position: int  # inside the file
    size: int
    frame: int = 0  # bytes before the record that belong to it: a DLedger entry header

    @property
    def offset(self) -> int:
        return self.file_start + self.position

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def record(self) -> MessageRecord:
        with open(self.path, "rb") as f:
            f.seek(self.position)
            data = f.read(self.size)
        result = check_message(data, 0, self.offset, _WALK)
        if result.record is None or not result.is_message:
            raise ValueError(f"no well-formed message at {self.offset}: {result.reason}")
        return result.record


def _commitlog_files(root: Path) -> list[Path]:
    directory = root / "commitlog"
    if not directory.is_dir():
        directory = next(iter(sorted(root.glob("dledger-*/data"))), directory)
    files = sorted(p for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []
    if not files:
        raise ValueError(f"{directory} holds no commitlog file")
    return files


def _in_dledger(path: Path) -> bool:
    return path.parent.name == "data" and path.parent.parent.name.startswith("dledger-")


def _file_messages(path: Path) -> list[_Located]:
    """The messages of one commitlog file from position 0, following TOTALSIZE through
    well-formed headers until a BLANK or anything else (checksums are not looked at); in a
    DLedger data file the records of the entries DLedger keeps."""
    found: list[_Located] = []
    if not path.stat().st_size:
        return found
    start = int(path.name)
    entries = _in_dledger(path)
    with (
        open(path, "rb") as f,
        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
        memoryview(mapped) as data,
    ):
        pos = 0
        while True:
            if entries:
                ledger = dl.walk_entries(data, pos, start)
                found += [
                    _Located(path, start, p + dl.BODY_OFFSET, n - dl.BODY_OFFSET, dl.BODY_OFFSET)
                    for p, n in zip(ledger.positions.tolist(), ledger.sizes.tolist(), strict=True)
                ]
                if ledger.stop is not None:
                    return found
                pos = ledger.end
                continue
            walk = columns.walk(data, pos)
            found += [
                _Located(path, start, p, n)
                for p, n in zip(walk.positions.tolist(), walk.store_size.tolist(), strict=True)
            ]
            if walk.stop is not columns.WalkStop.LIMIT:
                return found
            pos = walk.end


def _messages(root: Path) -> Iterator[_Located]:
    for path in _commitlog_files(root):
        yield from _file_messages(path)


def _last_message(root: Path) -> _Located:
    for path in reversed(_commitlog_files(root)):
        found = _file_messages(path)
        if found:
            return found[-1]
    raise ValueError(f"{root} has no message to damage")


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _body_start(record: MessageRecord) -> int:
    """Offset of BODY inside the record (§2.2)."""
    extra = (12 if record.born_host.is_v6 else 0) + (12 if record.store_host.is_v6 else 0)
    return _BODY_START_V4V4 + extra


def _patch(path: Path, position: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, position)
    finally:
        os.close(fd)


def torn_tail(root: str | os.PathLike[str], keep_fraction: float = 0.5) -> Damage:
    """Zero the end of the last message, keeping its first ``keep_fraction`` (a write the
    crash interrupted). The body CRC then fails, or the magic if little is kept."""
    store = Path(root)
    last = _last_message(store)
    size = last.size
    keep = int(size * keep_fraction)
    start = last.position + keep
    end = last.position + size
    _patch(last.path, start, bytes(end - start))
    return Damage(
        "torn_tail",
        f"zeroed the last {end - start} bytes of the message at {last.offset}",
        (ByteRange(_rel(store, last.path), start, end),),
        # DLedger keeps an entry whose header is whole: its data end stays after the entry.
        details={
            "message_offset": last.offset,
            "new_valid_end": last.end if last.frame else last.offset,
        },
    )


def flip_body_byte(
    root: str | os.PathLike[str],
    *,
    offset: int | None = None,
    message_index: int | None = None,
    byte_in_body: int = 0,
) -> Damage:
    """XOR one body byte with 0xFF, in the message at physical ``offset`` or the
    ``message_index``-th message of the log (default: the middle message of the last file)."""
    store = Path(root)
    if offset is not None:
        chosen = [m for m in _messages(store) if m.offset == offset]
        if not chosen:
            raise ValueError(f"no message starts at physical offset {offset}")
        target = chosen[0]
    elif message_index is not None:
        target = list(_messages(store))[message_index]
    else:
        last_file = _file_messages(_last_message(store).path)
        target = last_file[len(last_file) // 2]
    record = target.record
    if not 0 <= byte_in_body < record.body_length:
        raise ValueError(f"message at {target.offset} has a {record.body_length}-byte body")
    at = target.position + _body_start(record) + byte_in_body
    with open(target.path, "rb") as f:
        f.seek(at)
        old = f.read(1)[0]
    _patch(target.path, at, bytes([old ^ 0xFF]))
    return Damage(
        "flip_body_byte",
        f"flipped body byte {byte_in_body} of the message at {target.offset}",
        (ByteRange(_rel(store, target.path), at, at + 1),),
        details={"message_offset": target.offset, "old": old, "new": old ^ 0xFF},
    )


def garble_compressed_body(root: str | os.PathLike[str], *, offset: int | None = None) -> Damage:
    """Zero the first 4 bytes of a compressed body (the first compressed message of the log, or
    the one at physical ``offset``) and store the BODYCRC of the new bytes: a producer that
    sent bytes its codec cannot read. Every check passes but decompression (a property CRC,
    when the store has them, fails too)."""
    store = Path(root)
    for m in _messages(store):
        record = m.record
        if (offset is None or m.offset == offset) and record.compression and record.body_length:
            break
    else:
        raise ValueError("no compressed message" + ("" if offset is None else f" at {offset}"))
    assert record.body is not None
    body = bytes(min(4, record.body_length)) + record.body[4:]
    at = m.position + _body_start(record)
    _patch(m.path, at, body[:4])
    _patch(m.path, m.position + BODYCRC_POS, body_crc(body).to_bytes(4, "big"))
    return Damage(
        "garble_compressed_body",
        f"zeroed the first body bytes of the {record.compression} message at {m.offset}",
        (ByteRange(_rel(store, m.path), at, at + 4),),
        details={"message_offset": m.offset},
    )


def zero_region(root: str | os.PathLike[str], start: int, end: int) -> Damage:
    """Zero the commitlog bytes at physical offsets ``[start, end)``, across files if need be."""
    if start >= end:
        raise ValueError(f"empty region {start}..{end}")
    ranges = _overwrite(Path(root), start, bytes(end - start))
    return Damage("zero_region", f"zeroed physical offsets {start}..{end}", ranges)


def overwrite_region(root: str | os.PathLike[str], start: int, data: bytes) -> Damage:
    """Write ``data`` over the commitlog bytes from physical offset ``start`` (random bytes
    make a scribbled record), across files if need be."""
    if not data:
        raise ValueError("nothing to write")
    end = start + len(data)
    ranges = _overwrite(Path(root), start, data)
    return Damage("overwrite_region", f"overwrote physical offsets {start}..{end}", ranges)


def _overwrite(store: Path, start: int, data: bytes) -> tuple[ByteRange, ...]:
    end = start + len(data)
    ranges = []
    for path in _commitlog_files(store):
        file_start = int(path.name)
        file_end = file_start + path.stat().st_size
        lo, hi = max(start, file_start), min(end, file_end)
        if lo < hi:
            _patch(path, lo - file_start, data[lo - start : hi - start])
            ranges.append(ByteRange(_rel(store, path), lo - file_start, hi - file_start))
    if not ranges:
        raise ValueError(f"region {start}..{end} lies outside every commitlog file")
    return tuple(ranges)


def cq_ahead_of_commitlog(
    root: str | os.PathLike[str], topic: str, queue_id: int, count: int = 3
) -> Damage:
    """Append ``count`` units to a consume queue that point past the end of the commitlog, as
    when the queue was flushed but the commitlog tail was lost."""
    store = Path(root)
    directory = store / QueueId(topic, queue_id).relative_dir
    files = sorted(directory.iterdir()) if directory.is_dir() else []
    if not files:
        raise ValueError(f"no consume queue at {directory}")
    last = files[-1]
    file_size = last.stat().st_size
    data = last.read_bytes()
    used = valid_prefix(units_array(data)) * CQ_STORE_UNIT_SIZE
    unit_size = decode_unit(data, used - CQ_STORE_UNIT_SIZE).size if used else 100
    end = _last_message(store).end
    ranges, created = [], []
    path, position = last, used
    for i in range(count):
        if position + CQ_STORE_UNIT_SIZE > file_size:
            path = directory / offset_file_name(int(path.name) + file_size)
            with open(path, "xb") as f:
                f.truncate(file_size)
            created.append(_rel(store, path))
            position = 0
        _patch(path, position, encode_unit(end + i * unit_size, unit_size, 0))
        ranges.append(ByteRange(_rel(store, path), position, position + CQ_STORE_UNIT_SIZE))
        position += CQ_STORE_UNIT_SIZE
    return Damage(
        "cq_ahead_of_commitlog",
        f"appended {count} units to {topic}/{queue_id} pointing at and past {end}",
        tuple(ranges),
        created=tuple(created),
        details={"commitlog_end": end},
    )


def remove_cq_dir(root: str | os.PathLike[str], topic: str, queue_id: int) -> Damage:
    """Delete ``consumequeue/<topic>/<queueId>`` (and the topic directory if it empties)."""
    store = Path(root)
    directory = store / QueueId(topic, queue_id).relative_dir
    if not directory.is_dir():
        raise ValueError(f"no consume queue at {directory}")
    removed = tuple(_rel(store, p) for p in sorted(directory.iterdir()))
    shutil.rmtree(directory)
    if not any(directory.parent.iterdir()):
        directory.parent.rmdir()
    return Damage(
        "remove_cq_dir",
        f"deleted consume queue {topic}/{queue_id} ({len(removed)} files)",
        removed=(*removed, _rel(store, directory)),
    )


def stale_bytes_past_write_position(
    root: str | os.PathLike[str], mode: str = "copy", count: int = 3
) -> Damage:
    """Leave intact-looking old records after the valid end of the log.

    ``copy``: up to ``count`` whole records from the start of the first commitlog file are
    copied just past the last message, as when a reused file still holds an earlier
    generation's data; they pass magic and CRC checks but their PHYSICALOFFSET is wrong.
    ``rewrite``: the last message is rewritten shorter at its own position (a truncated and
    re-appended tail), so the rest of the old message is garbage and the stale record after it
    keeps its old, correct-looking position.
    """
    store = Path(root)
    last = _last_message(store)
    size = last.path.stat().st_size
    if mode == "copy":
        at = last.position + last.size
        taken = 0
        chunks: list[bytes] = []
        for m in _file_messages(_commitlog_files(store)[0])[:count]:
            whole = m.frame + m.size  # a DLedger entry is copied with its header
            if at + taken + whole + 8 > size:
                break
            with open(m.path, "rb") as f:
                f.seek(m.position - m.frame)
                chunks.append(f.read(whole))
            taken += whole
        if not chunks:
            raise ValueError("no room after the last message for a stale record")
        _patch(last.path, at, b"".join(chunks))
        return Damage(
            "stale_bytes_past_write_position",
            f"copied {len(chunks)} old records ({taken} bytes) past the end at {last.end}",
            (ByteRange(_rel(store, last.path), at, at + taken),),
            details={"valid_end": last.end, "records": len(chunks)},
        )
    if mode == "rewrite":
        if last.frame:
            raise ValueError("rewrite shortens a plain commitlog record, not a DLedger entry")
        earlier = _file_messages(last.path)[:-1]
        victim = next((m for m in reversed(earlier) if m.record.body_length >= 16), None)
        if victim is None:
            raise ValueError("rewrite needs an earlier message with a body in the last file")
        rec = victim.record
        body = (rec.body or b"")[: rec.body_length // 2]
        shorter = encode_message(
            topic=rec.topic,
            queue_id=rec.queue_id,
            flag=rec.flag,
            queue_offset=rec.queue_offset,
            physical_offset=rec.physical_offset_field,
            sys_flag=rec.sys_flag,
            born_timestamp=rec.born_timestamp,
            born_host=rec.born_host,
            store_timestamp=rec.store_timestamp,
            store_host=rec.store_host,
            reconsume_times=rec.reconsume_times,
            prepared_transaction_offset=rec.prepared_transaction_offset,
            body=body,
            properties=rec.properties_raw,
            version=2 if rec.version == "v2" else 1,
        )
        if len(shorter) + 8 > rec.store_size:
            raise ValueError("the rewritten record would not leave a gap before the stale one")
        _patch(victim.path, victim.position, shorter)
        new_end = victim.offset + len(shorter)
        return Damage(
            "stale_bytes_past_write_position",
            f"rewrote the message at {victim.offset} {rec.store_size - len(shorter)} bytes "
            f"shorter; old bytes follow the new end {new_end}",
            (ByteRange(_rel(store, victim.path), victim.position, victim.position + len(shorter)),),
            details={"valid_end": new_end, "stale_record_offset": victim.end},
        )
    raise ValueError(f"unknown stale-bytes mode {mode!r} (copy or rewrite)")


def torn_entry_header(root: str | os.PathLike[str], keep: int = 8) -> Damage:
    """Zero the last DLedger entry's header after its first ``keep`` bytes (magic and size by
    default) and its record: a write the crash interrupted before the header was whole. DLedger
    recovery stops at that entry (its pos field no longer names it) and truncates there."""
    store = Path(root)
    last = _last_message(store)
    if not last.frame:
        raise ValueError("a torn entry header needs a DLedger store")
    if not 0 <= keep < dl.BODY_OFFSET:
        raise ValueError(f"keep {keep} is not inside the {dl.BODY_OFFSET}-byte header")
    entry = last.position - last.frame
    end = last.position + last.size
    _patch(last.path, entry + keep, bytes(end - entry - keep))
    return Damage(
        "torn_entry_header",
        f"zeroed the DLedger entry at {last.file_start + entry} after its first {keep} bytes",
        (ByteRange(_rel(store, last.path), entry + keep, end),),
        details={"entry_offset": last.file_start + entry, "new_valid_end": last.file_start + entry},
    )


def set_abort(root: str | os.PathLike[str], present: bool, content: bytes = b"") -> Damage:
    """Create ``abort`` (4.9 leaves it empty, 5.x writes the broker PID) or delete it."""
    store = Path(root)
    path = store / "abort"
    if present:
        path.write_bytes(content)
        return Damage("set_abort", "created abort", created=("abort",))
    existed = path.exists()
    path.unlink(missing_ok=True)
    return Damage(
        "set_abort",
        "deleted abort" if existed else "abort was already absent",
        removed=("abort",) if existed else (),
    )
