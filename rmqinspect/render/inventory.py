"""Rendering of ``info``: a stable JSON document, or a few rich tables."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from rmqinspect.analysis.inventory import Inventory
from rmqinspect.analysis.ledger import LedgerSummary
from rmqinspect.analysis.queues import QueueBounds
from rmqinspect.format.config import SubscriptionGroupConfig, TopicConfig
from rmqinspect.render.output import (
    Column,
    OutputFormat,
    RowTable,
    json_text,
    key_value_table,
    print_document,
    print_table,
    to_jsonable,
)
from rmqinspect.render.values import size_cell, time_cell, with_times


def queue_json(q: QueueBounds) -> dict[str, Any]:
    return {
        "topic": q.topic,
        "queue_id": q.queue_id,
        "min_offset": q.min_offset,
        "max_offset": q.max_offset,
        "message_count": q.message_count,
        "file_count": q.file_count,
        "bytes": q.bytes,
        "first_unit": q.first_unit,
        "pre_blank_units": q.pre_blank_units,
        "max_physic_offset": q.max_physic_offset,
        "gaps": [list(g) for g in q.gaps],
        "note": q.min_note or None,
    }


def inventory_json(inv: Inventory) -> dict[str, Any]:
    cp = inv.checkpoint.checkpoint
    checkpoint: dict[str, Any] = {
        "path": inv.checkpoint.path,
        "present": inv.checkpoint.present,
        "error": inv.checkpoint.error,
    }
    if cp is not None:
        checkpoint.update(
            with_times(
                {
                    "physic_msg_timestamp": cp.physic_msg_timestamp,
                    "logics_msg_timestamp": cp.logics_msg_timestamp,
                    "index_msg_timestamp": cp.index_msg_timestamp,
                }
            )
        )
        checkpoint["master_flushed_offset"] = cp.master_flushed_offset
        checkpoint["confirm_phy_offset"] = cp.confirm_phy_offset
        checkpoint["size_anomaly"] = cp.size_anomaly
    c = inv.commitlog
    return {
        "store": inv.root,
        "profile": {
            "version": inv.profile,
            "explicit": inv.profile_explicit,
            "reasons": list(inv.profile_reasons),
        },
        "shutdown": {
            "clean": inv.clean_shutdown,
            "abort_file": not inv.clean_shutdown,
            "abort_content": inv.abort_content or None,
        },
        "families": [to_jsonable(f) for f in inv.families],
        "commitlog": with_times(
            {
                "min_offset": c.min_offset,
                "max_offset": c.max_offset,
                "max_offset_basis": c.max_offset_basis,
                "last_record_offset": c.last_record_offset,
                "first_store_timestamp": c.first_store_timestamp,
                "last_store_timestamp": c.last_store_timestamp,
            }
        ),
        "topics": [
            {
                "topic": t.topic,
                "queue_count": t.queue_count,
                "message_count": t.message_count,
                "queues": [queue_json(q) for q in t.queues],
            }
            for t in inv.topics
        ],
        "index_files": [
            {
                "name": f.name,
                "bytes": f.bytes,
                "header": with_times(to_jsonable(f.header)) if f.header is not None else None,
                "error": f.error,
            }
            for f in inv.index_files
        ],
        "checkpoint": checkpoint,
        "config_files": [to_jsonable(f) for f in inv.config_files if f.on_disk],
        "unsupported": [to_jsonable(u) for u in inv.unsupported],
        "problems": [to_jsonable(p) for p in inv.problems],
        "dledger": to_jsonable(inv.dledger) if inv.dledger is not None else None,
        "topic_configs": [topic_config_json(t) for t in inv.topic_configs],
        "subscription_groups": [group_config_json(g) for g in inv.subscription_groups],
        "config_not_read": [
            {"path": f"config/{name}/", "holds": what} for name, what in inv.config_not_read
        ],
    }


def topic_config_json(t: TopicConfig) -> dict[str, Any]:
    """One topics.json entry, as mqadmin ``topicStatus``/``updateTopic`` name its settings."""
    return {
        "topic": t.topic_name,
        "read_queue_nums": t.read_queue_nums,
        "write_queue_nums": t.write_queue_nums,
        "perm": t.perm,
        "perm_text": t.perm_text,
        "topic_filter_type": t.topic_filter_type,
        "topic_sys_flag": t.topic_sys_flag,
        "order": t.order,
        "attributes": t.attributes,
    }


def group_config_json(g: SubscriptionGroupConfig) -> dict[str, Any]:
    """One subscriptionGroup.json entry (mqadmin ``getConsumerConfig``); the 5.x-only settings
    are null where the file has none."""
    return {
        "group": g.group_name,
        "consume_enable": g.consume_enable,
        "consume_from_min_enable": g.consume_from_min_enable,
        "consume_broadcast_enable": g.consume_broadcast_enable,
        "retry_queue_nums": g.retry_queue_nums,
        "retry_max_times": g.retry_max_times,
        "broker_id": g.broker_id,
        "which_broker_when_consume_slowly": g.which_broker_when_consume_slowly,
        "consume_message_orderly": g.consume_message_orderly,
        "consume_timeout_minute": g.consume_timeout_minute,
        "group_retry_policy": to_jsonable(g.group_retry_policy),
        "group_sys_flag": g.group_sys_flag,
        "attributes": g.attributes,
    }


def render_inventory(inv: Inventory, fmt: OutputFormat) -> None:
    if print_document(inventory_json(inv), fmt):
        return
    for table in inventory_tables(inv):
        print_table(table)


def _ledger_tables(d: LedgerSummary) -> list[Table]:
    """The DLedger state on disk, and each data file's entry range."""

    def entries(first: int | None, last: int | None) -> str:
        return f"{'?' if first is None else first}..{'?' if last is None else last}"

    copies = [
        name for name, there in ((".bak", d.checkpoint_bak), (".tmp", d.checkpoint_tmp)) if there
    ]
    rows: list[tuple[str, object]] = [
        ("home", f"{d.home} (self id {d.self_id})"),
        ("entries", f"{entries(d.begin_index, d.end_index)} (terms {d.begin_term}..{d.end_term})"),
        ("data end", f"{d.data_end} ({d.data_end_reason})"),
        (
            "checkpoint",
            f"committedIndex {d.checkpoint_committed_index}, endIndex {d.checkpoint_end_index}"
            + (f" (also {', '.join(copies)})" if copies else ""),
        ),
        ("committed position", "unknown" if d.committed_pos is None else d.committed_pos),
        ("current term", f"{d.current_term} (voted for {d.vote_leader or 'nobody'})"),
        ("index files", ", ".join(d.index_files) or "none"),
    ]
    files = Table(title="DLedger data files", title_justify="left")
    for col in ("file", "entries", "terms", "data end", "note"):
        files.add_column(col)
    for f in d.files:
        files.add_row(
            f.name,
            entries(f.first_index, f.last_index),
            entries(f.first_term, f.last_term),
            "" if f.end is None else f"{f.end} ({f.end_reason})",
            f.problem or "",
        )
    return [key_value_table("DLedger", rows), files]


