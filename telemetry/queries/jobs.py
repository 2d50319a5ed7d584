"""Jobs as rows, and what each did with its GPUs (what ``seff``/jobstats report, for GPUs).

The jobs a store knows, from three places (``source``):

- **slurm**: the latest record of each Slurm job (``slurm_jobs``), with how many times it was
  requeued; a running job ends, for now, at its last poll.
- **label**: a job known only from dcgm-exporter's attribution labels (``gpus.hpc_job`` that
  names no Slurm job, or a pod as ``namespace/pod``), over the time its GPUs' samples span.
- **log**: a run imported from its logs that no Slurm job is mapped to (``runs``), on the hosts
  its ranks ran on (``rank_hosts``).

A job's GPUs are the GPUs labelled with it (``hpc_job``, or its pod) where any is, else every
GPU of its nodes. Its allocated GPUs are Slurm's count (``slurm_jobs.gpus``) where collected;
on a cluster whose accounting tracks GPUs a job without a count had none (a CPU-only job), as
``queries.accounting`` counts it; else (no job of its cluster has a count) its nodes x the GPUs
per node the store knows.

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

Problems (``problems``, a list of short texts): a GPU idle for more than ``IDLE_MINUTES`` in
total while allocated, failed within ``FAILED_WITHIN_MIN`` minutes of its start, requeued
``REQUEUED_TIMES`` times or more. Every filter value is a bound parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from telemetry.errors import FactoryFloorError
from telemetry.queries import TimeRange
from telemetry.store import Store
from telemetry.store.rollups import DAY_FROM, DAY_MARK, DAY_S, ENERGY_LEVEL_S, gpu_table
from telemetry.vocabulary import IDLE_PCT

IDLE_MINUTES = 30  # a GPU of the job idle for longer than this (in total) is a problem
FAILED_WITHIN_MIN = 10  # a job failing within this many minutes of its start is a problem
REQUEUED_TIMES = 2  # requeued this many times or more is a problem
FAILED_STATES = ("FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY")
MAX_JOBS = 500  # rows one listing returns (newest first)
MAX_BUCKETS = 24  # per GPU: the finest per-GPU level giving at most about this many buckets
MAX_NAME = 128  # characters of a name filter

# The columns a listing has, in order (efficiency ones are None where nothing was sampled).
COLUMNS = (
    "key", "source", "job_id", "name", "user", "account", "partition", "state", "start",
    "end", "elapsed_s", "exit_code", "nodes", "gpus", "requeues", "run_id", "nodelist",
    "alloc_gpu_hours", "sampled_gpu_hours", "used_gpu_hours", "used_dcp_gpu_hours",
    "idle_gpu_hours", "idle_max_min", "util_pct", "mem_peak_mib", "power_w", "energy_kwh",
    "energy_basis", "level_s", "attribution", "problems",
)  # fmt: skip


@dataclass(frozen=True)
class JobFilter:
    """Which jobs to list: overlapping ``tr`` (None: any time), with a state, user, account
    and partition among the given (empty: any), and ``name`` in the name or job id, or one of
    its nodes (any case)."""

    tr: TimeRange | None = None
    states: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    name: str = ""
    problems_only: bool = False

    def __post_init__(self) -> None:
        if len(self.name) > MAX_NAME:
            raise FactoryFloorError(f"job name filter longer than {MAX_NAME} characters")
        if self.tr is not None and self.tr.end < self.tr.start:
            raise FactoryFloorError(
                f"job time range ends ({self.tr.end}) before it starts ({self.tr.start})"
            )


def _slurm_columns(store: Store) -> set[str]:
    """The columns ``slurm_jobs`` has (one statement for every added column asked about)."""
    got = store.scalar(
        "SELECT list(column_name) FROM duckdb_columns() WHERE table_name = 'slurm_jobs'"
    )
    return set(got or ())


def gpus_per_node(store: Store) -> int | None:
    """The GPUs per node the store knows (the most any node has), None without GPUs."""
    got = store.scalar("SELECT max(n) FROM (SELECT count(*) AS n FROM gpus GROUP BY host)")
    return int(got) if got else None


# Each source's jobs with one set of columns; {account} and {gpus} are the added Slurm
# columns or NULL for a store without them (served read-only as it is).
_SLURM = """SELECT 'slurm' AS source, job_id, job_id AS label, name, user_name AS "user",
  {account} AS account, partition, state, start_ts AS "start",
  coalesce(end_ts, polled_ts) AS "end", exit_code, hosts, nodelist,
  {gpus} AS gpus_alloc, count({gpus}) OVER (PARTITION BY cluster) > 0 AS gpus_tracked,
  requeue AS requeues, run_id
