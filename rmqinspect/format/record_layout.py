"""The CommitLog record's layout (rocketmq-store-format.md §2.2): magic codes, sysFlag bits,
every field position (derived from one header definition) and ``calMsgLength``, with the names
of the sysFlag's transaction and compression bits. :mod:`rmqinspect.format.commitlog` reads
records with them and re-exports them; the numpy and C gathers read the same positions.
"""

from __future__ import annotations

import struct

from rmqinspect.format.crc import masked_crc32

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7, topic length is an i8
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB, topic length is an i16 (5.1.0+)
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194, end-of-file filler
END_FILE_MIN_BLANK_LENGTH = 8
CRC32_RESERVED_LEN = 20  # "__CRC32#" + 0x01 + 10 digits + 0x02

# sysFlag bits (MessageSysFlag)
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700

DEFAULT_COMMITLOG_FILE_SIZE = 1 << 30  # mappedFileSizeCommitLog

# --- record layout (§2.2): every position below derives from these two field lists ------------
#
# A record is FIXED_HEAD, the born host, STORETIMESTAMP, the store host, MID_FIELDS, the body,
# the topic length (i8 in V1, i16 in V2), the topic, PROPERTIESLENGTH (i16) and the properties.
# Hosts are 4 (IPv4) or 16 (IPv6) address bytes plus an i32 port, chosen by sysFlag bits.
FIXED_HEAD = struct.Struct(">iiiiiqqiq")
FIXED_FIELDS = (
    "store_size",
    "magic",
    "body_crc",
    "queue_id",
    "flag",
    "queue_offset",
    "physical_offset_field",
    "sys_flag",
    "born_timestamp",
)
MID_FIELDS_STRUCT = struct.Struct(">iqi")  # RECONSUMETIMES PREPAREDTRANSACTIONOFFSET BODYLENGTH
MID_FIELDS = ("reconsume_times", "prepared_transaction_offset", "body_length")


def _positions(fmt: str, names: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    at = 0
    for name, code in zip(names, fmt.lstrip(">"), strict=True):
        out[name] = at
        at += struct.calcsize(">" + code)
    return out


FIXED_POS = _positions(FIXED_HEAD.format, FIXED_FIELDS)
TOTALSIZE_POS = FIXED_POS["store_size"]  # 0
MAGIC_POS = FIXED_POS["magic"]  # 4
BODYCRC_POS = FIXED_POS["body_crc"]  # 8
QUEUEID_POS = FIXED_POS["queue_id"]  # 12
FLAG_POS = FIXED_POS["flag"]  # 16
QUEUEOFFSET_POS = FIXED_POS["queue_offset"]  # 20
PHYSICALOFFSET_POS = FIXED_POS["physical_offset_field"]  # 28
SYSFLAG_POS = FIXED_POS["sys_flag"]  # 36
BORNTIMESTAMP_POS = FIXED_POS["born_timestamp"]  # 40
BORNHOST_POS = FIXED_HEAD.size  # 48
STORETIMESTAMP_SIZE = 8
# Relative to the end of the store host:
MID_POS = _positions(MID_FIELDS_STRUCT.format, MID_FIELDS)
RECONSUMETIMES_REL = MID_POS["reconsume_times"]  # 0
PREPARED_REL = MID_POS["prepared_transaction_offset"]  # 4
BODYLENGTH_REL = MID_POS["body_length"]  # 12
BODY_REL = MID_FIELDS_STRUCT.size  # 16
IPV4_HOST_SIZE = 8
IPV6_HOST_SIZE = 20


def born_host_size(sys_flag: int) -> int:
    return IPV6_HOST_SIZE if sys_flag & BORNHOST_V6_FLAG else IPV4_HOST_SIZE


def store_host_size(sys_flag: int) -> int:
    return IPV6_HOST_SIZE if sys_flag & STOREHOSTADDRESS_V6_FLAG else IPV4_HOST_SIZE


def store_timestamp_pos(sys_flag: int) -> int:
    """STORETIMESTAMP: 56 for an IPv4 born host, 68 for IPv6."""
    return BORNHOST_POS + born_host_size(sys_flag)


def mid_fields_pos(sys_flag: int) -> int:
    """Where RECONSUMETIMES starts (the end of the store host): 72 for IPv4/IPv4."""
    return store_timestamp_pos(sys_flag) + STORETIMESTAMP_SIZE + store_host_size(sys_flag)


def topic_length_size(magic: int) -> int:
    """The topic length is an i8 in V1 records and an i16 in V2 records."""
    return 2 if magic == MESSAGE_MAGIC_CODE_V2 else 1


# Fixed parts of ``calMsgLength``: everything but the hosts, body, topic and properties.
_FIXED_LENGTH = BORNHOST_POS + STORETIMESTAMP_SIZE + BODY_REL + 2  # 48 + 8 + 16 + PROPLEN(2)

_TRANSACTION_NAMES = {
    TRANSACTION_NOT_TYPE: "not",
    TRANSACTION_PREPARED_TYPE: "prepared",
    TRANSACTION_COMMIT_TYPE: "commit",
    TRANSACTION_ROLLBACK_TYPE: "rollback",
}
TRANSACTION_TYPES = {name: code for code, name in _TRANSACTION_NAMES.items()}
"""The transaction type bits of ``sys_flag`` by name (``--tx-type``)."""
_COMPRESSION_NAMES = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}


def transaction_name(sys_flag: int) -> str:
    """not, prepared, commit or rollback: the transaction type bits of ``sys_flag``."""
    return _TRANSACTION_NAMES[sys_flag & TRANSACTION_TYPE_MASK]


def compression_name(sys_flag: int) -> str | None:
    """Body compression named by ``sys_flag``, or None when the body is stored as sent."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    kind = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    return _COMPRESSION_NAMES.get(kind, f"unknown({kind})")


def body_crc(data: bytes | bytearray | memoryview) -> int:
    """``UtilAll.crc32``: zlib CRC-32 masked to 31 bits."""
    return masked_crc32(data)


def magic_name(magic: int) -> str:
    return f"0x{magic & 0xFFFFFFFF:08X}"


def calc_msg_length(
    sys_flag: int, body_length: int, topic_length: int, properties_length: int, version: int = 1
) -> int:
    """``calMsgLength``: the length a record must have given its variable parts."""
    return (
        _FIXED_LENGTH
        + born_host_size(sys_flag)
        + store_host_size(sys_flag)
        + max(body_length, 0)
        + (2 if version == 2 else 1)
        + topic_length
        + max(properties_length, 0)
    )


MIN_RECORD_SIZE = calc_msg_length(0, 0, 0, 0)  # 91: an empty V1 record with IPv4 hosts
