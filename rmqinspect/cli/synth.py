"""``rmqinspect synth OUT_DIR``: write a synthetic store for demos, tests and benchmarks."""

from __future__ import annotations

import enum
import os
import shutil
import time
from pathlib import Path
from typing import Annotated

import typer

from rmqinspect.cli.common import handle_errors
from rmqinspect.cli.options import FormatOpt, choice_metavar, choice_parser, hidden_alias
from rmqinspect.format.commitlog import DEFAULT_COMMITLOG_FILE_SIZE
from rmqinspect.format.compression import COMPRESS_OVER, Codec
from rmqinspect.format.consumequeue import DEFAULT_CQ_FILE_SIZE
from rmqinspect.format.index import DEFAULT_INDEX_NUM, DEFAULT_SLOT_NUM
from rmqinspect.format.profile import Profile
from rmqinspect.render.output import OutputFormat
from rmqinspect.render.synth import render_synth
from rmqinspect.synth import damage, timer_damage
from rmqinspect.synth.rocksdb import move_queues_to_rocksdb
from rmqinspect.synth.workload import WorkloadConfig, topic_name, write_workload
from rmqinspect.synth.writer import StoreLayout, StoreSummary


class DamageKind(enum.StrEnum):
    TORN_TAIL = "torn-tail"
    FLIP_BODY = "flip-body"
    ZERO_REGION = "zero-region"
    CQ_AHEAD = "cq-ahead"
    MISSING_CQ = "missing-cq"
    STALE_TAIL = "stale-tail"
    TORN_HEADER = "torn-header"
    TIMER_CYCLE = "timer-cycle"
    TIMER_CROSS_SLOT = "timer-cross-slot"
    TIMER_TRUNCATED = "timer-truncated"
    TIMER_COMMITLOG_CUT = "timer-commitlog-cut"
    TIMER_CHECKPOINT_BEHIND = "timer-checkpoint-behind"


_ZERO_REGION_BYTES = 256


def _apply(kind: DamageKind, root: Path, summary: StoreSummary) -> damage.Damage:
    """The damage helper behind each ``--damage`` choice, aimed at the first queue or the
    middle of the last commitlog file."""
    topic = topic_name(0)
    if kind is DamageKind.TORN_TAIL:
        return damage.torn_tail(root)
    if kind is DamageKind.FLIP_BODY:
        return damage.flip_body_byte(root)
    if kind is DamageKind.ZERO_REGION:
        # The last file holding data: after --crash the newest file is the pre-allocated empty one.
        holding = [int(n) for n in summary.commitlog_files if int(n) < summary.commitlog_end]
        last_start = max(holding, default=0)
        middle = (last_start + summary.commitlog_end) // 2
        return damage.zero_region(root, middle, middle + _ZERO_REGION_BYTES)
    if kind is DamageKind.CQ_AHEAD:
        return damage.cq_ahead_of_commitlog(root, topic, 0)
    if kind is DamageKind.MISSING_CQ:
        return damage.remove_cq_dir(root, topic, 0)
    if kind is DamageKind.TORN_HEADER:
        return damage.torn_entry_header(root)
    if kind is DamageKind.TIMER_CYCLE:
        return timer_damage.chain_cycle(root)
    if kind is DamageKind.TIMER_CROSS_SLOT:
        return timer_damage.chain_into_other_slot(root)
    if kind is DamageKind.TIMER_TRUNCATED:
        return timer_damage.truncated_timerlog(root)
    if kind is DamageKind.TIMER_CHECKPOINT_BEHIND:
        return timer_damage.checkpoint_behind(root)
    if kind is DamageKind.TIMER_COMMITLOG_CUT:
        return timer_damage.commitlog_cut_under_timer(root, summary.commitlog_end)
    return damage.stale_bytes_past_write_position(root)


