"""Training-progress queries: loss and throughput series, loss spikes, and the run events
(interruptions, restores, checkpoints) to mark on the loss curve.

A run that restarts from a checkpoint logs some steps twice: steps 401..600 of the first
attempt were thrown away and trained again after the restore. Drawn as one line, the curve
jumps from step 600 back to 400 and smoothing carries across the restart, so every series
leaves here with its restarts marked (``mark_restarts``): which piece between restarts a row
belongs to, and whether its work was later rolled back.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api.indexers import BaseIndexer

from telemetry.queries import TimeRange, thinned_metrics, train_series
from telemetry.store import Store


def step_span(store: Store, run_id: str, tr: TimeRange) -> tuple[int, int] | None:
    """Lowest and highest step a run logged inside the time range."""
    row = store.rows(
        "SELECT min(step), max(step) FROM train_metrics WHERE run_id = ? AND ts BETWEEN ? AND ?",
        [run_id, tr.start, tr.end],
    )[0]
    return None if row[0] is None else (int(row[0]), int(row[1]))


def series_by_steps(
    store: Store, run_id: str, lo: int, hi: int, max_points: int = 2000
) -> pd.DataFrame:
    """A run's metrics for steps ``lo``..``hi`` (every attempt), thinned like ``train_series``."""
    return thinned_metrics(store, run_id, "step", lo, hi, max_points)


def overlay_series(
    store: Store, run_id: str, tr: TimeRange, overlay: object, axis: str
) -> dict[str, pd.DataFrame]:
    """The run's series in the range, then each other run of ``overlay`` (a list of run ids;
    anything else in it is skipped) to compare with it: over the same time on a wall-clock
    ``axis`` (``time``), else over the same steps the run logged in the range. Each with its
    restart pieces (``mark_restarts``) and seconds per step (``step_seconds``)."""
    out = {run_id: train_series(store, run_id, tr)}
    span = step_span(store, run_id, tr)
    for run in overlay if isinstance(overlay, list) else []:
        if not isinstance(run, str) or run == run_id or run in out:
            continue
        if axis == "time":
            out[run] = train_series(store, run, tr)
        elif span is not None:  # compare runs over the same steps
            out[run] = series_by_steps(store, run, span[0], span[1])
    marked = {run: with_restarts(store, run, df) for run, df in out.items()}
    return {run: df.assign(step_s=step_seconds(df)) for run, df in marked.items()}


def restart_times(store: Store, run_id: str) -> np.ndarray:
    """When the run stopped or came back, as its records date it: each interruption's start
    and each checkpoint load it logged (``datetime64[ns]``, sorted). A progress point after
    one of them begins a new piece (``mark_restarts``)."""
    rows = store.rows(
        """SELECT ts FROM interruptions WHERE run_id = ? AND ts IS NOT NULL
           UNION SELECT ts FROM checkpoint_events
           WHERE run_id = ? AND kind = 'load' AND ts IS NOT NULL
           ORDER BY 1""",
        [run_id, run_id],
    )
    return np.array([r[0] for r in rows], dtype="datetime64[ns]")


