"""Per-GPU rollups (``gpu_rollup``): a node's GPUs over a day and "GPUs under 80 % per hour"
read 5 min and 1 h buckets per GPU instead of every raw sample of the fleet. What a user would
notice if they were wrong: a drill-down or an hourly count that differs from the raw samples, a
late round that leaves its bucket stale, lines that vanish once raw retention drops the
samples, or a store from before the table that answers with holes."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from telemetry.errors import StoreError
from telemetry.queries import TimeRange, data_extent, gpu_node, gpu_rollup
from telemetry.queries import gpus as gpuq
from telemetry.queries.gpu_rollup import gpus_below, gpus_below_per_hour, node_series_level
from telemetry.store import Store, rollups
from telemetry.store.retention import expire
from telemetry.utilization import REAL_SQL
from telemetry.vocabulary import BUSY_PCT, HOT_C, IDLE_PCT

HOST = "h100-0003"  # a job node of dev-64


def _ranges(whole: TimeRange) -> list[TimeRange]:
    """The whole day, its last 24 h, and a range cut mid-bucket at both ends."""
    odd = TimeRange(whole.start + timedelta(minutes=7, seconds=13), whole.end - timedelta(hours=2))
    return [whole, TimeRange(whole.end - timedelta(hours=24), whole.end), odd]


def _raw(store: Store) -> None:
    """Make every query read the raw samples (as for a store that has no per-GPU rollup)."""
    store.set_meta({"gpu_rollup_since": "2999-01-01 00:00:00"})


def test_rollup_answers_equal_raw_answers(day: Path) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        got = []
        for tr in _ranges(whole):
            series = gpuq.node_gpu_series(s, HOST, tr)
            bucket = int(series["bucket_s"].iloc[0])
            assert node_series_level(s, tr, bucket) is not None, tr  # from the rollup
            assert set(series["gpu"]) == set(range(8))
            got.append((series, gpus_below_per_hour(s, tr)))
        below = got[0][1]
        assert below["below"].sum() > 0 and (below["gpus"] > 0).all()
        _raw(s)
        for tr, (series, hourly) in zip(_ranges(whole), got, strict=True):
            bucket = int(series["bucket_s"].iloc[0])
            assert node_series_level(s, tr, bucket) is None
            pd.testing.assert_frame_equal(
                gpuq.node_gpu_series(s, HOST, tr), series, check_dtype=False, atol=1e-3
            )
            pd.testing.assert_frame_equal(gpus_below_per_hour(s, tr), hourly, check_dtype=False)


def test_a_long_range_counts_gpus_under_80_per_6_hours_as_raw_samples_do(
    day: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``MAX_BELOW_ROWS`` GPU-hours (two weeks of 16,384 GPUs) the chart counts each
    GPU's 6-hour mean: from the 6-hour buckets, the same as from raw samples."""
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        assert gpus_below(s, whole)["bucket_s"].eq(3600).all()  # a day of 64 GPUs: hourly
        monkeypatch.setattr(gpu_rollup, "MAX_BELOW_ROWS", 100)  # as if a fleet's 54 days
        six = gpus_below(s, whole)
        assert six["bucket_s"].eq(21600).all() and len(six) == 5  # the day's 6-h buckets
        assert (six["ts"].dt.hour % 6 == 0).all() and six["below"].sum() > 0
        _raw(s)
        pd.testing.assert_frame_equal(gpus_below(s, whole, bucket=21600), six, check_dtype=False)


