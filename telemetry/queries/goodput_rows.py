"""The rows goodput and the recovery spans read (``telemetry.metrics.goodput``,
``telemetry.metrics.recovery``): a run's interruptions with the steps a restart redid, its
progress pairs summed per hour with the ideal step time, its exclusions, timed restores, saves
and Megatron-LM timers. Times are seconds from ``t0`` (the run window's start) where the
accounting wants them so; the arithmetic over them is the metric's."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd

from telemetry.queries import TimeRange
from telemetry.store import Store

# consecutive progress points of one attempt that advanced (a pair across a restart is no step)
_PAIRS = """p AS (
      SELECT ts, step, attempt, lag(ts) OVER w AS pts, lag(step) OVER w AS pstep,
             lag(attempt) OVER w AS patt
      FROM train_metrics WHERE run_id = ? AND ts BETWEEN ? AND ?
      WINDOW w AS (ORDER BY ts, step)),
    d AS MATERIALIZED (SELECT ts, epoch(ts) - epoch(pts) AS dt, (step - pstep)::DOUBLE AS ds FROM p
          WHERE pstep IS NOT NULL AND step > pstep AND attempt IS NOT DISTINCT FROM patt
            AND ts > pts)"""

# The steps a stop's next progress line ran after training resumed: since the restored step
# after a restart (the step went back, or the attempt changed), since the last progress line
# otherwise (that pair of points is then a step pair: its steps are already the running
# time's, ``_PAIRS``); ``counted`` says which. Null without a next line.
_FIRST = """(SELECT min(m.step) FROM train_metrics m
             WHERE m.run_id = i.run_id AND m.ts = i.end_ts)"""
_LAST = """(SELECT max(m.step) FROM train_metrics m WHERE m.run_id = i.run_id AND m.ts = i.ts)"""
_SAME_ATTEMPT = """((SELECT any_value(m.attempt) FROM train_metrics m
                     WHERE m.run_id = i.run_id AND m.ts = i.end_ts) IS NOT DISTINCT FROM
                    (SELECT any_value(m.attempt) FROM train_metrics m
                     WHERE m.run_id = i.run_id AND m.ts = i.ts))"""
COUNTED = f"coalesce({_FIRST} > {_LAST} AND {_SAME_ATTEMPT}, false)"
FIRST_REDONE = f"""CASE WHEN {COUNTED} THEN {_FIRST} - {_LAST}
                       ELSE {_FIRST} - i.restored_step END"""


def interruptions(store: Store, run_id: str, win: TimeRange) -> pd.DataFrame:
    """The run's interruptions that overlap ``win``, with ``first_redone`` and ``counted``."""
    return store.df(
        f"""SELECT ts, end_ts, detect_s, restart_s, coalesce(planned, false) AS planned,
                  coalesce(lost_steps, 0) AS lost_steps, {FIRST_REDONE} AS first_redone,
                  {COUNTED} AS counted
           FROM interruptions i
           WHERE run_id = ? AND ts <= ? AND coalesce(end_ts, ts) >= ?""",
        [run_id, win.end, win.start],
    )


def unplanned(store: Store, run_id: str, at: datetime | None) -> pd.DataFrame:
    """The run's unplanned interruptions (the one that began at ``at`` alone, if given), with
    what the recovery spans read."""
    return store.df(
        f"""SELECT ts, end_ts, detect_s, restart_s, coalesce(lost_steps, 0) AS lost_steps,
                  evidence, source, failed_ts, noticed_ts, {FIRST_REDONE} AS first_redone
           FROM interruptions i WHERE run_id = ? AND NOT coalesce(planned, false)
             AND (?::TIMESTAMP IS NULL OR ts = ?) ORDER BY ts""",
        [run_id, at, at],
    )


