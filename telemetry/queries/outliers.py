"""The GPUs page's outlier table and the node it opens on: GPUs that run hot, throttle, lag the
fleet's SM clock, report an XID, or sit idle while the job runs, each with a reason in words.

Two stages keep the cost flat at fleet scale: candidate nodes are found on the per-node cells
of ``telemetry.queries.gpus`` (compared with the fleet in the same bucket), then only those
nodes' GPUs and a spread of reference job nodes are read per GPU.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd

from telemetry.queries import TimeRange
from telemetry.queries.gpus import _cells, cell_grid, heatmap, node_info
from telemetry.queries.xid_gpus import xid_gpus
from telemetry.reference import xids
from telemetry.store import Store
from telemetry.store.cellflags import JUDGED_SQL
from telemetry.store.rollups import DAY_FROM, DAY_MARK, DAY_S, gpu_table
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
_BEFORE_XID = REASON_ORDER[: REASON_ORDER.index("XID")]  # read from the samples alone
MAX_NODES = 40  # candidate nodes the table reads per GPU


# Nodes likely to hold an outlier GPU, from per-node cells compared with the fleet in the same
# bucket (fleet-wide dips such as restarts and checkpoint stalls cancel out): a hot GPU, a node
# as busy as the fleet but slower (one GPU at 0.88 of its peers lowers its node's mean clock by
# 1.5 %), or a job node well below the fleet's utilization (``telemetry.store.cellflags``: the flags
# are kept with the node rollups, or judged here from node_tick's cells and regrouped ones).
# Plus a spread of job nodes as the reference for "the fleet" in stage 2.
_CANDIDATES_SQL = """WITH flags AS (
  SELECT node_id, count(*) FILTER (WHERE idle_cell) AS idle_cells,
    count(*) FILTER (WHERE slow_cell) AS slow_cells, count(*) FILTER (WHERE hot_cell) AS hot_cells
  FROM ({flagged}) GROUP BY node_id),
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
# Node cells the candidate search reads at most: 600 time buckets of every node up to 3,333
# nodes, fewer and coarser past it, so 65,536 GPUs over a week read hourly cells (1.4 M) and
# not 5-minute ones (16.5 M: 70-90 ms cold). A hot cell keeps its peak at any size; an idle or
# slow spell short against the bucket may not make its node a candidate.
CANDIDATE_CELLS = 2_000_000
# The node rollup's kept flags (``cellflags``) of one level over a range.
_KEPT_FLAGS = """SELECT node_id, idle_cell, slow_cell, hot_cell FROM node_rollup
WHERE bucket_s = ? AND ts >= ? AND ts <= ?"""

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
  count(*) FILTER (WHERE s.temp_c >= ?) AS hot_samples, bool_or(s.real) AS real,
  0 AS grain_s
FROM s JOIN gpus g USING (gpu_id) LEFT JOIN nodes n ON n.node_id = g.node_id
LEFT JOIN run r USING (ts)
GROUP BY ALL"""


# The same from the per-GPU buckets of ``gpu_rollup``, for long ranges: samples hot, idle and
# busy and the clock and temperature while busy are the counts each bucket kept of its samples
# (``rollups.GPU_COUNT``), so they equal what raw samples give; only whether the job was
# running is judged per bucket (the reference GPUs' mean). Buckets built before they kept the
# counts are judged on their means (a hot bucket counts whole; ``exact`` is then false). Reads
# a few hundred GPUs' buckets instead of sampled ticks of the raw table, and also covers
# ranges whose raw samples have expired (``--raw-retention``). Days (``rollups.DAY_S``) are
# kept whole only: before the day mark they are read, from it on the 6-hour buckets.
_GPU_STATS_ROLLED_SQL = """WITH s AS MATERIALIZED (
  SELECT ts, gpu_id, samples, coalesce(real_avg, util_avg) AS util_pct,
         real_avg IS NOT NULL AS real, temp_max, hot_n IS NOT NULL AS exact,
         coalesce(hot_n, CASE WHEN temp_max >= ? THEN samples ELSE 0 END) AS hot,
         coalesce(idle_n, CASE WHEN coalesce(real_avg, util_avg) < ? THEN samples ELSE 0 END)
           AS idle,
         coalesce(busy_n, CASE WHEN coalesce(real_avg, util_avg) >= ? THEN samples ELSE 0 END)
           AS busy,
         coalesce(busy_clock, sm_clock_avg) AS clock, coalesce(busy_temp, temp_avg) AS temp
  FROM ({source})
  WHERE ts <= ? AND gpu_id = ANY(?::INTEGER[])),
run AS (SELECT ts, sum(util_pct * samples) / sum(samples) >= ? AS running FROM s
        WHERE gpu_id = ANY(?::INTEGER[]) GROUP BY ts)
