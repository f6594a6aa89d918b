"""Commitlog recovery: the start-file rules of ``recoverNormally``/``recoverAbnormally``
(§10.5-10.6) and the shared scan loop (§10.4) that finds the recovered end E."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from rmqinspect.analysis.recovery.dispatch import Dispatcher
from rmqinspect.analysis.recovery.fields import DispatchRecords, Fields, RunRecords, Wanted
from rmqinspect.analysis.recovery.ranges import RangeCheck, RangeChecker
from rmqinspect.analysis.recovery.report import BadRecord, RecordInfo, StartCandidate, StartFile
from rmqinspect.analysis.recovery.state import BrokerState, CommitlogFile
from rmqinspect.format import commitlog as cl
from rmqinspect.format.checkpoint import Checkpoint
from rmqinspect.format.scan import check_run

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_NORMAL_FILES_BACK = 3  # recoverNormally before 5.3.2 starts at the third file from the end


def normal_start(state: BrokerState, max_phy_cq: int) -> StartFile:
    """``recoverNormally``'s start file: 5.3.2+ the newest file the consume queues reach (or
    file 0), earlier lines the third file from the end."""
    files = state.commitlog
    if state.profile.normal_recovery_starts_at_cq_max:
        i = len(files) - 1
        while i > 0 and files[i].start > max_phy_cq:
            i -= 1
        f = files[i]
        return StartFile(
            f.name,
            f.start,
            i,
            "newest_covered_by_cq",
            f"newest file whose start {f.start} is <= the max consume-queue physical offset "
            f"{max_phy_cq} (5.3.2+), or file 0",
        )
    i = max(0, len(files) - _NORMAL_FILES_BACK)
    f = files[i]
    return StartFile(
        f.name, f.start, i, "third_from_last", "the third file from the end (recoverNormally)"
    )


def abnormal_start(state: BrokerState, cp: Checkpoint) -> StartFile:
    """``isMappedFileMatchedRecover`` from the newest file back (§10.6): the first file whose
    first record is a message stored at or before the checkpoint's min timestamp."""
    options = state.options
    use_index = options.message_index_enable and options.message_index_safe
    limit = cp.min_timestamp_index() if use_index else cp.min_timestamp()
    what = (
        "min(checkpoint min timestamp, indexMsgTimestamp) (messageIndexSafe)"
        if use_index
        else "min(physicMsgTimestamp, logicsMsgTimestamp) - 3000 ms"
    )
    candidates: list[StartCandidate] = []
    head_size = cl.store_timestamp_pos(cl.BORNHOST_V6_FLAG) + 8
    for i in range(len(state.commitlog) - 1, -1, -1):
        f = state.commitlog[i]
        head = state.store.maps.read_padded(f.disk, 0, head_size)
        magic = _I32.unpack_from(head, cl.MAGIC_POS)[0]
        ok_magic = magic == cl.MESSAGE_MAGIC_CODE or (
            magic == cl.MESSAGE_MAGIC_CODE_V2 and state.profile.accepts_v2_magic
        )
        if not ok_magic:
            candidates.append(
                StartCandidate(f.name, None, False, f"first record magic {cl.magic_name(magic)}")
            )
            continue
        sys_flag = _I32.unpack_from(head, cl.SYSFLAG_POS)[0]
        ts = _I64.unpack_from(head, cl.store_timestamp_pos(sys_flag))[0]
        if ts == 0:
            candidates.append(StartCandidate(f.name, ts, False, "first store timestamp is 0"))
            continue
        if ts <= limit:
            candidates.append(StartCandidate(f.name, ts, True, f"{ts} <= {limit}"))
            return StartFile(
                f.name,
                f.start,
                i,
                "checkpoint_timestamp",
                f"newest file whose first record's store timestamp {ts} is <= {limit} ({what})",
                candidates,
            )
        candidates.append(StartCandidate(f.name, ts, False, f"{ts} > {limit}"))
    f = state.commitlog[0]
    return StartFile(
        f.name,
        f.start,
        0,
        "first_file",
        f"no file's first record is at or before {limit} ({what}); recovery starts at file 0",
        candidates,
    )


def _record_info(
    state: BrokerState, records: DispatchRecords, i: int, f: CommitlogFile
) -> RecordInfo:
    tids, names = records.topics()
    return RecordInfo(
        f.start + int(records.positions[i]),
        int(records.store_size[i]),
        state.store.relative(f.disk.path),
        names[int(tids[i])],
        int(records.queue_id[i]),
        int(records.queue_offset[i]),
        int(records.store_timestamp[i]),
    )


