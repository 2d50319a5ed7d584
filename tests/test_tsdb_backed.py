"""Issue 60, item 3: past one machine, the raw per-GPU series live in a real VictoriaMetrics and
the store keeps rollups (``--raw-retention 0``). The store holds no raw row its rollups closed;
the drill-down's four charts and its further metric, read back from the TSDB, are what
VictoriaMetrics holds, bucket for bucket; a TSDB that does not answer is said, never drawn as 0."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from app.data import gpus as data
from app.data.services import Services, bind
from telemetry.collect.prometheus.prom_client import PromClient
from telemetry.collect.prometheus.prom_history import PromHistory
from telemetry.queries import TimeRange
from telemetry.queries import slurm as slurmq
from telemetry.store import Store
from tests.tsdb_fixture import Fleet, _fleet  # noqa: F401

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

HOST = "h100-0001"
CHARTS = {  # drill-down column -> the exporter field VictoriaMetrics holds
    "util_pct": "DCGM_FI_DEV_GPU_UTIL",
    "temp_c": "DCGM_FI_DEV_GPU_TEMP",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
    "sm_clock_mhz": "DCGM_FI_DEV_SM_CLOCK",
}


def _bucketed(raw: pd.DataFrame, bucket_s: int) -> pd.DataFrame:
    """The raw samples' mean per GPU and bucket [b, b + bucket): what the drill-down draws."""
    out = raw.assign(ts=raw["ts"].dt.floor(f"{bucket_s}s"))
    return out.groupby(["gpu", "ts"], as_index=False)["value"].mean()


def test_the_store_keeps_no_raw_row_its_rollups_closed(fleet: Fleet) -> None:
    with Store(str(fleet.store), read_only=True) as s:
        since = s.raw_since()
        assert since is not None and since > fleet.start + timedelta(minutes=120)
        for table in ("gpu_samples", "gpu_samples_extra", "node_tick"):
            older = s.scalar(f"SELECT count(*) FROM {table} WHERE ts < ?", [since])
            assert older == 0, table
        # what is left raw is the open 5-minute bucket alone; the history is in the rollups
        newest = s.scalar("SELECT max(ts) FROM node_tick")
        assert newest - since < timedelta(minutes=5, seconds=30)
        first = s.scalar("SELECT min(ts) FROM gpu_rollup WHERE bucket_s = 300")
        assert first <= fleet.start + timedelta(minutes=5)


def test_the_drill_down_is_what_victoriametrics_holds(fleet: Fleet) -> None:
    # a range that starts off the bucket grid, as "the last hour" does
    tr = TimeRange(fleet.end - timedelta(hours=1, seconds=-7.3), fleet.end)
    with Store(str(fleet.store), read_only=True) as s:
        bind(Services(s, history=PromHistory([PromClient(fleet.vm.url)])))
        series = data.node_gpu_series(HOST, tr)
        note = data.expired_note(tr, series)
        fb, _ = data.node_more(HOST, tr, "fb")
        since = s.raw_since()
    assert series.attrs["tsdb"] is None
    assert f"read from {fleet.vm.url} instead" in note
    bucket = int(series["bucket_s"].iloc[0])
    older = series[series["ts"] < since]
    assert set(older["gpu"]) == set(range(8)) and older["ts"].min() <= tr.start
    for col, field in CHARTS.items():
        held = _bucketed(fleet.export(field, HOST), bucket)
        got = older[["gpu", "ts", col]].merge(held, on=["gpu", "ts"], how="left")
        assert got["value"].notna().all(), col  # every bucket drawn is one the TSDB holds
        np.testing.assert_allclose(got[col], got["value"], rtol=1e-9, err_msg=col)
        # and every bucket the TSDB holds in the range is drawn
        want = held[(held["ts"] >= older["ts"].min()) & (held["ts"] < since)]
        assert len(want) == len(older), col
    held = _bucketed(fleet.export("DCGM_FI_DEV_FB_USED", HOST), bucket)
    fb_old = fb[fb["ts"] < since].merge(held, on=["gpu", "ts"])
    assert len(fb_old) == len(older)
    np.testing.assert_allclose(fb_old["fb_used_mib"], fb_old["value"], rtol=1e-9)


def test_an_unreachable_tsdb_is_said_not_drawn_as_zero(fleet: Fleet) -> None:
    tr = TimeRange(fleet.end - timedelta(hours=1), fleet.end)
    dead = "http://127.0.0.1:9"
    with Store(str(fleet.store), read_only=True) as s:
        bind(Services(s, history=PromHistory([PromClient(dead)])))
        series = data.node_gpu_series(HOST, tr)
        note = data.expired_note(tr, series)
        fb, _ = data.node_more(HOST, tr, "fb")
        since = s.raw_since()
    assert series.attrs["tsdb"] and dead in series.attrs["tsdb"]
    assert "the TSDB did not answer" in note and dead in note
    assert series.empty or series["ts"].min() >= since  # nothing before the horizon, no zeros
    assert fb.attrs["tsdb"] and (fb.empty or fb["ts"].min() >= since)


def test_a_slurm_jobs_gpus_are_read_from_the_rollups_once_raw_rows_left(fleet: Fleet) -> None:
    """A Slurm job over hours whose raw rows left the store: its GPUs' means are the samples
    VictoriaMetrics holds for its 5-minute buckets, not only the minutes still raw (or none)."""
    start = fleet.start + timedelta(minutes=30)
    end = fleet.start + timedelta(minutes=90)
    with Store(str(fleet.store)) as s, s.transaction() as con:
        con.execute(
            "INSERT INTO slurm_jobs (cluster, job_id_raw, requeue, job_id, hosts, state, "
            "start_ts, end_ts) VALUES ('c', 7, 0, '7', [?], 'COMPLETED', ?, ?)",
            [HOST, start, end],
        )
    with Store(str(fleet.store), read_only=True) as s:
        assert s.raw_since() > end  # every raw row of the job's time has left
        got = slurmq.job_gpus(s, "7")
    assert list(got["gpu"]) == list(range(8)) and (got["host"] == HOST).all()
    raw = fleet.export("DCGM_FI_DEV_GPU_UTIL", HOST)
    # the 5-minute buckets that start in the job's time, whole
    inside = raw[(raw["ts"].dt.floor("300s") >= start) & (raw["ts"].dt.floor("300s") <= end)]
    want = inside.groupby("gpu")["value"].agg(["mean", "count"])
    np.testing.assert_allclose(got["util_pct"], want["mean"].to_numpy(), rtol=1e-5)
    assert list(got["samples"]) == list(want["count"])
