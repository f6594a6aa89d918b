"""A test harness around the production index builder: keeps every file it rolls past and
dispatches records given as topic and properties, one at a time or as one chunk."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rmqinspect.format.index import IndexFileBuilder, IndexGeometry, index_keys
from rmqinspect.format.index_build import IndexBuilder
from rmqinspect.format.javahash import index_key_hash

# topic, PHYSICALOFFSET, store timestamp, sysFlag, UNIQ_KEY, KEYS
RecordKeys = tuple[str, int, int, int, str | None, str | None]


def sequence_namer(timestamp: int, sequence: int) -> str:
    """Names that sort after any all-digit name (real index file names are all digits)."""
    return f"~{sequence:06d}"


class BuiltIndex:
    """An :class:`IndexBuilder` (materialising) that keeps all its files in ``files``."""

    def __init__(self, geometry: IndexGeometry, last_file: IndexFileBuilder | None = None):
        self.rolled: list[IndexFileBuilder] = []
        self.builder = IndexBuilder(
            geometry,
            sequence_namer,
            materialise=True,
            last_file=last_file,
            on_rolled=self.rolled.append,
        )

    @property
    def files(self) -> list[IndexFileBuilder]:
        current = self.builder.current
        return self.rolled + ([] if current is None else [current])

    def dispatch(
        self,
        topic: str,
        phy_offset: int,
        store_timestamp: int,
        sys_flag: int,
        uniq_key: str | None,
        keys: str | None,
    ) -> None:
        """One record."""
        self.dispatch_chunk([(topic, phy_offset, store_timestamp, sys_flag, uniq_key, keys)])

    def dispatch_chunk(self, records: Sequence[RecordKeys]) -> None:
        """Records as one :meth:`IndexBuilder.dispatch` call."""
        hashes: list[int] = []
        owners: list[int] = []
        for n, (topic, _, _, _, uniq_key, keys) in enumerate(records):
            found = [index_key_hash(k) for k in index_keys(topic, uniq_key, keys)]
            hashes += found
            owners += [n] * len(found)
        self.builder.dispatch(
            np.array([r[1] for r in records], dtype=np.int64),
            np.array([r[2] for r in records], dtype=np.int64),
            np.array([r[3] for r in records], dtype=np.int64),
            np.array(hashes, dtype=np.int64),
            np.array(owners, dtype=np.int64),
        )
