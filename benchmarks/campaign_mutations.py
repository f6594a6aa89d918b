"""The store mutations of the seeded campaign (``benchmarks/campaign.py``): each changes a copy of
a store in place the way broken or hostile input does and says what it did, in one line.

Bit flips, zeroed or random ranges, truncations, extreme size and count fields, renamed files and
directories (names no broker writes, control characters), broken config JSON, sparse-extended
files, deleted files, FIFOs, devices, directories and symlinks (outside the store, dangling,
looping) where files should be, odd marker contents and control characters in record topics.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path

from rmqinspect.format import commitlog as cl

GIB = 1 << 30


def _files(root: Path, *dirs: str) -> list[Path]:
    out = []
    for d in dirs or ("",):
        base = root / d if d else root
        if not base.is_dir() or base.is_symlink():
            continue
        for dirpath, dirnames, names in os.walk(base):
            dirnames.sort()
            for n in sorted(names):
                p = Path(dirpath) / n
                if p.is_file() and not p.is_symlink():
                    out.append(p)
    return out


def _any_file(root: Path, rng: random.Random) -> Path | None:
    families = [("commitlog",), ("consumequeue",), ("index",), ("config",), ("",)]
    for _ in range(4):
        files = _files(root, *rng.choice(families))
        if files:
            return rng.choice(files)
    return None


def _rel(root: Path, p: Path) -> str:
    return str(p.relative_to(root))


def m_bit_flip(root: Path, rng: random.Random) -> str:
    p = _any_file(root, rng)
    if p is None or not p.stat().st_size:
        return "bit flip: nothing to flip"
    with open(p, "r+b") as fh:
        size = os.fstat(fh.fileno()).st_size
        at = []
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(size)
            fh.seek(pos)
            b = fh.read(1)[0]
            fh.seek(pos)
            fh.write(bytes([b ^ (1 << rng.randrange(8))]))
            at.append(pos)
    return f"bit flips in {_rel(root, p)} at {at}"


def m_range(root: Path, rng: random.Random) -> str:
    p = _any_file(root, rng)
    if p is None or not p.stat().st_size:
        return "range: no file"
    size = p.stat().st_size
    start = rng.randrange(size)
    length = min(size - start, rng.choice((1, 4, 20, 100, 4096, size)))
    data = bytes(length) if rng.random() < 0.5 else rng.randbytes(length)
    with open(p, "r+b") as fh:
        fh.seek(start)
        fh.write(data)
    kind = "zeroed" if not any(data) else "random"
    return f"{kind} range [{start}, {start + length}) of {_rel(root, p)}"


def m_truncate(root: Path, rng: random.Random) -> str:
    p = _any_file(root, rng)
    if p is None:
        return "truncate: no file"
    size = p.stat().st_size
    new = rng.choice((0, 1, 3, 7, 19, 39, size // 2, max(size - 1, 0), rng.randrange(size + 1)))
    os.truncate(p, new)
    return f"truncated {_rel(root, p)} to {new}"


_EXTREMES = (0, -1, 1, 7, 90, 91, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def _put_u32(p: Path, pos: int, value: int) -> None:
    with open(p, "r+b") as fh:
        fh.seek(pos)
        fh.write((value & 0xFFFFFFFF).to_bytes(4, "big"))


def m_extreme_field(root: Path, rng: random.Random) -> str:
    """A size or count field set to an extreme value: a record's TOTALSIZE or lengths, an index
    header's counts, a slot or prev link, a consume-queue unit's offset or size."""
    choice = rng.choice(("record", "index", "cq", "checkpoint"))
    value = rng.choice(_EXTREMES)
    if choice == "record":
        files = [p for p in _files(root, "commitlog") if p.stat().st_size > 200]
        if not files:
            return "extreme field: no commitlog"
        p = rng.choice(files)
        data = p.read_bytes()
        starts = [0]
        while len(starts) < 50:
            size = int.from_bytes(data[starts[-1] : starts[-1] + 4], "big", signed=True)
            nxt = starts[-1] + size
            if size < 91 or nxt + 8 > len(data):
                break
            starts.append(nxt)
        at = rng.choice(starts)
        field, rel = rng.choice(
            (("TOTALSIZE", 0), ("BODYLENGTH", 84), ("QUEUEID", 12), ("SYSFLAG", 36), ("BORNTS", 40))
        )
        if field == "BODYLENGTH" and rng.random() < 0.5:
            # the topic length (1 byte) and properties length (2 bytes) after the body
            body = int.from_bytes(data[at + 84 : at + 88], "big", signed=True)
            pos = at + 88 + max(body, 0)
            with open(p, "r+b") as fh:
                fh.seek(pos)
                fh.write(bytes([value & 0xFF]))
            return f"topic length of record {at} in {_rel(root, p)} set to {value & 0xFF}"
        _put_u32(p, at + rel, value)
        return f"{field} of record at {at} in {_rel(root, p)} set to {value:#x}"
    if choice == "index":
        files = _files(root, "index")
        if not files:
            return "extreme field: no index file"
        p = rng.choice(files)
        size = p.stat().st_size
        where = rng.choice(("indexCount", "hashSlotCount", "slot", "prev"))
        if where == "indexCount" and size >= 40:
            _put_u32(p, 36, value)
        elif where == "hashSlotCount" and size >= 40:
            _put_u32(p, 32, value)
        elif size >= 48:
            pos = rng.randrange(40, size - 4) // 4 * 4
            _put_u32(p, pos, value if where == "slot" else rng.randrange(1, 400))
        return f"index {where} of {_rel(root, p)} set to {value:#x}"
    if choice == "cq":
        files = [p for p in _files(root, "consumequeue") if p.stat().st_size >= 20]
        if not files:
            return "extreme field: no consume queue"
        p = rng.choice(files)
        unit = rng.randrange(p.stat().st_size // 20)
        rel = rng.choice((0, 4, 8, 12))
        _put_u32(p, unit * 20 + rel, value)
        return f"consume-queue unit {unit} of {_rel(root, p)} word {rel} set to {value:#x}"
    p = root / "checkpoint"
    if p.is_file() and not p.is_symlink() and p.stat().st_size >= 40:
        _put_u32(p, rng.randrange(10) * 4, value)
        return f"checkpoint word set to {value:#x}"
    return "extreme field: no checkpoint"


_BAD_NAMES = (
    "9223372036854775807",
    "99999999999999999999",
    "0000000000000000000x",
    "０００００００００００００００００００００",
    "00000000000000000001",
    "0000000000000000000",
    "-0000000000000000001",
    "+0000000000000000000",
    "name\x1b[31mred",
    "line\nbreak",
    "00000000000000262143",
    "00000000000000000000.bak",
    "20261121054521847\x1b]0;x\x07",
    "99999999999999999",
)


def m_rename(root: Path, rng: random.Random) -> str:
    what = rng.choice(("file", "file", "queue_dir", "topic_dir"))
    if what == "file":
        p = _any_file(root, rng)
        if p is None:
            return "rename: no file"
        new = p.with_name(rng.choice(_BAD_NAMES))
        if new.exists():
            return f"rename: {new.name} exists"
        p.rename(new)
        return f"renamed {_rel(root, p)} to {new.name!r}"
    cq = root / "consumequeue"
    topics = sorted(d for d in cq.iterdir() if d.is_dir()) if cq.is_dir() else []
    if not topics:
        return "rename: no consume queue"
    topic = rng.choice(topics)
    if what == "topic_dir":
        new = topic.with_name(rng.choice(("Topic\x1b[2J\x1b[31mX", "T\nopic", "T\x07", "ä" * 200)))
        topic.rename(new)
        return f"renamed topic dir {topic.name!r} to {new.name!r}"
    queues = sorted(d for d in topic.iterdir() if d.is_dir())
    if not queues:
        return "rename: no queue dir"
    q = rng.choice(queues)
    new = q.with_name(rng.choice(("２", "2147483648", "-1", "0x1", "1\x1b[0m", "99")))
    if new.exists():
        return "rename: queue name exists"
    q.rename(new)
    return f"renamed queue dir {_rel(root, q)} to {new.name!r}"


def m_config(root: Path, rng: random.Random) -> str:
    cfg = root / "config"
    cfg.mkdir(exist_ok=True)
    name = rng.choice(
        (
            "consumerOffset.json",
            "consumerOffset.json.bak",
            "delayOffset.json",
            "topics.json",
            "subscriptionGroup.json.bak",
            "lmqConsumerOffset.json",
        )
    )
    p = cfg / name
    if p.is_symlink() or p.is_dir():
        return f"config: {name} is not a file"
    old = p.read_bytes() if p.is_file() else b'{"offsetTable":{"TopicA@g":{0:1}}}'
    kind = rng.choice(("truncated", "nested", "huge", "not_utf8", "dialect", "types", "sparse"))
    if kind == "truncated":
        p.write_bytes(old[: rng.randrange(len(old) + 1)])
    elif kind == "nested":
        depth = rng.choice((600, 100_000))
        p.write_bytes(b"[" * depth + b"]" * depth)
    elif kind == "huge":
        p.write_bytes(b'{"offsetTable":{' + b'"t@g":{0:1},' * 400_000 + b"}}")
    elif kind == "not_utf8":
        p.write_bytes(old.replace(b'"', b'"\xff\xfe', 3))
    elif kind == "dialect":
        p.write_bytes(b"{offsetTable:{'t@g':{0:1,,},},dataVersion:{counter:1e309}}")
    elif kind == "types":
        p.write_bytes(b'{"offsetTable":{"t@g":{"0":"\xc2\xb2"}},"dataVersion":[]}')
    else:
        with open(p, "ab") as fh:
            fh.truncate(rng.choice((5 * GIB, 300 << 20)))
    return f"config {name}: {kind}"


def m_sparse(root: Path, rng: random.Random) -> str:
    candidates = [
        root / "abort",
        root / "checkpoint",
        root / "lock",
        *_files(root, "commitlog")[-1:],
        *_files(root, "consumequeue")[:3],
        *_files(root, "index")[-1:],
    ]
    p = rng.choice(candidates)
    if p.is_symlink() or p.is_dir():
        return "sparse: not a file"
    grow = rng.choice((64 * GIB, 5 * GIB, 100 * GIB, 1 << 20))
    with open(p, "ab") as fh:
        fh.truncate(fh.seek(0, os.SEEK_END) + grow)
    return f"sparse-extended {_rel(root, p)} by {grow} bytes"


def m_delete(root: Path, rng: random.Random) -> str:
    choices = [*_files(root, "commitlog"), *_files(root, "index"), *_files(root, "config")]
    choices += [root / n for n in ("checkpoint", "abort", "lock", "commitlog", "index", "config")]
    cq = root / "consumequeue"
    if cq.is_dir():
        choices += [d for d in cq.iterdir()]
    p = rng.choice(choices)
    if not p.exists() and not p.is_symlink():
        return f"delete: {_rel(root, p)} absent"
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink()
    return f"deleted {_rel(root, p)}"


def _replace_target(root: Path, rng: random.Random) -> Path:
    choices = [
        root / "config" / "consumerOffset.json",
        root / "config" / "consumerOffset.json.bak",
        root / "config" / "topics.json",
        root / "checkpoint",
        root / "abort",
        root / "lock",
        *_files(root, "commitlog")[-2:],
        *_files(root, "index")[:1],
        *_files(root, "consumequeue")[:2],
    ]
    return rng.choice(choices)


def _clear(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()
    p.parent.mkdir(parents=True, exist_ok=True)


def m_special(root: Path, rng: random.Random) -> str:
    """A FIFO, a directory, or a symlink (to a device, outside the store, dangling or looping)
    where a file should be."""
    p = _replace_target(root, rng)
    kind = rng.choice(("fifo", "dir", "zero", "urandom", "outside", "dangling", "loop", "self"))
    _clear(p)
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dir":
        p.mkdir()
        (p / "inner").write_bytes(b"x")
    elif kind in ("zero", "urandom"):
        p.symlink_to(f"/dev/{kind}")
    elif kind == "outside":
        p.symlink_to(Path(__file__).resolve())
    elif kind == "dangling":
        p.symlink_to(root / "no-such-file")
    elif kind == "loop":
        other = p.with_name(p.name + ".loop")
        p.symlink_to(other.name)
        other.symlink_to(p.name)
    else:
        p.symlink_to(p.name)
    return f"{_rel(root, p)} replaced by {kind}"


def m_markers(root: Path, rng: random.Random) -> str:
    content = rng.choice(
        (b"9" * 5000, b"\xff\xfe\x00", b"12345\n", "²".encode(), b"\x1b[31m", b" " * 10_000)
    )
    p = root / rng.choice(("abort", "lock"))
    _clear(p)
    p.write_bytes(content)
    return f"{p.name} holds {content[:12]!r} ({len(content)} bytes)"


def m_control_topic(root: Path, rng: random.Random) -> str:
    """Control characters in a record's TOPIC bytes (same length, so the record stays whole)."""
    files = [p for p in _files(root, "commitlog") if p.stat().st_size > 200]
    if not files:
        return "control topic: no commitlog"
    p = rng.choice(files)
    data = bytearray(p.read_bytes())
    pos = 0
    size = int.from_bytes(data[0:4], "big", signed=True)
    magic = int.from_bytes(data[4:8], "big", signed=True)
    if size < 91 or magic != cl.MESSAGE_MAGIC_CODE or pos + size > len(data):
        return "control topic: first record is not a V1 message"
    sys_flag = int.from_bytes(data[36:40], "big")
    body_at = cl.mid_fields_pos(sys_flag) + cl.BODY_REL
    body = int.from_bytes(data[body_at - 4 : body_at], "big", signed=True)
    tl_at = body_at + max(body, 0)
    if tl_at + 1 > size:
        return "control topic: record too short"
    tl = data[tl_at]
    if tl >= 2:
        data[tl_at + 1 : tl_at + 3] = b"\x1b\n"
        p.write_bytes(bytes(data))
    return f"ESC and newline in the first record's topic of {_rel(root, p)}"


MUTATIONS: tuple[Callable[[Path, random.Random], str], ...] = (
    m_bit_flip,
    m_bit_flip,
    m_range,
    m_range,
    m_truncate,
    m_extreme_field,
    m_extreme_field,
    m_extreme_field,
    m_rename,
    m_config,
    m_sparse,
    m_delete,
    m_special,
    m_special,
    m_markers,
    m_control_topic,
)