@handle_errors
def synth(
    out_dir: Annotated[
        Path, typer.Argument(help="New store directory; must not exist or be empty.")
    ],
    messages: Annotated[int, typer.Option("--messages", min=0, help="Messages.")] = 2000,
    body_size: Annotated[
        int, typer.Option("--body-size", min=0, help="Typical body size in bytes.")
    ] = 512,
    topics: Annotated[int, typer.Option("--topics", min=1, max=702, help="Topics.")] = 3,
    queues: Annotated[int, typer.Option("--queues", min=1, max=1024, help="Queues per topic.")] = 4,
    commitlog_file_size: Annotated[
        int, typer.Option("--commitlog-file-size", min=64, help="mappedFileSizeCommitLog.")
    ] = DEFAULT_COMMITLOG_FILE_SIZE,
    cq_file_size: Annotated[
        int, typer.Option("--cq-file-size", min=20, help="mappedFileSizeConsumeQueue.")
    ] = DEFAULT_CQ_FILE_SIZE,
    index_slots: Annotated[
        int, typer.Option("--index-slots", min=1, help="maxHashSlotNum.")
    ] = DEFAULT_SLOT_NUM,
    index_entries: Annotated[
        int, typer.Option("--index-entries", min=2, help="maxIndexNum.")
    ] = DEFAULT_INDEX_NUM,
    profile: Annotated[
        Profile,
        typer.Option(
            "--profile",
            parser=choice_parser(Profile),
            metavar=choice_metavar(Profile),
            help="Broker line to imitate.",
        ),
    ] = Profile.V4_9,
    crash: Annotated[
        bool,
        typer.Option(
            "--crash",
            help="Leave abort, a lagging checkpoint and an undispatched last burst.",
        ),
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same bytes).")] = 42,
    plain: Annotated[
        bool,
        typer.Option(
            "--plain", help="Only plain messages: no delay, transaction, retry, IPv6 or V2."
        ),
    ] = False,
    fate: Annotated[
        bool,
        typer.Option(
            "--fate",
            help="Run consumer groups, the schedule service and the transaction check over "
            "the messages: retry, delay and DLQ chains, POP retries (5.x), resolved and pending "
            "transactions, consumer and delay offsets (one past its queue's max).",
        ),
    ] = False,
    pop: Annotated[
        bool,
        typer.Option(
            "--pop",
            help="With --fate on a 5.x profile: groupPop's POP checkpoints and acks, stored "
            "through the timer topic into rmq_sys_REVIVE_LOG_DefaultCluster as the broker "
            "stores them, and the revive service's progress (docs/pop.md).",
        ),
    ] = False,
    prop_crc: Annotated[
        bool, typer.Option("--prop-crc", help="enabledAppendPropCRC (profile 5.3 only).")
    ] = False,
    dledger: Annotated[
        bool,
        typer.Option(
            "--dledger",
            help="enableDLegerCommitLog: the commitlog is DLedger's, in dledger-n0/ (no "
            "commitlog/); --crash then also leaves DLedger's checkpoint behind the data.",
        ),
    ] = False,
    compress_type: Annotated[
        Codec,
        typer.Option(
            "--compress-type",
            parser=choice_parser(Codec),
            metavar=choice_metavar(Codec),
            help="The producer's codec (rocketmq.message.compressType; 4.9 producers: zlib).",
        ),
    ] = Codec.ZLIB,
    compress_over: Annotated[
        int,
        typer.Option(
            "--compress-over",
            min=0,
            help="compressMsgBodyOverHowmuch: bodies of this many bytes or more are compressed.",
        ),
    ] = COMPRESS_OVER,
    damage_kinds: Annotated[
        list[DamageKind] | None,
        typer.Option(
            "--damage",
            parser=choice_parser(DamageKind),
            metavar=choice_metavar(DamageKind),
            help="Damage to apply afterwards (repeatable).",
        ),
    ] = None,
    rocksdb: Annotated[
        bool,
        typer.Option(
            "--rocksdb",
            help="storeType=defaultRocksDB (profile 5.3): the consume queues in a RocksDB "
            "database in consumequeue/, keyed as RocksDBConsumeQueueStore keys them "
            "(docs/rocksdb-consume-queue.md); written after --damage.",
        ),
    ] = False,
    timers: Annotated[
        int,
        typer.Option(
            "--timers",
            min=0,
            max=600,
            help="Timer messages (profile 5.3): the 5.x timer store with pending, delivered, "
            "rolled and recalled ones (docs/timer-store.md); with --crash the broker dies "
            "after the roll copies were stored, before the timer caught up.",
        ),
    ] = 0,
    batch_queue: Annotated[
        int,
        typer.Option(
            "--batch-queue",
            min=0,
            metavar="N",
            help="BatchConsumeQueue (profile 5.x): N producer batches of 1-4 messages to topic "
            "BatchTopic (queue.type=BatchCQ), each one inner-batch record, units in "
            "batchconsumequeue/ (docs/batch-consume-queue.md).",
        ),
    ] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", help="Print nothing.")] = False,
    old_quiet: Annotated[bool, typer.Option("-q", hidden=True)] = False,
    format: FormatOpt = None,
    old_messages: Annotated[int | None, hidden_alias("-n", min=0)] = None,
    as_json: Annotated[bool, typer.Option("--json", hidden=True)] = False,
) -> None:
    """Write a new store directory byte for byte as a broker of --profile would, from a seeded
    workload (topics TopicA.., keys, tags, UNIQ_KEYs, delay, transaction and retry messages).

    Example: rmqinspect synth /tmp/store --messages 100000 --body-size 1000 --crash
    """
    # -n is --limit and -q --queue-id in the other commands: here they stay hidden aliases of
    # --messages and --quiet for a release, as --json does of -F json.
    messages = old_messages if old_messages is not None else messages
    fmt = OutputFormat.JSON if as_json else format or OutputFormat.TABLE
    try:
        layout = StoreLayout(
            profile=profile,
            commitlog_file_size=commitlog_file_size,
            cq_file_size=cq_file_size,
            index_slot_num=index_slots,
            index_num=index_entries,
            append_prop_crc=prop_crc,
            enable_dledger_commitlog=dledger,
        )
        config = WorkloadConfig(
            messages=messages,
            body_size=body_size,
            topics=topics,
            queues=queues,
            seed=seed,
            crash=crash,
            special=not plain,
            compress_type=compress_type,
            compress_over=compress_over,
            fate=fate,
            pop=pop,
            timers=timers,
            batch_records=batch_queue,
        )
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    if pop and profile is Profile.V4_9:
        raise typer.BadParameter("--pop needs a 5.x --profile: 4.9 brokers have no POP")
    if batch_queue and profile is Profile.V4_9:
        raise typer.BadParameter("--batch-queue needs a 5.x --profile (BatchCQ came with 5.0)")
    if rocksdb and (profile is not Profile.V5_3 or dledger):
        # RocksDB consume queues came with 5.2; the DLedger store keeps file queues.
        raise typer.BadParameter("--rocksdb needs --profile 5.3 and no --dledger")
    if rocksdb and batch_queue:
        # The RocksDB store keeps every queue as rows; synth's BatchConsumeQueue is files.
        raise typer.BadParameter(
            "--rocksdb cannot add --batch-queue: synth writes the batch units as files"
        )
    if timers and profile is not Profile.V5_3:
        raise typer.BadParameter("--timers needs --profile 5.3 (the timer store came with 5.x)")
    started = time.perf_counter()
    created = not os.path.lexists(out_dir)
    try:
        summary = write_workload(out_dir, config, layout)
        damages = [_apply(kind, out_dir, summary) for kind in damage_kinds or []]
        if rocksdb:
            move_queues_to_rocksdb(out_dir)
    except ValueError as err:
        if created:  # what this run made is half a store: none is better than a misleading one
            shutil.rmtree(out_dir, ignore_errors=True)
        raise typer.BadParameter(str(err)) from None
    seconds = time.perf_counter() - started
    if quiet or old_quiet:
        return
    render_synth(summary, seconds, damages, fmt)


def register(app: typer.Typer) -> None:
    app.command("synth")(synth)
