"""GPUs page queries against the seeded dev-64 replay (seed 1): 8 job nodes + 2 spares, one
straggler GPU (h100-0003 GPU 5) and one thermally throttled GPU (h100-0007 GPU 5)."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from telemetry.queries import TimeRange, data_extent
from telemetry.queries import gpus as q
from telemetry.queries import outliers as outq
from telemetry.store import Store, rollups
from telemetry.store.retention import expire


@pytest.fixture(scope="module")
def day(store: Store) -> TimeRange:
    tr = data_extent(store)
    assert tr is not None
    return tr


def test_metric_names_come_from_the_catalog(store: Store, day: TimeRange) -> None:
    assert set(q.METRICS) == {"util", "real", "temp", "power", "fb", "clock"}
    for bad in ("bogus", "util_avg; DROP TABLE nodes", "temp_max"):
        with pytest.raises(ValueError, match="unknown GPU metric"):
            q.heatmap(store, day, bad)
        with pytest.raises(ValueError):
            q.distribution(store, day, bad)


def test_heatmap_covers_every_node_in_bounded_cells(store: Store, day: TimeRange) -> None:
    hm = q.heatmap(store, day, "util")
    assert (hm.nodes_total, hm.nodes_shown) == (10, 10)  # 8 job nodes + 2 spares
    assert hm.bucket_s == 300  # a day at <= 300 columns: the 5-minute rollup
    assert hm.cells["ts"].nunique() <= 300
    assert hm.cells["host"].nunique() == 10 and hm.cells["host"].notna().all()
    # the first cell is the bucket holding the range's start (the first sample is a minute
    # into it), as the per-GPU levels are read: that bucket used to be left out
    first = store.scalar("SELECT time_bucket(INTERVAL 300 SECOND, ?::TIMESTAMP)", [day.start])
    assert first < day.start and hm.cells["ts"].min() == first
    # a cell is the rollup's value: h100-0003's mean utilization over the day matches SQL
    direct = store.scalar(
        """SELECT avg(util_avg) FROM node_rollup JOIN nodes USING (node_id)
           WHERE bucket_s = 300 AND host = 'h100-0003' AND ts BETWEEN ? AND ?""",
        [first, day.end],
    )
    mine = hm.cells.loc[hm.cells["host"] == "h100-0003", "value"].mean()
    assert mine == pytest.approx(direct, rel=1e-6)
    assert 85 < mine < 100  # a busy job node


def test_a_spares_cells_before_its_swap_in_are_no_fault(store: Store, day: TimeRange) -> None:
    """An idle hot spare is a state, not a fault (issue 57, 6): h100-0008 idled as a spare
    until it replaced h100-0007 at 12.56 h. Its cells before are ``off`` (drawn in greys) and
    do not rank it, where its idle hours put it on top in alarm red; after, they are the
    job's. h100-0007's cells after its failure are off until it rejoined the job."""
    cells = q.heatmap(store, day, "util").cells
    hours = (cells["ts"] - day.start).dt.total_seconds() / 3600
    spare = cells["host"] == "h100-0008"
    assert cells.loc[spare & (hours < 12.4), "off"].all()
    assert not cells.loc[spare & (hours > 12.6), "off"].any()
    failed = cells["host"] == "h100-0007"
    assert not cells.loc[failed & (hours < 12.4), "off"].any()
    assert cells.loc[failed & (hours > 12.6) & (hours < 19.2), "off"].all()
    job_nodes = ~cells["host"].isin(["h100-0007", "h100-0008", "h100-0009", "h100-0001",
                                     "h100-0004"])  # fmt: skip
    assert not cells.loc[job_nodes, "off"].any()


def test_temperature_ranks_the_hot_node_first(store: Store, day: TimeRange) -> None:
    cells = q.heatmap(store, day, "temp").cells
    top = cells[cells["rank"] == 1]
    assert set(top["host"]) == {"h100-0007"}  # GPU 5 runs hot (poor thermal interface)
    assert top["value"].max() >= 85.0
    util = q.heatmap(store, day, "util").cells
    assert not util["value"].equals(cells["value"])  # another metric, other numbers


def test_rows_beyond_the_cap_are_averaged_into_one(store: Store, day: TimeRange) -> None:
    hm = q.heatmap(store, day, "util", max_rows=4, max_cols=50)
    assert (hm.nodes_total, hm.nodes_shown) == (10, 3)
    assert sorted(hm.cells["rank"].unique()) == [1, 2, 3, 4]
    rest = hm.cells[hm.cells["rank"] == 4]
    assert rest["host"].isna().all() and rest["nodes"].max() == 7
    assert hm.bucket_s == 3600 and hm.cells["ts"].nunique() <= 50  # the hourly rollup
    # the averaged row is the mean of the seven other nodes in that bucket
    shown = tuple(hm.cells.loc[hm.cells["rank"] < 4, "host"].unique())
    ts, value = rest["ts"].iloc[10], rest["value"].iloc[10]
    direct = store.scalar(
        f"""SELECT avg(util_avg) FROM node_rollup JOIN nodes USING (node_id)
            WHERE bucket_s = 3600 AND ts = ? AND host NOT IN ({",".join("?" * len(shown))})""",
        [ts, *shown],
    )
    assert value == pytest.approx(direct, rel=1e-5)


def test_long_ranges_regroup_the_coarsest_rollup(store: Store, day: TimeRange) -> None:
    hm = q.heatmap(store, day, "temp", max_cols=3)
    assert hm.bucket_s == 43200 and hm.cells["ts"].nunique() <= 3  # 12 h from 6 h buckets
    hottest = store.scalar(
        """SELECT max(temp_max) FROM node_rollup JOIN nodes USING (node_id)
           WHERE bucket_s = 21600 AND host = 'h100-0007' AND ts BETWEEN ? AND ?""",
        [day.start, day.end],
    )
    assert hm.cells.loc[hm.cells["host"] == "h100-0007", "value"].max() == pytest.approx(hottest)


def test_distribution_bins_every_cell_in_sql(store: Store, day: TimeRange) -> None:
    dist = q.distribution(store, day, "temp")
    cells = store.scalar(
        "SELECT count(*) FROM node_rollup WHERE bucket_s = 300 AND ts BETWEEN "
        "time_bucket(INTERVAL 300 SECOND, ?::TIMESTAMP) AND ?",  # from the start's bucket
        [day.start, day.end],
    )
    assert dist["cells"].sum() == cells
    assert dist["node_hours"].sum() == pytest.approx(cells * 300 / 3600)
    assert (dist["width"] == 1.0).all() and dist["lo"].is_monotonic_increasing
    assert dist["lo"].max() >= 85  # the hot node's hours show in the tail


def test_outliers_name_the_straggler_and_the_hot_gpu(store: Store, day: TimeRange) -> None:
    df = outq.outliers(store, day)
    rows = {(r.host, r.gpu, r.reason): r for r in df.itertuples()}
    straggler = rows[("h100-0003", 5, "straggler")]
    hot = rows[("h100-0007", 5, "hot")]
    assert ("h100-0007", 5, "throttled") in rows  # slow because hot: not a straggler
    assert ("h100-0007", 5, "straggler") not in rows
    assert straggler.unit == "MHz" and "fleet median" in straggler.detail
    assert hot.unit == "°C" and "≥ 85 °C" in hot.detail
    peak, busy_clock = store.rows(
        """SELECT max(temp_c), NULL FROM gpu_samples JOIN gpus USING (gpu_id)
           WHERE host = 'h100-0007' AND gpu = 5
           UNION ALL
           SELECT NULL, avg(sm_clock_mhz) FILTER (WHERE util_pct >= 50) FROM gpu_samples
           JOIN gpus USING (gpu_id) WHERE host = 'h100-0003' AND gpu = 5"""
    )
    assert hot.value == pytest.approx(peak[0], abs=0.05)
    assert straggler.value == pytest.approx(busy_clock[1], abs=0.05)
    ratio = straggler.value / 1980.0  # H100 max SM clock, where the healthy GPUs sit
    assert 0.75 < ratio < 0.85
    # healthy GPUs are not listed for clock or heat
    clock_or_heat = df[df["reason"].isin(["hot", "throttled", "straggler"])]
    assert set(zip(clock_or_heat.host, clock_or_heat.gpu, strict=True)) == {
        ("h100-0003", 5),
        ("h100-0007", 5),
    }


def test_outliers_list_every_xid_event_decoded(store: Store, day: TimeRange) -> None:
    df = outq.outliers(store, day)
    xid = df[df["reason"] == "XID"]
    events = store.rows(
        "SELECT host, gpu, xid FROM xid_events WHERE ts BETWEEN ? AND ?", [day.start, day.end]
    )
    assert len(events) == 5
    assert set(zip(xid.host, xid.gpu, xid.value.astype(int), strict=True)) == set(events)
    assert xid["detail"].str.contains("NVIDIA action").all()


def test_idle_means_a_job_node_idle_while_the_job_ran(store: Store, day: TimeRange) -> None:
    idle = outq.outliers(store, day).query("reason == 'idle'")
    # h100-0001 was drained after XID 143 and h100-0007 for maintenance; the spares, idle by
    # design, are not outliers
    assert set(idle["host"]) == {"h100-0001", "h100-0007"}
    assert (idle["gpu"] == "all").all()  # whole nodes: one row each
    assert (idle["value"] >= 10).all() and (idle["unit"] == "% of run time").all()


def test_a_quiet_hour_has_no_idle_or_xid_outliers(store: Store, day: TimeRange) -> None:
    hour = TimeRange(day.start + timedelta(hours=2), day.start + timedelta(hours=3))
    df = outq.outliers(store, hour)
    assert set(df["reason"]) <= {"hot", "throttled", "straggler"}
    assert ("h100-0003", 5) in set(zip(df.host, df.gpu, strict=True))


def test_node_series_has_eight_bucketed_gpus(store: Store, day: TimeRange) -> None:
    df = q.node_gpu_series(store, "h100-0003", day)
    assert sorted(df["gpu"].unique()) == list(range(8))
    assert df.groupby("gpu").size().max() <= q.NODE_POINTS
    assert df["bucket_s"].iloc[0] == 600  # a day in 250 points: 10-min buckets
    gpu5 = df[df["gpu"] == 5]["sm_clock_mhz"].mean()
    others = df[df["gpu"] != 5]["sm_clock_mhz"].mean()
    assert gpu5 < 0.9 * others  # the straggler shows in its node's drill-down
    direct = store.scalar(  # the mean of the raw samples' 10-min means
        """SELECT avg(u) FROM (SELECT time_bucket(INTERVAL 10 minutes, ts), avg(util_pct) AS u
           FROM gpu_samples JOIN gpus USING (gpu_id)
           WHERE host = 'h100-0003' AND gpu = 0 GROUP BY ALL)"""
    )
    per_bucket = df[df["gpu"] == 0]["util_pct"].mean()
    assert per_bucket == pytest.approx(direct, abs=1e-3)
    assert q.node_gpu_series(store, "no-such-host", day).empty


def test_node_info(store: Store) -> None:
    info = q.node_info(store, "h100-0009")
    assert info == {
        "host": "h100-0009",
        "rack": "rack-004",
        "role": "spare",
        "gpus": 8,
        "model": "NVIDIA H100 80GB HBM3",
    }
    assert q.node_info(store, "h100-0009' OR 1=1 --") is None


def test_outlier_reasons_are_counted_in_table_order(store: Store, day: TimeRange) -> None:
    df = outq.outliers(store, day)
    counts = outq.reason_counts(df)
    assert counts == [(r, int((df["reason"] == r).sum())) for r in outq.REASON_ORDER]
    assert counts[0] == ("hot", 1) and counts[-1][0] == "idle"
    assert outq.reason_counts(df.iloc[:0]) == []


def test_a_large_fleet_searches_coarser_node_cells_and_finds_the_same_outliers(
    store: Store, day: TimeRange, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``CANDIDATE_CELLS`` node cells (600 buckets of 3,333 nodes) the candidate search
    reads fewer, coarser buckets, so its cost stays flat as the fleet grows; the outliers of
    the dev day (a hot, a throttled and a slow GPU, XIDs, drained nodes idle) are the same
    when its ten nodes get hourly-sized cells (24 buckets a node)."""
    full = outq.outliers(store, day)
    assert {"hot", "throttled", "straggler", "XID", "idle"} <= set(full["reason"])
    seen: list[str] = []
    grid = outq.cell_grid

    def spy(store_: Store, tr: TimeRange, max_cols: int) -> tuple[int, int, bool]:
        out = grid(store_, tr, max_cols)
        seen.append(f"{max_cols}:{out[1]}")
        return out

    monkeypatch.setattr(outq, "cell_grid", spy)
    monkeypatch.setattr(outq, "CANDIDATE_CELLS", 10 * 24)  # as if the fleet were huge
    coarse = outq.outliers(store, day)
    assert seen and seen[0].startswith("24:") and int(seen[0].split(":")[1]) >= 3600
    pd.testing.assert_frame_equal(coarse, full)


