"""One decoded CommitLog message (:class:`MessageRecord`, named after RocketMQ's fields) and
its 5.2+ whole-record property CRC (rocketmq-store-format.md §3.2). The decoders that build
records are :mod:`rmqinspect.format.commitlog`'s, which re-exports these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rmqinspect.format import properties as props
from rmqinspect.format.host import HostAddress
from rmqinspect.format.record_layout import (
    CRC32_RESERVED_LEN,
    MESSAGE_MAGIC_CODE_V2,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    body_crc,
    compression_name,
    transaction_name,
)

if TYPE_CHECKING:
    from rmqinspect.format.dledger import EntryHeader


@dataclass(slots=True)
class MessageRecord:
    """One decoded CommitLog message, named after RocketMQ's fields."""

    position: int  # where the record starts in the commitlog stream (file start + position)
    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset_field: int  # PHYSICALOFFSET as stored; ``position`` is where it is
    sys_flag: int
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    body_length: int
    body: bytes | None  # None when decoded without the body
    topic: str
    properties_raw: bytes
    properties: dict[str, str] = field(default_factory=dict)
    prop_crc: PropCrc | None = None  # 5.2+ __CRC32# property; read with the body
    entry: EntryHeader | None = None  # the DLedger entry holding the record, in a DLedger store

    @property
    def version(self) -> str:
        return "v2" if self.magic == MESSAGE_MAGIC_CODE_V2 else "v1"

    @property
    def tags(self) -> str | None:
        return self.properties.get(props.TAGS)

    @property
    def keys(self) -> list[str]:
        return props.split_keys(self.properties.get(props.KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(props.UNIQ_KEY)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_TYPE_MASK

    @property
    def transaction_name(self) -> str:
        return transaction_name(self.sys_flag)

    @property
    def compression(self) -> str | None:
        return compression_name(self.sys_flag)

    @property
    def body_crc_ok(self) -> bool | None:
        """Whether BODYCRC matches the body; None when the body was not read."""
        if self.body is None:
            return None
        return body_crc(self.body) == self.body_crc

    @property
    def end(self) -> int:
        return self.position + self.store_size

    @property
    def enters_consume_queue(self) -> bool:
        """NOT and COMMIT messages are dispatched to a consume queue; PREPARED/ROLLBACK are not."""
        return self.transaction_type in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)

    @property
    def is_indexed(self) -> bool:
        """Every type but ROLLBACK reaches the index (PREPARED included)."""
        return self.transaction_type != TRANSACTION_ROLLBACK_TYPE

    def index_keys(self) -> list[str]:
        """The keys ``IndexService.buildIndex`` puts for this record, in order."""
        return props.index_key_values(self.uniq_key, self.properties.get(props.KEYS))


# --- 5.2+ whole-record property CRC (§3.2) ---------------------------------------------------


def decode_prop_crc_digits(text: str) -> int | None:
    """The broker reads the digits from the last to the first (``'0'..'9'`` only: a digit
    ``str.isdigit`` knows beyond those, such as ``²``, is no digit to it)."""
    if not text or len(text) > CRC32_RESERVED_LEN or not (text.isascii() and text.isdigit()):
        return None
    return int(text[::-1])


def prop_crc_computed(buf: bytes | memoryview, pos: int, store_size: int) -> int | None:
    """Masked CRC32 over the record minus its 20-byte CRC tail; None if it does not fit."""
    if store_size < CRC32_RESERVED_LEN or pos + store_size > len(buf):
        return None
    return body_crc(buf[pos : pos + store_size - CRC32_RESERVED_LEN])


@dataclass(frozen=True, slots=True)
class PropCrc:
    """A record's ``__CRC32#`` property: its digits, the value they give (None when they are
    not digits) and the CRC the record's bytes give (None when the record does not fit)."""

    raw: str
    stored: int | None
    computed: int | None

    @property
    def match(self) -> bool:
        return self.stored is not None and self.stored == self.computed


def record_prop_crc(
    buf: bytes | memoryview, pos: int, store_size: int, properties: Mapping[str, str]
) -> PropCrc | None:
    """The property CRC as ``forceVerifyPropCRC`` checks it: the ``__CRC32#`` property's digits
    against the CRC of the record minus its 20-byte tail; None without the property."""
    raw = properties.get(props.CRC32)
    if raw is None:
        return None
    return PropCrc(raw, decode_prop_crc_digits(raw), prop_crc_computed(buf, pos, store_size))


CRC_TAIL_PREFIX = (props.CRC32 + props.NAME_VALUE_SEPARATOR).encode()


def read_prop_crc(buf: bytes | memoryview, pos: int, store_size: int) -> PropCrc | None:
    """Return the property CRC of the record at ``pos`` when its last 20 bytes hold one."""
    if store_size < CRC32_RESERVED_LEN or pos + store_size > len(buf):
        return None
    tail = bytes(buf[pos + store_size - CRC32_RESERVED_LEN : pos + store_size])
    if not tail.startswith(CRC_TAIL_PREFIX) or tail[-1:] != b"\x02":
        return None
    raw = tail[len(CRC_TAIL_PREFIX) : -1].decode("ascii", "replace")
    computed = body_crc(buf[pos : pos + store_size - CRC32_RESERVED_LEN])
    return PropCrc(raw, decode_prop_crc_digits(raw), computed)
