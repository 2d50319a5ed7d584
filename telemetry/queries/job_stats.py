"""What each job did with its GPUs (what ``seff``/jobstats report, for GPUs), from the
per-GPU rollups: ``job_stats`` of ``telemetry.queries.jobs.list_jobs``' rows.

A job's GPUs are the GPUs labelled with it (``hpc_job``, or its pod) where any is, else every
GPU of its nodes; a labelled GPU counts while it held the label where ``gpu_job_spans`` says when
(the replay: a failed node up to its failure, the hot spare from its swap-in). A bucket a span
cuts counts by the share of its time inside the span, as the job's own first and last buckets
do (a failed node's last bucket, whose samples stop at the failure, is undercounted by at most
that bucket).

Efficiency is read from the per-GPU rollups (``gpu_rollup``), never the raw samples: per job a
level by its span (``level_for``: at most about ``MAX_BUCKETS`` buckets per GPU), each bucket
weighted by the share of it inside the job's time. So 5,000 jobs of a 2,048-node, 30-day
store read a few rows per job-GPU. Per job:

- ``alloc_gpu_hours``: allocated GPUs x elapsed; ``sampled_gpu_hours``: what the samples cover.
- ``used_gpu_hours``: sampled GPU-hours weighted by utilization; ``used_dcp_gpu_hours`` the
  same by real utilization (``telemetry.utilization``: DCP SM activity) where every bucket
  has it, else None.
- ``idle_gpu_hours``: GPU time below ``vocabulary.IDLE_PCT`` (by real utilization where
  reported), from the buckets' idle sample counts; ``idle_max_min`` the most idle GPU's minutes.
- ``mem_peak_mib``: the highest bucket mean of framebuffer used on one GPU (a peak shorter than
  a bucket is averaged away); ``util_pct``/``power_w`` sample-weighted means.
- ``energy_kwh``: by the energy counter's per-bucket use (``energy_mj_used``, kept on the hourly
  level: see ``telemetry.queries.energy``) when the job is read at that level and every bucket
  has it, else mean power x sampled time; ``energy_basis`` says which.

The figures of finished jobs are also kept (``telemetry.derive.job_figures`` computes them
with ``job_stats`` when they are settled); the listing reads those where it finds them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from telemetry.store import Store
from telemetry.store.rollups import DAY_FROM, DAY_MARK, DAY_S, ENERGY_LEVEL_S, gpu_table
from telemetry.vocabulary import IDLE_PCT

MAX_BUCKETS = 24  # per GPU: the finest per-GPU level giving at most about this many buckets

# The figures ``job_stats`` gives per job (the columns ``job_figures`` keeps).
STAT_COLUMNS = ("key", "level_s", "gpus_seen", "by_label", "sampled_gpu_hours",
                "used_gpu_hours", "used_dcp_gpu_hours", "idle_gpu_hours", "idle_max_min",
                "util_pct", "mem_peak_mib", "power_w", "energy_kwh", "energy_basis")  # fmt: skip


def level_for(span_s: float, levels: list[int]) -> int | None:
    """The finest per-GPU level giving at most about ``MAX_BUCKETS`` buckets over a span (the
    coarsest kept when none does); None without per-GPU levels."""
    if not levels:
        return None
    return next((lv for lv in levels if span_s / lv <= MAX_BUCKETS), levels[-1])


# The GPUs each attribution label names, and when (gs, ge; NULL: any time): dcgm-exporter's
# hpc_job, else a pod as namespace/pod, as the inventory says now; a label with spans in
# ``gpu_job_spans`` (the replay's: when each GPU held the job) by those instead, so a node that
# failed counts up to its failure and the hot spare that replaced it from its swap-in, not the
# GPUs labelled at the end over the whole run (issue 57, 6).
_LABELS_NOW = """SELECT gpu_id, host, hpc_job AS label, NULL AS namespace,
    NULL::TIMESTAMP AS gs, NULL::TIMESTAMP AS ge FROM gpus WHERE hpc_job IS NOT NULL {spanned}
  UNION ALL SELECT gpu_id, host, namespace || '/' || pod, namespace, NULL, NULL FROM gpus
  WHERE pod IS NOT NULL AND hpc_job IS NULL"""
_LABELS_SPANNED = """
  UNION ALL SELECT s.gpu_id, g.host, s.label, NULL, s.start_ts, s.end_ts
  FROM gpu_job_spans s JOIN gpus g USING (gpu_id)"""


def label_gpus_sql(store: Store) -> str:
    """The GPUs of each label and when they held it (gpu_id, host, label, namespace, gs, ge)."""
    if not store.has_table("gpu_job_spans"):  # a store from before the spans
        return _LABELS_NOW.format(spanned="")
    return (
        _LABELS_NOW.format(spanned="AND hpc_job NOT IN (SELECT label FROM gpu_job_spans)")
        + _LABELS_SPANNED
    )


# Each job's GPUs (labelled with it where any is, else its nodes') and the buckets of its level
# over its time (and a labelled GPU's time holding it), weighted by the share of each inside
# it; then the level's own table.
_STATS_SQL = """WITH sel AS (
  SELECT unnest(?::INTEGER[]) AS key, unnest(?) AS label, string_split(unnest(?), ',') AS hosts,
         unnest(?::TIMESTAMP[]) AS s, unnest(?::TIMESTAMP[]) AS e, unnest(?::INTEGER[]) AS level
), glab AS ({labels}
), byl AS (
  SELECT sel.key, glab.gpu_id, glab.gs, glab.ge FROM sel JOIN glab USING (label)
), jg AS (
  SELECT * FROM byl
  UNION ALL
  SELECT h.key, g.gpu_id, NULL::TIMESTAMP, NULL::TIMESTAMP FROM (
    SELECT key, unnest(hosts) AS host FROM sel WHERE key NOT IN (SELECT key FROM byl)) h
  JOIN gpus g USING (host)
), spans AS (  -- (key, level, from, to): days end at the mark, 6-hour buckets after it
  SELECT key, level, s, CASE WHEN level = {day} THEN least(e, ?::TIMESTAMP) ELSE e END AS e,
         s AS js, e AS je FROM sel
  UNION ALL
  SELECT key, {day_from}, greatest(s, ?::TIMESTAMP), e, s, e FROM sel
  WHERE level = {day} AND e > ?::TIMESTAMP
), b AS (
  SELECT key, level, ts, js, je,
         (epoch(least(ts + to_seconds(level), je)) - epoch(greatest(ts, js))) / level AS w
  FROM (SELECT key, level, js, je, e,
          unnest(generate_series(time_bucket(to_seconds(level), s), e, to_seconds(level))) AS ts
        FROM spans WHERE e > s)
  WHERE ts < e
), x AS (SELECT * FROM (
  SELECT jg.key, jg.gpu_id, b.level, b.ts, CASE WHEN jg.gs IS NULL AND jg.ge IS NULL THEN b.w
    ELSE (epoch(least(b.ts + to_seconds(b.level), b.je, coalesce(jg.ge, b.je)))
          - epoch(greatest(b.ts, b.js, coalesce(jg.gs, b.js)))) / b.level END AS w
  FROM jg JOIN b USING (key)) WHERE w > 0),