def _same_figures(raw_stats: pd.DataFrame, stats: pd.DataFrame) -> None:
    """Per-GPU statistics from rollups that equal those of every raw sample (all but "the job
    was running", judged per bucket): counts and peaks exactly, busy means to float32."""
    both = raw_stats.merge(stats, on=["host", "gpu"], suffixes=("_raw", ""))
    assert len(both) == len(raw_stats) == len(stats) >= 64
    for col in ("samples", "temp_peak", "hot_samples", "grain_s"):
        assert (both[col] == both[f"{col}_raw"]).all(), col
    for col in ("clock_busy", "temp_busy"):
        np.testing.assert_allclose(both[col], both[f"{col}_raw"], rtol=1e-5)


def test_long_ranges_read_per_gpu_buckets_and_find_the_same_outliers(
    dev_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``FULL_SCAN_ROWS`` samples (a 54-day run of 16,384 GPUs) the per-GPU statistics
    read the candidates' per-GPU buckets instead of sampled raw ticks. The buckets keep counts
    of hot, idle and busy samples and the clock and temperature while busy, so the figures are
    those of every raw sample (only "the job was running" is judged per bucket), and the
    table names the same outliers for the same reasons in the same words. Buckets built before
    they kept the counts are judged on their means, and the table says so."""
    shutil.copy(dev_store, tmp_path / "s.duckdb")
    with Store(str(tmp_path / "s.duckdb")) as store:
        day = data_extent(store)
        assert day is not None
        raw_stats, raw_ref, _ = outq.gpu_stats(store, day)
        raw = outq.outliers(store, day)
        assert (raw_stats["grain_s"] == 0).all()
        monkeypatch.setattr(outq, "FULL_SCAN_ROWS", 0)  # this day of 80 GPUs counts as long
        assert outq._rolled_level(store, day) == 300
        stats, ref, per_sample_s = outq.gpu_stats(store, day)
        assert per_sample_s == store.sample_interval_s()
        _same_figures(raw_stats, stats)
        assert ref == pytest.approx(raw_ref, rel=1e-5)
        got = outq.outliers(store, day)
        key = ["host", "gpu", "reason"]
        assert got[key].values.tolist() == raw[key].values.tolist()
        same = got["reason"] != "idle"  # idle: the share of the job's running time
        pd.testing.assert_frame_equal(got[same], raw[same])
        np.testing.assert_allclose(got.loc[~same, "value"], raw.loc[~same, "value"], atol=0.5)
        # buckets from before the counts: judged on each bucket's mean, and said so
        with store.transaction() as con:
            for table in rollups.GPU_TABLES[1:]:  # each level's table
                con.execute(f"UPDATE {table} SET hot_n = NULL, idle_n = NULL, busy_n = NULL")
        old = outq.outliers(store, day)
    assert old[key].values.tolist() == raw[key].values.tolist()
    assert "in 5-min buckets totalling" in old[old["reason"] == "hot"].iloc[0]["detail"]
    assert "in 5-min means for" in old[old["reason"] == "idle"].iloc[0]["detail"]


def test_weeks_read_the_kept_days_and_the_day_still_filling_with_the_raw_figures(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over weeks of a large fleet the statistics read per-GPU days: the complete days kept,
    and the 6-hour buckets of the day still filling (from the day mark on), so no sample is
    missed or counted twice: the same counts, peaks and busy means as every raw sample."""
    day = data_extent(store)
    assert day is not None
    raw_stats, _, _ = outq.gpu_stats(store, day)
    monkeypatch.setattr(outq, "FULL_SCAN_ROWS", 0)  # this day of 80 GPUs counts as long...
    monkeypatch.setattr(outq, "MAX_ROLLED_ROWS", 100)  # ...and as weeks: one row a GPU fits
    assert outq._rolled_level(store, day) == 86400
    stats, _, _ = outq.gpu_stats(store, day)
    _same_figures(raw_stats, stats)


def test_outliers_of_a_range_whose_raw_samples_expired_come_from_per_gpu_buckets(
    dev_store: Path, tmp_path: Path
) -> None:
    """After ``--raw-retention`` drops the per-GPU samples, the outlier table of that range
    still names the straggler and the hot GPU (it would be empty from raw samples)."""
    shutil.copy(dev_store, tmp_path / "s.duckdb")
    with Store(str(tmp_path / "s.duckdb")) as s:
        tr = data_extent(s)
        assert tr is not None
        before = outq.outliers(s, tr)
        expire(s, timedelta(hours=1))
        assert s.raw_since() is not None and s.raw_since() > tr.start + timedelta(hours=20)
        after = outq.outliers(s, tr)
    pairs = set(zip(after.host, after.gpu, after.reason, strict=True))
    assert {("h100-0003", 5, "straggler"), ("h100-0007", 5, "hot")} <= pairs
    assert set(before["reason"]) == set(after["reason"])
