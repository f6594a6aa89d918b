"""The exported tables and their Arrow schemas: the one definition both engines write.

Column names follow the JSON of the inspection commands. Every column is nullable because Spark
writes Parquet columns as nullable whatever the source says; declaring them so keeps the two
engines' files identical. Timestamps are ``timestamp[ms, UTC]``.
"""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa

from rmqinspect.format.batch import KEYS_TYPE, PROPERTIES_TYPE

MS_UTC = pa.timestamp("ms", tz="UTC")
TOPIC_PARTITION = "topic_partition"  # the Hive partition column of ``messages``


class Table(StrEnum):
    MESSAGES = "messages"
    CONSUME_QUEUE = "consume_queue"
    INDEX_ENTRIES = "index_entries"
    CONSUMER_OFFSETS = "consumer_offsets"
    GROUP_OFFSETS = "group_offsets"
    FINDINGS = "findings"
    MESSAGE_COPIES = "message_copies"
    TIMERS = "timers"


MESSAGES = pa.schema(
    [
        ("physical_offset", pa.int64()),
        ("store_size", pa.int32()),
        ("version", pa.string()),
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("sys_flag", pa.int32()),
        ("transaction", pa.string()),
        ("flag", pa.int32()),
        ("body_crc", pa.int32()),
        ("body_crc_ok", pa.bool_()),
        ("born_timestamp", MS_UTC),
        ("born_host", pa.string()),
        ("store_timestamp", MS_UTC),
        ("store_host", pa.string()),
        ("reconsume_times", pa.int32()),
        ("prepared_transaction_offset", pa.int64()),
        ("properties", PROPERTIES_TYPE),
        ("tags", pa.string()),
        ("keys", KEYS_TYPE),
        ("uniq_key", pa.string()),
        ("msg_id", pa.string()),
        ("body_length", pa.int32()),
        ("compression", pa.string()),
        ("body", pa.binary()),  # as its consumer gets it: a compressed body decompressed
        ("body_stored", pa.binary()),  # a compressed body as stored; null for the others
        ("body_error", pa.string()),  # why a compressed body does not decompress
        ("physical_offset_field", pa.int64()),  # null unless it differs from physical_offset
        ("file", pa.string()),
        ("file_position", pa.int64()),
        ("restart_keeps", pa.bool_()),  # null when the broker would refuse to start
        ("record_crc32c", pa.int64()),
        ("dledger_index", pa.int64()),  # the entry's Raft index and term; null in a plain store
        ("dledger_term", pa.int64()),
        (TOPIC_PARTITION, pa.string()),
    ]
)

CONSUME_QUEUE = pa.schema(
    [
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("physical_offset", pa.int64()),
        ("size", pa.int32()),
        ("tags_code", pa.int64()),
        ("tags_code_kind", pa.string()),
        ("status", pa.string()),
        ("detail", pa.string()),
        ("file", pa.string()),
        ("file_position", pa.int64()),
    ]
)

INDEX_ENTRIES = pa.schema(
    [
        ("file", pa.string()),
        ("entry", pa.int32()),
        ("key_hash", pa.int32()),
        ("slot", pa.int32()),
        ("physical_offset", pa.int64()),
        ("time_diff", pa.int32()),
        ("store_timestamp", MS_UTC),
        ("prev", pa.int32()),
    ]
)

CONSUMER_OFFSETS = pa.schema(
    [
        ("table", pa.string()),
        ("group", pa.string()),
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("offset", pa.int64()),
        ("bak_offset", pa.int64()),
        ("bak_note", pa.string()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),
        ("lag", pa.int64()),
        ("status", pa.string()),
        ("delay_level", pa.int32()),
    ]
)

