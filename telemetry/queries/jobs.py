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

Efficiency (``telemetry.queries.job_stats``: GPU-hours used and idle, memory, power, energy)
is read from the per-GPU rollups, or from the figures kept for finished jobs
(``telemetry.derive.job_figures``) where the listing finds them (``with_stats``).

Problems (``problems``, a list of short texts): a GPU idle for more than ``IDLE_MINUTES`` in
total while allocated, failed within ``FAILED_WITHIN_MIN`` minutes of its start, requeued
``REQUEUED_TIMES`` times or more. Every filter value is a bound parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from telemetry.errors import FactoryFloorError
from telemetry.queries import TimeRange
from telemetry.queries.job_stats import STAT_COLUMNS, job_stats, label_gpus_sql
from telemetry.queries.run_end import quiet_since, signal_words_sql
from telemetry.store import Store
from telemetry.store.rollups import gpu_table

IDLE_MINUTES = 30  # a GPU of the job idle for longer than this (in total) is a problem
FAILED_WITHIN_MIN = 10  # a job failing within this many minutes of its start is a problem
REQUEUED_TIMES = 2  # requeued this many times or more is a problem
FAILED_STATES = ("FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY")
MAX_JOBS = 500  # rows one listing returns (newest first)
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
# (The latest record and the cluster's GPU tracking are joined from small groupings, not
# windows: a window carries every column of every record through its sort, ~15 ms of 5,000.)
_SLURM = """SELECT 'slurm' AS source, job_id, job_id AS label, name, user_name AS "user",
  {account} AS account, partition, state, start_ts AS "start",
  coalesce(end_ts, polled_ts) AS "end", exit_code, hosts, nodelist,
  {gpus} AS gpus_alloc, c.tracked AS gpus_tracked,
  requeue AS requeues, run_id, end_ts IS NOT NULL AS finished
FROM slurm_jobs
JOIN (SELECT cluster, job_id_raw, max(requeue) AS requeue FROM slurm_jobs
      WHERE start_ts IS NOT NULL GROUP BY cluster, job_id_raw) USING (cluster, job_id_raw, requeue)
JOIN (SELECT cluster, count({gpus}) > 0 AS tracked FROM slurm_jobs WHERE start_ts IS NOT NULL
      GROUP BY cluster) c USING (cluster)
WHERE start_ts IS NOT NULL"""

# Labels naming no Slurm job, each over its span (``_label_spans``, bound as lists), on the GPUs
# that held it (``job_stats.label_gpus_sql``). Its GPUs are how many held it at once: the
# GPU-time they held it over its span (each GPU's whole span where no spans are kept), so a
# hot spare that replaced a failed node is not counted twice.
_LABELS = """SELECT 'label' AS source, l.label AS job_id, l.label, NULL AS name,
  NULL AS "user", any_value(l.namespace) AS account, NULL AS partition, NULL AS state,
  any_value(s.lo) AS "start", any_value(s.hi) AS "end", NULL::INTEGER AS exit_code,
  list(DISTINCT l.host ORDER BY l.host) AS hosts, NULL AS nodelist,
  coalesce(round(sum(greatest(0, epoch(least(coalesce(l.ge, s.hi), s.hi))
                                 - epoch(greatest(coalesce(l.gs, s.lo), s.lo))))
                 / nullif(epoch(any_value(s.hi)) - epoch(any_value(s.lo)), 0)),
           count(DISTINCT l.gpu_id))::INTEGER AS gpus_alloc,
  0 AS requeues, NULL AS run_id, FALSE AS finished
FROM ({labels}) l JOIN (SELECT unnest(?::VARCHAR[]) AS label,
  unnest(?::TIMESTAMP[]) AS lo, unnest(?::TIMESTAMP[]) AS hi) s USING (label)
GROUP BY l.label"""

