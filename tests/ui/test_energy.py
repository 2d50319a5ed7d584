"""In headless Chromium: the Overview states the run's GPU energy with its basis, and the fleet
power chart marks each interruption and the restart after it (the swings a facility sees)."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import Server, cli

POWER = "document.querySelector('#ov-power .js-plotly-plot')"


def test_energy_and_power_swings_on_the_overview(
    page: Page, dev_server: Server, dev_store: Path
) -> None:
    page.goto(dev_server.url + "/#run=dev-64-s1&range=all")
    card = page.locator(".card", has=page.locator("#ov-ettr"))
    expect(card).to_contain_text("Wh per M tokens (counter)", timeout=30_000)
    page.wait_for_function(f"() => {POWER}?.data?.length >= 3")
    traces = page.evaluate(f"() => {POWER}.data.map(t => [t.name, (t.x || []).length])")
    names = dict(traces)
    assert names["interruption"] >= 7 and names["restart"] >= 1, traces
    # the card's figure is summary --json's
    r = cli("summary", "--store", str(dev_store), "--json")
    e = json.loads(r.stdout)["runs"][0]["energy"]
    shown = f"{e['kwh']:,.0f} kWh" if e["kwh"] < 1000 else f"{e['kwh'] / 1000:,.1f} MWh"
    expect(card).to_contain_text(shown)
