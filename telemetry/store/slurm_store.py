"""What the Slurm tables mean for the rest of the store: jobs attached to runs (or runs of their
own), and job ends and node events as ``signals`` for the interruption inference.

A step of ``telemetry.after_write``, run by the store writer before the runs are re-derived
after a ``Derive`` batch; it rewrites only when the Slurm tables
(or the runs they may attach to) changed since the last time (a fingerprint in ``meta``), so a
poll that changed nothing costs one small query. Everything is recomputed from the tables in
one transaction, never appended: the same jobs give the same rows, however often they are
polled, imported again or re-attached.

A job's run, in this order: ``--run-from-job`` mapped its name (``run_source = 'mapped'``, kept
as the source wrote it); a run whose id is the job's name; a run with a step stream whose hosts
(its signals' hosts) and times overlap the job's (``attached``); else the job is a run of its
own, ``slurm-<job id>`` (``job``; requeues of one job are one run). Runs made for jobs carry
``source = 'slurm'`` and go when no job names them any more.

Signals (``source = 'slurm'``): each job end in ``JOB_END_KINDS`` at its end time, on its node
when it ran on one (a NODE_FAIL of a larger job takes the node that went down or stopped
responding near its end), and each node event that is not a healthy state: a reason naming an
XID (``XID 79 GPU fell off the bus``) is an ``xid`` signal with that code, so the XID reference
and the Llama 3 components rank it; one naming a GPU is ``slurm_node_gpu``; a node not
responding is a node failure; a maintenance reservation is planned; any other drain or down
reason is ``slurm_node_down``.
"""

from __future__ import annotations

from typing import Any

from telemetry.signals import (
    SLURM_CANCELLED,
    SLURM_JOB_FAILED,
    SLURM_MAINTENANCE,
    SLURM_NODE_DOWN,
    SLURM_NODE_FAILURE,
    SLURM_NODE_GPU,
    SLURM_OOM,
    SLURM_PREEMPTED,
    SLURM_REQUEUED,
    SLURM_TIME_LIMIT,
    XID,
)

JOB_END_KINDS = {
    "NODE_FAIL": SLURM_NODE_FAILURE,
    "BOOT_FAIL": SLURM_NODE_FAILURE,
    "REQUEUED": SLURM_REQUEUED,
    "PREEMPTED": SLURM_PREEMPTED,
    "TIMEOUT": SLURM_TIME_LIMIT,
    "DEADLINE": SLURM_TIME_LIMIT,
    "FAILED": SLURM_JOB_FAILED,
    "CANCELLED": SLURM_CANCELLED,
    "OUT_OF_MEMORY": SLURM_OOM,
}
BAD_NODE = r"DOWN|DRAIN|FAIL|NOT_RESPONDING|MAINT"  # node states that are events
XID_IN_REASON = r"(?i)\bxid\s*[:#=]?\s*(\d{1,4})\b"
GPU_IN_REASON = r"(?i)\bgpus?\b|fell off the bus|\becc\b|nvlink|nvidia"
NOT_RESPONDING = r"(?i)not responding|unexpectedly rebooted|NOT_RESPONDING"
NODE_LOST = r"(?i)DOWN|FAIL|not.responding|rebooted"  # a node that took its jobs with it
NODE_FAIL_WINDOW_S = 600  # a node down this close to a NODE_FAIL is the node that failed
_FINGERPRINT_KEY = "slurm_refreshed"

_FINGERPRINT = """
SELECT (SELECT count(*) || ':' || coalesce(max(polled_ts)::VARCHAR, '') FROM slurm_jobs)
    || '|' || (SELECT count(*) FROM slurm_node_events)
    || '|' || (SELECT count(*) || ':' || coalesce(max(ts)::VARCHAR, '') FROM train_metrics)
    || '|' || (SELECT count(*) FROM runs WHERE source IS DISTINCT FROM 'slurm')
"""

_ATTACH = """
UPDATE slurm_jobs SET run_id = NULL, run_source = NULL WHERE run_source IS DISTINCT FROM 'mapped';
UPDATE slurm_jobs j SET run_id = r.run_id, run_source = 'attached'
  FROM runs r WHERE j.run_id IS NULL AND r.run_id = j.name AND r.source IS DISTINCT FROM 'slurm';
UPDATE slurm_jobs j SET run_id = m.run_id, run_source = 'attached'
FROM (
  WITH rh AS (SELECT DISTINCT run_id, host FROM signals
              WHERE run_id IS NOT NULL AND host IS NOT NULL AND source IS DISTINCT FROM 'slurm'),
       rs AS (SELECT run_id, min(ts) AS lo, max(ts) AS hi FROM train_metrics GROUP BY run_id),
       jh AS (SELECT cluster, job_id_raw, requeue, unnest(hosts) AS host, start_ts,
                     coalesce(end_ts, polled_ts) AS end_ts
              FROM slurm_jobs WHERE run_id IS NULL AND start_ts IS NOT NULL)
  SELECT jh.cluster, jh.job_id_raw, jh.requeue, min(rs.run_id) AS run_id
  FROM jh JOIN rh USING (host) JOIN rs ON rs.run_id = rh.run_id
  WHERE rs.lo <= jh.end_ts AND rs.hi >= jh.start_ts
  GROUP BY ALL
) m
WHERE j.cluster = m.cluster AND j.job_id_raw = m.job_id_raw AND j.requeue = m.requeue;
UPDATE slurm_jobs j SET run_id = 'slurm-' || job_id, run_source = 'job'
  WHERE run_id IS NULL AND EXISTS (SELECT 1 FROM slurm_jobs s WHERE s.cluster = j.cluster
                                   AND s.job_id_raw = j.job_id_raw AND s.start_ts IS NOT NULL);
DELETE FROM runs WHERE source = 'slurm'
  AND run_id NOT IN (SELECT run_id FROM slurm_jobs WHERE run_source IN ('job', 'mapped'));
INSERT OR REPLACE INTO runs (run_id, name, nodes, start_ts, end_ts, source, simulated)
SELECT run_id, arg_min(name, coalesce(start_ts, submit_ts)),
       max(len(hosts)), min(coalesce(start_ts, submit_ts)),
       CASE WHEN bool_or(end_ts IS NULL) THEN NULL ELSE max(end_ts) END, 'slurm', false
FROM slurm_jobs
WHERE run_source IN ('job', 'mapped')
  AND run_id NOT IN (SELECT run_id FROM runs WHERE source IS DISTINCT FROM 'slurm')
GROUP BY run_id;
"""

