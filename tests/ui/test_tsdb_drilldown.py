"""The TSDB-backed setup in headless Chromium: ``serve --prometheus URL --raw-retention 0`` over
a store that keeps rollups only, a real VictoriaMetrics holding the raw per-GPU series
(``tests/tsdb_fixture.py``). Every page opens without an error; the GPUs drill-down says where
its lines come from and draws, for GPU 0, the values VictoriaMetrics holds; once the TSDB
is stopped the drill-down says it did not answer instead of drawing a line."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pandas as pd
import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, collect_errors, start_server
from tests.tsdb_fixture import Fleet, _fleet  # noqa: F401

HOST = "h100-0001"
UTIL = "#gpu-node-util .js-plotly-plot"
PAGES = ["/", "/training", "/gpus", "/failures", "/checkpoints", "/jobs"]


@pytest.fixture(scope="module")
def served(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    server = start_server(["serve", "--store", str(fleet.store), "--prometheus", fleet.vm.url,
                           "--raw-retention", "0"], log)  # fmt: skip
    yield server
    server.stop()


def test_every_page_opens_and_the_drill_down_draws_what_the_tsdb_holds(
    page: Page, fleet: Fleet, served: Server
) -> None:
    errors = collect_errors(page)
    for path in PAGES:
        page.goto(f"{served.url}{path}#range=1h")
        expect(page.locator("#_pages_content")).to_be_visible(timeout=30_000)
        page.wait_for_timeout(2000)  # its callbacks answer (an error is collected)
    page.goto(f"{served.url}/gpus#range=1h&node={HOST}")
    expect(page.locator("#gpu-node-info")).to_contain_text(
        f"read from {fleet.vm.url} instead", timeout=60_000
    )
    page.wait_for_function(f"() => document.querySelector('{UTIL}')?._fullData?.length >= 8")
    trace = page.evaluate(
        f"""() => {{ const t = document.querySelector('{UTIL}')._fullData
                        .find(d => d.name === 'GPU 0');
                    return {{x: Array.from(t.x), y: Array.from(t.y)}}; }}"""
    )
    stamps = pd.to_datetime(trace["x"], format="ISO8601")
    drawn = pd.DataFrame({"ts": stamps, "y": trace["y"]}).dropna()
    raw = fleet.export("DCGM_FI_DEV_GPU_UTIL", HOST)
    raw = raw[raw["gpu"] == 0]
    step = (drawn["ts"].diff().dropna().min()).total_seconds()
    held = raw.assign(ts=raw["ts"].dt.floor(f"{int(step)}s")).groupby("ts")["value"].mean()
    older = drawn[drawn["ts"] < fleet.end - timedelta(minutes=10)]  # well before the horizon
    assert len(older) >= 40
    for ts, y in zip(older["ts"], older["y"], strict=True):
        assert y == pytest.approx(round(held[ts], 1), abs=0.051), ts
    assert not errors, errors

    fleet.vm.stop()  # the TSDB goes away: the page says so, and draws no line for it
    try:
        page.goto(f"{served.url}/gpus#range=1h&node=h100-0002")
        expect(page.locator("#gpu-node-info")).to_contain_text(
            "the TSDB did not answer", timeout=60_000
        )
    finally:
        fleet.vm.start()
