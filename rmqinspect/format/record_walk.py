"""Walking a commitlog file's records: following TOTALSIZE (the only sequential part of
reading many records) through message headers, in runs of at most :data:`RUN_RECORDS`.
:mod:`rmqinspect.format.columns` gathers the walked records' fields and re-exports these names.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from rmqinspect.format import commitlog as cl
from rmqinspect.format import speedups
from rmqinspect.format.npbytes import I64, Buffer, Mask, be_ints

RUN_RECORDS = 1 << 14  # records per run: bounds the columns' memory, not the file size
_HEAD2 = struct.Struct(">ii")
_V1 = cl.MESSAGE_MAGIC_CODE
_V2 = cl.MESSAGE_MAGIC_CODE_V2


class WalkStop(StrEnum):
    """Why a walk ended: a BLANK, its record limit, a magic that is no message's, or a TOTALSIZE
    that cannot be a record (below the minimum or past the buffer)."""

    BLANK = "blank"
    LIMIT = "limit"
    BAD_MAGIC = "bad_magic"
    BAD_SIZE = "bad_size"


@dataclass(frozen=True, slots=True, eq=False)
class Walk:
    """Record starts of a run and their TOTALSIZE, and where and why the run ended."""

    positions: I64
    store_size: I64
    end: int  # buffer position after the last record of the run
    stop: WalkStop

    def __len__(self) -> int:
        return len(self.positions)


def headers_plausible(buf: Buffer, positions: I64, sizes: I64, accept_v2: bool) -> Mask:
    """Which of the records at ``positions`` with TOTALSIZE ``sizes`` have a message magic (V2
    only with ``accept_v2``), at least ``MIN_RECORD_SIZE`` bytes and their end inside ``buf``:
    what :func:`~rmqinspect.format.columns.gather` takes for granted."""
    ok: Mask = (sizes >= cl.MIN_RECORD_SIZE) & (positions + sizes <= len(buf))
    magic = be_ints(np.frombuffer(buf, np.uint8), np.where(ok, positions, 0) + cl.MAGIC_POS, 4)
    ok &= (magic == _V1) | ((magic == _V2) & accept_v2)
    return ok


def walk(
    buf: Buffer, pos: int = 0, *, accept_v2: bool = True, max_records: int = RUN_RECORDS
) -> Walk:
    """Follow TOTALSIZE from ``pos`` through headers whose magic is a message magic (V2 only
    with ``accept_v2``) and whose size is plausible (at least ``MIN_RECORD_SIZE``, inside the
    buffer), for at most ``max_records`` records. Checksums and inner lengths are not looked at.

    The chain is followed by :func:`rmqinspect.format.speedups.walk_chain` (in C when built).
    """
    magics = (_V1, _V2) if accept_v2 else (_V1,)
    p, sizes, end = speedups.walk_chain(buf, pos, max_records, cl.MIN_RECORD_SIZE, magics)
    if len(p) == max_records:
        return Walk(p, sizes, end, WalkStop.LIMIT)
    return Walk(p, sizes, end, stop_reason(buf, end, accept_v2))


def stop_reason(buf: Buffer, at: int, accept_v2: bool) -> WalkStop:
    """Why a walk that ended at ``at`` short of its record limit ended."""
    if at + 8 > len(buf):
        return WalkStop.BAD_SIZE
    _, magic = _HEAD2.unpack_from(buf, at)
    if magic == _V1 or (accept_v2 and magic == _V2):
        return WalkStop.BAD_SIZE
    return WalkStop.BLANK if magic == cl.BLANK_MAGIC_CODE else WalkStop.BAD_MAGIC
