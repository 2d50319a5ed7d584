"""Cached query results depend on the tables they read: a write keeps the results of tables it
did not touch (a scrape round keeps the training curve's), and recomputes the others."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

from telemetry.store import Store
from tests.test_store import _gpus, _samples

T0 = datetime(2026, 3, 1)
TRAIN = "SELECT count(*), max(step) FROM train_metrics WHERE run_id = ?"
GPU = "SELECT count(*), max(ts) FROM gpu_samples"


def _steps(first: int, n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {"run_id": "r", "ts": [T0 + timedelta(seconds=10 * (first + k)) for k in range(n)],
         "step": [first + k for k in range(n)], "tokens": 0.0, "loss": 2.0, "lr": 1e-4,
         "grad_norm": 1.0, "tokens_per_s": 1.0, "mfu": 0.4, "attempt": 1}
    )  # fmt: skip


def _misses(store: Store) -> int:
    return store.cache_stats()["cache_misses"]


def test_a_scrape_round_keeps_the_training_results_and_renews_the_gpu_ones(
    tmp_path: Path,
) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.append_many({"gpus": _gpus(), "train_metrics": _steps(0, 5)})
        store.append("gpu_samples", _samples([T0], 4, 50.0))
        store.refresh_rollups()
        assert store.rows(TRAIN, ["r"]) == [(5, 4)] and store.rows(GPU)[0][0] == 4
        # a scrape round: GPU samples, their per-node sums, the rollups
        store.append("gpu_samples", _samples([T0 + timedelta(seconds=15)], 4, 60.0))
        store.refresh_rollups()
        before = _misses(store)
        assert store.rows(TRAIN, ["r"]) == [(5, 4)]
        assert _misses(store) == before  # kept: no write touched train_metrics
        assert store.rows(GPU) == [(8, T0 + timedelta(seconds=15))]  # recomputed
        assert _misses(store) == before + 1
        # training metrics arrive: their results are recomputed, the GPU ones kept
        store.append("train_metrics", _steps(5, 3))
        assert store.rows(TRAIN, ["r"]) == [(8, 7)]
        assert store.rows(GPU) == [(8, T0 + timedelta(seconds=15))]
        assert _misses(store) == before + 2


def test_a_write_that_does_not_name_its_tables_renews_every_result(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.append_many({"gpus": _gpus(), "train_metrics": _steps(0, 5)})
        assert store.rows(TRAIN, ["r"]) == [(5, 4)]
        assert store.scalar("SELECT count(*) FROM gpus") == 4
        with store.transaction() as con:  # derive, retention, inventory...: any table
            con.execute("DELETE FROM train_metrics WHERE step >= 3")
            con.execute("DELETE FROM gpus WHERE node_id = 1")
        assert store.rows(TRAIN, ["r"]) == [(3, 2)]
        assert store.scalar("SELECT count(*) FROM gpus") == 2
        with store.transaction(["train_metrics"]) as con:  # one that says what it writes
            con.execute("DELETE FROM train_metrics WHERE step = 2")
        assert store.rows(TRAIN, ["r"]) == [(2, 1)]


def test_a_query_through_a_view_or_of_no_table_follows_every_write(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.append("gpus", _gpus())
        store.append("gpu_samples", _samples([T0], 4, 50.0))
        view = "SELECT count(*) FROM gpu_samples_v"  # a view: its tables are not spelled out
        assert store.scalar(view) == 4
        store.append("train_metrics", _steps(0, 1))  # touches neither table behind the view
        before = _misses(store)
        assert store.scalar(view) == 4
        assert _misses(store) == before + 1  # recomputed all the same: the safe side
        store.append("gpu_samples", _samples([T0 + timedelta(seconds=15)], 4, 50.0))
        assert store.scalar(view) == 8


def test_results_no_write_made_useless_survive_the_sweep_of_older_ones(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.append_many({"gpus": _gpus(), "train_metrics": _steps(0, 5)})
        assert store.rows(TRAIN, ["r"]) == [(5, 4)]
        for k in range(1, 20):  # a live store: rounds of samples, each read at a moving time
            store.append("gpu_samples", _samples([T0 + timedelta(seconds=15 * k)], 4, 50.0))
            assert store.scalar("SELECT count(*) FROM gpu_samples WHERE ts <= ?",
                                [T0 + timedelta(seconds=15 * k)]) == 4 * k  # fmt: skip
        kept = [key[1] for key in store._cache._items]
        assert TRAIN in kept  # still valid, still kept
        assert len([q for q in kept if "gpu_samples WHERE" in q]) == 1  # older rounds' dropped


def test_the_per_gpu_rollup_view_keeps_its_results_until_its_levels_are_written(
    tmp_path: Path,
) -> None:
    """``gpu_rollup`` is a view of one table per level whose writers name it: a training write
    keeps its results, a round's refresh renews them."""
    rolled = "SELECT count(*), sum(samples) FROM gpu_rollup WHERE bucket_s = ?"
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.append_many({"gpus": _gpus(), "train_metrics": _steps(0, 5)})
        store.append("gpu_samples", _samples([T0], 4, 50.0))
        store.refresh_rollups()
        assert store.rows(rolled, [300]) == [(4, 4)]
        before = _misses(store)
        store.append("train_metrics", _steps(5, 3))
        assert store.rows(rolled, [300]) == [(4, 4)] and _misses(store) == before
        store.append("gpu_samples", _samples([T0 + timedelta(seconds=15)], 4, 60.0))
        store.refresh_rollups()
        before = _misses(store)
        assert store.rows(rolled, [300]) == [(4, 8)] and _misses(store) == before + 1