_SIGNALS = f"""
DELETE FROM signals WHERE source = 'slurm';
INSERT INTO signals (ts, run_id, host, gpu, kind, xid, detail, origin, line, source)
WITH ends AS (
  SELECT j.*, {{kind_case}} AS kind FROM slurm_jobs j
  WHERE end_ts IS NOT NULL AND state IN ({{states}})
), failed_node AS (
  SELECT e.cluster, e.job_id_raw, e.requeue, min(n.host) AS host
  FROM (SELECT cluster, job_id_raw, requeue, end_ts, unnest(hosts) AS host FROM ends
        WHERE kind = '{SLURM_NODE_FAILURE}') e
  JOIN slurm_node_events n ON n.host = e.host
   AND regexp_matches(n.state || ' ' || coalesce(n.reason, ''), '{NODE_LOST}')
   AND coalesce(n.reason_ts, n.ts)
       BETWEEN e.end_ts - INTERVAL {NODE_FAIL_WINDOW_S} SECOND
           AND e.end_ts + INTERVAL {NODE_FAIL_WINDOW_S} SECOND
  GROUP BY ALL
)
SELECT end_ts, run_id,
       coalesce(f.host, CASE WHEN len(hosts) = 1 THEN hosts[1] END), NULL, kind, NULL,
       'job ' || job_id || ' (' || coalesce(name, '') || ') ended ' || state
         || CASE WHEN requeue > 0 THEN ' after ' || requeue || ' requeue(s)' ELSE '' END,
       'slurm:job ' || job_id,
       'sacct: job ' || job_id || ' ' || coalesce(name, '') || ' ' || state
         || ' on ' || coalesce(nodelist, 'no node') || ', exit '
         || coalesce(exit_code::VARCHAR, '?') || ':' || coalesce(exit_signal::VARCHAR, '0')
         || CASE WHEN reason IS NOT NULL THEN ', reason ' || reason ELSE '' END
         || ', ' || strftime(end_ts, '%Y-%m-%dT%H:%M:%S'),
       'slurm'
FROM ends LEFT JOIN failed_node f USING (cluster, job_id_raw, requeue);
INSERT INTO signals (ts, run_id, host, gpu, kind, xid, detail, origin, line, source)
SELECT coalesce(reason_ts, ts), NULL, host, NULL,
       CASE WHEN regexp_matches(coalesce(reason, ''), '{XID_IN_REASON}') THEN '{XID}'
            WHEN regexp_matches(state || ' ' || coalesce(reason, ''), '{NOT_RESPONDING}')
              THEN '{SLURM_NODE_FAILURE}'
            WHEN regexp_matches(coalesce(reason, ''), '{GPU_IN_REASON}') THEN '{SLURM_NODE_GPU}'
            WHEN regexp_matches(state, 'MAINT') THEN '{SLURM_MAINTENANCE}'
            ELSE '{SLURM_NODE_DOWN}' END,
       TRY_CAST(nullif(regexp_extract(coalesce(reason, ''), '{XID_IN_REASON}', 1), '')
                AS SMALLINT),
       'node ' || host || ' ' || state || coalesce(': ' || reason, ''),
       'slurm:node ' || host,
       'scontrol: node ' || host || ' State=' || state
         || coalesce(' Reason=' || reason, '')
         || coalesce(' [' || coalesce(reason_user, '?') || '@'
                     || strftime(reason_ts, '%Y-%m-%dT%H:%M:%S') || ']', ''),
       'slurm'
FROM slurm_node_events WHERE regexp_matches(state, '{BAD_NODE}');
"""


def _signals_sql() -> str:
    kind_case = "CASE state " + " ".join(
        f"WHEN '{s}' THEN '{k}'" for s, k in JOB_END_KINDS.items()
    ) + " END"
    states = ", ".join(f"'{s}'" for s in JOB_END_KINDS)
    return _SIGNALS.replace("{kind_case}", kind_case).replace("{states}", states)


_SIGNALS_SQL = _signals_sql()  # built once from the constants above, never from input


def refresh(store: Any) -> bool:
    """Attach jobs to runs and rewrite the Slurm signals when the tables changed since the
    last refresh; True when it did."""
    fingerprint = str(store.scalar(_FINGERPRINT))
    if store.meta().get(_FINGERPRINT_KEY) == fingerprint:
        return False
    if store.scalar("SELECT count(*) FROM slurm_jobs") == 0 and not store.scalar(
        "SELECT count(*) FROM slurm_node_events"
    ):
        return False
    with store.transaction() as con:
        con.execute(_ATTACH)
        con.execute(_SIGNALS_SQL)
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [_FINGERPRINT_KEY, fingerprint])
    return True
