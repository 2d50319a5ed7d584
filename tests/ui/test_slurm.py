"""Slurm on the pages, in headless Chromium: a store filled by the Slurm source from recordings
of the real test cluster (tests/fixtures/slurm/), plus a run's step stream stopped at the
preemption. GPUs shows the node's Slurm state and drain reason, Failures the node events and
job ends (NODE_FAIL, TIMEOUT, PREEMPTED) and the planned interruption, and the job filter on
Overview lists the jobs of the range."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from telemetry.collect.slurm.slurm_client import SlurmClient, recorded_runner
from telemetry.collect.slurm.slurm_source import SlurmSource
from telemetry.ingest.daemon import collect
from telemetry.ingest.records import store_records
from telemetry.ingest.writer import StoreWriter
from telemetry.store import Store
from tests.conftest import Server, collect_errors, start_server
from tests.slurm_fixture import XID_REASON
from tests.ui.test_readable import scroll_near

REC = Path(__file__).parent.parent / "fixtures" / "slurm" / "drained"
META = json.loads((REC / "cluster.json").read_text())


@pytest.fixture(scope="module")
def slurm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("slurm-ui")
    path = tmp / "s.duckdb"
    with Store(str(path)) as store:
        start = datetime(2026, 11, 28, 22, 0)  # the recording's evening: ff-low preempted
        recs = [{"run": "low", "step": i, "ts": (start + timedelta(seconds=30 * i)).isoformat(),
                 "loss": 2.0} for i in range(30)]  # fmt: skip
        assert store_records(store, "train_metrics", recs).stored == 30
        client = SlurmClient(runner=recorded_runner(str(REC)))
        src = SlurmSource(client, since=datetime(2020, 1, 1), follow=False,
                          run_from_job="^ff-(low)$")  # fmt: skip
        collect(src, StoreWriter(store), datetime(2026, 11, 28, 22, 20))
    server = start_server(["serve", "--store", str(path)], tmp / "serve.log")
    yield server
    server.stop()


def test_gpus_page_shows_the_drain_reason(slurm_server: Server, page: Page) -> None:
    errors = collect_errors(page)
    page.goto(slurm_server.url + "/gpus#range=all")
    scroll_near(page, "#slurm-nodes")  # at the page's bottom: drawn when scrolled near
    table = page.locator("#slurm-nodes")
    expect(table).to_contain_text("XID 79 GPU fell off the bus", timeout=20_000)
    expect(table).to_contain_text("IDLE+DRAIN")
    expect(table).to_contain_text("root")
    assert not errors, errors


def test_failures_page_lists_slurm_events_and_job_ends(slurm_server: Server, page: Page) -> None:
    errors = collect_errors(page)
    # the training run the page opens on is "low"; its whole run holds only its preemption,
    # so the view is widened to the evening every other job ended in
    page.goto(slurm_server.url + "/failures#from=2026-11-28T21:00:00&to=2026-11-28T23:30:00")
    events = page.locator("#slurm-events")
    for state in ("NODE_FAIL", "TIMEOUT", "PREEMPTED"):
        expect(events).to_contain_text(state, timeout=20_000)
    expect(events).to_contain_text("XID 79 GPU fell off the bus (set by root)")
    assert not errors, errors


def test_overview_job_filter_lists_the_jobs(slurm_server: Server, page: Page) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1400, "height": 3000})  # the popover opens below the card
    page.goto(slurm_server.url + "/#range=all")
    page.locator("#overview-slurm-job").scroll_into_view_if_needed()
    page.locator("#overview-slurm-job").click()
    page.get_by_role("option", name="ff-nodefail").first.click()
    expect(page.locator("#overview-slurm-job-gpus")).to_contain_text(
        "No GPU samples", timeout=20_000
    )
    assert not errors, errors


def test_a_job_known_only_from_slurm_is_shown_over_its_own_time(
    slurm_server: Server, page: Page
) -> None:
    """The page opens on the training run, not on the newest Slurm job; picking the job's own
    run (no GPU samples, no metrics: only accounting) shows its time, where it ended
    NODE_FAIL, instead of the training run's range where it has nothing."""
    errors = collect_errors(page)
    page.goto(slurm_server.url + "/failures")
    expect(page.locator("#run-select")).to_contain_text("low", timeout=20_000)
    page.goto(slurm_server.url + f"/failures#run=slurm-{META['jobs']['node_fail']}&range=all")
    events = page.locator("#slurm-events")
    expect(events).to_contain_text("NODE_FAIL", timeout=20_000)
    expect(events).not_to_contain_text("PREEMPTED")  # another job's end, at another time
    assert not errors, errors