FROM slurm_jobs WHERE start_ts IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY cluster, job_id_raw ORDER BY requeue DESC) = 1"""

# The GPUs each attribution label names: dcgm-exporter's hpc_job, else a pod as namespace/pod.
_LABEL_GPUS = """SELECT gpu_id, host, hpc_job AS label, NULL AS namespace FROM gpus
  WHERE hpc_job IS NOT NULL
  UNION ALL SELECT gpu_id, host, namespace || '/' || pod, namespace FROM gpus
  WHERE pod IS NOT NULL AND hpc_job IS NULL"""

# Labels naming no Slurm job, each over its span (``_label_spans``, bound as lists).
_LABELS = f"""SELECT 'label' AS source, l.label AS job_id, l.label, NULL AS name,
  NULL AS "user", any_value(l.namespace) AS account, NULL AS partition, NULL AS state,
  any_value(s.lo) AS "start", any_value(s.hi) AS "end", NULL::INTEGER AS exit_code,
  list(DISTINCT l.host ORDER BY l.host) AS hosts, NULL AS nodelist,
  count(DISTINCT l.gpu_id)::INTEGER AS gpus_alloc, 0 AS requeues, NULL AS run_id
FROM ({_LABEL_GPUS}) l JOIN (SELECT unnest(?::VARCHAR[]) AS label,
  unnest(?::TIMESTAMP[]) AS lo, unnest(?::TIMESTAMP[]) AS hi) s USING (label)
GROUP BY l.label"""

_SPAN_COARSE = f"""SELECT l.label, min(t.ts), max(t.ts) FROM ({_LABEL_GPUS}) l
JOIN {{table}} t USING (gpu_id)
WHERE l.label NOT IN (SELECT job_id FROM slurm_jobs WHERE job_id IS NOT NULL)
GROUP BY l.label ORDER BY l.label"""
_SPAN_FINE = f"""SELECT l.label, min(t.ts), max(t.ts) FROM ({_LABEL_GPUS}) l
JOIN {{table}} t USING (gpu_id) WHERE t.ts >= ? AND t.ts < ? GROUP BY l.label"""


def _label_spans(store: Store) -> tuple[list[str], list[datetime], list[datetime]]:
    """Each label naming no Slurm job and the span of its GPUs' buckets: found on the coarsest
    per-GPU level, then its first and last bucket on the finest, read only around them (a
    54-day label over 16,384 GPUs reads its 6-hour buckets and two 6-hour windows of the
    finest level, not every finest bucket)."""
    levels = store.gpu_rollup_levels()
    if not levels or not store.scalar(
        "SELECT count(*) FROM gpus WHERE hpc_job IS NOT NULL OR pod IS NOT NULL"
    ):
        return [], [], []
    fine, coarse = levels[0], levels[-1]
    spans = store.rows(_SPAN_COARSE.format(table=gpu_table(coarse)))
    if not spans:
        return [], [], []
    width = timedelta(seconds=coarse)
    los, his = [r[1] for r in spans], [r[2] for r in spans]
    first = {r[0]: r[1] for r in store.rows(_SPAN_FINE.format(table=gpu_table(fine)),
                                            [min(los), max(los) + width])}  # fmt: skip
    last = {r[0]: r[2] for r in store.rows(_SPAN_FINE.format(table=gpu_table(fine)),
                                           [min(his), max(his) + width])}  # fmt: skip
    labels = [r[0] for r in spans]
    step = timedelta(seconds=fine)
    return (
        labels,
        [first.get(lb, lo) for lb, lo in zip(labels, los, strict=True)],
        [last.get(lb, hi) + step for lb, hi in zip(labels, his, strict=True)],
    )


# Runs imported from logs (``import``, and ``logs`` from a cluster's log directories) that no
# Slurm job maps to, on the hosts their ranks ran on.
_LOGS = """SELECT 'log' AS source, r.run_id AS job_id, NULL AS label, r.name, NULL AS "user",
  NULL AS account, NULL AS partition, CASE WHEN r.end_ts IS NULL THEN 'RUNNING' ELSE 'ENDED' END
  AS state, r.start_ts AS "start", coalesce(r.end_ts, (SELECT max(ts) FROM train_metrics t
  WHERE t.run_id = r.run_id)) AS "end", NULL::INTEGER AS exit_code,
  (SELECT list(DISTINCT host ORDER BY host) FROM rank_hosts h WHERE h.run_id = r.run_id) AS hosts,
  NULL AS nodelist, r.gpus AS gpus_alloc, 0 AS requeues, r.run_id
