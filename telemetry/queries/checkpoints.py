"""Queries behind the Checkpoints page: per-tier statistics, a decimated checkpoint timeline,
every restore, the measured inputs of the checkpoint-interval models, and the advice and
what-if projection those inputs give (``reliability`` does the arithmetic).

A checkpoint belongs to a range when its write *started* in it; a restore when its
interruption happened in it. "Wall time" is the part of the range the run covers (the range
clipped to the run's start and end), so a range reaching past the run does not dilute rates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd

from telemetry import reliability
from telemetry.queries import DOWNTIME, TimeRange
from telemetry.queries.failures import COSTED
from telemetry.queries.run_time import mtbf, run_wall
from telemetry.reliability import IntervalAdvice, failures_per_node_day
from telemetry.store import Store
from telemetry.vocabulary import TIERS

TIER_COLUMNS = [
    "tier",
    "n",
    "ok",
    "failed",
    "bytes_avg",
    "write_mean_s",
    "write_p95_s",
    "gbps",
    "blocking_s",
    "interval_s",
    "last_end",
    "last_step",
    "age_s",
    "blocking_pct",
    "blocking_n",  # checkpoints whose blocking time is known (a directory scan: none)
    "sized",  # checkpoints whose size is known (a save known from the log only: none)
    "timed",  # checkpoints whose write time is known
]


def run_window(store: Store, run_id: str, tr: TimeRange) -> TimeRange | None:
    """The range clipped to the run's wall time (``run_time.run_wall``: its start to its end or
    newest record, as every page and ``summary`` take it); None when they do not overlap (or
    the run is unknown)."""
    win = run_wall(store, run_id, tr)
    return win if win is not None and win.start < win.end else None


# A range that holds every stored time: ``tier_figures`` over a whole run.
_EVER = TimeRange(datetime(1, 1, 1), datetime(9999, 12, 31))


def tier_figures(store: Store, run_id: str, tr: TimeRange | None = None) -> pd.DataFrame:
    """The one definition of each tier's figures (#57: the Checkpoints page and ``summary``
    read them here), over the writes started in ``tr`` (the whole run without): ``n`` writes
    (``ok`` + ``failed``); ``sized`` of them with a known size, ``bytes`` their sum and
    ``bytes_avg`` their mean; ``timed`` with a known write time, ``write_mean_s`` and
    ``write_p95_s`` over those; ``gbps`` (GB/s) the bytes over the seconds of the writes that
    know both; ``blocking_s`` (failed writes included) over the ``blocking_n`` that know it;
    ``interval_s`` the mean spacing of write starts. A save known only from the log has no
    size and, when its lines carry one time, no write time: unknown, never 0 (counted as 0 it
    made a mean of 0.7 s from writes of 4 s, and a size from disk bytes over every save)."""
    tr = _EVER if tr is None else tr
    return store.df(
        """SELECT tier, count(*) AS n,
                  count(*) FILTER (WHERE status = 'ok') AS ok,
                  count(*) FILTER (WHERE status <> 'ok') AS failed,
                  count(bytes) AS sized, sum(bytes) AS bytes, avg(bytes) AS bytes_avg,
                  count(write_s) AS timed, avg(write_s) AS write_mean_s,
                  quantile_cont(write_s, 0.95) AS write_p95_s,
                  sum(bytes) FILTER (WHERE write_s IS NOT NULL)
                    / nullif(sum(write_s) FILTER (WHERE bytes IS NOT NULL), 0) / 1e9 AS gbps,
                  sum(blocking_s) AS blocking_s, count(blocking_s) AS blocking_n,
                  CASE WHEN count(*) > 1
                       THEN epoch(max(start_ts) - min(start_ts)) / (count(*) - 1) END AS interval_s
           FROM checkpoints WHERE run_id = ? AND start_ts >= ? AND start_ts <= ?
           GROUP BY tier""",
        [run_id, tr.start, tr.end],
    )


def tier_stats(store: Store, run_id: str, tr: TimeRange) -> pd.DataFrame:
    """One row per tier (nvme, pfs, object first, then any other tier seen), in the range:
    ``tier_figures``' figures, and ``last_end``/``last_step``/``age_s`` (newest successful
    checkpoint finished by the end of the range, whenever it was written, and its age at the end
    of the range, s) and ``blocking_pct`` (blocking seconds as % of the run's wall time in the
    range). Tiers without checkpoints have ``n = 0`` and NaN/None elsewhere."""
    stats = tier_figures(store, run_id, tr)
    last = store.df(
        """SELECT tier, max(end_ts) AS last_end, arg_max(step, end_ts) AS last_step
           FROM checkpoints WHERE run_id = ? AND status = 'ok' AND end_ts <= ?
           GROUP BY tier""",
        [run_id, tr.end],
    )
    df = stats.merge(last, on="tier", how="outer")
    tiers = list(TIERS) + sorted(set(df["tier"]) - set(TIERS))
    df = df.set_index("tier").reindex(tiers).reset_index()
    for col in ("n", "ok", "failed", "blocking_n", "sized", "timed"):
        df[col] = df[col].fillna(0).astype(int)
    df["blocking_s"] = df["blocking_s"].fillna(0.0).astype(float)
    df["age_s"] = [
        (tr.end - t).total_seconds() if isinstance(t, datetime) else math.nan
        for t in df["last_end"]
    ]
    win = run_window(store, run_id, tr)
    df["blocking_pct"] = df["blocking_s"] / win.seconds * 100.0 if win else math.nan
    return df[TIER_COLUMNS]


# Markers a chart draws per tier: the browser draws and styles each SVG marker on its own
# (4,259 writes of llama3-405b's 54 days took ~1 s of its main thread); 600 across a chart's
# ~1,200 px is a marker every two pixels, and zooming in shows every write again.
TIMELINE_POINTS = 600


def timeline(
    store: Store, run_id: str, tr: TimeRange, max_points: int = TIMELINE_POINTS
) -> pd.DataFrame:
    """Checkpoints in the range for a time chart: ``tier, ts, n, failed, step, write_mean_s,
    write_max_s``. When some tier has more than ``max_points`` writes in the range, each tier
    is aggregated into equal time buckets (``ts`` the bucket middle, ``n`` writes in it, ``step``
    the newest), so no tier returns more than ``max_points`` rows; otherwise one row per write
    (``n = 1``, ``ts`` its start)."""
    counts = store.rows(
        """SELECT tier, count(*) FROM checkpoints
           WHERE run_id = ? AND start_ts >= ? AND start_ts <= ? GROUP BY tier""",
        [run_id, tr.start, tr.end],
    )
    if max((c for _, c in counts), default=0) <= max_points:
        return store.df(
            """SELECT tier, start_ts AS ts, 1 AS n, (status <> 'ok')::INTEGER AS failed, step,
                      write_s AS write_mean_s, write_s AS write_max_s
               FROM checkpoints WHERE run_id = ? AND start_ts >= ? AND start_ts <= ?
               ORDER BY tier, start_ts""",
            [run_id, tr.start, tr.end],
        )
    width_s = math.ceil(tr.seconds / max_points) + 1
    return store.df(
        """SELECT tier,
                  time_bucket(to_seconds(?), start_ts, ?::TIMESTAMP) + to_seconds(? / 2) AS ts,
                  count(*) AS n, count(*) FILTER (WHERE status <> 'ok') AS failed,
                  max(step) AS step, avg(write_s) AS write_mean_s, max(write_s) AS write_max_s
           FROM checkpoints WHERE run_id = ? AND start_ts >= ? AND start_ts <= ?
           GROUP BY ALL ORDER BY tier, ts""",
        [width_s, tr.start, width_s, run_id, tr.start, tr.end],
    )


# An interruption the run resumed from, and the tier it restored from ("unknown": the log
# names the step, not where it was read from): the Checkpoints page and ``summary`` count so.
RESTORED = "(restored_tier IS NOT NULL OR restored_step IS NOT NULL)"
RESTORED_TIER = "coalesce(restored_tier, 'unknown')"


def restores(store: Store, run_id: str, tr: TimeRange) -> pd.DataFrame:
    """Every interruption in the range that restored from a checkpoint tier (``none`` = from
    scratch; ``unknown``: a log that names the step it resumed from, not where from):
    ``ts, component, category, planned, host, restored_tier, restored_step, lost_steps,
    lost_gpu_hours, downtime_s`` (detection + restart, s) and ``rework_s``. A resume of unknown
    tier counted as none: "Restores 0" beside stops the run resumed from (#57, 9)."""
    return store.df(
        f"""SELECT ts, component, category, planned, host, {RESTORED_TIER} AS restored_tier,
                  restored_step, lost_steps, lost_gpu_hours, {DOWNTIME} AS downtime_s, rework_s
           FROM {COSTED}
           WHERE run_id = ? AND {RESTORED} AND ts >= ? AND ts <= ?
           ORDER BY ts""",
        [run_id, tr.start, tr.end],
    )


@dataclass(frozen=True)
class ModelInputs:
    """What the interval and ETTR models need, measured over the run's part of a range.

    Times in seconds; ``None`` where the range holds nothing to measure it from."""

    run_id: str
    nodes: int
    gpus: int
    wall_s: float
    unexpected: int
    mtbf_s: float | None  # wall time / unexpected interruptions
    failures_per_node_day: float  # r = unexpected / (nodes x wall days)
    restart_s: float  # u0: mean detection + restart per unexpected interruption (0 if none)
    interval_tier: str | None  # the tier the interval applies to (nvme if written)
    write_s: float | None  # mean blocking seconds per checkpoint of that tier
    configured_interval_s: float | None  # from the run's checkpoint policy
    measured_interval_s: float | None  # mean spacing of that tier's writes in the range

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def configured_interval_s(policy: dict[str, Any], tier: str) -> float | None:
    """The policy's interval for ``tier`` (s): ``nvme_interval_s``, times ``pfs_every`` for the
    PFS and ``object_every`` more for the object store; None when the policy does not say."""
    try:
        base = float(policy["nvme_interval_s"])
        if tier == "pfs":
            return base * float(policy["pfs_every"])
        if tier == "object":
            return base * float(policy["pfs_every"]) * float(policy["object_every"])
        return base if tier == "nvme" else None
    except (KeyError, TypeError, ValueError):
        return None


def policy(store: Store, run_id: str) -> dict[str, Any]:
    """The run's checkpoint policy (JSON in ``runs.ckpt_policy``); ``{}`` if absent or bad."""
    text = store.scalar("SELECT ckpt_policy FROM runs WHERE run_id = ?", [run_id])
    try:
        out = json.loads(text) if text else {}
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


def _blocking_known(store: Store, run_id: str, tier: str, tr: TimeRange) -> bool:
    """Whether any checkpoint of the tier in the range says how long it blocked training (a
    training job may report checkpoints without it; NULL is unknown, not a free write)."""
    return bool(
        store.scalar(
            """SELECT count(blocking_s) FROM checkpoints
               WHERE run_id = ? AND tier = ? AND start_ts >= ? AND start_ts <= ?""",
            [run_id, tier, tr.start, tr.end],
        )
    )


def model_inputs(
    store: Store, run_id: str, tr: TimeRange, tiers: pd.DataFrame | None = None
) -> ModelInputs | None:
    """Measured MTBF, failure rate, restart overhead and blocking write cost of the run over the
    range; None when the run is unknown or does not overlap the range. ``tiers`` is this
    range's ``tier_stats`` when the caller already has it (saves a query)."""
    win = run_window(store, run_id, tr)
    if win is None:
        return None
    nodes, gpus = store.rows("SELECT nodes, gpus FROM runs WHERE run_id = ?", [run_id])[0]
    restart_s = store.scalar(
        f"""SELECT avg({DOWNTIME}) FILTER (WHERE NOT planned)
           FROM interruptions WHERE run_id = ? AND ts >= ? AND ts <= ?""",
        [run_id, win.start, win.end],
    )
    failures = mtbf(store, run_id, tr)  # the MTBF every page and ``summary`` give
    by_tier = (tier_stats(store, run_id, tr) if tiers is None else tiers).set_index("tier")
    written = by_tier[by_tier["n"] > 0]
    tier = None
    if not written.empty:
        tier = "nvme" if "nvme" in written.index else str(written["n"].idxmax())
    write_s = None
    if tier and _blocking_known(store, run_id, tier, tr):
        # over the writes that say how long they blocked (the others are unknown, not 0 s)
        write_s = float(written.loc[tier, "blocking_s"] / written.loc[tier, "blocking_n"])
    measured = written.loc[tier, "interval_s"] if tier else None
    unexpected = failures.unexpected
    nodes = int(nodes or 1)
    return ModelInputs(
        run_id=run_id,
        nodes=nodes,
        gpus=int(gpus or 0),
        wall_s=win.seconds,
        unexpected=unexpected,
        mtbf_s=failures.mtbf_s,
        failures_per_node_day=failures_per_node_day(unexpected, nodes, win.seconds),
        restart_s=float(restart_s) if restart_s is not None else 0.0,
        interval_tier=tier,
        write_s=write_s,
        configured_interval_s=configured_interval_s(policy(store, run_id), tier or "nvme"),
        measured_interval_s=None if measured is None or pd.isna(measured) else float(measured),
    )


# -- advice over the measured inputs ---------------------------------------------------------
# ``model`` below is ``ModelInputs.as_dict()``: the page keeps it in the browser between the
# view's callback and the what-if inputs', so these take the mapping, not the dataclass.


def model_interval_s(model: Mapping[str, Any] | None) -> float | None:
    """The interval the advice compares against: the policy's, else the measured spacing."""
    if model is None:
        return None
    return model.get("configured_interval_s") or model.get("measured_interval_s")


def interval_advice(
    model: Mapping[str, Any] | None, interval_s: float | None = None, write_s: float | None = None
) -> IntervalAdvice | None:
    """Young, Daly and ETTR-optimal intervals for the measured job next to ``interval_s`` and
    ``write_s`` (default: the model's interval and measured blocking write); None without an
    interval or a measured write time to compare."""
    if model is None:
        return None
    interval = model_interval_s(model) if interval_s is None else interval_s
    write = model.get("write_s") if write_s is None else write_s
    if interval is None or write is None:
        return None
    return reliability.advise(
        model["nodes"],
        model["gpus"],
        model["failures_per_node_day"],
        model["restart_s"],
        write,
        interval,
    )


@dataclass(frozen=True)
class WhatIf:
    """The job at its configured interval and write time (``base``) and at another pair
    (``what``): the ETTR curves against the interval (columns ``interval_s``, ``ettr`` 0..1,
    ``curve`` label) and the points to mark on them (label -> (interval s, ETTR 0..1))."""

    base: IntervalAdvice
    what: IntervalAdvice
    curves: pd.DataFrame
    marks: dict[str, tuple[float, float]]


def what_if(model: Mapping[str, Any], interval_s: float, write_s: float) -> WhatIf | None:
    """Expected ETTR if checkpoints came every ``interval_s`` and blocked ``write_s`` each,
    against the measured job; None when the model has nothing to compare (see
    ``interval_advice``)."""
    base = interval_advice(model)
    if base is None:
        return None
    what = interval_advice(model, interval_s, write_s)
    assert what is not None
    marks = {"Configured": (base.configured_s, base.ettr_configured)}
    if (what.configured_s, what.write_s) != (base.configured_s, base.write_s):
        marks["What-if"] = (what.configured_s, what.ettr_configured)
    if base.ettr_optimum_s and base.ettr_optimum is not None:
        marks["Optimum"] = (base.ettr_optimum_s, base.ettr_optimum)
    if what.write_s != base.write_s and what.ettr_optimum_s and what.ettr_optimum is not None:
        marks["What-if optimum"] = (what.ettr_optimum_s, what.ettr_optimum)
    return WhatIf(base, what, _curves(model, base, what), marks)


def _write_basis(model: Mapping[str, Any]) -> str:
    """ "entered" when the blocking write is the user's (the run reports none), else
    "measured"."""
    return "entered" if model.get("write_entered") else "measured"


def _curves(model: Mapping[str, Any], base: IntervalAdvice, what: IntervalAdvice) -> pd.DataFrame:
    """ETTR against interval for the measured write time and, if it differs, the what-if one."""
    pts = [p for p in (base.configured_s, what.configured_s, what.ettr_optimum_s) if p]
    grid = reliability.log_grid(max(min(pts) / 4.0, 1.0), max(pts) * 4.0)
    frames = []
    for label, w in {
        f"write {base.write_s:.2f} s ({_write_basis(model)})": base.write_s,
        f"write {what.write_s:.2f} s (what-if)": what.write_s,
    }.items():
        if frames and w == base.write_s:
            break
        ettr = reliability.ettr_curve(
            model["nodes"], model["failures_per_node_day"], model["restart_s"], w, grid
        )
        frames.append(pd.DataFrame({"interval_s": grid, "ettr": ettr, "curve": label}))
    return pd.concat(frames, ignore_index=True)


def log_clock_offset_h(store: Store, run_id: str) -> int | None:
    """Whole hours by which the run's job-log times trail its checkpoint files' times, when
    they do: the median offset between a save the log reports finished and the same step's
    checkpoint written (file times are UTC), rounded to the hour when it is within 5 minutes
    of a whole, non-zero number of hours. A log written in local time without a zone shows so;
    ``--log-tz`` reads it right. None when they agree or nothing pairs up."""
    off = store.scalar(
        """SELECT median(epoch(c.end_ts) - epoch(e.ts)) FROM checkpoint_events e
           JOIN checkpoints c ON c.run_id = e.run_id AND c.step = e.step AND c.status = 'ok'
           WHERE e.run_id = ? AND e.kind = 'save_end'""",
        [run_id],
    )
    if off is None or math.isnan(off):
        return None
    hours = round(off / 3600.0)
    return hours if hours and abs(off - hours * 3600.0) <= 300.0 else None
