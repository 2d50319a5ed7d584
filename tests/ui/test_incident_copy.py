"""The incident view of a run that hung and died, in headless Chromium over the real server
(issue 57, 3 and 9): opened from its hang, it shows the stop whole (timeline, Lost box,
evidence lines), and "Copy as Markdown" copies with the "Markdown" section closed and says so.
The store is imported with the user's commands (``tests/hang_died_fixture.py``)."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests import hang_died_fixture as hd
from tests.conftest import collect_errors, start_server


def test_a_hang_is_told_whole_and_its_markdown_copies_closed(page: Page, tmp_path: Path) -> None:
    store = hd.build(tmp_path / "night")
    srv = start_server(["serve", "--store", str(store)], tmp_path / "serve.log")
    try:
        errors = collect_errors(page)
        page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        page.set_viewport_size({"width": 1366, "height": 900})
        page.goto(f"{srv.url}/incident?at={hd.HANG_AT.isoformat()}#run={hd.RUN}")
        expect(page.locator("#inc-title")).to_contain_text("Hang in nccl:all_reduce #61")
        expect(page.locator("#inc-lost")).to_contain_text("60 steps")  # the Lost box
        expect(page.locator("#inc-lost")).to_contain_text("GPU-hours, $")
        expect(page.locator("#inc-timeline .js-plotly-plot")).to_be_visible()  # the timeline
        expect(page.locator("#inc-timeline")).to_contain_text("held until the job ended")
        expect(page.locator("#inc-evidence li").first).to_contain_text("never called it")
        assert page.locator("#inc-evidence li").count() >= 15  # the watchdog lines too
        expect(page.locator("#inc-times")).to_contain_text("training never resumed")
        md = page.locator("#inc-md")
        expect(md).not_to_be_visible()  # the "Markdown" section stays closed
        page.locator("#inc-copy").click()
        expect(page.locator("#inc-copy-status")).to_contain_text("Copied (")
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied.startswith("## 2026-11-20 02:09:50 UTC: "), copied[:200]
        assert "- **Run's final state:** stopped" in copied
        assert "- **The run's total:** 1 unexpected" in copied
        assert errors == [], errors
        # a dashboard opened over plain http has no navigator.clipboard: the button copies
        # all the same (a selected textarea), read back here from the first page
        page.evaluate("navigator.clipboard.writeText('')")
        bare = page.context.new_page()
        bare.add_init_script("Object.defineProperty(Navigator.prototype, 'clipboard', "
                             "{get: () => undefined})")  # fmt: skip
        bare.goto(f"{srv.url}/incident?at={hd.HANG_AT.isoformat()}#run={hd.RUN}")
        assert bare.evaluate("navigator.clipboard === undefined")
        bare.locator("#inc-copy").click()
        expect(bare.locator("#inc-copy-status")).to_contain_text("Copied (")
        assert page.evaluate("navigator.clipboard.readText()") == copied
    finally:
        srv.stop()
