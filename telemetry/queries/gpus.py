"""Queries of the GPUs page: the fleet heatmap (node x time), the distribution of a metric, and
one node's eight GPUs over time (the outlier table is ``telemetry.queries.outliers``).

Every result is bounded before it leaves DuckDB, whatever the store size: the heatmap reads the
per-node rollups at a bucket that keeps at most ``max_cols`` columns and keeps the ``max_rows``
most anomalous nodes (the rest become one averaged row); a node's series are bucketed in SQL.

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
from telemetry.store import Store
from telemetry.store.rollups import gpu_table


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


def cell_grid(store: Store, tr: TimeRange, max_cols: int) -> tuple[int, int, bool]:
    """The per-node cells of at most ``max_cols`` buckets over ``tr``: the level they are read
    from and their bucket (seconds), and whether the level is ``node_tick`` (else
    ``node_rollup``). The bucket is coarser than the level only when even the coarsest level
    has too many."""
    level = pick_level(store, tr, max_cols)
    bucket = level * max(1, math.ceil(tr.seconds / level / max_cols))
    return level, bucket, level not in store.rollup_levels()


def _cells(
    store: Store, tr: TimeRange, max_cols: int, columns: tuple[str, ...]
) -> tuple[str, list[Any], int]:
    """SQL of per-(bucket, node) cells with the named ``_CELL_COLUMNS``, its parameters and
    the bucket (seconds), on ``cell_grid``'s level and bucket."""
    level, bucket, tick = cell_grid(store, tr, max_cols)
    source = "node_tick WHERE" if tick else "node_rollup WHERE bucket_s = ? AND"
    # from the cell holding the range's start, as the per-GPU levels are read (raw ticks, a
    # cell each, from the start itself)
    params: list[Any] = [*([] if tick else [level]), tr.start, tr.end]
    since = "ts >= ? AND ts <= ?"
    if not (tick and bucket == level):
        params.insert(-2, bucket)
        since = "ts >= time_bucket(to_seconds(?), ?::TIMESTAMP) AND ts <= ?"
    exprs = {name: _CELL_COLUMNS[name][0 if tick else 1] for name in columns}
    if bucket == level:  # already one row per (bucket, node): no regrouping
        cols = ", ".join(f"{e} AS {name}" for name, e in exprs.items())
        return f"SELECT ts, node_id, {cols} FROM {source} {since}", params, bucket
    cols = ", ".join(f"{_CELL_COLUMNS[n][2]}({e}) AS {n}" for n, e in exprs.items())
    sql = (
        f"SELECT time_bucket(to_seconds(?), ts) AS ts, node_id, {cols} "
        f"FROM {source} {since} GROUP BY ALL"
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

    Cells of a node running no job then (``_off_sql``, ``off``) are a state, not a fault; the
    nodes are ranked by the mean deviation of their other cells from the fleet median of each
    bucket (in the bad direction: low utilization or clock, high temperature; either way for
    power and memory), a node without such cells last;
    equal scores (to 9 decimals: a parallel sum's last bits vary) by node, so rows keep their
    order from one refresh to the next.
    With more nodes than rows, the ``max_rows - 1`` worst keep their own row and the rest are
    averaged into one row (``host`` NULL, ``nodes`` = how many it averages)."""
    m = metric(key)
    cells, params, bucket = _cells(store, tr, max_cols, (m.cell,))
    keep = max_rows - 1
    join, off, off_params = _off_sql(store, bucket)
    df = store.df(
        f"""WITH c AS ({cells}),
        v AS MATERIALIZED (SELECT c.ts, c.node_id, {m.cell} AS v, {off} AS off
                           FROM c {join} WHERE {m.cell} IS NOT NULL),
        ref AS (SELECT ts, avg(v) AS ref FROM v WHERE NOT off GROUP BY ts),
        score AS (SELECT node_id, avg({_DEVIATION[m.direction]}) FILTER (WHERE NOT off)
                         AS score
                  FROM v LEFT JOIN ref USING (ts) GROUP BY node_id),
        -- a node that ran no job in the range (a hot spare) below every one that did
        ranked AS (SELECT node_id, row_number() OVER (
                            ORDER BY score IS NULL, round(score, 9) DESC, node_id) AS rank,
                          count(*) OVER () AS total FROM score),
        row AS (SELECT node_id, total, rank <= ? OR total <= ? AS own,
                       CASE WHEN rank <= ? OR total <= ? THEN rank ELSE ? + 1 END AS rank
                FROM ranked)
        -- one pass over the cells: a node's own row, or its share of the averaged last row
        SELECT v.ts, r.rank, CASE WHEN r.own THEN any_value(v.node_id) END AS node_id,
               count(*) AS nodes, avg(v.v) AS value, any_value(r.total) AS total,
               bool_and(v.off) AS off
        FROM v JOIN row r USING (node_id)
        GROUP BY r.rank, r.own, v.ts
        ORDER BY 2, 1""",
        [*params, *off_params, keep, max_rows, keep, max_rows, keep],
    )
    total = int(df["total"].iloc[0]) if not df.empty else 0
    shown = total if total <= max_rows else keep
    cells = _named(store, df).drop(columns="total")
    return Heatmap(cells, m, bucket, total, shown)


# Per node, the times it held no job (lo, hi): before its first span, between two, after its
# last if that ended, and always for a node with none. A node's spans do not overlap.
_GAPS = """WITH held AS (SELECT DISTINCT g.node_id, s.start_ts AS hs, s.end_ts AS he
                     FROM gpu_job_spans s JOIN gpus g USING (gpu_id))
SELECT node_id, lo, hi FROM (
  SELECT node_id, coalesce(lag(he) OVER (PARTITION BY node_id ORDER BY hs),
                           '-infinity'::TIMESTAMP) AS lo, hs AS hi FROM held)
WHERE lo < hi
UNION ALL SELECT node_id, max(he), 'infinity'::TIMESTAMP FROM held GROUP BY node_id
  HAVING count(he) = count(*)
UNION ALL SELECT node_id, '-infinity'::TIMESTAMP, 'infinity'::TIMESTAMP FROM nodes
  WHERE node_id NOT IN (SELECT node_id FROM held)"""


def _off_sql(store: Store, bucket: int) -> tuple[str, str, list[Any]]:
    """How to tell whether a cell (``c``: ``ts``, ``node_id``) is of a node running no job
    then: a join, the expression and their parameters. Where the store keeps when each GPU
    held a job (``gpu_job_spans``, the replay's), a cell no span of its node touches (a hot
    spare before its swap-in, a failed node after its failure), one a gap between its node's
    spans holds whole (``_GAPS``: a few rows, so the join costs little; a test of each cell
    against the spans made a 1,034-node heatmap up to 6 x slower); else a node that runs none now
    (``ROLE_NOW_SQL``: "spare", "out of the job"); FALSE where nothing says. Such cells are a
    state, not a fault: they neither rank a node among the anomalous nor set the fleet's
    reference, and are drawn in greys (issue 57, 6: the demo's idle spares sat on top in
    alarm red)."""
    if store.has_table("gpu_job_spans") and store.scalar(
        "SELECT count(*) FROM (SELECT 1 FROM gpu_job_spans LIMIT 1)"
    ):
        return (f"LEFT JOIN ({_GAPS}) x ON x.node_id = c.node_id AND x.lo <= c.ts"
                " AND x.hi >= c.ts + to_seconds(?)", "x.node_id IS NOT NULL", [bucket])  # fmt: skip
    return (
        f"""LEFT JOIN (SELECT node_id, ({ROLE_NOW_SQL}) IN ('spare', 'out of the job') AS idle
                      FROM nodes n) r ON r.node_id = c.node_id""",
        "coalesce(r.idle, FALSE)",
        [],
    )


# What node ``n`` does now, where the exporters say which job each GPU runs (``hpc_job``, as
# the replay keeps it): "job" while one of its GPUs runs one, "spare" for a spare that runs
# none, "out of the job" for a job node that runs none (drained, in repair); elsewhere its
# scheduled role. An idle spare painted red read as an idle job node (#37).
ROLE_NOW_SQL = """CASE
  WHEN NOT EXISTS (SELECT 1 FROM gpus WHERE hpc_job IS NOT NULL) THEN n.role
  WHEN EXISTS (SELECT 1 FROM gpus g WHERE g.node_id = n.node_id AND g.hpc_job IS NOT NULL)
    THEN 'job'
  WHEN n.role = 'spare' THEN 'spare'
  ELSE 'out of the job' END"""


def _named(store: Store, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (cells by ``node_id``) with each node's host, rack and role in its place, read
    for the few nodes shown: strings on each of 43 K cells cost a 54-day heatmap ~15 ms to
    fetch. A node missing from the inventory is "node N"; the averaged row has none."""
    ids = [int(i) for i in df["node_id"].dropna().unique()]
    names = store.df(
        f"""SELECT node_id, host, rack, role, {ROLE_NOW_SQL} AS role_now FROM nodes n
            WHERE node_id IN (SELECT unnest(?))""",
        [ids],
    )
    # each cell takes its node's row by position (a merge of 43 K cells cost 5 ms)
    at = pd.Index(names["node_id"]).get_indexer(df["node_id"])
    out = df[["ts", "rank"]].copy()
    for col in ("host", "rack", "role", "role_now"):
        out[col] = names[col].array.take(at, allow_fill=True)  # -1: no such node, NA
    missing = out["host"].isna() & df["node_id"].notna()
    out.loc[missing, "host"] = "node " + df.loc[missing, "node_id"].astype("Int64").astype(str)
    extra = {"off": df["off"]} if "off" in df else {}
    return out.assign(nodes=df["nodes"], value=df["value"], total=df["total"], **extra)


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
        # bounds as floats: least(FLOAT, INTEGER) per cell took 19 ms over 447 K, 5.5 as DOUBLE
        [*params, float(m.hi), float(m.lo), m.bin_width, m.bin_width, m.bin_width, bucket],
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


# Points per GPU line in the drill-down (its charts are ~600 px wide: 2-3 px a point). A node's
# eight GPUs are scattered through the fleet's rows of a level, so a query costs what the level
# holds for the range: 250 points read hourly buckets for a week of 16,384 GPUs and 6-hour ones
# for 54 days (25 ms cold), 500 read 5-min raw samples and hourly buckets (80 ms).
NODE_POINTS = 250


# The buckets a range touches, whole: [the start's bucket, the bucket after the end's), of
# a table aliased ``s``; its parameters are ``whole_buckets(bucket, tr)``.
WHOLE_BUCKETS_SQL = """s.ts >= time_bucket(to_seconds(?), ?::TIMESTAMP)
  AND s.ts < time_bucket(to_seconds(?), ?::TIMESTAMP) + to_seconds(?)"""


def whole_buckets(bucket: int, tr: TimeRange) -> list[Any]:
    return [bucket, tr.start, bucket, tr.end, bucket]


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
                FROM {gpu_table(level)} s JOIN gpus g USING (gpu_id)
                WHERE {WHOLE_BUCKETS_SQL} AND s.gpu_id = ANY(?::INTEGER[])
                GROUP BY ALL ORDER BY g.gpu, 1""",
            [bucket, bucket, *whole_buckets(bucket, tr), gids],
        )
    return store.df(
        f"""SELECT time_bucket(to_seconds(?), s.ts) AS ts, g.gpu,
                  avg(s.util_pct) AS util_pct, avg(s.temp_c) AS temp_c,
                  avg(s.power_w) AS power_w, avg(s.sm_clock_mhz) AS sm_clock_mhz,
                  avg(s.fb_used_mib) AS fb_used_mib, max(s.xid_last) AS xid_last,
                  ? AS bucket_s
           FROM gpu_samples s JOIN gpus g USING (gpu_id)
           WHERE {WHOLE_BUCKETS_SQL} AND s.gpu_id = ANY(?::INTEGER[])
           GROUP BY ALL ORDER BY g.gpu, 1""",
        [bucket, bucket, *whole_buckets(bucket, tr), gids],
    )
