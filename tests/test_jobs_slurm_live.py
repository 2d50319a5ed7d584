"""The jobs of a real Slurm (tests/slurm_fixture.py: munge, slurmdbd, slurmctld and slurmd from
Debian's packages, the jobs made by sbatch, scancel and scontrol) as Factory Floor lists them:
``factoryfloor import --slurm`` as written, then ``factoryfloor jobs`` and the Jobs page in
Chromium. Each job is one row (its latest record, with its requeues), its end state as Slurm
said it, and the failures within minutes of their start flagged."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, cli, collect_errors, start_server
from tests.slurm_fixture import SlurmCluster, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time


@pytest.fixture(scope="module")
def imported(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    store = tmp_path_factory.mktemp("jobs-slurm") / "s.duckdb"
    p = cli("import", "--store", str(store), "--slurm",
            env={"SLURM_CONF": str(slurm_cluster.conf)}, timeout=180)  # fmt: skip
    assert p.returncode == 0, p.stderr
    return store


def _span(store: Path) -> tuple[object, object]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute("SELECT min(start_ts), max(coalesce(end_ts, polled_ts)) FROM "
                           "slurm_jobs WHERE start_ts IS NOT NULL").fetchone()  # fmt: skip
    finally:
        con.close()


def test_the_days_jobs_as_slurm_ended_them(slurm_cluster: SlurmCluster, imported: Path) -> None:  # noqa: F811
    start, _ = _span(imported)
    p = cli("jobs", "--store", str(imported), "--day", f"{start:%Y-%m-%d}")
    assert p.returncode == 0, p.stderr
    rows = {r["job_id"]: r for r in csv.DictReader(io.StringIO(p.stdout))}
    j = slurm_cluster.jobs
    assert rows[j["failed"]]["state"] == "FAILED"
    assert "FAILED" in rows[j["failed"]]["problems"]  # failed at once: within 10 minutes
    assert rows[j["timeout"]]["state"] == "TIMEOUT"
    assert rows[j["oom"]]["state"] == "OUT_OF_MEMORY" and rows[j["oom"]]["problems"]
    assert rows[j["preempted"]]["state"] == "PREEMPTED"
    assert rows[j["cancelled"]]["state"] == "CANCELLED"
    # one row per job, its latest record: the requeued job as sacct last reported it
    assert rows[j["requeued"]]["state"] in ("REQUEUED", "CANCELLED")
    assert sum(r["name"] == "ff-requeue" for r in rows.values()) == 1
    assert rows[j["completed"]]["state"] == "COMPLETED" and not rows[j["completed"]]["problems"]
    assert all(r["partition"] for r in rows.values())
    # the two users' GPU jobs in their accounts, with the GPUs Slurm allocated (AllocTRES)
    alice, bob = rows[j["alice-train"]], rows[j["bob-eval"]]
    assert (alice["user"], alice["account"], alice["gpus"]) == ("ffalice", "ml", "4")
    assert (bob["user"], bob["account"], bob["gpus"]) == ("ffbob", "research", "2")
    assert rows[j["bob-debug"]]["state"] == "FAILED"


@pytest.fixture(scope="module")
def server(imported: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(["serve", "--store", str(imported)],
                     tmp_path_factory.mktemp("jobs-slurm-serve") / "serve.log")  # fmt: skip
    yield s
    s.stop()


def test_the_real_clusters_jobs_on_the_jobs_page(server: Server, imported: Path,
                                                  page: Page) -> None:  # fmt: skip
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1600, "height": 1400})
    start, end = _span(imported)
    lo, hi = start - timedelta(minutes=5), end + timedelta(minutes=5)  # type: ignore[operator]
    page.goto(server.url + f"/jobs#from={lo:%Y-%m-%dT%H:%M:%S}&to={hi:%Y-%m-%dT%H:%M:%S}")
    grid = page.locator("#jobs-table")
    for text in ("ff-oom", "OUT_OF_MEMORY", "ff-failed", "TIMEOUT", "PREEMPTED", "llama-8b"):
        expect(grid).to_contain_text(text, timeout=20_000)
    page.locator("#jobs-states").click()
    page.get_by_role("option", name="OUT_OF_MEMORY").click()
    expect(page.locator("#jobs-count")).to_have_text("1", timeout=20_000)
    expect(grid).to_contain_text("ff-oom")
    expect(grid).not_to_contain_text("llama-8b")
    assert not errors, errors
