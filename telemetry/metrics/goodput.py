"""Goodput and badput of a run, measured: every second of its wall time in one category, from
the records the store already holds for replayed and real runs alike (progress points,
interruptions, checkpoints). The categories add up to the window exactly.

How the window is cut (``goodput``):

1. **Intervals** of the wall clock, each second in at most one (the first that claims it):
   ``planned`` (a planned interruption, from its last progress to training resumed),
   ``recovery`` (an unplanned one, the same span: detection, restart, restore and start-up are
   one downtime where the records do not split them), ``startup`` (from the window's start to
   the first progress point: the program starting). A stop ends when training resumed: its
   next progress line, less that line's steps since the restored checkpoint at the ideal
   step time (they ran after training resumed, and are redone steps: wasted progress).
2. **Running time**: what the intervals leave. Of it, ``checkpoint_save`` is the blocking
   time of the checkpoints written in it (their ``blocking_s``; unknown is not counted) and
   the saves the log times that training waited for (from Megatron's ``saving checkpoint`` to
   ``successfully saved``, TorchTitan's ``Saving the checkpoint`` to ``Finished saving``, no
   progress line between them),
   ``wasted_progress`` the steps redone after restores (each interruption's ``lost_steps``)
   at the ideal step time, ``productive`` the other steps at the ideal step time, and
   ``slowdown`` the rest: time beyond the ideal step time (slow steps, stragglers, short
   stalls below the stall threshold).
3. ``other`` is the remainder, never negative (it is where a category's records overlap the
   window's edges). ``checkpoint_restore`` is the time between a load's start and its finish
   where the log says both (Megatron's ``loading checkpoint from``/``successfully loaded``,
   TorchTitan's ``Loading the checkpoint``/``Finished loading``), claimed before the
   intervals of 1 (a restore inside a downtime is the restore's). ``evaluation`` and
   ``data_loading`` come from Megatron-LM's timers where the log prints them (``rank_perf``;
   the slowest rank's time): each ``evaluate`` report is an interval claimed like a restore
   (``timers.log(['evaluate'])`` prints an evaluation's whole time; it is dated by the
   progress line before it, when the evaluation started), and ``batch-generator`` (the
   milliseconds per iteration each step waited for its batch, averaged per hour) times the
   kept steps of the hour is moved out of ``productive``. Without those timers (the default
   ``--timing-log-level 0`` leaves ``batch-generator`` out; other frameworks print neither)
   both are 0.

The **ideal step time** is the mean seconds per step of the running pairs of consecutive
progress points whose step time is at most median + 3 MAD (a pair across a stall or a restart
is not a step time). ``slow_ranks`` names the slowest ranks of the window, chronic or one-off,
from the per-rank timing reports the run's logs printed (``queries.slow_ranks``; empty without).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd

from telemetry.queries import TimeRange, run_time
from telemetry.queries import goodput_rows as gr
from telemetry.queries.energy import energy_per_hour
from telemetry.queries.slow_ranks import rank_spread, report_windows, slow_ranks
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
    """Seconds of ``spans`` outside ``taken`` (both unions), and ``taken`` grows by them:
    |mine - taken| = |mine U taken| - |taken|."""
    before = sum(b - a for a, b in taken)
    taken[:] = _union(taken + _union(spans))
    return sum(b - a for a, b in taken) - before


def _window(store: Store, run_id: str, window: TimeRange | None) -> TimeRange | None:
    # the run's wall time (``run_time.run_wall``), the one MTBF and every page take: goodput
    # had its own, which ended a night 30 s before its failed save's end (#57, 7)
    win = run_time.run_wall(store, run_id, window)
    return win if win is not None and win.end > win.start else None


def _inputs(store: Store, run_id: str, win: TimeRange) -> dict[str, Any]:
    """What the accounting reads, once for the run (every day of it cut from the same)."""
    t0 = win.start

    def sec(values: Any) -> np.ndarray:
        ts = pd.to_datetime(pd.Series(values), errors="coerce")
        return ((ts - pd.Timestamp(t0)).dt.total_seconds()).to_numpy(float)

    ints = gr.interruptions(store, run_id, win)
    a = sec(ints["ts"])
    b = sec(ints["end_ts"])
    guess = a + ints["detect_s"].fillna(0).to_numpy(float) + ints["restart_s"].fillna(0).to_numpy(
        float)  # fmt: skip
    known = ints["detect_s"].notna() | ints["restart_s"].notna()
    b = np.where(np.isnan(b), np.where(known.to_numpy(), guess, np.inf), b)  # never resumed
    # their steps summed per hour (days are whole hours), the ideal step time in SQL
    rows = gr.step_hours(store, run_id, win, MAD_K, t0)
    ideal = rows[0][2] if rows else None
    hour_t = np.array([r[0] for r in rows], dtype=float)
    hour_ds = np.array([r[1] for r in rows], dtype=float)
    hour_dt = np.array([r[3] for r in rows], dtype=float)
    hour_med = np.array([r[4] for r in rows], dtype=float)
    first = gr.first_step(store, run_id, win)
    excl = gr.exclusions(store, run_id, win, t0)  # none in a store from before them
    restores = gr.restores(store, run_id, win, t0)  # a restore the log times
    timed = gr.megatron_timers(store, run_id, win, t0)  # Megatron-LM's timers
    data_ms = {float(t): float(ms) for ev, t, ms in timed if not ev}
    saves = gr.blocking_saves(store, run_id, win, t0)
    # the steps a restart redid before its first progress line ran after training resumed:
    # that line's steps since the restored one, at the ideal step time, are redone steps
    # (wasted progress), not downtime (issue 57, 8)
    redo = pd.to_numeric(ints["first_redone"], errors="coerce").fillna(0.0).clip(lower=0.0)
    redo_n = redo.to_numpy(float)
    ran = np.minimum(redo_n * (ideal or 0.0), np.where(np.isfinite(b), b - a, 0.0))
    # steps to add to the running time's: those of a pair that is no step pair (a restart)
    added = np.where((ran > 0) & ~ints["counted"].astype(bool).to_numpy(), redo_n, 0.0)
    return {
        "a": a, "b": b - np.maximum(ran, 0.0), "planned": ints["planned"].astype(bool).to_numpy(),
        "redone_first": added, "timed_saves": gr.timed_saves(store, run_id, win),
        "lost": ints["lost_steps"].to_numpy(float),
        "first": None if first is None else (first - t0).total_seconds(),
        "excluded": list(zip(excl["a"].tolist(), excl["b"].tolist(), strict=True)),
        "restores": list(zip(restores["a"].tolist(), restores["b"].tolist(), strict=True)),
        "hour_t": hour_t, "hour_ds": hour_ds, "hour_dt": hour_dt, "hour_med": hour_med,
        "save_t": saves["t"].to_numpy(float), "save_s": saves["blocking_s"].to_numpy(float),
        "ideal": None if ideal is None else float(ideal),
        "evals": [(float(t), float(t) + float(ms) / 1e3) for ev, t, ms in timed if ev],
        "data_s": np.array([data_ms.get(t, 0.0) / 1e3 for t in hour_t.tolist()], dtype=float),
    }  # fmt: skip


def _account(d: dict[str, Any], lo: float, hi: float) -> dict[str, float]:
    """Seconds per category of the window [lo, hi) (seconds from the run window's start)."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    taken: list[tuple[float, float]] = []
    excluded = _claim([(max(a, lo), min(b, hi)) for a, b in d["excluded"]], taken)
    wall = hi - lo - excluded  # the operator's exclusions leave the denominator
    # a timed restore is a restore whatever stopped the run: claimed before the downtime
    out["checkpoint_restore"] = _claim([(max(a, lo), min(b, hi)) for a, b in d["restores"]],
                                       taken)  # fmt: skip
    out["evaluation"] = _claim([(max(a, lo), min(b, hi)) for a, b in d["evals"]], taken)
    near = (d["a"] < hi) & (d["b"] > lo)  # a day reads its own interruptions, not the run's
    for planned in (True, False):
        pick = near & (d["planned"] == planned)
        spans = [(max(a, lo), min(b, hi)) for a, b in zip(d["a"][pick], d["b"][pick],
                                                          strict=True)]  # fmt: skip
        out["planned" if planned else "recovery"] = _claim(spans, taken)
    if d["first"] is not None:
        out["startup"] = _claim([(lo, min(d["first"], hi))], taken)
    # the saves the log times, training waiting for them: their own time, out of the running
    timed = _claim([(max(a, lo), min(b, hi)) for a, b in d["timed_saves"]], taken)
    left = max(hi - lo - sum(b - a for a, b in taken), 0.0)
    inside = (d["save_t"] >= lo) & (d["save_t"] < hi)
    save = min(float(d["save_s"][inside].sum()), left)
    out["checkpoint_save"] = timed + save
    left -= save
    ideal = d["ideal"]
    if ideal is not None:
        hours = d["hour_t"]  # each hour's start: the hours that overlap [lo, hi)
        pick = (hours + 3600.0 > lo) & (hours < hi)
        resumed = (d["b"] >= lo) & (d["b"] < hi)  # the steps redone before the first line
        steps = float(d["hour_ds"][pick].sum()) + float(d["redone_first"][resumed].sum())
        redone = float(d["lost"][(d["a"] >= lo) & (d["a"] < hi)].sum())
        out["wasted_progress"] = wasted = min(ideal * min(redone, steps), left)
        left -= wasted
        kept = max(steps - redone, 0.0)
        prod = min(ideal * kept, left)
        left -= prod
        # the kept steps' time waiting for their batches (the slowest rank's), out of them
        waited = float((d["hour_ds"][pick] * d["data_s"][pick]).sum())
        out["data_loading"] = fed = min(waited * kept / steps if steps else 0.0, prod)
        out["productive"] = prod - fed
    out["slowdown"] = left
    out["other"] = max(wall - sum(v for k, v in out.items() if k != "other"), 0.0)
    return _exact({k: float(v) for k, v in out.items()}, wall) | {"_excluded": excluded}


def _block(seconds: dict[str, float], wall: float, start: Any, end: Any) -> dict[str, Any]:
    excluded = seconds.pop("_excluded", 0.0)
    wall -= excluded
    return {
        "window_s": round(wall, 3),
        "excluded_s": round(excluded, 3),
        "start": start.isoformat(),
        "end": end.isoformat(),
        "seconds": seconds,
        "goodput": round(seconds["productive"] / wall, 4) if wall > 0 else None,
    }


def goodput(
    store: Store,
    run_id: str,
    window: TimeRange | None = None,
    detail: bool = True,
    energy: bool = False,
    steps: bool = False,
) -> dict[str, Any] | None:
    """The run's goodput block over ``window`` (default: its whole span): ``window_s``,
    ``seconds`` (one key per ``CATEGORIES``, adding up to ``window_s``), ``goodput`` (the
    productive fraction), ``ideal_step_s``, ``slow_ranks`` (``queries.slow_ranks``),
    ``rank_reports`` (the per-rank timing reports read in the window), ``rank_spread`` (the
    ranks' min/median/max scores logged as metrics: ``queries.slow_ranks.rank_spread``) and
    ``days`` (the same per UTC day of the window, each adding up to its own seconds); None when
    nothing dates it.
    ``detail=False``: the totals only (no days, no slow ranks: empty lists), for the views that
    show the total alone (the Overview's card, the what-if, the GoodputLow alert).
    ``energy``: also ``energy`` (``goodput_energy``: each category's kWh).
    ``steps``: also ``step_time`` (``step_time``: each hour's step time against the ideal)."""
    win = _window(store, run_id, window)
    if win is None:
        return None
    d = _inputs(store, run_id, win)
    wall = win.seconds
    out = _block(_account(d, 0.0, wall), wall, win.start, win.end)
    per_day = []
    day = pd.Timestamp(win.start).floor("D").to_pydatetime()
    while detail and day < win.end:
        nxt = day + timedelta(days=1)
        a, b = max(day, win.start), min(nxt, win.end)
        lo, hi = (a - win.start).total_seconds(), (b - win.start).total_seconds()
        per_day.append(_block(_account(d, lo, hi), hi - lo, a, b) | {"day": day.date().isoformat()})
        day = nxt
    ideal = d["ideal"]
    return out | {
        # the saves whose blocking time checkpoint_save counts (stored or timed by the log):
        # none, and that 0 s is not known (summary's and the Checkpoints page's cost say "–")
        "saves_timed": len(d["timed_saves"]) + len(d["save_t"]),
        "ideal_step_s": None if ideal is None else round(ideal, 6),
        "slow_ranks": slow_ranks(store, run_id, win) if detail else [],
        "rank_reports": report_windows(store, run_id, win) if detail else None,
        "rank_spread": rank_spread(store, run_id, win) if detail else [],
        "days": per_day,
    } | ({"energy": _energy(store, run_id, win, d)} if energy else {}) | (
        {"step_time": step_time(d, win)} if steps else {})


def step_time(d: dict[str, Any], win: TimeRange) -> list[dict[str, Any]]:
    """Each hour of the window with timed steps: ``hour`` (its start, ISO), ``median_s`` (the
    median seconds per step of its progress pairs), ``mean_s`` (its running time over its
    steps: what the slowdown badput counts, a stall included) and each as a deviation from the
    ideal step time in percent (``median_pct``, ``mean_pct``; None without an ideal)."""
    ideal = d["ideal"]
    out = []
    cols = (d[k].tolist() for k in ("hour_t", "hour_ds", "hour_dt", "hour_med"))
    for t, ds, dt, med in zip(*cols, strict=True):
        if ds <= 0:
            continue
        mean = dt / ds
        out.append({
            "hour": (win.start + timedelta(seconds=t)).isoformat(),
            "median_s": round(med, 6), "mean_s": round(mean, 6),
            "median_pct": None if not ideal else round((med / ideal - 1) * 100, 3),
            "mean_pct": None if not ideal else round((mean / ideal - 1) * 100, 3),
        })  # fmt: skip
    return out


def _energy(store: Store, run_id: str, win: TimeRange, d: dict[str, Any]) -> dict[str, Any]:
    """Each category's GPU energy: every hour's measured energy (``energy_per_hour``: the run's
    own GPUs where the store knows them, else the fleet's) split by the seconds each category
    took in that hour, so a day of recovery is charged what the GPUs drew while it lasted,
    not the run's mean. Within an hour the draw is taken as even (the rollups keep no finer
    energy). ``kwh`` per category, ``excluded_kwh`` (the operator's exclusions), ``basis``
    (counter or power x time), None where no hour of the window has an energy."""
    hours = energy_per_hour(store, win, run_id)
    hours = hours[hours["kwh"].notna()]
    if hours.empty:
        return {"kwh": None, "excluded_kwh": None, "basis": None}
    out = dict.fromkeys(CATEGORIES, 0.0)
    excluded = 0.0
    for hour, kwh in zip(hours["hour"].tolist(), hours["kwh"].tolist(), strict=True):
        start = (pd.Timestamp(hour).to_pydatetime() - win.start).total_seconds()
        lo, hi = max(start, 0.0), min(start + 3600.0, win.seconds)
        if hi <= lo:
            continue
        part = float(kwh) / 3600.0  # kWh a second of this hour
        secs = _account(d, lo, hi)
        excluded += secs.pop("_excluded") * part
        for k, v in secs.items():
            out[k] += v * part
    return {"kwh": {k: round(v, 3) for k, v in out.items()}, "excluded_kwh": round(excluded, 3),
            "basis": str(hours["basis"].iloc[0])}  # fmt: skip


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


def goodput_money(block: dict[str, Any], gpus: int | None, gpu_hour_usd: float) -> dict[str, Any]:
    """Each category's GPU-hours and dollars (the run's GPUs over its seconds, at its price per
    GPU-hour): ``gpu_hours`` and ``usd``, None where the run's GPU count is unknown."""
    if not gpus:
        return {"gpu_hours": None, "usd": None}
    hours = {k: round(v / 3600.0 * gpus, 3) for k, v in block["seconds"].items()}
    return {"gpu_hours": hours, "usd": {k: round(h * gpu_hour_usd, 2) for k, h in hours.items()}}