def step_hours(
    store: Store, run_id: str, win: TimeRange, mad_k: float, t0: datetime
) -> list[tuple[Any, ...]]:
    """Per hour of the run's progress pairs in ``win`` (seconds from ``t0``): its steps, the
    ideal step time (the mean over pairs at most median + ``mad_k`` MAD), its seconds and its
    median step time. One statement: the pairs are read once for the ideal and the hours (54
    days of a run are ~700 K points, never sent to Python)."""
    return store.rows(
        f"""WITH {_PAIRS},
            m AS (SELECT median(dt / ds) AS med FROM d),
            a AS (SELECT median(abs(dt / ds - med)) AS mad FROM d, m),
            i AS (SELECT sum(dt) FILTER (WHERE dt / ds <= med + ? * mad + 1e-9)
                         / sum(ds) FILTER (WHERE dt / ds <= med + ? * mad + 1e-9) AS ideal
                  FROM d, m, a),
            h AS (SELECT epoch(date_trunc('hour', ts)) - epoch(?::TIMESTAMP) AS t, sum(ds) AS ds,
                         sum(dt) AS dt, median(dt / ds) AS med
                  FROM d GROUP BY ALL)
            SELECT h.t, h.ds, i.ideal, h.dt, h.med FROM h, i ORDER BY h.t""",
        [run_id, win.start, win.end, mad_k, mad_k, t0],
    )


def first_step(store: Store, run_id: str, win: TimeRange) -> datetime | None:
    """The time of the run's first progress line in ``win``."""
    return store.scalar(
        "SELECT min(ts) FROM train_metrics WHERE run_id = ? AND ts BETWEEN ? AND ?",
        [run_id, win.start, win.end],
    )


def exclusions(store: Store, run_id: str, win: TimeRange, t0: datetime) -> pd.DataFrame:
    """The run's goodput exclusions overlapping ``win`` (``a``, ``b``: seconds from ``t0``);
    none in a store from before them."""
    if not store.has_table("goodput_exclusions"):
        return pd.DataFrame({"a": [], "b": []})
    return store.df(
        """SELECT epoch(start_ts) - epoch(?::TIMESTAMP) AS a,
                  epoch(end_ts) - epoch(?::TIMESTAMP) AS b
           FROM goodput_exclusions WHERE run_id = ? AND start_ts < ? AND end_ts > ?""",
        [t0, t0, run_id, win.end, win.start],
    )


def restores(store: Store, run_id: str, win: TimeRange, t0: datetime) -> pd.DataFrame:
    """A restore the log times (a load's start and its finish: ``checkpoint_events`` "load"
    and "load_end"), each finish in ``win`` paired with the newest start before it, within 6
    hours (``a``, ``b``: seconds from ``t0``)."""
    return store.df(
        """WITH l AS (SELECT run_id, ts FROM checkpoint_events WHERE run_id = ? AND kind = 'load'),
                e AS (SELECT run_id, ts FROM checkpoint_events
                      WHERE run_id = ? AND kind = 'load_end' AND ts BETWEEN ? AND ?)
           SELECT epoch(l.ts) - epoch(?::TIMESTAMP) AS a, epoch(e.ts) - epoch(?::TIMESTAMP) AS b
           FROM e ASOF JOIN l ON e.run_id = l.run_id AND e.ts >= l.ts
           WHERE e.ts - l.ts <= INTERVAL 6 HOUR""",
        [run_id, run_id, win.start, win.end, t0, t0],
    )


def loads(store: Store, run_id: str) -> pd.DataFrame:
    """Every restore of the run the log times (``a``, ``b``: its start and finish), as
    ``restores`` pairs them, in order."""
    return store.df(
        """WITH l AS (SELECT run_id, ts FROM checkpoint_events WHERE run_id = ? AND kind = 'load'),
                e AS (SELECT run_id, ts FROM checkpoint_events
                      WHERE run_id = ? AND kind = 'load_end')
           SELECT l.ts AS a, e.ts AS b FROM e ASOF JOIN l ON e.run_id = l.run_id AND e.ts >= l.ts
           WHERE e.ts - l.ts <= INTERVAL 6 HOUR ORDER BY a""",
        [run_id, run_id],
    )


def job_starts(store: Store, run_id: str) -> list[datetime]:
    """Each start of one of the run's Slurm jobs (a requeue is a record of its own: sacct -D)."""
    if not store.has_table("slurm_jobs"):
        return []
    return [pd.Timestamp(t).to_pydatetime() for (t,) in store.rows(
        "SELECT start_ts FROM slurm_jobs WHERE run_id = ? AND start_ts IS NOT NULL ORDER BY 1",
        [run_id])]  # fmt: skip