# a labelled GPU's buckets while it held the label (those its span touches)
_HELD = (
    """(l.gs IS NULL OR t.ts > l.gs - INTERVAL {level} SECOND) AND (l.ge IS NULL OR t.ts < l.ge)"""
)
_SPAN_COARSE = f"""SELECT l.label, min(t.ts), max(t.ts) FROM ({{labels}}) l
JOIN {{table}} t USING (gpu_id)
WHERE l.label NOT IN (SELECT job_id FROM slurm_jobs WHERE job_id IS NOT NULL) AND {_HELD}
GROUP BY l.label ORDER BY l.label"""
_SPAN_FINE = f"""SELECT l.label, min(t.ts), max(t.ts) FROM ({{labels}}) l
JOIN {{table}} t USING (gpu_id) WHERE t.ts >= ? AND t.ts < ? AND {_HELD} GROUP BY l.label"""


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
    labels_sql = label_gpus_sql(store)
    spans = store.rows(_SPAN_COARSE.format(labels=labels_sql, table=gpu_table(coarse),
                                           level=coarse))  # fmt: skip
    if not spans:
        return [], [], []
    width = timedelta(seconds=coarse)
    los, his = [r[1] for r in spans], [r[2] for r in spans]
    fine_sql = _SPAN_FINE.format(labels=labels_sql, table=gpu_table(fine), level=fine)
    first = {r[0]: r[1] for r in store.rows(fine_sql, [min(los), max(los) + width])}
    last = {r[0]: r[2] for r in store.rows(fine_sql, [min(his), max(his) + width])}
    labels = [r[0] for r in spans]
    step = timedelta(seconds=fine)
    return (
        labels,
        [first.get(lb, lo) for lb, lo in zip(labels, los, strict=True)],
        [last.get(lb, hi) + step for lb, hi in zip(labels, his, strict=True)],
    )


# Runs imported from logs (``import``, and ``logs`` from a cluster's log directories) that no
# Slurm job maps to, on the hosts their ranks ran on. Their state is read from the log's end
# (issue 57, 5), in Slurm's words: the lines at or after the last progress point say how it
# ended (a planned exit: COMPLETED; Slurm's time limit: TIMEOUT; a node lost: NODE_FAIL;
# scancel or preemption: CANCELLED), else a stop the derivation found no progress after
# (``interruptions`` without an end) is FAILED; a record's end with none of these is
# COMPLETED (as ``run_end`` reads it); else RUNNING while its newest line is recent, UNKNOWN
# once it is older than ``run_end.QUIET`` (a log that ended saying nothing of how: summary's
# "unknown", ``run_end.quiet_end``). Its end is its last line.
_LOG_END = f"""(SELECT CASE
    {signal_words_sql("s")}
    WHEN bool_or(s.kind = 'planned_exit') THEN 'COMPLETED' END
  FROM signals s WHERE s.run_id = r.run_id
    AND s.ts >= coalesce((SELECT max(ts) FROM train_metrics t WHERE t.run_id = r.run_id),
                         r.start_ts) - INTERVAL 1 SECOND)"""
_LOG_STOPPED = """EXISTS (SELECT 1 FROM interruptions i WHERE i.run_id = r.run_id
    AND i.end_ts IS NULL AND NOT coalesce(i.planned, false)
    AND i.ts >= coalesce((SELECT max(ts) FROM train_metrics t WHERE t.run_id = r.run_id),
                         i.ts))"""
_LOG_NEWEST = """greatest((SELECT max(ts) FROM train_metrics t WHERE t.run_id = r.run_id),
  (SELECT max(ts) FROM signals s WHERE s.run_id = r.run_id))"""
