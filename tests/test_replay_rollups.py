"""The replay's whole per-GPU buckets (``replay.partials``) against the store's own SQL: the
rows a backfill keeps are the rows the store would have built from the samples, and a bucket
that other samples also reach is built again from all of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from telemetry.ingest.seam import Tables
from telemetry.ingest.writer import StoreWriter
from telemetry.replay.runner import prepare, replay, window_ticks
from telemetry.replay.scenarios import get_scenario
from telemetry.replay.synth import Synthesizer
from telemetry.replay.timeline import simulate
from telemetry.store import Store, rollups

ROLLUPS = {
    "gpu_rollup": "SELECT * FROM gpu_rollup ORDER BY bucket_s, ts, gpu_id",
    "class_rollup": "SELECT * FROM class_rollup ORDER BY ALL",
    "fleet_rollup": "SELECT * FROM fleet_rollup ORDER BY bucket_s, ts",
}


class _SamplesOnly(StoreWriter):
    """A store writer that drops the replay's buckets: the store builds every one itself."""

    def write(self, batch):  # type: ignore[no-untyped-def]
        if isinstance(batch, Tables):
            kept = {k: v for k, v in batch.tables.items() if k != "gpu_buckets"}
            batch = Tables(kept, batch.ts, batch.rows)
        return super().write(batch)


@pytest.mark.parametrize("batch_ticks", [None, 97])  # windows on bucket bounds, and not
def test_the_buckets_a_backfill_keeps_are_the_stores_own(
    tmp_path: Path, batch_ticks: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = get_scenario("dev-64").with_overrides(days=0.4)
    built: list[int] = []  # per-GPU levels the store built itself, from samples or a level below
    build = rollups._build_gpu_level
    monkeypatch.setattr(
        rollups, "_build_gpu_level", lambda con, lv, *a: (built.append(lv), build(con, lv, *a))
    )
    with Store(str(tmp_path / "a.duckdb")) as a, Store(str(tmp_path / "b.duckdb")) as b:
        replay(a, sc, 3, batch_ticks=batch_ticks)
        # aligned windows hand every bucket over whole; others leave the shared ones to the SQL
        assert (not built) if batch_ticks is None else (300 in built and len(built) < 100)
        replay(b, sc, 3, batch_ticks=batch_ticks, sink=_SamplesOnly(b))
        for name, q in ROLLUPS.items():
            got, want = a.df(q), b.df(q)
            assert len(got) == len(want) > 0, name
            pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-5, obj=name)
        # the counts a bucket keeps (samples, hot, idle, busy) and the classes are exact
        counts = "SELECT bucket_s, ts, gpu_id, samples, hot_n, idle_n, busy_n FROM gpu_rollup"
        assert a.rows(counts + " ORDER BY ALL") == b.rows(counts + " ORDER BY ALL")


def test_the_windows_hold_whole_buckets_and_hand_them_over(tmp_path: Path) -> None:
    """A backfill cuts its windows at the 6-hour boundaries (llama3-405b: 144 ticks of 5 min
    per window, 16,512 GPUs), so each window carries every bucket of its hours summed."""
    assert window_ticks(16_512, 300.0) == (144, 21_600)
    assert window_ticks(512, 10.0) == (4_320, 21_600)
    assert window_ticks(65_536, 300.0) == (24, 3_600)  # 6 h would be 4.7 M samples a window
    assert window_ticks(16_512, 300.0, 1_000_000) == (72, 21_600)
    assert window_ticks(512, 10.0, 1_000_000) == (2_160, 21_600)
    sc = get_scenario("dev-64").with_overrides(days=1.1, nodes=64)  # 512 GPUs
    with Store(str(tmp_path / "s.duckdb")) as s:  # windows of 1 M samples: 6 h each
        source = prepare(s, sc, 3, window_samples=1_000_000)
        windows = list(source.until(sc.duration_s))
    six_h, step = 21_600 * 1_000_000, 10 * 1_000_000
    assert len(windows) > 4
    for w in windows:
        ts = w.tables["gpu_samples"]["ts"].to_numpy().astype("datetime64[us]").view(np.int64)
        if w is not windows[-1]:  # the next tick starts the next six hours
            assert ts.max() // six_h != (ts.max() + step) // six_h
        per_level = w.tables["gpu_buckets"].to_pandas().groupby("bucket_s")["samples"].sum()
        assert per_level.to_dict() == {300: len(ts), 3600: len(ts), 21_600: len(ts)}


def test_a_bucket_other_samples_reach_is_built_again_from_all_of_them(tmp_path: Path) -> None:
    """A window's whole buckets are kept only while they account for every sample in them:
    samples another source adds to the same hour make the store build the hour again."""
    sc = get_scenario("dev-64").with_overrides(days=0.1)
    syn = Synthesizer(simulate(sc, 4), 4, 10.0, "r")
    ticks = np.arange(1, 359) * 10.0  # the run's first hour but its last tick (3,590 s)
    tables = syn.sample_tables(ticks, (None, 3590.0))
    assert set(tables["gpu_buckets"]["bucket_s"].to_pylist()) == {300}  # the hour is not whole
    late = syn.sample_tables(np.array([3590.0]))  # the hour's last tick, without buckets
    with Store(str(tmp_path / "a.duckdb")) as a, Store(str(tmp_path / "b.duckdb")) as b:
        for st in (a, b):
            st.set_meta({"sample_interval_s": "10"})
            st.append("gpus", syn.gpus_frame())
        a.append_many(tables)
        a.refresh_rollups()
        # rows forged for an hour the window did not hold whole are not taken at their word
        forged = tables["gpu_buckets"].to_pandas().head(64)
        forged = forged.assign(bucket_s=3600, ts=forged["ts"].min(), util_avg=-1.0)
        with pytest.raises(ValueError, match="only with the GPU samples"):
            a.append_many({"gpu_buckets": forged})
        a.append_many({"gpu_samples": late["gpu_samples"], "node_tick": late["node_tick"],
                       "gpu_buckets": forged})  # fmt: skip
        a.refresh_rollups()
        b.append_many({k: v for k, v in tables.items() if k != "gpu_buckets"})
        b.append_many(late)
        b.refresh_rollups()
        q = ROLLUPS["gpu_rollup"]
        got, want = a.df(q), b.df(q)
        assert (got["util_avg"] >= 0).all() and 3600 in set(got["bucket_s"])
        pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-5)
        hour = a.scalar("SELECT sum(samples) FROM gpu_rollup WHERE bucket_s = 3600")
        assert hour == a.scalar("SELECT count(*) FROM gpu_samples") == 359 * syn.n_gpus
