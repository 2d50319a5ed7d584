"""``factoryfloor jobs --store S --day D [--csv FILE|-]`` and ``summary --json``'s ``jobs``, run
as the real entry point in a subprocess over tests/jobs_fixture.py's store."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.jobs_fixture import build_jobs_store

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_jobs_store(tmp_path_factory.mktemp("jobs-cli") / "j.duckdb")


def test_a_days_jobs_as_csv_on_stdout_and_in_a_file(path: Path, tmp_path: Path) -> None:
    p = cli("jobs", "--store", str(path), "--day", "2026-03-01")
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert len(rows) == 7
    idler = next(r for r in rows if r["job_id"] == "104")
    assert (idler["user"], idler["account"], idler["gpu_hours"], idler["idle_gpu_hours"]) == (
        "bob", "infra", "2.0", "2.0")  # fmt: skip
    assert idler["problems"].startswith("a GPU idle 60 min")
    out = tmp_path / "day.csv"
    p = cli("jobs", "--store", str(path), "--day", "2026-03-01", "--csv", str(out))
    assert p.returncode == 0 and "7 jobs of 2026-03-01 written" in p.stderr
    assert list(csv.DictReader(out.open())) == rows
    p = cli("jobs", "--store", str(path), "--day", "2026-03-05")  # a day without jobs
    assert p.returncode == 0 and p.stdout.startswith('"job_id","name","user","account"')
    assert len(p.stdout.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--day", "2026-02-30"], "not a day: '2026-02-30' (expected YYYY-MM-DD)"),
        (["--day", "last week"], "not a day"),
        (["--day", "2026-03-01", "--csv", "/nonexistent/dir/x.csv"], "cannot write"),
    ],
)
def test_bad_arguments_are_clear_errors(path: Path, args: list[str], message: str) -> None:
    p = cli("jobs", "--store", str(path), *args)
    assert p.returncode == 1 and message in p.stderr and "Traceback" not in p.stderr


def test_a_missing_store_and_a_missing_day_are_errors(tmp_path: Path) -> None:
    p = cli("jobs", "--store", str(tmp_path / "none.duckdb"), "--day", "2026-03-01")
    assert p.returncode == 1 and "does not exist" in p.stderr
    assert not (tmp_path / "none.duckdb").exists()  # not created by asking
    p = cli("jobs", "--store", str(tmp_path / "none.duckdb"))
    assert p.returncode == 2 and "--day" in p.stderr


def test_summary_json_lists_the_last_days_jobs(path: Path) -> None:
    p = cli("summary", "--store", str(path), "--json")
    assert p.returncode == 0, p.stderr
    jobs = {j["job_id"]: j for j in json.loads(p.stdout)["jobs"]}
    assert set(jobs) == {"100", "101", "102", "103", "104", "105", "research/eval-7"}
    assert jobs["102"]["problems"] == ["FAILED 5.0 min after start (< 10)", "requeued 2 times"]
    assert jobs["105"]["energy_kwh"] == pytest.approx(5.577, abs=1e-3)
    # "what ran on node X": each job's nodes, as Slurm lists them, a label's job its hosts
    assert jobs["105"]["nodelist"] == "n0,n1" and jobs["research/eval-7"]["nodelist"] == "n3"
    p = cli("summary", "--store", str(path), "--json", "--jobs-days", "0")
    assert p.returncode == 2 and "--jobs-days" in p.stderr


def test_a_run_imported_from_logs_is_a_job_on_its_ranks_hosts(tmp_path: Path) -> None:
    """The cluster fixture's night, imported from its logs (no Slurm, no samples): one job
    over the run's time with the 64 GPUs its log states; its nodes are not known (no rank
    said where it ran), so none are made up."""
    from tests.conftest import imported_night

    store = imported_night(tmp_path)
    p = cli("summary", "--store", str(store), "--json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    (run,) = summary["runs"]
    (job,) = [j for j in summary["jobs"] if j["source"] == "log"]
    assert job["job_id"] == run["run_id"] == "atlas-70b" and job["nodes"] is None
    assert job["gpus"] == 64 and job["start"] is not None and job["end"] > job["start"]
    hours = (datetime.fromisoformat(job["end"]) - datetime.fromisoformat(job["start"]))
    assert job["gpu_hours"] == pytest.approx(64 * hours.total_seconds() / 3600, abs=1e-3)