def test_a_late_round_rebuilds_its_gpu_bucket(day: Path) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        at = whole.start + timedelta(hours=5, seconds=30)  # between two replay ticks
        gid = s.scalar("SELECT min(gpu_id) FROM gpus WHERE host = ?", [HOST])
        cols = s.rows("SELECT column_name FROM duckdb_columns() WHERE table_name = 'gpu_samples'")
        late = {c: None for (c,) in cols} | {"ts": at, "gpu_id": gid, "util_pct": 0.0}
        names = ", ".join(late)
        with s.transaction() as con:
            con.execute(
                f"INSERT INTO gpu_samples ({names}) VALUES ({', '.join('?' * len(late))})",
                list(late.values()),
            )
        s.refresh_rollups(since=at)  # as the sink does after a late round
        sql = """SELECT samples, util_avg FROM gpu_rollup WHERE bucket_s = ? AND gpu_id = ?
                 AND ts = time_bucket(to_seconds(?), ?::TIMESTAMP)"""
        raw = """SELECT count(*), avg(util_pct) FROM gpu_samples WHERE gpu_id = ?
                 AND ts >= time_bucket(to_seconds(?), ?::TIMESTAMP)
                 AND ts < time_bucket(to_seconds(?), ?::TIMESTAMP) + to_seconds(?)"""
        for level in s.gpu_rollup_levels():
            ((n, avg),) = s.rows(sql, [level, gid, level, at])
            ((rn, ravg),) = s.rows(raw, [gid, level, at, level, at, level])
            assert n == rn and avg == pytest.approx(ravg, abs=1e-3), level


def test_the_drill_down_outlives_raw_retention(day: Path) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        before = gpuq.node_gpu_series(s, HOST, whole)
        hourly = gpus_below_per_hour(s, whole)
        expire(s, timedelta(hours=6))
        cut = s.raw_since()
        assert cut is not None and cut > whole.start + timedelta(hours=12)
        assert s.scalar("SELECT min(ts) FROM gpu_samples") >= cut
        after = gpuq.node_gpu_series(s, HOST, whole)
        pd.testing.assert_frame_equal(after, before)  # lines before the horizon are still there
        assert after["ts"].min() < cut - timedelta(hours=12)
        pd.testing.assert_frame_equal(gpus_below_per_hour(s, whole), hourly)
        # a range finer than the rollups before the horizon: raw rows there are gone
        short = TimeRange(whole.start + timedelta(hours=2), whole.start + timedelta(hours=3))
        assert gpuq.node_gpu_series(s, HOST, short).empty
        coarse = gpuq.node_gpu_series(s, HOST, short, min_bucket=s.gpu_rollup_levels()[0])
        assert len(coarse) == 8 * 12 + 8  # twelve 5-min buckets per GPU, and the one at 3:00


def test_a_store_from_before_the_table_reads_raw_where_the_rollup_has_holes(
    day: Path,
) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        want = gpuq.node_gpu_series(s, HOST, whole)
        hourly = gpus_below_per_hour(s, whole)
        with s.transaction() as con:  # as a store written before the table existed
            con.execute("DROP VIEW gpu_rollup")
            for table in rollups.GPU_TABLES[1:]:
                con.execute(f"DROP TABLE {table}")
            con.execute("DELETE FROM meta WHERE key = 'gpu_rollup_since'")
    with Store(str(day)) as s:  # the upgrade adds the table, whole from the next hour on
        since = s.gpu_rollup_since()
        assert whole.end - timedelta(hours=1) < since <= whole.end + timedelta(hours=1)
        assert since.minute == 0 and since.second == 0
        assert node_series_level(s, whole, 300) is None
        pd.testing.assert_frame_equal(gpuq.node_gpu_series(s, HOST, whole), want)
        # the hourly count reads raw hours before the upgrade and the rollup after, the same
        mid = since - timedelta(hours=10)
        # as if upgraded 10 h before the end: every level rebuilt from there on
        marks = {f"rollup_watermark_{lv}": str(mid) for lv in s.rollup_levels()}
        s.set_meta({"gpu_rollup_since": str(mid), **marks})
        s.refresh_rollups()
        assert s.scalar("SELECT min(ts) FROM gpu_rollup WHERE bucket_s = 3600") == mid
        pd.testing.assert_frame_equal(gpus_below_per_hour(s, whole), hourly, check_dtype=False)
        # and once raw retention has taken the hours up to 5 h after the upgrade, those come
        # from the rollup: only the hours before the upgrade are gone
        with s.transaction() as con:
            for table in ("gpu_samples", "node_tick"):
                con.execute(f"DELETE FROM {table} WHERE ts < ?", [mid + timedelta(hours=5)])
            con.execute("INSERT OR REPLACE INTO meta VALUES ('raw_since', ?)",
                        [str(mid + timedelta(hours=5))])  # fmt: skip
        got = gpus_below_per_hour(s, whole)
        kept = hourly[hourly["ts"] >= mid].reset_index(drop=True)
        pd.testing.assert_frame_equal(got.reset_index(drop=True), kept, check_dtype=False)


