"""The 5.x timer store as a 5.3 broker leaves it (docs/timer-store.md), written beside a
:class:`~rmqinspect.synth.writer.StoreWriter`'s commitlog.

- :class:`TimerFiles` is ``TimerMessageStore``'s write side: ``doEnqueue`` appends one 52-byte
  unit per timer-topic record into its slot's chain (prevPos = the slot's lastPos, the slot's
  num counting normal units minus delete units), deciding the roll; :meth:`TimerFiles.write`
  leaves ``timerlog/``, ``timerwheel``, ``config/timercheck`` and ``config/timermetrics``.
- :class:`TimerWorkload` is the traffic ``synth --timers`` writes through it, in time order: a
  producer's timer message stored in ``rmq_sys_wheel_timer`` queue 0 with ``REAL_TOPIC``,
  ``REAL_QID`` and ``TIMER_OUT_MS`` (``HookUtils.transformTimerMessage``), the delivered copy in
  the real topic with ``TIMER_ENQUEUE_MS``/``TIMER_DEQUEUE_MS`` and the roll copy in the timer
  topic with ``TIMER_ROLL_TIMES`` (``TimerMessageStore.convert``/``convertMessage``), and a
  recall's delete marker (``RecallMessageProcessor``: same ``UNIQ_KEY``, ``TIMER_DEL_UNIQKEY``
  = ``<topic>+<uniqKey>``). The states it leaves are what ``timers`` reports, so the truth it
  returns (:class:`TimerSummary`) is what tests compare against.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rmqinspect.format import properties as props
from rmqinspect.format import timer
from rmqinspect.format.encode import encode_timer_slot, encode_timer_units, encode_timercheck
from rmqinspect.format.javahash import java_hash
from rmqinspect.synth.clientid import ClientIds
from rmqinspect.synth.layout import PlacedTimer, TimerSummary
from rmqinspect.synth.writer import MessageSpec, PutResult, StoreWriter

DAY_MS = 86_400_000
DEFAULT_ROLL_WINDOW_SLOTS = 2 * 86_400  # MessageStoreConfig.timerRollWindowSlot
RECALL_TAG = "_RECALL_TAG_"  # RecallMessageProcessor's marker tag
TIMERCHECK_PAGE = 4096  # TimerCheckpoint maps one page
_PRODUCER = "producerTimer"


class TimerFiles:
    """The timer's write side over ``writer``'s commitlog: units in timerlog order, the wheel's
    slots (slot time -> [firstPos, lastPos, num, the slot index it is written at]) and the
    per-topic count ``TimerMetrics`` keeps. Tests may alter ``units`` and ``slots`` before
    :meth:`write` to make the hostile variants."""

    def __init__(
        self,
        writer: StoreWriter,
        precision_ms: int = timer.DEFAULT_PRECISION_MS,
        roll_window_slots: int = DEFAULT_ROLL_WINDOW_SLOTS,
    ) -> None:
        self.writer = writer
        self.precision_ms = precision_ms
        self.roll_window_slots = roll_window_slots
        self.units: list[dict[str, int]] = []
        self.slots: dict[int, list[int]] = {}
        self.metrics: dict[str, int] = {}
        self.metrics_stamp = 0
        self.queue_end = 0  # one past the last timer-queue offset enqueued

    def out_ms(self, deliver_ms: int) -> int:
        """``HookUtils.transformTimerMessage``: the delivery time rounded down to the
        precision, a whole multiple one precision earlier (TIMER_OUT_MS)."""
        p = self.precision_ms
        return deliver_ms - p if deliver_ms % p == 0 else deliver_ms // p * p

    def enqueue(
        self, put: PutResult, real_topic: str, fire_ms: int, write_ms: int, delete: bool = False
    ) -> int:
        """``doEnqueue`` for a record of the timer topic: its unit's timerlog offset. A fire
        time a roll window or more ahead goes into a slot half a window ahead (when less than a
        third of a window is left past it) or a whole window ahead, with ``MAGIC_ROLL``; a
        recall's marker (``delete``) gets ``MAGIC_DELETE``."""
        write = write_ms // self.precision_ms * self.precision_ms  # currWriteTimeMs
        window = self.roll_window_slots * self.precision_ms
        magic = timer.MAGIC_DEFAULT | (timer.MAGIC_DELETE if delete else 0)
        slot = fire_ms
        if fire_ms - write >= window:
            magic |= timer.MAGIC_ROLL
            third = self.roll_window_slots // 3 * self.precision_ms
            half = self.roll_window_slots // 2 * self.precision_ms
            slot = write + (half if fire_ms - write - window < third else window)
        return self.add_unit(put, real_topic, write, slot, magic)

    def add_unit(
        self, put: PutResult, real_topic: str, write_ms: int, slot_ms: int, magic: int
    ) -> int:
        """Append one unit at the end of its slot's chain and count it in the slot."""
        pos = len(self.units) * timer.UNIT_SIZE
        slot = self.slots.setdefault(slot_ms, [-1, -1, 0, timer.slot_index(slot_ms)])
        delete = bool(magic & timer.MAGIC_DELETE)
        self.units.append(
            {
                "prev_pos": slot[1],
                "magic": magic,
                "curr_write_time_ms": write_ms,
                "delayed_time_offset_ms": slot_ms - write_ms,
                "physical_offset": put.physical_offset,
                "store_size": put.size,
                "topic_hash": java_hash(real_topic),
            }
        )
        slot[0] = pos if slot[0] == -1 else slot[0]
        slot[1] = pos
        self.queue_end = max(self.queue_end, put.queue_offset + 1)
        slot[2] += -1 if delete else 1
        self.count(real_topic, -1 if delete else 1, write_ms)
        return pos

    def count(self, topic: str, delta: int, stamp: int) -> None:
        """``TimerMetrics``: +1 per normal unit enqueued, -1 per delete unit and per dequeue."""
        self.metrics[topic] = self.metrics.get(topic, 0) + delta
        self.metrics_stamp = max(self.metrics_stamp, stamp)

    def write(
        self,
        last_read_ms: int,
        queue_offset: int,
        *,
        flush_pos: int | None = None,
        padding: int = 4 * timer.UNIT_SIZE,
        file_size: int | None = None,
    ) -> None:
        """Leave the timer's files in the writer's (closed) store. ``file_size`` pads the one
        timerlog file to the broker's length; by default it is cut ``padding`` bytes past the
        units (a sparse file of 100 MB helps no test). The checkpoint says the wheel was read
        up to ``last_read_ms``, the timerlog flushed to ``flush_pos`` (default: its end) and
        the timer queue enqueued up to ``queue_offset``."""
        root = self.writer.root
        log = encode_timer_units(self.units)
        (root / "timerlog").mkdir()
        with open(root / "timerlog" / f"{0:020d}", "wb") as fh:
            fh.write(log)
            fh.truncate(len(log) + padding if file_size is None else file_size)
        with open(root / "timerwheel", "wb") as fh:
            fh.truncate(timer.WHEEL_FILE_SIZE)
            for time_ms, (first, last, num, index) in self.slots.items():
                fh.seek(index * timer.SLOT_SIZE)
                fh.write(encode_timer_slot(time_ms, first, last, num, 0, self.precision_ms))
        cp = timer.TimerCheckpoint(
            last_read_ms,
            len(log) if flush_pos is None else flush_pos,
            queue_offset,
            queue_offset,
            0,
            last_read_ms,
            1,
        )
        config = root / "config"
        config.mkdir(exist_ok=True)
        (config / "timercheck").write_bytes(encode_timercheck(cp).ljust(TIMERCHECK_PAGE, b"\0"))
        _write_metrics(config, self.metrics, self.metrics_stamp)


