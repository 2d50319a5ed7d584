"""The Failures page in headless Chromium over the dev-64 replay (seed 1: 7 unexpected and 3
planned interruptions, XIDs 46, 95, 140 and 143)."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import Server, collect_errors

TAX = "document.querySelector('#fail-taxonomy .js-plotly-plot')"
TIMELINE_POINTS = (
    "() => { const d = document.querySelector('#fail-timeline .js-plotly-plot')?.data;"
    " return Array.isArray(d) ? d.reduce((n, t) => n + (t.x?.length ?? 0), 0) : -1; }"
)
# plotly ships numeric arrays base64-encoded; the browser keeps the decoded typed array beside
ARR = "(v => Array.isArray(v) ? v : Array.from(v._inputArray))"
TIMELINE_TIMES = (
    "() => document.querySelector('#fail-timeline .js-plotly-plot').data.flatMap(t => t.x)"
)


def test_failures_page_shows_taxonomy_xids_and_lemons(
    page: Page, dev_server: Server, shots: Path
) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(dev_server.url + "/failures")
    expect(page.locator("#fail-count")).to_contain_text("7 + 3")
    expect(page.locator("#fail-mtbf")).to_contain_text("3.4 h")
    page.wait_for_function(f"() => {TAX}?.data?.length === 2")
    series = page.evaluate(f"() => {TAX}.data.map(t => ({{name: t.name, y: t.y, x: {ARR}(t.x)}}))")
    names = [s["name"] for s in series]
    assert names == ["Llama 3 405B (n = 419)", "This run (n = 7)"]
    ref, run = ({k: v for k, v in zip(s["y"], s["x"], strict=True)} for s in series)
    assert len(ref) == 18 and abs(sum(ref.values()) - 100.0) < 1e-6
    assert abs(ref["Faulty GPU"] - 148 / 419 * 100) < 1e-6
    assert abs(run["Faulty GPU"] - 3 / 7 * 100) < 1e-6
    assert abs(run["Software Bug"] - 2 / 7 * 100) < 1e-6
    basis = page.evaluate(f"() => {TAX}.layout.annotations.map(a => a.text).join(' ')")
    assert "count / 419" in basis and "Table 5" in basis
    xids = page.locator("#fail-xid-table")
    for code, mnemonic in [("46", "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR"), ("143", "GPU_INIT_ERROR")]:
        row = xids.locator(".ag-row", has=page.get_by_text(mnemonic, exact=True))
        expect(row).to_contain_text(code)
        expect(row).to_contain_text("RESET_GPU (reset the GPU)")
    expect(xids.locator(".ag-row")).to_have_count(4)  # 4 codes
    first = page.locator("#fail-lemon-table .ag-row").nth(0)
    expect(first).to_contain_text("h100-0009")
    expect(page.locator("#fail-tax-table")).to_contain_text("Faulty GPU")
    page.wait_for_function(f"() => ({TIMELINE_POINTS})() === 10")
    page.screenshot(path=str(shots / "failures.png"), full_page=True)
    assert errors == [], errors


def test_time_range_narrows_the_interruption_timeline(page: Page, dev_server: Server) -> None:
    page.goto(dev_server.url + "/failures")
    page.wait_for_function(f"() => ({TIMELINE_POINTS})() === 10")
    whole = page.evaluate(TIMELINE_TIMES)
    page.locator("#range-select").click()
    page.get_by_role("option", name="Last 6 h").click()
    page.wait_for_function(f"() => ({TIMELINE_POINTS})() === 3", timeout=15000)
    six = page.evaluate(TIMELINE_TIMES)
    assert sorted(six) == sorted(whole)[-3:]  # the last three interruptions of the day
    assert min(six) >= "2026-01-05 18:00"
    page.wait_for_function(f"() => {TAX}?.data?.[1]?.name === 'This run (n = 3)'")
    expect(page.locator("#fail-count")).to_contain_text("3 + 0")


def test_category_grouping_regroups_chart_and_timeline(page: Page, dev_server: Server) -> None:
    page.goto(dev_server.url + "/failures")
    page.wait_for_function(f"() => {TAX}?.data?.length === 2")
    page.get_by_text("By category").click()
    page.wait_for_function(f"() => {TAX}.data[0].y.length === 6")
    cats = page.evaluate(f"() => {TAX}.data[1].y")
    assert cats[:2] == ["GPU", "Dependency"]
    page.wait_for_function(
        "() => document.querySelector('#fail-timeline .js-plotly-plot').data"
        ".flatMap(t => t.y).includes('GPU')"
    )
