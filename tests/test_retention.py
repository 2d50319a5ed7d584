"""Raw retention (issue 15, part 3): ``--raw-retention`` keeps per-GPU samples that long and the
rollups for ever. What a user sees: the fleet and node charts over the whole history are the
same after expiry as before, a short range in the expired past is drawn from the rollups
instead of coming up empty, readers keep their answers while expiry runs, a late sample older
than the horizon does not rebuild a rollup bucket from a half-empty tick table, and the
command line refuses the option where it cannot apply."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from telemetry.queries import TimeRange, data_extent, pick_level
from telemetry.queries import gpus as gpuq
from telemetry.queries.overview import fleet_series
from telemetry.store import Store
from telemetry.store.retention import RAW_TABLES, expire, horizon
from tests.conftest import build_store, cli, free_port

KEEP = timedelta(hours=6)



def _counts(store: Store, tables: tuple[str, ...]) -> dict[str, int]:
    return {t: store.scalar(f"SELECT count(*) FROM {t}") for t in tables}


def test_expiry_keeps_the_window_and_every_rollup(day: Path) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        fleet = fleet_series(s, whole)
        cells = gpuq.heatmap(s, whole, "util").cells
        rolled = _counts(s, ("node_rollup", "fleet_rollup"))
        newest = s.scalar("SELECT max(ts) FROM gpu_samples")

        done = expire(s, KEEP)

        assert done.total > 0 and set(done.rows) == set(RAW_TABLES)
        cut = s.raw_since()
        assert cut is not None and newest - KEEP - timedelta(minutes=1) <= cut <= newest - KEEP
        for table in RAW_TABLES:  # nothing older than the horizon is left (extra may be empty)
            oldest = s.scalar(f"SELECT min(ts) FROM {table}")
            assert (oldest is None and table == "gpu_samples_extra") or oldest >= cut
        assert s.scalar("SELECT max(ts) FROM gpu_samples") == newest
        assert _counts(s, ("node_rollup", "fleet_rollup")) == rolled
        # The whole day reads the same: the charts come from rollups, the range is unchanged.
        after = data_extent(s)
        assert after is not None and after.end == whole.end
        assert timedelta(0) <= whole.start - after.start < timedelta(minutes=1)
        pd.testing.assert_frame_equal(fleet_series(s, whole), fleet)
        pd.testing.assert_frame_equal(gpuq.heatmap(s, whole, "util").cells, cells)
        # A second pass has nothing to do.
        assert expire(s, KEEP).total == 0


def test_a_short_range_in_the_expired_past_is_drawn_from_rollups(day: Path) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        hour = TimeRange(whole.start + timedelta(hours=2), whole.start + timedelta(hours=3))
        assert pick_level(s, hour, 1500) == s.sample_interval_s()  # raw ticks, while kept
        raw = fleet_series(s, hour)
        expire(s, KEEP)
        level = pick_level(s, hour, 1500)
        assert level == s.rollup_levels()[0]  # the finest rollup, not the gone ticks
        rolled = fleet_series(s, hour)
        assert len(rolled) >= 59  # a point a minute, not an empty chart
        # the rollup of an hour averages what the ticks said
        assert rolled["util_avg"].mean() == pytest.approx(raw["util_avg"].mean(), rel=0.02)
        # the newest hour is still the raw ticks
        last = TimeRange(whole.end - timedelta(hours=1), whole.end)
        assert pick_level(s, last, 1500) == s.sample_interval_s()
        assert not fleet_series(s, last).empty


def test_readers_keep_their_answers_while_expiry_runs(day: Path) -> None:
    with Store(str(day)) as s:
        whole = data_extent(s)
        assert whole is not None
        want = fleet_series(s, whole)
        window = whole.end - KEEP + timedelta(hours=1)
        seen: list[pd.DataFrame] = []
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                with s.cursor() as cur:  # a reader of its own, as a dashboard request is
                    seen.append(
                        cur.execute(  # the kept window of the table being deleted from
                            "SELECT count(*) AS n, sum(util_pct) AS u FROM gpu_samples "
                            "WHERE ts >= ?",
                            [window],
                        ).df()
                    )

        reader = threading.Thread(target=read)
        reader.start()
        try:
            expire(s, KEEP, slice_=timedelta(minutes=10))  # ~110 short transactions
        finally:
            done.set()
            reader.join()
        assert seen and seen[0]["n"].iloc[0] > 0
        assert all(frame.equals(seen[0]) for frame in seen)
        pd.testing.assert_frame_equal(fleet_series(s, whole), want)


def test_a_late_sample_past_the_horizon_does_not_rebuild_its_bucket(day: Path) -> None:
    with Store(str(day)) as s:
        expire(s, KEEP)
        cut = s.raw_since()
        assert cut is not None
        level = s.rollup_levels()[0]
        old = cut - timedelta(hours=3)
        sql = "SELECT * FROM node_rollup WHERE bucket_s = ? AND ts = ? ORDER BY node_id"
        before = s.df(sql, [level, old])
        assert not before.empty
        s.refresh_rollups(since=old)  # as a spooled round from three hours before would
        pd.testing.assert_frame_equal(s.df(sql, [level, old]), before)


def test_the_horizon_waits_for_the_rollups(tmp_path: Path) -> None:
    """Ticks not yet rolled up never leave, however old: the horizon stops at the finest
    level's watermark."""
    path = build_store(tmp_path / "s.duckdb", days=0.1)
    with Store(str(path)) as s:
        level = s.rollup_levels()[0]
        mark = s.meta()[f"rollup_watermark_{level}"]
        s.set_meta({f"rollup_watermark_{level}": "1970-01-01 00:00:00"})
        assert horizon(s, timedelta(minutes=1)) is not None
        assert expire(s, timedelta(minutes=1)).total == 0
        s.set_meta({f"rollup_watermark_{level}": mark})
        assert expire(s, timedelta(minutes=1)).total > 0


