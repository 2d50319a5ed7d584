"""The browser gets plotly's cartesian bundle: the same plotly.js version plotly.py validates
figures against, unmodified, at the address Dash's renderer asks for; a trace type the bundle
lacks fails the figure check instead of drawing nothing."""

from __future__ import annotations

import hashlib
import re
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import Page
from plotly.offline import get_plotlyjs_version

from app import plotlyjs
from app.figures import plot
from tests.conftest import Server


def test_the_bundle_is_plotlys_own_at_plotly_pys_version() -> None:
    text = plotlyjs.BUNDLE.read_bytes()
    assert hashlib.sha256(text).hexdigest() == plotlyjs.SHA256  # unmodified, as published
    header = re.search(rb"plotly\.js \(cartesian - minified\) v([0-9.]+)", text[:200])
    assert header and header.group(1).decode() == plotlyjs.VERSION
    # A plotly upgrade moves plotly.py's validators to another plotly.js: replace the bundle.
    assert get_plotlyjs_version() == plotlyjs.VERSION
    assert (plotlyjs.BUNDLE.parent / "plotly-LICENSE").read_text().startswith("MIT License")


def test_a_trace_type_outside_the_bundle_fails_the_figure_check() -> None:
    fig = plot.Figure()
    fig.add_trace(plot.trace("scatter3d", x=[1], y=[1], z=[1]))
    with pytest.raises(ValueError, match="scatter3d is not in plotly.js's cartesian bundle"):
        plot.check(fig)
    fig = plot.Figure()
    fig.add_trace(plot.Heatmap(z=[[1, 2]]))
    fig.add_trace(plot.Bar(x=[1], y=[2]))
    plot.check(fig)  # the types the dashboard draws pass


def test_the_server_sends_the_bundle_where_the_renderer_asks(dev_server: Server) -> None:
    url = f"{dev_server.url}/{plotlyjs.URL}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = resp.read()
        etag = resp.headers["ETag"]
        assert resp.headers["Content-Type"].startswith("application/javascript")
    assert body == plotlyjs.BUNDLE.read_bytes()
    again = urllib.request.Request(url, headers={"If-None-Match": etag})
    with pytest.raises(urllib.error.HTTPError) as err:  # unchanged: not sent again
        urllib.request.urlopen(again, timeout=10)
    assert err.value.code == 304


def test_charts_draw_with_the_bundle(dev_server: Server, page: Page) -> None:
    scripts: list[str] = []
    page.on("response", lambda r: scripts.append(r.url) if "plotly" in r.url else None)
    page.goto(dev_server.url + "/gpus#range=all")
    page.wait_for_function(
        "() => { const p = [...document.querySelectorAll('.js-plotly-plot')];"
        " return p.every(g => g._fullLayout)"  # every chart drawn: an empty state has no data
        " && p.filter(g => (g.data || []).length).length >= 4; }",
        timeout=30000,
    )
    assert page.evaluate("() => Plotly.version") == plotlyjs.VERSION
    # the cartesian bundle (the full one has the same version and 40-odd trace types more)
    kinds = page.evaluate("() => Object.keys(Plotly.PlotSchema.get().traces)")
    assert set(kinds) == plotlyjs.TRACES
    # the heatmap, bars and lines on the GPUs page are drawn as SVG shapes by the bundle
    assert page.locator(".js-plotly-plot .heatmaplayer image, .js-plotly-plot .hm image").count()
    assert page.locator(".js-plotly-plot .barlayer path").count()
    assert page.locator(".js-plotly-plot .scatterlayer path.js-line").count()
    assert [u for u in scripts if u.endswith("plotly.min.js")], scripts


def test_the_bundle_ships_with_the_package() -> None:
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '"static/*"' in pyproject


def test_the_browsers_own_trim_and_parsing_are_put_back(dev_server: Server, page: Page) -> None:
    # Dash's polyfill (core-js 2) swaps them for JavaScript versions, which plotly.js calls
    # for every marker's colour; assets/05-natives.js restores the ones taken before it ran.
    page.goto(dev_server.url + "/checkpoints#range=all")
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length > 0")
    swapped = page.evaluate(
        "() => window.ffNatives.filter(([obj, name, fn]) => obj[name] !== fn)"
        ".map(([obj, name]) => name)"
    )
    assert swapped == []
    assert page.evaluate("() => window.ffNatives.length") == 9
    # the native trim keeps U+180E (not white space since Unicode 6.3); core-js's strips it
    assert page.evaluate("() => '\\u180e x'.trim().length") == 3
    assert page.evaluate("() => parseInt(' 42px') + parseFloat('2.5e1 ')") == 67
