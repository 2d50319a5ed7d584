"""The slowest ranks of a run, from the per-rank timing reports its logs printed (``rank_perf``,
read by ``collect.logs.rankperf``), chronic or one-off, each with its host and what its GPUs
did meanwhile.

- **A rank's score in a report window** (one report: its time) is the worst of its headline
  scores there (``HEADLINE``): NVRx's relative GPU score (vs the best rank), Megatron's
  compute timers (median rank / this rank). Megatron's ``forward-backward`` includes the
  waits in collectives, so a slow rank hides in it (the fast ranks wait for it); the compute
  timers, where logged (timing level 2), show it. A window of the rank's source that does not
  list it counts as 1.0: NVRx prints only the worst and best few ranks, and an unlisted rank was
  not among the slowest.
- **Flagged**: a window where its score is below ``SLOW_SCORE`` (0.9: 10 % slower than the
  reference rank), or an NVRx ``STRAGGLER DETECTION WARNING`` named it.
- **Chronic**: the EWMA of its scores over its source's windows in time order (alpha
  ``EWMA_ALPHA`` = 0.3: the newest window weighs 0.3, the one before 0.21, ...; it starts at
  the first window's score) is below ``SLOW_SCORE``. **One-off**: flagged in a single window
  only. Otherwise **intermittent** (flagged more than once, but recovering). A rank named only
  by warnings (no scores printed) has no EWMA: chronic when warned in more than one window.
- **Spread** (``rank_spread``): where only the spread over the ranks was logged (NVIDIA's
  Lightning straggler callback's ``gpu_relative_perf/min|median|max`` metrics, run-level rows
  with no rank: ``collect.logs.ptlperf``), each score's newest min, median and max, its lowest
  min and the windows whose min was below ``SLOW_SCORE``: a slow rank was there, unnamed.
- **GPU note**: the rank's host's GPUs in the hours around its newest flagged window
  (``GPU_LOOKBACK``), from the per-GPU 5-minute rollup (never the raw samples: a store can hold
  256 M), against the fleet in the same buckets: the GPU with the lowest SM clock while busy,
  said to be throttled when hot (the outlier table's ``THROTTLE_*`` rules).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from telemetry.collect.logs.ptlperf import NVRX_PTL, STATS
from telemetry.collect.logs.rankperf import GPU_INDIVIDUAL, GPU_RELATIVE, WARNED
from telemetry.queries import TimeRange
from telemetry.queries.outliers import STRAGGLER_RATIO, THROTTLE_RATIO, THROTTLE_TEMP_C
from telemetry.store import Store
from telemetry.store.rollups import gpu_table
from telemetry.vocabulary import HOT_C

HEADLINE = (GPU_RELATIVE, "forward-compute", "backward-compute", "forward-backward")
SLOW_SCORE = 0.9  # below this relative performance a rank is slow in a window
EWMA_ALPHA = 0.3  # weight of the newest window in a rank's running score
MAX_RANKS = 10  # slowest ranks listed
GPU_LOOKBACK = timedelta(hours=6)  # GPU buckets read before a rank's newest flagged window
GPU_AFTER = timedelta(hours=1)  # ... and after it
GPU_LEVEL_S = 300  # the per-GPU rollup level read

_RANKS_SQL = """WITH r AS (
  SELECT ts, rank, host, source, metric, score FROM rank_perf
  WHERE run_id = ? AND rank IS NOT NULL AND ts BETWEEN ? AND ?),
s AS (SELECT source, ts, rank, min(score) AS score FROM r
      WHERE score IS NOT NULL AND list_contains(?::VARCHAR[], metric) GROUP BY ALL),
win AS (SELECT DISTINCT source, ts FROM s),
grid AS (
  SELECT k.source, k.rank, win.ts, coalesce(s.score, 1.0) AS score, s.score IS NOT NULL AS listed
  FROM (SELECT DISTINCT source, rank FROM s) k JOIN win USING (source)
  LEFT JOIN s USING (source, rank, ts)),
n AS (SELECT *, row_number() OVER w - 1 AS i, count(*) OVER (PARTITION BY source, rank) - 1 AS k
      FROM grid WINDOW w AS (PARTITION BY source, rank ORDER BY ts)),
e AS (
  SELECT source, rank,
         sum(score * CASE WHEN i = 0 THEN pow(1 - ?, k) ELSE ? * pow(1 - ?, k - i) END) AS ewma,
         arg_max(score, ts) FILTER (WHERE listed) AS score, min(score) AS worst, count(*) AS seen,
         list(ts) FILTER (WHERE score < ?) AS slow_ts
  FROM n GROUP BY ALL),
