"""Read-side queries for the dashboard: every SQL statement the app needs, parameterised.

Functions take a ``Store`` and plain values (run IDs, datetimes, metric names checked against
the catalog) and return pandas DataFrames sized for display: fleet-scale series come from the
rollup tables at a bucket size chosen so no series exceeds ``max_points``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import pandas as pd

from telemetry.queries.targets import SCRAPED
from telemetry.store import Store
from telemetry.vocabulary import BUSY_PCT, HOT_C, IDLE_PCT, TIERS

# Rollup columns a chart may ask for; names are checked here, never interpolated from input.
FLEET_METRICS = {
    "util_avg": ("GPU utilization", "%"),
    "temp_avg": ("Mean GPU temperature", "°C"),
    "temp_max": ("Hottest GPU temperature", "°C"),
    "power_w": ("Fleet power", "W"),
    "fb_used_avg": ("Framebuffer used", "MiB"),
    "sm_clock_avg": ("SM clock", "MHz"),
    "tensor_avg": ("Tensor pipe active", "ratio"),
    "real_avg": ("Real utilization", "%"),
}


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return max((self.end - self.start).total_seconds(), 1.0)


def runs(store: Store) -> pd.DataFrame:
    return store.df(
        """SELECT run_id, name, scenario, simulated, gpus, nodes, gpu_model, model_params,
                  start_ts, end_ts FROM runs ORDER BY start_ts, run_id"""
    )


def data_extent(store: Store) -> TimeRange | None:
    """First and last time anything was stored: GPU samples, training metrics, or a scrape
    round (rounds keep being stored when every exporter is down, so the range, and with it
    "last hour", moves on through an outage instead of stopping at the last sample). Other
    sources' health rows are not data: an import of last month's logs keeps last month's range.
    Where raw retention expired old samples, the GPU history starts at the finest rollup.
    The GPU samples' times are read from their per-node sums (``node_tick``, written in the
    same transaction, one row per node and tick, expired with them): an eighth of the rows to
    plan over."""
    expired = store.raw_since() is not None
    rolled = "SELECT min(ts), NULL FROM fleet_rollup WHERE bucket_s = ?" if expired else ""
    (row,) = store.rows(
        f"""SELECT min(lo), max(hi) FROM (
             SELECT min(ts) AS lo, max(ts) AS hi FROM node_tick
             UNION ALL {rolled or "SELECT NULL, NULL"}
             UNION ALL SELECT min(ts), max(ts) FROM train_metrics
             UNION ALL SELECT min(ts), max(ts) FROM targets WHERE {SCRAPED})""",
        [store.rollup_levels()[0]] if expired else [],
    )
    if row is None or row[0] is None:
        return None
    return TimeRange(row[0], row[1])


def newest_trained_run(store: Store) -> str | None:
    """The run with training metrics that started last (None: no run logged any)."""
    rows = store.rows(
        """SELECT run_id FROM runs WHERE run_id IN (SELECT DISTINCT run_id FROM train_metrics)
           ORDER BY start_ts DESC NULLS LAST, run_id DESC LIMIT 1"""
    )
    return rows[0][0] if rows else None


def live_runs(store: Store, tr: TimeRange) -> list[str]:
    """The runs a live view judges at ``tr.end``, newest first: the newest run with training
    metrics, and every other run that logged a step in ``tr``; none that ended by ``tr.end``
    (a finished run's "not training" is not news)."""
    rows = store.rows(
        """WITH trained AS (SELECT DISTINCT run_id FROM train_metrics),
                recent AS (SELECT DISTINCT run_id FROM train_metrics WHERE ts BETWEEN ? AND ?),
                ranked AS (
                  SELECT r.run_id, r.end_ts, r.run_id IN (SELECT run_id FROM recent) AS recent,
                         row_number() OVER (ORDER BY r.start_ts DESC NULLS LAST, r.run_id DESC)
                           AS k
                  FROM runs r WHERE r.run_id IN (SELECT run_id FROM trained))
           SELECT run_id FROM ranked
           WHERE (k = 1 OR recent) AND (end_ts IS NULL OR end_ts > ?) ORDER BY k""",
        [tr.start, tr.end, tr.end],
    )
    return [r[0] for r in rows]


def run_span(store: Store, run_id: str) -> TimeRange | None:
    """From a run's start to its end, widened to its own training metrics; the end is None
    while the run has none recorded (a live run). None when nothing dates the run."""
    (row,) = store.rows(
        """SELECT least(min(r.start_ts), (SELECT min(ts) FROM train_metrics WHERE run_id = ?)),
                  greatest(max(r.end_ts), (SELECT max(ts) FROM train_metrics WHERE run_id = ?)),
                  bool_or(r.end_ts IS NULL)
           FROM runs r WHERE r.run_id = ?""",
        [run_id, run_id, run_id],
    )
    start, end, live = row
    if start is None:
        return None
    return TimeRange(start, None if live or end is None else end)  # type: ignore[arg-type]


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


def fleet_series(store: Store, tr: TimeRange, max_points: int = 1500) -> pd.DataFrame:
    """Fleet rollup rows in the range: ts, gpus, util_avg, temp_avg, temp_max, power_w, ..."""
    level = pick_level(store, tr, max_points)
    if level not in store.rollup_levels():
        return store.df(
            """SELECT ts, count(*) AS nodes, sum(n) AS gpus, sum(util_s) / sum(n) AS util_avg,
                      min(util_min) AS util_min, sum(temp_s) / sum(n) AS temp_avg,
                      max(temp_max) AS temp_max, sum(power_s) AS power_w,
                      sum(fb_s) / sum(n) AS fb_used_avg, sum(clock_s) / sum(n) AS sm_clock_avg,
                      sum(tensor_s) / sum(n) AS tensor_avg,
                      sum(real_s) / nullif(sum(n) FILTER (WHERE real_s IS NOT NULL), 0)
                        AS real_avg, ? AS bucket_s
               FROM node_tick WHERE ts >= ? AND ts <= ? GROUP BY ts ORDER BY ts""",
            [level, tr.start, tr.end],
        )
    return store.df(
        """SELECT ts, nodes, gpus, util_avg, util_min, temp_avg, temp_max, power_w,
                  fb_used_avg, sm_clock_avg, tensor_avg, real_avg, bucket_s
           FROM fleet_rollup WHERE bucket_s = ? AND ts >= ? AND ts <= ? ORDER BY ts""",
        [level, tr.start, tr.end],
    )


class Latest(NamedTuple):
    """The newest GPU sample and scrape round at some time, and whether every exporter was
    down at the end: then no GPU is reporting, whatever the last samples said."""

    sample: datetime | None  # newest GPU sample
    round: datetime | None  # newest scrape round (or sample, for a store without rounds)
    all_down: bool


def now_table(store: Store, at: datetime | None) -> str:
    """Where the GPUs' samples at ``at`` (None: now) are read from: ``gpu_now`` (each GPU's
    newest sample, kept as batches arrive: ``batch_sql.NOW_SQL``) when ``at`` is at or after the
    newest sample, else ``gpu_samples`` (a range that ends in the past)."""
    newest = store.scalar("SELECT max(ts) FROM gpu_now")
    return "gpu_now" if newest is not None and (at is None or at >= newest) else "gpu_samples"


def latest_sample_and_round(store: Store, at: datetime | None = None) -> Latest:
    """:class:`Latest` at or before ``at``, read in one statement (one snapshot: two queries
    would see a round written between them as "all down").

    "All down" means: every target scraped since the newest sample was down in its latest
    scrape. Per target, so that with several ingest daemons one daemon's round of dead
    exporters does not hide the GPUs another daemon still reaches. Only scrape targets count:
    a training job that keeps posting metrics says nothing about the exporters."""
    samples = now_table(store, at)  # a fixed table name, never input
    at = at or datetime.max
    (row,) = store.rows(
        f"""WITH s AS (SELECT max(ts) AS last FROM {samples} WHERE ts <= ?),
                since AS (SELECT arg_max(up, t.ts) AS up FROM targets t, s
                          WHERE t.ts >= s.last AND t.ts <= ? AND {SCRAPED} GROUP BY t.target)
           SELECT (SELECT last FROM s),
                  (SELECT max(ts) FROM targets WHERE ts <= ? AND {SCRAPED}),
                  (SELECT count(*) FROM since), (SELECT bool_or(up) FROM since)""",
        [at, at, at],
    )
    sample, scraped, targets, any_up = row
    rounds = [t for t in (sample, scraped) if t is not None]
    newest = max(rounds) if rounds else None
    all_down = sample is not None and newest != sample and targets > 0 and not any_up
    return Latest(sample, newest, bool(all_down))


# Each GPU's newest sample within one sample interval of the newest sample anywhere: the fleet
# "now". Not the samples stamped with the newest time alone: with several ingest daemons (or a
# round delivered in parts) the newest round holds only part of the fleet, and the Overview
# then read, say, a spare node's idle GPUs as the whole fleet's utilization (0.0 %). Read from
# ``gpu_now`` (one row per GPU, see ``now_table``), else from the samples.
_NOW = {
    "gpu_now": """SELECT * FROM gpu_now
          WHERE ts > CAST(? AS TIMESTAMP) - to_microseconds(?) AND ts <= CAST(? AS TIMESTAMP)""",
    "gpu_samples": """SELECT * FROM gpu_samples
          WHERE ts > CAST(? AS TIMESTAMP) - to_microseconds(?) AND ts <= CAST(? AS TIMESTAMP)
          QUALIFY row_number() OVER (PARTITION BY gpu_id ORDER BY ts DESC) = 1""",
}


def _now_params(store: Store, last: datetime | None) -> list[object]:
    return [last, int(store.sample_interval_s() * 1e6), last]


def fleet_latest(store: Store) -> dict[str, float | int | datetime | None]:
    """The fleet now: GPUs reporting vs expected, health classes (``healthy``: neither
    ``degraded`` nor ``idle``), power, hottest, from each GPU's newest sample within one
    sample interval of the newest (see ``_NOW``). If the newest scrape rounds found every
    exporter down, nobody is reporting: all GPUs are silent (and ``last_sample`` says since
    when), not the values of the last round that answered."""
    last, now, all_down = latest_sample_and_round(store)
    expected = store.scalar("SELECT count(*) FROM gpus")
    if last is None or all_down:  # no GPU samples now (or a store of training jobs alone)
        n = int(expected)
        return {
            "ts": now,
            "last_sample": last,
            "expected": n,
            "reporting": 0,
            "healthy": 0,
            "degraded": 0,
            "idle": 0,
            "failed": n,
        }
    (row,) = store.rows(
        f"""WITH s AS ({_NOW[now_table(store, last)]})
           SELECT count(*), avg(util_pct), sum(power_w), max(temp_c),
                  count(*) FILTER (WHERE temp_c >= ? OR sm_clock_mhz < 0.85 * (
                      SELECT max(sm_clock_mhz) FROM s)
                      AND util_pct > ?),
                  count(*) FILTER (WHERE util_pct < ?)
           FROM s""",
        [*_now_params(store, last), HOT_C, BUSY_PCT, IDLE_PCT],
    )
    reporting, degraded, idle = int(row[0]), int(row[4]), int(row[5])
    return {
        "ts": last,
        "last_sample": last,
        "expected": int(expected),
        "reporting": reporting,
        "healthy": max(reporting - degraded - idle, 0),
        "util_avg": row[1],
        "power_w": row[2],
        "temp_max": row[3],
        "degraded": degraded,
        "idle": idle,
        "failed": int(expected) - reporting,
    }


def hottest_gpus(store: Store, limit: int = 10) -> pd.DataFrame:
    """The hottest GPUs now (each GPU's newest sample, as in ``fleet_latest``); none while
    every exporter is down (the last temperatures seen are not the current ones)."""
    last, _, all_down = latest_sample_and_round(store)
    if all_down:
        last = None  # matches no row: the table shows its empty state
    return store.df(
        f"""WITH s AS ({_NOW[now_table(store, last)]})
           SELECT g.host, g.gpu, round(s.temp_c::DOUBLE, 1) AS temp_c,
                  round(s.util_pct::DOUBLE, 1) AS util_pct,
                  round(s.sm_clock_mhz::DOUBLE) AS sm_clock_mhz,
                  round(s.power_w::DOUBLE, 1) AS power_w
           FROM s JOIN gpus g USING (gpu_id)
           ORDER BY s.temp_c DESC, g.host, g.gpu LIMIT ?""",
        [*_now_params(store, last), int(limit)],
    )


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


def checkpoint_ages(store: Store, run_id: str, now: datetime) -> pd.DataFrame:
    """Per tier: newest successful checkpoint end time, its step, and its age at ``now``."""
    df = store.df(
        """SELECT tier, max(end_ts) AS last_end, arg_max(step, end_ts) AS step, count(*) AS n
           FROM checkpoints WHERE run_id = ? AND status = 'ok' AND end_ts <= ?
           GROUP BY tier""",
        [run_id, now],
    )
    df["age_s"] = [(now - t).total_seconds() for t in df["last_end"]]
    order = {t: i for i, t in enumerate(TIERS)}
    return df.sort_values("tier", key=lambda s: s.map(order)).reset_index(drop=True)