def _write_metrics(config: Path, counts: dict[str, int], stamp: int) -> None:
    """``TimerMetrics.persist`` (and its ``.bak``): the count per real topic."""
    doc = {
        "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": stamp},
        "timingCount": {
            topic: {"count": n, "timeStamp": stamp} for topic, n in sorted(counts.items())
        },
    }
    text = json.dumps(doc, separators=(",", ":"))
    for name in ("timermetrics", "timermetrics.bak"):
        (config / name).write_text(text, encoding="utf-8")


# The classes, by i % 6: how the fire time is asked for, and what happens before the stop.
_CLASSES = ("short", "mid", "hours", "roll", "recalled", "rolled")
_STOP_AFTER_MS = 8_000  # the stop: every short one delivered, the rolled ones rolled
_ROLL_LEAD_MS = 5_000  # the rolled ones' roll slot comes this long after the main sends


@dataclass
class _Sent:
    """One timer message while the workload runs."""

    i: int
    kind: str
    key: str
    uniq: str
    queue_id: int
    fire: int  # TIMER_OUT_MS
    user: dict[str, str]  # seq and the producer's timer property
    put: PutResult
    timerlog: int
    unit: dict[str, int]
    state: str = "pending"
    delivered: int | None = None
    roll: tuple[int, int] | None = None  # the roll copy's offset and its unit's
    recall: tuple[int, int] | None = None  # the marker's offset and its unit's

    @property
    def slot_ms(self) -> int:
        return self.unit["curr_write_time_ms"] + self.unit["delayed_time_offset_ms"]


