"""Energy: what the GPUs drew over a time range or a run, per day, and per million tokens.

Two ways to know it, and every answer says which it used (``basis``):

- **energy counter** (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, mJ since the driver loaded),
  read from the per-GPU hourly rollup, which keeps each GPU-hour's increment as it is built
  (``gpu_rollup.energy_mj_used``): from the previous hour's last reading to this hour's (in a
  GPU's first hour, or the first after a gap, from its first reading); after a drop (the counter
  restarted with the driver) the hour counts from its first reading to its last. Exact to the
  hour the range starts and ends.
- **power x time** where no counter was scraped: each node-hour's mean GPU power times the
  time its samples cover (``node_rollup``: samples / GPUs x the sample interval), so a gap in
  the samples is not counted as drawing power.

A run's energy is its own GPUs' where the store knows them (``run_energy``): the GPUs of its
Slurm jobs' nodes in the hours each job ran, so two runs sharing a cluster do not each count
the whole fleet. Where the store does not know a run's GPUs, the fleet's energy over the run's
time is the answer, and says so.

GPU energy only: not CPUs, networking, storage or cooling (a facility's PUE multiplies it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd

from telemetry.queries import TimeRange
from telemetry.store import Store
from telemetry.store.rollups import ENERGY_LEVEL_S

HOUR = ENERGY_LEVEL_S  # the per-GPU level that keeps each bucket's energy
COUNTER, POWER = "energy counter", "power x time"


@dataclass(frozen=True)
class Energy:
    kwh: float | None  # by ``basis``; None when nothing measured power in the range
    basis: str | None
    kwh_counter: float | None  # both, where both are known (they should agree)
    kwh_power: float | None


# A GPU-hour's energy, kept with the hour as it is rolled up (``rollups.ENERGY_USED_SQL``).
# (``table``: gpu_rollup, or fleet_rollup, which keeps each hour's sum of it)
_COUNTER_SQL = """SELECT {group} sum(energy_mj_used) / 3.6e9 AS kwh FROM {table}
WHERE bucket_s = ? AND ts >= ? AND ts < ? {by}"""

_POWER_SQL = """SELECT {group} sum(power_w * samples / nullif(gpus, 0)) * ? / 3.6e6 AS kwh
FROM node_rollup WHERE bucket_s = ? AND ts >= ? AND ts < ? {by}"""


def _hours(tr: TimeRange) -> tuple[object, object]:
    """The whole hours ``tr`` touches: [first hour, the hour after the last)."""
    start = tr.start.replace(minute=0, second=0, microsecond=0)
    end = tr.end.replace(minute=0, second=0, microsecond=0)
    # a run's own range may end at a stored time in 9999's last hour (bad input kept): no
    # hour after it exists, and the range's own end bounds it as well
    return start, end + timedelta(hours=1) if end < datetime.max - timedelta(hours=1) else tr.end


# The same from the fleet's hours (``rollups.FLEET_ENERGY_SQL``): the hours, those that keep
# the per-GPU sums (``gpu_hours`` not NULL), their GPU-hours, those with an energy, and kWh.
_FLEET_SQL = """SELECT count(*), count(gpu_hours), sum(gpu_hours), sum(energy_gpu_hours),
  sum(energy_mj_used) / 3.6e9 FROM fleet_rollup WHERE bucket_s = ? AND ts >= ? AND ts < ?"""


def _counter(store: Store, tr: TimeRange) -> tuple[float | None, str]:
    """The counter's kWh over the whole hours of ``tr`` and the table it was summed from,
    where every GPU-hour has the counter: an exporter without the field, or hours rolled up
    before the store kept it, leave it to power x time for the whole range (half a range by
    counter and half by nothing would read as a drop in energy). From the fleet's hours, or
    the per-GPU hours where a fleet hour lacks its sums (None, "" without a counter)."""
    if HOUR not in store.gpu_rollup_levels() or tr.start < store.gpu_rollup_since():
        return None, ""
    start, end = _hours(tr)
    ((hours, kept, gpu_hours, counted, kwh),) = store.rows(_FLEET_SQL, [HOUR, start, end])
    table = "fleet_rollup"
    if hours == 0 or kept < hours:
        table = "gpu_rollup"
        ((gpu_hours, counted),) = store.rows(
            "SELECT count(*), count(energy_mj_used) FROM gpu_rollup "
            "WHERE bucket_s = ? AND ts >= ? AND ts < ?",
            [HOUR, start, end],
        )
        if gpu_hours > 0 and counted == gpu_hours:
            kwh = store.scalar(_COUNTER_SQL.format(table=table, group="", by=""),
                               [HOUR, start, end])  # fmt: skip
    if not gpu_hours or counted != gpu_hours:
        return None, ""
    return kwh, table


def energy(store: Store, tr: TimeRange, both: bool = True) -> Energy:
    """The fleet's GPU energy over the whole hours ``tr`` touches; without ``both``, power x
    time only where the counter does not answer (``kwh_power`` None otherwise: a 54-day
    fleet's node-hours are the slowest read of the Overview's cards)."""
    start, end = _hours(tr)
    counter, _ = _counter(store, tr)
    power = None
    if HOUR in store.rollup_levels() and (both or not counter):
        power = store.scalar(
            _POWER_SQL.format(group="", by=""), [store.sample_interval_s(), HOUR, start, end]
        )
    counter = float(counter) if counter is not None else None
    power = float(power) if power is not None else None
    if counter is not None and counter > 0:
        return Energy(counter, COUNTER, counter, power)
    return Energy(power, POWER if power is not None else None, None, power)


def energy_per_day(store: Store, tr: TimeRange) -> pd.DataFrame:
    """kWh per UTC day over ``tr`` (whole hours): day, kwh, basis."""
    return _fleet_by(store, tr, "time_bucket(INTERVAL 1 day, ts) AS day,", "day")


def _fleet_by(store: Store, tr: TimeRange, group: str, key: str) -> pd.DataFrame:
    """The fleet's kWh over the whole hours of ``tr`` grouped by ``group`` (a fixed SQL
    expression named ``key``, never input): by the counter where every GPU-hour has it, else
    power x time."""
    start, end = _hours(tr)
    by = f"GROUP BY {key} ORDER BY {key}"
    _, table = _counter(store, tr)
    if table:
        df = store.df(_COUNTER_SQL.format(table=table, group=group, by=by), [HOUR, start, end])
        if not df.empty and df["kwh"].fillna(0).sum() > 0:
            return df.assign(basis=COUNTER)
    df = store.df(
        _POWER_SQL.format(group=group, by=by), [store.sample_interval_s(), HOUR, start, end]
    )
    return df.assign(basis=POWER)


def per_million_tokens(kwh: float | None, tokens: float | None) -> float | None:
    """kWh per million tokens trained (None when either is unknown or no token was)."""
    if kwh is None or not tokens:
        return None
    return kwh / (tokens / 1e6)


# The hours of a run's GPUs: a per-GPU (or per-node) hour counts when one of the run's Slurm
# jobs held its node at some time in the hour. By node, not by dcgm-exporter's ``hpc_job``: the
# store keeps a GPU's latest label only, which names the job after, not the job then. (Training
# jobs take whole nodes; a node shared by two runs' jobs counts for both.)
_JOBS_CTE = """WITH j AS (
  SELECT job_id, hosts, time_bucket(INTERVAL 1 hour, start_ts) AS first_hour,
         coalesce(end_ts, polled_ts) AS end_ts
  FROM slurm_jobs WHERE run_id = ? AND start_ts IS NOT NULL AND hosts IS NOT NULL)"""

_RUN_COUNTER_T = _JOBS_CTE + """
SELECT {hour} count(*) AS gpu_hours, count(r.energy_mj_used) AS counted,
       sum(r.energy_mj_used) / 3.6e9 AS kwh
