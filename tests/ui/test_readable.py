"""Every chart on every page is readable on a laptop screen: legends do not cover titles or
axis titles, and notes are not cut off at the chart's edge."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, collect_errors

# Every chart drawn (data or a message), and no callback still loading, for half a second.
SETTLED = """() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')]  // parts not yet scrolled
    .filter(p => !p.closest('.ff-lazy:not([data-ff-seen])'));      // near are not drawn
  const loading = document.querySelectorAll('[data-dash-is-loading="true"]').length;
  const drawn = p => p._fullLayout && ((p.data || []).length > 0
                     || (p.layout?.annotations || []).length > 0);
  if (!(plots.length > 0 && loading === 0 && plots.every(drawn))) {
    window.__settled = 0;
    return false;
  }
  window.__settled = window.__settled || performance.now();
  return performance.now() - window.__settled > 500;
}"""


def scroll_through(page: Page) -> None:
    """Scroll to each part of the page drawn when scrolled near (``app.ui.lazy``), as a
    reader moving down, and wait until every one has been seen (``scroll_near``): a check of
    every chart or table of a page then covers them too. The page must be drawn already (its
    parts exist)."""
    for name in page.eval_on_selector_all(".ff-lazy", "ps => ps.map(p => p.dataset.seen)"):
        scroll_near(page, f'.ff-lazy[data-seen="{name}"]')


def scroll_near(page: Page, selector: str, timeout: float = 20_000) -> None:
    """Scroll to the element ``selector`` as a reader would, until the part drawn when
    scrolled near that holds it has been seen. One scroll right after ``goto`` is not enough:
    Dash may not have drawn the page yet, or the page is still short (no scroll happens) and
    the charts drawn above then push the part two screens down, where it is rightly not
    drawn."""
    page.wait_for_function(
        """sel => {
          const el = document.querySelector(sel);
          if (!el) return false;
          const part = el.closest('.ff-lazy');
          if (part && part.dataset.ffSeen) return true;
          el.scrollIntoView({block: 'center'});
          return !part;
        }""",
        arg=selector,
        polling=100,
        timeout=timeout,
    )


def settle_all(page: Page, timeout: float = 30000) -> None:
    """The first screen settled, then the parts below it scrolled to and settled as well; the
    page is left scrolled to its top."""
    page.wait_for_function(SETTLED, timeout=timeout)
    scroll_through(page)
    page.evaluate("() => { window.__settled = 0; }")
    page.wait_for_function(SETTLED, timeout=timeout)
    page.evaluate("() => window.scrollTo(0, 0)")


# Per chart: the legend overlapping a title, and any text sticking out of the chart.
CLASHES = """() => {
  const out = [];
  const box = el => el.getBoundingClientRect();
  const meets = (a, b) => a.left < b.right - 1 && b.left < a.right - 1
                       && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const name = plot.closest('[id]:not(.js-plotly-plot)')?.id || '?';
    const svg = box(plot.querySelector('.main-svg'));
    const legend = plot.querySelector('.legend .bg');
    const titles = [...plot.querySelectorAll(
      '.g-gtitle text, .g-xtitle text, .g-ytitle text, .g-y2title text')]
      .filter(t => t.textContent.trim());
    if (legend) {
      for (const t of titles) {
        if (meets(box(legend), box(t))) out.push(`${name}: legend covers "${t.textContent}"`);
      }
    }
    // tick labels of the x axis against those of the y axes ("0" on "18:00" at the corner)
    const xt = [...plot.querySelectorAll('.xtick text')].filter(t => t.textContent.trim());
    const yt = [...plot.querySelectorAll('.ytick text, .y2tick text')]
      .filter(t => t.textContent.trim());
    for (const x of xt) {
      for (const y of yt) {
        if (meets(box(x), box(y))) {
          out.push(`${name}: tick "${y.textContent}" meets tick "${x.textContent}"`);
        }
      }
    }
    for (const a of plot.querySelectorAll('.annotation-text, .g-gtitle text')) {
      const r = box(a);
      if (r.width && (r.right > svg.right + 1 || r.left < svg.left - 1)) {
        out.push(`${name}: "${a.textContent.slice(0, 40)}" cut off at the chart's edge`);
      }
    }
  }
  return out;
}"""


@pytest.mark.parametrize("span", ["all", "6h"])  # a short range: hours on the x axis
@pytest.mark.parametrize("path", ["/", "/training", "/gpus", "/failures", "/checkpoints"])
def test_charts_are_readable_at_1366_px(
    page: Page, dev_server: Server, path: str, span: str
) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto(dev_server.url + path + f"#range={span}")
    settle_all(page)
    assert page.evaluate(CLASHES) == []
    assert errors == [], errors
    # every figure passed plotly.py's validators on the way out (the suite's servers check
    # them, tests/conftest.py): a failed one is drawn as this error instead
    expect(page.get_by_text("Could not load this view")).to_have_count(0)


def test_fleet_utilization_now_is_read_with_its_reason_and_the_range(
    page: Page, dev_server: Server
) -> None:
    """The dev-64 store ends four minutes into a restart after a node was lost: every GPU
    still reporting idles, so the fleet's utilization now is a true 0.0 %. The card says so,
    and gives the range's mean beside it, instead of a bare "0.0 %" (the README's headline
    screenshot)."""
    page.goto(dev_server.url + "/#run=dev-64-s1&range=all")
    util = page.locator("#ov-util")
    expect(util).to_have_text("0.0 %", timeout=30000)
    sub = page.locator("#ov-util + div")
    expect(sub).to_contain_text("all 72 reporting GPUs idle now")
    mean = float(sub.inner_text().split("·")[1].split("%")[0])
    assert 60 < mean < 90, sub.inner_text()
    page.goto(dev_server.url + "/#run=dev-64-s1&from=2026-01-05T10:00:00&to=2026-01-05T11:00:00")
    expect(sub).to_contain_text("% over the zoomed window")  # says it is the window's (#37)
    expect(sub).not_to_contain_text(f"{mean:.1f} %")  # the mean follows the range