FROM runs r WHERE r.source IN ('import', 'logs') AND r.start_ts IS NOT NULL
  AND r.run_id NOT IN (SELECT run_id FROM slurm_jobs WHERE run_id IS NOT NULL)"""


def _sources(store: Store) -> tuple[str, list[Any]]:
    """Every source's jobs as one query, and its parameters."""
    have = _slurm_columns(store)
    account = "account" if "account" in have else "NULL"
    gpus = "gpus" if "gpus" in have else "NULL::INTEGER"
    parts = [_SLURM.format(account=account, gpus=gpus), _LOGS]
    labels, los, his = _label_spans(store)
    if labels:
        parts.append(_LABELS)
    params: list[Any] = [labels, los, his] if labels else []
    return " UNION ALL BY NAME ".join(f"({p})" for p in parts), params


def _in(values: tuple[str, ...]) -> tuple[str, list[Any]]:
    """``AND col IN (...)`` for a filter (empty: no condition); values bound."""
    return ("", []) if not values else ("= ANY(?)", [list(values)])


def list_jobs(
    store: Store, f: JobFilter, limit: int = MAX_JOBS, only: tuple[str, str] | None = None
) -> pd.DataFrame:
    """The jobs ``f`` selects, newest first, at most ``limit``: their accounting columns
    (``COLUMNS`` up to ``nodelist``) and ``label``, ``hosts`` (for ``job_stats``). ``only``:
    the one job (source, job_id)."""
    where, params = ["TRUE"], []
    if only is not None:
        where.append("source = ? AND job_id = ?")
        params += list(only)
    if f.tr is not None:
        where.append('"start" <= ? AND "end" >= ?')
        params += [f.tr.end, f.tr.start]
    for col, values in (("state", f.states), ("\"user\"", f.users), ("account", f.accounts),
                        ("partition", f.partitions)):  # fmt: skip
        cond, p = _in(tuple(values))
        if cond:
            where.append(f"{col} {cond}")
            params += p
    if f.name:  # in the name or id, or one of its nodes by name ("what ran on node X")
        where.append("(contains(lower(coalesce(name, '') || ' ' || job_id), lower(?)) OR "
                     "len(list_filter(coalesce(hosts, []), lambda h: lower(h) = lower(?))) > 0)")
        params += [f.name, f.name]
    gpn = gpus_per_node(store)
    sources, source_params = _sources(store)
    df = store.df(
        f"""SELECT source || ':' || job_id AS key, source, job_id, label, name, "user", account,
                   partition, state, "start", "end",
                   epoch("end") - epoch("start") AS elapsed_s, exit_code,
                   len(hosts) AS nodes,
                   coalesce(gpus_alloc, CASE WHEN gpus_tracked THEN 0
                                             ELSE len(hosts) * ? END) AS gpus,
                   requeues, run_id, nodelist, hosts
            FROM ({sources}) WHERE {" AND ".join(where)}
            ORDER BY "start" DESC, job_id LIMIT ?""",
        [gpn, *source_params, *params, limit],
    )
    return df


