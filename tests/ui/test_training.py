"""The Training page in Chromium: axes, smoothing, events, spikes."""

from __future__ import annotations

import math
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import Server, collect_errors, drag_zoom

LOSS = "document.querySelector('#tr-loss .js-plotly-plot')"


def _traces(page: Page) -> list[dict]:
    return page.evaluate(
        f"() => ({LOSS}?._fullData || []).map(t => ({{name: t.name, n: (t.x || []).length,"
        " x0: (t.x || [])[0], y: Array.from(t.y || []).slice(0, 50)}))"
    )


def _drawn(*ys: float | None) -> bool:
    return all(y is not None and math.isfinite(y) for y in ys)


def test_loss_curve_with_events_and_spikes(page: Page, dev_server: Server, shots: Path) -> None:
    errors = collect_errors(page)
    page.goto(dev_server.url + "/training#run=dev-64-s1&range=all")
    page.wait_for_function(f"() => ({LOSS}?.data || []).length > 2")
    names = {t["name"] for t in _traces(page)}
    assert "dev-64 (seed 1)" in names
    assert {"GPU interruption", "Planned interruption", "PFS checkpoint"} <= names
    expect(page.locator("#tr-spike-table")).to_contain_text("2026-01-05", timeout=20000)
    page.screenshot(path=str(shots / "training.png"), full_page=True)
    assert errors == [], errors


def test_axis_and_smoothing_change_the_curve(page: Page, dev_server: Server) -> None:
    page.goto(dev_server.url + "/training#run=dev-64-s1&range=all")
    page.wait_for_function(f"() => ({LOSS}?.data || []).length > 2")

    def curve() -> dict:
        return next(t for t in _traces(page) if t["name"] == "dev-64 (seed 1)")

    by_step = curve()
    assert isinstance(by_step["x0"], int | float)
    page.get_by_label("Wall clock").check()
    page.wait_for_function(
        f"() => typeof ({LOSS}._fullData.find(t => t.name === 'dev-64 (seed 1)')?.x?.[0])"
        " === 'string'"
    )
    assert curve()["x0"].startswith("2026-01-05")
    smooth = curve()["y"]
    thumb = page.locator("#tr-smooth [role=slider]")
    thumb.focus()
    thumb.press("Home")  # the keyboard way to drag the smoothing slider to 0
    page.wait_for_function(
        f"() => {LOSS}.data.filter(t => (t.name || '').endsWith('(raw)')).length === 0"
    )
    raw = curve()["y"]

    # Unsmoothed points wander further from their neighbours than smoothed ones (pairs that
    # plotly joins: the line is broken at each restart).
    def roughness(ys: list[float | None]) -> float:
        joined = [(a, b) for a, b in zip(ys[10:], ys[11:], strict=False) if _drawn(a, b)]
        return sum(abs(a - b) for a, b in joined)

    assert roughness(raw) > 2 * roughness(smooth)


def test_clicking_a_spike_zooms_to_it(page: Page, dev_server: Server) -> None:
    page.goto(dev_server.url + "/training#run=dev-64-s1&range=all")
    cell = page.locator("#tr-spike-table .ag-cell[col-id=ts]").first
    expect(cell).to_contain_text("2026-01-05", timeout=20000)
    when = cell.inner_text()
    cell.click()
    expect(page.locator("#range-select")).to_contain_text("Zoomed window")
    assert "from=" in page.url and when[:10] in page.url


def test_a_drag_zoom_on_the_step_axis_stays_and_is_in_the_url(
    page: Page, dev_server: Server
) -> None:
    """A drag-zoom on the Step axis snapped back within seconds while Live was on, and a shared
    link lost it (#37): now the steps' time is the view's range, in the URL."""
    errors = collect_errors(page)
    page.goto(dev_server.url + "/training#run=dev-64-s1&range=all")
    page.wait_for_function(f"() => ({LOSS}?.data || []).length > 2")
    whole = page.evaluate(f"() => {LOSS}._fullLayout.xaxis.range.slice()")
    drag_zoom(page, "#tr-loss", 0.3, 0.6)
    expect(page.locator("#range-select")).to_contain_text("Zoomed window", timeout=15000)
    assert "from=" in page.url and "to=" in page.url
    page.wait_for_timeout(7000)  # Live ticks redraw the chart
    lo, hi = page.evaluate(f"() => {LOSS}._fullLayout.xaxis.range.slice()")
    span = whole[1] - whole[0]
    assert whole[0] + 0.2 * span < lo < hi < whole[0] + 0.7 * span, (whole, lo, hi)
    assert page.evaluate(f"() => typeof {LOSS}._fullData[0].x[0]") == "number"  # still steps
    assert errors == [], errors
