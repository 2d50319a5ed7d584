"""Rollups: per-node and fleet aggregates by time bucket, kept current as samples arrive.

Every batch of GPU samples is reduced, while it is in memory, to per-(tick, node) partial sums
(``node_tick``, see ``NODE_TICK_SQL``); node and fleet rollups at 1 min, 5 min, 1 h and 6 h
are built from those, each level from the one below it. A chart then asks for a time range and
a point budget and reads the finest level that fits, so a 10-minute range and a 54-day range
cost the same. Apart from ``telemetry.store`` because how aggregates are kept is its own
concern; the store only calls ``refresh`` under its write lock.

Per GPU, ``gpu_rollup`` keeps 5 min, 1 h and 6 h buckets of the drill-down's columns (and
complete days, ``keep_days``), in the same transaction and under the same watermark as the
node level of that size: one node's GPUs over a day read 288 rows per GPU instead of every
raw sample of the fleet in that day (5.9 M at 16,384 GPUs and 15 s), "GPUs under 80 % per
hour" reads one row per GPU-hour, and both outlive the raw samples when ``--raw-retention``
drops them. A replay hands over the per-GPU rows of the buckets its windows hold whole
(``telemetry.replay.partials``): a refresh keeps a bucket whose rows count exactly the samples
beneath it and builds the others (``_stale``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import duckdb

from telemetry.store.cellflags import set_flags
from telemetry.store.connection import rollback
from telemetry.utilization import CLASS_SQL, NVLINK_BUCKET_SQL, REAL_SQL
from telemetry.vocabulary import BUSY_PCT, HOT_C, IDLE_PCT

# Rollup levels in seconds; a store keeps those at or above its sample interval.
ROLLUP_LEVELS_S: tuple[int, ...] = (60, 300, 3600, 21600)
# Per-GPU levels (``gpu_rollup``), a subset of the above. The 6-hour one serves statistics
# over long ranges of a large fleet (the outlier table over a 54-day run of 16,384 GPUs reads
# 3.6 M six-hour rows where the hourly level holds 21 M: candidates' GPUs are scattered over
# the fleet, so every bucket of the range is scanned whatever few GPUs are asked for).
GPU_LEVELS_S: tuple[int, ...] = (300, 3600, 21600)
# Per-GPU days (``gpu_rollup`` rows of ``DAY_S``), kept for complete days only, from their
# 6-hour buckets: statistics over weeks read those (0.9 M rows for 54 days of 16,512 GPUs,
# ~20 ms, where the 6-hour level's 3.6 M took ~50) and the 6-hour buckets of the day still
# filling, from ``DAY_MARK`` (the first day not kept) on. A day is built once, when the data
# passes its end, so a scrape round does not rebuild the day it falls in (that cost ~48 ms a
# round at 16,384 GPUs); a late round rebuilds its own day.
DAY_S, DAY_FROM = 86400, 21600
DAY_MARK = "gpu_day_mark"
# Each per-GPU level is a table of its own (``gpu_table``), and ``gpu_rollup`` the view of
# them all (``bucket_s = ?`` picks a level). In one table the levels' rows shared every row
# group (a replay window hands over its hours and 6-hour buckets together), so reading the
# 3.6 M six-hour rows of a 54-day run scanned the filters of all 25.9 M: the outlier table's
# per-GPU statistics 47 ms, 25 on its own level; the drill-down's node series 27, 15. The
# queries of one level name its table: a join over the view's UNION ALL is planned without
# the statistics that make the join with ``gpus`` direct. Writers report the view and the
# tables (``GPU_TABLES``, ``telemetry.store.versions``), so results read through either are renewed.
GPU_VIEW = "gpu_rollup"
GPU_TABLE_LEVELS: tuple[int, ...] = (*GPU_LEVELS_S, DAY_S)


def gpu_table(level: int) -> str:
    """The table of the per-GPU level ``level`` (seconds; one of ``GPU_TABLE_LEVELS``, so
    never a name from input)."""
    if level not in GPU_TABLE_LEVELS:
        raise ValueError(f"no per-GPU rollup level of {level} s")
    return f"{GPU_VIEW}_{level}"


# The per-GPU rollup under each name a query may use (the view and its tables).
GPU_TABLES = (GPU_VIEW, *map(gpu_table, GPU_TABLE_LEVELS))
# What a refresh writes (``Store`` keeps cached results of other tables across it).
TABLES = ("node_rollup", "fleet_rollup", *GPU_TABLES, "class_rollup", "meta")

# The columns a per-GPU bucket keeps: (rollup column, gpu_samples column), averaged...
GPU_AVG = (
    ("util_avg", "util_pct"),
    ("temp_avg", "temp_c"),
    ("power_w", "power_w"),
    ("sm_clock_avg", "sm_clock_mhz"),
    ("fb_used_avg", "fb_used_mib"),
    ("mem_temp_avg", "mem_temp_c"),
    ("tensor_avg", "tensor_active"),
    ("sm_active_avg", "sm_active"),
    ("sm_occupancy_avg", "sm_occupancy"),
    ("dram_avg", "dram_active"),
    ("real_avg", "_real"),  # REAL_SQL, computed once per sample (see _RAW)
)
# ... and the maxima: (rollup column, gpu_samples column). The energy counter only grows (until
# a driver reload resets it), so its maximum is the bucket's last reading: the energy a GPU used
# between two buckets is the difference (``queries.energy``).
GPU_MAX = (("temp_max", "temp_c"), ("xid_last", "xid_last"), ("energy_mj_max", "energy_mj"))
GPU_MIN = (("energy_mj_min", "energy_mj"),)  # the bucket's first reading (see above)
# What the outlier table counts per sample, kept per bucket so long ranges get the same
# figures as raw samples give: samples hot, idle and busy (by real utilization where the GPU
# reports it), and the SM clock and temperature while busy (averaged over the busy samples).
GPU_COUNT = (("hot_n", "_hot"), ("idle_n", "_idle"), ("busy_n", "_busy"))
GPU_BUSY_AVG = (("busy_clock", "sm_clock_mhz"), ("busy_temp", "temp_c"))
# Raw samples with what the buckets judge computed once per sample (flags summed as integers:
# cheaper than a FILTER per count over 256 M samples).
_EFFECTIVE = "coalesce(_real, util_pct)"
_RAW = f"""(SELECT *, ({_EFFECTIVE} >= {BUSY_PCT})::INT AS _busy,
    ({_EFFECTIVE} < {IDLE_PCT})::INT AS _idle, (temp_c >= {HOT_C})::INT AS _hot
  FROM (SELECT *, {REAL_SQL} AS _real FROM gpu_samples))"""
# Link traffic per bucket (averaged like GPU_AVG from the level below). From raw samples it is
# a separate UPDATE over only the samples that report a link field: a replay reports none, and
# two more aggregates over every sample cost a 54-day backfill some 18 s for NULLs.
GPU_LINK = ("pcie_bps", "nvlink_bps")
LINK_SQL = f"""UPDATE {{table}} AS g SET pcie_bps = x.pcie, nvlink_bps = x.nv
FROM (SELECT time_bucket(to_seconds(?), ts) AS b, gpu_id, avg(pcie_rx_bps + pcie_tx_bps) AS pcie,
        {NVLINK_BUCKET_SQL} AS nv
      FROM gpu_samples WHERE ts >= ? AND ts <= ?
        AND (nvlink_bytes IS NOT NULL OR pcie_rx_bps IS NOT NULL OR pcie_tx_bps IS NOT NULL)
      GROUP BY ALL) x