FROM gpu_rollup r JOIN gpus g USING (gpu_id)
WHERE r.bucket_s = ? AND r.ts >= ? AND r.ts < ? AND EXISTS (
  SELECT 1 FROM j WHERE r.ts >= j.first_hour AND r.ts < j.end_ts
    AND list_contains(j.hosts, g.host)) {by}"""

_RUN_POWER_T = _JOBS_CTE + """
SELECT {hour} sum(r.power_w * r.samples / nullif(r.gpus, 0)) * ? / 3.6e6 AS kwh
FROM node_rollup r JOIN nodes n USING (node_id)
WHERE r.bucket_s = ? AND r.ts >= ? AND r.ts < ? AND EXISTS (
  SELECT 1 FROM j WHERE r.ts >= j.first_hour AND r.ts < j.end_ts
    AND list_contains(j.hosts, n.host)) {by}"""
_RUN_COUNTER_SQL = _RUN_COUNTER_T.format(hour="", by="")
_RUN_POWER_SQL = _RUN_POWER_T.format(hour="", by="")
_HOURLY = {"hour": "r.ts AS hour,", "by": "GROUP BY r.ts ORDER BY r.ts"}


def run_jobs(store: Store, run_id: str) -> tuple[int, int]:
    """(Slurm jobs of ``run_id`` that name their nodes, distinct nodes among them): (0, 0) when
    the store does not know the run's GPUs."""
    ((jobs, hosts),) = store.rows(
        "SELECT count(DISTINCT (cluster, job_id_raw, requeue)), count(DISTINCT h) FROM ("
        "  SELECT cluster, job_id_raw, requeue, unnest(hosts) AS h FROM slurm_jobs"
        "  WHERE run_id = ? AND start_ts IS NOT NULL)",
        [run_id],
    )
    return int(jobs), int(hosts)


