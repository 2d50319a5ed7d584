"""Every page fits 1366 x 768, 1440 x 900 and 1536 x 864 laptops (Bootstrap's widest layout
starts at 1,400 px) and a 1920 x 1080 screen: no table runs past its card
(nor scrolls sideways inside it), no cell is cut with an ellipsis nor has a word broken over
two lines, the page itself never scrolls sideways, and no chart's legend covers an axis or
chart title."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.conftest import Server, collect_errors
from tests.ui.test_readable import CLASHES, settle_all

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
  const tables = [...document.querySelectorAll('.ff-table, table.table')];
  for (const t of tables) {
    const name = t.dataset.grid || t.id || t.closest('[id]')?.id || '?';
    const card = t.closest('.card-body') || document.documentElement;
    const inner = t.querySelector('.ag-root-wrapper, table') || t;
    if (right(inner) > right(card) + 1) {
      out.push(`${name}: ${Math.round(right(inner) - right(card))} px past its card`);
    }
    const boxes = t.querySelectorAll('.ag-center-cols-viewport, .ag-header-viewport');
    for (const box of [t, ...boxes]) {
      if (box.scrollWidth > box.clientWidth + 1) {
        out.push(`${name}: scrolls sideways (${box.scrollWidth} > ${box.clientWidth} px)`);
        break;
      }
    }
    const cells = t.querySelectorAll('.ag-cell, .ag-header-cell-text, td, th');
    for (const cell of cells) {
      const s = getComputedStyle(cell);
      const inner = cell.querySelector('.ag-cell-value, div') || cell;
      const cut = [cell, inner].some(el => el.scrollWidth > el.clientWidth + 1
                  && getComputedStyle(el).textOverflow === 'ellipsis');
      if (cut && s.display !== 'none') {
        out.push(`${name}: "${cell.textContent.slice(0, 30)}" cut with an ellipsis`);
      }
    }
    out.push(...broken(t).map(w => `${name}: "${w}" broken over two lines`));
  }
  const page = document.scrollingElement;
  if (page.scrollWidth > window.innerWidth + 1) {
    out.push(`the page scrolls sideways (${page.scrollWidth} > ${window.innerWidth} px)`);
  }
  return out;

  // Words of a cell or header drawn on two lines ("Categ" / "ory"): a column too narrow for
  // them. A break after a hyphen is the browser's own (as "Lost (GPU-" / "h)"), and a word
  // longer than 32 characters (a path) may break.
  function broken(t) {
    const words = [];
    for (const el of t.querySelectorAll('.ag-cell-value, .ag-header-cell-text')) {
      const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        for (const m of n.data.matchAll(/[^\\s-]+-?/g)) {
          if (m[0].length > 32) continue;
          const r = document.createRange();
          r.setStart(n, m.index);
          r.setEnd(n, m.index + m[0].length);
          const tops = [...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top));
          if (new Set(tops).size > 1) words.push(m[0]);
        }
      }
    }
    return words;
  }
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
        page.wait_for_selector(f"#{table} .ag-row", timeout=30000)
    settle_all(page)
    assert page.evaluate(OVERFLOWS) == []
    assert page.evaluate(CLASHES) == []
    assert errors == [], errors
