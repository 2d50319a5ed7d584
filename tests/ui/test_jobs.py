"""The Jobs page in headless Chromium: tests/jobs_fixture.py's jobs over their samples, and the
jobs of the real test cluster's Slurm (recorded: tests/fixtures/slurm/drained) beside them in
one store. Filter by user, pick problem jobs, click a job to see its GPUs; the Slurm jobs of
the morning they ran, with their end states."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from telemetry.collect.slurm.slurm_client import SlurmClient, recorded_runner
from telemetry.collect.slurm.slurm_source import SlurmSource
from telemetry.ingest.daemon import collect
from telemetry.ingest.writer import StoreWriter
from telemetry.store import Store
from tests.conftest import Server, collect_errors, start_server
from tests.jobs_fixture import build_jobs_store

REC = Path(__file__).parent.parent / "fixtures" / "slurm" / "drained"


@pytest.fixture(scope="module")
def jobs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("jobs-ui")
    path = build_jobs_store(tmp / "j.duckdb")
    with Store(str(path)) as store:
        src = SlurmSource(SlurmClient(runner=recorded_runner(str(REC))),
                          since=datetime(2020, 1, 1), follow=False)  # fmt: skip
        collect(src, StoreWriter(store), datetime(2026, 11, 28, 22, 20))
    server = start_server(["serve", "--store", str(path)], tmp / "serve.log")
    yield server
    server.stop()


def _rows(page: Page) -> list[str]:
    return page.locator("#jobs-table .ag-row .ag-cell[col-id='job_id']").all_inner_texts()


def test_filter_select_a_job_and_see_its_gpus(jobs_server: Server, page: Page) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1600, "height": 1400})
    page.goto(jobs_server.url + "/jobs#from=2026-03-01T00:00:00&to=2026-03-01T04:00:00")
    grid = page.locator("#jobs-table")
    expect(grid).to_contain_text("train-big", timeout=20_000)
    expect(page.locator("#jobs-count")).to_have_text("7")
    # one user's jobs
    page.locator("#jobs-users").click()
    page.get_by_role("option", name="bob").click()
    expect(page.locator("#jobs-count")).to_have_text("2", timeout=20_000)
    assert sorted(_rows(page)) == ["101", "104"]
    expect(grid).not_to_contain_text("train-big")
    expect(grid).to_contain_text("a GPU idle 60 min while allocated")
    # the idle job's GPUs during its time: n2's two, idle an hour each
    page.locator("#jobs-table .ag-row", has_text="idler").locator(".ag-cell").first.click()
    detail = page.locator("#jobs-detail")
    expect(detail).to_contain_text("Job 104 (slurm): 2 GPUs on 1 node: n2", timeout=20_000)
    cells = page.locator("#jobs-gpus-table .ag-row .ag-cell[col-id='idle_gpu_hours']")
    expect(cells).to_have_text(["1", "1"])
    assert not errors, errors


def test_problem_jobs_only(jobs_server: Server, page: Page) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1600, "height": 1400})
    page.goto(jobs_server.url + "/jobs#from=2026-03-01T00:00:00&to=2026-03-01T04:00:00")
    expect(page.locator("#jobs-count")).to_have_text("7", timeout=20_000)
    page.locator("#jobs-problems").check()
    expect(page.locator("#jobs-count")).to_have_text("3", timeout=20_000)
    assert sorted(_rows(page)) == ["102", "104", "105"]
    expect(page.locator("#jobs-table")).to_contain_text("requeued 2 times")
    assert not errors, errors


def test_the_real_clusters_slurm_jobs_are_listed(jobs_server: Server, page: Page) -> None:
    """The recorded cluster's evening: its jobs by their latest record (ff-nodefail was
    requeued after its NODE_FAIL, then cancelled), each a row, with no GPU samples (the test
    cluster's node has no GPU) said as unknown, not 0."""
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1600, "height": 1400})
    page.goto(jobs_server.url + "/jobs#from=2026-11-28T22:00:00&to=2026-11-28T23:00:00")
    grid = page.locator("#jobs-table")
    for state in ("TIMEOUT", "PREEMPTED", "FAILED", "CANCELLED"):
        expect(grid).to_contain_text(state, timeout=20_000)
    expect(grid).to_contain_text("ff-nodefail")
    expect(grid).to_contain_text("FAILED 0.0 min after start")  # ff-failed: exit 1 at once
    page.locator("#jobs-table .ag-row", has_text="ff-nodefail").locator(".ag-cell").first.click()
    expect(page.locator("#jobs-detail")).to_contain_text("No GPU samples", timeout=20_000)
    assert not errors, errors


def test_download_a_days_jobs_as_csv(jobs_server: Server, page: Page) -> None:
    errors = collect_errors(page)
    page.goto(jobs_server.url + "/jobs#from=2026-03-01T00:00:00&to=2026-03-01T04:00:00")
    expect(page.locator("#jobs-count")).to_have_text("7", timeout=20_000)
    expect(page.locator("#jobs-day")).to_have_value("2026-03-01")  # the range's last day
    with page.expect_download() as got:
        page.locator("#jobs-csv-button").click()
    assert got.value.suggested_filename == "factoryfloor-jobs-2026-03-01.csv"
    rows = list(csv.DictReader(io.StringIO(Path(got.value.path()).read_text())))
    assert sorted(r["job_id"] for r in rows) == [
        "100", "101", "102", "103", "104", "105", "research/eval-7"]  # fmt: skip
    assert next(r for r in rows if r["job_id"] == "105")["idle_gpu_hours"] == "4.0"
    page.locator("#jobs-day").fill("2026-03-02")  # a day without jobs: the header only
    with page.expect_download() as got:
        page.locator("#jobs-csv-button").click()
    assert Path(got.value.path()).read_text().strip().startswith('"job_id","name","user"')
    assert len(Path(got.value.path()).read_text().strip().splitlines()) == 1
    assert not errors, errors


@pytest.mark.parametrize("width", [1366, 1920])
def test_the_jobs_grid_fits_a_laptop(jobs_server: Server, page: Page, width: int) -> None:
    """No table past its card or scrolling sideways, no cell cut (test_fit's check: the page
    has no chart, which that test waits for)."""
    from tests.ui.test_fit import OVERFLOWS

    errors = collect_errors(page)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(jobs_server.url + "/jobs#from=2026-03-01T00:00:00&to=2026-03-01T04:00:00")
    expect(page.locator("#jobs-count")).to_have_text("7", timeout=20_000)
    page.locator("#jobs-table .ag-row", has_text="train-big").locator(".ag-cell").first.click()
    expect(page.locator("#jobs-gpus-table")).to_contain_text("n1", timeout=20_000)
    page.wait_for_timeout(500)
    assert page.evaluate(OVERFLOWS) == []
    assert not errors, errors


def test_the_header_shows_the_selected_runs_own_time(jobs_server: Server, page: Page) -> None:
    """The store spans 2026-03-01 (samples) to the recorded cluster's evening; a Slurm job's
    own run (slurm-15, ff-nodefail) is shown over its own minutes, not the store's months."""
    errors = collect_errors(page)
    page.goto(jobs_server.url + "/jobs#run=slurm-15&range=all")
    stamp = page.locator("#last-updated")
    expect(stamp).to_contain_text("Data 2026-11-28 22:13", timeout=20_000)
    expect(stamp).not_to_contain_text("2026-03-01")
    page.goto(jobs_server.url + "/jobs#run=slurm-1&range=all")  # ff-low, preempted earlier
    expect(stamp).to_contain_text("Data 2026-11-28 22:11", timeout=20_000)
    assert not errors, errors