def test_gpus_page_shows_where_the_clusters_gpu_hours_went(
    slurm_server: Server, page: Page
) -> None:
    """The real cluster's day (its node has 8 GPUs as Slurm gres): the GPU jobs of ml and
    research and root's exclusive ones are allocated by their AllocTRES (157 GPU-seconds),
    root's CPU-only jobs none; the node drained at the end of the history is down from then
    on. The chart stacks the four parts; its allocated bar's hover splits it by account."""
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1400, "height": 1200})
    page.goto(slurm_server.url + "/gpus")
    scroll_near(page, "#accounting-summary")  # at the page's bottom: drawn when scrolled near
    summary = page.locator("#accounting-summary")
    # ff-low 8 x 1 s + ff-urgent 8 x 2 s + alice 4 x 20 s + 1 x 10 s + bob 2 x 20 s + 1 x 3 s
    expect(summary).to_contain_text("Newest day 2026-11-28 (UTC)", timeout=20_000)
    expect(summary).to_contain_text("allocated 0.044 GPU-h")
    expect(summary).to_contain_text("planned down (maintenance) 0.000 GPU-h")
    accounts = page.locator("#accounting-accounts")
    for account, hours in (("ml", "0.025"), ("research", "0.012"), ("root", "0.007")):
        row = accounts.locator(".ag-row", has=page.get_by_text(account, exact=True))
        expect(row).to_contain_text(hours)
    users = page.locator("#accounting-users")
    for user, hours in (("ffalice", "0.025"), ("ffbob", "0.012"), ("root", "0.007")):
        row = users.locator(".ag-row", has=page.get_by_text(user, exact=True))
        expect(row).to_contain_text(hours)
    chart = page.locator("#accounting-chart .js-plotly-plot")
    expect(chart.locator(".legendtext")).to_have_text(
        ["allocated", "idle", "down / drained", "planned down (maintenance)"]
    )
    data = chart.evaluate("el => el._fullData.map(t => [t.name, Array.from(t.y), t.customdata])")
    by = {name: (y, custom) for name, y, custom in data}
    down_h = by["down / drained"][0]
    assert len(down_h) == 1 and down_h[0] > 0  # drained 22:16 to the day's end
    split = by["allocated"][1][0][1]  # the allocated bar's hover: by account, largest first
    assert split.index("ml: 0.025 GPU-h") < split.index("research: 0.012 GPU-h")
    # the day's one bar is drawn as a day, not a hairline, under a date tick (a lone bar on a
    # date axis autoscaled to a millisecond either side, its ticks '23:59:59.9996')
    bar_px, plot_px = chart.evaluate(
        """el => [Math.max(...[...el.querySelectorAll('.bars path')]
                              .map(p => p.getBoundingClientRect().width)),
                  el.querySelector('.nsewdrag').getBoundingClientRect().width]"""
    )
    assert bar_px > 0.5 * plot_px, (bar_px, plot_px)
    expect(chart.locator(".xtick text")).to_have_text(["Nov 28"])
    assert not errors, errors


def test_the_run_picker_groups_jobs_under_their_run_and_hides_jobs_without_metrics(
    slurm_server: Server, page: Page
) -> None:
    """#39, 1: the training run is listed with the Slurm job that ran it; the jobs that trained
    nothing (each a run of its own, for its accounting) are not in the picker until asked
    ("All jobs"); a link naming one still opens it."""
    errors = collect_errors(page)
    page.goto(slurm_server.url + "/")
    picker = page.locator("#run-select")
    expect(picker).to_contain_text(f"low · Slurm job {META['jobs']['preempted']}", timeout=20_000)
    picker.click()
    options = page.get_by_role("option")
    expect(options).to_have_count(1)  # the training run alone
    page.keyboard.press("Escape")
    page.locator("label[for=runs-all]").click()
    picker.click()
    node_fail = re.compile(f"Slurm job {META['jobs']['node_fail']}$")
    expect(page.get_by_role("option", name=node_fail)).to_be_visible()
    assert page.get_by_role("option").count() > 3
    page.keyboard.press("Escape")
    page.locator("label[for=runs-all]").click()  # off again; a link still opens a job's run
    page.goto(slurm_server.url + f"/#run=slurm-{META['jobs']['failed']}&range=all")
    expect(picker).to_contain_text(f"Slurm job {META['jobs']['failed']}", timeout=20_000)
    assert not errors, errors


def test_gpus_page_node_health_names_the_node_and_what_to_do(
    slurm_server: Server, page: Page
) -> None:
    """#39, 4: the recorded cluster's node failed jobs of two users (ffbob's bob-debug, root's
    ff-failed) within a day: the rule's finding names it and says to drain the node, not to
    chase the jobs; Slurm's drain is listed with its reason and who set it."""
    errors = collect_errors(page)
    page.goto(slurm_server.url + "/gpus#range=all")
    scroll_near(page, "#node-health")  # near the page's bottom: drawn when scrolled near
    section = page.locator("#node-health")
    findings = section.locator("#health-findings")
    expect(findings).to_contain_text("jobs of several users failed", timeout=20_000)
    expect(findings).to_contain_text("drain and investigate the node, not the jobs")
    expect(findings).to_contain_text("ffbob")
    expect(section.locator("#health-drained")).to_contain_text(XID_REASON)
    expect(section.locator("#health-summary")).to_contain_text("Rules judge windows of 24 h")
    assert not errors, errors