WHERE g.gpu_id = x.gpu_id AND g.ts = x.b"""

# The energy a GPU used in each bucket (``energy_mj_used``), kept as the buckets are built so
# a run's energy is a plain sum (a query-time window over every GPU-hour of a 54-day run took
# 2.4 s): from the previous bucket's last reading to this one's when the previous bucket is
# the adjacent one and the counter did not drop; else (a GPU's first bucket, one after a gap,
# or a driver reload that restarted the counter) from this bucket's first reading to its last.
ENERGY_LEVEL_S = 3600  # the per-GPU level that keeps it (``queries.energy`` reads hours)
ENERGY_USED_SQL = f"""UPDATE {gpu_table(ENERGY_LEVEL_S)} AS g SET energy_mj_used =
  CASE WHEN p.prev IS NOT NULL AND g.energy_mj_max >= p.prev THEN g.energy_mj_max - p.prev
       ELSE g.energy_mj_max - g.energy_mj_min END
FROM (SELECT gpu_id, ts,
        CASE WHEN lag(ts) OVER w = ts - to_seconds(?) THEN lag(energy_mj_max) OVER w END AS prev
      FROM {gpu_table(ENERGY_LEVEL_S)} WHERE ts >= ?::TIMESTAMP - to_seconds(?)
        AND ts <= ?::TIMESTAMP + to_seconds(?)
      WINDOW w AS (PARTITION BY gpu_id ORDER BY ts)) p