r AS ({union}),
g AS (
  SELECT key, gpu_id, sum(samples * w) AS n, sum(util_avg * samples * w) AS util,
    sum(real_avg * samples * w) AS dcp, count(*) AS buckets, count(real_avg) AS dcp_buckets,
    sum(coalesce(idle_n, CASE WHEN coalesce(real_avg, util_avg) < {idle} THEN samples END, 0)
        * w) AS idle, max(fb_used_avg) AS mem_peak, sum(power_w * samples * w) AS power,
    sum(energy_mj_used * w) AS mj, count(energy_mj_used) AS mj_buckets
  FROM r GROUP BY key, gpu_id
)
SELECT {by}, count(DISTINCT gpu_id) AS gpus_seen, bool_or(by_label) AS by_label,
  sum(n) * ? / 3600 AS sampled_gpu_hours, sum(util) / 100 * ? / 3600 AS used_gpu_hours,
  CASE WHEN sum(dcp_buckets) = sum(buckets) THEN sum(dcp) / 100 * ? / 3600 END
    AS used_dcp_gpu_hours,
  sum(idle) * ? / 3600 AS idle_gpu_hours, max(idle) * ? / 60 AS idle_max_min,
  sum(util) / nullif(sum(n), 0) AS util_pct, max(mem_peak) AS mem_peak_mib,
  sum(power) / nullif(sum(n), 0) AS power_w,
  CASE WHEN sum(mj_buckets) = sum(buckets) THEN sum(mj) / 3.6e9 END AS kwh_counter,
  sum(power) * ? / 3.6e6 AS kwh_power
