"""Real utilization's basis and workload classes over a range (see ``telemetry.utilization``).

Per-GPU intervals come from the per-GPU rollup (``gpu_rollup``, 5 min or 1 h) where it is whole,
else from the raw samples bucketed the same way, so a live last-10-minutes view and a 54-day one
classify alike. The interval is the finest that keeps the rows read within ``MAX_INTERVALS``
(5 min up to about a day and a half at 16,384 GPUs; hourly beyond).
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from telemetry.queries import TimeRange
from telemetry.queries.gpus import nice_bucket
from telemetry.store import Store
from telemetry.utilization import REAL_SQL, Basis, class_sql

MAX_INTERVALS = 5_000_000  # GPU-intervals a class chart may classify
CLASS_POINTS = 300  # buckets on the class chart

_ROLLED = """SELECT ts, gpu_id, util_avg AS u, fb_used_avg AS fb, tensor_avg AS t, dram_avg AS d,
  sm_active_avg AS sm, sm_occupancy_avg AS occ, real_avg AS r
FROM gpu_rollup WHERE bucket_s = ? AND ts >= time_bucket(to_seconds(?), ?::TIMESTAMP)
  AND ts <= ?"""
_RAW = """SELECT time_bucket(to_seconds(?), ts) AS ts, gpu_id, avg(util_pct) AS u,
  avg(fb_used_mib) AS fb, avg(tensor_active) AS t, avg(dram_active) AS d, avg(sm_active) AS sm,
  avg(sm_occupancy) AS occ, avg({real}) AS r
FROM gpu_samples WHERE ts >= time_bucket(to_seconds(?), ?::TIMESTAMP) AND ts <= ?
GROUP BY ALL"""


def interval_s(store: Store, tr: TimeRange) -> int:
    """The GPU-interval (seconds) classes are judged on over ``tr``: the sample interval, 5 min
    or 1 h, the finest keeping the fleet's intervals within ``MAX_INTERVALS``."""
    gpus = store.scalar("SELECT count(*) FROM gpus") or 1
    sample = max(int(store.sample_interval_s()), 1)
    for level in (sample, 300, 3600):
        if level >= sample and gpus * tr.seconds / level <= MAX_INTERVALS:
            return level
    return 3600


def _intervals(store: Store, tr: TimeRange, level: int) -> tuple[str, list[object]]:
    """SQL of per-(interval, GPU) averages (u, fb, t, d, sm, occ, r) and its parameters."""
    since: datetime = store.gpu_rollup_since()
    if level in store.gpu_rollup_levels() and tr.start >= since:
        return _ROLLED, [level, level, tr.start, tr.end]
    return _RAW.format(real=REAL_SQL), [level, level, tr.start, tr.end]


def basis(store: Store, tr: TimeRange) -> Basis:
    """Which basis real utilization had over ``tr``: GPUs that reported SM activity (and
    occupancy), the graphics engine's activity, or neither (then GPU_UTIL)."""
    level = 3600 if tr.seconds > 6 * 3600 else interval_s(store, tr)
    sql, params = _intervals(store, tr, level)
    (row,) = store.rows(
        f"""SELECT count(DISTINCT gpu_id) FILTER (WHERE sm IS NOT NULL),
                   count(DISTINCT gpu_id) FILTER (WHERE occ IS NOT NULL),
                   count(DISTINCT gpu_id) FILTER (WHERE r IS NOT NULL),
                   count(DISTINCT gpu_id)
            FROM ({sql})""",
        params,
    )
    sm, occ, real, total = (int(v or 0) for v in row)
    key = "gpu_util" if not real else "gr" if not sm else "sm" if not occ else "sm_occupancy"
    return Basis(key, real, total)


def classes(store: Store, tr: TimeRange, max_points: int = CLASS_POINTS) -> pd.DataFrame:
    """GPUs in each workload class per chart bucket: ts, class, gpus (mean GPUs in the class
    over the bucket: GPU-intervals x interval / bucket), interval_s, bucket_s. Intervals without
    profiling fields have no class and are left out; empty when no GPU reported any."""
    level = interval_s(store, tr)
    bucket = max(nice_bucket(store, tr, max_points), level)
    bucket = -(-bucket // level) * level  # whole intervals per bucket
    sql, params = _intervals(store, tr, level)
    cls = class_sql("u", "fb", "t", "d", "sm")
    return store.df(
        f"""SELECT time_bucket(to_seconds(?), ts) AS ts, cls AS class,
                   count(*) * ? / ? AS gpus, ? AS interval_s, ? AS bucket_s
            FROM (SELECT ts, {cls} AS cls FROM ({sql})) WHERE cls IS NOT NULL
            GROUP BY ALL ORDER BY 1, 2""",
        [bucket, float(level), float(bucket), level, bucket, *params],
    )


def totals(store: Store, tr: TimeRange) -> dict[str, object]:
    """Over ``tr``, for ``summary --json``: the basis, mean GPU_UTIL and real utilization over
    every GPU-interval, and GPU-hours per workload class (intervals of ``interval_s``)."""
    level = interval_s(store, tr)
    sql, params = _intervals(store, tr, level)
    cls = class_sql("u", "fb", "t", "d", "sm")
    means = store.rows(f"SELECT avg(u), avg(r) FROM ({sql})", params)[0]
    hours = store.rows(
        f"""SELECT cls, count(*) * ? / 3600.0 FROM (SELECT {cls} AS cls FROM ({sql}))
            WHERE cls IS NOT NULL GROUP BY cls ORDER BY cls""",
        [float(level), *params],
    )
    b = basis(store, tr)
    return {
        "basis": b.key,
        "basis_text": b.text,
        "gpu_util_pct": None if means[0] is None else round(float(means[0]), 2),
        "real_util_pct": None if means[1] is None else round(float(means[1]), 2),
        "class_gpu_hours": {str(c): round(float(h), 1) for c, h in hours},
        "interval_s": level,
    }