WHERE g.gpu_id = p.gpu_id AND g.ts = p.ts AND g.ts >= ?
  AND g.ts <= ?::TIMESTAMP + to_seconds(?)"""


# The fleet's hours: their GPU-hours, those with an energy, and its sum (``queries.energy``
# reads a run's hours here: 1,296 rows for 54 days instead of 21 M GPU-hours).
FLEET_ENERGY_SQL = f"""UPDATE fleet_rollup AS f
SET gpu_hours = e.n, energy_gpu_hours = e.counted, energy_mj_used = e.mj
FROM (SELECT ts, count(*) AS n, count(energy_mj_used) AS counted, sum(energy_mj_used) AS mj
      FROM {gpu_table(ENERGY_LEVEL_S)} WHERE ts >= ? AND ts <= ?::TIMESTAMP + to_seconds(?)
      GROUP BY ts) e
WHERE f.bucket_s = ? AND f.ts = e.ts"""


def fill_energy_used(con: duckdb.DuckDBPyConnection, since: object, until: object) -> None:
    """``energy_mj_used`` of the per-GPU hours (``ENERGY_LEVEL_S``) in [since, until] and of
    the hour after (its energy starts from the last reading of an hour that may have just been
    rebuilt by a late round); see ``ENERGY_USED_SQL``; and the fleet's sums of those hours
    (``FLEET_ENERGY_SQL``). The caller holds the write lock."""
    h = ENERGY_LEVEL_S
    con.execute(ENERGY_USED_SQL, [h, since, h, until, h, since, until, h])
    fill_fleet_energy(con, since, until)


def fill_fleet_energy(con: duckdb.DuckDBPyConnection, since: object, until: object) -> None:
    """The fleet's sums (``FLEET_ENERGY_SQL``) of the per-GPU hours in [since, until] and of
    the hour after. The caller holds the write lock."""
    con.execute(FLEET_ENERGY_SQL, [since, until, ENERGY_LEVEL_S, ENERGY_LEVEL_S])


def levels_for(interval_s: float) -> list[int]:
    """Bucket sizes kept in the rollup tables: those coarser than the sample interval (at
    the sample interval itself, ``node_tick`` already is the per-node series)."""
    return [lv for lv in ROLLUP_LEVELS_S if lv > interval_s] or [ROLLUP_LEVELS_S[-1]]


def gpu_levels_for(interval_s: float) -> list[int]:
    """Per-GPU bucket sizes kept in ``gpu_rollup``: those coarser than the sample interval."""
    return [lv for lv in GPU_LEVELS_S if lv > interval_s]


def refresh(
    con: duckdb.DuckDBPyConnection,
    levels: list[int],
    until: datetime | None = None,
    since: datetime | None = None,
    gpu_levels: list[int] | None = None,
    handed_over: bool = False,
    lazy: bool = False,
) -> None:
    """Recompute node and fleet rollups of ``levels`` (and per-GPU ones of ``gpu_levels``)
    from the last complete bucket of each level on; see ``Store.refresh_rollups``. With
    ``handed_over`` (a batch since the last refresh brought whole per-GPU buckets), per-GPU
    buckets whose rows count their samples are kept (``_stale``); without, every per-GPU
    bucket in the range is built again, as a scrape's refresh needs. ``lazy`` builds the
    coarser per-GPU levels only when a bucket of the finest has closed since their last build
    (``_due``). The caller holds the write lock."""
    gpu_levels = gpu_levels or []
    newest = con.execute("SELECT max(ts) FROM node_tick").fetchone()[0]
    if newest is None:
        return
    until = newest if until is None else max(until, newest)
    marks = dict(con.execute("SELECT key, value FROM meta").fetchall())
    prev: int | None = None
    prev_gpu: int | None = None
    for level in levels:
        key = f"rollup_watermark_{level}"
        mark = marks.get(key, "1970-01-01 00:00:00")
        ranges: list[tuple[str, datetime]] = [(mark, until)]
        if since is not None:
            floor = con.execute(
                "SELECT time_bucket(to_seconds(?), ?::TIMESTAMP)", [level, since]
            ).fetchone()[0]
            if str(floor) < mark:  # late data: only its own bucket is rebuilt
                end = floor + timedelta(seconds=level) - timedelta(microseconds=1)
                ranges.insert(0, (str(floor), end))
        built = f"gpu_built_{level}"
        con.begin()
        try:
            for i, (lo, hi) in enumerate(ranges):
                _rollup_level(con, level, prev, lo, hi)
                if level not in gpu_levels:
                    continue
                current = i == len(ranges) - 1  # up to now, not a late round's own bucket
                if lazy and prev_gpu is not None and current:
                    if not _due(marks.get(built), until, gpu_levels[0]):
                        if level == ENERGY_LEVEL_S:  # the fleet's hours were just rebuilt
                            fill_fleet_energy(con, lo, hi)
                        continue
                _gpu_level(con, level, prev_gpu, lo, hi, handed_over)
                if prev_gpu is not None and current:
                    con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [built, str(until)])
            new_mark = con.execute(
                "SELECT time_bucket(to_seconds(?), ?::TIMESTAMP)", [level, until]
            ).fetchone()[0]
            con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, str(new_mark)])
            con.commit()
        except BaseException:
            rollback(con)
            raise
        prev = level
        if level in gpu_levels:
            prev_gpu = level
    # lazy or not, the round that passes a day's end (a 5-minute boundary) has just built the
    # day's last 6 hours above
    if DAY_FROM in gpu_levels:
        con.begin()
        try:
            keep_days(con, until, since)
            con.commit()
        except BaseException:
            rollback(con)
            raise


def _due(built: str | None, until: datetime, finest_s: int) -> bool:
    """Whether a coarser per-GPU level last built with data up to ``built`` (None: never) is
    due again with data up to ``until``: a bucket of the finest per-GPU level has closed in
    between. Between closings a scrape's refresh leaves those levels' newest bucket as it was
    (a round of 2,048 nodes spent ~0.13 s of its ~0.7 s rebuilding the hour and the 6 hours
    each round and checkpointing what that churned); every level divides a day, so buckets
    line up with the epoch's."""
    if built is None:
        return True
    span = timedelta(seconds=finest_s)
    epoch = datetime(1970, 1, 1)
    return (datetime.fromisoformat(built) - epoch) // span != (until - epoch) // span