def inventory_tables(inv: Inventory) -> list[Table | RowTable]:
    tables: list[Table | RowTable] = []
    shutdown = "clean (no abort file)" if inv.clean_shutdown else "CRASHED: abort file present"
    if inv.abort_content:
        shutdown += f" (abort holds {inv.abort_content!r})"
    how = "given" if inv.profile_explicit else "detected"
    cp = inv.checkpoint.checkpoint
    c = inv.commitlog
    rows: list[tuple[str, object]] = [
        ("store", inv.root),
        ("profile", f"{inv.profile} ({how}: {'; '.join(inv.profile_reasons)})"),
        ("last shutdown", shutdown),
        ("commitlog min offset", c.min_offset),
        ("commitlog max offset", f"{c.max_offset} ({c.max_offset_basis})"),
        ("first store time", time_cell(c.first_store_timestamp)),
        ("last store time", time_cell(c.last_store_timestamp)),
    ]
    if cp is not None:
        rows += [
            ("checkpoint physicMsgTimestamp", time_cell(cp.physic_msg_timestamp)),
            ("checkpoint logicsMsgTimestamp", time_cell(cp.logics_msg_timestamp)),
            ("checkpoint indexMsgTimestamp", time_cell(cp.index_msg_timestamp)),
        ]
        if cp.master_flushed_offset or cp.confirm_phy_offset:
            rows += [
                ("checkpoint masterFlushedOffset", cp.master_flushed_offset),
                ("checkpoint confirmPhyOffset", cp.confirm_phy_offset),
            ]
        if cp.size_anomaly:
            rows.append(("checkpoint anomaly", cp.size_anomaly))
    else:
        rows.append(("checkpoint", inv.checkpoint.error))
    tables.append(key_value_table("Store", rows))
    if inv.dledger is not None:
        tables.extend(_ledger_tables(inv.dledger))

    fam = Table(title="File families", title_justify="left")
    for col in ("family", "files", "bytes", "file size", "offsets", "gaps"):
        fam.add_column(col)
    for f in inv.families:
        span = "" if f.first_offset is None else f"[{f.first_offset}, {f.end_offset})"
        gaps = ", ".join(f"[{a}, {b})" for a, b in f.gaps) or ""
        fam.add_row(
            f.name,
            str(f.file_count),
            size_cell(f.bytes),
            "" if f.file_size is None else str(f.file_size),
            span,
            gaps,
        )
    tables.append(fam)

    # A store can hold thousands of queues: the row renderer draws them.
    queues = RowTable(
        "Topics and queues",
        [
            Column("topic"),
            Column("queue", whole=True),
            Column("min offset", right=True, whole=True),
            Column("max offset", right=True, whole=True),
            Column("messages", right=True, whole=True),
            Column("files", whole=True),
            Column("note", fold=True),
        ],
    )
    for t in inv.topics:
        for q in t.queues:
            queues.add_row(
                t.topic,
                q.queue_id,
                q.min_offset,
                q.max_offset,
                q.message_count,
                q.file_count,
                q.min_note,
            )
    tables.append(queues)

    if inv.index_files:
        idx = Table(title="Index files", title_justify="left")
        for col in ("file", "bytes", "entries", "begin time", "end time", "phy offsets"):
            idx.add_column(col)
        for ix in inv.index_files:
            h = ix.header
            if h is None:
                idx.add_row(ix.name, str(ix.bytes), ix.error or "", "", "", "")
                continue
            idx.add_row(
                ix.name,
                str(ix.bytes),
                str(h.entry_count),
                time_cell(h.begin_timestamp),
                time_cell(h.end_timestamp),
                f"{h.begin_phy_offset}..{h.end_phy_offset}",
            )
        tables.append(idx)

    cfg = Table(title="Config files", title_justify="left")
    for col in ("file", "main", ".bak", "broker uses", "entries", "note"):
        cfg.add_column(col)
    for cf in inv.config_files:
        if not cf.on_disk:
            continue
        notes = [e for e in (cf.main_error, cf.bak_error) if e]
        if cf.bak_differs:
            notes.append(".bak parses to different values (the previous generation)")
        if cf.tmp_present:
            notes.append(".tmp left by an interrupted 4.9 persist")
        if not cf.broker_starts:
            notes.append("the broker refuses to start: .bak cannot be decoded")
        notes.extend(cf.problems)
        used = {"main": "main file", "bak": "FALLBACK to .bak", "none": "nothing (empty table)"}
        cfg.add_row(
            cf.name,
            cf.main_state,
            cf.bak_state,
            used.get(cf.source, cf.source),
            "" if cf.entries is None else str(cf.entries),
            "; ".join(notes),
        )
    tables.append(cfg)

    tables.extend(_config_tables(inv))

    if inv.unsupported or inv.problems:
        issues = Table(title="Not supported / problems", title_justify="left")
        issues.add_column("kind")
        issues.add_column("path")
        issues.add_column("what")
        for u in inv.unsupported:
            parts = ", ".join(to_jsonable(u.takes_over))
            refused = f"; answers read from {parts} are refused" if parts else ""
            issues.add_row(f"unsupported: {u.kind}", u.path, u.note + refused)
        for p in inv.problems:
            fatal = " (the broker fails to load)" if p.broker_fails_to_load else ""
            issues.add_row(p.kind, p.path, p.message + fatal)
        tables.append(issues)
    return tables


