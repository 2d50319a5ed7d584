"""A live store: the server runs the replay itself and the open page follows the new data."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, start_server
from tests.ui.test_overview import FLEET_READY, FLEET_X


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("live")
    server = start_server(
        [
            "serve",
            "--store",
            str(tmp / "live.duckdb"),
            "--replay",
            "dev-64",
            "--speed",
            "30",
            "--prefill-hours",
            "1",
        ],
        tmp / "serve.log",
    )
    yield server
    server.stop()


def test_a_live_store_updates_the_open_page(page: Page, live_server: Server) -> None:
    page.clock.install()  # drive the 10 s refresh interval without waiting for it
    page.goto(live_server.url + "/")
    page.wait_for_function(FLEET_READY, timeout=30000)
    before = page.evaluate(FLEET_X)
    stamp = page.locator("#last-updated").inner_text()
    page.wait_for_timeout(3000)  # 3 s at 30x: 90 simulated seconds of new samples
    page.clock.run_for(11_000)
    expect(page.locator("#last-updated")).not_to_have_text(stamp, timeout=15000)
    page.wait_for_function(f"n => ({FLEET_X})().length > n", arg=len(before), timeout=15000)
    after = page.evaluate(FLEET_X)
    assert max(after) > max(before)  # the chart's last point moved forward in time