_LOGS = f"""SELECT 'log' AS source, r.run_id AS job_id, NULL AS label, r.name, NULL AS "user",
  NULL AS account, NULL AS partition, coalesce({_LOG_END},
    CASE WHEN {_LOG_STOPPED} THEN 'FAILED' WHEN r.end_ts IS NOT NULL THEN 'COMPLETED'
         WHEN {_LOG_NEWEST} >= ? THEN 'RUNNING' ELSE 'UNKNOWN' END) AS state,
  r.start_ts AS "start", coalesce(r.end_ts, {_LOG_NEWEST}) AS "end", NULL::INTEGER AS exit_code,
  (SELECT list(DISTINCT host ORDER BY host) FROM rank_hosts h WHERE h.run_id = r.run_id) AS hosts,
  NULL AS nodelist, r.gpus AS gpus_alloc, 0 AS requeues, r.run_id,
  r.end_ts IS NOT NULL AS finished
FROM runs r WHERE r.source IN ('import', 'logs') AND r.start_ts IS NOT NULL
  AND r.run_id NOT IN (SELECT run_id FROM slurm_jobs WHERE run_id IS NOT NULL)"""


def _sources(store: Store, with_labels: bool = True) -> tuple[str, list[Any]]:
    """Every source's jobs as one query, and its parameters (``with_labels``: the label
    source's too; its jobs never end, so the finished jobs need not read them)."""
    have = _slurm_columns(store)
    account = "account" if "account" in have else "NULL"
    gpus = "gpus" if "gpus" in have else "NULL::INTEGER"
    parts, params = [_SLURM.format(account=account, gpus=gpus)], []
    if store.scalar("SELECT count(*) FROM runs WHERE source IN ('import', 'logs')"):
        parts.append(_LOGS)  # (planning it costs ~5 ms: only where such runs are)
        params.append(quiet_since())
    labels, los, his = _label_spans(store) if with_labels else ([], [], [])
    if labels:
        parts.append(_LABELS.format(labels=label_gpus_sql(store)))
        params += [labels, los, his]
    return " UNION ALL BY NAME ".join(f"({p})" for p in parts), params


def _in(values: tuple[str, ...]) -> tuple[str, list[Any]]:
    """``AND col IN (...)`` for a filter (empty: no condition); values bound."""
    return ("", []) if not values else ("= ANY(?)", [list(values)])


def list_jobs(
    store: Store,
    f: JobFilter,
    limit: int | None = MAX_JOBS,
    only: tuple[str, str] | None = None,
    labels: bool = True,
) -> pd.DataFrame:
    """The jobs ``f`` selects, newest first, at most ``limit`` (None: all): their accounting
    columns (``COLUMNS`` up to ``nodelist``) and ``label``, ``hosts`` (for ``job_stats``),
    ``finished`` (its end is known: a Slurm job's end time, an imported run's end), ``kept``
    (its figures are kept: ``kept_end`` and ``kept_<column>`` of ``STAT_COLUMNS``). ``only``:
    the one job (source, job_id). ``labels``: with the jobs known
    only from attribution labels (they never end, so the kept figures need not read them)."""
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
        where.append(
            "(contains(lower(coalesce(name, '') || ' ' || job_id), lower(?)) OR "
            "len(list_filter(coalesce(hosts, []), lambda h: lower(h) = lower(?))) > 0)"
        )
        params += [f.name, f.name]
    gpn = gpus_per_node(store)
    sources, source_params = _sources(store, with_labels=labels)
    kept = store.has_table("job_figures")
    # problem jobs only: the newest ``limit`` of the jobs in the range with a problem by their
    # kept figures, and every job not kept (``jobs`` judges those: running ones, labels'), not
    # the problems among the newest ``limit`` jobs
    picked = f.problems_only and kept and only is None
    df = store.df(
        f"""WITH j AS (
              SELECT source || ':' || job_id AS key, source, job_id, label, name, "user",
                     account, partition, state, "start", "end",
                     epoch("end") - epoch("start") AS elapsed_s, exit_code,
                     len(hosts) AS nodes,
                     coalesce(gpus_alloc, CASE WHEN gpus_tracked THEN 0
                                               ELSE len(hosts) * ? END) AS gpus,
                     requeues, run_id, nodelist, hosts, finished
              FROM ({sources}) WHERE {" AND ".join(where)}
              {"" if picked else 'ORDER BY "start" DESC, job_id LIMIT ?'})
            SELECT j.* {_KEPT_HOSTS if kept and only is None else ""},
                   {_KEPT_SELECT if kept else "FALSE AS kept"}
            FROM j {_KEPT_JOIN if kept else ""}
            {_PICKED.format(problem=_KEPT_PROBLEM) if picked else ""}
            ORDER BY j."start" DESC, j.job_id""",
        [gpn, *source_params, *params, (1 << 62) if limit is None else limit],
    )
    return df


