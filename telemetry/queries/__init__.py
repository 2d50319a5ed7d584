"""Read-side queries: every SQL statement the app and the metrics (``telemetry.metrics``) need,
parameterised; a query never imports a metric.

Functions take a ``Store`` and plain values (run IDs, datetimes, metric names checked against
the catalog) and return pandas DataFrames sized for display: fleet-scale series come from the
rollup tables at a bucket size chosen so no series exceeds ``max_points``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pandas as pd

from telemetry.queries.targets import SCRAPED
from telemetry.store import Store
from telemetry.store.rollups import gpu_table


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return max((self.end - self.start).total_seconds(), 1.0)

    def shown(self) -> TimeRange:
        """This range within ``SHOWN_FROM`` .. ``SHOWN_TO`` (the same range when it lies
        inside; one wholly outside them: their nearest end)."""
        start = min(max(self.start, SHOWN_FROM), SHOWN_TO)
        return TimeRange(start, max(min(self.end, SHOWN_TO), start))


# The times a page can show: any stored time outside them (a log line or a record dated 9999
# or 0001 that reached the store before its source refused such times) is no page's data. The
# store's and a run's extent leave them out, and the app clamps every range it makes to them
# (``TimeRange.shown``), so no chart, card or table computes with a date Python or pandas
# cannot hold (pandas' nanoseconds end in 1677 and 2262; a range's padding and buckets need
# room).
SHOWN_FROM = datetime(1970, 1, 1)
SHOWN_TO = datetime(2200, 1, 1)
_IN_SHOWN = f"BETWEEN TIMESTAMP '{SHOWN_FROM:%Y-%m-%d}' AND TIMESTAMP '{SHOWN_TO:%Y-%m-%d}'"


# Whether node ``n`` (a ``nodes`` row) is one of the job's nodes: scheduled as a job node (or
# not labelled: a real cluster's exporters rarely say), and not drained, down or in maintenance
# by Slurm's last word. A hot spare or a drained node is idle by design; counting it as an
# under-used job GPU raised false alerts (#37).
JOB_NODE_SQL = """(coalesce(n.role, 'job') = 'job' AND n.host NOT IN (
    SELECT host FROM slurm_nodes
    WHERE regexp_matches(state, 'DOWN|DRAIN|FAIL|NOT_RESPONDING|MAINT')))"""


def runs(store: Store) -> pd.DataFrame:
    return store.df(
        """SELECT run_id, name, scenario, simulated, gpus, nodes, gpu_model, model_params,
                  start_ts, end_ts FROM runs ORDER BY start_ts, run_id"""
    )


def run_picker(store: Store) -> pd.DataFrame:
    """The runs as the run picker lists them, oldest first: run_id, name, ``made_for_job``
    (a run Factory Floor made for a Slurm job that matched no run: ``source = 'slurm'``),
    ``trained`` (it has training metrics) and ``jobs`` (the Slurm job ids that ran it, each
    once, in order: a run's requeues and restarts)."""
    return store.df(
        """WITH t AS (SELECT DISTINCT run_id FROM train_metrics),
                j AS (SELECT run_id, list(DISTINCT job_id ORDER BY job_id) AS jobs
                      FROM slurm_jobs WHERE run_id IS NOT NULL AND job_id IS NOT NULL
                      GROUP BY run_id)
           SELECT r.run_id, r.name, coalesce(r.source = 'slurm', false) AS made_for_job,
                  t.run_id IS NOT NULL AS trained, coalesce(j.jobs, []) AS jobs
           FROM runs r LEFT JOIN t USING (run_id) LEFT JOIN j USING (run_id)
           ORDER BY r.start_ts, r.run_id"""
    )


def data_extent(store: Store) -> TimeRange | None:
    """First and last time anything was stored: GPU samples, training metrics, or a scrape
    round (rounds keep being stored when every exporter is down, so the range, and with it
    "last hour", moves on through an outage instead of stopping at the last sample), a
    checkpoint or a log's signal (a run's final saves finish after its last progress line).
    Other sources' health rows are not data: an import of last month's logs keeps last month's
    range.
    Where raw retention expired old samples, the GPU history starts at the finest rollup.
    The GPU samples' times are read from their per-node sums (``node_tick``, written in the
    same transaction, one row per node and tick, expired with them): an eighth of the rows to
    plan over. Times a page cannot show (``SHOWN_FROM`` .. ``SHOWN_TO``) are left out of the
    tables a log or a record fills, and the result is clamped to them."""
    expired = store.raw_since() is not None
    rolled = "SELECT min(ts), NULL FROM fleet_rollup WHERE bucket_s = ?" if expired else ""
    (row,) = store.rows(
        f"""SELECT min(lo), max(hi) FROM (
             SELECT min(ts) AS lo, max(ts) AS hi FROM node_tick
             UNION ALL {rolled or "SELECT NULL, NULL"}
             UNION ALL SELECT min(ts), max(ts) FROM train_metrics WHERE ts {_IN_SHOWN}
             UNION ALL SELECT min(start_ts), max(coalesce(end_ts, start_ts)) FROM checkpoints
                       WHERE start_ts {_IN_SHOWN} AND coalesce(end_ts, start_ts) {_IN_SHOWN}
             UNION ALL SELECT min(ts), max(ts) FROM signals WHERE ts {_IN_SHOWN}
             UNION ALL SELECT min(ts), max(ts) FROM targets WHERE {SCRAPED})""",
        [store.rollup_levels()[0]] if expired else [],
    )
    if row is None or row[0] is None:
        return _accounting_extent(store)
    return TimeRange(row[0], row[1]).shown()


def _accounting_extent(store: Store) -> TimeRange | None:
    """A store holding no samples, metrics, checkpoints or logs may still hold a cluster's
    Slurm accounting (``import --slurm`` before any scrape) and per-GPU rollups: their span,
    so its jobs, node health and accounting have a range (not "no data stored yet")."""
    levels = store.gpu_rollup_levels()
    rolled = (f"UNION ALL SELECT min(ts), max(ts) FROM {gpu_table(levels[0])}"
              if levels else "")  # fmt: skip
    (row,) = store.rows(
        f"""SELECT min(lo), max(hi) FROM (
             SELECT min(start_ts) AS lo, max(coalesce(end_ts, polled_ts, start_ts)) AS hi
             FROM slurm_jobs
             UNION ALL SELECT min(ts), max(coalesce(polled_ts, ts)) FROM slurm_node_events
             {rolled})"""
    )
    if row is None or row[0] is None or row[1] is None:
        return None
    return TimeRange(row[0], max(row[0], row[1])).shown()


def newest_trained_run(store: Store) -> str | None:
    """The run with training metrics that started last (None: no run logged any)."""
    rows = store.rows(
        """SELECT run_id FROM runs WHERE run_id IN (SELECT DISTINCT run_id FROM train_metrics)
           ORDER BY start_ts DESC NULLS LAST, run_id DESC LIMIT 1"""
    )
    return rows[0][0] if rows else None


def live_runs(store: Store, tr: TimeRange) -> list[str]:
    """The runs a live view judges at ``tr.end``, newest first: the newest run with training
    metrics, every other run that logged a step in ``tr``, and every run whose Slurm job was
    still running at its last poll in ``tr`` (a job hung for longer than the view still holds
    its GPUs: its silence is the news); none that ended by ``tr.end`` (a finished run's "not
    training" is not news), unless it ended stopped: a run whose Slurm job ended (a time limit,
    a crash, a preemption) with its stop still open is live, its stop the news (#58: the run
    left the alerts at the poll that saw its job end, so its stop was never sent)."""
    rows = store.rows(
        """WITH trained AS (SELECT DISTINCT run_id FROM train_metrics),
                recent AS (SELECT DISTINCT run_id FROM train_metrics WHERE ts BETWEEN ? AND ?),
                held AS (SELECT run_id FROM slurm_jobs
                         WHERE run_id IS NOT NULL AND state = 'RUNNING'
                           AND polled_ts BETWEEN ? AND ?),
                ranked AS (
                  SELECT r.run_id, r.end_ts,
                         r.run_id IN (SELECT run_id FROM recent)
                           OR r.run_id IN (SELECT run_id FROM held) AS recent,
                         row_number() OVER (ORDER BY r.start_ts DESC NULLS LAST, r.run_id DESC)
                           AS k
                  FROM runs r WHERE r.run_id IN (SELECT run_id FROM trained))
           SELECT run_id FROM ranked
           WHERE (k = 1 OR recent) AND (end_ts IS NULL OR end_ts > ? OR run_id IN (
             SELECT run_id FROM interruptions WHERE end_ts IS NULL AND source = 'inferred'))
           ORDER BY k""",
        [tr.start, tr.end, tr.start, tr.end, tr.end],
    )
    return [r[0] for r in rows]


def running_jobs(store: Store, run_ids: list[str], at: datetime) -> dict[str, str]:
    """The Slurm job each of ``run_ids`` runs as at ``at`` (its newest job whose last poll up to
    ``at`` found it running; a requeued job keeps its id): run_id -> job id."""
    if not run_ids:
        return {}
    rows = store.rows(
        """SELECT run_id, job_id FROM slurm_jobs
           WHERE run_id IN (SELECT unnest(?)) AND state = 'RUNNING' AND polled_ts <= ?
           QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY start_ts DESC, job_id) = 1""",
        [run_ids, at],
    )
    return {r[0]: r[1] for r in rows}


def run_span(store: Store, run_id: str) -> TimeRange | None:
    """From a run's start to its end, widened to its own training metrics and checkpoints (its
    final saves finish after its last progress line); the end is None while the run has none
    recorded (a live run). None when nothing dates the run."""
    (row,) = store.rows(
        f"""WITH m AS (SELECT ts FROM train_metrics WHERE run_id = ? AND ts {_IN_SHOWN})
           SELECT least(min(r.start_ts), (SELECT min(ts) FROM m)),
                  greatest(max(r.end_ts), (SELECT max(ts) FROM m)),
                  bool_or(r.end_ts IS NULL),
                  (SELECT max(coalesce(end_ts, start_ts)) FROM checkpoints
                   WHERE run_id = ? AND coalesce(end_ts, start_ts) {_IN_SHOWN})
           FROM runs r WHERE r.run_id = ?""",
        [run_id, run_id, run_id],
    )
    start, end, live, saved = row
    if end is not None and saved is not None:
        end = max(end, saved)
    if start is None:
        return None
    if live or end is None:
        return TimeRange(min(max(start, SHOWN_FROM), SHOWN_TO), None)  # type: ignore[arg-type]
    return TimeRange(start, end).shown()


def pick_level(store: Store, tr: TimeRange, max_points: int) -> int:
    """The finest bucket (seconds) that keeps a series within ``max_points`` points; the sample
    interval itself means the per-tick node table."""
    interval = store.sample_interval_s()
    expired = store.raw_since()  # ticks before it left the store (retention)
    kept = expired is None or tr.start >= expired
    if kept and tr.seconds / interval <= max_points:
        return int(interval) if interval >= 1 else 1
    levels = store.rollup_levels()
    for lv in levels:
        if tr.seconds / lv <= max_points:
            return lv
    return levels[-1]


_SERIES_COLS = "ts, step, tokens, loss, lr, grad_norm, tokens_per_s, mfu, attempt"
LOSS_COLS = "ts, step, loss, attempt"  # what a loss chart draws (and breaks at restarts)
_SPAN_COLUMNS = ("ts", "step")  # what a metrics series may be cut by


def thinned_metrics(
    store: Store,
    run_id: str,
    column: str,
    lo: object,
    hi: object,
    max_points: int = 2000,
    columns: str = _SERIES_COLS,
) -> pd.DataFrame:
    """A run's training metrics with ``column`` (``ts`` or ``step``) between ``lo`` and ``hi``,
    every attempt, thinned to about ``max_points`` rows by keeping every k-th logged row plus
    the highest loss of each group of k, so loss spikes survive the thinning. ``columns``: all
    the metrics, or ``LOSS_COLS`` (a fixed list, never input) for a loss chart."""
    if column not in _SPAN_COLUMNS:
        raise ValueError(f"cannot cut a metrics series by {column!r}")
    if columns not in (_SERIES_COLS, LOSS_COLS):
        raise ValueError(f"thinned_metrics: columns {columns!r} is not a known list")
    where = f"run_id = ? AND {column} BETWEEN ? AND ?"  # column checked above
    n = store.scalar(f"SELECT count(*) FROM train_metrics WHERE {where}", [run_id, lo, hi])
    k = max(int(n // max_points) + 1, 1)
    # each group's highest loss by a grouped max joined back (a window partitioned by group
    # sorted every row again: 20 ms against 14 for a 54-day run's 71 K rows)
    return store.df(
        f"""WITH t AS MATERIALIZED (
              SELECT {columns}, row_number() OVER (ORDER BY ts) - 1 AS i
              FROM train_metrics WHERE {where}),
            m AS (SELECT i // ? AS g, max(loss) AS bucket_max FROM t GROUP BY g)
            SELECT {columns} FROM t LEFT JOIN m ON m.g = t.i // ?
            WHERE t.i % ? = 0 OR t.loss = m.bucket_max ORDER BY ts""",
        [run_id, lo, hi, k, k, k],
    )


def train_series(store: Store, run_id: str, tr: TimeRange, max_points: int = 2000) -> pd.DataFrame:
    """Training metrics of a run in the time range, thinned (see ``thinned_metrics``)."""
    return thinned_metrics(store, run_id, "ts", tr.start, tr.end, max_points)


def loss_series(store: Store, run_id: str, tr: TimeRange, max_points: int = 2000) -> pd.DataFrame:
    """``train_series``'s rows with only ``LOSS_COLS``: the Overview's loss chart."""
    return thinned_metrics(store, run_id, "ts", tr.start, tr.end, max_points, LOSS_COLS)


# What a chart marks an interruption with: when, what, where, and when training came back.
MARK_COLUMNS = "ts, category, component, host, detect_s, restart_s"
# An interruption's downtime (detection + restart, s): the parts its record gives, NULL when
# it gives neither. The wait to detection is unknown where no line of the job dates its
# noticing (issue 57, 4), and its restart then holds the whole downtime: a sum of the two
# would make a known downtime NULL.
DOWNTIME = """CASE WHEN coalesce(detect_s, restart_s) IS NOT NULL
    THEN coalesce(detect_s, 0) + coalesce(restart_s, 0) END"""


def interruptions(
    store: Store, run_id: str | None, tr: TimeRange | None = None, columns: str = "*"
) -> pd.DataFrame:
    """The run's interruptions (every run's with ``run_id`` None) in ``tr``, oldest first;
    ``columns`` is ``*`` or ``MARK_COLUMNS`` (a fixed list, never input): the markers need six
    of them, not the evidence."""
    if columns not in ("*", MARK_COLUMNS):
        raise ValueError(f"interruptions: columns {columns!r} is not * or MARK_COLUMNS")
    sql = f"SELECT {columns} FROM interruptions WHERE (? IS NULL OR run_id = ?)"
    params: list[object] = [run_id, run_id]
    if tr is not None:
        sql += " AND ts BETWEEN ? AND ?"
        params += [tr.start, tr.end]
    return store.df(sql + " ORDER BY ts", params)