def keep_days(con: duckdb.DuckDBPyConnection, newest: datetime, since: object = None) -> None:
    """Build the per-GPU days (``DAY_S``) that ``newest`` (the newest sample) has passed the
    end of and that are not kept yet, and the day of ``since`` (the oldest time just written)
    when that one was kept already; then move ``DAY_MARK`` to the day still filling. From the
    6-hour buckets, which the refresh has brought up to ``newest`` first. The caller holds
    the write lock, in a transaction."""
    row = con.execute("SELECT value FROM meta WHERE key = ?", [DAY_MARK]).fetchone()
    filling = con.execute(
        "SELECT time_bucket(to_seconds(?), ?::TIMESTAMP)", [DAY_S, newest]
    ).fetchone()[0]
    if row is not None:
        mark = datetime.fromisoformat(row[0])
    else:  # the first day with 6-hour buckets
        mark = con.execute(
            f"SELECT time_bucket(to_seconds(?), min(ts)) FROM {gpu_table(DAY_FROM)}", [DAY_S]
        ).fetchone()[0]
        if mark is None:
            return
    day, tick = timedelta(seconds=DAY_S), timedelta(microseconds=1)
    if since is not None:
        late = con.execute(
            "SELECT time_bucket(to_seconds(?), ?::TIMESTAMP)", [DAY_S, since]
        ).fetchone()[0]
        if late < mark:
            _build_gpu_level(con, DAY_S, DAY_FROM, late, late + day - tick)
    if mark < filling:
        _build_gpu_level(con, DAY_S, DAY_FROM, mark, filling - tick)
    if row is None or mark < filling:
        kept = str(max(mark, filling))
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [DAY_MARK, kept])


def add_gpu_level(con: duckdb.DuckDBPyConnection, level: int, prev: int) -> None:
    """Every per-GPU bucket of ``level`` from those of ``prev``, for a store that had ``prev``
    before it kept ``level`` (the refresh builds a level only from its watermark on). Does
    nothing when the store has no ``prev`` bucket or already has ``level``'s. The caller holds
    the write lock."""

    def has(lv: int) -> bool:
        row = con.execute(f"SELECT count(*) FROM (FROM {gpu_table(lv)} LIMIT 1)").fetchone()
        return bool(row[0])

    if has(level) or not has(prev):
        return
    _gpu_level(con, level, prev, "1970-01-01 00:00:00", datetime(9999, 12, 31))


