"""After raw retention, in headless Chromium: the GPUs page over the whole history still draws
the fleet heatmap from the rollups, and the drill-down draws its node's per-GPU lines before
the horizon from the per-GPU rollups and says so, rather than a half-empty chart."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from telemetry.store import Store
from telemetry.store.retention import expire
from tests.conftest import Server, collect_errors, start_server


@pytest.fixture(scope="module")
def expired(dev_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("expired")
    path = tmp / "s.duckdb"
    shutil.copy(dev_store, path)
    with Store(str(path)) as s:
        assert expire(s, timedelta(hours=6)).total > 0
        assert s.raw_since() is not None
    server = start_server(["serve", "--store", str(path)], tmp / "serve.log")
    yield server
    server.stop()


def test_the_drill_down_says_older_per_gpu_samples_expired(page: Page, expired: Server) -> None:
    errors = collect_errors(page)
    page.goto(f"{expired.url}/gpus#range=all&node=h100-0003")
    expect(page.locator("#gpu-node-host")).to_have_text("h100-0003", timeout=30_000)
    expect(page.locator("#gpu-node-info")).to_contain_text(
        "have expired (raw retention): these lines are the per-GPU averages kept in the rollups",
        timeout=30_000,
    )
    # and the node's lines still cover the whole day, from the per-GPU rollups
    util = "#gpu-node-util .js-plotly-plot"
    page.wait_for_function(f"() => document.querySelector('{util}')?._fullData?.length >= 8")
    node_span = page.evaluate(
        f"""() => {{ const x = document.querySelector('{util}')._fullData[0].x;
                    return (new Date(x[x.length - 1]) - new Date(x[0])) / 3.6e6; }}"""
    )
    assert node_span > 20, node_span
    # the heatmap still covers the whole day: its x axis starts a day before its end
    page.wait_for_function(
        "() => document.querySelector('#gpu-heatmap .js-plotly-plot')?._fullData?.length > 0"
    )
    span = page.evaluate(
        """() => { const g = document.querySelector('#gpu-heatmap .js-plotly-plot');
                   const x = g._fullData[0].x; return (new Date(x[x.length - 1]) -
                   new Date(x[0])) / 3.6e6; }"""
    )
    assert span > 20, span
    # the last hour is inside the kept window: no note
    page.goto(f"{expired.url}/gpus#range=1h&node=h100-0003")
    expect(page.locator("#gpu-node-info")).not_to_contain_text("expired", timeout=30_000)
    assert not errors, errors