def test_a_store_from_before_the_six_hour_level_gets_it_from_its_hourly_buckets(
    day: Path,
) -> None:
    """The 6-hour per-GPU level (long ranges' outlier statistics) is built once on upgrade
    from the hourly buckets, the same rows as the rollup refresh built as samples came."""
    with Store(str(day)) as s:
        assert 21600 in s.gpu_rollup_levels()
        before = s.df("SELECT * FROM gpu_rollup WHERE bucket_s = 21600 ORDER BY ts, gpu_id")
        classes = s.df("SELECT * FROM class_rollup WHERE bucket_s = 21600 ORDER BY ALL")
    con = duckdb.connect(str(day))
    con.execute("DELETE FROM gpu_rollup_21600")  # as before the level
    con.execute("DELETE FROM class_rollup WHERE bucket_s = 21600")
    con.close()
    with Store(str(day)) as s:  # opened for writing: the schema upgrade builds it
        after = s.df("SELECT * FROM gpu_rollup WHERE bucket_s = 21600 ORDER BY ts, gpu_id")
        assert 300 < len(before) <= 80 * 5  # 80 GPUs, a day touching five 6-hour buckets
        pd.testing.assert_frame_equal(before, after)
        pd.testing.assert_frame_equal(
            classes, s.df("SELECT * FROM class_rollup WHERE bucket_s = 21600 ORDER BY ALL")
        )


def test_complete_days_are_kept_per_gpu_from_their_six_hour_buckets(day: Path) -> None:
    """Per-GPU days (the outlier table over weeks reads them) are kept for complete days only,
    each the sums of its 6-hour buckets; the day still filling is left to the 6-hour buckets.
    A store from before them gets the same rows and mark when it is opened for writing."""
    daily = "SELECT * FROM gpu_rollup WHERE bucket_s = 86400 ORDER BY ALL"
    sums = """SELECT time_bucket(INTERVAL 1 day, ts) AS ts, gpu_id, sum(samples) AS n,
                     sum(hot_n) AS hot, sum(busy_n) AS busy, max(temp_max) AS peak
              FROM gpu_rollup WHERE bucket_s = 21600 AND ts < ? GROUP BY ALL ORDER BY ALL"""
    with Store(str(day)) as s:
        mark = datetime.fromisoformat(s.meta()[rollups.DAY_MARK])
        newest = s.scalar("SELECT max(ts) FROM node_tick")
        assert mark == datetime(2026, 1, 6) and newest >= mark  # the 5th is whole, kept
        kept = s.df(daily)
        assert set(kept["ts"]) == {datetime(2026, 1, 5)} and len(kept) == 80
        got = s.df(
            """SELECT ts, gpu_id, samples AS n, hot_n AS hot, busy_n AS busy, temp_max AS peak
               FROM gpu_rollup WHERE bucket_s = 86400 ORDER BY ALL"""
        )
        pd.testing.assert_frame_equal(got, s.df(sums, [mark]), check_dtype=False)
    con = duckdb.connect(str(day))  # as before days were kept
    con.execute("DELETE FROM gpu_rollup_86400")
    con.execute("DELETE FROM meta WHERE key = ?", [rollups.DAY_MARK])
    con.close()
    with Store(str(day)) as s:  # opened for writing: the schema upgrade builds them
        pd.testing.assert_frame_equal(s.df(daily), kept)
        assert s.meta()[rollups.DAY_MARK] == str(mark)


