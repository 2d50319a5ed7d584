"""Every page fits 1366 x 768, 1440 x 900 and 1536 x 864 laptops (Bootstrap's widest layout
starts at 1,400 px) and a 1920 x 1080 screen: no table runs past its card
(nor scrolls sideways inside it), no cell is cut with an ellipsis, the page itself never
scrolls sideways, and no chart's legend covers an axis or chart title."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.conftest import Server, collect_errors
from tests.ui.test_readable import CLASHES, SETTLED

# Each page and the tables it shows on the dev-64 store (all of them must be there, so the
# check below cannot pass on a page whose tables never came).
PAGES = {
    "/": ["ov-hot-table"],
    "/training": ["tr-spike-table"],
    "/gpus": ["gpu-outlier-table"],
    "/failures": ["fail-int-table", "fail-tax-table", "fail-xid-table", "fail-lemon-table"],
    "/checkpoints": ["ck-tiers-table", "ck-restores-table"],
}

# What a person would see cut off: a table wider than its card (or the window), a table that
# scrolls sideways inside its card, a cell whose text ends in an ellipsis, a page that
# scrolls sideways.
OVERFLOWS = """() => {
  const out = [];
  const right = el => el.getBoundingClientRect().right;
  const tables = [...document.querySelectorAll('.dash-table-container, table.table')];
  for (const t of tables) {
    const name = t.id || t.closest('[id]')?.id || '?';
    const card = t.closest('.card-body') || document.documentElement;
    const inner = t.querySelector('table') || t;
    if (right(inner) > right(card) + 1) {
      out.push(`${name}: ${Math.round(right(inner) - right(card))} px past its card`);
    }
    const boxes = t.querySelectorAll('.dash-spreadsheet-container, .dash-spreadsheet-inner');
    for (const box of [t, ...boxes]) {
      if (box.scrollWidth > box.clientWidth + 1) {
        out.push(`${name}: scrolls sideways (${box.scrollWidth} > ${box.clientWidth} px)`);
        break;
      }
    }
    for (const cell of t.querySelectorAll('td, th')) {
      const s = getComputedStyle(cell);
      const inner = cell.querySelector('.dash-cell-value, div') || cell;
      const cut = [cell, inner].some(el => el.scrollWidth > el.clientWidth + 1
                  && getComputedStyle(el).textOverflow === 'ellipsis');
      if (cut && s.display !== 'none') {
        out.push(`${name}: "${cell.textContent.slice(0, 30)}" cut with an ellipsis`);
      }
    }
  }
  const page = document.scrollingElement;
  if (page.scrollWidth > window.innerWidth + 1) {
    out.push(`the page scrolls sideways (${page.scrollWidth} > ${window.innerWidth} px)`);
  }
  return out;
}"""


@pytest.mark.parametrize(
    "size",
    [(1366, 768), (1440, 900), (1536, 864), (1920, 1080)],
    ids=["1366", "1440", "1536", "1920"],
)
@pytest.mark.parametrize("path", list(PAGES))
def test_every_table_and_chart_fits(
    page: Page, dev_server: Server, path: str, size: tuple[int, int]
) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(dev_server.url + path + "#range=all")
    for table in PAGES[path]:
        page.wait_for_selector(f"#{table} td", timeout=30000)
    page.wait_for_function(SETTLED, timeout=30000)
    assert page.evaluate(OVERFLOWS) == []
    assert page.evaluate(CLASHES) == []
    assert errors == [], errors