def with_restarts(store: Store, run_id: str, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (the run's metrics in time order) marked by ``mark_restarts`` with the run's
    stored stops and checkpoint loads."""
    return mark_restarts(df, restart_times(store, run_id))


def mark_restarts(df: pd.DataFrame, restarts: np.ndarray | None = None) -> pd.DataFrame:
    """``df`` (a metrics series in time order: ts, step, attempt) with two columns added:

    - ``segment``: 0, 1, 2... the piece of training between restarts a row belongs to. A new
      piece starts where the attempt changes or the step goes back (a restore from a
      checkpoint; logs without an attempt number show a restart only that way), or at the
      first point after one of ``restarts`` (``restart_times``: a stop or a checkpoint load
      at or after the point before it). A step logged twice in a row (a progress line
      repeated around a checkpoint) is no restart by itself: a job that failed in a step and
      came back from the checkpoint before it logs that step again, and only the stop and
      the load between the two lines tell the restart (the line used to join across it).
    - ``rolled_back``: the row's step was trained again later, from an older checkpoint (its
      work was lost): its step is at or beyond the first step of some later piece.
    """
    if df.empty:
        return df.assign(segment=pd.Series(dtype="int64"), rolled_back=pd.Series(dtype=bool))
    step = df["step"].to_numpy(dtype=float)
    attempt = df["attempt"].fillna(-1).to_numpy()
    new = np.r_[False, (attempt[1:] != attempt[:-1]) | (step[1:] < step[:-1])]
    if restarts is not None and len(restarts) and len(df) > 1:
        ts = df["ts"].to_numpy(dtype="datetime64[ns]")
        before = np.searchsorted(restarts, ts, side="left")  # restarts before each point
        new[1:] |= before[1:] > before[:-1]  # one in [previous point, this point)
    segment = np.cumsum(new)
    first = pd.Series(step).groupby(segment).first().to_numpy()  # first step of each piece
    # the lowest first step of any later piece: a row at or past it was trained again
    later = np.r_[np.minimum.accumulate(first[::-1])[::-1][1:], np.inf]
    return df.assign(segment=segment, rolled_back=step >= later[segment])


_X_COLUMN = {"step": "step", "tokens": "tokens"}  # a Training x axis -> its metrics column


def time_of_steps(
    store: Store, run_id: str, axis: str, lo: float, hi: float
) -> TimeRange | None:
    """When the run trained the steps (or tokens, on that axis) ``lo``..``hi``: a zoom on the
    Step axis as the time range the shared view can hold (the URL's from/to). None when no
    progress point of the run lies there."""
    col = _X_COLUMN.get(axis)
    if col is None or not lo < hi:
        return None
    (first, last, tokens), = store.rows(
        f"""SELECT min(ts) FILTER (WHERE {col} BETWEEN ? AND ?),
                   max(ts) FILTER (WHERE {col} BETWEEN ? AND ?), count(tokens)
            FROM train_metrics WHERE run_id = ?""",
        [float(lo), float(hi), float(lo), float(hi), run_id],
    )
    if col == "tokens" and not tokens:  # a run without tokens is drawn by step on that axis
        return time_of_steps(store, run_id, "step", lo, hi)
    if first is None or first >= last:
        return None
    return TimeRange(first, last)


def step_seconds(df: pd.DataFrame) -> pd.Series:
    """Seconds per step at each point of a series marked by ``mark_restarts``: the time since
    the previous point over the steps since it (Megatron-LM's "elapsed time per iteration"
    over its log interval, for any trainer that logs steps with times), NaN at a piece's first
    point (a restart's wait is no step time) and where the step did not advance."""
    if df.empty:
        return pd.Series(dtype=float)
    dt = df["ts"].diff().dt.total_seconds()
    ds = df["step"].astype(float).diff()
    same = df["segment"].eq(df["segment"].shift())
    return (dt / ds).where(same & (ds > 0))


def loss_spikes(
    store: Store,
    run_id: str,
    tr: TimeRange,
    window: int = 100,
    z: float = 6.0,
    min_jump: float = 0.05,
    limit: int = 50,
) -> pd.DataFrame:
    """Loss spikes in the range, on every logged step (not the thinned series).

    A spike starts where the loss exceeds the mean of the previous ``window`` logged steps of
    the same attempt by ``z`` standard deviations and by at least ``min_jump`` (relative),
    with at least half a window logged before it. Consecutive spiking rows form one spike,
    reported once with the peak loss within ``window`` logged steps of its onset.
    Columns: ts, step, loss (peak), baseline, jump_pct, attempt.

    The rows come from SQL in time order; the moving windows are pandas' rolling windows
    (a run's 71,000 steps: 35 ms with the fetch, where DuckDB's framed windows took 150 ms;
    tests/test_queries_training.py holds the SQL they equal)."""
    df = store.df(
        """SELECT ts, step, loss, attempt FROM train_metrics
           WHERE run_id = ? AND ts BETWEEN ? AND ? ORDER BY attempt, ts""",
        [run_id, tr.start, tr.end],
    )
    cols = ["ts", "step", "loss", "baseline", "jump_pct", "attempt"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    w, n = int(window), len(df)
    attempt = df["attempt"].to_numpy(dtype=float)  # NaN: one piece, as SQL's NULL partition
    first = np.r_[
        True, (attempt[1:] != attempt[:-1]) & ~(np.isnan(attempt[1:]) & np.isnan(attempt[:-1]))
    ]
    row = np.arange(n)
    starts = np.flatnonzero(first)
    piece_start = starts[np.cumsum(first) - 1]
    piece_end = np.r_[starts[1:], n][np.cumsum(first) - 1]
    lo = np.maximum(row - w, piece_start)  # the previous w rows of the piece
    loss = df["loss"].astype(float)
    before = loss.rolling(_Bounds(lo, row), min_periods=1)
    mu = before.mean().to_numpy()
    sd = loss.rolling(_Bounds(lo, row), min_periods=2).std().to_numpy()
    ahead = loss.rolling(_Bounds(row, np.minimum(row + w + 1, piece_end)), min_periods=1).max()
    x = loss.to_numpy()
    with np.errstate(invalid="ignore"):
        hot = (row - lo >= w / 2) & (x > mu + z * sd) & (x > mu * (1 + min_jump))
    onset = hot & ~(np.r_[False, hot[:-1]] & ~first)
    spike = np.cumsum(onset)
    _, at = np.unique(spike[hot], return_index=True)
    rows = np.flatnonzero(hot)[at]  # the first row of each spike
    peak, base = ahead.to_numpy()[rows], mu[rows]
    out = df.iloc[rows].assign(loss=peak, baseline=base, jump_pct=100 * (peak / base - 1))[cols]
    return out.sort_values("ts", kind="stable").head(int(limit)).reset_index(drop=True)


class _Bounds(BaseIndexer):
    """Each row's window as [start, end) row numbers, for pandas' rolling aggregates."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        super().__init__()
        self.bounds = (start.astype(np.int64), end.astype(np.int64))

    def get_window_bounds(
        self,
        num_values: int = 0,
        min_periods: int | None = None,
        center: bool | None = None,
        closed: str | None = None,
        step: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        return self.bounds


def run_events(store: Store, run_id: str, tr: TimeRange) -> pd.DataFrame:
    """Interruptions in the range with the step at failure (restored + lost steps) and the
    time training resumed, for markers and rolled-back spans.

    An interruption reported without its steps (a training job's own report may not know
    them) is placed at the last step logged by then and rolls nothing back; unknown detection
    or restart time counts as none."""
    df = store.df(
        """SELECT ts, component, category, host, planned, restored_tier, restored_step,
                  restored_step + lost_steps AS failed_step, lost_steps,
                  ts + to_microseconds(CAST(
                      (coalesce(detect_s, 0) + coalesce(restart_s, 0)) * 1e6 AS BIGINT)) AS resumed
           FROM interruptions WHERE run_id = ? AND ts BETWEEN ? AND ? ORDER BY ts""",
        [run_id, tr.start, tr.end],
    )
    unknown = df["failed_step"].isna()
    if unknown.any():
        logged = store.df(
            """SELECT e.ts, coalesce(m.step, 0) AS step
               FROM (SELECT unnest(?::TIMESTAMP[]) AS ts) e
               ASOF LEFT JOIN (SELECT ts, step FROM train_metrics WHERE run_id = ?) m
               ON e.ts >= m.ts ORDER BY e.ts""",
            [list(df.loc[unknown, "ts"]), run_id],
        )
        df.loc[unknown, "failed_step"] = logged["step"].to_numpy()
    df["restored_step"] = df["restored_step"].fillna(df["failed_step"])
    return df


def checkpoint_marks(
    store: Store, run_id: str, tr: TimeRange, max_per_tier: int = 400
) -> pd.DataFrame:
    """Completed checkpoints per tier in the range, each tier thinned to ``max_per_tier``."""
    return store.df(
        """WITH c AS (
              SELECT tier, step, end_ts AS ts, status,
                     row_number() OVER (PARTITION BY tier ORDER BY end_ts) AS i,
                     count(*) OVER (PARTITION BY tier) AS n
              FROM checkpoints WHERE run_id = ? AND end_ts BETWEEN ? AND ?)
           SELECT tier, step, ts, status FROM c
           WHERE i % greatest(1, ceil(n / ?)::BIGINT) = 0 OR status <> 'ok'
           ORDER BY ts""",
        [run_id, tr.start, tr.end, max_per_tier],
    )


def tokens_per_step(store: Store, run_id: str) -> float:
    return float(store.scalar("SELECT tokens_per_step FROM runs WHERE run_id = ?", [run_id]) or 0.0)