def megatron_timers(
    store: Store, run_id: str, win: TimeRange, t0: datetime
) -> list[tuple[Any, ...]]:
    """Megatron-LM's timers (``rank_perf``, as printed: the slowest rank's milliseconds of each
    report), as (is ``evaluate``, seconds from ``t0``, ms): ``evaluate`` (after each
    evaluation, its whole time, dated by the progress line before it: when it started) and
    ``batch-generator`` (per iteration, averaged over the log interval), the latter averaged per
    hour. None in a store without the table."""
    if not store.has_table("rank_perf"):
        return []
    return store.rows(
        """WITH r AS (
             SELECT metric = 'evaluate' AS ev, ts, max(value_ms) AS ms FROM rank_perf
             WHERE run_id = ? AND ts BETWEEN ? AND ? AND value_ms IS NOT NULL
               AND metric IN ('evaluate', 'batch-generator', 'batch generator') GROUP BY ALL)
           SELECT ev, epoch(CASE WHEN ev THEN ts ELSE date_trunc('hour', ts) END)
                      - epoch(?::TIMESTAMP) AS t,
                  CASE WHEN ev THEN max(ms) ELSE avg(ms) END AS ms
           FROM r GROUP BY 1, 2""",
        [run_id, win.start, win.end, t0],
    )


def blocking_saves(store: Store, run_id: str, win: TimeRange, t0: datetime) -> pd.DataFrame:
    """The run's stored checkpoints started in ``win`` with a blocking time (``t``: seconds
    from ``t0``, ``blocking_s``)."""
    return store.df(
        """SELECT epoch(start_ts) - epoch(?::TIMESTAMP) AS t, blocking_s FROM checkpoints
           WHERE run_id = ? AND status = 'ok' AND blocking_s IS NOT NULL
             AND start_ts BETWEEN ? AND ?""",
        [t0, run_id, win.start, win.end],
    )


def timed_saves(store: Store, run_id: str, win: TimeRange) -> list[tuple[float, float]]:
    """The checkpoint saves the log times (a save's start line and its "saved" line:
    ``checkpoint_events`` "save_start" and "save_end", each end paired with the newest start
    before it, within 6 hours) that training waited for: no progress line between the two (an
    asynchronous save that finished while steps went on is not one). A save a stored
    checkpoint already gives a blocking time for is that checkpoint's, not counted twice.
    Seconds from ``win.start``."""
    rows = store.rows(
        """WITH s AS (SELECT run_id, ts, step FROM checkpoint_events
                      WHERE run_id = ? AND kind = 'save_start'),
                e AS (SELECT run_id, ts, step FROM checkpoint_events
                      WHERE run_id = ? AND kind = 'save_end' AND ts BETWEEN ? AND ?)
           SELECT epoch(s.ts) - epoch(?::TIMESTAMP), epoch(e.ts) - epoch(?::TIMESTAMP)
           FROM e ASOF JOIN s ON e.run_id = s.run_id AND e.ts >= s.ts
           WHERE e.ts - s.ts <= INTERVAL 6 HOUR AND e.ts > s.ts
             AND e.step IS NOT DISTINCT FROM s.step
             AND NOT EXISTS (SELECT 1 FROM train_metrics m WHERE m.run_id = e.run_id
                             AND m.ts > s.ts AND m.ts < e.ts)
             AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.run_id = e.run_id
                             AND c.step = e.step AND c.blocking_s IS NOT NULL)""",
        [run_id, run_id, win.start, win.end, win.start, win.start],
    )
    return [(float(a), float(b)) for a, b in rows]


def warm_pairs(store: Store, run_id: str, resumed: datetime) -> list[tuple[Any, ...]]:
    """The run's progress points in the 6 hours from ``resumed`` (at most 1,000) with the
    seconds and steps to the next: where the warm-up after a restart ends."""
    return store.rows(
        """SELECT ts, epoch(lead(ts) OVER w) - epoch(ts), lead(step) OVER w - step
           FROM train_metrics WHERE run_id = ? AND ts >= ? AND ts < ? + INTERVAL 6 HOUR
           WINDOW w AS (ORDER BY ts, step) ORDER BY ts LIMIT 1000""",
        [run_id, resumed, resumed],
    )
