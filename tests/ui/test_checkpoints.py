"""The Checkpoints page in headless Chromium over the replayed dev-64 store."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import Server, collect_errors

TIMELINE = "document.querySelector('#ck-timeline .js-plotly-plot')"
CURVE = "document.querySelector('#ck-ettr-curve .js-plotly-plot')"
READY = f"() => {TIMELINE}?.data?.some(t => t.name === 'NVMe (node-local)' && t.x.length > 0)"


def _percent(page: Page, id_: str) -> float:
    text = page.locator(f"#{id_}").inner_text()
    m = re.fullmatch(r"\s*([\d.]+) %\s*", text)
    assert m, f"#{id_} shows {text!r}"
    return float(m.group(1))


def _wait_ettr_change(page: Page, before: str) -> float:
    page.wait_for_function(
        "b => document.querySelector('#ck-whatif-ettr')?.innerText !== b", arg=before
    )
    return _percent(page, "ck-whatif-ettr")


def test_checkpoints_page_shows_tiers_timeline_and_restores(
    page: Page, dev_server: Server, shots: Path
) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(dev_server.url + "/checkpoints")
    page.wait_for_function(READY)  # the page's one data callback has answered
    tiers = page.locator("#ck-tiers-table")
    for name in ("NVMe (node-local)", "Parallel filesystem", "Object store"):
        expect(tiers).to_contain_text(name)
    traces = page.evaluate(f"() => {TIMELINE}.data.map(t => [t.name, t.x.length])")
    counts = {name: n for name, n in traces if name}
    assert 240 <= counts["NVMe (node-local)"] <= 288  # one marker per NVMe checkpoint
    assert counts["Object store"] == 5
    restored = sum(n for name, n in counts.items() if name.startswith("Restore from"))
    assert restored == 10  # 7 unexpected + 3 planned interruptions, each a restore
    expect(page.locator("#ck-mtbf")).to_contain_text("3.4 h")  # 24 h / 7 unexpected
    expect(page.locator("#ck-configured")).to_contain_text("5.0 min")
    expect(page.locator("#ck-verdict")).to_contain_text("longer")  # 5 min vs ~3.6 min optimum
    expect(page.locator("#ck-restores-table")).to_contain_text("Faulty GPU")
    # the three tiers' table ends under its last row (AG Grid kept a 150 px band under them)
    rows_px, body_px = page.evaluate(
        """() => {
          const t = document.querySelector('#ck-tiers-table');
          const rows = [...t.querySelectorAll('.ag-center-cols-container .ag-row')];
          return [rows.reduce((s, r) => s + r.getBoundingClientRect().height, 0),
                  t.querySelector('.ag-center-cols-viewport').getBoundingClientRect().height];
        }"""
    )
    assert 0 < rows_px and body_px <= rows_px + 4, (rows_px, body_px)
    page.screenshot(path=str(shots / "checkpoints.png"), full_page=True)
    assert errors == [], errors


def test_what_if_projects_ettr(page: Page, dev_server: Server, shots: Path) -> None:
    errors = collect_errors(page)
    page.goto(dev_server.url + "/checkpoints")
    page.wait_for_function(READY)
    interval = page.locator("#ck-whatif-interval")
    expect(interval).to_have_value("5")  # prefilled with the configured interval (min)
    for id_ in ("ck-whatif-base", "ck-whatif-ettr"):
        expect(page.locator(f"#{id_}")).to_have_text(re.compile(r"^[\d.]+ %$"))
    base = _percent(page, "ck-whatif-base")
    assert _percent(page, "ck-whatif-ettr") == base
    assert 90 < base < 99
    # the run's measured ETTR and goodput under the model's, read in their own request
    measured = page.locator("#ck-measured-ettr")
    expect(measured).to_have_text(re.compile(r"^measured over the run: [\d.]+ %, goodput [\d.]+ %"))

    shown = page.locator("#ck-whatif-ettr").inner_text()
    interval.fill("60")  # an hourly checkpoint loses ~30 min of work per failure
    hourly = _wait_ettr_change(page, shown)
    assert hourly < base - 5
    expect(page.locator("#ck-whatif-delta")).to_contain_text("GPU-hours/day lost")

    shown = page.locator("#ck-whatif-ettr").inner_text()
    interval.fill("3.5")  # close to the Young optimum (~3.6 min) beats the configured 5 min
    near_opt = _wait_ettr_change(page, shown)
    assert near_opt > base
    assert _percent(page, "ck-whatif-base") == base  # the reference stays put

    shown = page.locator("#ck-whatif-ettr").inner_text()
    page.locator("#ck-whatif-write").fill("30")  # a 30 s stall per checkpoint
    slow = _wait_ettr_change(page, shown)
    assert slow < near_opt - 5
    page.wait_for_function(f"() => {CURVE}?.data?.some(t => t.name === 'What-if')")
    names = page.evaluate(f"() => {CURVE}.data.map(t => t.name)")
    assert {"Configured", "What-if", "Optimum", "What-if optimum"} <= set(names)
    assert sum("(what-if)" in n for n in names) == 1  # a second curve for the new write time
    page.screenshot(path=str(shots / "checkpoints-whatif.png"), full_page=True)
    assert errors == [], errors
