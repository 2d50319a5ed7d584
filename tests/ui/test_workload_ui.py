"""In headless Chromium over the dev-64 replay: the GPUs page says what the GPUs were doing
(workload classes over time) and measures utilization by SM activity, saying so."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.conftest import Server, collect_errors

HEATMAP = "document.querySelector('#gpu-heatmap .js-plotly-plot')"
CLASSES = "document.querySelector('#gpu-classes .js-plotly-plot')"


def test_the_gpus_page_shows_workload_classes_and_real_utilization(
    page: Page, dev_server: Server
) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1366, "height": 1400})
    page.goto(dev_server.url + "/gpus")
    classes = page.locator("#gpu-classes")
    expect(classes).to_contain_text("Workload classes", timeout=30_000)
    expect(classes).to_contain_text("basis real utilization: SM activity × occupancy")
    page.wait_for_function(f"() => {CLASSES}?._fullData?.length >= 2")
    names = page.evaluate(f"() => {CLASSES}._fullData.map(t => t.name)")
    assert {"tensor-bound", "unallocated"} <= set(names), names
    # most of the 80 GPUs train (tensor-bound) most of the day; the 16 spares are unallocated
    tensor = page.evaluate(
        f"() => Array.from({CLASSES}._fullData.find(t => t.name === 'tensor-bound').y)"
    )
    assert 50 < sorted(tensor)[len(tensor) // 2] <= 64
    expect(page.locator("#gpu-below")).to_contain_text("GPUs under 80 % real utilization")
    page.wait_for_function(f"() => {HEATMAP}?._fullData?.[0]?.z?.length > 0")
    box = page.locator("#gpu-metric")
    box.click()
    page.get_by_role("option", name="Real utilization, SM activity (%)").click()
    heat = page.locator("#gpu-heatmap")
    expect(heat).to_contain_text("Real utilization per node", timeout=30_000)
    expect(heat).to_contain_text("basis real utilization")
    z = page.evaluate(
        f"() => {HEATMAP}._fullData[0].z.flatMap(r => Array.from(r)).filter(v => !isNaN(v))"
    )
    assert len(z) > 2000 and min(z) >= 0 and 85 < max(z) <= 100
    assert errors == [], errors
