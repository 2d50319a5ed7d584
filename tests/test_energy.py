"""Energy (issue 17, part 3): what the GPUs drew over a run, from the energy counter where it
was scraped and power x time otherwise, said which. What a user would notice if it were wrong:
a kWh figure that disagrees with the power chart, a driver reload that adds or loses a day of
energy, a store without the counter showing nothing, per-day bars that do not add up."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from telemetry.queries import TimeRange, data_extent
from telemetry.queries.energy import COUNTER, POWER, energy, energy_per_day, run_energy
from telemetry.store import Store, rollups
from tests.conftest import cli


def _raw_kwh(s: Store) -> float:
    """Every stored power sample times the sample interval: the figure both bases estimate."""
    return float(s.scalar("SELECT sum(power_w) FROM gpu_samples")) * s.sample_interval_s() / 3.6e6


def test_counter_and_power_agree_with_the_samples(day: Path) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        e = energy(s, whole)
        raw = _raw_kwh(s)
        assert e.basis == COUNTER and e.kwh == e.kwh_counter
        assert e.kwh_counter == pytest.approx(raw, rel=0.01)
        assert e.kwh_power == pytest.approx(raw, rel=0.01)
        days = energy_per_day(s, whole)
        assert len(days) == 2 and set(days["basis"]) == {COUNTER}
        assert days["kwh"].sum() == pytest.approx(e.kwh, rel=1e-9)


def test_a_driver_reload_resets_the_counter_without_losing_energy(day: Path) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        before = energy(s, whole).kwh_counter
        gid = s.scalar("SELECT min(gpu_id) FROM gpus")
        at = whole.start.replace(minute=0, second=0, microsecond=0) + timedelta(hours=10)
        with s.transaction() as con:  # the counter restarts from 0 at hour 10
            base = con.execute(
                "SELECT energy_mj_max FROM gpu_rollup WHERE bucket_s = 3600 AND gpu_id = ? "
                "AND ts = ?", [gid, at - timedelta(hours=1)],
            ).fetchone()[0]  # fmt: skip
            con.execute(
                "UPDATE gpu_rollup_3600 SET energy_mj_max = energy_mj_max - ?, "
                "energy_mj_min = energy_mj_min - ? WHERE gpu_id = ? AND ts >= ?",
                [base, base, gid, at],
            )  # fmt: skip
            # and the hours' energy, as the rollup computes it when it builds them
            rollups.fill_energy_used(con, whole.start - timedelta(hours=1), whole.end)
        # the same, but for the one sample interval between the last reading before the
        # reload and the first after it
        after = energy(s, whole).kwh_counter
        assert after == pytest.approx(before, rel=1e-4) and after <= before


def test_without_the_counter_energy_is_power_times_time(day: Path) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        with s.transaction() as con:  # an exporter without DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION
            for table in rollups.GPU_TABLES[1:]:  # each level's table
                con.execute(f"UPDATE {table} SET energy_mj_max = NULL, energy_mj_min = NULL")
            # the hours' energy (none) and the fleet's, as the rollup computes them
            rollups.fill_energy_used(con, whole.start - timedelta(hours=1), whole.end)
        e = energy(s, whole)
        assert e.basis == POWER and e.kwh_counter is None
        assert e.kwh == pytest.approx(_raw_kwh(s), rel=0.01)
        assert set(energy_per_day(s, whole)["basis"]) == {POWER}


def test_summary_json_states_the_energy_and_its_basis(dev_store: Path) -> None:
    r = cli("summary", "--store", str(dev_store), "--json")
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    e = run["energy"]
    assert e["basis"] == COUNTER and e["kwh"] > 0
    assert e["kwh_per_million_tokens"] == pytest.approx(e["kwh"] / (run["tokens"] / 1e6), rel=1e-3)
    assert "not CPUs" in e["scope"]


def test_a_range_inside_the_run_counts_the_hours_it_touches(day: Path) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        t0 = whole.start.replace(minute=0, second=0, microsecond=0)
        part = energy(
            s, TimeRange(t0 + timedelta(hours=2, minutes=10), t0 + timedelta(hours=3, minutes=50))
        )
        raw = (
            s.scalar(
                "SELECT sum(power_w) FROM gpu_samples WHERE ts >= ? AND ts < ?",
                [t0 + timedelta(hours=2), t0 + timedelta(hours=4)],
            )
            * s.sample_interval_s()
            / 3.6e6
        )
        # hours 2 and 3, not the one after (a range is not billed for the hour past its end)
        assert part.basis == COUNTER
        assert part.kwh_counter == pytest.approx(raw, rel=0.01)
        assert part.kwh_power == pytest.approx(raw, rel=0.01)


# Each GPU-hour's energy from the raw counter readings: the last reading of the hour before
# to this hour's last, or this hour's first to its last (first hour, after a gap, a reload).
RAW_USED = """WITH h AS (SELECT gpu_id, time_bucket(INTERVAL 1 hour, ts) AS ts,
                            arg_max(energy_mj, ts) AS last, arg_min(energy_mj, ts) AS first
                     FROM gpu_samples WHERE energy_mj IS NOT NULL GROUP BY ALL),
               p AS (SELECT *, lag(ts) OVER w AS pts, lag(last) OVER w AS prev FROM h
                     WINDOW w AS (PARTITION BY gpu_id ORDER BY ts))
          SELECT gpu_id, ts, CASE WHEN pts = ts - INTERVAL 1 hour AND last >= prev
                                  THEN last - prev ELSE last - first END AS energy_mj_used
          FROM p ORDER BY 1, 2"""
KEPT_USED = "SELECT gpu_id, ts, energy_mj_used FROM gpu_rollup WHERE bucket_s = 3600 ORDER BY 1, 2"


def test_each_gpu_hour_keeps_the_energy_its_counter_readings_give(day: Path) -> None:
    """The per-GPU-hour energy the rollup keeps equals the counter's increments read back from
    raw samples (the last reading of the hour before to this hour's), and a store from before
    the column gets the same values when it is next opened for writing."""
    q = KEPT_USED
    with Store(str(day)) as s:
        kept = s.df(q)
        raw = s.df(RAW_USED)
    assert len(kept) > 1000
    pd.testing.assert_frame_equal(kept, raw, check_dtype=False, rtol=1e-12)
    con = duckdb.connect(str(day))
    for table in rollups.GPU_TABLES[1:]:  # an older store
        con.execute(f"ALTER TABLE {table} DROP COLUMN energy_mj_used")
    con.close()
    with Store(str(day)) as s:
        pd.testing.assert_frame_equal(s.df(q), kept)


def test_a_late_reading_at_the_end_of_an_hour_moves_the_next_hours_energy(day: Path) -> None:
    """A round that lands after the next hour was rolled up, carrying an hour's last counter
    reading: that hour gains the energy and the next one loses it (it counts from the new last
    reading), so the total stays what the counter says."""
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        hour = whole.start.replace(minute=0, second=0, microsecond=0) + timedelta(hours=5)
        gid = s.scalar("SELECT min(gpu_id) FROM gpus")
        at = hour + timedelta(minutes=59, seconds=59)  # after the hour's last replay tick
        last, nxt = s.rows(
            """SELECT max(energy_mj) FILTER (WHERE ts < ?), min(energy_mj) FILTER (WHERE ts >= ?)
               FROM gpu_samples WHERE gpu_id = ?""", [at, at, gid],
        )[0]  # fmt: skip
        with s.transaction() as con:
            con.execute(
                "INSERT INTO gpu_samples (ts, gpu_id, energy_mj) VALUES (?, ?, ?)",
                [at, gid, (last + nxt) / 2],
            )
        s.refresh_rollups(since=at)  # as the sink does after a late round
        pd.testing.assert_frame_equal(s.df(KEPT_USED), s.df(RAW_USED), check_dtype=False)


FLEET_USED = """SELECT ts, gpu_hours, energy_gpu_hours, energy_mj_used FROM fleet_rollup
                WHERE bucket_s = 3600 ORDER BY ts"""
PER_GPU_SUMS = """SELECT ts, count(*) AS gpu_hours, count(energy_mj_used) AS energy_gpu_hours,
                         sum(energy_mj_used) AS energy_mj_used
                  FROM gpu_rollup WHERE bucket_s = 3600 GROUP BY ts ORDER BY ts"""


def test_the_fleet_s_hours_keep_the_sum_of_its_gpu_hours(day: Path) -> None:
    """A run's energy reads the fleet's hours (one row an hour, not one per GPU-hour): each
    keeps its GPU-hours and their energy, the same as summing the per-GPU hours, after a late
    round too; a store from before those columns gets them when next opened for writing; and
    where a fleet hour lacks them the energy is still the per-GPU hours' sum."""
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        want = energy(s, whole)
        fleet = s.df(FLEET_USED)
        assert len(fleet) >= 24 and fleet["energy_gpu_hours"].min() > 0
        pd.testing.assert_frame_equal(fleet, s.df(PER_GPU_SUMS), check_dtype=False, rtol=1e-12)
        at = whole.start.replace(minute=0, second=0, microsecond=0) + timedelta(
            hours=7, minutes=59, seconds=59
        )
        gid = s.scalar("SELECT min(gpu_id) FROM gpus")
        with s.transaction() as con:  # a late round: a GPU's reading 1 MJ higher
            con.execute(
                "INSERT INTO gpu_samples (ts, gpu_id, energy_mj) SELECT ?, ?, max(energy_mj) + 1e6 "
                "FROM gpu_samples WHERE gpu_id = ? AND ts < ?", [at, gid, gid, at],
            )  # fmt: skip
        s.refresh_rollups(since=at)
        late = s.df(FLEET_USED)
        pd.testing.assert_frame_equal(late, s.df(PER_GPU_SUMS), check_dtype=False, rtol=1e-12)
        assert not late.equals(fleet)
        moved = energy(s, whole)
    con = duckdb.connect(str(day))
    for column in ("gpu_hours", "energy_gpu_hours", "energy_mj_used"):  # an older store
        con.execute(f"ALTER TABLE fleet_rollup DROP COLUMN {column}")
    con.close()
    with Store(str(day)) as s:
        pd.testing.assert_frame_equal(s.df(FLEET_USED), late)
        assert energy(s, whole) == moved
        with s.transaction() as con:  # hours whose fleet sums are missing: per-GPU hours
            con.execute("UPDATE fleet_rollup SET gpu_hours = NULL WHERE ts < ?", [at])
        assert energy(s, whole).kwh == pytest.approx(moved.kwh, rel=1e-12)
        assert energy(s, whole).basis == COUNTER
    assert want.kwh is not None and want.basis == COUNTER


def _job(s: Store, run_id: str, job: int, hosts: list[str], start: object, end: object) -> None:
    with s.transaction(["slurm_jobs"]) as con:
        con.execute(
            "INSERT INTO slurm_jobs (cluster, job_id_raw, requeue, job_id, hosts, state, "
            "start_ts, end_ts, run_id) VALUES ('c', ?, 0, ?, ?, 'COMPLETED', ?, ?, ?)",
            [job, str(job), hosts, start, end, run_id],
        )


def test_overlapping_runs_each_count_their_own_gpus(day: Path) -> None:
    """Two runs on one cluster at the same time, each on half the nodes (their Slurm jobs say
    which): each counts its own GPUs' energy, not the whole fleet's; together they make the
    fleet's. A run whose GPUs the store does not know keeps the fleet's, and says so."""
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        hosts = [r[0] for r in s.rows("SELECT host FROM nodes ORDER BY host")]
        half = len(hosts) // 2
        (run,) = [r[0] for r in s.rows("SELECT run_id FROM runs")]
        _job(s, run, 1, hosts[:half], whole.start, whole.end)
        _job(s, "neighbour", 2, hosts[half:], whole.start, whole.end)
        fleet = energy(s, whole)
        mine, theirs = run_energy(s, run, whole), run_energy(s, "neighbour", whole)
        assert mine is not None and theirs is not None
        assert mine.basis == COUNTER == theirs.basis
        assert mine.kwh is not None and theirs.kwh is not None and fleet.kwh is not None
        assert mine.kwh < 0.8 * fleet.kwh and theirs.kwh < 0.8 * fleet.kwh
        assert mine.kwh + theirs.kwh == pytest.approx(fleet.kwh, rel=1e-4)  # float sums
        raw = float(s.scalar(
            "SELECT sum(power_w) FROM gpu_samples_v WHERE list_contains(?, host)", [hosts[:half]]
        )) * s.sample_interval_s() / 3.6e6  # fmt: skip
        assert mine.kwh == pytest.approx(raw, rel=0.01)
        assert mine.kwh_power == pytest.approx(raw, rel=0.01)
        assert run_energy(s, "unknown-run", whole) is None
    r = cli("summary", "--store", str(day), "--json")
    assert r.returncode == 0, r.stderr
    e = {x["run_id"]: x for x in json.loads(r.stdout)["runs"]}[run]["energy"]
    assert e["kwh"] == pytest.approx(mine.kwh, abs=0.1)
    assert f"1 Slurm job(s) on {half} node(s)" in e["scope"]
