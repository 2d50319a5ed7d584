"""Scrape-target health: the latest state of every dcgm-exporter target (up, down or stale).

The ``targets`` table grows by one row per target per round (2,048 targets every 15 s is ~640 M
rows over 54 days), so nothing here scans it whole: every query is cut to a window before the
time asked about. The sink appends rounds in time order, so DuckDB's per-row-group min/max of
``ts`` (its zonemaps) skip everything outside the window without an index, and an ART index on
``ts`` would cost every append for nothing. A target scraped within the window is listed; one
not scraped for longer has left the target list.

Sources that are not scraped keep their health here too, one row per thing they watch named
``<source>:<what>`` (``import:/logs/m.jsonl``, ``api:train_metrics``, ``replay:<run>``; see
``telemetry.sources``), so the target view lists them beside the exporters. Scrape targets are
the ``http(s)://`` rows (``SCRAPED``): what says whether the GPUs' exporters answer reads only
those. The replay engine's own row does not make a store one with targets (``has_targets``):
a simulation has nothing to operate.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from telemetry.store import Store

WINDOW_S = 3600.0  # how far back a target's latest scrape is looked for
# SQL conditions on a ``targets`` row (fixed text, no input): a scraped exporter; a simulation.
SCRAPED = "(starts_with(target, 'http://') OR starts_with(target, 'https://'))"
SIMULATED = "starts_with(target, 'replay:')"
STATUS_ORDER = ("down", "stale", "up")  # most urgent first

_HEALTH_SQL = """
WITH recent AS (
  SELECT * FROM targets WHERE ts > ? AND ts <= ?),
latest AS (
  SELECT target, max(ts) AS last_scrape,
    arg_max(up, ts) AS up, arg_max(coalesce(stale, false), ts) AS stale,
    arg_max(duration_s, ts) AS duration_s, arg_max(samples, ts) AS samples,
    arg_max(error, ts) AS error,
    max(ts) FILTER (WHERE up) AS last_up,
    max(ts) FILTER (WHERE up AND NOT coalesce(stale, false)) AS last_fresh,
    min(ts) AS first_seen
  FROM recent GROUP BY target)
SELECT l.target,
  CASE WHEN NOT l.up THEN 'down' WHEN l.stale THEN 'stale' ELSE 'up' END AS status,
  l.last_scrape, l.duration_s, l.samples, l.error,
  -- when the current status began: the first scrape after the last one in a better state
  -- (NULL: it began before the window)
  CASE WHEN l.up AND NOT l.stale THEN NULL
       ELSE (SELECT min(r.ts) FROM recent r
             WHERE r.target = l.target
               AND r.ts > coalesce(CASE WHEN l.up THEN l.last_fresh ELSE l.last_up END,
                                   l.first_seen - INTERVAL 1 SECOND)) END AS since
FROM latest l
"""


def has_targets(store: Store) -> bool:
    """Whether the store holds the health of any scrape target or other real source (an ingest
    store, imported or posted training data; a replay alone has none)."""
    sql = f"SELECT count(*) FROM (SELECT 1 FROM targets WHERE NOT {SIMULATED} LIMIT 1)"
    return store.scalar(sql) > 0


def target_health(store: Store, end: datetime, window_s: float = WINDOW_S) -> pd.DataFrame:
    """Latest health of every target scraped in the ``window_s`` seconds up to ``end``: target,
    status (``down``, ``stale`` or ``up``), last_scrape, duration_s (of the last scrape),
    samples (stored from it), error (why it is down), since (the first scrape of the current
    status within the window; NaT for up targets). Down first, then stale, then up; within a
    status by target."""
    df = store.df(_HEALTH_SQL, [end - timedelta(seconds=window_s), end])
    order = {s: i for i, s in enumerate(STATUS_ORDER)}
    return df.sort_values(
        ["status", "target"], key=lambda c: c.map(order) if c.name == "status" else c
    ).reset_index(drop=True)


IMPORTED = "import:"  # a source that read its files once: it follows nothing


def source_counts(health: pd.DataFrame) -> dict[str, int]:
    """The sources card's counts (#57, 2): ``followed`` sources (scrapes, followed logs,
    posted records, a replay), ``up``, ``down`` and ``stale`` among them, and ``imported``
    files, which were read once: an import is done, not "up" (a logs-only store read
    "Sources 5 / 5 up" beside the Live switch)."""
    imported = health["target"].str.startswith(IMPORTED) if not health.empty else []
    counts = status_counts(health[~imported] if not health.empty else health)
    return counts | {"followed": sum(counts.values()), "imported": int(sum(imported))}


def status_counts(health: pd.DataFrame) -> dict[str, int]:
    """Targets per status (every status present, 0 when none)."""
    counts = health["status"].value_counts() if not health.empty else pd.Series(dtype=int)
    return {s: int(counts.get(s, 0)) for s in STATUS_ORDER}


def report_time(
    store: Store, end: datetime, live: bool, window_s: float = WINDOW_S, imports: bool = True
) -> datetime:
    """When to report target health for a view ending at ``end``: ``end`` itself, or in a live
    view the newest round if it is later (targets keep being scraped, and found down, after the
    last GPU sample arrived). Without ``imports``: the newest round of a source that watches
    the cluster (an import's rows say when it was read, not how the job is now: a log of
    March imported in November is not a job silent since March)."""
    if not live:
        return end
    newest = store.scalar(
        "SELECT max(ts) FROM targets WHERE ts > ? AND (? OR NOT starts_with(target, 'import:'))",
        [end - timedelta(seconds=window_s), imports],
    )
    return max(end, newest) if newest is not None else end


def target_alerts(store: Store, at: datetime, shown: int = 3) -> list[tuple[str, str, str, str]]:
    """(severity, alert, detail, key) for targets down and targets stale at ``at`` ("scrape
    targets", or "sources" when other sources are among them); none for a store without
    targets. ``key`` names the alert for delivery (``telemetry.alerting``)."""
    if not has_targets(store):
        return []
    health = target_health(store, at)
    out = []
    for status, why in (("down", "error"), ("stale", None)):
        bad = health[health["status"] == status]
        if bad.empty:
            continue
        names = [
            f"{_short(r.target)} ({r.error})" if why else _short(r.target)
            for r in bad.head(shown).itertuples()
        ]
        more = f" and {len(bad) - shown} more" if len(bad) > shown else ""
        scraped = bad["target"].str.startswith(("http://", "https://")).all()
        noun = ("scrape target" if scraped else "source") + ("" if len(bad) == 1 else "s")
        detail = ", ".join(names) + more
        if status == "stale":
            detail += ": the same sample values scrape after scrape"
        key = "TargetsDown" if status == "down" else "TargetsStale"
        out.append(("warning", f"{len(bad)} {noun} {status}", detail, key))
    return out


def _short(url: str) -> str:
    """``http://node1:9400/metrics`` -> ``node1:9400`` (the path is the exporter's default)."""
    rest = url.split("://", 1)[-1]
    host, _, path = rest.partition("/")
    return host if path in ("metrics", "") else rest