@dataclass(frozen=True, slots=True)
class ScanOutcome:
    """Where the scan loop stopped: the recovered end E and why."""

    end: int
    reason: str  # bad_record | blank_in_last_file
    last_valid: RecordInfo | None
    first_bad: BadRecord | None
    scanned_bytes: int


def scan(
    state: BrokerState,
    start: StartFile,
    dispatcher: Dispatcher,
    dispatch: bool,
    dispatch_above: int | None,
    checker: RangeChecker | None = None,
) -> ScanOutcome:
    """The shared scan loop (§10.4) from the start file with ``checkCRCOnRecover``; with
    ``dispatch``, every valid record whose offset is above ``dispatch_above`` is dispatched.
    With a ``checker``'s workers, the records are checked there (:mod:`.ranges`)."""
    idx = start.index
    f = state.commitlog[idx]
    pos = 0
    scanned = 0
    last: tuple[CommitlogFile, RecordInfo] | None = None
    opts = state.checks.recover
    above = _above(dispatch_above)
    wanted = scan_wanted(dispatcher, dispatch, dispatch_above)
    ends = None if checker is None else checker.walk_ends(f.disk, opts, wanted)
    size_cl = state.commitlog_file_size
    while True:
        buf = state.store.view(f.disk)
        begin = pos
        try:
            walk = (
                _check_runs(buf, pos, f.start, opts)
                if ends is None
                else _prechecked(buf, f, ends.walk(f.disk), opts)
            )
            for records, end, stop in walk:
                if len(records):
                    if dispatch:
                        dispatcher.take_run(records, "load", above)
                    last = (f, _record_info(state, records, len(records) - 1, f))
                state.store.maps.release(f.disk, pos, end)  # memory stays flat
                pos = end
                if stop is not None:
                    result = stop
        finally:
            buf.release()
        scanned += pos - begin
        state.progress(pos - begin)
        if result.success:  # BLANK: the next file, or the end after the last one
            if idx + 1 >= len(state.commitlog):
                reason = "blank_in_last_file"
                break
            scanned += size_cl - pos
            state.progress(size_cl - pos)
            idx += 1
            f = state.commitlog[idx]
            pos = 0
            continue
        reason = "bad_record"
        break
    end = f.start + pos
    info = last[1] if last is not None else None
    bad = None
    if reason == "bad_record":
        bad = BadRecord(
            end,
            state.store.relative(f.disk.path),
            pos,
            result.reason.value,
            result.detail,
            result.store_size,
            cl.magic_name(result.magic) if result.magic is not None else None,
        )
    return ScanOutcome(end, reason, info, bad, scanned)


def scan_wanted(
    dispatcher: Dispatcher, dispatch: bool, dispatch_above: int | None
) -> Wanted | None:
    """What the dispatch of :func:`scan` (its ``dispatch`` and ``dispatch_above``) can ask of
    the records it is handed, as the scan starts; None: it dispatches none."""
    return dispatcher.wanted(_above(dispatch_above)) if dispatch else None


def _above(dispatch_above: int | None) -> int:
    return -(1 << 63) if dispatch_above is None else dispatch_above


# A walk of a file, run by run: the records accepted, where the run ends, and the verdict on
# the BLANK or failure that ends the walk (None until then).
Walked = Iterator[tuple[DispatchRecords, int, cl.CheckResult | None]]


def _check_runs(buf: memoryview, pos: int, file_start: int, opts: cl.CheckOptions) -> Walked:
    """The walk from ``pos``, checked as it goes, up to the run that ends at a BLANK or
    failure."""
    while True:
        run = check_run(buf, pos, file_start, opts)
        yield RunRecords(run), run.end, run.stop
        if run.stop is not None:
            return
        pos = run.end


def _prechecked(
    buf: memoryview, f: CommitlogFile, checks: Iterator[RangeCheck], opts: cl.CheckOptions
) -> Walked:
    """The walk of :func:`_check_runs` from position 0, from the workers' checks of its ranges:
    the records they accepted are taken as they sent them, not read again; the verdict where
    the walk stops is found here."""
    for check in checks:
        for part in check.records:
            if len(part):
                records = part.read(buf, f.start, opts)
                yield records, int(records.positions[-1] + records.store_size[-1]), None
        if check.ended:
            yield Fields.none(), check.stop, cl.check_message(buf, check.stop, f.start, opts)
            return
