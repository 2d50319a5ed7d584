"""In headless Chromium: money beside the hours it prices, with the price it assumed (a run's
own over the server's), on Failures and in the Checkpoints what-if."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, collect_errors, start_server
from tests.ui.test_checkpoints import READY


@pytest.fixture(scope="module")
def priced(dev_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("priced") / "serve.log"
    args = ["serve", "--store", str(dev_store), "--gpu-hour-price", "3",
            "--run-price", "dev-64-s1=4/0.2"]  # fmt: skip
    server = start_server(args, log)
    yield server
    server.stop()


def test_failures_prices_the_lost_gpu_hours(page: Page, priced: Server) -> None:
    errors = collect_errors(page)
    page.goto(priced.url + "/failures#run=dev-64-s1&range=all")
    card = page.locator(".card", has=page.locator("#fail-lostgh"))
    expect(card).to_contain_text("at $4.00/GPU-h (run)", timeout=30_000)
    hours = float(page.locator("#fail-lostgh").inner_text().replace(",", ""))
    usd = re.search(r"≈ \$([\d,.]+)", card.inner_text())
    assert usd and float(usd.group(1).replace(",", "")) == pytest.approx(hours * 4, rel=0.01)
    assert not errors, errors


def test_the_what_if_says_what_an_interval_costs_per_day(page: Page, priced: Server) -> None:
    page.goto(priced.url + "/checkpoints#run=dev-64-s1&range=all")
    page.wait_for_function(READY)
    expect(page.locator("#ck-whatif-interval")).to_have_value("5")
    page.locator("#ck-whatif-interval").fill("60")
    delta = page.locator("#ck-whatif-delta")
    expect(delta).to_contain_text("/day spent at $4.00/GPU-h", timeout=30_000)
    m = re.search(r"≈ ([\d,.]+) GPU-hours/day lost, \$([\d,.]+)/day", delta.inner_text())
    assert m, delta.inner_text()
    gh, usd = (float(g.replace(",", "")) for g in m.groups())
    assert usd == pytest.approx(gh * 4, rel=0.01)
