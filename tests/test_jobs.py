"""Jobs as rows (issue 39, items 1-2): the jobs a store knows with what each did with its GPUs,
against figures worked out by hand from tests/jobs_fixture.py's constant samples. What a user
would notice if it were wrong: a job charged for a GPU it did not hold (the label says which),
an idle job not flagged, energy that disagrees with the power, a job without samples shown as
0 % instead of unknown, a filter that lets other users' jobs through."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from telemetry.errors import FactoryFloorError
from telemetry.metrics import jobs_export as jx
from telemetry.metrics.summary import store_summary
from telemetry.queries import TimeRange
from telemetry.queries import jobs as jq
from telemetry.store import Store
from tests.jobs_fixture import T0, build_jobs_store, insert_jobs, job


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    path = build_jobs_store(tmp_path_factory.mktemp("jobs") / "j.duckdb")
    with Store(str(path), read_only=True) as s:
        yield s


def _by_id(store: Store, f: jq.JobFilter | None = None) -> dict[str, dict]:
    df = jq.jobs(store, f or jq.JobFilter())
    return {r["job_id"]: r for r in df.to_dict("records")}


def test_a_job_on_its_nodes_gets_its_gpus_figures(store: Store) -> None:
    j = _by_id(store)["100"]  # n0's two GPUs at 80 %, 400 W, 10,000 MiB for one hour
    assert (j["nodes"], j["gpus"], j["user"], j["account"]) == (1, 2, "alice", "ml")
    assert j["alloc_gpu_hours"] == pytest.approx(2.0)
    assert j["sampled_gpu_hours"] == pytest.approx(2.0)
    assert j["used_gpu_hours"] == pytest.approx(1.6)
    assert j["idle_gpu_hours"] == pytest.approx(0.0)
    assert j["util_pct"] == pytest.approx(80.0)
    assert j["mem_peak_mib"] == pytest.approx(10_000.0)
    assert j["power_w"] == pytest.approx(400.0)
    assert j["energy_kwh"] == pytest.approx(0.8)  # 2 GPUs x 400 W x 1 h
    assert j["problems"] == []


def test_a_labelled_job_counts_only_its_labelled_gpu(store: Store) -> None:
    """101 holds n1's GPU 0 (dcgm-exporter's hpc_job says so); GPU 1 idles at 0 % beside it
    and is not charged to it. Slurm's GPU count (1) is the allocation."""
    j = _by_id(store)["101"]
    assert j["gpus"] == 1 and j["alloc_gpu_hours"] == pytest.approx(2.0)
    assert j["sampled_gpu_hours"] == pytest.approx(2.0)
    assert j["util_pct"] == pytest.approx(50.0) and j["idle_gpu_hours"] == pytest.approx(0.0)
    gpus = jq.job_gpus(store, "slurm:101")
    assert list(zip(gpus["host"], gpus["gpu"], strict=True)) == [("n1", 0)]


def test_a_long_job_reads_hours_and_the_energy_counter(store: Store) -> None:
    """105: n0 and n1 for four hours, read at the hourly level. The counter's first hour
    starts at each GPU's first reading: one minute short of four hours."""
    j = _by_id(store)["105"]
    assert j["level_s"] == 3600 and j["gpus"] == 4
    assert j["used_gpu_hours"] == pytest.approx(0.8 * 8 + 0.5 * 4)
    assert j["idle_gpu_hours"] == pytest.approx(4.0)  # n1's GPU 1, all four hours
    assert j["energy_basis"] == "energy counter"
    assert j["energy_kwh"] == pytest.approx((400 * 2 + 300 * 2) * (4 * 3600 - 60) / 3.6e6)
    assert j["mem_peak_mib"] == pytest.approx(20_000.0)
    assert any("idle 240 min" in p for p in j["problems"])
    per_gpu = jq.job_gpus(store, "slurm:105")
    assert per_gpu["idle_gpu_hours"].tolist() == pytest.approx([0, 0, 0, 4.0])


