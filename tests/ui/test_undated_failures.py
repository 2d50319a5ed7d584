"""A store holding only a run whose log gives no wall-clock time, served and opened in headless
Chromium: the Failures page lists its interruption, "time unknown", as ``summary --json``
counts it, and the header says the data's time is unknown, where every page used to say
"No data stored yet"."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, cli, collect_errors, start_server
from tests.test_failure_only_logs import NO_CLOCK, _write


@pytest.fixture(scope="module")
def undated_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("undated-ui")
    store = tmp / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "undated",
            str(_write(tmp / "job.log", NO_CLOCK)))  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
    server = start_server(["serve", "--store", str(store)], tmp / "serve.log")
    yield server
    server.stop()


def test_the_failures_page_of_an_undated_store_lists_its_interruption(
    page: Page, undated_server: Server
) -> None:
    errors = collect_errors(page)
    page.goto(undated_server.url + "/failures")
    row = page.locator("#fail-int-table .ag-row")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("time unknown")
    expect(row).to_contain_text("NCCL Watchdog Timeouts")
    expect(page.locator("#fail-count")).to_have_text("1 + 0")
    expect(page.locator("#fail-xids")).to_have_text("–")  # no kernel log, no GPU samples
    expect(page.get_by_text("no kernel log or DCGM XID data stored for this range").first
           ).to_be_visible()  # fmt: skip
    expect(page.locator("#last-updated")).to_contain_text("time unknown")
    expect(page.get_by_text("No data stored yet")).to_have_count(0)
    assert errors == [], errors


def test_the_node_health_of_an_undated_store_says_its_time_is_unknown(
    page: Page, undated_server: Server
) -> None:
    errors = collect_errors(page)
    page.goto(undated_server.url + "/gpus")
    page.locator("#node-health").scroll_into_view_if_needed()
    told = page.locator("#health-summary")
    expect(told).to_contain_text("Time unknown")
    expect(told).to_contain_text("no node telemetry is stored for this run")
    expect(page.get_by_text("Nothing stored yet")).to_have_count(0)
    assert errors == [], errors