SELECT g.host, g.gpu, n.role, sum(s.samples) AS samples,
  coalesce(sum(s.samples) FILTER (WHERE r.running), 0) AS run_samples,
  coalesce(sum(s.idle) FILTER (WHERE r.running), 0) AS idle_samples,
  sum(s.clock * s.busy) / nullif(sum(s.busy) FILTER (WHERE s.clock IS NOT NULL), 0)
    AS clock_busy,
  sum(s.temp * s.busy) / nullif(sum(s.busy) FILTER (WHERE s.temp IS NOT NULL), 0) AS temp_busy,
  max(s.temp_max) AS temp_peak, sum(s.hot) AS hot_samples, bool_or(s.real) AS real,
  CASE WHEN bool_and(s.exact) THEN 0 ELSE ? END AS grain_s
FROM s JOIN gpus g USING (gpu_id) LEFT JOIN nodes n ON n.node_id = g.node_id
LEFT JOIN run r USING (ts)
GROUP BY ALL"""


MAX_STAT_TICKS = 240  # long ranges: per-GPU statistics read this many evenly spaced ticks
FULL_SCAN_ROWS = 20_000_000  # ...unless the range holds fewer sample rows than this
MAX_ROLLED_ROWS = 3_000_000  # per-GPU buckets of the fleet a long range's statistics scan


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


def _rolled_level(store: Store, tr: TimeRange) -> int | None:
    """The ``gpu_rollup`` level a long range's statistics read, or None to read raw samples.
    The finest level with at most ``MAX_ROLLED_ROWS`` buckets of the whole fleet in the range:
    the candidates' GPUs are scattered over the fleet, so the scan costs what the level holds
    for the range, however few GPUs are asked for (hourly for a week of 16,384 GPUs, days for
    54 days: 0.9 M rows, ~20 ms, where the 6-hour level's 3.6 M took ~50 ms; the complete days
    kept, ``rollups.keep_days``, and the 6-hour buckets of the day still filling; whether the
    job ran is then judged per day). Raw samples for a range that holds at most
    ``FULL_SCAN_ROWS`` samples of the fleet and whose samples are all kept, or one that starts
    before the per-GPU rollups did (an upgraded store)."""
    gpus = store.scalar("SELECT count(*) FROM gpus") or 1
    levels = store.gpu_rollup_levels()
    long = tr.seconds / store.sample_interval_s() * gpus > FULL_SCAN_ROWS
    expired = store.raw_since()  # raw samples before it have left the store (retention)
    gone = expired is not None and tr.start < expired
    if not ((long or gone) and levels and tr.start >= store.gpu_rollup_since()):
        return None
    if DAY_FROM in levels and _days_kept(store) is not None:
        levels = [*levels, DAY_S]
    fits = [lv for lv in levels if gpus * tr.seconds / lv <= MAX_ROLLED_ROWS]
    return fits[0] if fits else levels[-1]


def _days_kept(store: Store) -> datetime | None:
    """Where the per-GPU days end (``rollups.DAY_MARK``: the first day not kept), or None."""
    mark = store.meta().get(DAY_MARK)
    return datetime.fromisoformat(mark) if mark else None


# The buckets of one per-GPU level from those touching a range's start on (its own table: see
# ``rollups.GPU_VIEW``), and with an end or a start of their own (days, then 6-hour buckets).
_LEVEL_FROM = "SELECT * FROM {table} WHERE ts >= time_bucket(to_seconds(?), ?::TIMESTAMP)"


def _level_source(store: Store, level: int, tr: TimeRange) -> tuple[str, list[Any]]:
    """``_GPU_STATS_ROLLED_SQL``'s source and its parameters: the buckets of ``level`` the
    range touches; for days, those before the day mark and the 6-hour buckets from it on."""
    if level != DAY_S:
        return _LEVEL_FROM.format(table=gpu_table(level)), [level, tr.start]
    days, six = (_LEVEL_FROM.format(table=gpu_table(lv)) for lv in (DAY_S, DAY_FROM))
    mark = _days_kept(store)
    sql = f"{days} AND ts < ? UNION ALL {six} AND ts >= ?"
    return sql, [DAY_S, tr.start, mark, DAY_FROM, tr.start, mark]


def gpu_stats(
    store: Store, tr: TimeRange, max_nodes: int = 24, reference_nodes: int = 8
) -> tuple[pd.DataFrame, float | None, float]:
    """Per-GPU statistics of the nodes most likely to hold an outlier (at most ``max_nodes``,
    found on the per-node rollups) and of ``reference_nodes`` job nodes spread over the fleet,
    and the fleet's SM clock while busy (MHz): the median over all those GPUs, which a few
    outliers cannot move, and the seconds each sample stands for (see ``stat_ticks``). Only
    these GPUs' samples are read, or for long ranges their per-GPU buckets (``_rolled_level``;
    the frame's ``grain_s`` is the bucket size where buckets were judged on their means, 0 where
    the figures are the samples' own)."""
    nodes = store.scalar("SELECT count(*) FROM nodes") or 1
    cols = max(24, min(600, CANDIDATE_CELLS // nodes))
    level, bucket, tick = cell_grid(store, tr, cols)
    if tick or bucket != level:  # cells the node rollup does not keep: judged here
        cells, params, _ = _cells(store, tr, cols, _CANDIDATE_COLUMNS)
        flagged = JUDGED_SQL.format(cells=cells)
    else:
        flagged, params = _KEPT_FLAGS, [level, tr.start, tr.end]
    rows = store.rows(
        _CANDIDATES_SQL.format(flagged=flagged), [*params, int(max_nodes), reference_nodes]
    )
    gids = [int(r[0]) for r in rows]
    ref_gids = [int(r[0]) for r in rows if r[1]]
    level = _rolled_level(store, tr)
    if level is not None:
        per_sample_s = store.sample_interval_s()
        source, bounds = _level_source(store, level, tr)
        sql = _GPU_STATS_ROLLED_SQL.format(source=source)
        params = [HOT_C, IDLE_PCT, BUSY_PCT, *bounds]
        params += [tr.end, gids, BUSY_PCT, ref_gids, level]
    else:
        ticks, per_sample_s = stat_ticks(store, tr)
        sql = _GPU_STATS_SQL
        params = [ticks, gids, BUSY_PCT, ref_gids, IDLE_PCT, BUSY_PCT, BUSY_PCT, HOT_C]
    if not gids:
        return pd.DataFrame(), None, per_sample_s
    stats = store.df(sql, params)
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


def _grain_text(seconds: int) -> str:
    """A bucket size as an adjective: "1-h", "5-min"."""
    return f"{seconds // 3600}-h" if seconds % 3600 == 0 else f"{seconds // 60}-min"


def _gpu_reasons(r: Any, ref: float | None, interval_s: float) -> list[dict[str, Any]]:
    """The reasons one GPU (a row of ``gpu_stats``) is an outlier; empty if it is not."""
    out = []
    if r.temp_peak is not None and r.temp_peak >= HOT_C:
        share = r.hot_samples / max(r.samples, 1)
        hot = duration_text(r.hot_samples * interval_s)
        detail = f"≥ {HOT_C:.0f} °C for {hot} ({share:.0%} of samples)"
        if r.grain_s:  # from per-GPU buckets: a hot bucket counts whole
            grain = _grain_text(r.grain_s)
            detail = (
                f"≥ {HOT_C:.0f} °C in {grain} buckets totalling {hot} ({share:.0%} of its time)"
            )
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
        means = f" in {_grain_text(r.grain_s)} means" if r.grain_s else ""
        detail = f"{what} < {IDLE_PCT:.0f} %{means} for {idle} while the job ran"
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


def outliers(store: Store, tr: TimeRange, max_nodes: int = MAX_NODES) -> pd.DataFrame:
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
    rows = _xid_rows(xid_gpus(store, tr)) + _stat_rows(stats, ref, interval)
    return _in_order(_collapse_idle_nodes(rows, stats))


def _stat_rows(stats: pd.DataFrame, ref: float | None, interval: float) -> list[dict[str, Any]]:
    return [row for r in stats.itertuples() for row in _gpu_reasons(r, ref, interval)]


def _in_order(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """``rows`` as the table shows them: by ``REASON_ORDER``, the worst of each first."""
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
    None without GPU samples in the range. Rows read from the samples alone come before any
    XID, so when one of them names a node the XIDs are not read (the first viewer after a
    write skips that query)."""
    stats, ref, interval = gpu_stats(store, tr, MAX_NODES)
    early = [r for r in _stat_rows(stats, ref, interval) if r["reason"] in _BEFORE_XID]
    for table in (lambda: _in_order(early), lambda: outliers(store, tr)):
        for r in table().itertuples():
            if node_info(store, r.host) is not None:
                # any reason but an XID event was read from the range's samples: there are some
                if r.reason == "XID" and heatmap(store, tr, "util", max_rows=2).cells.empty:
                    return None
                gpu = f" on GPU {r.gpu}" if isinstance(r.gpu, int) else ""
                return str(r.host), f"{r.reason}{gpu}"
    cells = heatmap(store, tr, "util", max_rows=2).cells
    if cells.empty:
        return None
    top = cells.loc[cells["rank"] == 1, "host"].dropna()
    return (str(top.iloc[0]), "furthest from the fleet's utilization") if len(top) else None
