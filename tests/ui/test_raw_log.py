"""Each evidence line on the incident view opens the raw log around it (issue 57, item 10),
in headless Chromium over the real server and a night imported with the user's command: its
``file:line``, the 20 lines either side with the evidence line marked, a search over them, and
a file gone since the import said in words."""

from __future__ import annotations

import shutil
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.cluster_fixture import RUN, build
from tests.conftest import cli, collect_errors, start_server

IB_AT = "2026-03-01T11:25:40"
XID_AT = "2026-03-01T09:53:20"


def test_an_evidence_line_opens_its_raw_log(page: Page, tmp_path: Path) -> None:
    night = build(tmp_path / "night")
    store = tmp_path / "night.duckdb"
    r = cli(*night.import_args(store))
    assert r.returncode == 0, r.stderr
    srv = start_server(["serve", "--store", str(store)], tmp_path / "serve.log")
    try:
        errors = collect_errors(page)
        page.set_viewport_size({"width": 1366, "height": 900})
        page.goto(f"{srv.url}/incident?at={IB_AT}#run={RUN}")
        cause = page.locator("#inc-evidence li").first
        expect(cause).to_contain_text(f"{night.job_log}:598")
        cause.get_by_role("link", name="raw log").click()
        modal = page.locator("#inc-log-modal")
        expect(modal).to_be_visible()
        expect(page.locator("#inc-log-title")).to_have_text(f"{night.job_log}:598")
        expect(page.locator("#inc-log-note")).to_contain_text("lines 578-618")
        expect(page.locator("#inc-log-body .inc-log-line")).to_have_count(41)
        here = page.locator("#inc-log-body .inc-log-here")
        expect(here).to_have_count(1)
        expect(here).to_contain_text("598")
        expect(here).to_contain_text("NET/IB : Got completion from peer")
        page.locator("#inc-log-search").fill("srun: error")
        expect(page.locator("#inc-log-count")).to_have_text("1 of 41 lines match")
        expect(page.locator("#inc-log-body mark")).to_have_text("srun: error")
        assert "log=0" in page.url  # a link to the dialog can be shared
        # the kernel log moved away since the import: said, not an error
        shutil.move(night.kern_log, tmp_path / "moved.log")
        page.goto(f"{srv.url}/incident?at={XID_AT}#run={RUN}")
        page.locator("#inc-evidence li").first.get_by_role("link", name="raw log").click()
        expect(page.locator("#inc-log-note")).to_contain_text("is no longer there")
        expect(page.locator("#inc-log-body .inc-log-line")).to_have_count(0)
        assert errors == [], errors
    finally:
        srv.stop()
