"""Overview queries: the fleet's series and its "now" (GPUs reporting, health, hottest), the
tiers' newest checkpoints, and the facts the alert rules judge (``telemetry.metrics.alert_rules``
holds the rules and their thresholds; this module only reads).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

import pandas as pd

from telemetry.queries import JOB_NODE_SQL, TimeRange, pick_level
from telemetry.queries.targets import SCRAPED
from telemetry.store import Store
from telemetry.utilization import ALLOCATED_MIB, REAL_SQL
from telemetry.vocabulary import BUSY_PCT, HOT_C, IDLE_PCT, TIERS

# Rollup columns a chart may ask for; names are checked here, never interpolated from input.
FLEET_METRICS = {
    "util_avg": ("GPU utilization", "%"),
    "temp_avg": ("Mean GPU temperature", "°C"),
    "temp_max": ("Hottest GPU temperature", "°C"),
    "power_w": ("Fleet power", "W"),
    "fb_used_avg": ("Framebuffer used", "MiB"),
    "sm_clock_avg": ("SM clock", "MHz"),
    "tensor_avg": ("Tensor pipe active", "ratio"),
    "real_avg": ("Real utilization", "%"),
}


def fleet_series(store: Store, tr: TimeRange, max_points: int = 1500) -> pd.DataFrame:
    """Fleet rollup rows in the range: ts, gpus, util_avg, temp_avg, temp_max, power_w, ..."""
    level = pick_level(store, tr, max_points)
    if level not in store.rollup_levels():
        return store.df(
            """SELECT ts, count(*) AS nodes, sum(n) AS gpus, sum(util_s) / sum(n) AS util_avg,
                      min(util_min) AS util_min, sum(temp_s) / sum(n) AS temp_avg,
                      max(temp_max) AS temp_max, sum(power_s) AS power_w,
                      sum(fb_s) / sum(n) AS fb_used_avg, sum(clock_s) / sum(n) AS sm_clock_avg,
                      sum(tensor_s) / sum(n) AS tensor_avg,
                      sum(real_s) / nullif(sum(n) FILTER (WHERE real_s IS NOT NULL), 0)
                        AS real_avg, ? AS bucket_s
               FROM node_tick WHERE ts >= ? AND ts <= ? GROUP BY ts ORDER BY ts""",
            [level, tr.start, tr.end],
        )
    return store.df(
        """SELECT ts, nodes, gpus, util_avg, util_min, temp_avg, temp_max, power_w,
                  fb_used_avg, sm_clock_avg, tensor_avg, real_avg, bucket_s
           FROM fleet_rollup WHERE bucket_s = ? AND ts >= ? AND ts <= ? ORDER BY ts""",
        [level, tr.start, tr.end],
    )


class Latest(NamedTuple):
    """The newest GPU sample and scrape round at some time, and whether every exporter was
    down at the end: then no GPU is reporting, whatever the last samples said."""

    sample: datetime | None  # newest GPU sample
    round: datetime | None  # newest scrape round (or sample, for a store without rounds)
    all_down: bool


def now_table(store: Store, at: datetime | None) -> str:
    """Where the GPUs' samples at ``at`` (None: now) are read from: ``gpu_now`` (each GPU's
    newest sample, kept as batches arrive: ``batch_sql.NOW_SQL``) when ``at`` is at or after the
    newest sample, else ``gpu_samples`` (a range that ends in the past)."""
    newest = store.scalar("SELECT max(ts) FROM gpu_now")
    return "gpu_now" if newest is not None and (at is None or at >= newest) else "gpu_samples"


def latest_sample_and_round(store: Store, at: datetime | None = None) -> Latest:
    """:class:`Latest` at or before ``at``, read in one statement (one snapshot: two queries
    would see a round written between them as "all down").

    "All down" means: every target scraped since the newest sample was down in its latest
    scrape. Per target, so that with several ingest daemons one daemon's round of dead
    exporters does not hide the GPUs another daemon still reaches. Only scrape targets count:
    a training job that keeps posting metrics says nothing about the exporters."""
    samples = now_table(store, at)  # a fixed table name, never input
    at = at or datetime.max
    (row,) = store.rows(
        f"""WITH s AS (SELECT max(ts) AS last FROM {samples} WHERE ts <= ?),
                since AS (SELECT arg_max(up, t.ts) AS up FROM targets t, s
                          WHERE t.ts >= s.last AND t.ts <= ? AND {SCRAPED} GROUP BY t.target)
           SELECT (SELECT last FROM s),
                  (SELECT max(ts) FROM targets WHERE ts <= ? AND {SCRAPED}),
                  (SELECT count(*) FROM since), (SELECT bool_or(up) FROM since)""",
        [at, at, at],
    )
    sample, scraped, targets, any_up = row
    rounds = [t for t in (sample, scraped) if t is not None]
    newest = max(rounds) if rounds else None
    all_down = sample is not None and newest != sample and targets > 0 and not any_up
    return Latest(sample, newest, bool(all_down))


# Each GPU's newest sample within one sample interval of the newest sample anywhere: the fleet
# "now". Not the samples stamped with the newest time alone: with several ingest daemons (or a
# round delivered in parts) the newest round holds only part of the fleet, and the Overview
# then read, say, a spare node's idle GPUs as the whole fleet's utilization (0.0 %). Read from
# ``gpu_now`` (one row per GPU, see ``now_table``), else from the samples.
_NOW = {
    "gpu_now": """SELECT * FROM gpu_now
          WHERE ts > CAST(? AS TIMESTAMP) - to_microseconds(?) AND ts <= CAST(? AS TIMESTAMP)""",
    "gpu_samples": """SELECT * FROM gpu_samples
          WHERE ts > CAST(? AS TIMESTAMP) - to_microseconds(?) AND ts <= CAST(? AS TIMESTAMP)
          QUALIFY row_number() OVER (PARTITION BY gpu_id ORDER BY ts DESC) = 1""",
}


def _now_params(store: Store, last: datetime | None) -> list[object]:
    return [last, int(store.sample_interval_s() * 1e6), last]


def fleet_latest(store: Store) -> dict[str, float | int | datetime | None]:
    """The fleet now: GPUs reporting vs expected, health classes (``healthy``: neither
    ``degraded`` nor ``idle``), power, hottest, from each GPU's newest sample within one
    sample interval of the newest (see ``_NOW``). If the newest scrape rounds found every
    exporter down, nobody is reporting: all GPUs are silent (and ``last_sample`` says since
    when), not the values of the last round that answered."""
    last, now, all_down = latest_sample_and_round(store)
    expected = store.scalar("SELECT count(*) FROM gpus")
    if last is None or all_down:  # no GPU samples now (or a store of training jobs alone)
        n = int(expected)
        return {
            "ts": now,
            "last_sample": last,
            "expected": n,
            "reporting": 0,
            "healthy": 0,
            "degraded": 0,
            "idle": 0,
            "failed": n,
        }
    (row,) = store.rows(
        f"""WITH s AS ({_NOW[now_table(store, last)]})
           SELECT count(*), avg(util_pct), sum(power_w), max(temp_c),
                  count(*) FILTER (WHERE temp_c >= ? OR sm_clock_mhz < 0.85 * (
                      SELECT max(sm_clock_mhz) FROM s)
                      AND util_pct > ?),
                  count(*) FILTER (WHERE util_pct < ?)
           FROM s""",
        [*_now_params(store, last), HOT_C, BUSY_PCT, IDLE_PCT],
    )
    reporting, degraded, idle = int(row[0]), int(row[4]), int(row[5])
    return _by_role(store, last) | {
        "ts": last,
        "last_sample": last,
        "expected": int(expected),
        "reporting": reporting,
        "healthy": max(reporting - degraded - idle, 0),
        "util_avg": row[1],
        "power_w": row[2],
        "temp_max": row[3],
        "degraded": degraded,
        "idle": idle,
        "failed": int(expected) - reporting,
    }


# Each reporting GPU's role now, where the exporters say which GPUs run a job (``hpc_job`` or
# a pod, as the replay keeps them): "job", else "drained" (Slurm drained or downed its node),
# "spare" (a hot spare), "out of the job" (a job node that runs none: in repair, back as a
# spare) or "idle". A fleet mean over them read "78.7 %" for a job whose GPUs ran at ~97 %
# beside 16 idle spare GPUs (issue 57, 6).
_ROLE_NOW = """CASE WHEN g.hpc_job IS NOT NULL OR g.pod IS NOT NULL THEN 'job'
  WHEN g.host IN (SELECT host FROM slurm_nodes
                  WHERE regexp_matches(state, 'DOWN|DRAIN|FAIL|MAINT')) THEN 'drained'
  WHEN n.role = 'spare' THEN 'spare' WHEN n.role = 'job' THEN 'out of the job'
  ELSE 'idle' END"""


def _by_role(store: Store, last: datetime) -> dict[str, Any]:
    """The GPUs reporting now by role (``roles``: role -> GPUs, job first) and the mean
    utilization of those running a job (``util_job``); empty where no GPU is labelled with a
    job (nothing then says which GPUs are the job's)."""
    if not store.scalar(
        "SELECT count(*) FROM (SELECT 1 FROM gpus WHERE hpc_job IS NOT NULL OR pod IS NOT NULL"
        " LIMIT 1)"
    ):
        return {}
    rows = store.rows(
        f"""WITH s AS ({_NOW[now_table(store, last)]})
           SELECT role, count(*), avg(util_pct) FROM (
             SELECT {_ROLE_NOW} AS role, s.util_pct
             FROM s JOIN gpus g USING (gpu_id) LEFT JOIN nodes n USING (node_id))
           GROUP BY role ORDER BY role <> 'job', role""",
        _now_params(store, last),
    )
    job = [r for r in rows if r[0] == "job"]
    return {"roles": {r[0]: int(r[1]) for r in rows}, "util_job": job[0][2] if job else None}


def gpu_telemetry(store: Store) -> bool:
    """Whether the store holds any GPU telemetry (an inventory or a sample): a run known from
    its logs alone has none, and its pages say so once instead of "0 / 0" and empty charts."""
    return store.scalar("SELECT count(*) FROM (SELECT 1 FROM gpus LIMIT 1)") > 0 or (
        store.scalar("SELECT count(*) FROM (SELECT 1 FROM node_tick LIMIT 1)") > 0)


def run_shape(store: Store, run_id: str) -> dict[str, int | None]:
    """What the run's record (its logs, its Slurm job) says of its size: ``gpus`` (the world
    size), ``nodes``, ``per_node`` (GPUs per node, when both are known and divide); None where
    it does not say."""
    rows = store.rows("SELECT gpus, nodes FROM runs WHERE run_id = ?", [run_id])
    gpus, nodes = rows[0] if rows else (None, None)
    per = gpus // nodes if gpus and nodes and gpus % nodes == 0 else None
    return {"gpus": gpus, "nodes": nodes, "per_node": per}


def hottest_gpus(store: Store, limit: int = 10) -> pd.DataFrame:
    """The hottest GPUs now (each GPU's newest sample, as in ``fleet_latest``); none while
    every exporter is down (the last temperatures seen are not the current ones)."""
    last, _, all_down = latest_sample_and_round(store)
    if all_down:
        last = None  # matches no row: the table shows its empty state
    return store.df(
        f"""WITH s AS ({_NOW[now_table(store, last)]})
           SELECT g.host, g.gpu, round(s.temp_c::DOUBLE, 1) AS temp_c,
                  round(s.util_pct::DOUBLE, 1) AS util_pct,
                  round(s.sm_clock_mhz::DOUBLE) AS sm_clock_mhz,
                  round(s.power_w::DOUBLE, 1) AS power_w
           FROM s JOIN gpus g USING (gpu_id)
           ORDER BY s.temp_c DESC, g.host, g.gpu LIMIT ?""",
        [*_now_params(store, last), int(limit)],
    )


def checkpoint_ages(store: Store, run_id: str, now: datetime) -> pd.DataFrame:
    """Per tier: newest successful checkpoint end time, its step, and its age at ``now``."""
    df = store.df(
        """SELECT tier, max(end_ts) AS last_end, arg_max(step, end_ts) AS step, count(*) AS n
           FROM checkpoints WHERE run_id = ? AND status = 'ok' AND end_ts <= ?
           GROUP BY tier""",
        [run_id, now],
    )
    df["age_s"] = [(now - t).total_seconds() for t in df["last_end"]]
    order = {t: i for i, t in enumerate(TIERS)}
    return df.sort_values("tier", key=lambda s: s.map(order)).reset_index(drop=True)


# ---- the facts the alert rules judge (``telemetry.metrics.alert_rules``) -------------------------


def steps_logged(store: Store, run_id: str, start: datetime, end: datetime) -> int:
    """How many training steps the run logged between ``start`` and ``end``."""
    return int(store.scalar(
        "SELECT count(*) FROM train_metrics WHERE run_id = ? AND ts BETWEEN ? AND ?",
        [run_id, start, end],
    ))  # fmt: skip


def gpu_count(store: Store) -> int:
    """The GPUs of the inventory."""
    return int(store.scalar("SELECT count(*) FROM gpus"))


def last_step_at(store: Store, run_id: str, at: datetime) -> datetime | None:
    """The time of the run's last logged step at or before ``at``."""
    return store.scalar(
        "SELECT max(ts) FROM train_metrics WHERE run_id = ? AND ts <= ?", [run_id, at]
    )


def inferred_stop_at(store: Store, run_id: str, ts: datetime) -> list[tuple[Any, ...]]:
    """The open inferred stop at ``ts`` (the data ends with it), as one row of planned,
    description, ts, source, rank, host; none without."""
    return store.rows(
        "SELECT planned, description, ts, source, rank, host FROM interruptions "
        "WHERE run_id = ? AND ts = ? "
        "AND end_ts IS NULL AND source = 'inferred' LIMIT 1",
        [run_id, ts],
    )


def open_stop_before(store: Store, run_id: str, at: datetime) -> list[tuple[Any, ...]]:
    """The newest open inferred stop at or before ``at`` of a run that logged no step (its
    data is its failure lines: it stopped before or without a progress line), as one row of
    planned, description, ts, source, rank, host (``inferred_stop_at``'s); none without."""
    return store.rows(
        "SELECT planned, description, ts, source, rank, host FROM interruptions "
        "WHERE run_id = ? AND ts <= ? AND end_ts IS NULL AND source = 'inferred' "
        "AND NOT EXISTS (SELECT 1 FROM train_metrics WHERE run_id = ?) "
        "ORDER BY ts DESC LIMIT 1",
        [run_id, at, run_id],
    )


def undated_interruptions(store: Store, run_id: str) -> int:
    """How many of the run's interruptions no line dates (``ts`` null: time unknown)."""
    return int(store.scalar(
        "SELECT count(*) FROM interruptions WHERE run_id = ? AND ts IS NULL", [run_id]
    ))  # fmt: skip


def restart_loop(
    store: Store, run_id: str, start: datetime, end: datetime
) -> list[tuple[Any, ...]]:
    """The newest interruption that restarted more than once between ``start`` and ``end``:
    description, ts, source; none without."""
    return store.rows(
        "SELECT description, ts, source FROM interruptions WHERE run_id = ? AND restarts > 1 "
        "AND coalesce(end_ts, ts) BETWEEN ? AND ? ORDER BY ts DESC LIMIT 1",
        [run_id, start, end],
    )


def xid_counts(store: Store, start: datetime, end: datetime) -> pd.DataFrame:
    """Per XID between ``start`` and ``end``: how many (``n``) and on which ``hosts``."""
    return store.df(
        """SELECT xid, count(*) AS n, string_agg(DISTINCT host, ', ') AS hosts FROM xid_events
           WHERE ts BETWEEN ? AND ? GROUP BY xid ORDER BY n DESC""",
        [start, end],
    )


def hot_gpus_at(store: Store, last: datetime, hot_c: float) -> pd.DataFrame:
    """The GPUs whose sample at ``last`` is at or above ``hot_c``, hottest first."""
    samples = now_table(store, last)  # a fixed table name, never input
    return store.df(
        f"""SELECT g.host, g.gpu, s.temp_c FROM {samples} s JOIN gpus g USING (gpu_id)
           WHERE s.ts = ? AND s.temp_c >= ? ORDER BY s.temp_c DESC""",
        [last, hot_c],
    )


def reporting_at(store: Store, last: datetime) -> int:
    """The GPUs that sent a sample at ``last``."""
    samples = now_table(store, last)  # a fixed table name, never input
    return int(store.scalar(f"SELECT count(*) FROM {samples} WHERE ts = ?", [last]))


def low_util_at(store: Store, last: datetime, below_pct: float) -> tuple[int, int]:
    """Of the GPUs the job holds at ``last`` (on its nodes, ``JOB_NODE_SQL``), how many are
    below ``below_pct`` utilized, and how many report real utilization.

    Real utilization where a GPU reports the profiling fields (a rank spinning in a collective
    reads 100 % on GPU_UTIL), else GPU_UTIL (``telemetry.utilization``). Of the job's nodes
    only the GPUs the job holds now count (busy, or a process's memory on them, read from the
    samples at ``last`` alone: a join on the sample time scanned every stored sample, 53 s at
    llama3-405b scale; unknown memory counts as held): a hot spare, a drained node or one
    taken out for repair (no process, no kernel) is idle by design, not under-used by the job
    (#37)."""
    samples = now_table(store, last)  # a fixed table name, never input
    ((low, real),) = store.rows(
        f"""SELECT count(*) FILTER (WHERE coalesce({REAL_SQL}, s.util_pct) < ?),
                   count(*) FILTER (WHERE {REAL_SQL} IS NOT NULL)
           FROM {samples} s JOIN gpus g USING (gpu_id) JOIN nodes n USING (node_id)
           LEFT JOIN (SELECT gpu_id, fb_used_mib FROM gpu_samples WHERE ts = ?) f
             USING (gpu_id)
           WHERE s.ts = ? AND {JOB_NODE_SQL} AND NOT (coalesce(s.util_pct, 0) < ?
             AND coalesce(f.fb_used_mib, ?) < ?)""",
        [below_pct, last, last, IDLE_PCT, ALLOCATED_MIB, ALLOCATED_MIB],
    )
    return int(low), int(real)


def checkpoint_policy(store: Store, run_id: str) -> str | None:
    """The run's checkpoint policy as stored (JSON), None without."""
    return store.scalar("SELECT ckpt_policy FROM runs WHERE run_id = ?", [run_id])


def last_ok_checkpoints(store: Store, run_id: str, now: datetime) -> dict[str, datetime]:
    """Per tier, the end of the run's newest successful checkpoint at or before ``now``."""
    return dict(store.rows(
        """SELECT tier, max(end_ts) FROM checkpoints
           WHERE run_id = ? AND status = 'ok' AND end_ts <= ? GROUP BY tier""",
        [run_id, now],
    ))  # fmt: skip