# How a listing reads the kept figures (``telemetry.derive.job_figures``): a finished job's row
# when it was kept for the job as it is (same start, end, nodes and label), a running job's
# (kept up to the rollups' last closed bucket) when it is the same job (same start, nodes,
# label).
_KEPT_SELECT = 'f.key IS NOT NULL AS kept, f."end" AS kept_end, ' + ", ".join(
    f"f.{c} AS kept_{c}" for c in STAT_COLUMNS[1:]
)
# a finished Slurm job's kept figures need no hosts in a listing (``job_stats`` reads them; its
# nodelist names them): 500 lists less; one job's (``job_gpus``) are read by its hosts
_KEPT_HOSTS = """EXCLUDE (hosts), CASE WHEN f.key IS NULL OR NOT f.finished
  OR j.nodelist IS NULL THEN j.hosts END AS hosts"""
# a kept job's problems as ``problems`` finds them (``_shared``'s idle minutes of a job sharing
# its nodes: its share of the nodes' idle GPU-hours per GPU); tests check both agree
_KEPT_PROBLEM = f"""((CASE WHEN NOT coalesce(f.by_label, FALSE) AND j.gpus < f.gpus_seen
    THEN CASE WHEN j.gpus > 0 THEN f.idle_gpu_hours * 60 / f.gpus_seen END
    ELSE f.idle_max_min END) > {IDLE_MINUTES}
  OR (j.state IN ({", ".join(f"'{s}'" for s in FAILED_STATES)})
      AND j.elapsed_s < {FAILED_WITHIN_MIN * 60})
  OR j.requeues >= {REQUEUED_TIMES})"""
_PICKED = """WHERE f.key IS NULL OR {problem}
QUALIFY f.key IS NULL OR row_number() OVER (PARTITION BY f.key IS NULL
                                            ORDER BY j."start" DESC, j.job_id) <= ?"""