class TimerWorkload:
    """``count`` timer messages to ``real_topic`` (queues ``0..queues-1``), after the rest of
    the store: the ``rolled`` ones sent a day before the others (so that their roll slot, half
    a roll window on, fires within the run), then the others at ``T``, the recalls at T+3.5 s,
    the short ones' deliveries and the roll copies as their slots fire, and the stop at T+8 s
    (timercheck's read time).

    With ``crash`` the broker is killed just after the roll copies were stored (T+5 s on): the
    reput had not dispatched them, so the timer has not enqueued them (no units, the rolled
    ones' first units still pending), and timercheck's read time is the last whole second
    before their roll slot (the checkpoint lags the dequeue)."""

    def __init__(
        self,
        writer: StoreWriter,
        real_topic: str,
        queues: int,
        count: int,
        start_ms: int,
        *,
        crash: bool = False,
    ) -> None:
        self.writer = writer
        self.files = TimerFiles(writer)
        self.real_topic = real_topic
        self.queues = queues
        self.count = count
        self.ids = ClientIds("7F0000010E2F18B4AAC2")
        self.first = start_ms // 1000 * 1000 + 1000
        # The rolled ones' roll slot is half a (2-day) window after their write time.
        self.t = self.first + DAY_MS - _ROLL_LEAD_MS
        self.crash = crash
        self._summary: TimerSummary | None = None

    def run(self) -> TimerSummary:
        order = [i for i in range(self.count) if _CLASSES[i % 6] == "rolled"]
        order += [i for i in range(self.count) if _CLASSES[i % 6] != "rolled"]
        sent: dict[int, _Sent] = {}
        for n, i in enumerate(order):
            kind = _CLASSES[i % 6]
            sent[i] = self._send(i, kind, (self.first if kind == "rolled" else self.t) + n)
        # In time order: the recalls 3.5 s after the sends, and each short or rolled one
        # 100 ms after its slot (the dequeue's latency).
        recalls = [m for _, m in sorted(sent.items()) if m.kind == "recalled"]
        fired = [m for _, m in sorted(sent.items()) if m.kind in ("short", "rolled")]
        events = [(self.t + 3_500 + n, 0, m.i) for n, m in enumerate(recalls)]
        events += [(m.slot_ms + 100 + n, 1, m.i) for n, m in enumerate(fired)]
        stop = self.t + _STOP_AFTER_MS
        # A crash stops the reput at the first roll copy: nothing after it is dispatched.
        undispatched = self.t + _ROLL_LEAD_MS if self.crash else stop
        for at, fire, i in sorted(events):
            if at >= stop:
                raise ValueError("too many timer messages for the run's 8 seconds")
            if fire:
                self._fire(sent[i], at, dispatch=at < undispatched)
            else:
                self._recall(sent[i], at)
        files = self.files
        self._summary = TimerSummary(
            tuple(_placed(sent[i], self.real_topic) for i in sorted(sent)),
            len(files.units),
            undispatched - 1000 if self.crash else stop,
            files.queue_end,
            {t: (v[0], v[1], v[2]) for t, v in files.slots.items()},
            dict(files.metrics),
        )
        return self._summary

    def write(self) -> TimerSummary:
        """The timer's files, once the writer is closed; what they hold."""
        s = self._summary
        if s is None:
            raise ValueError("run() first")
        self.files.write(s.last_read_ms, s.timer_queue_offset)
        return s

    def _fire_ms(self, kind: str, i: int, born: int) -> tuple[str, str, int]:
        """The producer's timer property and the delivery time it asks for."""
        if kind == "short":
            delay = 1_000 + 37 * i % 2_000
            return timer.TIMER_DELAY_MS, str(delay), born + delay
        if kind in ("mid", "recalled"):
            deliver = born + 30_000 + 53 * i % 30_000
            return timer.TIMER_DELIVER_MS, str(deliver), deliver
        if kind == "hours":
            sec = 3_600 * (1 + i % 5) + i
            return timer.TIMER_DELAY_SEC, str(sec), born + sec * 1000
        sec = 2 * 86_400 + 6 * 3_600 + i  # roll, rolled: more than the 2-day window
        return timer.TIMER_DELAY_SEC, str(sec), born + sec * 1000

    def _send(self, i: int, kind: str, born: int) -> _Sent:
        name, value, deliver = self._fire_ms(kind, i, born)
        fire = self.files.out_ms(deliver)
        uniq = self.ids.next_id(born)
        queue_id = i % self.queues
        key = f"{kind}-{i:03d}"
        user = {"seq": str(i), name: value}
        spec = MessageSpec(
            topic=timer.TIMER_TOPIC,
            body=f"timer {key}".encode(),
            tags="TagT",
            keys=key,
            uniq_key=uniq,
            properties={
                **user,
                props.REAL_TOPIC: self.real_topic,
                props.REAL_QID: str(queue_id),
                timer.TIMER_OUT_MS: str(fire),
            },
            born_timestamp=born,
            store_timestamp=born + 2,
        )
        put = self.writer.put(spec)
        pos = self.files.enqueue(put, self.real_topic, fire, born + 2)
        return _Sent(i, kind, key, uniq, queue_id, fire, user, put, pos, self.files.units[-1])

    def _recall(self, m: _Sent, at: int) -> None:
        """``RecallMessageProcessor``: a marker in the timer topic with the target's UNIQ_KEY,
        ``TIMER_DEL_UNIQKEY`` and its fire time; enqueued into the target's slot."""
        spec = MessageSpec(
            topic=timer.TIMER_TOPIC,
            body=b"0",
            tags=RECALL_TAG,
            uniq_key=m.uniq,
            properties={
                props.REAL_TOPIC: self.real_topic,
                props.REAL_QID: "0",
                timer.TIMER_DELIVER_MS: str(m.fire + 1),
                timer.TIMER_OUT_MS: str(m.fire),
                timer.TIMER_DEL_UNIQKEY: f"{self.real_topic}+{m.uniq}",
                "PGROUP": _PRODUCER,
            },
            born_timestamp=at,
            store_timestamp=at,
        )
        put = self.writer.put(spec)
        pos = self.files.enqueue(put, self.real_topic, m.fire, at, delete=True)
        m.recall, m.state = (put.physical_offset, pos), "recalled"

    def _fire(self, m: _Sent, at: int, dispatch: bool) -> None:
        """The slot fired: a roll unit's message goes back into the timer topic with
        TIMER_ROLL_TIMES and is enqueued again (once dispatched: the timer reads its queue);
        any other is delivered to its real topic."""
        rolls = bool(m.unit["magic"] & timer.MAGIC_ROLL)
        p = {
            **m.user,
            props.REAL_TOPIC: self.real_topic,
            props.REAL_QID: str(m.queue_id),
            timer.TIMER_OUT_MS: str(m.fire),
            timer.TIMER_ENQUEUE_MS: str(m.unit["curr_write_time_ms"]),
            timer.TIMER_DEQUEUE_MS: str(at),
        }
        if rolls:
            p[timer.TIMER_ROLL_TIMES] = "1"
        spec = MessageSpec(
            topic=timer.TIMER_TOPIC if rolls else self.real_topic,
            queue_id=0 if rolls else m.queue_id,
            body=f"timer {m.key}".encode(),
            tags="TagT",
            keys=m.key,
            uniq_key=m.uniq,
            properties=p,
            born_timestamp=m.put.store_timestamp,
            store_timestamp=at,
            dispatch=dispatch,
        )
        put = self.writer.put(spec)
        if rolls and not dispatch:
            # Not in the timer queue yet, so not enqueued; the checkpoint lags the dequeue,
            # so the first unit is still pending (the restart fires its slot again).
            m.roll = (put.physical_offset, -1)
            return
        self.files.count(self.real_topic, -1, at)
        if rolls:
            pos = self.files.enqueue(put, self.real_topic, m.fire, at)
            m.roll, m.state = (put.physical_offset, pos), "rolled"
        else:
            m.delivered, m.state = put.physical_offset, "delivered"


def _placed(m: _Sent, real_topic: str) -> PlacedTimer:
    return PlacedTimer(
        key=m.key,
        kind=m.kind,
        uniq_key=m.uniq,
        real_topic=real_topic,
        real_queue_id=m.queue_id,
        fire_ms=m.fire,
        state=m.state,
        physical_offset=m.put.physical_offset,
        queue_offset=m.put.queue_offset,
        timerlog_offset=m.timerlog,
        slot_ms=m.slot_ms,
        magic=m.unit["magic"],
        delivered_offset=m.delivered,
        roll_offset=None if m.roll is None else m.roll[0],
        roll_timerlog_offset=None if m.roll is None or m.roll[1] < 0 else m.roll[1],
        recall_offset=None if m.recall is None else m.recall[0],
        recall_timerlog_offset=None if m.recall is None else m.recall[1],
    )
