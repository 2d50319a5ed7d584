"""Real utilization's basis and workload classes over a range (see ``telemetry.utilization``).

Short ranges of a small fleet (a class chart finer than 5-minute buckets) classify raw
samples, each sample its own interval, exact to the live edge. Anything larger reads
``class_rollup``: the per-GPU buckets of ``gpu_rollup`` (5 min where the store keeps them,
else 1 h) counted per class as they are built, a few rows per bucket whatever the fleet size,
the same classes as classifying those buckets in SQL (tested).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from telemetry.queries import TimeRange
from telemetry.queries.gpus import nice_bucket
from telemetry.store import Store
from telemetry.utilization import (
    NVLINK_BUCKET_SQL,
    NVLINK_RATE_SQL,
    REAL_SQL,
    Basis,
    class_sql,
    link_sql,
)

MAX_RAW = 1_000_000  # GPU samples a class chart may classify from raw (15 min of 16,384 at 15 s)
CLASS_POINTS = 300  # buckets on the class chart

# Per-(interval, GPU) averages from raw samples (u, fb, t, d, sm, occ, r, link B/s), for the
# raw path and for a range before the per-GPU rollups began (an upgraded store). On the raw
# path each sample is its own interval and its NVLink rate comes from the GPU's previous
# sample (one interval before the range is read for it); per bucket, from the bucket's first
# to its last reading (no window over a long range).
_RAW = """SELECT time_bucket(to_seconds(?), ts) AS ts, gpu_id, avg(util_pct) AS u,
  avg(fb_used_mib) AS fb, avg(tensor_active) AS t, avg(dram_active) AS d, avg(sm_active) AS sm,
  avg(sm_occupancy) AS occ, avg({real}) AS r, {link} AS link
FROM (SELECT *, {nv} AS nv FROM gpu_samples
      WHERE ts >= time_bucket(to_seconds(?), ?::TIMESTAMP) - to_seconds(?) AND ts <= ? {window})
WHERE ts >= time_bucket(to_seconds(?), ?::TIMESTAMP) AND ts <= ?
GROUP BY ALL"""
_PCIE = "avg(pcie_rx_bps + pcie_tx_bps)"
_PER_SAMPLE = _RAW.format(
    real=REAL_SQL, nv=NVLINK_RATE_SQL, link=link_sql("avg(nv)", _PCIE),
    window="WINDOW w AS (PARTITION BY gpu_id ORDER BY ts)",
)  # fmt: skip
_PER_BUCKET = _RAW.format(
    real=REAL_SQL, nv="NULL", link=link_sql(NVLINK_BUCKET_SQL, _PCIE), window=""
)
# The same per class: (ts, class, intervals, sm, occ, real) as ``class_rollup`` holds them.
_CLASSES = f"""SELECT ts, {class_sql("u", "fb", "t", "d", "sm", "link")} AS class,
  count(*) AS intervals, count(sm) AS sm, count(occ) AS occ, count(r) AS real
