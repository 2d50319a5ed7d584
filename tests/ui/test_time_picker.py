"""The header's absolute time picker and "zoom to this run" (issue 57, item 10), in headless
Chromium over the real server and a night imported with the user's command: the box shows the
view's window in UTC, a typed window becomes the view (in the URL: a link reproduces it), a
window that is not one is said and changes nothing, and "Zoom to this run" sets the run's own
time, as the "Whole run" range computes it (``run_time.run_bounds``, one definition)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

from app.data import services, view
from telemetry.store import Store
from tests.cluster_fixture import RUN, build
from tests.conftest import cli, collect_errors, start_server


def _hash(page: Page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).fragment).items()}


def test_an_absolute_window_and_the_runs_own_time(
    page: Page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    night = build(tmp_path / "night")
    store = tmp_path / "s.duckdb"
    assert cli(*night.import_args(store)).returncode == 0
    monkeypatch.setattr(services, "_services", None)
    with Store(str(store), read_only=True) as s:  # the run's own time, as "Whole run" has it
        services.bind(s)
        whole = view.time_range("all", RUN)
    monkeypatch.setattr(services, "_services", None)
    assert whole is not None
    srv = start_server(["serve", "--store", str(store)], tmp_path / "serve.log")
    try:
        errors = collect_errors(page)
        page.set_viewport_size({"width": 1366, "height": 900})
        page.goto(f"{srv.url}/#run={RUN}&range=all")
        page.locator("#tp-open").click()
        expect(page.locator("#tp-from")).to_have_value(f"{whole.start:%Y-%m-%dT%H:%M:%S}")
        expect(page.locator("#tp-to")).to_have_value(f"{whole.end:%Y-%m-%dT%H:%M:%S}")
        page.locator("#tp-from").fill("2026-03-01T09:00:00")
        page.locator("#tp-to").fill("2026-03-01T10:30:00")
        page.locator("#tp-apply").click()
        expect(page).to_have_url(re.compile(r"from=2026-03-01T09%3A00%3A00"))
        assert _hash(page) == {"run": RUN, "from": "2026-03-01T09:00:00",
                               "to": "2026-03-01T10:30:00"}  # fmt: skip
        expect(page.locator("#range-select")).to_contain_text("Zoomed window")
        # a window backwards is said, and the view stays
        page.locator("#tp-from").fill("2026-03-01T11:00:00")
        page.locator("#tp-apply").click()
        expect(page.locator("#tp-msg")).to_have_text("From must be before To.")
        assert _hash(page)["from"] == "2026-03-01T09:00:00"
        page.locator("#tp-run").click()
        expect(page).to_have_url(re.compile(re.escape(f"from={whole.start:%Y-%m-%dT%H}%3A")))
        assert _hash(page) == {"run": RUN, "from": whole.start.isoformat(),
                               "to": whole.end.isoformat()}  # fmt: skip
        expect(page.locator("#tp-msg")).to_have_text("")
        page.reload()  # the link alone reproduces it
        page.locator("#tp-open").click()
        expect(page.locator("#tp-from")).to_have_value(f"{whole.start:%Y-%m-%dT%H:%M:%S}")
        assert errors == [], errors
    finally:
        srv.stop()