def _weighted(column: str, weight: str = "samples") -> str:
    """A coarser bucket's mean of ``column`` from the finer buckets that had it, each weighted
    by its ``weight`` (its samples, or its busy samples)."""
    return (
        f"sum({column} * {weight}) / nullif(sum({weight}) FILTER (WHERE {column} IS NOT NULL), 0)"
    )


def _gpu_level(
    con: duckdb.DuckDBPyConnection,
    level: int,
    prev: int | None,
    since: str,
    until: datetime,
    handed_over: bool = False,
) -> None:
    """Per-GPU buckets of ``level`` in [since, until]: from raw samples for the finest level,
    else from the level below, averages weighted by each bucket's sample count per column; and
    their workload classes counted (``class_rollup``). Buckets whose rows already account for
    every sample beneath them are kept (``_stale``) when buckets were ``handed_over``: a
    replay's whole buckets, and buckets no sample joined since they were built."""
    stale = _stale(con, level, prev, since, until) if handed_over else [(since, until)]
    for lo, hi in stale:
        _build_gpu_level(con, level, prev, lo, hi)
    if prev is None:
        con.execute(LINK_SQL.format(table=gpu_table(level)), [level, since, until])
    if level == ENERGY_LEVEL_S:
        fill_energy_used(con, since, until)
    con.execute(
        "DELETE FROM class_rollup WHERE bucket_s = ? AND ts >= ? AND ts <= ?",
        [level, since, until],
    )
    where = "WHERE bucket_s = ? AND ts >= ? AND ts <= ?"
    con.execute(CLASS_SQL.format(where=where), [level, since, until])


def _stale(
    con: duckdb.DuckDBPyConnection, level: int, prev: int | None, since: Any, until: Any
) -> list[tuple[Any, Any]]:
    """The buckets of ``level`` in [since, until] to build again, as ranges of whole buckets:
    those whose per-GPU rows do not count exactly the samples beneath them (raw samples, or
    the level below). Samples are only ever appended, and a bucket's rows are built from all of
    its samples, so equal counts mean the same samples: a bucket a scrape also wrote into,
    or one still filling, is rebuilt."""
    have = dict(
        con.execute(
            f"SELECT ts, sum(samples) FROM {gpu_table(level)} WHERE ts >= ? AND ts <= ? "
            "GROUP BY ts",
            [since, until],
        ).fetchall()
    )
    if prev is None:
        below = con.execute(
            "SELECT time_bucket(to_seconds(?), ts) AS b, count(*) FROM gpu_samples "
            "WHERE ts >= ? AND ts <= ? GROUP BY b",
            [level, since, until],
        ).fetchall()
    else:
        below = con.execute(
            f"SELECT time_bucket(to_seconds(?), ts) AS b, sum(samples) FROM {gpu_table(prev)} "
            "WHERE ts >= ? AND ts <= ? GROUP BY b",
            [level, since, until],
        ).fetchall()
    counts = dict(below)
    stale = sorted({b for b, n in counts.items() if have.get(b) != n} | (set(have) - set(counts)))
    step, tick = timedelta(seconds=level), timedelta(microseconds=1)
    ranges: list[tuple[Any, Any]] = []
    for b in stale:
        if ranges and ranges[-1][1] + tick == b:
            ranges[-1] = (ranges[-1][0], b + step - tick)
        else:
            ranges.append((b, b + step - tick))
    return ranges


def _build_gpu_level(
    con: duckdb.DuckDBPyConnection, level: int, prev: int | None, since: object, until: object
) -> None:
    """The per-GPU rows of ``level`` in [since, until] (whole buckets), built anew."""
    table = gpu_table(level)
    con.execute(f"DELETE FROM {table} WHERE ts >= ? AND ts <= ?", [since, until])
    names = [c for c, _ in GPU_AVG + GPU_MAX + GPU_MIN + GPU_COUNT + GPU_BUSY_AVG]
    if prev is None:
        cols = [f"avg({raw})" for _, raw in GPU_AVG]
        cols += [f"max({raw})" for _, raw in GPU_MAX] + [f"min({raw})" for _, raw in GPU_MIN]
        cols += [f"sum({flag})" for _, flag in GPU_COUNT]
        cols += [f"avg(CASE WHEN _busy = 1 THEN {raw} END)" for _, raw in GPU_BUSY_AVG]
        src, count = _RAW, "count(*)"
    else:  # weighted by the samples of the buckets that had the column
        names += GPU_LINK
        cols = [_weighted(c) for c, _ in GPU_AVG] + [f"max({c})" for c, _ in GPU_MAX]
        cols += [f"min({c})" for c, _ in GPU_MIN]
        # counts: NULL unless every bucket below had one (buckets built before they were kept)
        cols += [f"CASE WHEN count({c}) = count(*) THEN sum({c}) END" for c, _ in GPU_COUNT]
        cols += [_weighted(c, "busy_n") for c, _ in GPU_BUSY_AVG]
        cols += [_weighted(c) for c in GPU_LINK]
        src, count = gpu_table(prev), "sum(samples)"
    con.execute(
        f"""INSERT INTO {table} (bucket_s, ts, gpu_id, samples, {", ".join(names)})
        SELECT ?, time_bucket(to_seconds(?), ts) AS b, gpu_id, {count}, {", ".join(cols)}
        FROM {src} WHERE ts >= ? AND ts <= ? GROUP BY b, gpu_id""",
        [level, level, since, until],
    )