def test_replay_with_raw_retention_keeps_the_window(tmp_path: Path) -> None:
    path = tmp_path / "r.duckdb"
    p = cli("replay", "--scenario", "dev-64", "--days", "0.5", "--store", str(path),
            "--no-progress", "--raw-retention", "2h")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "raw retention: per-GPU samples kept" in p.stderr
    con = duckdb.connect(str(path), read_only=True)
    try:
        lo, hi = con.execute("SELECT min(ts), max(ts) FROM gpu_samples").fetchone()
        first = con.execute("SELECT min(ts) FROM fleet_rollup").fetchone()[0]
    finally:
        con.close()
    assert hi - lo <= timedelta(hours=2, minutes=1)
    assert hi - first >= timedelta(hours=11)  # the rollups reach back over the whole half day


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--raw-retention", "5x"], "'5x' is not a duration like 30m, 6h or 7d"),
        (["--raw-retention", "0x"], "is not a duration"),  # 0 is taken: docs/scaling.md
    ],
)
def test_a_bad_retention_is_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    p = cli("replay", "--scenario", "dev-64", "--store", str(tmp_path / "x.duckdb"), *args)
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_retention_where_nothing_is_written_is_refused(dev_store: Path, tmp_path: Path) -> None:
    p = cli("serve", "--store", str(dev_store), "--raw-retention", "7d",
            "--port", str(free_port()))  # fmt: skip
    assert p.returncode == 1
    assert "--raw-retention needs a store this server writes" in p.stderr, p.stderr
    p = cli("ingest", "--server", "http://127.0.0.1:9", "--raw-retention", "7d",
            "--target", "http://127.0.0.1:9/metrics")  # fmt: skip
    assert p.returncode == 1
    assert "--raw-retention applies to a store this process writes" in p.stderr, p.stderr
