"""The demo's defects of issue 57 in headless Chromium, over 20 h of dev-64 seed 0 (the demo's
run: a node lost at 16.6 h, a hot spare swapped in, another spare idle throughout): the
Overview's utilization is the job's GPUs', the heatmap's idle spares are grey and last, an
XID's mnemonic stays whole, the light theme's staleness note is readable, Throughput and MFU
says it is one line, and Slow ranks says why the GPUs page's straggler is not among them."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, build_store, collect_errors, start_server
from tests.ui.test_gpus import HEATMAP, HEATMAP_READY


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("demo-spares")
    store = build_store(tmp / "s.duckdb", seed=0, days=20 / 24, interval_s=60.0)
    server = start_server(["serve", "--store", str(store)], tmp / "serve.log")
    yield server
    server.stop()


def test_overview_utilization_is_the_jobs_gpus(page: Page, demo: Server) -> None:
    """"Fleet utilization 78.7 %" counted 16 idle GPUs beside the job's 64 at ~98 %."""
    errors = collect_errors(page)
    page.goto(demo.url + "/#range=all")
    util = page.locator("#ov-util")
    expect(util).to_have_text(re.compile(r"^9\d\.\d %$"), timeout=30000)
    card = page.locator(".card-body", has=util)
    expect(card).to_contain_text("Job GPU utilization")
    expect(card).to_contain_text("64 job GPUs; all 80 now 7")  # the fleet's mean, said beside
    expect(card).to_contain_text("8 spare")
    assert errors == [], errors


def test_heatmap_puts_the_idle_spare_last_in_greys(page: Page, demo: Server) -> None:
    page.goto(demo.url + "/gpus#range=all")
    page.wait_for_function(HEATMAP_READY, timeout=30000)
    got = page.evaluate(
        f"""() => {{
          const d = {HEATMAP}._fullData, rows = d[0].y, last = rows.length - 1;
          const grey = d.find(t => t.colorscale?.[0]?.[1] === '#5f6368');
          const cells = grey ? Array.from(grey.z[last]).filter(v => !Number.isNaN(v)) : [];
          const top = grey ? Array.from(grey.z[0]).filter(v => !Number.isNaN(v)) : [];
          return {{last: rows[last], greyCells: cells.length, all: d[0].z[last].length,
                   topGrey: top.length, topCells: d[0].z[0].length}};
        }}"""
    )
    assert got["last"] == "h100-0009"  # the spare that never ran the job: last, not on top
    assert got["greyCells"] > 0.9 * got["all"]  # drawn in greys, not the scale's alarm red
    # h100-0008, the spare swapped in at 16.6 h: grey before, the job's colours after
    assert got["topGrey"] < got["topCells"]


def test_an_xid_mnemonic_stays_on_one_line(page: Page, demo: Server) -> None:
    """XID 79's ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS broke after its 24th character."""
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(demo.url + "/failures#range=all")
    name = "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    cell = page.locator("#fail-xid-table .ag-cell-value", has_text=name)
    expect(cell).to_have_count(1, timeout=30000)
    page.wait_for_timeout(1500)  # the grid's columns settle after the first draw
    lines = cell.evaluate(
        """el => {
          const r = document.createRange();
          r.selectNodeContents(el);
          return new Set([...r.getClientRects()].filter(x => x.width > 0)
                          .map(x => Math.round(x.top))).size;
        }"""
    )
    assert lines == 1


_CONTRAST = """el => {
  const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = c => {
    const [r, g, b] = c.map(v => { v /= 255; return v <= 0.03928 ? v / 12.92
                                   : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const fg = lum(rgb(getComputedStyle(el).color));
  const bg = lum(rgb(getComputedStyle(document.body).backgroundColor));
  return (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
}"""


def test_the_staleness_note_is_readable_in_the_light_theme(page: Page, demo: Server) -> None:
    """Orange on white (text-warning: 1.6:1) was the light theme's staleness note."""
    page.goto(demo.url + "/#range=all")
    note = page.locator("#data-age")
    expect(note).to_contain_text("nothing new has arrived", timeout=30000)
    page.get_by_text("Light", exact=True).click()
    expect(page.locator("html")).to_have_attribute("data-bs-theme", "light")
    assert note.evaluate(_CONTRAST) >= 4.5  # WCAG AA for body text
    page.get_by_text("Light", exact=True).click()  # and on the dark theme too
    expect(page.locator("html")).to_have_attribute("data-bs-theme", "dark")
    assert note.evaluate(_CONTRAST) >= 4.5


def test_throughput_and_mfu_say_they_are_one_line(page: Page, demo: Server) -> None:
    page.goto(demo.url + "/training#range=all")
    chart = page.locator("[id*='tr-throughput'] .js-plotly-plot")
    expect(chart).to_have_count(1, timeout=30000)
    page.wait_for_function(
        "() => document.querySelector(\"[id*='tr-throughput'] .js-plotly-plot\")"
        "?._fullLayout?.title?.subtitle?.text?.length > 0",
        timeout=30000,
    )
    text = chart.evaluate("g => g._fullLayout.title.subtitle.text")
    assert "one line" in text and "MFU on the right" in text


def test_slow_ranks_say_why_the_straggler_is_not_among_them(page: Page, demo: Server) -> None:
    """The banner and the GPUs page name a straggler; Slow ranks listed none and said nothing."""
    page.goto(demo.url + "/gpus#range=all")
    straggler = page.locator("#gpu-outlier-table .ag-row", has_text="straggler").first
    expect(straggler).to_be_visible(timeout=30000)
    host = straggler.locator("[col-id='host']").inner_text().strip()
    gpu = straggler.locator("[col-id='gpu']").inner_text().strip()
    page.goto(demo.url + "/checkpoints#range=all")
    note = page.locator("#ck-slow-ranks")
    expect(note).to_contain_text(f"straggler ({host} GPU {gpu}", timeout=30000)
    expect(note).to_contain_text("from GPU telemetry, not the job's timings")