FROM g LEFT JOIN (SELECT DISTINCT key, TRUE AS by_label FROM byl) USING (key) {join}
GROUP BY {by} ORDER BY {by}"""

_LEVEL_SQL = """SELECT x.key, x.gpu_id, x.w, t.samples, t.util_avg, t.real_avg, t.idle_n,
  t.fb_used_avg, t.power_w, t.energy_mj_used
FROM x JOIN {table} t ON t.gpu_id = x.gpu_id AND t.ts = x.ts
WHERE x.level = {level} AND t.ts >= ? AND t.ts < ?"""


def _day_mark(store: Store) -> datetime | None:
    mark = store.meta().get(DAY_MARK)
    return datetime.fromisoformat(mark) if mark else None


def _bounds(
    known: pd.DataFrame, picked: list[int], mark: datetime
) -> tuple[list[int], list[datetime]]:
    """The level tables the jobs read and, for each, the times their buckets lie in (bound
    parameters, so a level's table is read only over those times: its rows are in time
    order)."""
    spans: dict[int, list[tuple[datetime, datetime]]] = {}
    for s, e, lv in zip(known["start"].tolist(), known["end"].tolist(), picked, strict=True):
        s, e = s.to_pydatetime(), e.to_pydatetime()
        if lv == DAY_S:
            spans.setdefault(DAY_S, []).append((s, min(e, mark)))
            if e > mark:  # the days not kept yet: their 6-hour buckets
                spans.setdefault(DAY_FROM, []).append((max(s, mark), e))
        else:
            spans.setdefault(lv, []).append((s, e))
    tables = sorted(spans)
    bounds = []
    for lv in tables:
        bounds += [min(s for s, _ in spans[lv]) - timedelta(seconds=lv),
                   max(e for _, e in spans[lv])]  # fmt: skip
    return tables, bounds


def job_stats(store: Store, jobs: pd.DataFrame, per_gpu: bool = False) -> pd.DataFrame:
    """Per job of ``jobs`` (``list_jobs``' rows): its GPUs' efficiency (see the module's
    docstring) and the level it was read at, ``level_s``. Jobs without samples get no row.
    ``per_gpu``: a row per job and GPU, with ``host`` and ``gpu``."""
    levels = sorted(store.gpu_rollup_levels())
    mark = _day_mark(store)
    if mark is not None and DAY_FROM in levels:
        levels.append(DAY_S)
    known = jobs[jobs["hosts"].notna() | jobs["label"].notna()]
    if not levels or known.empty:
        return pd.DataFrame(columns=["key", "level_s"])
    span = (known["end"] - known["start"]).dt.total_seconds()
    picked = [level_for(s, levels) for s in span.tolist()]
    day_mark = mark or datetime(9999, 1, 1)
    tables, bounds = _bounds(known, picked, day_mark)
    union = " UNION ALL ".join(_LEVEL_SQL.format(table=gpu_table(lv), level=lv) for lv in tables)
    interval = store.sample_interval_s()
    # one string per job (the cache keys parameters by value: no list of lists); a host name
    # has no comma (Slurm's hostlists separate by it)
    hosts = [",".join(h) if isinstance(h, list | tuple | np.ndarray) else ""
             for h in known["hosts"].tolist()]  # fmt: skip
    df = store.df(
        _STATS_SQL.format(day=DAY_S, day_from=DAY_FROM, union=union, idle=IDLE_PCT,
                          labels=label_gpus_sql(store),
                          by="key, host, gpu" if per_gpu else "key",
                          join="JOIN gpus USING (gpu_id)" if per_gpu else ""),
        [list(range(len(known))), known["label"].tolist(), hosts,
         [t.to_pydatetime() for t in known["start"]], [t.to_pydatetime() for t in known["end"]],
         picked, day_mark, day_mark, day_mark, *bounds, *[interval] * 6],
    )  # fmt: skip
    keys = known["key"].tolist()  # jobs are numbered in the query (integer joins and groups)
    df["key"] = [keys[i] for i in df["key"].tolist()]
    chosen = dict(zip(keys, picked, strict=True))
    df["level_s"] = df["key"].map(chosen)
    hourly = df["level_s"] == ENERGY_LEVEL_S
    counter = hourly & df["kwh_counter"].notna()
    df["energy_kwh"] = df["kwh_counter"].where(counter, df["kwh_power"])
    df["energy_basis"] = ["energy counter" if c else "power x time" for c in counter]
    df.loc[df["energy_kwh"].isna(), "energy_basis"] = None
    return df.drop(columns=["kwh_counter", "kwh_power"])