def run_energy(store: Store, run_id: str, tr: TimeRange, both: bool = True) -> Energy | None:
    """The GPU energy of ``run_id``'s own GPUs over the whole hours of ``tr`` (its Slurm jobs'
    GPUs in the hours they ran; see the module's docstring), by the counter where every such
    GPU-hour has it, else power x time; None when the store does not know the run's GPUs."""
    if run_jobs(store, run_id)[0] == 0:
        return None
    start, end = _hours(tr)
    counter = None
    if HOUR in store.gpu_rollup_levels() and tr.start >= store.gpu_rollup_since():
        ((hours, counted, kwh),) = store.rows(_RUN_COUNTER_SQL, [run_id, HOUR, start, end])
        if hours and counted == hours:
            counter = float(kwh)
    power = None
    if HOUR in store.rollup_levels() and (both or not counter):
        got = store.scalar(
            _RUN_POWER_SQL, [run_id, store.sample_interval_s(), HOUR, start, end]
        )
        power = float(got) if got is not None else None
    if counter is not None and counter > 0:
        return Energy(counter, COUNTER, counter, power)
    return Energy(power, POWER if power is not None else None, None, power)


def energy_per_hour(store: Store, tr: TimeRange, run_id: str | None = None) -> pd.DataFrame:
    """kWh per hour over the whole hours of ``tr``: hour, kwh, basis. Of ``run_id``'s own GPUs
    where the store knows them (as ``run_energy``), else of the fleet; by the counter where
    every GPU-hour of the range has it, else power x time (one basis for the whole range)."""
    start, end = _hours(tr)
    if run_id is not None and run_jobs(store, run_id)[0] > 0:
        if HOUR in store.gpu_rollup_levels() and tr.start >= store.gpu_rollup_since():
            df = store.df(_RUN_COUNTER_T.format(**_HOURLY), [run_id, HOUR, start, end])
            if not df.empty and (df["counted"] == df["gpu_hours"]).all() and df["kwh"].sum() > 0:
                return df[["hour", "kwh"]].assign(basis=COUNTER)
        args = [run_id, store.sample_interval_s(), HOUR, start, end]
        df = store.df(_RUN_POWER_T.format(**_HOURLY), args)
        return df.assign(basis=POWER)
    return _fleet_by(store, tr, "ts AS hour,", "hour")
