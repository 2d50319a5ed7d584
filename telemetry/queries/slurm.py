"""What the pages ask of the Slurm tables: each node's state and drain reason, node events and
job ends in a time range, the jobs to filter by, and one job's GPUs during its time.

A job's GPUs: samples labelled with the job by dcgm-exporter (``hpc_job``, Slurm's own label)
when present, else the samples of the job's nodes between its start and end (a job still
running: up to its last poll). Every value is a bound parameter.
"""

from __future__ import annotations

import pandas as pd

from telemetry.queries import TimeRange
from telemetry.store import Store
from telemetry.store.rollups import gpu_table

END_STATES = ("NODE_FAIL", "BOOT_FAIL", "REQUEUED", "PREEMPTED", "TIMEOUT", "DEADLINE", "FAILED",
              "CANCELLED", "OUT_OF_MEMORY")  # fmt: skip


def node_states(store: Store) -> pd.DataFrame:
    """host, state, reason, reason_user, reason_ts, polled_ts: worst (not idle/allocated) first."""
    return store.df(
        """SELECT host, state, reason, reason_user, reason_ts, polled_ts FROM slurm_nodes
           ORDER BY regexp_matches(state, 'DOWN|DRAIN|FAIL|NOT_RESPONDING') DESC,
                    reason IS NULL, host"""
    )


def node_events(store: Store, tr: TimeRange, limit: int = 500) -> pd.DataFrame:
    """Node events (drain, down, not responding, back) and job ends in ``tr``, newest first:
    ts, what ("node" or "job"), who (host or job id), state, detail."""
    ph = ", ".join("?" for _ in END_STATES)
    return store.df(
        f"""SELECT * FROM (
              SELECT coalesce(reason_ts, ts) AS ts, 'node' AS what, host AS who, state,
                     coalesce(reason, '') || coalesce(' (set by ' || reason_user || ')', '')
                       AS detail
              FROM slurm_node_events WHERE coalesce(reason_ts, ts) BETWEEN ? AND ?
              UNION ALL
              SELECT end_ts, 'job', job_id, state,
                     coalesce(name, '') || ' on ' || coalesce(nodelist, 'no node')
                       || coalesce(', exit ' || exit_code, '')
              FROM slurm_jobs WHERE end_ts BETWEEN ? AND ? AND state IN ({ph}))
            ORDER BY ts DESC, who LIMIT ?""",
        [tr.start, tr.end, tr.start, tr.end, *END_STATES, limit],
    )


def jobs(store: Store, tr: TimeRange, limit: int = 300) -> pd.DataFrame:
    """Jobs that ran in ``tr`` (latest record of each), newest first: job_id, name, state,
    nodelist, start_ts, end_ts, run_id."""
    return store.df(
        """SELECT job_id, name, state, nodelist, start_ts, end_ts, run_id FROM slurm_jobs
           WHERE start_ts IS NOT NULL AND start_ts <= ? AND coalesce(end_ts, polled_ts) >= ?
           QUALIFY row_number() OVER (PARTITION BY cluster, job_id_raw ORDER BY requeue DESC) = 1
           ORDER BY start_ts DESC, job_id LIMIT ?""",
        [tr.end, tr.start, limit],
    )


# A job's GPU samples: the raw rows, and before the raw-retention horizon (``--raw-retention``)
# the finest per-GPU rollup's buckets (5 minutes) that start in the job's time, each weighted
# by the samples it holds; both labelled as the GPU is (``gpus``).
_RAW = "SELECT ts, gpu_id, 1 AS n, util_pct AS u, temp_c AS t, power_w AS p FROM gpu_samples s"
_SAMPLES = f"""{_RAW} WHERE s.ts >= ?
  UNION ALL
  SELECT r.ts, r.gpu_id, r.samples, r.util_avg, r.temp_avg, r.power_w
  FROM {{rollup}} r WHERE r.ts < ?"""


def _mean(col: str, out: str) -> str:
    return (f"sum(s.{col} * s.n) FILTER (WHERE s.{col} IS NOT NULL) / "
            f"nullif(sum(s.n) FILTER (WHERE s.{col} IS NOT NULL), 0) AS {out}")  # fmt: skip


def job_gpus(store: Store, job_id: str) -> pd.DataFrame:
    """Per GPU of job ``job_id`` during its time: host, gpu, samples, util, temp, power (means);
    by dcgm-exporter's ``hpc_job`` label where samples carry it, else by the job's nodes. Where
    raw retention let the samples go, from the per-GPU rollup (to its 5-minute buckets)."""
    since = store.raw_since()
    levels = store.gpu_rollup_levels()
    params: list[object] = [job_id]
    source = f"({_RAW}) s"
    if since is not None and levels:
        source = f"({_SAMPLES.format(rollup=gpu_table(levels[0]))}) s"
        params = [job_id, since, since]
    return store.df(
        f"""WITH j AS (
             SELECT job_id, hosts, start_ts, coalesce(end_ts, polled_ts) AS end_ts
             FROM slurm_jobs WHERE job_id = ? AND start_ts IS NOT NULL
           ),
           v AS (SELECT s.*, g.host, g.gpu, g.hpc_job FROM {source} JOIN gpus g USING (gpu_id))
           SELECT s.host, s.gpu, sum(s.n)::BIGINT AS samples, {_mean("u", "util_pct")},
                  {_mean("t", "temp_c")}, {_mean("p", "power_w")}
           FROM v s JOIN j
             ON s.ts BETWEEN j.start_ts AND j.end_ts
            AND (s.hpc_job = j.job_id OR (s.hpc_job IS NULL AND list_contains(j.hosts, s.host)))
           GROUP BY s.host, s.gpu ORDER BY s.host, s.gpu""",
        params,
    )
