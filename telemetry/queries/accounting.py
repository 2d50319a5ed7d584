"""Cluster accounting per UTC day in GPU-hours, as ``sreport cluster utilization`` reports
CPU time: where each day's GPU-hours went.

- ``reported``: the cluster's GPUs x the day's hours (up to ``asof`` for today). A node's GPUs
  are its rows in ``gpus`` (what dcgm-exporter or the replay reported), else what Slurm
  configures (``slurm_nodes.gpus``, ``Gres=gpu:8``), else the most common count of the
  nodes that are known; the nodes are those of ``gpus``, ``slurm_nodes`` and every job's
  host list.
- ``allocated``: each job record's GPUs (``slurm_jobs.gpus``, AllocTRES ``gres/gpu``) x its
  overlap with the day; a job still running counts to its last poll. Each requeue is its own
  allocation. A job without a count: none on a cluster whose accounting counts GPUs (another
  of its jobs has a count: Slurm tracks ``gres/gpu``, so this one had no GPU), else its hosts'
  GPUs (a cluster without ``AccountingStorageTRES=gres/gpu``, or jobs from another source).
  GPUs given beyond a node's count are kept (the accounts add up); idle is then 0.
- ``planned_down``: a node's GPUs x its time in a MAINT reservation (``slurm_reservations``),
  less what jobs held of it then.
- ``down``: a node's GPUs x its time drained, down, failing or not responding
  (``slurm_node_events``: from the event to the node's next event, the last one open until
  ``asof``), outside maintenance, less what jobs still held (a draining node's jobs are
  allocated, not down).
- ``idle``: ``reported - allocated - down - planned_down``, never negative.

All per node and day in SQL (2,048 nodes x 30 days is 61,440 rows), then summed per day;
allocated GPU-hours per day and account, and per day and user, from the same per-node rows,
so the accounts add up to ``allocated``. Every value is a bound parameter; the only text put
into the SQL is chosen here, by which columns an older store has.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd

from telemetry.errors import FactoryFloorError
from telemetry.store import Store

BAD_NODE = "DOWN|DRAIN|FAIL|NOT_RESPONDING"  # a node state whose GPUs cannot be allocated
MAINT_FLAG = "(^|,)MAINT(,|$)"
MAX_DAYS = 366
NO_ACCOUNT = "(none)"
CATEGORIES = ("allocated", "idle", "down", "planned_down")

_SQL = """
WITH days AS (
  SELECT d AS day, least(d + INTERVAL 1 DAY, $3) AS day_end
  FROM generate_series($1, $2 - INTERVAL 1 DAY, INTERVAL 1 DAY) t(d) WHERE d < $3
),
known AS (
  SELECT host, count(*) AS n FROM gpus WHERE host IS NOT NULL GROUP BY host
  UNION ALL
  SELECT host, {node_gpus} FROM slurm_nodes
  WHERE {node_gpus} IS NOT NULL AND host NOT IN (SELECT host FROM gpus WHERE host IS NOT NULL)
),
typical AS (SELECT coalesce(mode(n), 0) AS n FROM known),
job_rows AS (
  SELECT cluster, start_ts AS s, coalesce(end_ts, polled_ts) AS e, hosts, len(hosts) AS k,
         {job_gpus} AS gpus, coalesce({account}, '{no_account}') AS account,
         coalesce(user_name, '{no_account}') AS user_name
  FROM slurm_jobs
  WHERE start_ts IS NOT NULL AND start_ts < $2 AND coalesce(end_ts, polled_ts) > $1
    AND len(hosts) > 0
),
tracked AS (SELECT DISTINCT cluster FROM slurm_jobs WHERE {job_gpus} IS NOT NULL),
hosts AS (
  SELECT host, coalesce(max(k.n), (SELECT n FROM typical)) AS gpus
  FROM (SELECT host FROM known UNION SELECT host FROM slurm_nodes
        UNION SELECT DISTINCT unnest(hosts) FROM job_rows) h
  LEFT JOIN known k USING (host)
  GROUP BY host
),
job_hosts AS (
  SELECT j.s, j.e, j.account, j.user_name, h.host,
         CASE WHEN j.gpus IS NOT NULL THEN j.gpus::DOUBLE / j.k
              WHEN j.cluster IN (SELECT cluster FROM tracked) THEN 0 ELSE h.gpus END AS g
  FROM (SELECT cluster, s, e, gpus, k, account, user_name, unnest(hosts) AS host
        FROM job_rows) j
  JOIN hosts h USING (host)
),
job_days AS (
  SELECT d.day, jh.host, jh.account, jh.user_name,
         jh.g * epoch(least(jh.e, d.day_end) - greatest(jh.s, d.day)) / 3600 AS h
  FROM job_hosts jh JOIN days d ON jh.s < d.day_end AND jh.e > d.day
),
alloc AS (SELECT day, host, sum(h) AS h FROM job_days GROUP BY ALL),
maint AS (
  SELECT unnest(nodes) AS host, start_ts AS s, end_ts AS e FROM {reservations}
  WHERE regexp_matches(coalesce(flags, ''), '{maint}') AND end_ts > $1 AND start_ts < $2
),
planned AS (
  SELECT d.day, m.host, sum(epoch(least(m.e, d.day_end) - greatest(m.s, d.day))) / 3600 AS hrs
  FROM maint m JOIN days d ON m.s < d.day_end AND m.e > d.day GROUP BY ALL
),
events AS (
  SELECT host, ts, state, lead(ts) OVER (PARTITION BY host ORDER BY ts) AS nxt
  FROM slurm_node_events WHERE ts < $2
),
down_days AS (
  SELECT d.day, v.host, greatest(v.ts, d.day) AS a, least(coalesce(v.nxt, $3), d.day_end) AS b
  FROM events v JOIN days d
    ON v.ts < d.day_end AND coalesce(v.nxt, $3) > d.day
  WHERE regexp_matches(v.state, '{bad}') AND NOT regexp_matches(v.state, 'MAINT')
),
down AS (
  SELECT day, host, sum(greatest(epoch(b - a) - cut, 0)) / 3600 AS hrs
  FROM (
    SELECT dd.day, dd.host, dd.a, dd.b,
           coalesce(sum(CASE WHEN m.host IS NOT NULL  -- least/greatest skip a NULL
                             THEN epoch(least(dd.b, m.e) - greatest(dd.a, m.s)) END), 0) AS cut
    FROM down_days dd LEFT JOIN maint m
      ON m.host = dd.host AND m.s < dd.b AND m.e > dd.a
    GROUP BY ALL
  ) GROUP BY ALL
),
node_days AS (
  SELECT d.day, h.host, h.gpus * epoch(d.day_end - d.day) / 3600 AS cap,
         coalesce(a.h, 0) AS alloc,
         h.gpus * coalesce(p.hrs, 0) AS planned_h, h.gpus * coalesce(w.hrs, 0) AS down_h
  FROM days d CROSS JOIN hosts h
  LEFT JOIN alloc a ON a.day = d.day AND a.host = h.host
  LEFT JOIN planned p ON p.day = d.day AND p.host = h.host
  LEFT JOIN down w ON w.day = d.day AND w.host = h.host
),
split AS (
  SELECT day, cap, alloc,
         least(planned_h, greatest(cap - alloc, 0)) AS planned_down,
         least(down_h, greatest(cap - alloc - least(planned_h, greatest(cap - alloc, 0)), 0))
           AS down
  FROM node_days
)
SELECT 'day' AS kind, day, NULL::VARCHAR AS who, sum(cap) AS reported,
       sum(alloc) AS allocated, sum(down) AS down, sum(planned_down) AS planned_down,
       sum(greatest(cap - alloc - planned_down - down, 0)) AS idle