# ``groups``' queue rows: the next pull at each committed offset, on disk and after the restart.
GROUP_OFFSETS = pa.schema(
    [
        ("group", pa.string()),
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("kind", pa.string()),
        ("offset", pa.int64()),
        ("bak_offset", pa.int64()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),
        ("lag", pa.int64()),
        ("last_consumed_store_timestamp", MS_UTC),
        ("next_pull_status", pa.string()),
        ("next_offset", pa.int64()),
        ("moved", pa.bool_()),
        ("replayed", pa.int64()),
        ("skipped", pa.int64()),
        ("min_offset_after_restart", pa.int64()),
        ("max_offset_after_restart", pa.int64()),
        ("lag_after_restart", pa.int64()),
        ("next_pull_status_after_restart", pa.string()),
        ("next_offset_after_restart", pa.int64()),
        ("moved_after_restart", pa.bool_()),
        ("replayed_after_restart", pa.int64()),
        ("skipped_after_restart", pa.int64()),
        ("broker_version", pa.string()),
    ]
)

# Shaped for ``verify``'s findings: one row per problem, located by file and offset.
FINDINGS = pa.schema(
    [
        ("check_id", pa.string()),  # not "check": a reserved word in SQL (DuckDB)
        ("severity", pa.string()),
        ("file", pa.string()),
        ("file_position", pa.int64()),
        ("physical_offset", pa.int64()),
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("detail", pa.string()),
    ]
)

# One row per copy the broker stored of a message (analysis/copies.py), with where the copy
# says its source is: join on from_physical_offset, or on uniq_key where it is null.
MESSAGE_COPIES = pa.schema(
    [
        ("physical_offset", pa.int64()),
        ("from_physical_offset", pa.int64()),
        ("linked_by", pa.string()),
        ("uniq_key", pa.string()),
        ("origin_message_id", pa.string()),
        ("role", pa.string()),
        ("group", pa.string()),
        ("reconsume_times", pa.int32()),
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("store_timestamp", MS_UTC),
    ]
)

# One row per timerlog unit of the 5.x timer store (export/timers.py): its fields, and what
# ``timers`` says of it (state: pending, delivered, recalled, rolled, unreadable, or recall for
# a recall marker's unit; late: overdue, skipped_by_restart or due, for a pending entry).
TIMERS = pa.schema(
    [
        ("timerlog_offset", pa.int64()),
        ("prev_pos", pa.int64()),
        ("magic", pa.int32()),
        ("write_timestamp", MS_UTC),
        ("delayed_time_offset_ms", pa.int32()),
        ("slot_timestamp", MS_UTC),
        ("physical_offset", pa.int64()),
        ("store_size", pa.int32()),
        ("topic_hash", pa.int32()),
        ("state", pa.string()),
        ("late", pa.string()),
        ("real_topic", pa.string()),
        ("real_queue_id", pa.int32()),
        ("uniq_key", pa.string()),
        ("fire_timestamp", MS_UTC),
        ("queue_offset", pa.int64()),
        ("roll_times", pa.int32()),
        ("recall_target", pa.string()),
        ("recall_matched", pa.bool_()),
        ("file", pa.string()),
        ("file_position", pa.int64()),
    ]
)

SCHEMAS: dict[Table, pa.Schema] = {
    Table.MESSAGES: MESSAGES,
    Table.CONSUME_QUEUE: CONSUME_QUEUE,
    Table.INDEX_ENTRIES: INDEX_ENTRIES,
    Table.CONSUMER_OFFSETS: CONSUMER_OFFSETS,
    Table.GROUP_OFFSETS: GROUP_OFFSETS,
    Table.FINDINGS: FINDINGS,
    Table.MESSAGE_COPIES: MESSAGE_COPIES,
    Table.TIMERS: TIMERS,
}

# A fleet export's first partition level, in every table: the store's broker name.
BROKER_PARTITION = "broker"
PARTITION_COLUMN: dict[Table, str | None] = {t: None for t in Table} | {
    Table.MESSAGES: TOPIC_PARTITION
}


def file_schema(table: Table) -> pa.Schema:
    """The columns stored in the table's Parquet files (the partition column is in the path)."""
    column = PARTITION_COLUMN[table]
    schema = SCHEMAS[table]
    return schema if column is None else schema.remove(schema.get_field_index(column))