def level_for(span_s: float, levels: list[int]) -> int | None:
    """The finest per-GPU level giving at most about ``MAX_BUCKETS`` buckets over a span (the
    coarsest kept when none does); None without per-GPU levels."""
    if not levels:
        return None
    return next((lv for lv in levels if span_s / lv <= MAX_BUCKETS), levels[-1])


# Each job's GPUs (labelled with it where any is, else its nodes') and the buckets of its level
# over its time, weighted by the share of each inside the job; then the level's own table.
_STATS_SQL = """WITH sel AS (
  SELECT unnest(?::INTEGER[]) AS key, unnest(?) AS label, string_split(unnest(?), ',') AS hosts,
         unnest(?::TIMESTAMP[]) AS s, unnest(?::TIMESTAMP[]) AS e, unnest(?::INTEGER[]) AS level
), glab AS (
  SELECT gpu_id, hpc_job AS label FROM gpus WHERE hpc_job IS NOT NULL
  UNION ALL SELECT gpu_id, namespace || '/' || pod FROM gpus WHERE pod IS NOT NULL
), byl AS (
  SELECT sel.key, glab.gpu_id FROM sel JOIN glab USING (label)
), jg AS (
  SELECT * FROM byl
  UNION ALL
  SELECT h.key, g.gpu_id FROM (
    SELECT key, unnest(hosts) AS host FROM sel WHERE key NOT IN (SELECT key FROM byl)) h
  JOIN gpus g USING (host)
), spans AS (  -- (key, level, from, to): days end at the mark, 6-hour buckets after it
  SELECT key, level, s, CASE WHEN level = {day} THEN least(e, ?::TIMESTAMP) ELSE e END AS e,
         s AS js, e AS je FROM sel
  UNION ALL
  SELECT key, {day_from}, greatest(s, ?::TIMESTAMP), e, s, e FROM sel
  WHERE level = {day} AND e > ?::TIMESTAMP
), b AS (
  SELECT key, level, ts, (epoch(least(ts + to_seconds(level), je)) - epoch(greatest(ts, js)))
         / level AS w
  FROM (SELECT key, level, js, je, e,
          unnest(generate_series(time_bucket(to_seconds(level), s), e, to_seconds(level))) AS ts
        FROM spans WHERE e > s)
  WHERE ts < e
), x AS (SELECT jg.key, jg.gpu_id, b.level, b.ts, b.w FROM jg JOIN b USING (key)),
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
    hosts = [",".join(h) if h is not None else "" for h in known["hosts"].tolist()]
    df = store.df(
        _STATS_SQL.format(day=DAY_S, day_from=DAY_FROM, union=union, idle=IDLE_PCT,
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


def problems(row: Any) -> list[str]:
    """What is wrong with one job (a row of ``jobs``), in words."""
    out = []
    idle = row.get("idle_max_min")
    if idle is not None and not pd.isna(idle) and idle > IDLE_MINUTES:
        out.append(f"a GPU idle {idle:.0f} min while allocated (> {IDLE_MINUTES})")
    elapsed = row.get("elapsed_s")
    if row.get("state") in FAILED_STATES and elapsed is not None and not pd.isna(elapsed) \
            and elapsed < FAILED_WITHIN_MIN * 60:  # fmt: skip
        out.append(f"{row['state']} {elapsed / 60:.1f} min after start (< {FAILED_WITHIN_MIN})")
    requeues = row.get("requeues")
    if requeues is not None and not pd.isna(requeues) and requeues >= REQUEUED_TIMES:
        out.append(f"requeued {int(requeues)} times")
    return out


SHARE_COLUMNS = ("sampled_gpu_hours", "used_gpu_hours", "used_dcp_gpu_hours", "idle_gpu_hours",
                 "energy_kwh")  # fmt: skip


def _shared(df: pd.DataFrame) -> pd.DataFrame:
    """``attribution`` of each job's figures, and the share of its nodes' for a job holding
    fewer GPUs than its nodes have, with no label saying which: its GPU-hours and energy are
    its share (its GPUs / the nodes' GPUs) of the nodes', and its idle minutes per GPU the
    nodes' mean (not the most idle GPU, which may be another job's). Means (utilization,
    power, memory peak) are the nodes'."""
    if df.empty or "gpus_seen" not in df.columns:
        return df.assign(attribution=None)
    seen = pd.to_numeric(df["gpus_seen"], errors="coerce")
    label = df["by_label"].astype("boolean").fillna(False).astype(bool)
    gpus = pd.to_numeric(df["gpus"], errors="coerce")
    shared = (~label & (gpus < seen)).fillna(False).astype(bool)
    share = (gpus / seen).where(shared, 1.0)
    out = df.copy()
    for col in SHARE_COLUMNS:
        out[col] = pd.to_numeric(out[col], errors="coerce") * share
    mean_idle = out["idle_gpu_hours"] * 60 / gpus
    out["idle_max_min"] = pd.to_numeric(out["idle_max_min"], errors="coerce").where(
        ~shared, mean_idle)  # fmt: skip
    how = ["label" if lb else "nodes" if s == s else None
           for lb, s in zip(label.tolist(), seen.tolist(), strict=True)]  # fmt: skip
    for i in [i for i, sh in enumerate(shared.tolist()) if sh]:
        how[i] = f"nodes, shared: {int(gpus.iloc[i])} of {int(seen.iloc[i])} GPUs"
    out["attribution"] = how
    return out