FROM ({{raw}}) GROUP BY ALL"""
_ROLLED_CLASSES = """SELECT ts, class, intervals, sm, occ, real FROM class_rollup
WHERE bucket_s = ? AND ts >= time_bucket(to_seconds(?), ?::TIMESTAMP) AND ts <= ?"""


def interval_s(store: Store, tr: TimeRange) -> int:
    """The GPU-interval (seconds) classes are judged on over ``tr``: the sample interval while
    the range holds at most ``MAX_RAW`` samples and the class chart's buckets are finer than
    the finest per-GPU rollup level, else that level (a chart of 5-minute buckets or coarser
    reads ``class_rollup``: classifying a day of 64 GPUs' raw samples took ~0.4 s)."""
    gpus = store.scalar("SELECT count(*) FROM gpus") or 1
    sample = max(int(store.sample_interval_s()), 1)
    levels = store.gpu_rollup_levels()
    if not levels:
        return sample
    few = gpus * tr.seconds / sample <= MAX_RAW
    return sample if few and nice_bucket(store, tr, CLASS_POINTS) < levels[0] else levels[0]


def _per_class(store: Store, tr: TimeRange, level: int) -> tuple[str, list[Any]]:
    """SQL of (ts, class, intervals, sm, occ, real) per interval bucket over ``tr``."""
    if level in store.gpu_rollup_levels() and tr.start >= store.gpu_rollup_since():
        return _ROLLED_CLASSES, [level, level, tr.start, tr.end]
    return _raw_classes(store, tr, level)


def _raw_classes(store: Store, tr: TimeRange, level: int) -> tuple[str, list[Any]]:
    """``_per_class`` from raw samples (``_RAW``)."""
    raw = _PER_SAMPLE if level <= store.sample_interval_s() else _PER_BUCKET
    params = [level, level, tr.start, level, tr.end, level, tr.start, tr.end]
    return _CLASSES.format(raw=raw), params


def _basis(sm: int, occ: int, real: int, total: int) -> Basis:
    """The basis from GPU-interval counts: with SM activity (and occupancy), only the graphics
    engine's activity, or no profiling field (GPU_UTIL)."""
    key = "gpu_util" if not real else "gr" if not sm else "sm" if not occ else "sm_occupancy"
    return Basis(key, real, total)


def basis(store: Store, tr: TimeRange) -> Basis:
    """Which basis real utilization had over ``tr`` (``_basis``)."""
    sql, params = _per_class(store, tr, interval_s(store, tr))
    (row,) = store.rows(f"SELECT sum(sm), sum(occ), sum(real), sum(intervals) FROM ({sql})", params)
    return _basis(*(int(v or 0) for v in row))


def classes(store: Store, tr: TimeRange, max_points: int = CLASS_POINTS) -> pd.DataFrame:
    """GPUs in each workload class per chart bucket: ts, class, gpus (mean GPUs in the class
    over the bucket: GPU-intervals x interval / bucket), interval_s, bucket_s. Intervals without
    profiling fields have no class and are left out; empty when no GPU reported any."""
    level = interval_s(store, tr)
    bucket = max(nice_bucket(store, tr, max_points), level)
    bucket = -(-bucket // level) * level  # whole intervals per bucket
    sql, params = _per_class(store, tr, level)
    return store.df(
        f"""SELECT time_bucket(to_seconds(?), ts) AS ts, class,
                   sum(intervals) * ? / ? AS gpus, ? AS interval_s, ? AS bucket_s
            FROM ({sql}) WHERE class IS NOT NULL GROUP BY ALL ORDER BY 1, 2""",
        [bucket, float(level), float(bucket), level, bucket, *params],
    )


def totals(store: Store, tr: TimeRange) -> dict[str, object]:
    """Over ``tr``, for ``summary --json``: the basis, mean GPU_UTIL and real utilization over
    the fleet's hours (GPU-weighted), and GPU-hours per workload class (intervals of
    ``interval_s``)."""
    level = interval_s(store, tr)
    sql, params = _per_class(store, tr, level)
    rows = store.rows(
        f"""SELECT class, sum(intervals), sum(sm), sum(occ), sum(real) FROM ({sql})
            GROUP BY class ORDER BY class""",
        params,
    )
    b = _basis(*(sum(int(r[i] or 0) for r in rows) for i in (2, 3, 4, 1)))
    hours = [(c, n * level / 3600.0) for c, n, *_ in rows if c is not None]
    hourly = 3600 if 3600 in store.rollup_levels() else store.rollup_levels()[-1]
    means = store.rows(
        """SELECT sum(util_avg * gpus) / sum(gpus),
                  sum(real_avg * gpus) / nullif(sum(gpus) FILTER (WHERE real_avg IS NOT NULL), 0)
           FROM fleet_rollup WHERE bucket_s = ? AND ts >= ? AND ts <= ?""",
        [hourly, tr.start, tr.end],
    )[0]
    return {
        "basis": b.key,
        "basis_text": b.text,
        "gpu_util_pct": None if means[0] is None else round(float(means[0]), 2),
        "real_util_pct": None if means[1] is None else round(float(means[1]), 2),
        "class_gpu_hours": {str(c): round(float(h), 1) for c, h in hours},
        "interval_s": level,
    }