_KEPT_JOIN = """LEFT JOIN job_figures f ON f.key = j.key AND f."start" = j."start"
  AND f.finished = j.finished AND (NOT f.finished OR f."end" = j."end")
  AND f.hosts IS NOT DISTINCT FROM j.hosts AND f.label IS NOT DISTINCT FROM j.label"""


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
    seen, gpus = _num(df["gpus_seen"]), _num(df["gpus"])
    label = np.array([x is True or x is np.True_ for x in df["by_label"].tolist()], dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN compares False; 0/0 is NaN
        shared = ~label & (gpus < seen)
        share = np.where(shared, gpus / seen, 1.0)
        cols = {col: _num(df[col]) * share for col in SHARE_COLUMNS}
        mean_idle = cols["idle_gpu_hours"] * 60 / gpus
    cols["idle_max_min"] = np.where(shared, mean_idle, _num(df["idle_max_min"]))
    how: list[str | None] = [
        "label" if lb else "nodes" if s == s else None
        for lb, s in zip(label.tolist(), seen.tolist(), strict=True)
    ]
    for i in np.flatnonzero(shared).tolist():
        how[i] = f"nodes, shared: {int(gpus[i])} of {int(seen[i])} GPUs"
    return df.assign(**cols, attribution=how)


def _num(values: pd.Series) -> np.ndarray:
    """A column as floats (None and what is no number: NaN)."""
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def with_stats(store: Store, jobs: pd.DataFrame) -> pd.DataFrame:
    """``jobs`` (``list_jobs``' rows) with ``job_stats``' columns (``STAT_COLUMNS``): the kept
    figures (``job_figures``) where a job has them, the others' read from the rollups now;
    NaN (None for the texts) where nothing was sampled."""
    kept = jobs["kept"].astype(bool).to_numpy()
    names = [c for c in jobs.columns if not c.startswith("kept")]
    stats = {c: _stat(jobs.get(f"kept_{c}"), c, len(jobs)) for c in STAT_COLUMNS[1:]}
    if not kept.all():
        fresh = job_stats(store, jobs.loc[~kept, names])
        at = pd.Index(jobs["key"]).get_indexer(fresh["key"])
        for c in [c for c in STAT_COLUMNS[1:] if c in fresh.columns]:
            stats[c][at] = _stat(fresh[c], c, len(fresh))
    # one frame from the columns as they are (selecting and assigning would copy the listing's
    # Arrow strings column by column: most of this function's time)
    return pd.DataFrame({**{c: jobs[c] for c in names}, **stats}, index=jobs.index, copy=False)


_TEXT_STATS = ("by_label", "energy_basis")  # of ``STAT_COLUMNS``; the others are numbers


def _stat(values: pd.Series | None, col: str, n: int) -> np.ndarray:
    """One statistic's values as a writable array: floats (NaN unknown), or objects (None)."""
    if values is None:
        return np.full(n, None if col in _TEXT_STATS else np.nan, dtype=object
                       if col in _TEXT_STATS else float)  # fmt: skip
    if col not in _TEXT_STATS:
        got = _num(values)
        return got if got.flags.writeable else got.copy()
    out = values.to_numpy(dtype=object, copy=True)
    out[pd.isna(out)] = None
    return out


def _nodelist(nodelist: Any, hosts: Any) -> str | None:
    if isinstance(nodelist, str):
        return nodelist
    return (",".join(hosts) or None) if isinstance(hosts, list | np.ndarray) else None


def jobs(store: Store, f: JobFilter, limit: int = MAX_JOBS) -> pd.DataFrame:
    """The jobs ``f`` selects with their efficiency and problems (``COLUMNS``), newest first.
    With ``f.problems_only``, only jobs with a problem (of the newest ``limit``)."""
    df = _shared(with_stats(store, list_jobs(store, f, limit)))
    df["alloc_gpu_hours"] = df["gpus"] * df["elapsed_s"] / 3600
    df["nodelist"] = [  # a label's or a log's job: its hosts, as a Slurm list names them
        _nodelist(n, h) for n, h in zip(df["nodelist"].tolist(), df["hosts"].tolist(), strict=True)
    ]
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = None
    cols = ("idle_max_min", "state", "elapsed_s", "requeues")
    df["problems"] = [problems(dict(zip(cols, r, strict=True)))
                      for r in zip(*(df[c].tolist() for c in cols), strict=True)]  # fmt: skip
    if f.problems_only:
        df = df[df["problems"].map(len) > 0].head(limit)
    return df[list(COLUMNS)].reset_index(drop=True)


def job_gpus(store: Store, key: str) -> pd.DataFrame:
    """Per GPU of the job ``key`` (``source:job_id``, as ``jobs`` names it) over its time:
    host, gpu, its GPU-hours, utilization, idle time, memory peak, power and energy (empty:
    no such job, or nothing sampled)."""
    source, _, job_id = str(key).partition(":")
    one = list_jobs(store, JobFilter(), limit=1, only=(source, job_id))
    out = job_stats(store, one, per_gpu=True)
    # the GPUs it holds (``attrs["gpus"]``: fewer than shown where it shares its nodes and no
    # label says which are its own)
    gpus = one["gpus"].iloc[0] if len(one) else None
    out.attrs["gpus"] = None if gpus is None or pd.isna(gpus) else int(gpus)
    return out


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


def newest_job_time(store: Store) -> datetime | None:
    """The newest end (or poll, for a job still running) of any Slurm job stored."""
    return store.scalar("SELECT max(coalesce(end_ts, polled_ts)) FROM slurm_jobs")