w AS (SELECT source, rank, list(DISTINCT ts) AS warned_ts FROM r
      WHERE list_contains(?::VARCHAR[], metric) GROUP BY ALL),
h AS (SELECT rank, arg_max(host, ts) AS host FROM r WHERE host IS NOT NULL GROUP BY rank)
SELECT source, rank, e.ewma, e.score, e.worst, coalesce(e.seen, 0) AS seen,
       list_distinct(list_concat(coalesce(e.slow_ts, []), coalesce(w.warned_ts, []))) AS flagged,
       h.host
FROM e FULL JOIN w USING (source, rank) LEFT JOIN h USING (rank)
WHERE len(coalesce(e.slow_ts, [])) + len(coalesce(w.warned_ts, [])) > 0"""


def has_reports(store: Store) -> bool:
    """Whether the store has the table (a store from before it, served read-only, has not)."""
    return store.has_table("rank_perf")


def report_windows(store: Store, run_id: str, window: TimeRange) -> int:
    """How many per-rank timing reports (distinct report times) the run's logs printed in
    ``window``: 0 says no log of it printed one (nothing could name a slow rank)."""
    if not has_reports(store):
        return 0
    return int(
        store.scalar(
            "SELECT count(DISTINCT ts) FROM rank_perf WHERE run_id = ? AND ts BETWEEN ? AND ?",
            [run_id, window.start, window.end],
        )
    )


# reports of one time (a file without times) merge: the lowest min, median median, highest max
_SPREAD_SQL = """SELECT metric, ts,
  CASE WHEN metric LIKE '%/max' THEN max(score) WHEN metric LIKE '%/median' THEN median(score)
       ELSE min(score) END
