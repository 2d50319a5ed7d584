"""Queries answered from the per-GPU rollup (``gpu_rollup``, kept by ``telemetry.rollups``):
which level serves a per-GPU series, and the fleet's GPUs under a utilization per hour.

Apart from ``telemetry.queries.gpus`` so that module stays within its size, and so both it and
the Overview can use them without importing each other.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from telemetry.queries import TimeRange
from telemetry.store import Store
from telemetry.utilization import REAL_SQL


def node_series_level(store: Store, tr: TimeRange, bucket: int) -> int | None:
    """The per-GPU rollup level (``gpu_rollup``) that buckets of ``bucket`` seconds over ``tr``
    are built from: the coarsest that divides the bucket, where the rollup is whole; None for
    raw samples (a bucket finer than 5 min, or a store upgraded after ``tr.start``)."""
    if tr.start < store.gpu_rollup_since():
        return None
    fits = [lv for lv in store.gpu_rollup_levels() if lv <= bucket and bucket % lv == 0]
    return fits[-1] if fits else None


# gpu_rollup column -> node_gpu_series column
ROLLED = (
    ("util_avg", "util_pct"),
    ("temp_avg", "temp_c"),
    ("power_w", "power_w"),
    ("sm_clock_avg", "sm_clock_mhz"),
    ("fb_used_avg", "fb_used_mib"),
)


def gpus_below_per_hour(store: Store, tr: TimeRange, util_pct: float = 80.0) -> pd.DataFrame:
    """Per hour of the range, GPUs of job nodes (as the Overview's alert counts them: a hot
    spare is idle by design): those that reported (``gpus``) and those whose mean utilization
    over the hour was below ``util_pct`` (``below``): real utilization where the GPU reported
    profiling fields, else GPU_UTIL (``telemetry.utilization``); ts is the hour, every hour
    the range touches counted whole. From the per-GPU hourly rollup where it is whole, from the raw
    samples before that (the same numbers; a store upgraded mid-range reads both)."""
    rolled = """SELECT ts AS h, gpu_id, coalesce(real_avg, util_avg) AS u FROM gpu_rollup
                WHERE bucket_s = 3600 AND ts >= time_bucket(INTERVAL 1 hour, ?::TIMESTAMP)
                  AND ts <= ?"""
    raw = f"""SELECT time_bucket(INTERVAL 1 hour, ts) AS h, gpu_id,
               coalesce(avg({REAL_SQL}), avg(util_pct)) AS u
             FROM gpu_samples
             WHERE ts >= time_bucket(INTERVAL 1 hour, ?::TIMESTAMP)
               AND ts < time_bucket(INTERVAL 1 hour, ?::TIMESTAMP) + INTERVAL 1 hour
             GROUP BY ALL"""
    since = store.gpu_rollup_since()  # a whole hour: the rollup is whole from there on
    if 3600 not in store.gpu_rollup_levels():
        src, params = raw, [tr.start, tr.end]
    elif tr.start >= since:
        src, params = rolled, [tr.start, tr.end]
    elif tr.end < since:
        src, params = raw, [tr.start, tr.end]
    else:  # a store upgraded in the middle of the range: raw hours before, rollup after
        before = since - timedelta(microseconds=1)
        src, params = f"{raw} UNION ALL {rolled}", [tr.start, before, since, tr.end]
    return store.df(
        f"""SELECT h AS ts, count(u) AS gpus, count(*) FILTER (WHERE u < ?) AS below
            FROM ({src}) JOIN gpus USING (gpu_id) JOIN nodes n USING (node_id)
            WHERE n.role = 'job' GROUP BY h ORDER BY h""",
        [float(util_pct), *params],
    )
