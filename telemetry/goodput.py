"""Goodput and badput of a run, measured: every second of its wall time in one category, from
the records the store already holds for replayed and real runs alike (progress points,
interruptions, checkpoints). The categories add up to the window exactly.

How the window is cut (``goodput``):

1. **Intervals** of the wall clock, each second in at most one (the first that claims it):
   ``planned`` (a planned interruption, from its last progress to training resumed),
   ``recovery`` (an unplanned one, the same span: detection, restart, restore and start-up are
   one downtime where the records do not split them), ``startup`` (from the window's start to
   the first progress point: the program starting).
2. **Running time**: what the intervals leave. Of it, ``checkpoint_save`` is the blocking
   time of the checkpoints written in it (their ``blocking_s``; unknown is not counted),
   ``wasted_progress`` the steps redone after restores (each interruption's ``lost_steps``)
   at the ideal step time, ``productive`` the other steps at the ideal step time, and
   ``slowdown`` the rest: time beyond the ideal step time (slow steps, stragglers, short
   stalls below the stall threshold).
3. ``other`` is the remainder, never negative (it is where a category's records overlap the
   window's edges); ``checkpoint_restore``, ``data_loading`` and ``evaluation`` are 0 until
   records mark them (a log's load start and end, an evaluation phase): not yet read.

The **ideal step time** is the mean seconds per step of the running pairs of consecutive
progress points whose step time is at most median + 3 MAD (a pair across a stall or a restart
is not a step time). Per-rank timings (slow ranks) are not read yet: ``slow_ranks`` is empty.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from telemetry.queries import TimeRange, run_span
from telemetry.store import Store

CATEGORIES = (
    "productive", "startup", "checkpoint_save", "checkpoint_restore", "wasted_progress",
    "recovery", "data_loading", "evaluation", "slowdown", "planned", "other",
)  # fmt: skip
BADPUT = tuple(c for c in CATEGORIES if c != "productive")
MAD_K = 3.0  # a step time beyond median + 3 MAD is a slow step, not the ideal


def ideal_step_s(dt: np.ndarray, ds: np.ndarray) -> float | None:
    """Mean seconds per step over the pairs (``dt`` s for ``ds`` steps) whose step time is at
    most median + 3 MAD; None without a pair."""
    ok = (ds > 0) & (dt > 0)
    if not ok.any():
        return None
    per = dt[ok] / ds[ok]
    med = float(np.median(per))
    mad = float(np.median(np.abs(per - med)))
    keep = per <= med + MAD_K * mad + 1e-9
    return float(dt[ok][keep].sum() / ds[ok][keep].sum())


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _claim(spans: list[tuple[float, float]], taken: list[tuple[float, float]]) -> float:
    """Seconds of ``spans`` outside ``taken`` (both unions), and ``taken`` grows by them."""
    mine = _union(spans)
    total = sum(b - a for a, b in mine)
    overlap = 0.0
    for a, b in mine:
        for c, d in taken:
            overlap += max(0.0, min(b, d) - max(a, c))
    taken[:] = _union(taken + mine)
    return total - overlap


def _window(store: Store, run_id: str, window: TimeRange | None) -> TimeRange | None:
    span = run_span(store, run_id)
    if span is None:
        return None
    end = span.end or store.scalar(
        "SELECT max(ts) FROM train_metrics WHERE run_id = ?", [run_id]
    )
    if end is None:
        return None
    start, stop = span.start, end
    if window is not None:
        start, stop = max(start, window.start), min(stop, window.end)
    return TimeRange(start, stop) if stop > start else None


def goodput(store: Store, run_id: str, window: TimeRange | None = None) -> dict[str, Any] | None:
    """The run's goodput block over ``window`` (default: its whole span): ``window_s``,
    ``seconds`` (one key per ``CATEGORIES``, adding up to ``window_s``), ``goodput`` (the
    productive fraction), ``ideal_step_s`` and ``slow_ranks``; None when nothing dates it."""
    win = _window(store, run_id, window)
    if win is None:
        return None
    t0 = win.start

    def sec(t: Any) -> float:
        return (pd.Timestamp(t).to_pydatetime() - t0).total_seconds()

    wall = win.seconds
    ints = store.df(
        """SELECT ts, end_ts, detect_s, restart_s, planned, lost_steps FROM interruptions
           WHERE run_id = ? AND ts <= ? AND coalesce(end_ts, ts) >= ?""",
        [run_id, win.end, win.start],
    )
    first = store.scalar(
        "SELECT min(ts) FROM train_metrics WHERE run_id = ? AND ts BETWEEN ? AND ?",
        [run_id, win.start, win.end],
    )
    taken: list[tuple[float, float]] = []
    out = dict.fromkeys(CATEGORIES, 0.0)
    for planned in (True, False):
        spans = []
        for r in ints[ints["planned"].fillna(False).astype(bool) == planned].itertuples():
            a = sec(r.ts)
            if not pd.isna(r.end_ts):
                b = sec(r.end_ts)
            elif not pd.isna(r.restart_s) or not pd.isna(r.detect_s):
                b = a + float(0 if pd.isna(r.detect_s) else r.detect_s) + float(
                    0 if pd.isna(r.restart_s) else r.restart_s)  # fmt: skip
            else:
                b = wall  # never resumed in the data: down to the window's end
            spans.append((max(a, 0.0), min(b, wall)))
        out["planned" if planned else "recovery"] = _claim(spans, taken)
    if first is not None:
        out["startup"] = _claim([(0.0, sec(first))], taken)
    running = max(wall - sum(b - a for a, b in taken), 0.0)
    pairs = store.df(
        """WITH p AS (
             SELECT ts, step, attempt, lag(ts) OVER w AS pts, lag(step) OVER w AS pstep,
                    lag(attempt) OVER w AS patt
             FROM train_metrics WHERE run_id = ? AND ts BETWEEN ? AND ?
             WINDOW w AS (ORDER BY ts, step))
           SELECT epoch(ts) - epoch(pts) AS dt, (step - pstep)::DOUBLE AS ds FROM p
           WHERE pstep IS NOT NULL AND step > pstep AND attempt IS NOT DISTINCT FROM patt""",
        [run_id, win.start, win.end],
    )
    dt, ds = pairs["dt"].to_numpy(float), pairs["ds"].to_numpy(float)
    ideal = ideal_step_s(dt, ds)
    blocking = store.scalar(
        """SELECT sum(blocking_s) FROM checkpoints WHERE run_id = ? AND status = 'ok'
           AND start_ts BETWEEN ? AND ?""",
        [run_id, win.start, win.end],
    )
    left = running
    out["checkpoint_save"] = save = min(float(blocking or 0.0), left)
    left -= save
    if ideal is not None:
        redone = float(ints["lost_steps"].fillna(0).sum()) if len(ints) else 0.0
        steps = float(ds[ds > 0].sum())
        out["wasted_progress"] = wasted = min(ideal * min(redone, steps), left)
        left -= wasted
        out["productive"] = prod = min(ideal * max(steps - redone, 0.0), left)
        left -= prod
    out["slowdown"] = left
    out["other"] = max(wall - sum(v for k, v in out.items() if k != "other"), 0.0)
    seconds = _exact({k: float(v) for k, v in out.items()}, wall)
    return {
        "window_s": round(wall, 3),
        "start": win.start.isoformat(),
        "end": win.end.isoformat(),
        "seconds": seconds,
        "goodput": round(seconds["productive"] / wall, 4) if wall > 0 else None,
        "ideal_step_s": None if ideal is None else round(ideal, 6),
        "slow_ranks": [],
    }


def _exact(seconds: dict[str, float], wall: float) -> dict[str, float]:
    """Seconds to the millisecond, adding up to the window's (rounded) exactly: the rounding's
    remainder goes to ``other`` (or, were it negative there, the largest category)."""
    out = {k: round(v, 3) for k, v in seconds.items()}
    gap = round(round(wall, 3) - sum(out.values()), 3)
    key = "other" if out["other"] + gap >= 0 else max(out, key=lambda k: out[k])
    out[key] = round(out[key] + gap, 3)
    return out


def top_badput(block: dict[str, Any]) -> tuple[str, float] | None:
    """The badput category that took the most time, and its share of the window."""
    secs = block.get("seconds") or {}
    bad = [(k, v) for k, v in secs.items() if k in BADPUT and v > 0]
    if not bad or not block.get("window_s"):
        return None
    k, v = max(bad, key=lambda kv: kv[1])
    return k, v / float(block["window_s"])
