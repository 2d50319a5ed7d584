"""In headless Chromium: the Overview says where its alerts went, per receiver (delivered when,
or failing how), so a receiver that has been down since the night shows up at a glance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.alert_fixture import OPERATOR_TOKEN, Hook, serve_alerting
from tests.conftest import choose_option, collect_errors, free_port

pytestmark = pytest.mark.live  # it starts its own server with alert delivery

TOKEN = OPERATOR_TOKEN
_serve = serve_alerting


def test_the_overview_shows_how_alert_delivery_goes(
    page: Page, dev_store: Path, tmp_path: Path
) -> None:
    hook = Hook()
    server = _serve(
        tmp_path,
        dev_store,
        f'[[receiver]]\nname = "chatops"\ntype = "webhook"\nurl = "{hook.url}/hook"\n'
        f'[[receiver]]\nname = "pager"\ntype = "webhook"\nurl = "http://127.0.0.1:{free_port()}"\n'
        'timeout = "1s"\n',
    )
    try:
        errors = collect_errors(page)
        page.goto(server.url + "/")
        box = page.locator("#ov-alert-delivery")
        expect(box).to_contain_text("chatops (webhook): delivered", timeout=60_000)
        expect(box).to_contain_text("pager (webhook): failing: unreachable", timeout=60_000)
        expect(box).to_contain_text("retrying", timeout=60_000)
        expect(box).to_contain_text("firing, 0 silenced, evaluated")
        expect(box.locator(".text-danger")).to_have_count(1)
        # a store nobody writes: the status still moves on (it is not a remembered reply)
        first = re.search(r"evaluated (\S+) UTC", box.inner_text())
        assert first, box.inner_text()
        page.wait_for_timeout(2500)
        page.reload()
        expect(box).not_to_contain_text(f"evaluated {first.group(1)} UTC", timeout=30_000)
        expect(box).to_contain_text("evaluated")
        assert hook.bodies(), "the page said delivered, the receiver got nothing"
        assert not errors, errors
    finally:
        server.stop()
        hook.close()


def test_an_operator_silences_a_firing_alert_from_the_overview(
    page: Page, dev_store: Path, tmp_path: Path
) -> None:
    hook = Hook()
    receiver = f'[[receiver]]\ntype = "webhook"\nurl = "{hook.url}"\n'
    server = _serve(tmp_path, dev_store, receiver, "--operator-token-file", str(tmp_path / "op"))
    try:
        errors = collect_errors(page)
        page.goto(server.url + "/")
        expect(page.locator("#ov-alert-delivery")).to_contain_text("0 silenced", timeout=60_000)
        page.set_viewport_size({"width": 1366, "height": 1600})  # the list opens below
        choose_option(page, "ov-silence-alert", "XID")
        page.locator("#ov-silence-by").fill("night shift")
        page.locator("#ov-silence-token").fill("wrong-token-0000000000")
        page.locator("#ov-silence-save").click()
        expect(page.locator("#ov-silence-msg")).to_contain_text("403 Forbidden")
        page.locator("#ov-silence-token").fill(TOKEN)
        page.locator("#ov-silence-save").click()
        expect(page.locator("#ov-silence-msg")).to_contain_text("Silenced until")
        expect(page.locator("#ov-silence-list")).to_contain_text("alertname=XidSeen")
        expect(page.locator("#ov-silence-list")).to_contain_text("xid=")
        expect(page.locator("#ov-alert-delivery")).to_contain_text("1 silenced", timeout=60_000)
        # and ended early: the alert is back
        choose_option(page, "ov-silence-end-pick", "alertname=XidSeen")
        page.locator("#ov-silence-end").click()
        expect(page.locator("#ov-silence-end-msg")).to_contain_text("Ended")
        expect(page.locator("#ov-silence-list")).not_to_contain_text("alertname=XidSeen")
        expect(page.locator("#ov-alert-delivery")).to_contain_text("0 silenced", timeout=60_000)
        assert not errors, errors
    finally:
        server.stop()
        hook.close()
