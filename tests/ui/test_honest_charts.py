"""Charts that do not lie (issue 19), as a person sees them in headless Chromium: a restart
splits the loss line, a run without tokens on the Tokens axis says so instead of drawing an
empty axis, the GPUs page opens on its worst node with the drill-down filled and each GPU's
line broken where it was silent, the distribution labels decades only, and axis titles stay
clear of ticks and legends."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.cluster_fixture import RUN as NIGHT_RUN
from tests.cluster_fixture import build
from tests.conftest import Server, cli, collect_errors, start_server

LOSS = "document.querySelector('#tr-loss .js-plotly-plot')"
DECADE = re.compile(r"^(0\.0*1|10*|1k|10k|100k)$")

# JS: the points of a named trace, null where plotly breaks the line (null or NaN y)
POINTS = """([sel, name]) => {
  const t = document.querySelector(sel + ' .js-plotly-plot')._fullData.find(d => d.name === name);
  const ys = Array.from(t.y);
  return Array.from(t.x).map((x, i) =>
    ys[i] === null || Number.isNaN(ys[i]) ? null : [x, ys[i]]);
}"""


def _boxes(page: Page, *selectors: str) -> list[dict[str, float]]:
    """The boxes of ``selectors`` read in one go, once all are drawn (the live refresh redraws
    a chart every 10 s; boxes read one by one could straddle a redraw)."""
    handle = page.wait_for_function(
        """(sels) => {
          const boxes = sels.map(s => document.querySelector(s)?.getBoundingClientRect());
          return boxes.every(b => b && b.height > 0)
            ? boxes.map(b => ({x: b.x, y: b.y, width: b.width, height: b.height})) : null;
        }""",
        arg=list(selectors),
        timeout=30000,
    )
    return handle.json_value()


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


@pytest.fixture(scope="module")
def night_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A Megatron job's bad night imported from its files (steps only, two restarts, no world
    size: the GPU-hours it cost are unknown)."""
    tmp = tmp_path_factory.mktemp("night-ui")
    store = tmp / "night.duckdb"
    r = cli(*build(tmp / "files", world=False).import_args(store))  # its GPUs unknown
    assert r.returncode == 0, r.stderr
    server = start_server(["serve", "--store", str(store)], tmp / "serve.log")
    yield server
    server.stop()


def test_a_restart_splits_the_line_and_no_tokens_is_said(
    page: Page, night_server: Server, shots: Path
) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(night_server.url + f"/training#run={NIGHT_RUN}&range=all")
    page.wait_for_function(f"() => ({LOSS}?._fullData || []).length > 2", timeout=30000)
    solid = page.evaluate(POINTS, ["#tr-loss", NIGHT_RUN])
    joined = [(a, b) for a, b in zip(solid, solid[1:], strict=False) if a and b]
    assert joined and all(b[0] > a[0] for a, b in joined)  # never back from 3400 to 3010
    dotted = [p for p in page.evaluate(POINTS, ["#tr-loss", f"{NIGHT_RUN}: rolled back"]) if p]
    assert {3400, 5200} <= {x for x, _ in dotted}  # the work lost at each failure, dotted
    expect(page.locator("#tr-loss .legend")).to_contain_text("rolled back")

    page.get_by_label("Tokens").check()
    loss = page.locator("#tr-loss")
    expect(loss).to_contain_text(f"{NIGHT_RUN} has no tokens metric: shown by step")
    expect(loss.locator(".g-xtitle")).to_have_text("Step")
    assert len([p for p in page.evaluate(POINTS, ["#tr-loss", NIGHT_RUN]) if p]) > 500
    thr = page.locator("#tr-throughput")
    expect(thr).to_contain_text("Step time (the run logs no tokens/s)")  # instead, from zero
    expect(thr.locator(".g-ytitle")).to_have_text("Step time (s)")
    expect(thr.locator(".ytick").first).to_have_text("0")
    page.screenshot(path=str(shots / "training-no-tokens.png"), full_page=True)
    assert errors == [], errors


