"""The whole real path, live: simulated dcgm-exporters -> ingest daemon -> HTTP -> server ->
store -> dashboard in Chromium. Three processes, as an SRE would deploy them."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, collect_errors, start_server
from tests.faults import exporter_farm, spawn
from tests.ui.test_overview import FLEET_READY, FLEET_X

Pipeline = tuple[Server, Path, "subprocess.Popen[bytes]"]


@pytest.fixture(scope="module")
def pipeline(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Server, Path, subprocess.Popen[bytes]]]:
    tmp = tmp_path_factory.mktemp("pipeline")
    exporters, targets = exporter_farm(tmp, "dev-64", "--speed", "60", "--interval", "30")
    procs = [exporters]
    server = None
    try:
        server = start_server(
            ["serve", "--store", str(tmp / "server.duckdb"), "--accept-ingest"], tmp / "serve.log"
        )
        daemon_log = tmp / "daemon.log"
        daemon = ["ingest", "--server", server.url, "--targets-file", str(targets)]
        procs.append(
            spawn([*daemon, "--interval", "1", "--timeout", "0.8", "--spool", str(tmp / "spool")],
                  daemon_log)
        )  # fmt: skip
        yield server, daemon_log, exporters
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
        if server is not None:
            server.stop()


def _rounds(server: Server) -> int:
    with urllib.request.urlopen(server.url + "/api/v1/health", timeout=5) as r:
        return int(json.loads(r.read()).get("rounds", 0))


def test_the_dashboard_follows_live_scrapes(page: Page, pipeline: Pipeline) -> None:
    server, daemon_log, _ = pipeline
    errors = collect_errors(page)
    deadline = time.monotonic() + 30
    while _rounds(server) < 2:  # the first forwarded rounds are in the store
        assert time.monotonic() < deadline, daemon_log.read_text()
        time.sleep(0.3)
    page.clock.install()  # drive the 10 s refresh without waiting for it
    page.goto(server.url + "/")
    page.wait_for_function(FLEET_READY, timeout=30_000)
    expect(page.locator("body")).not_to_contain_text("Simulated data")  # real scrapes
    # 8 job nodes + 2 spares, 8 GPUs each, all scraped
    expect(page.locator("#ov-gpus")).to_contain_text("80 / 80", timeout=30_000)
    before = page.evaluate(FLEET_X)
    stamp = page.locator("#last-updated").inner_text()
    time.sleep(3)  # three more scrape rounds forwarded and stored
    page.clock.run_for(11_000)
    expect(page.locator("#last-updated")).not_to_have_text(stamp, timeout=15_000)
    page.wait_for_function(f"t => ({FLEET_X})().some(x => x > t)", arg=max(before), timeout=15_000)
    assert re.search(r"[1-9]\d* rounds delivered", daemon_log.read_text())
    assert errors == [], errors


def test_every_exporter_down_shows_nobody_reporting(page: Page, pipeline: Pipeline) -> None:
    """The worst night: every exporter stops answering (a network partition). The daemon keeps
    scraping, finds them down, and the Overview must say nobody is reporting, not keep showing
    the last values that arrived as if they were current. (Runs after the test above: it stops
    the module's exporters.)"""
    server, daemon_log, exporters = pipeline
    exporters.terminate()
    exporters.wait(timeout=10)
    rounds = _rounds(server)
    deadline = time.monotonic() + 30
    while _rounds(server) < rounds + 3:  # rounds that found every target down
        assert time.monotonic() < deadline, daemon_log.read_text()[-2000:]
        time.sleep(0.3)
    errors = collect_errors(page)
    page.goto(server.url + "/#range=1h")
    expect(page.locator("#ov-gpus")).to_have_text("0 / 80", timeout=30_000)
    expect(page.locator("#ov-util")).to_have_text("–")
    alerts = page.locator("#ov-alerts")
    expect(alerts).to_contain_text("All 80 GPU(s) not reporting")
    expect(alerts).to_contain_text("scrape targets down")
    assert errors == [], errors
