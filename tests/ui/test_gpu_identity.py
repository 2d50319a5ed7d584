"""The failed GPU's identity on the incident view, for the replacement ticket (issue 57, item
10), in headless Chromium over the real server: a node whose dcgm-exporter was scraped before
its GPU failed (its ECC XID imported from dmesg) shows index, UUID, PCI bus id and model, the
serial "–" with why, and the same in the Markdown the copy button copies."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import DCGM_FIXTURES, collect_errors, start_server
from tests.test_gpu_identity import RUN, UUID2, _dgx


def test_the_incident_names_the_failed_gpu_for_the_ticket(page: Page, tmp_path: Path) -> None:
    store, at = _dgx(tmp_path, [(DCGM_FIXTURES / "default_h100.txt").read_text()])
    srv = start_server(["serve", "--store", str(store)], tmp_path / "serve.log")
    try:
        errors = collect_errors(page)
        page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        page.set_viewport_size({"width": 1366, "height": 900})
        page.goto(f"{srv.url}/incident?at={at}#run={RUN}")
        expect(page.locator("#inc-gpu-index")).to_have_text("2")
        expect(page.locator("#inc-gpu-uuid")).to_have_text(UUID2)
        expect(page.locator("#inc-gpu-pci")).to_have_text("00000000:3A:00.0")
        expect(page.locator("#inc-gpu-model")).to_have_text("NVIDIA H100 80GB HBM3")
        expect(page.locator("#inc-gpu-serial")).to_contain_text("– (not in the store")
        page.locator("#inc-copy").click()
        expect(page.locator("#inc-copy-status")).to_contain_text("Copied (")
        copied = page.evaluate("navigator.clipboard.readText()")
        assert f"- **GPU identity (for the ticket):** Index 2; UUID {UUID2}; " in copied
        assert errors == [], errors
    finally:
        srv.stop()