FROM split GROUP BY day
UNION ALL
SELECT 'account', day, account, NULL, sum(h), NULL, NULL, NULL FROM job_days GROUP BY ALL
UNION ALL
SELECT 'user', day, user_name, NULL, sum(h), NULL, NULL, NULL FROM job_days GROUP BY ALL
ORDER BY kind, day, who
"""


@dataclass(frozen=True)
class Accounting:
    """Per day (``days``: day, reported, allocated, idle, down, planned_down GPU-hours) and
    allocated GPU-hours per day and account (``accounts``: day, account, gpu_hours) and per
    day and user (``users``: day, user, gpu_hours)."""

    days: pd.DataFrame
    accounts: pd.DataFrame
    users: pd.DataFrame


def _columns(store: Store) -> set[tuple[str, str]]:
    return {
        (t, c)
        for t, c in store.rows(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE table_name IN "
            "('slurm_jobs', 'slurm_nodes', 'slurm_reservations')"
        )
    }


def _sql(store: Store) -> str:
    have = _columns(store)
    resv = "slurm_reservations" if ("slurm_reservations", "name") in have else (
        "(SELECT NULL::VARCHAR[] AS nodes, NULL::TIMESTAMP AS start_ts, "
        "NULL::TIMESTAMP AS end_ts, NULL::VARCHAR AS flags WHERE false)"
    )  # fmt: skip
    return (
        _SQL.replace("{node_gpus}", "gpus" if ("slurm_nodes", "gpus") in have else "NULL::INT")
        .replace("{job_gpus}", "gpus" if ("slurm_jobs", "gpus") in have else "NULL::INT")
        .replace("{account}", "account" if ("slurm_jobs", "account") in have else "NULL")
        .replace("{reservations}", resv)
        .replace("{no_account}", NO_ACCOUNT)
        .replace("{maint}", MAINT_FLAG)
        .replace("{bad}", BAD_NODE)
    )


def day_range(first: datetime, days: int) -> tuple[datetime, datetime]:
    """``days`` whole UTC days from ``first``'s day; FactoryFloorError for an empty or huge
    range."""
    if not isinstance(days, int) or days < 1 or days > MAX_DAYS:
        raise FactoryFloorError(f"accounting: days must be 1 to {MAX_DAYS}, not {days!r}")
    d0 = datetime(first.year, first.month, first.day)
    return d0, d0 + timedelta(days=days)


def accounting(
    store: Store, first: datetime, days: int = 1, asof: datetime | None = None
) -> Accounting:
    """GPU-hours of ``days`` UTC days from ``first`` (module doc); ``asof`` (default now, UTC)
    ends today, and days after it are left out."""
    d0, d1 = day_range(first, days)
    now = asof or datetime.utcnow()  # noqa: DTZ003 (the store's times are naive UTC)
    df = store.df(_sql(store), [d0, d1, now])
    by = {k: g.drop(columns="kind").reset_index(drop=True) for k, g in df.groupby("kind")}
    cols = ["day", "reported", *CATEGORIES]
    out_days = by.get("day", pd.DataFrame(columns=["day", "who", *cols[1:]]))[cols]
    for c in cols[1:]:
        out_days[c] = out_days[c].astype(float)
    split = {}
    for kind, name in (("account", "account"), ("user", "user")):
        g = by.get(kind, pd.DataFrame(columns=["day", "who", "allocated"]))
        split[kind] = (
            g[["day", "who", "allocated"]]
            .rename(columns={"who": name, "allocated": "gpu_hours"})
            .astype({"gpu_hours": float})
        )
    return Accounting(out_days, split["account"], split["user"])


def newest_day(store: Store) -> datetime | None:
    """The day of the newest Slurm job activity (a start or an end), None without jobs."""
    return store.scalar(
        "SELECT date_trunc('day', max(greatest(start_ts, coalesce(end_ts, start_ts)))) "
        "FROM slurm_jobs WHERE start_ts IS NOT NULL"
    )


SUMMARY_DAYS = 31  # the summary's accounting: at most this many days, ending at the newest


def activity_days(store: Store) -> tuple[datetime, int] | None:
    """The first day and number of days (at most ``SUMMARY_DAYS``, ending at the newest) of
    the store's Slurm activity (job starts and ends, node events); None without any."""
    first, last = store.rows(
        """SELECT min(d), max(d) FROM (
             SELECT start_ts AS d FROM slurm_jobs UNION ALL SELECT end_ts FROM slurm_jobs
             UNION ALL SELECT ts FROM slurm_node_events)"""
    )[0]
    if first is None:
        return None
    now = datetime.utcnow()  # noqa: DTZ003 (naive UTC like the store)
    last = min(last, now)
    first = max(first, last - timedelta(days=SUMMARY_DAYS - 1))
    d0 = datetime(first.year, first.month, first.day)
    return d0, (datetime(last.year, last.month, last.day) - d0).days + 1


