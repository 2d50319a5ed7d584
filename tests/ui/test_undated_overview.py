"""A store holding a run no line dates beside a dated one, served and opened in headless
Chromium: the undated run's Overview says its time is unknown (never the dated run's
"data to 2026-06-26 06:24 UTC, 165 days ago"), its Interruptions card says its one
interruption came at a time unknown (not "0 in the last 24 h of data"), and no "Job not
training" fires for either run, both stopped long ago as ``summary --json`` says."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, cli, collect_errors, start_server
from tests.test_failure_only_logs import NO_CLOCK, WATCHDOG, _write


@pytest.fixture(scope="module")
def mixed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("undated-overview-ui")
    store = tmp / "s.duckdb"
    dated = _write(tmp / "dated.log", WATCHDOG, mtime=datetime(2026, 12, 7))
    for run, log in (("dated", dated), ("undated", _write(tmp / "undated.log", NO_CLOCK))):
        r = cli("import", "--store", str(store), "--run", run, str(log))
        assert r.returncode == 0, (r.stdout, r.stderr)
    server = start_server(["serve", "--store", str(store)], tmp / "serve.log")
    yield server
    server.stop()


def test_the_undated_runs_overview_tells_no_other_runs_time(
    page: Page, mixed_server: Server
) -> None:
    errors = collect_errors(page)
    page.goto(mixed_server.url + "/?run=undated")
    expect(page.locator("#ov-ints")).to_have_text("1 + 0")
    card = page.locator(".card", has=page.locator("#ov-ints"))
    expect(card).to_contain_text("(1 at a time unknown)")
    expect(card).not_to_contain_text("0 in the last 24 h")
    expect(page.locator("#last-updated")).to_contain_text("time unknown")
    expect(page.locator("#data-age")).to_contain_text("the run stopped: nothing resumed it")
    expect(page.locator("#ov-alerts-run")).to_contain_text("time is unknown")
    for text in ("2026-06-26", "days ago", "Job not training"):
        expect(page.get_by_text(text)).to_have_count(0)
    page.goto(mixed_server.url + "/?run=dated")
    expect(page.locator("#data-age")).to_contain_text("data to 2026-06-26 06:24 UTC")
    expect(page.locator("#ov-alerts")).to_contain_text("Run stopped")
    expect(page.get_by_text("Job not training")).to_have_count(0)
    assert errors == [], errors
