"""Queries of the GPUs page: the fleet heatmap (node x time), the distribution of a metric, the
outlier GPUs with a reason, and one node's eight GPUs over time.

Every result is bounded before it leaves DuckDB, whatever the store size: the heatmap reads the
per-node rollups at a bucket that keeps at most ``max_cols`` columns and keeps the ``max_rows``
most anomalous nodes (the rest become one averaged row); the outlier search narrows candidates
on the per-node rollups before it reads per-GPU samples of a few dozen nodes; a node's series
are bucketed in SQL.

Metric names are keys of ``METRICS``; the SQL fragments they select are fixed strings here and
never come from input (an unknown name raises ``ValueError``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from telemetry.queries import TimeRange, pick_level
from telemetry.queries.gpu_rollup import ROLLED, node_series_level
from telemetry.queries.xid_gpus import xid_gpus
from telemetry.reference import xids
from telemetry.store import Store
from telemetry.utilization import REAL_SQL
from telemetry.vocabulary import BUSY_PCT, HOT_C, IDLE_PCT

# Outlier thresholds (data semantics; colours live in app.figures). HOT_C, IDLE_PCT (here:
# while the job runs) and BUSY_PCT (a GPU, or the fleet: the job is running) are shared with
# the figures that draw them, in telemetry.vocabulary; these are the outlier table's own.
IDLE_MIN_SHARE = 0.10  # idle for at least this share of the job's running samples
STRAGGLER_RATIO = 0.92  # busy SM clock below this share of the fleet median
THROTTLE_RATIO = 0.95  # a smaller clock drop counts when the GPU is also hot
THROTTLE_TEMP_C = 80.0  # mean temperature while busy that makes a clock drop thermal
REASON_ORDER = ("hot", "throttled", "straggler", "XID", "idle")  # table order


@dataclass(frozen=True)
class GpuMetric:
    key: str
    label: str
    unit: str
    cell: str  # column of the per-node cells (see _CELL_COLUMNS)
    sample: str  # column of gpu_samples
    direction: int  # +1: high is bad, -1: low is bad, 0: any deviation
    bin_width: float  # histogram bin width, in the metric's unit
    lo: float  # values are clamped into [lo, hi] before binning
    hi: float


METRICS: dict[str, GpuMetric] = {
    m.key: m
    for m in (
        GpuMetric("util", "GPU utilization", "%", "util_avg", "util_pct", -1, 2.0, 0, 100),
        GpuMetric("real", "Real utilization", "%", "real_avg", "real", -1, 2.0, 0, 100),
        GpuMetric("temp", "Hottest GPU temperature", "°C", "temp_max", "temp_c", 1, 1.0, 0, 130),
        GpuMetric("power", "GPU power", "W", "power_w", "power_w", 0, 10.0, 0, 2000),
        GpuMetric("fb", "Framebuffer used", "MiB", "fb_used_avg", "fb_used_mib", 0, 1024.0, 0, 3e5),
        GpuMetric("clock", "SM clock", "MHz", "sm_clock_avg", "sm_clock_mhz", -1, 15.0, 0, 4000),
    )
}

# Per-node cell columns: (expression over node_tick, over node_rollup, aggregate into a bucket).
# Power is per GPU (node_rollup.power_w is the node's total). Real utilization is NULL where no
# profiling field was reported; ``eff_avg``, what outliers judge by, falls back on GPU_UTIL.
_CELL_COLUMNS: dict[str, tuple[str, str, str]] = {
    "util_avg": ("util_s / n", "util_avg", "avg"),
    "real_avg": ("real_s / n", "real_avg", "avg"),
    "eff_avg": ("coalesce(real_s, util_s) / n", "coalesce(real_avg, util_avg)", "avg"),
    "util_min": ("util_min", "util_min", "min"),
    "temp_max": ("temp_max", "temp_max", "max"),
    "power_w": ("power_s / n", "power_w / gpus", "avg"),
    "fb_used_avg": ("fb_s / n", "fb_used_avg", "avg"),
    "sm_clock_avg": ("clock_s / n", "sm_clock_avg", "avg"),
    "sm_clock_min": ("clock_min", "sm_clock_min", "min"),
}
_DEVIATION = {1: "v - ref", -1: "ref - v", 0: "abs(v - ref)"}
_NICE_BUCKETS_S = (1, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)


def metric(key: str) -> GpuMetric:
    """The metric called ``key``; raises ``ValueError`` for any other name."""
    if key not in METRICS:
        raise ValueError(f"unknown GPU metric {key!r}; use one of {sorted(METRICS)}")
    return METRICS[key]


def _cells(
    store: Store, tr: TimeRange, max_cols: int, columns: tuple[str, ...]
) -> tuple[str, list[Any], int]:
    """SQL of per-(bucket, node) cells with the named ``_CELL_COLUMNS``, its parameters and
    the bucket (seconds). Reads node_tick or the finest rollup that fits ``max_cols`` buckets,
    regrouped to a coarser bucket only when even the coarsest level has too many."""
    level = pick_level(store, tr, max_cols)
    bucket = level * max(1, math.ceil(tr.seconds / level / max_cols))
    tick = level not in store.rollup_levels()
    source = "node_tick WHERE" if tick else "node_rollup WHERE bucket_s = ? AND"
    params: list[Any] = [*([] if tick else [level]), tr.start, tr.end]
    exprs = {name: _CELL_COLUMNS[name][0 if tick else 1] for name in columns}
    if bucket == level:  # already one row per (bucket, node): no regrouping
        cols = ", ".join(f"{e} AS {name}" for name, e in exprs.items())
        return f"SELECT ts, node_id, {cols} FROM {source} ts >= ? AND ts <= ?", params, bucket
    cols = ", ".join(f"{_CELL_COLUMNS[n][2]}({e}) AS {n}" for n, e in exprs.items())
    sql = (
        f"SELECT time_bucket(to_seconds(?), ts) AS ts, node_id, {cols} "
        f"FROM {source} ts >= ? AND ts <= ? GROUP BY ALL"
    )
    return sql, [bucket, *params], bucket


@dataclass(frozen=True)
class Heatmap:
    cells: pd.DataFrame  # ts, rank, host, rack, role, nodes, value; rank 1 = most anomalous
    metric: GpuMetric
    bucket_s: int
    nodes_total: int  # nodes reporting in the range
    nodes_shown: int  # nodes with a row of their own; the others share the last row


def heatmap(
    store: Store, tr: TimeRange, key: str, max_rows: int = 200, max_cols: int = 300
) -> Heatmap:
    """The metric per node and time bucket, at most ``max_rows`` x ``max_cols`` cells.

    Nodes are ranked by their mean deviation from the fleet median of each bucket (in the bad
    direction: low utilization or clock, high temperature; either way for power and memory).
    With more nodes than rows, the ``max_rows - 1`` worst keep their own row and the rest are
    averaged into one row (``host`` NULL, ``nodes`` = how many it averages)."""
    m = metric(key)
    cells, params, bucket = _cells(store, tr, max_cols, (m.cell,))
    keep = max_rows - 1
    df = store.df(
        f"""WITH c AS ({cells}),
        v AS MATERIALIZED (SELECT ts, node_id, {m.cell} AS v FROM c WHERE {m.cell} IS NOT NULL),
        ref AS (SELECT ts, avg(v) AS ref FROM v GROUP BY ts),
        score AS (SELECT node_id, avg({_DEVIATION[m.direction]}) AS score
                  FROM v JOIN ref USING (ts) GROUP BY node_id),
        ranked AS (SELECT node_id, row_number() OVER (ORDER BY score DESC, node_id) AS rank,
                          count(*) OVER () AS total FROM score)
        SELECT v.ts, r.rank, coalesce(n.host, 'node ' || v.node_id) AS host, n.rack, n.role,
               1 AS nodes, v.v AS value, r.total
        FROM v JOIN ranked r USING (node_id) LEFT JOIN nodes n USING (node_id)
        WHERE r.rank <= ? OR r.total <= ?
        UNION ALL
        SELECT v.ts, ? + 1, NULL, NULL, NULL, count(*), avg(v.v), any_value(r.total)
        FROM v JOIN ranked r USING (node_id)
        WHERE r.rank > ? AND r.total > ?
        GROUP BY v.ts
        ORDER BY 2, 1""",
        [*params, keep, max_rows, keep, keep, max_rows],
    )
    total = int(df["total"].iloc[0]) if not df.empty else 0
    shown = total if total <= max_rows else keep
    return Heatmap(df.drop(columns="total"), m, bucket, total, shown)


def distribution(store: Store, tr: TimeRange, key: str, max_cols: int = 300) -> pd.DataFrame:
    """Histogram of the metric over node x bucket cells (the heatmap's cells, all nodes):
    ``lo`` (bin's lower edge, metric unit), ``width``, ``cells`` and ``node_hours`` (time nodes
    spent in the bin). Binned in SQL with the metric's fixed bin width."""
    m = metric(key)
    cells, params, bucket = _cells(store, tr, max_cols, (m.cell,))
    return store.df(
        f"""WITH c AS ({cells})
        SELECT floor(greatest(least({m.cell}, ?), ?) / ?) * ? AS lo, ? AS width,
               count(*) AS cells, count(*) * ? / 3600.0 AS node_hours
        FROM c WHERE {m.cell} IS NOT NULL GROUP BY 1 ORDER BY 1""",
        [*params, m.hi, m.lo, m.bin_width, m.bin_width, m.bin_width, bucket],
    )


def node_info(store: Store, host: str) -> dict[str, Any] | None:
    """Inventory of the node called ``host``: host, rack, role, GPU count and model; None if
    no such node."""
    rows = store.rows(
        """SELECT n.host, n.rack, n.role, count(g.gpu_id), any_value(g.model)
           FROM nodes n LEFT JOIN gpus g USING (node_id) WHERE n.host = ? GROUP BY ALL""",
        [str(host)[:200]],
    )
    if not rows:
        return None
    h, rack, role, gpus, model = rows[0]
    return {"host": h, "rack": rack, "role": role, "gpus": int(gpus), "model": model}


def nice_bucket(store: Store, tr: TimeRange, max_points: int) -> int:
    """The round bucket size (seconds) that keeps ``tr`` within ``max_points`` points."""
    want = max(tr.seconds / max_points, store.sample_interval_s())
    fits = [b for b in _NICE_BUCKETS_S if b >= want]
    return fits[0] if fits else int(math.ceil(want / 86400.0)) * 86400


NODE_POINTS = 500  # points per GPU line in the drill-down


def node_gpu_series(
    store: Store, host: str, tr: TimeRange, max_points: int = NODE_POINTS, min_bucket: int = 0
) -> pd.DataFrame:
    """Each GPU of one node over the range, bucketed in SQL to at most ``max_points`` points
    per GPU (and buckets no finer than ``min_bucket``), each bucket the range touches taken
    whole: ts, gpu (index), util_pct, temp_c,
    power_w, sm_clock_mhz, fb_used_mib, xid_last, bucket_s. From the per-GPU rollup when one
    fits the bucket (``node_series_level``: every value the same as from the raw samples), else
    from the raw samples. Empty for an unknown host or a range without samples."""
    bucket = max(nice_bucket(store, tr, max_points), int(min_bucket))
    gids = [
        int(r[0])
        for r in store.rows(
            "SELECT gpu_id FROM gpus JOIN nodes USING (node_id) WHERE nodes.host = ?",
            [str(host)[:200]],
        )
    ]
    level = node_series_level(store, tr, bucket)
    if level is not None:  # weighted by the samples each bucket had of the column
        cols = ", ".join(
            f"sum(s.{c} * s.samples) / nullif(sum(s.samples) FILTER (WHERE s.{c} IS NOT NULL), 0)"
            f" AS {out}"
            for c, out in ROLLED
        )
        return store.df(
            f"""SELECT time_bucket(to_seconds(?), s.ts) AS ts, g.gpu, {cols},
                       max(s.xid_last) AS xid_last, ? AS bucket_s
                FROM gpu_rollup s JOIN gpus g USING (gpu_id)
                WHERE s.bucket_s = ? AND s.ts >= time_bucket(to_seconds(?), ?::TIMESTAMP)
                  AND s.ts <= ? AND s.gpu_id = ANY(?::INTEGER[])
                GROUP BY ALL ORDER BY g.gpu, 1""",
            [bucket, bucket, level, bucket, tr.start, tr.end, gids],
        )
    return store.df(
        """SELECT time_bucket(to_seconds(?), s.ts) AS ts, g.gpu,
                  avg(s.util_pct) AS util_pct, avg(s.temp_c) AS temp_c,
                  avg(s.power_w) AS power_w, avg(s.sm_clock_mhz) AS sm_clock_mhz,
                  avg(s.fb_used_mib) AS fb_used_mib, max(s.xid_last) AS xid_last,
                  ? AS bucket_s
           FROM gpu_samples s JOIN gpus g USING (gpu_id)
           WHERE s.ts >= time_bucket(to_seconds(?), ?::TIMESTAMP)
             AND s.ts < time_bucket(to_seconds(?), ?::TIMESTAMP) + to_seconds(?)
             AND s.gpu_id = ANY(?::INTEGER[])
           GROUP BY ALL ORDER BY g.gpu, 1""",
        [bucket, bucket, bucket, tr.start, bucket, tr.end, bucket, gids],
    )


# -- outliers ------------------------------------------------------------------------------
# Nodes likely to hold an outlier GPU, from per-node cells compared with the fleet in the same
# bucket (fleet-wide dips such as restarts and checkpoint stalls cancel out): a hot GPU, a node
# as busy as the fleet but slower (one GPU at 0.88 of its peers lowers its node's mean clock by
# 1.5 %), or a job node well below the fleet's utilization. Plus a spread of job nodes as the
# reference for "the fleet" in stage 2.
_CANDIDATES_SQL = """WITH c AS MATERIALIZED ({cells}),
f AS (SELECT ts, avg(eff_avg) AS mu FROM c GROUP BY ts),
g AS (SELECT c.ts, avg(c.sm_clock_avg) AS mc FROM c JOIN f USING (ts)
      WHERE c.eff_avg >= f.mu - 5 GROUP BY c.ts),
flags AS (
  SELECT c.node_id,
    count(*) FILTER (WHERE f.mu >= ? AND c.eff_avg < f.mu - 10) AS idle_cells,
    count(*) FILTER (WHERE f.mu >= ? AND c.eff_avg >= f.mu - 5
                     AND c.sm_clock_avg < ? * g.mc) AS slow_cells,
    count(*) FILTER (WHERE c.temp_max >= ?) AS hot_cells
  FROM c JOIN f USING (ts) LEFT JOIN g USING (ts) GROUP BY c.node_id),
cand AS (
  SELECT flags.node_id, false AS reference FROM flags JOIN nodes n USING (node_id)
  WHERE (idle_cells > 0 AND n.role = 'job') OR slow_cells > 0 OR hot_cells > 0
  ORDER BY (hot_cells > 0)::INT + (slow_cells > 0)::INT DESC, hot_cells + slow_cells DESC,
           idle_cells DESC, node_id
  LIMIT ?),
ref AS (
  SELECT min(node_id) AS node_id, true AS reference FROM (
    SELECT node_id, ntile(?) OVER (ORDER BY node_id) AS k FROM nodes WHERE role = 'job')
  GROUP BY k)
SELECT g.gpu_id, bool_or(x.reference) AS reference FROM (
  SELECT * FROM cand UNION ALL SELECT * FROM ref) x JOIN gpus g USING (node_id)
GROUP BY g.gpu_id"""
_CANDIDATE_COLUMNS = ("eff_avg", "temp_max", "sm_clock_avg")
SLOW_NODE_RATIO = 0.985

# Per-GPU statistics of the candidates' GPUs; the job "runs" at a tick when the reference
# GPUs' mean utilization is busy. Utilization is real utilization where the GPU reported the
# profiling fields (``real``: a rank spinning in a collective reads 100 % on GPU_UTIL).
_GPU_STATS_SQL = f"""WITH s AS MATERIALIZED (
  SELECT ts, gpu_id, coalesce({REAL_SQL}, util_pct) AS util_pct, {REAL_SQL} IS NOT NULL AS real,
         temp_c, sm_clock_mhz FROM gpu_samples
  WHERE ts IN (SELECT unnest(?::TIMESTAMP[])) AND gpu_id = ANY(?::INTEGER[])),
run AS (SELECT ts, avg(util_pct) >= ? AS running FROM s
        WHERE gpu_id = ANY(?::INTEGER[]) GROUP BY ts)
SELECT g.host, g.gpu, n.role, count(*) AS samples,
  count(*) FILTER (WHERE r.running) AS run_samples,
  count(*) FILTER (WHERE r.running AND s.util_pct < ?) AS idle_samples,
  avg(s.sm_clock_mhz) FILTER (WHERE s.util_pct >= ?) AS clock_busy,
  avg(s.temp_c) FILTER (WHERE s.util_pct >= ?) AS temp_busy,
  max(s.temp_c) AS temp_peak,
  count(*) FILTER (WHERE s.temp_c >= ?) AS hot_samples, bool_or(s.real) AS real
FROM s JOIN gpus g USING (gpu_id) LEFT JOIN nodes n ON n.node_id = g.node_id
LEFT JOIN run r USING (ts)
GROUP BY ALL"""


MAX_STAT_TICKS = 240  # long ranges: per-GPU statistics read this many evenly spaced ticks
FULL_SCAN_ROWS = 20_000_000  # ...unless the range holds fewer sample rows than this


def stat_ticks(store: Store, tr: TimeRange) -> tuple[list[Any], float]:
    """The sample ticks the per-GPU statistics read, and the seconds each stands for. Long
    ranges of a large fleet (more than ``FULL_SCAN_ROWS`` samples: a 54-day run of 16,384 GPUs
    has 15,552 ticks at 5 min) are read at ``MAX_STAT_TICKS`` evenly spaced ticks, so the cost
    stays flat; durations are then scaled by the sampling factor and peaks are sampled peaks.
    Shorter ranges are read whole, and their figures are exact."""
    # The ticks of the lowest-numbered reporting node: positions to sample at, not a census,
    # and far cheaper than DISTINCT over every node's rows.
    ticks = [
        r[0]
        for r in store.rows(
            """SELECT ts FROM node_tick WHERE ts >= ? AND ts <= ? AND node_id = (
             SELECT min(node_id) FROM node_tick WHERE ts = (
               SELECT max(ts) FROM node_tick WHERE ts <= ?))
           ORDER BY ts""",
            [tr.start, tr.end, tr.end],
        )
    ]
    gpus = store.scalar("SELECT count(*) FROM gpus") or 1
    full = len(ticks) * gpus <= FULL_SCAN_ROWS
    step = 1 if full else max(1, -(-len(ticks) // MAX_STAT_TICKS))
    return ticks[::step], store.sample_interval_s() * step


def gpu_stats(
    store: Store, tr: TimeRange, max_nodes: int = 24, reference_nodes: int = 8
) -> tuple[pd.DataFrame, float | None, float]:
    """Per-GPU statistics of the nodes most likely to hold an outlier (at most ``max_nodes``,
    found on the per-node rollups) and of ``reference_nodes`` job nodes spread over the fleet,
    and the fleet's SM clock while busy (MHz): the median over all those GPUs, which a few
    outliers cannot move, and the seconds each read sample stands for (see ``stat_ticks``).
    Only these GPUs' samples are read."""
    cells, params, _ = _cells(store, tr, 600, _CANDIDATE_COLUMNS)
    rows = store.rows(
        _CANDIDATES_SQL.format(cells=cells),
        [*params, BUSY_PCT, BUSY_PCT, SLOW_NODE_RATIO, HOT_C, int(max_nodes), reference_nodes],
    )
    gids = [int(r[0]) for r in rows]
    ref_gids = [int(r[0]) for r in rows if r[1]]
    ticks, per_sample_s = stat_ticks(store, tr)
    if not gids:
        return pd.DataFrame(), None, per_sample_s
    stats = store.df(
        _GPU_STATS_SQL,
        [ticks, gids, BUSY_PCT, ref_gids, IDLE_PCT, BUSY_PCT, BUSY_PCT, HOT_C],
    )
    ref = stats["clock_busy"].median() if not stats.empty else None
    return stats, (None if ref is None or pd.isna(ref) else float(ref)), per_sample_s


def _row(host: str, gpu: int, reason: str, value: float, unit: str, detail: str) -> dict[str, Any]:
    return {
        "host": host,
        "gpu": "–" if pd.isna(gpu) else int(gpu),  # an XID from a log may not name its GPU
        "reason": reason,
        "value": round(float(value), 1),
        "unit": unit,
        "detail": detail,
    }


def duration_text(seconds: float) -> str:
    """A duration in words at its own scale: "40 s", "3 min", "1.5 h" (a GPU hot for one
    10-second sample is not hot "for 0.0 h")."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def _gpu_reasons(r: Any, ref: float | None, interval_s: float) -> list[dict[str, Any]]:
    """The reasons one GPU (a row of ``gpu_stats``) is an outlier; empty if it is not."""
    out = []
    if r.temp_peak is not None and r.temp_peak >= HOT_C:
        share = r.hot_samples / max(r.samples, 1)
        hot = duration_text(r.hot_samples * interval_s)
        detail = f"≥ {HOT_C:.0f} °C for {hot} ({share:.0%} of samples)"
        out.append(_row(r.host, r.gpu, "hot", r.temp_peak, "°C", detail))
    ratio = r.clock_busy / ref if ref and pd.notna(r.clock_busy) else None
    warm = pd.notna(r.temp_busy) and (r.temp_busy >= THROTTLE_TEMP_C or r.hot_samples > 0)
    if ratio is not None and ratio < THROTTLE_RATIO and warm:
        detail = (
            f"SM clock {ratio:.0%} of the fleet median {ref:,.0f} MHz while busy, "
            f"at {r.temp_busy:.0f} °C (peak {r.temp_peak:.0f} °C)"
        )
        out.append(_row(r.host, r.gpu, "throttled", r.clock_busy, "MHz", detail))
    elif ratio is not None and ratio < STRAGGLER_RATIO:
        detail = f"SM clock {ratio:.0%} of the fleet median {ref:,.0f} MHz while busy"
        out.append(_row(r.host, r.gpu, "straggler", r.clock_busy, "MHz", detail))
    share = r.idle_samples / r.run_samples if r.run_samples else 0.0
    if r.role == "job" and share >= IDLE_MIN_SHARE:
        idle = duration_text(r.idle_samples * interval_s)
        what = "real utilization" if r.real else "utilization"
        detail = f"{what} < {IDLE_PCT:.0f} % for {idle} while the job ran"
        out.append(_row(r.host, r.gpu, "idle", share * 100.0, "% of run time", detail))
    return out


def _xid_rows(ev: pd.DataFrame) -> list[dict[str, Any]]:
    ref = xids()
    out = []
    for r in ev.itertuples():
        x = ref.get(int(r.xid))
        what = f"{x.mnemonic}: {x.message}; NVIDIA action {x.action}" if x else "unknown XID"
        seen = f"{r.count}× in range, last {r.last_ts:%Y-%m-%d %H:%M}"
        if r.source == "exporter":
            seen = f"reported by the exporter, {r.last_ts:%Y-%m-%d %H:%M}"
        out.append(_row(r.host, r.gpu, "XID", r.xid, "XID", f"{what} ({seen})"))
    return out


def _collapse_idle_nodes(rows: list[dict[str, Any]], stats: pd.DataFrame) -> list[dict[str, Any]]:
    """One "idle" row for a node whose GPUs are all idle (the node sat out the job), instead of
    one per GPU."""
    per_node = stats.groupby("host").size().to_dict() if not stats.empty else {}
    idle = [r for r in rows if r["reason"] == "idle"]
    counts: dict[str, int] = {}
    for r in idle:
        counts[r["host"]] = counts.get(r["host"], 0) + 1
    whole = {h for h, n in counts.items() if n > 1 and n == per_node.get(h)}
    out = [r for r in rows if not (r["reason"] == "idle" and r["host"] in whole)]
    for h in sorted(whole):
        mine = [r for r in idle if r["host"] == h]
        share = sum(r["value"] for r in mine) / len(mine)
        detail = f"all {len(mine)} GPUs: " + mine[0]["detail"]
        out.append({**mine[0], "gpu": "all", "value": round(share, 1), "detail": detail})
    return out


def outliers(store: Store, tr: TimeRange, max_nodes: int = 40) -> pd.DataFrame:
    """Outlier GPUs in the range, one row per (GPU, reason): host, gpu (index), reason (XID,
    hot, throttled, straggler, idle), value (rounded), unit, detail (why, in words).

    - XID: an ``xid_events`` row in the range, or the exporter's last-XID gauge changed.
    - hot: a sample at or above ``HOT_C``.
    - throttled: SM clock while busy below ``THROTTLE_RATIO`` x the fleet median while the GPU
      runs hot (mean busy temperature >= ``THROTTLE_TEMP_C`` or any hot sample).
    - straggler: SM clock while busy below ``STRAGGLER_RATIO`` x the fleet median, not hot.
    - idle: a GPU of a job node below ``IDLE_PCT`` for at least ``IDLE_MIN_SHARE`` of the
      samples in which the fleet ran the job (fleet mean utilization >= ``BUSY_PCT``).
    """
    stats, ref, interval = gpu_stats(store, tr, max_nodes)
    rows = _xid_rows(xid_gpus(store, tr))
    for r in stats.itertuples():
        rows += _gpu_reasons(r, ref, interval)
    rows = _collapse_idle_nodes(rows, stats)
    cols = ["host", "gpu", "reason", "value", "unit", "detail"]
    df = pd.DataFrame(rows, columns=cols)
    if df.empty:
        return df
    order = {r: i for i, r in enumerate(REASON_ORDER)}
    df["_o"] = df["reason"].map(order)
    bad_high = df["reason"].isin(["hot", "XID", "idle"])
    df["_v"] = df["value"].where(~bad_high, -df["value"])
    df["_g"] = df["gpu"].astype(str)
    df = df.sort_values(["_o", "_v", "host", "_g"], kind="stable")
    return df.drop(columns=["_o", "_v", "_g"]).reset_index(drop=True)


def reason_counts(outliers_df: pd.DataFrame) -> list[tuple[str, int]]:
    """(reason, GPUs) of an ``outliers`` frame, in ``REASON_ORDER``, reasons present only."""
    counts = outliers_df["reason"].value_counts() if not outliers_df.empty else {}
    return [(r, int(counts[r])) for r in REASON_ORDER if r in counts]


def worst_node(store: Store, tr: TimeRange) -> tuple[str, str] | None:
    """The node the GPUs page opens on, and why: the host of the first row of ``outliers``
    (hot, throttled, straggler, XID, idle, worst first) that is a node of the inventory, else
    the node whose utilization strays furthest from the fleet's (the heatmap's top row).
    None without GPU samples in the range."""
    cells = heatmap(store, tr, "util", max_rows=2).cells
    if cells.empty:
        return None
    for r in outliers(store, tr).itertuples():
        if node_info(store, r.host) is not None:
            gpu = f" on GPU {r.gpu}" if isinstance(r.gpu, int) else ""
            return str(r.host), f"{r.reason}{gpu}"
    top = cells.loc[cells["rank"] == 1, "host"].dropna()
    return (str(top.iloc[0]), "furthest from the fleet's utilization") if len(top) else None
