"""In headless Chromium: the Overview's alerts with a history (issue 58, 5). "Active now" lists
what this server's alert delivery finds firing, each with when it was first seen and who
acknowledged it; an operator acknowledges one from the page with the operator token; "Resolved
in this range" lists what ended, with its first-seen and resolved time and its acknowledgement.
Against a real ``serve`` subprocess delivering to a real webhook."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.alert_fixture import OPERATOR_TOKEN, Hook, serve_alerting
from tests.conftest import choose_option, collect_errors

pytestmark = pytest.mark.live  # it starts its own server with alert delivery

TOKEN = OPERATOR_TOKEN


def _post(url: str, body: object) -> None:
    headers = {"Content-Type": "application/json"}
    req = urllib.request.Request(url, json.dumps(body).encode(), headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def test_active_and_resolved_alerts_with_first_seen_and_acknowledgement(
    page: Page, dev_store: Path, tmp_path: Path
) -> None:
    hook = Hook()
    receiver = f'[[receiver]]\ntype = "webhook"\nurl = "{hook.url}"\n'
    server = serve_alerting(tmp_path, dev_store, receiver, "--accept-ingest",
                            "--operator-token-file", str(tmp_path / "op"))  # fmt: skip
    try:
        errors = collect_errors(page)
        page.set_viewport_size({"width": 1366, "height": 1600})
        page.goto(server.url + "/")
        now_list = page.locator("#ov-alerts-now")
        expect(now_list).to_contain_text("XID 46 seen", timeout=60_000)
        expect(now_list).to_contain_text("First seen")
        expect(now_list).to_contain_text("not acknowledged")
        expect(page.locator("#ov-alerts-resolved")).to_contain_text(
            "No delivered alert resolved in this range"
        )
        # acknowledged from the page: a wrong token changes nothing, the right one says who
        choose_option(page, "ov-ack-alert", "XID 46")
        page.locator("#ov-silence-by").fill("night shift")
        page.locator("#ov-silence-token").fill("wrong-token-0000000000")
        page.locator("#ov-ack-save").click()
        expect(page.locator("#ov-ack-msg")).to_contain_text("403 Forbidden")
        page.locator("#ov-silence-token").fill(TOKEN)
        page.locator("#ov-ack-save").click()
        expect(page.locator("#ov-ack-msg")).to_contain_text("Acknowledged by night shift")
        xid46 = now_list.locator(".alert").filter(has_text="XID 46 seen")
        expect(xid46).to_contain_text("acknowledged by night shift at", timeout=30_000)
        expect(now_list.locator(".alert").filter(has_text="XID 95 seen")).to_contain_text(
            "not acknowledged"
        )
        # fresh data: the XIDs are no longer of the last 24 h; they resolve, and are listed so
        now = datetime.now(UTC).replace(tzinfo=None)
        began = (now - timedelta(minutes=2)).isoformat()
        _post(server.url + "/api/v1/runs", {"run": "fresh", "name": "fresh", "start_ts": began})
        _post(server.url + "/api/v1/metrics",
              [{"run": "fresh", "ts": (now - timedelta(seconds=60 - 10 * k)).isoformat(),
                "step": k, "loss": 2.0} for k in range(6)])  # fmt: skip
        resolved = page.locator("#ov-alerts-resolved")
        for _ in range(30):  # the evaluation resolves them within a second or two
            page.wait_for_timeout(1000)
            page.reload()
            resolved.wait_for(timeout=30_000)
            if "XID 46 seen" in resolved.inner_text():
                break
        gone = resolved.locator(".alert").filter(has_text="XID 46 seen")
        expect(gone).to_contain_text("resolved")
        expect(gone).to_contain_text("acknowledged by night shift at")
        expect(page.locator("#ov-alerts-now")).not_to_contain_text("XID 46 seen")
        assert not errors, errors
    finally:
        server.stop()
        hook.close()