def test_problems_idle_failed_early_and_requeued(store: Store) -> None:
    jobs = _by_id(store)
    assert jobs["104"]["idle_max_min"] == pytest.approx(60.0)
    assert jobs["104"]["problems"] == [f"a GPU idle 60 min while allocated (> {jq.IDLE_MINUTES})"]
    crashy = jobs["102"]  # its latest record: FAILED after 5 min, the third try
    assert crashy["state"] == "FAILED" and crashy["requeues"] == 2 and crashy["exit_code"] == 1
    assert crashy["idle_gpu_hours"] == pytest.approx(2 * 5 / 60)  # idle, but only 5 minutes
    assert crashy["problems"] == [
        f"FAILED 5.0 min after start (< {jq.FAILED_WITHIN_MIN})",
        "requeued 2 times",
    ]
    flagged = jq.jobs(store, jq.JobFilter(problems_only=True))
    assert sorted(flagged["job_id"]) == ["102", "104", "105"]


def test_a_job_without_samples_is_listed_with_unknown_figures(store: Store) -> None:
    j = _by_id(store)["103"]  # on n9, which sent nothing
    assert j["gpus"] == 2  # one node x the two GPUs a node has here
    assert j["alloc_gpu_hours"] == pytest.approx(2.0)
    for col in ("used_gpu_hours", "idle_gpu_hours", "util_pct", "energy_kwh"):
        assert j[col] is None or j[col] != j[col], col  # None or NaN: unknown, not 0
    assert jq.job_gpus(store, "slurm:103").empty


def test_a_pod_known_only_from_its_labels_spans_its_samples(store: Store) -> None:
    j = _by_id(store)["research/eval-7"]
    assert j["source"] == "label" and j["account"] == "research"
    assert (j["start"], j["end"]) == (datetime(2026, 3, 1, 2), datetime(2026, 3, 1, 4))
    assert j["gpus"] == 2 and j["used_gpu_hours"] == pytest.approx(0.3 * 4)


def test_filters_select_by_state_user_account_partition_name_and_time(store: Store) -> None:
    def ids(**kw: object) -> list[str]:
        return sorted(jq.jobs(store, jq.JobFilter(**kw))["job_id"])  # type: ignore[arg-type]

    assert ids(users=("bob",)) == ["101", "104"]
    assert ids(accounts=("infra",), states=("COMPLETED",)) == ["101", "104"]
    assert ids(partitions=("debug",)) == ["103"]
    assert ids(name="TRAIN") == ["100", "105"]  # any case
    assert ids(name="'; DROP TABLE slurm_jobs; --") == []  # a bound value, not SQL
    # what ran on a node: its name matches a job's node exactly (n1 is not n10), any case
    assert ids(name="N2", tr=TimeRange(datetime(2026, 3, 1), datetime(2026, 3, 2))) == [
        "102", "104"]  # fmt: skip
    assert ids(name="n1") == ["101", "105"]
    later = TimeRange(datetime(2026, 3, 1, 3, 30), datetime(2026, 3, 1, 5))
    assert ids(tr=later) == ["105", "research/eval-7"]


def test_bad_filters_and_days_are_clear_errors() -> None:
    with pytest.raises(FactoryFloorError, match="longer than"):
        jq.JobFilter(name="x" * 500)
    with pytest.raises(FactoryFloorError, match="ends .* before it starts"):
        jq.JobFilter(tr=TimeRange(T0, datetime(2026, 2, 1)))
    for bad in ("2026-02-30", "yesterday", "", "2026-3-1x"):
        with pytest.raises(FactoryFloorError, match="not a day"):
            jx.day_range(bad)


def test_a_days_jobs_and_the_summary_list_the_same_jobs(store: Store) -> None:
    day = jx.day_jobs(store, "2026-03-01")
    assert len(day) == 7 and day.loc[day["job_id"] == "102", "problems"].item() == (
        f"FAILED 5.0 min after start (< {jq.FAILED_WITHIN_MIN}); requeued 2 times"
    )
    assert jx.day_jobs(store, "2026-03-02").empty
    jobs = store_summary(store)["jobs"]
    assert {j["job_id"] for j in jobs} == set(day["job_id"])
    big = next(j for j in jobs if j["job_id"] == "105")
    assert set(big) >= {"job_id", "name", "user", "account", "partition", "state", "start",
                        "end", "nodes", "gpus", "gpu_hours", "idle_gpu_hours", "energy_kwh",
                        "problems"}  # fmt: skip
    assert (big["gpu_hours"], big["idle_gpu_hours"]) == (16.0, 4.0)
    assert big["start"] == "2026-03-01T00:00:00" and big["problems"]
    assert store_summary(store, jobs_days=0.01)["jobs"] == [
        j for j in jobs if j["end"] >= "2026-03-01T03:45"
    ]


