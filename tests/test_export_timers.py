"""The export's ``timers`` table: one row per timerlog unit, its decoded fields and what
``timers`` says of it, against what tests/timer_helpers.py's writer placed (the Spark engine's
twin of this table is checked in tests/test_export_spark.py)."""

from __future__ import annotations

from pathlib import Path

from rmqinspect.export import Table
from rmqinspect.format import timer
from tests.cli_helpers import build_store, orders, run, run_json
from tests.export_helpers import read_table, snapshot
from tests.timer_helpers import DAY, T0, TimerStore


def timers_store(root: Path) -> tuple[Path, list[int]]:
    """pending (T0+60 s), delivered (T0+1 s), recalled (T0+2 h) and its recall marker, rolled
    (fires T0+3 days; its first unit at T0+1 day, its roll copy at the fire time); read time
    T0+5 s. Returns the store and each unit's commitlog offset, in log order."""
    s = TimerStore(root)
    placed = [
        s.add("PENDING", T0 + 60_000),
        s.add("DELIVERED", T0 + 1000),
        s.add("RECALLED", T0 + 2 * 3_600_000),
        s.add("ROLLED", T0 + 3 * DAY, slot=T0 + DAY, rolls=True),
        s.add("RECALLED", T0 + 2 * 3_600_000, recall="Orders+RECALLED"),
        s.add("ROLLED", T0 + 3 * DAY, roll_times=1),
    ]
    s.deliver("DELIVERED")
    return s.close(last_read=T0 + 5000), placed


def _ms(value: object) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)  # type: ignore[attr-defined]


def test_timers_table_row_by_row(tmp_path: Path) -> None:
    store, placed = timers_store(tmp_path / "s")
    before = snapshot(store)
    out = tmp_path / "out"
    result = run("export", store, out, "--engine", "arrow", "--tables", "timers")
    assert result.exit_code == 0, result.stderr
    assert snapshot(store) == before
    rows = read_table(out, Table.TIMERS).to_pylist()
    got = [
        (
            r["timerlog_offset"],
            r["file_position"],
            r["physical_offset"],
            r["magic"],
            r["state"],
            r["uniq_key"],
            r["real_topic"],
            r["real_queue_id"],
            _ms(r["fire_timestamp"]),
            _ms(r["slot_timestamp"]),
            r["roll_times"],
            r["recall_target"],
            r["recall_matched"],
        )
        for r in rows
    ]
    fire_r, fire_3d = T0 + 2 * 3_600_000, T0 + 3 * DAY
    default, roll, delete = timer.MAGIC_DEFAULT, timer.MAGIC_ROLL, timer.MAGIC_DELETE
    assert got == [
        (
            0,
            0,
            placed[0],
            default,
            "pending",
            "PENDING",
            "Orders",
            1,
            T0 + 60_000,
            T0 + 60_000,
            0,
            None,
            None,
        ),
        (
            52,
            52,
            placed[1],
            default,
            "delivered",
            "DELIVERED",
            "Orders",
            1,
            T0 + 1000,
            T0 + 1000,
            0,
            None,
            None,
        ),
        (
            104,
            104,
            placed[2],
            default,
            "recalled",
            "RECALLED",
            "Orders",
            1,
            fire_r,
            fire_r,
            0,
            None,
            None,
        ),
        (
            156,
            156,
            placed[3],
            default | roll,
            "rolled",
            "ROLLED",
            "Orders",
            1,
            fire_3d,
            T0 + DAY,
            0,
            None,
            None,
        ),
        (
            208,
            208,
            placed[4],
            default | delete,
            "recall",
            None,
            None,
            None,
            None,
            fire_r,
            None,
            "Orders+RECALLED",
            True,
        ),
        (
            260,
            260,
            placed[5],
            default,
            "pending",
            "ROLLED",
            "Orders",
            1,
            fire_3d,
            fire_3d,
            1,
            None,
            None,
        ),
    ]
    # the slot chains as written: the recall marker follows its target in the T0+2 h slot
    assert [r["prev_pos"] for r in rows] == [-1, -1, -1, -1, 104, -1]
    assert {_ms(r["write_timestamp"]) for r in rows} == {T0}
    assert {r["file"] for r in rows} == {"timerlog/00000000000000000000"}
    # the same states as the timers command
    doc = run_json("timers", store, expect=0)
    assert sorted((e["timerlog_offset"], e["state"], e["late"]) for e in doc["entries"]) == sorted(
        (r["timerlog_offset"], r["state"], r["late"]) for r in rows if r["state"] != "recall"
    )


def test_a_store_without_a_timer_store_has_an_empty_timers_table(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", orders(4))
    out = tmp_path / "out"
    assert run("export", store, out, "--engine", "arrow", "--tables", "timers").exit_code == 0
    assert read_table(out, Table.TIMERS).num_rows == 0