# The node rollup's columns its levels are built into (the cell flags are set afterwards).
_NODE_COLUMNS = """bucket_s, ts, node_id, samples, gpus, util_avg, util_min, temp_avg, temp_max,
  mem_temp_max, power_w, fb_used_avg, sm_clock_avg, sm_clock_min, tensor_avg, real_avg"""


def _rollup_level(
    con: duckdb.DuckDBPyConnection, level: int, prev: int | None, since: str, until: datetime
) -> None:
    bucket = "time_bucket(to_seconds(?), ts)"
    for table in ("node_rollup", "fleet_rollup"):
        con.execute(
            f"DELETE FROM {table} WHERE bucket_s = ? AND ts >= ? AND ts <= ?",
            [level, since, until],
        )
    if prev is None:
        # One node_tick row per (tick, node): a node's GPUs at one tick arrive in one batch
        # (one replay window, one scrape of that node's exporter).
        con.execute(
            f"""INSERT INTO node_rollup ({_NODE_COLUMNS})
            SELECT ?, {bucket} AS b, node_id, sum(n), max(n),
              sum(util_s) / sum(n), min(util_min), sum(temp_s) / sum(n), max(temp_max),
              max(mem_temp_max), sum(power_s) / count(*), sum(fb_s) / sum(n),
              sum(clock_s) / sum(n), min(clock_min), sum(tensor_s) / sum(n),
              sum(real_s) / nullif(sum(n) FILTER (WHERE real_s IS NOT NULL), 0)
            FROM node_tick WHERE ts >= ? AND ts <= ? GROUP BY b, node_id""",
            [level, level, since, until],
        )
    else:
        con.execute(
            f"""INSERT INTO node_rollup ({_NODE_COLUMNS})
            SELECT ?, {bucket} AS b, node_id, sum(samples), max(gpus),
              sum(util_avg * samples) / sum(samples), min(util_min),
              sum(temp_avg * samples) / sum(samples), max(temp_max), max(mem_temp_max),
              avg(power_w), sum(fb_used_avg * samples) / sum(samples),
              sum(sm_clock_avg * samples) / sum(samples), min(sm_clock_min),
              sum(tensor_avg * samples) / sum(samples),
              sum(real_avg * samples) / nullif(sum(samples) FILTER (WHERE real_avg IS NOT NULL), 0)
            FROM node_rollup WHERE bucket_s = ? AND ts >= ? AND ts <= ?
            GROUP BY b, node_id""",
            [level, level, prev, since, until],
        )
    set_flags(con, level, since, until)
    con.execute(
        """INSERT INTO fleet_rollup (bucket_s, ts, nodes, gpus, util_avg, util_min, temp_avg,
          temp_max, power_w, fb_used_avg, sm_clock_avg, tensor_avg, real_avg)
        SELECT ?, ts, count(*), sum(gpus), sum(util_avg * samples) / sum(samples),
          min(util_min), sum(temp_avg * samples) / sum(samples), max(temp_max), sum(power_w),
          sum(fb_used_avg * samples) / sum(samples), sum(sm_clock_avg * samples) / sum(samples),
          sum(tensor_avg * samples) / sum(samples),
          sum(real_avg * samples) / nullif(sum(samples) FILTER (WHERE real_avg IS NOT NULL), 0)
        FROM node_rollup WHERE bucket_s = ? AND ts >= ? AND ts <= ?
        GROUP BY ts""",
        [level, level, since, until],
    )