def test_an_older_store_without_the_added_columns_still_lists_jobs(tmp_path: Path) -> None:
    """A store written before slurm_jobs had account/gpus, served read-only as it is."""
    path = build_jobs_store(tmp_path / "old.duckdb")
    import duckdb

    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE slurm_jobs DROP COLUMN account")
    con.execute("ALTER TABLE slurm_jobs DROP COLUMN gpus")
    con.close()
    with Store(str(path), read_only=True) as s:
        j = _by_id(s)["101"]
        assert j["account"] != j["account"]  # NaN: not known
        assert j["gpus"] == 2  # its node's GPUs, not Slurm's count


def test_a_job_sharing_its_node_gets_its_share_of_the_nodes_figures(tmp_path: Path) -> None:
    """106 holds one of n0's two GPUs for an hour, and no label says which: its GPU-hours and
    energy are half the node's, its utilization the node's mean; said so."""
    path = build_jobs_store(tmp_path / "shared.duckdb")
    with Store(str(path)) as s:
        insert_jobs(s, [job(106, ["n0"], 0, 60, "COMPLETED", gpus=1)])
        j = _by_id(s)["106"]
        assert j["attribution"] == "nodes, shared: 1 of 2 GPUs"
        assert j["alloc_gpu_hours"] == pytest.approx(1.0)
        assert j["sampled_gpu_hours"] == pytest.approx(1.0)
        assert j["used_gpu_hours"] == pytest.approx(0.8) and j["util_pct"] == pytest.approx(80)
        assert j["energy_kwh"] == pytest.approx(0.4)
        assert _by_id(s)["100"]["attribution"] == "nodes"
        assert _by_id(s)["101"]["attribution"] == "label"


def test_a_job_without_a_gpu_count_had_none_where_the_cluster_counts_them(tmp_path: Path) -> None:
    """Where Slurm's accounting counts GPUs (AllocTRES gres/gpu), a job without a count is a
    CPU-only job: 0 GPUs, as the cluster's day accounting counts it. Only a cluster where no
    job has a count falls back to its nodes x the GPUs per node."""
    path = build_jobs_store(tmp_path / "cpu.duckdb")
    with Store(str(path)) as s:
        insert_jobs(s, [job(107, ["n1"], 0, 60, "COMPLETED", gpus=None, name="cpu-only"),
                        {**job(108, ["n1"], 0, 60, "COMPLETED", gpus=None), "cluster": "c2"}])
        jobs = _by_id(s)
    assert jobs["107"]["gpus"] == 0 and not jobs["107"]["alloc_gpu_hours"]
    assert jobs["108"]["gpus"] == 2  # cluster c2 counts no job's GPUs: its node's two


def test_a_clicked_job_whose_id_holds_a_hash_shows_its_own_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job id with "#" in it (a label's job, a run id) is that job's, not cut at the "#"
    the grid's row ids use for repeats."""
    from app.main import create_app
    from tests.conftest import bound_store

    path = build_jobs_store(tmp_path / "s.duckdb")
    with Store(str(path)) as st:
        insert_jobs(st, [job(7, ["n0"], 0, 60, "COMPLETED") | {"job_id": "eval#2"}])
    for st in bound_store(path, monkeypatch):
        create_app(st)
        from app.pages import jobs as page  # registered with an app

        rows = [{"id": "slurm:eval#2", "source": "slurm", "job_id": "eval#2"}]
        shown = str(page._detail({"rowId": "slurm:eval#2"}, rows))
    assert "Job eval#2 (slurm): 2 GPUs on 1 node: n0" in shown


def test_a_shared_jobs_gpus_say_it_holds_fewer_than_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A click on a job holding one of its node's two GPUs, with no label saying which, shows
    both GPUs and says it holds one of them (not "2 GPUs", as if both were its own)."""
    from app.main import create_app
    from tests.conftest import bound_store

    path = build_jobs_store(tmp_path / "s.duckdb")
    with Store(str(path)) as st:
        insert_jobs(st, [job(106, ["n0"], 0, 60, "COMPLETED", gpus=1)])
    for st in bound_store(path, monkeypatch):
        create_app(st)
        from app.pages import jobs as page  # registered with an app

        shared, whole = str(page.detail_for("slurm:106")), str(page.detail_for("slurm:100"))
    assert "Job 106 (slurm) holds 1 of the 2 GPUs of its 1 node and no label says which" in shared
    assert "Job 100 (slurm): 2 GPUs on 1 node: n0" in whole
