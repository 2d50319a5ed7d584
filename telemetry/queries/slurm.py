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


def job_gpus(store: Store, job_id: str) -> pd.DataFrame:
    """Per GPU of job ``job_id`` during its time: host, gpu, samples, util, temp, power (means);
    by dcgm-exporter's ``hpc_job`` label where samples carry it, else by the job's nodes."""
    return store.df(
        """WITH j AS (
             SELECT job_id, hosts, start_ts, coalesce(end_ts, polled_ts) AS end_ts
             FROM slurm_jobs WHERE job_id = ? AND start_ts IS NOT NULL
           )
           SELECT s.host, s.gpu, count(*) AS samples, avg(s.util_pct) AS util_pct,
                  avg(s.temp_c) AS temp_c, avg(s.power_w) AS power_w
           FROM gpu_samples_v s JOIN j
             ON s.ts BETWEEN j.start_ts AND j.end_ts
            AND (s.hpc_job = j.job_id OR (s.hpc_job IS NULL AND list_contains(j.hosts, s.host)))
           GROUP BY s.host, s.gpu ORDER BY s.host, s.gpu""",
        [job_id],
    )