def test_a_round_within_a_day_leaves_its_kept_days_and_a_late_one_rebuilds_its_own(
    day: Path,
) -> None:
    """A refresh in the day still filling writes no day (a scrape round does not rebuild the
    day it falls in); a round for a kept day rebuilds that day from its 6-hour buckets."""
    with Store(str(day)) as s:
        kept = "SELECT rowid, samples FROM gpu_rollup_86400 ORDER BY 1"
        before = s.rows(kept)
        s.refresh_rollups()
        assert s.rows(kept) == before and before
        gpu = s.scalar("SELECT min(gpu_id) FROM gpus")
        one = "SELECT temp_max, samples FROM gpu_rollup WHERE bucket_s = 86400 AND gpu_id = ?"
        peak, n = s.rows(one, [gpu])[0]
        assert peak < 99.0
        late = pd.DataFrame({"ts": [datetime(2026, 1, 5, 12, 0, 30)], "gpu_id": [gpu],
                             "util_pct": [1.0], "temp_c": [99.0]})  # fmt: skip
        s.append("gpu_samples", late)
        s.refresh_rollups(since=late["ts"].iloc[0].to_pydatetime())
        assert s.rows(one, [gpu])[0] == (99.0, n + 1)


def test_outlier_counts_kept_per_bucket_equal_raw_counts_at_every_level(store: Store) -> None:
    """Samples hot, idle and busy per GPU, and the clock while busy, summed over a level's
    buckets, equal what the raw samples count (``rollups.GPU_COUNT``)."""
    eff = f"coalesce({REAL_SQL}, util_pct)"
    raw = store.df(
        f"""SELECT gpu_id, count(*) FILTER (WHERE temp_c >= {HOT_C}) AS hot,
                   count(*) FILTER (WHERE {eff} < {IDLE_PCT}) AS idle,
                   count(*) FILTER (WHERE {eff} >= {BUSY_PCT}) AS busy,
                   avg(sm_clock_mhz) FILTER (WHERE {eff} >= {BUSY_PCT}) AS clock
            FROM gpu_samples GROUP BY gpu_id ORDER BY gpu_id"""
    )
    assert raw["hot"].sum() > 0 and raw["idle"].sum() > 0
    for level in store.gpu_rollup_levels():
        rolled = store.df(
            """SELECT gpu_id, sum(hot_n) AS hot, sum(idle_n) AS idle, sum(busy_n) AS busy,
                      sum(busy_clock * busy_n) / sum(busy_n) AS clock
               FROM gpu_rollup WHERE bucket_s = ? GROUP BY gpu_id ORDER BY gpu_id""",
            [level],
        )
        pd.testing.assert_frame_equal(rolled, raw, check_dtype=False, rtol=1e-5, obj=str(level))


@pytest.mark.parametrize("key", ["fb", "real", "tensor"])
def test_the_drill_down_pick_list_reads_per_gpu_buckets_with_the_raw_answers(
    store: Store, key: str
) -> None:
    """A day of one node's framebuffer, real utilization or tensor activity comes from the
    5-min per-GPU buckets (10-min points: two buckets each): the same values as averaging the
    raw samples of each point."""
    whole = data_extent(store)
    assert whole is not None
    got = gpu_node.node_gpu_metric(store, HOST, whole, key)
    assert got["bucket_s"].iloc[0] == 600
    assert gpu_node.node_series_level(store, whole, 600) == 300
    name, _, _, column = gpu_node.NODE_METRICS[key]
    expr = REAL_SQL if column == gpu_node.REAL else column
    want = store.df(
        f"""SELECT time_bucket(INTERVAL 10 minutes, s.ts) AS ts, g.gpu, avg({expr}) AS {name},
                   600 AS bucket_s
            FROM gpu_samples s JOIN gpus g USING (gpu_id)
            WHERE g.host = ? AND {expr} IS NOT NULL GROUP BY ALL ORDER BY g.gpu, 1""",
        [HOST],
    )
    assert len(got) == len(want) > 8 * 100
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-4)