def summary_block(store: Store, gpu_hour_usd: float) -> list[dict[str, object]]:
    """``summary --json``'s ``accounting``: per day ``day``, ``reported``, ``allocated``,
    ``idle``, ``down``, ``planned_down`` GPU-hours, ``accounts`` {account: allocated GPU-hours},
    ``users`` likewise, and ``usd`` of each category at ``gpu_hour_usd``."""
    span = activity_days(store)
    if span is None:
        return []
    a = accounting(store, span[0], span[1])
    out: list[dict[str, object]] = []
    for r in a.days.itertuples(index=False):
        day = r.day
        hours = {c: round(float(getattr(r, c)), 2) for c in ("reported", *CATEGORIES)}
        out.append({
            "day": day.strftime("%Y-%m-%d"), **hours,
            "accounts": _split(a.accounts, "account", day),
            "users": _split(a.users, "user", day),
            "usd": {c: round(v * gpu_hour_usd, 2) for c, v in hours.items()},
        })  # fmt: skip
    return out


def _split(df: pd.DataFrame, col: str, day: datetime) -> dict[str, float]:
    rows = df[df["day"] == day].sort_values("gpu_hours", ascending=False)
    return {str(k): round(float(v), 2) for k, v in zip(rows[col], rows["gpu_hours"], strict=True)}
