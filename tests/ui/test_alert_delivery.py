"""In headless Chromium: the Overview says where its alerts went, per receiver (delivered when,
or failing how), so a receiver that has been down since the night shows up at a glance."""

from __future__ import annotations

import shutil
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.alert_fixture import Hook
from tests.conftest import collect_errors, free_port, start_server


def test_the_overview_shows_how_alert_delivery_goes(
    page: Page, dev_store: Path, tmp_path: Path
) -> None:
    path = tmp_path / "s.duckdb"
    shutil.copy(dev_store, path)
    hook = Hook()
    conf = tmp_path / "alerts.toml"
    conf.write_text(
        'evaluate_every = "1s"\n[route]\ngroup_wait = "0s"\n'
        f'[[receiver]]\nname = "chatops"\ntype = "webhook"\nurl = "{hook.url}/hook"\n'
        f'[[receiver]]\nname = "pager"\ntype = "webhook"\nurl = "http://127.0.0.1:{free_port()}"\n'
        'timeout = "1s"\n'
    )
    server = start_server(["serve", "--store", str(path), "--alerts", str(conf)],
                          tmp_path / "serve.log")  # fmt: skip
    try:
        errors = collect_errors(page)
        page.goto(server.url + "/")
        box = page.locator("#ov-alert-delivery")
        expect(box).to_contain_text("chatops (webhook): delivered", timeout=60_000)
        expect(box).to_contain_text("pager (webhook): failing: unreachable", timeout=60_000)
        expect(box).to_contain_text("retrying", timeout=60_000)
        expect(box).to_contain_text("firing, 0 silenced, evaluated")
        expect(box.locator(".text-danger")).to_have_count(1)
        assert hook.bodies(), "the page said delivered, the receiver got nothing"
        assert not errors, errors
    finally:
        server.stop()
        hook.close()


def test_an_operator_silences_a_firing_alert_from_the_overview(
    page: Page, dev_store: Path, tmp_path: Path
) -> None:
    path = tmp_path / "s.duckdb"
    shutil.copy(dev_store, path)
    hook = Hook()
    token = tmp_path / "op"
    token.write_text("operator-token-0123456789\n")
    conf = tmp_path / "alerts.toml"
    conf.write_text(f'evaluate_every = "1s"\n[[receiver]]\ntype = "webhook"\nurl = "{hook.url}"\n')
    args = ["serve", "--store", str(path), "--alerts", str(conf)]
    server = start_server([*args, "--operator-token-file", str(token)], tmp_path / "serve.log")
    try:
        errors = collect_errors(page)
        page.goto(server.url + "/")
        expect(page.locator("#ov-alert-delivery")).to_contain_text("0 silenced", timeout=60_000)
        page.locator("#ov-silence-alert").click()
        page.get_by_role("option").filter(has_text="XID").first.click()
        page.locator("#ov-silence-by").fill("night shift")
        page.locator("#ov-silence-token").fill("wrong-token-0000000000")
        page.locator("#ov-silence-save").click()
        expect(page.locator("#ov-silence-msg")).to_contain_text("403 Forbidden")
        page.locator("#ov-silence-token").fill("operator-token-0123456789")
        page.locator("#ov-silence-save").click()
        expect(page.locator("#ov-silence-msg")).to_contain_text("Silenced until")
        expect(page.locator("#ov-silence-list")).to_contain_text("alertname=XidSeen")
        expect(page.locator("#ov-silence-list")).to_contain_text("xid=")
        expect(page.locator("#ov-alert-delivery")).to_contain_text("1 silenced", timeout=60_000)
        assert not errors, errors
    finally:
        server.stop()
        hook.close()
