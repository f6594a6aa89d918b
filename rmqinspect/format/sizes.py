"""Fixed sizes of the consume-queue unit and of the index file's parts
(``ConsumeQueue.CQ_STORE_UNIT_SIZE``, ``IndexHeader.INDEX_HEADER_SIZE``, ``IndexFile``'s
``hashSlotSize`` and ``indexSize``), apart from their codecs so that the CLI's option bounds are
declared without importing numpy."""

from __future__ import annotations

CQ_STORE_UNIT_SIZE = 20  # physical offset (8), size (4), tags code (8)
INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20  # key hash (4), physical offset (8), time diff (4), previous entry (4)