def jobs(store: Store, f: JobFilter, limit: int = MAX_JOBS) -> pd.DataFrame:
    """The jobs ``f`` selects with their efficiency and problems (``COLUMNS``), newest first.
    With ``f.problems_only``, only jobs with a problem (of the newest ``limit``)."""
    listed = list_jobs(store, f, limit)
    stats = job_stats(store, listed)
    df = _shared(listed.merge(stats, on="key", how="left"))
    df["alloc_gpu_hours"] = df["gpus"] * df["elapsed_s"] / 3600
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = None
    cols = ("idle_max_min", "state", "elapsed_s", "requeues")
    df["problems"] = [problems(dict(zip(cols, r, strict=True)))
                      for r in zip(*(df[c].tolist() for c in cols), strict=True)]  # fmt: skip
    if f.problems_only:
        df = df[df["problems"].map(len) > 0]
    return df[list(COLUMNS)].reset_index(drop=True)


def job_gpus(store: Store, key: str) -> pd.DataFrame:
    """Per GPU of the job ``key`` (``source:job_id``, as ``jobs`` names it) over its time:
    host, gpu, its GPU-hours, utilization, idle time, memory peak, power and energy (empty:
    no such job, or nothing sampled)."""
    source, _, job_id = str(key).partition(":")
    one = list_jobs(store, JobFilter(), limit=1, only=(source, job_id))
    return job_stats(store, one, per_gpu=True)


def filter_values(store: Store, tr: TimeRange | None) -> dict[str, list[str]]:
    """What the filters can pick among the Slurm jobs overlapping ``tr``: states, users,
    accounts and partitions, each sorted."""
    account = "account" if "account" in _slurm_columns(store) else "NULL"
    lo, hi = (tr.start, tr.end) if tr is not None else (datetime.min, datetime.max)
    rows = store.rows(
        f"""SELECT list(DISTINCT state ORDER BY state), list(DISTINCT user_name ORDER BY user_name),
                   list(DISTINCT {account} ORDER BY {account}),
                   list(DISTINCT partition ORDER BY partition)
            FROM slurm_jobs WHERE start_ts <= ? AND coalesce(end_ts, polled_ts) >= ?""",
        [hi, lo],
    )
    names = ("states", "users", "accounts", "partitions")
    return {
        n: [v for v in (vals or []) if v is not None]
        for n, vals in zip(names, rows[0], strict=True)
    }
