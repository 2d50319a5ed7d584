"""Finished jobs' figures kept at the rollup refresh (``telemetry.derive.job_figures``): the
Jobs page reads them instead of the rollups, and shows the same numbers either way.

The store is ``tests.jobs_fixture``'s (four nodes, known jobs, a sample a minute for four
hours from 00:00): its newest sample is at 03:59, so the 5-minute buckets are complete up to
03:55 and every job ending by then at that level is settled."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from telemetry.derive import job_figures
from telemetry.ingest.seam import Derive
from telemetry.ingest.writer import StoreWriter
from telemetry.queries import jobs as jq
from telemetry.store import Store
from tests.jobs_fixture import T0, build_jobs_store, insert_jobs, job


def _listing(path: Path) -> pd.DataFrame:
    with Store(str(path), read_only=True) as store:
        return jq.jobs(store, jq.JobFilter())


def _kept(path: Path) -> dict[str, dict]:
    with Store(str(path), read_only=True) as store:
        rows = store.df("SELECT * FROM job_figures ORDER BY key").to_dict("records")
    return {r["key"]: r for r in rows}


@pytest.fixture()
def stores(tmp_path: Path) -> tuple[Path, Path]:
    """(the fixture's store with nothing kept, a copy whose figures were kept)."""
    plain = build_jobs_store(tmp_path / "plain.duckdb")
    with Store(str(plain)) as store:  # what a Slurm poll's Derive batch runs after its tables
        assert store.scalar("SELECT count(*) FROM job_figures") == 0  # jobs after the refresh
        StoreWriter(store).write(Derive(None))
        assert store.scalar("SELECT count(*) FROM job_figures") == 5
        assert job_figures.keep(store) == 0  # nothing changed: nothing computed again
    kept = tmp_path / "kept.duckdb"
    shutil.copy(plain, kept)
    with Store(str(plain)) as store, store.transaction() as con:
        con.execute("DELETE FROM job_figures")  # read from the rollups, as before
    return plain, kept


def test_settled_jobs_are_kept_and_read_back_as_computed(stores: tuple[Path, Path]) -> None:
    plain, kept = stores
    rows = _kept(kept)
    # 105 ran 00:00-04:00, read at the hourly level: its last hour is not complete yet
    assert set(rows) == {"slurm:100", "slurm:101", "slurm:102", "slurm:103", "slurm:104"}
    assert rows["slurm:103"]["gpus_seen"] is None or pd.isna(rows["slurm:103"]["gpus_seen"])
    assert rows["slurm:100"]["settled_ts"] == T0 + timedelta(hours=1)
    assert rows["slurm:100"]["used_gpu_hours"] == pytest.approx(2 * 0.8)  # 2 GPUs at 80 %, 1 h
    fresh, read = _listing(plain), _listing(kept)
    pd.testing.assert_frame_equal(fresh, read)  # the same figures, types and order
    with Store(str(kept), read_only=True) as store:
        listed = jq.list_jobs(store, jq.JobFilter())
    assert dict(zip(listed["key"], listed["kept"], strict=True)) == {
        "slurm:100": True, "slurm:101": True, "slurm:102": True, "slurm:103": True,
        "slurm:104": True, "slurm:105": False, "label:research/eval-7": False,
    }  # fmt: skip


def test_a_requeued_job_is_not_read_from_its_old_figures(stores: tuple[Path, Path]) -> None:
    _, kept = stores
    with Store(str(kept)) as store:  # 100 requeued: it runs again 02:00-03:00
        insert_jobs(store, [job(100, ["n0"], 120, 180, "COMPLETED", requeue=1)])
    with Store(str(kept), read_only=True) as store:
        listed = jq.list_jobs(store, jq.JobFilter())
        row = jq.jobs(store, jq.JobFilter()).set_index("key").loc["slurm:100"]
    assert not listed.set_index("key").loc["slurm:100", "kept"]
    assert row["start"] == T0 + timedelta(hours=2)
    assert row["used_gpu_hours"] == pytest.approx(1.6)
    with Store(str(kept)) as store:
        assert job_figures.keep(store) == 1  # kept again, for the job as it is now
    assert _kept(kept)["slurm:100"]["start"] == T0 + timedelta(hours=2)


def test_a_running_job_is_kept_up_to_the_last_complete_bucket(
    stores: tuple[Path, Path],
) -> None:
    _, kept = stores
    with Store(str(kept)) as store:  # 106 runs on n0 since 02:00, polled at 04:00
        insert_jobs(store, [job(106, ["n0"], 120, None, "RUNNING")])
        assert job_figures.keep(store) == 1
        row = _kept_row(store, "slurm:106")
        assert row["end"] == T0 + timedelta(hours=3, minutes=55) and not row["finished"]
        assert row["sampled_gpu_hours"] == pytest.approx(2 * (1 + 55 / 60))
    with Store(str(kept), read_only=True) as store:
        got = jq.jobs(store, jq.JobFilter()).set_index("key").loc["slurm:106"]
    assert got["end"] == T0 + timedelta(hours=4)  # the job's own time: to its last poll
    assert got["used_gpu_hours"] == pytest.approx(0.8 * 2 * (1 + 55 / 60))  # to 03:55


def _kept_row(store: Store, key: str) -> dict:
    return store.df("SELECT * FROM job_figures WHERE key = ?", [key]).to_dict("records")[0]


def test_late_samples_drop_and_recompute_the_jobs_they_change(stores: tuple[Path, Path]) -> None:
    """Slurm 103 ran on n9 00:30-01:30, whose samples of 00:30-00:35 arrive after the others
    (a spool delivered late, one 5-minute bucket): kept with nothing sampled, then computed
    again with them."""
    _, kept = stores
    assert pd.isna(_kept(kept)["slurm:103"]["gpus_seen"])
    with Store(str(kept)) as store:
        gpus = store.df("SELECT * FROM gpus WHERE host = 'n0'")
        gpus = gpus.assign(gpu_id=gpus["gpu_id"] + 100, node_id=9, host="n9",
                           uuid=gpus["uuid"].str.replace("n0", "n9"))  # fmt: skip
        store.append("gpus", gpus.astype({"gpu_id": "int32", "node_id": "int32"}))
        samples = store.df(
            "SELECT * FROM gpu_samples WHERE gpu_id IN (0, 1) AND ts >= ? AND ts < ?",
            [T0 + timedelta(minutes=30), T0 + timedelta(minutes=35)],
        )
        store.append("gpu_samples", samples.assign(gpu_id=samples["gpu_id"] + 100))
        late = T0 + timedelta(minutes=30)  # what the ingest does after a late round
        store.refresh_rollups(since=late)
        job_figures.keep(store, since=late)
        row = _kept_row(store, "slurm:103")
    assert row["gpus_seen"] == 2 and row["used_gpu_hours"] == pytest.approx(2 * 0.8 * 5 / 60)
    assert _kept(kept)["slurm:100"]["used_gpu_hours"] == pytest.approx(1.6)  # kept again


def test_a_store_written_before_the_table_is_served_as_computed(
    stores: tuple[Path, Path],
) -> None:
    plain, kept = stores
    with Store(str(kept)) as store, store.transaction() as con:
        con.execute("DROP TABLE job_figures")
    with Store(str(kept), read_only=True) as store:  # not upgraded: an optional table
        assert not store.has_table("job_figures")
        read = jq.jobs(store, jq.JobFilter())
    pd.testing.assert_frame_equal(_listing(plain), read)


def test_settled_at_is_the_end_of_the_bucket_of_the_last_moment() -> None:
    from datetime import datetime

    assert job_figures.settled_at(datetime(2026, 3, 1, 1), 3600) == datetime(2026, 3, 1, 1)
    assert job_figures.settled_at(datetime(2026, 3, 1, 1, 0, 1), 3600) == datetime(2026, 3, 1, 2)
    # a day-level job's last part is read from 6-hour buckets
    assert job_figures.settled_at(datetime(2026, 3, 1, 7), 86400) == datetime(2026, 3, 1, 12)


def test_problem_jobs_are_the_newest_with_a_problem_not_the_problems_of_the_newest(
    stores: tuple[Path, Path],
) -> None:
    """ "Which jobs wasted their GPUs this week": the problem filter reads the kept figures of
    every job in the range, so the newest problem jobs are listed even when more than the
    listing's limit of newer jobs ran since; the kept figures' problems are the ones the
    page names."""
    _, kept = stores
    with Store(str(kept), read_only=True) as store:
        every = jq.jobs(store, jq.JobFilter())
        flagged = [k for k, p in zip(every["key"], every["problems"], strict=True) if p]
        # 104 idle an hour; 102 failed early, requeued; 105 (not kept: its last hour is not
        # complete) one GPU idle all along
        assert flagged == ["slurm:104", "slurm:102", "slurm:105"]
        for limit in (1, 2, 7):
            got = jq.jobs(store, jq.JobFilter(problems_only=True), limit=limit)
            assert got["key"].tolist() == flagged[:limit]
        # the newest job alone, as before, holds no problem: nothing is lost to the limit
        assert not jq.jobs(store, jq.JobFilter(), limit=1)["problems"].iloc[0]


def test_a_cluster_whose_jobs_all_still_run_keeps_their_figures(tmp_path: Path) -> None:
    path = build_jobs_store(tmp_path / "running.duckdb")
    with Store(str(path)) as store:
        with store.transaction(["slurm_jobs"]) as con:
            con.execute("DELETE FROM slurm_jobs")
        insert_jobs(store, [job(106, ["n0"], 120, None, "RUNNING")])
        assert job_figures.keep(store) == 1
        assert _kept_row(store, "slurm:106")["used_gpu_hours"] == pytest.approx(
            0.8 * 2 * (1 + 55 / 60)
        )


def test_a_kept_jobs_gpus_are_still_shown_one_by_one(stores: tuple[Path, Path]) -> None:
    """A click on a job whose figures are kept shows its GPUs (read by its hosts)."""
    _, kept = stores
    with Store(str(kept), read_only=True) as store:
        gpus = jq.job_gpus(store, "slurm:104")
    assert sorted(zip(gpus["host"], gpus["gpu"], strict=True)) == [("n2", 0), ("n2", 1)]
    assert gpus["idle_gpu_hours"].tolist() == pytest.approx([1.0, 1.0])