def _yes(flag: bool | None) -> str:
    return "" if flag is None else "yes" if flag else "no"


def _config_tables(inv: Inventory) -> list[Table | RowTable]:
    """The topics and groups the broker would load, and the RocksDB config not read."""
    out: list[Table | RowTable] = []
    if inv.topic_configs:
        topics = RowTable(
            "Topic configs (topics.json)",
            [
                Column("topic"),
                Column("read queues", right=True, whole=True),
                Column("write queues", right=True, whole=True),
                Column("perm", whole=True),
                Column("filter", whole=True, drop=2),
                Column("sys flag", right=True, whole=True, drop=3),
                Column("order", whole=True),
                Column("attributes", drop=1),
            ],
        )
        for t in inv.topic_configs:
            attributes = ", ".join(f"{k}={v}" for k, v in (t.attributes or {}).items())
            topics.add_row(
                t.topic_name,
                t.read_queue_nums,
                t.write_queue_nums,
                t.perm_text,
                t.topic_filter_type,
                t.topic_sys_flag,
                _yes(t.order),
                attributes,
            )
        out.append(topics)
    if inv.subscription_groups:
        groups = RowTable(
            "Subscription groups (subscriptionGroup.json)",
            [
                Column("group"),
                Column("consume", whole=True),
                Column("broadcast", whole=True),
                Column("retry max", right=True, whole=True),
                Column("retry queues", right=True, whole=True),
                Column("broker id", right=True, whole=True, drop=2),
                Column("when slow", right=True, whole=True, drop=3),
                Column("retry policy", fold=True, drop=1),
            ],
        )
        for g in inv.subscription_groups:
            policy = "" if g.group_retry_policy is None else json_text(g.group_retry_policy, None)
            groups.add_row(
                g.group_name,
                _yes(g.consume_enable),
                _yes(g.consume_broadcast_enable),
                g.retry_max_times,
                g.retry_queue_nums,
                g.broker_id,
                g.which_broker_when_consume_slowly,
                policy,
            )
        out.append(groups)
    if inv.config_not_read:
        rows = [
            (f"config/{name}/", f"{what}: RocksDB (5.x), not read")
            for name, what in inv.config_not_read
        ]
        out.append(key_value_table("Config not read", rows))
    return out
