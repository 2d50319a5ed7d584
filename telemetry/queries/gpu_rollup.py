"""Queries answered from the per-GPU rollup (``gpu_rollup``, kept by ``telemetry.store.rollups``):
which level serves a per-GPU series, and the fleet's GPUs under a utilization per hour.

Apart from ``telemetry.queries.gpus`` so that module stays within its size, and so both it and
the Overview can use them without importing each other.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from telemetry.queries import JOB_NODE_SQL, TimeRange
from telemetry.store import Store
from telemetry.store.rollups import gpu_table
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


# Fleet GPU-buckets the under-utilization chart reads at most: past it (two weeks of 16,384
# GPUs hourly), buckets of 6 h (54 days: 21 M hourly rows, 3.6 M six-hourly).
MAX_BELOW_ROWS = 6_000_000


def below_bucket(store: Store, tr: TimeRange) -> int:
    """The bucket (s) of the under-utilization chart over ``tr``: an hour, or 6 h where the
    fleet's GPU-hours in the range pass ``MAX_BELOW_ROWS`` and the 6-hour level covers it."""
    gpus = store.scalar("SELECT count(*) FROM gpus") or 0
    coarse = 21600
    if (
        gpus * tr.seconds / 3600 > MAX_BELOW_ROWS
        and coarse in store.gpu_rollup_levels()
        and tr.start >= store.gpu_rollup_since()
    ):
        return coarse
    return 3600


def gpus_below_per_hour(store: Store, tr: TimeRange, util_pct: float = 80.0) -> pd.DataFrame:
    """``gpus_below`` per hour."""
    return gpus_below(store, tr, util_pct, 3600)


def gpus_below(
    store: Store, tr: TimeRange, util_pct: float = 80.0, bucket: int | None = None
) -> pd.DataFrame:
    """Per bucket of the range (an hour, or ``below_bucket``'s when None), GPUs of the job's
    nodes (``JOB_NODE_SQL``, as the Overview's alert counts them: a hot spare or a node Slurm
    drained is idle by design): those that reported
    (``gpus``) and those whose mean utilization over the bucket was below ``util_pct``
    (``below``): real utilization where the GPU reported profiling fields, else GPU_UTIL
    (``telemetry.utilization``); ts is the bucket, every bucket the range touches counted
    whole; ``bucket_s`` its size. From the per-GPU rollup where it is whole, from the raw
    samples before that (the same numbers; a store upgraded mid-range reads both)."""
    bucket = below_bucket(store, tr) if bucket is None else bucket
    rolled = """SELECT ts AS h, gpu_id, coalesce(real_avg, util_avg) AS u FROM {table}
                WHERE ts >= time_bucket(to_seconds(?), ?::TIMESTAMP) AND ts <= ?"""
    raw = f"""SELECT time_bucket(to_seconds(?), ts) AS h, gpu_id,
               coalesce(avg({REAL_SQL}), avg(util_pct)) AS u
             FROM gpu_samples
             WHERE ts >= time_bucket(to_seconds(?), ?::TIMESTAMP)
               AND ts < time_bucket(to_seconds(?), ?::TIMESTAMP) + to_seconds(?)
             GROUP BY ALL"""
    since = store.gpu_rollup_since()  # a whole hour: the rollup is whole from there on

    def raw_params(start: object, end: object) -> list[object]:
        return [bucket, bucket, start, bucket, end, bucket]

    def rolled_params(start: object, end: object) -> list[object]:
        return [bucket, start, end]

    if bucket not in store.gpu_rollup_levels() or tr.end < since:
        src, params = raw, raw_params(tr.start, tr.end)
        return _below(store, src, params, util_pct, bucket)
    # the level's own table, not the view of all levels: a join over the view's UNION loses
    # the statistics that make the join with ``gpus`` direct (45 ms against 7 at llama3 scale)
    rolled = rolled.format(table=gpu_table(bucket))
    if tr.start >= since:
        src, params = rolled, rolled_params(tr.start, tr.end)
    else:  # a store upgraded in the middle of the range: raw hours before, rollup after
        before = since - timedelta(microseconds=1)
        src = f"{raw} UNION ALL {rolled}"
        params = raw_params(tr.start, before) + rolled_params(since, tr.end)
    return _below(store, src, params, util_pct, bucket)


def _below(
    store: Store, src: str, params: list[object], util_pct: float, bucket: int
) -> pd.DataFrame:
    """``gpus_below``'s counts per bucket from ``src`` (h, gpu_id, u) and its parameters."""
    return store.df(
        f"""SELECT h AS ts, count(u) AS gpus, count(*) FILTER (WHERE u < ?) AS below,
              ? AS bucket_s
            FROM ({src}) JOIN gpus USING (gpu_id) JOIN nodes n USING (node_id)
            WHERE {JOB_NODE_SQL} GROUP BY h ORDER BY h""",
        [float(util_pct), bucket, *params],
    )