def test_the_gpus_page_opens_on_the_worst_node_with_its_gaps(
    page: Page, dev_server: Server, shots: Path
) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(dev_server.url + "/gpus#range=all")  # no node chosen
    expect(page.locator("#gpu-node-host")).to_have_text("h100-0007", timeout=30000)
    expect(page.locator("#gpu-node-info")).to_contain_text(
        "the worst node by the outlier ranking (hot on GPU 5)"
    )
    util = "document.querySelector('#gpu-node-util .js-plotly-plot')"
    page.wait_for_function(f"() => {util}?._fullData?.length === 8")
    for gpu in range(8):
        points = page.evaluate(POINTS, ["#gpu-node-util", f"GPU {gpu}"])
        # a day in 10-min buckets; drained 12:30 -> 13:30: one break, not a ramp across it
        assert len(points) > 120 and points.count(None) == 1, gpu
    dist = page.locator("#gpu-dist .ytick text")
    expect(dist.first).to_be_visible()
    labels = dist.evaluate_all("els => els.map(e => e.textContent)")
    assert len(labels) >= 3 and all(DECADE.match(t) for t in labels), labels
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(shots / "gpus-worst-node.png"), full_page=True)
    assert errors == [], errors


@pytest.mark.parametrize("width", [1366, 1920])
def test_axis_titles_stay_with_their_charts(page: Page, dev_server: Server, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(dev_server.url + "/failures#range=all")
    timeline = "#fail-timeline .js-plotly-plot"
    expect(page.locator(f"{timeline} .g-xtitle")).to_have_text("Time (UTC)", timeout=30000)
    fig, title, ticks = _boxes(
        page, f"{timeline} .main-svg", f"{timeline} .g-xtitle", f"{timeline} .xaxislayer-above"
    )
    # under its ticks, close to them, and inside the figure (not floating over the next card)
    assert ticks["y"] + ticks["height"] <= title["y"] <= ticks["y"] + ticks["height"] + 16
    assert title["y"] + title["height"] <= fig["y"] + fig["height"]

    page.goto(dev_server.url + "/checkpoints#range=all")
    curve = "#ck-ettr-curve .js-plotly-plot"
    expect(page.locator("#ck-whatif-interval")).to_have_value("5", timeout=30000)
    page.locator("#ck-whatif-interval").fill("12")
    page.locator("#ck-whatif-write").fill("30")  # a what-if curve and marks: more legend
    page.wait_for_function(
        f"() => document.querySelector('{curve}')?.data?.some(t => t.name === 'What-if')"
    )
    page.wait_for_load_state("networkidle")
    legend, title = _boxes(page, f"{curve} .legend", f"{curve} .g-xtitle")
    assert not _overlap(legend, title), (legend, title)
    assert title["y"] + title["height"] <= legend["y"]


def _card(page: Page, id_: str) -> Locator:
    """The whole card (title, value, note) whose value has the id ``id_``."""
    return page.locator(".card", has=page.locator(f"#{id_}"))


def test_unknowns_read_as_a_dash_not_zero(page: Page, night_server: Server) -> None:
    """The imported run logs no tokens and its GPU count is unknown: its cards say "–"."""
    errors = collect_errors(page)
    page.goto(night_server.url + f"/#run={NIGHT_RUN}&range=all")
    step = _card(page, "ov-step")
    expect(step).to_contain_text("tokens –", timeout=30000)
    expect(step).not_to_contain_text("0.0 B tokens")
    expect(_card(page, "ov-ettr")).to_contain_text("81.2 %")  # from the step times
    expect(_card(page, "ov-ints")).to_contain_text("MTBF 2.0 h")
    page.goto(night_server.url + f"/failures#run={NIGHT_RUN}&range=all")
    expect(page.locator("#fail-lostgh")).to_have_text("–", timeout=30000)
    lemons = page.locator("#fail-lemon-table")
    expect(lemons.locator(".ag-row", has_text="node-7")).to_contain_text("–")
    page.goto(night_server.url + f"/gpus#run={NIGHT_RUN}&range=all")
    xid = page.locator("#gpu-outlier-table .ag-row", has_text="node-7")  # an XID naming no GPU
    expect(xid).to_contain_text("XID", timeout=30000)
    # leaving a page aborts its live-refresh callbacks in flight: collect_errors skips those
    assert errors == [], errors