FROM rank_perf
WHERE run_id = ? AND rank IS NULL AND source = ? AND ts BETWEEN ? AND ? AND score IS NOT NULL
GROUP BY metric, ts ORDER BY ts, metric"""


def rank_spread(store: Store, run_id: str, window: TimeRange) -> list[dict[str, Any]]:
    """The spread over the ranks of each GPU score the run logged as metrics in ``window``
    (``ptlperf``): dicts of ``metric`` (``gpu_relative_perf``, ``gpu_individual_perf``),
    ``windows`` (report times), ``min``, ``median``, ``max`` (the newest report's, None where it
    logged not that one), ``at`` (its ISO time), ``worst_min`` and ``worst_at`` (the lowest min
    and when), ``slow_windows`` (reports whose min was below ``SLOW_SCORE``). Reports of one
    time count as one (the lowest min, the highest max). Empty without."""
    if not has_reports(store):
        return []
    rows = store.rows(_SPREAD_SQL, [run_id, NVRX_PTL, window.start, window.end])
    by: dict[str, dict[datetime, dict[str, float]]] = {}
    for metric, ts, score in rows:
        name, _, stat = metric.partition("/")
        if stat in STATS:
            by.setdefault(name, {}).setdefault(ts, {})[stat] = score
    out = []
    for name in (GPU_RELATIVE, GPU_INDIVIDUAL):
        reports = by.get(name)
        if not reports:
            continue
        at = max(reports)
        mins = [(v["min"], ts) for ts, v in reports.items() if "min" in v]
        worst = min(mins, default=(None, None))
        entry: dict[str, Any] = {"metric": name, "windows": len(reports)}
        entry |= {s: _round(reports[at].get(s)) for s in STATS}
        entry["at"] = at.isoformat()
        entry["worst_min"] = _round(worst[0])
        entry["worst_at"] = worst[1].isoformat() if worst[1] else None
        entry["slow_windows"] = sum(1 for m, _ in mins if m < SLOW_SCORE)
        out.append(entry)
    return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def slow_ranks(
    store: Store, run_id: str, window: TimeRange, limit: int = MAX_RANKS
) -> list[dict[str, Any]]:
    """The run's slow ranks in ``window``, worst (lowest EWMA) first, at most ``limit``: dicts
    of ``rank``, ``host`` (the report's, else ``rank_hosts``'/the Slurm node list's, else
    None), ``score`` (its newest listed score; None if only warned), ``worst`` (its lowest),
    ``ewma``, ``windows`` (report windows it was flagged in), ``seen`` (its source's windows),
    ``chronic``,
    ``pattern`` (chronic, intermittent, one-off), ``source``, ``last_flagged`` (ISO time) and
    ``gpu_note`` (None when its host's GPUs are unknown or unremarkable). Empty without
    reports."""
    if not has_reports(store):
        return []
    a, warned = EWMA_ALPHA, list(WARNED.values())
    rows = store.rows(
        _RANKS_SQL,
        [run_id, window.start, window.end, list(HEADLINE), a, a, a, SLOW_SCORE, warned],
    )
    by_rank: dict[int, dict[str, Any]] = {}
    for source, rank, ewma, score, worst, seen, flagged, host in rows:
        entry = _entry(int(rank), source, ewma, (score, worst), int(seen), sorted(flagged), host)
        have = by_rank.get(entry["rank"])
        if have is None or _order(entry) < _order(have):  # two sources: the worse says it
            by_rank[entry["rank"]] = entry
    out = sorted(by_rank.values(), key=_order)[:limit]
    _fill_hosts(store, run_id, out)
    for e in out:
        e["gpu_note"] = gpu_note(store, e["host"], e.pop("_newest")) if e["host"] else None
    return out


def _entry(rank: int, source: str, ewma: float | None, scores: tuple[float | None, float | None],
           seen: int, flagged: list[datetime], host: str | None) -> dict[str, Any]:  # fmt: skip
    n = len(flagged)
    score, worst = (None if v is None else round(v, 3) for v in scores)
    chronic = ewma < SLOW_SCORE if ewma is not None else n > 1
    pattern = "chronic" if chronic else "one-off" if n == 1 else "intermittent"
    return {
        "rank": rank, "host": host, "score": score, "worst": worst,
        "ewma": None if ewma is None else round(ewma, 3), "windows": n, "seen": seen,
        "chronic": bool(chronic), "pattern": pattern, "source": source,
        "last_flagged": flagged[-1].isoformat(), "_newest": flagged[-1],
    }  # fmt: skip


def _order(e: dict[str, Any]) -> tuple[float, float, int]:
    ewma = e["ewma"] if e["ewma"] is not None else SLOW_SCORE
    return ewma, e["score"] if e["score"] is not None else 1.0, e["rank"]


def _fill_hosts(store: Store, run_id: str, entries: list[dict[str, Any]]) -> None:
    from telemetry.store.ranks import rank_hosts

    missing = [e["rank"] for e in entries if not e["host"]]
    if not missing:
        return
    hosts = rank_hosts(store, run_id, missing)
    for e in entries:
        e["host"] = e["host"] or hosts.get(e["rank"])


_GPU_SQL = """WITH b AS (
  SELECT ts, gpu_id, busy_clock, busy_temp, temp_max FROM {table}
  WHERE ts BETWEEN ? AND ? AND busy_n > 0),
fleet AS (SELECT ts, median(busy_clock) AS ref FROM b GROUP BY ts),
mine AS (SELECT g.gpu, avg(b.busy_clock) AS clock, avg(f.ref) AS ref, avg(b.busy_temp) AS temp,
                max(b.temp_max) AS peak
         FROM b JOIN fleet f USING (ts) JOIN gpus g USING (gpu_id)
         WHERE g.host = ? GROUP BY g.gpu)
SELECT gpu, clock, ref, temp, peak FROM mine ORDER BY clock / ref, gpu LIMIT 1"""


def gpu_note(store: Store, host: str, at: datetime) -> str | None:
    """What ``host``'s GPUs did around ``at`` (``GPU_LOOKBACK`` before to ``GPU_AFTER``
    after), in words, when one lagged the fleet's SM clock while busy or ran hot: its slowest
    GPU's busy SM clock against the fleet median's, and its temperature; None when the store
    has no busy buckets of the host then or nothing stands out."""
    table = gpu_table(GPU_LEVEL_S)
    got = store.rows(_GPU_SQL.format(table=table), [at - GPU_LOOKBACK, at + GPU_AFTER, host])
    if not got:
        return None
    gpu, clock, ref, temp, peak = got[0]
    if clock is None or not ref:
        return None
    ratio = clock / ref
    warm = temp is not None and temp >= THROTTLE_TEMP_C or peak is not None and peak >= HOT_C
    what = (
        "throttled" if ratio < THROTTLE_RATIO and warm
        else "slow clock" if ratio < STRAGGLER_RATIO
        else "hot" if peak is not None and peak >= HOT_C
        else None
    )  # fmt: skip
    if what is None:
        return None
    heat = f", {temp:.0f} °C busy (peak {peak:.0f} °C)" if temp is not None and peak else ""
    return (
        f"{host} GPU {gpu}: SM clock {clock:,.0f} MHz vs fleet {ref:,.0f} while busy{heat} "
        f"({what})"
    )
