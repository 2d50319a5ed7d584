"""Scrape targets down or stale on the Overview, from an ingest store filled over real HTTP."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from telemetry.collect.dcgm.scrape import scrape_round
from telemetry.ingest.sink import StoreSink
from telemetry.ingest.targets import Target
from telemetry.store import Store
from tests.conftest import DCGM_FIXTURES, ExporterHandler, Server, collect_errors, start_server

T0 = datetime(2026, 3, 1, 12, 0, 0)


@pytest.fixture(scope="module")
def ingest_server(exporter: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Four scrape rounds over HTTP of three exporters: one whose values never change (stale
    after four), one that moves on every scrape, one answering HTTP 500 (down)."""
    text = (DCGM_FIXTURES / "default_h100.txt").read_text()
    scrapes = itertools.count()
    ExporterHandler.routes["/steady/metrics"] = text.replace("dgx-h100-017", "dgx-steady")
    ExporterHandler.routes["/moving/metrics"] = lambda: (
        text.replace("dgx-h100-017", "dgx-moving").rstrip("\n") + f"{next(scrapes)}\n"
    )
    targets = [Target(f"{exporter}/{name}/metrics") for name in ("steady", "moving", "error")]
    tmp = tmp_path_factory.mktemp("targets")
    with Store(str(tmp / "ingest.duckdb")) as store:
        sink = StoreSink(store)
        for k in range(4):
            sink.write(T0 + timedelta(seconds=15 * k), scrape_round(targets, timeout_s=2.0))
    server = start_server(["serve", "--store", str(tmp / "ingest.duckdb")], tmp / "serve.log")
    yield server
    server.stop()


def test_overview_shows_targets_down_and_stale_with_reasons(
    page: Page, ingest_server: Server, exporter: str, shots: Path
) -> None:
    errors = collect_errors(page)
    page.goto(ingest_server.url + "/")
    expect(page.locator("#ov-gpus")).to_contain_text("16 / 16")  # two live 8-GPU nodes
    expect(page.locator("#ov-targets-count")).to_have_text("1 / 3 up")
    card = page.locator("#ov-targets-count").locator("xpath=..")
    expect(card).to_contain_text("1 down · 1 stale")
    rows = page.locator("#ov-targets-table .ag-row")
    expect(rows.filter(has_text="down")).to_contain_text("HTTP 500")
    expect(rows.filter(has_text="down")).to_contain_text(f"{exporter}/error/metrics")
    expect(rows.filter(has_text="stale")).to_contain_text("same sample values every scrape")
    expect(rows.filter(has_text="stale")).to_contain_text(f"{exporter}/steady/metrics")
    expect(rows.filter(has_text="stale")).to_contain_text("12:00:45")  # flagged at the 4th scrape
    expect(page.locator("#ov-targets-table")).not_to_contain_text("/moving/")  # up: not listed
    alerts = page.locator("#ov-alert-list")
    expect(alerts).to_contain_text("1 scrape target down")
    expect(alerts).to_contain_text("1 scrape target stale")
    expect(page.locator("body")).not_to_contain_text("Simulated data")
    page.screenshot(path=str(shots / "overview-targets.png"), full_page=True)
    assert errors == [], errors


def test_a_replay_store_has_no_scrape_targets_card(page: Page, dev_server: Server) -> None:
    page.goto(dev_server.url + "/")
    expect(page.locator("#ov-gpus")).to_contain_text("/ 80")
    expect(page.locator("#ov-targets-count")).to_have_count(0)