def _one_table(path: Path, extra: str = "") -> None:
    """Make the store at ``path`` keep every per-GPU level in one table ``gpu_rollup``, as
    stores did before one table per level (``extra``: SQL run on it before closing)."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE _one AS FROM gpu_rollup")
    con.execute("DROP VIEW gpu_rollup")
    for table in rollups.GPU_TABLES[1:]:
        con.execute(f"DROP TABLE {table}")
    con.execute("ALTER TABLE _one RENAME TO gpu_rollup")
    if extra:
        con.execute(extra)
    con.close()


def test_a_store_with_every_level_in_one_table_gets_one_table_per_level(day: Path) -> None:
    """A store from before one table per per-GPU level has its rows moved, none lost or
    changed, when it is opened, read-only too (the readers name a level's table); the refresh
    then writes the level tables."""
    every = "SELECT * FROM gpu_rollup ORDER BY bucket_s, ts, gpu_id"
    with Store(str(day)) as s:
        want = s.df(every)
        whole = data_extent(s)
        assert whole is not None
        series = gpuq.node_gpu_series(s, HOST, whole)
    assert set(want["bucket_s"]) == {300, 3600, 21600, 86400}
    _one_table(day)
    with Store(str(day), read_only=True) as s:  # upgraded first (``store._upgrade``)
        pd.testing.assert_frame_equal(s.df(every), want)
        pd.testing.assert_frame_equal(gpuq.node_gpu_series(s, HOST, whole), series)
    _one_table(day)
    with Store(str(day)) as s:
        kinds = dict(
            s.rows("SELECT table_name, table_type FROM information_schema.tables "
                   "WHERE table_name LIKE 'gpu_rollup%'")
        )  # fmt: skip
        assert kinds == {"gpu_rollup": "VIEW"} | dict.fromkeys(rollups.GPU_TABLES[1:], "BASE TABLE")
        pd.testing.assert_frame_equal(s.df(every), want)
        for level in rollups.GPU_TABLE_LEVELS:
            n = s.scalar(f"SELECT count(*) FROM {rollups.gpu_table(level)}")
            assert n == (want["bucket_s"] == level).sum() > 0
        pd.testing.assert_frame_equal(gpuq.node_gpu_series(s, HOST, whole), series)
        gpu = s.scalar("SELECT min(gpu_id) FROM gpus")  # a late round: its hour rebuilt
        at = whole.start + timedelta(hours=3, seconds=1)
        hour = "SELECT samples FROM gpu_rollup_3600 WHERE gpu_id = ? AND ts = ?"
        start = at.replace(minute=0, second=0, microsecond=0)
        before = s.scalar(hour, [gpu, start])
        s.append("gpu_samples", pd.DataFrame({"ts": [at], "gpu_id": [gpu], "util_pct": [1.0]}))
        s.refresh_rollups(since=at)
        assert s.scalar(hour, [gpu, start]) == before + 1 > 1


def test_a_level_this_version_does_not_know_leaves_the_one_table_as_it_was(day: Path) -> None:
    with Store(str(day)) as s:
        want = s.df("SELECT * FROM gpu_rollup ORDER BY ALL")
    _one_table(day, "INSERT INTO gpu_rollup (bucket_s, gpu_id, samples) VALUES (60, 1, 1)")
    with pytest.raises(StoreError, match="up to this version failed.*1 rows of an unknown level"):
        Store(str(day))
    con = duckdb.connect(str(day), read_only=True)
    got = con.execute("SELECT * FROM gpu_rollup WHERE bucket_s <> 60 ORDER BY ALL").df()
    split = "SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'gpu_rollup_%'"
    assert con.execute(split).fetchone()[0] == 0
    con.close()
    pd.testing.assert_frame_equal(got, want)
