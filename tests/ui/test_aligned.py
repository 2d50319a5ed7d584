"""Charts stacked on a page over the same x axis line up in Chromium: one time (or step) falls
at the same place on each, so a dip in one can be read off against the chart below. Each
chart's own autorange and automargins had put them up to 135 px apart."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.conftest import Server, collect_errors
from tests.ui.test_readable import SETTLED

# the page, the time charts stacked on it (outer ids), the x axis asked for
STACKS = {
    "overview": ("/#run=dev-64-s1&range=all", ["ov-fleet", "ov-loss", "ov-power"]),
    "training by step": ("/training#run=dev-64-s1&range=all", ["tr-loss", "tr-throughput"]),
    "GPUs, judged on real utilization": (
        "/gpus#run=dev-64-s1&range=all",
        ["gpu-below", "gpu-classes"],
    ),
}

# each chart's plot area (left and right edge, px) and x axis range as drawn
AREAS = """ids => ids.map(id => {
  const gd = document.querySelector('#' + id + ' .js-plotly-plot');
  const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
  return {id, left: Math.round(box.left), right: Math.round(box.right),
          range: gd._fullLayout.xaxis.range.map(String)};
})"""


@pytest.mark.parametrize("name", list(STACKS))
def test_stacked_charts_share_plot_area_and_range(
    page: Page, dev_server: Server, name: str
) -> None:
    errors = collect_errors(page)
    path, ids = STACKS[name]
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(dev_server.url + path)
    page.wait_for_function(SETTLED, timeout=30000)
    areas = page.evaluate(AREAS, ids)
    first = areas[0]
    assert first["right"] - first["left"] > 400, areas  # drawn, not a placeholder
    for other in areas[1:]:
        assert (other["left"], other["right"]) == (first["left"], first["right"]), areas
        assert other["range"] == first["range"], areas
    assert errors == [], errors
