"""The rows a run's summary reads (``telemetry.metrics.summary``): its record, its training
totals, its interruptions counted by cause and listed, its restores per tier, its Slurm jobs
and where its data ends. The figures made of them are the metric's."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd

from telemetry.queries import DOWNTIME
from telemetry.queries.checkpoints import RESTORED, RESTORED_TIER
from telemetry.queries.failures import COSTED
from telemetry.store import Store


def run_ids(store: Store) -> list[str]:
    """Every run of the store, oldest first."""
    return [r[0] for r in store.rows("SELECT run_id FROM runs ORDER BY start_ts")]


def run_row(store: Store, run_id: str) -> pd.Series:
    """The run's row of ``runs``."""
    return store.df("SELECT * FROM runs WHERE run_id = ?", [run_id]).iloc[0]


def train_totals(store: Store, run_id: str) -> pd.Series:
    """The run's newest tokens, step and loss, and its mean throughput and MFU."""
    return store.df(
        """SELECT arg_max(tokens, ts) FILTER (WHERE tokens IS NOT NULL) AS tokens,
                  arg_max(step, ts) AS step,
                  avg(tokens_per_s) AS tps, avg(mfu) AS mfu, arg_max(loss, ts) AS loss
           FROM train_metrics WHERE run_id = ?""",
        [run_id],
    ).iloc[0]


def step_time(store: Store, run_id: str) -> tuple[Any, Any]:
    """The run's median seconds per step between consecutive progress lines, and the steps
    it trained (first to last stored)."""
    (row,) = store.rows(
        """WITH m AS (
             SELECT ts, step, lag(ts) OVER w AS pts, lag(step) OVER w AS pstep
             FROM train_metrics WHERE run_id = ? WINDOW w AS (ORDER BY ts, step))
           SELECT median(epoch(ts - pts) / (step - pstep)) FILTER (WHERE step > pstep),
                  max(step) - min(step)
           FROM m""",
        [run_id],
    )
    return row[0], row[1]


def causes(store: Store, run_id: str) -> pd.DataFrame:
    """The run's interruptions counted per planned, component, category and source: how many,
    their lost GPU-hours, downtime (where known), rework, lost steps and corrections."""
    return store.df(
        f"""SELECT planned, component, category, coalesce(source, 'posted') AS source,
                  count(*) AS n, sum(lost_gpu_hours) AS gh,
                  sum(coalesce(detect_s, 0) + coalesce(restart_s, 0))
                      FILTER (WHERE coalesce(detect_s, restart_s) IS NOT NULL) AS down_s,
                  sum(rework_s) AS rework_s,
                  sum(lost_steps) AS lost_steps, count(labelled_by) AS corrected
           FROM {COSTED} WHERE run_id = ? GROUP BY ALL""",
        [run_id],
    )


def interruption_rows(store: Store, run_id: str) -> pd.DataFrame:
    """Each interruption of the run, oldest first, with its cost and evidence."""
    return store.df(
        f"""SELECT ts, end_ts, component, category, planned, coalesce(source, 'posted') AS source,
                  confidence, host, rank, gpu, xid, restored_tier, restored_step, lost_steps,
                  {DOWNTIME} AS downtime_s, lost_gpu_hours, labelled_by,
                  orig_component, description, evidence, culprit_candidates, culprit_reason,
                  detect_s, failed_ts, noticed_ts
           FROM {COSTED} WHERE run_id = ? ORDER BY ts""",
        [run_id],
    )


def newest_record(store: Store, run_id: str, last: Any) -> datetime | None:
    """The newest of ``last`` (the run's newest record), its newest signal and its Slurm
    jobs' newest end."""
    return store.scalar(
        """SELECT greatest(?::TIMESTAMP, (SELECT max(ts) FROM signals WHERE run_id = ?),
                           (SELECT max(end_ts) FROM slurm_jobs WHERE run_id = ?))""",
        [last, run_id, run_id],
    )


def open_stops(store: Store, run_id: str) -> int:
    """The run's interruptions nobody restarted that came at or after its last step."""
    return int(store.scalar(
        """SELECT count(*) FROM interruptions WHERE run_id = ? AND end_ts IS NULL
           AND coalesce(ts >= (SELECT max(ts) FROM train_metrics WHERE run_id = ?), true)""",
        [run_id, run_id],
    ))  # fmt: skip


def restores_per_tier(store: Store, run_id: str) -> dict[str, int]:
    """How many of the run's interruptions restored from each tier."""
    return dict(store.rows(
        f"""SELECT {RESTORED_TIER} AS tier, count(*) FROM interruptions WHERE run_id = ?
           AND {RESTORED} GROUP BY tier ORDER BY 1""",
        [run_id],
    ))  # fmt: skip


def slurm_job_rows(store: Store, run_id: str) -> list[tuple[Any, ...]]:
    """The run's Slurm jobs (each requeue a record), oldest first: job id, requeue, name,
    user, partition, nodes, state, reason, exit code, start, end."""
    return store.rows(
        """SELECT job_id, requeue, name, user_name, partition, nodelist, state, reason,
                  exit_code, start_ts, end_ts
           FROM slurm_jobs WHERE run_id = ? ORDER BY coalesce(start_ts, submit_ts), job_id_raw,
           requeue""",
        [run_id],
    )


def gpu_sample_count(store: Store) -> int:
    """The GPU samples stored."""
    return int(store.scalar("SELECT count(*) FROM gpu_samples"))
