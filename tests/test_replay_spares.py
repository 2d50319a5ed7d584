"""The replay's job is the GPUs that ran it, when they ran them (issue 57, 6): a node lost to a
failure counts for the job up to its failure, the hot spare that replaced it from its swap-in.
Before, the job was the GPUs labelled at the end over the whole run: the spare for all 20 h
(its idle hours a false "GPU idle 1073 min" problem) and the failed node not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from telemetry.queries import data_extent
from telemetry.queries.gpus import heatmap
from telemetry.queries.jobs import JobFilter, job_gpus, jobs
from telemetry.queries.overview import fleet_latest
from telemetry.store import Store
from tests.conftest import build_store

GPUS_PER_NODE = 8


@pytest.fixture(scope="module")
def demo_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 h of dev-64, seed 0 (the demo's): a node is lost at about 16.6 h and a spare swapped
    in; 60 s samples keep it small."""
    return build_store(tmp_path_factory.mktemp("spares") / "s.duckdb", seed=0, days=20 / 24,
                       interval_s=60.0)  # fmt: skip


def _lost(store: Store) -> tuple[str, object]:
    rows = store.rows("SELECT host, ts FROM interruptions WHERE node_lost ORDER BY ts")
    assert len(rows) == 1, rows  # the scenario this test reads: one node lost
    return rows[0]


def test_failed_node_counts_to_its_failure_and_spare_from_its_swap_in(demo_like: Path) -> None:
    with Store(str(demo_like), read_only=True) as store:
        failed, at = _lost(store)
        job = jobs(store, JobFilter()).assign(level_s=lambda d: d["level_s"].astype(float))
        assert len(job) == 1
        row = job.iloc[0]
        per_host = job_gpus(store, row["key"]).groupby("host")["sampled_gpu_hours"].sum()
        # the failed node ran the job 16.6 h: it is one of its nodes
        assert failed in per_host.index
        spares = store.rows(
            "SELECT DISTINCT g.host FROM gpu_job_spans s JOIN gpus g USING (gpu_id)"
            " WHERE s.start_ts = ?", [at],
        )  # fmt: skip
    assert len(spares) == 1
    spare = spares[0][0]
    before = (at - row["start"]).total_seconds() / 3600
    after = (row["end"] - at).total_seconds() / 3600
    # for those hours
    # (to a bucket: the job is read from buckets of level_s, one the swap cuts counts by the
    # share of its time before or after it)
    bucket = GPUS_PER_NODE * row["level_s"] / 3600
    assert per_host[failed] == pytest.approx(GPUS_PER_NODE * before, abs=bucket)
    # the spare ran it from the swap-in only, not the whole run
    assert per_host[spare] == pytest.approx(GPUS_PER_NODE * after, abs=bucket)
    assert after < 5 < before
    # 64 GPUs held at once, 9 nodes ran it; every sampled GPU-hour is one the job held
    assert row["gpus"] == 64
    assert row["nodes"] == 9
    assert row["sampled_gpu_hours"] <= row["alloc_gpu_hours"] + 1e-6


def test_spare_idle_before_its_swap_in_is_no_problem_of_the_job(demo_like: Path) -> None:
    """The spare's idle hours before it joined are not the job's: none of its GPUs is idle
    longer than the job held it, nor is the job's most idle GPU."""
    with Store(str(demo_like), read_only=True) as store:
        _failed, at = _lost(store)
        row = jobs(store, JobFilter()).iloc[0]
        per_gpu = job_gpus(store, row["key"])
    after_min = (row["end"] - at).total_seconds() / 60
    held = per_gpu[per_gpu["sampled_gpu_hours"] * 60 <= after_min + 1]
    assert len(held) == GPUS_PER_NODE  # the spare's 8 GPUs, each held only since the swap
    assert (held["idle_max_min"] <= after_min + 1).all()
    assert row["idle_max_min"] < after_min


def test_fleet_utilization_separates_the_jobs_gpus_from_spares(demo_like: Path) -> None:
    """At the end the job runs on 64 GPUs at ~98 %, beside a hot spare's 8 idle GPUs and the
    repaired node's 8: the fleet mean (78.7 % on the demo) is not the job's utilization."""
    with Store(str(demo_like), read_only=True) as store:
        fleet = fleet_latest(store)
    assert fleet["roles"] == {"job": 64, "out of the job": 8, "spare": 8}
    assert fleet["util_job"] > 95
    assert fleet["util_avg"] < 85  # the 16 idle GPUs pull the whole fleet's mean down


def test_a_spare_that_ran_no_job_is_the_heatmaps_last_row_and_no_fault(demo_like: Path) -> None:
    """The demo's heatmap put its idle spares on top in alarm red: a spare that never ran the
    job ranks last, every cell of it ``off`` (drawn in greys)."""
    with Store(str(demo_like), read_only=True) as store:
        tr = data_extent(store)
        assert tr is not None
        cells = heatmap(store, tr, "util").cells
    last = cells[cells["rank"] == cells["rank"].max()]
    assert set(last["host"]) == {"h100-0009"} and last["off"].all()


def test_spans_are_written_as_the_replay_reaches_them(tmp_path: Path) -> None:
    """A replay stopped before the node is lost (as a live one is, up to now) holds no span
    from the future: the job's 64 GPUs from its start, none ended, no spare in it."""
    path = build_store(tmp_path / "early.duckdb", seed=0, days=20 / 24, interval_s=60.0,
                       until_s=10 * 3600.0)  # fmt: skip
    with Store(str(path), read_only=True) as store:
        got = store.rows(
            "SELECT count(*), count(end_ts), count(DISTINCT start_ts), max(g.node_id)"
            " FROM gpu_job_spans JOIN gpus g USING (gpu_id)"
        )
    assert got == [(64, 0, 1, 7)]
