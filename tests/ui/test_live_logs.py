"""``serve --logs GLOB --run R``: a run whose log stopped raises "Run stalled" on the Overview,
and once the job resumes from a checkpoint the interruption appears on Failures by itself
(the log is followed, the run re-derived, the page refreshed), in headless Chromium."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import start_server
from tests.test_cluster_follow import lines


def test_a_stall_alerts_and_the_resumed_run_shows_its_interruption(
    page: Page, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    job = logs / "slurm-9.out"
    now = datetime.utcnow().replace(microsecond=0)
    job.write_text(lines(10, 300, now - timedelta(minutes=30)))  # silent for the last 20 min
    store = tmp_path / "live.duckdb"
    server = start_server(
        ["serve", "--store", str(store), "--run", "live-1", "--logs", str(logs / "*.out")],
        tmp_path / "serve.log",
    )
    try:
        page.goto(server.url + "/")
        expect(page.locator("#ov-alerts")).to_contain_text("Run stalled", timeout=30_000)
        expect(page.locator("#ov-alerts")).to_contain_text("step 300")
        with open(job, "a") as fh:  # the job is back from iteration 200
            t = datetime.utcnow().replace(microsecond=0)
            fh.write(f"[{t:%Y-%m-%d %H:%M:%S}] loading checkpoint from /ckpt at iteration 200\n")
            fh.write(lines(210, 230, t + timedelta(seconds=5), every_s=1.0))
        page.goto(server.url + "/failures")
        row = page.locator("#fail-int-table .ag-row", has=page.get_by_text("inferred"))
        expect(row).to_have_count(1, timeout=45_000)
        expect(row).to_contain_text("step 200")
    finally:
        server.stop()
